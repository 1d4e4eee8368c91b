"""The engines a job holds for its models, built once: one per model, or one per base model for the
models a training run's adapters make (`adapter: true`), and each on its GPUs when there are several.

`open_backends({model: (backend kind, options, what to load)})` returns a backend per model and the
engines to close. "What to load" is a model folder, or `{"base": folder, "adapter": folder}` for an
adapter-served model: the adapters of one base then share one vLLM engine with LoRA enabled
(`max_loras` = their number), each model a view of it under its own adapter, with a cache key of the
base engine and the adapter folder's fingerprint. With several engines on GPUs, each gets its slice
of the job's GPUs (`gpu_plan.engine_slices`), a vLLM one as its own `vllm serve` process.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from .base import Backend, model_fingerprint, stable_hash

log = logging.getLogger(__name__)


def adapter_rank(adapter_dir: str | Path) -> int:
    return int(json.loads((Path(adapter_dir) / "adapter_config.json").read_text())["r"])


def adapter_name(model: str, adapter_dir: str | Path) -> str:
    """The adapter's name on its engine: the model and its weights' fingerprint (a retrained adapter is another)."""
    return f"{model}-{stable_hash(model_fingerprint(adapter_dir))[:10]}"


def open_backends(models: dict[str, tuple[str, dict, str | dict]]) -> tuple[dict[str, Backend], list[Backend]]:
    from ..gpu_plan import engine_slices
    from . import make_backend
    from .vllm_backend import vllm_lora_rank

    engines: dict[str, tuple[str, dict, str]] = {}  # engine key -> (folder, options, backend kind)
    adapters: dict[str, list[tuple[str, str]]] = {}  # engine key -> [(model, adapter folder)]
    engine_of: dict[str, str] = {}
    for model, (kind, options, load) in models.items():
        if isinstance(load, dict):
            if kind != "vllm":
                raise ValueError(f"model {model}: an adapter-served model needs the vllm backend, not {kind}")
            key = f"{load['base']}+adapters"
            engines.setdefault(key, (load["base"], dict(options), kind))
            adapters.setdefault(key, []).append((model, load["adapter"]))
        else:
            key = model
            engines[key] = (load, dict(options), kind)
        engine_of[model] = key
    slices = engine_slices(engines)
    built: dict[str, Backend] = {}
    try:
        for key, (folder, options, kind) in engines.items():
            extra = dict(slices.get(key, {}))
            if key in adapters:
                served = adapters[key]
                extra.update(
                    enable_lora=True,
                    max_loras=len(served),
                    max_lora_rank=vllm_lora_rank(max(adapter_rank(a) for _, a in served)),
                )
                if extra.get("devices") or options.get("serve"):  # a `vllm serve` process: its adapters by name
                    extra["lora_modules"] = {adapter_name(m, a): str(a) for m, a in served}
            if "devices" in extra:
                log.info(
                    "%s on GPU(s) %s%s",
                    key,
                    ",".join(extra["devices"]),
                    f", gpu_memory_utilization {extra['gpu_memory_utilization']:.3f}"
                    if "gpu_memory_utilization" in extra
                    else "",
                )
            built[key] = make_backend(kind, folder, **{**options, **extra})
    except BaseException:
        for engine in built.values():
            engine.close()
        raise
    backends = {}
    for model, key in engine_of.items():
        if key not in adapters:
            backends[model] = built[key]
            continue
        adapter = dict(adapters[key])[model]
        engine = built[key]
        backends[model] = engine.with_adapter(
            adapter, adapter_name(model, adapter), 1 + [m for m, _ in adapters[key]].index(model)
        )
    return backends, list(built.values())
