"""Inference backends behind one interface, plus the generation cache in front of them."""

from __future__ import annotations

from collections.abc import Callable

from .base import Backend, Generation, GenerationRequest, SamplingParams, ScoredText
from .cache import GenerationCache, generate_cached, score_cached


def _transformers(model_path: str, **options) -> Backend:
    from .transformers_backend import TransformersBackend

    return TransformersBackend(model_path, **options)


def _vllm(model_path: str, **options) -> Backend:
    options = dict(options)
    if options.pop("serve", False) or options.get("devices"):
        # its own `vllm serve` process (several models in one job: each on its GPUs)
        from .vllm_server import VLLMServerBackend

        return VLLMServerBackend(model_path, **options)
    from .vllm_backend import VLLMBackend

    return VLLMBackend(model_path, **options)


def _openai(model_path: str, **options) -> Backend:
    from .openai_backend import OpenAIBackend

    options = dict(options)
    return OpenAIBackend(options.pop("base_url"), options.pop("served_model_name", None) or model_path, **options)


#: The inference backends an agent's `backend` names, each a factory (model path, options) -> Backend
#: that imports its engine only when called. The schema's backend enums list the same names
#: (tests/test_registries.py).
BACKENDS: dict[str, Callable[..., Backend]] = {"transformers": _transformers, "vllm": _vllm, "openai": _openai}


def make_backend(kind: str, model_path: str, **options) -> Backend:
    """Build a backend by name (`BACKENDS`)."""
    try:
        factory = BACKENDS[kind]
    except KeyError:
        raise ValueError(f"unknown backend {kind!r}; expected one of {list(BACKENDS)}") from None
    return factory(model_path, **options)


__all__ = [
    "Backend",
    "Generation",
    "GenerationRequest",
    "SamplingParams",
    "ScoredText",
    "GenerationCache",
    "generate_cached",
    "score_cached",
    "make_backend",
    "BACKENDS",
]
