"""Inference backends behind one interface, plus the generation cache in front of them."""

from __future__ import annotations

from .base import Backend, Generation, GenerationRequest, SamplingParams, ScoredText
from .cache import GenerationCache, generate_cached, score_cached

BACKENDS = ("transformers", "vllm", "openai")


def make_backend(kind: str, model_path: str, **options) -> Backend:
    """Build a backend by name; heavy imports happen only for the one asked for."""
    if kind == "transformers":
        from .transformers_backend import TransformersBackend

        return TransformersBackend(model_path, **options)
    if kind == "vllm":
        options = dict(options)
        if options.pop("serve", False) or options.get("devices"):
            # its own `vllm serve` process (several models in one job: each on its GPUs)
            from .vllm_server import VLLMServerBackend

            return VLLMServerBackend(model_path, **options)
        from .vllm_backend import VLLMBackend

        return VLLMBackend(model_path, **options)
    if kind == "openai":
        from .openai_backend import OpenAIBackend

        options = dict(options)
        return OpenAIBackend(options.pop("base_url"), options.pop("served_model_name", None) or model_path, **options)
    raise ValueError(f"unknown backend {kind!r}; expected one of {BACKENDS}")


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
