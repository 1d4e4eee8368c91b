"""GPU plans: how many GPUs each job needs, computed from the config before anything runs.

A job's plan lists the models that must be resident together (a debate loads every model of its
protocol; a training job every base model of its run), what each needs in memory, and so how many
GPUs of the job's GPU type it takes:

- **Weights**: parameters × dtype bytes. The size comes from the model's prepared folder
  (`config.json` and its weight files) when it is there, else from `KNOWN_MODELS` (each Hub model
  a shipped config names: its safetensors parameter count and its `config.json` attention shape),
  else from the Hub (`config.json` and the safetensors metadata, online).
- **KV cache**: what the backend settings ask for: one sequence of `max_model_len` tokens (the
  least vLLM starts with), 2 × layers × KV heads × head dim × dtype bytes per token; no
  `max_model_len`: the model's own context length.
- **Overhead**: `OVERHEAD_BYTES` per GPU slice (CUDA context, activations, CUDA graphs).

A vLLM engine runs on exactly `tensor_parallel_size` GPUs: a model whose share per GPU does not fit
is an error naming the size that would. Models that fit one GPU share GPUs (first fit, largest
first), each engine then gets its part of the GPU's `gpu_memory_utilization` (`JobPlan.shares`).
A plan with more GPUs than a node of its type has is an error before submission
(`GpuPlanError`). Training jobs place their base models with the same packing (`pack`), with the
weights allowed `WEIGHTS_SHARE` of a GPU (the rest: optimizer states, activations, rollouts).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

GIB = 2**30
OVERHEAD_BYTES = 2 * GIB
#: Training with model parallelism: the share of a GPU a base model's weights may take; the rest holds
#: the adapters' optimizer states, the activations of the update and the rollouts' KV cache.
WEIGHTS_SHARE = 0.7
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

#: Models the shipped configs name, as the Hub publishes them: parameters (the safetensors
#: metadata's total), the attention shape of `config.json` (its text model's, for multimodal
#: ones), the context length, and the weights' bytes when they are not parameters × 2 (gpt-oss
#: ships its experts in MXFP4).
KNOWN_MODELS: dict[str, dict] = {
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": {
        "parameters": 108.6e9,
        "layers": 48,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 10_485_760,
    },
    "Qwen/Qwen3-8B": {"parameters": 8.19e9, "layers": 36, "kv_heads": 8, "head_dim": 128, "context": 40_960},
    "google/gemma-3n-E4B-it": {"parameters": 7.85e9, "layers": 35, "kv_heads": 2, "head_dim": 256, "context": 32_768},
    "mistralai/Mixtral-8x7B-Instruct-v0.1": {
        "parameters": 46.7e9,
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 32_768,
    },
    "microsoft/phi-4": {"parameters": 14.7e9, "layers": 40, "kv_heads": 10, "head_dim": 128, "context": 16_384},
    "microsoft/Phi-4-mini-instruct": {
        "parameters": 3.84e9,
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 131_072,
    },
    "microsoft/Phi-3-medium-4k-instruct": {
        "parameters": 14.0e9,
        "layers": 40,
        "kv_heads": 10,
        "head_dim": 128,
        "context": 4_096,
    },
    "Qwen/Qwen2.5-3B": {"parameters": 3.09e9, "layers": 36, "kv_heads": 2, "head_dim": 128, "context": 32_768},
    "Qwen/Qwen2.5-3B-Instruct": {"parameters": 3.09e9, "layers": 36, "kv_heads": 2, "head_dim": 128, "context": 32_768},
    "Qwen/Qwen2.5-7B-Instruct": {"parameters": 7.62e9, "layers": 28, "kv_heads": 4, "head_dim": 128, "context": 32_768},
    "Qwen/Qwen2.5-14B-Instruct": {
        "parameters": 14.8e9,
        "layers": 48,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 32_768,
    },
    "Qwen/Qwen2.5-32B-Instruct": {
        "parameters": 32.8e9,
        "layers": 64,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 32_768,
    },
    "Qwen/Qwen3-4B-Base": {"parameters": 4.02e9, "layers": 36, "kv_heads": 8, "head_dim": 128, "context": 32_768},
    "Qwen/Qwen3-4B-Instruct-2507": {
        "parameters": 4.02e9,
        "layers": 36,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 262_144,
    },
    "google/gemma-2-9b-it": {"parameters": 9.24e9, "layers": 42, "kv_heads": 8, "head_dim": 256, "context": 8_192},
    "google/gemma-3-4b-it": {"parameters": 4.30e9, "layers": 34, "kv_heads": 4, "head_dim": 256, "context": 131_072},
    "google/gemma-3-12b-it": {"parameters": 12.2e9, "layers": 48, "kv_heads": 8, "head_dim": 256, "context": 131_072},
    "meta-llama/Llama-3.1-8B-Instruct": {
        "parameters": 8.03e9,
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 131_072,
    },
    "meta-llama/Llama-3.2-3B-Instruct": {
        "parameters": 3.21e9,
        "layers": 28,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 131_072,
    },
    "mistralai/Ministral-8B-Instruct-2410": {
        "parameters": 8.02e9,
        "layers": 36,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 32_768,
    },
    "mistralai/Mistral-7B-Instruct-v0.3": {
        "parameters": 7.25e9,
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 32_768,
    },
    "mistralai/Mistral-Nemo-Instruct-2407": {
        "parameters": 12.2e9,
        "layers": 40,
        "kv_heads": 8,
        "head_dim": 128,
        "context": 131_072,
    },
    "openai/gpt-oss-120b": {
        "parameters": 117e9,
        "weights_bytes": 65.3e9,
        "layers": 36,
        "kv_heads": 8,
        "head_dim": 64,
        "context": 131_072,
    },
}

#: Bundled models: their size without preparing them (the plan of a fresh clone's dry run).
BUNDLED_MODELS: dict[str, dict] = {
    "smollm2-135m-instruct": {"parameters": 134.5e6, "layers": 30, "kv_heads": 3, "head_dim": 64, "context": 8_192},
    "tiny-random-llama": {"parameters": 1.0e6, "layers": 2, "kv_heads": 2, "head_dim": 16, "context": 2_048},
    # the micro model's recipe (debatelab.micro.recipe): sized before rule micro_model has built it
    "micro-chain": {"parameters": 1.1e6, "layers": 4, "kv_heads": 2, "head_dim": 64, "context": 4_096},
}


class GpuPlanError(ValueError):
    """A job's models do not fit the GPUs it may have: raised while the DAG is built, before submission."""


@dataclass(frozen=True)
class GpuType:
    name: str
    memory: int  # bytes per GPU
    per_node: int

    @property
    def label(self) -> str:
        return f"{self.memory / GIB:.0f} GB"


@dataclass(frozen=True)
class ModelSize:
    """A model's weights in bytes and its KV cache per token (None: unknown), with where they came from."""

    weights: int
    kv_per_token: int | None
    context: int | None
    origin: str


@dataclass(frozen=True)
class ModelNeed:
    """One model of a job: its memory and the GPUs its engine is told to use."""

    name: str
    weights: int
    kv_cache: int = 0
    tensor_parallel: int = 1
    exact: bool = True  # vLLM: exactly `tensor_parallel` GPUs; training: as many as the weights need
    reserved: float | None = None  # the agent's own gpu_memory_utilization: that share of each of its GPUs

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache


@dataclass
class JobPlan:
    job: str
    gpu_type: GpuType
    usable: float  # share of each GPU the job's engines may fill (gpu_memory_utilization)
    needs: dict[str, ModelNeed]
    placement: dict[str, list[int]] = field(default_factory=dict)  # model -> GPU indices in the job
    shares: dict[str, float] = field(default_factory=dict)  # model -> gpu_memory_utilization of its engine
    held: int | None = None  # a training job holds its run's GPUs, whatever its models fill
    nodes: int = 1  # a training run over several nodes: `gpus` on each, every node holding every model

    @property
    def gpus(self) -> int:
        """GPUs per node."""
        return self.held or len({g for gpus in self.placement.values() for g in gpus})

    @property
    def total_gpus(self) -> int:
        """GPUs over every node: what the job asks SLURM for (`--gpus=<type>:<n>`)."""
        return self.gpus * self.nodes

    def groups(self) -> list[tuple[list[str], int]]:
        """Models by the GPUs they hold: (models sharing those GPUs, how many GPUs), largest first."""
        by_gpus: dict[tuple[int, ...], list[str]] = {}
        for name, gpus in self.placement.items():
            by_gpus.setdefault(tuple(gpus), []).append(name)
        return sorted(((sorted(names), len(g)) for g, names in by_gpus.items()), key=lambda x: (-x[1], x[0]))

    def breakdown(self) -> str:
        """e.g. "scout 4, phi-4 + qwen3-8b 1": the models by the GPUs they hold."""
        return ", ".join(f"{' + '.join(names)} {count}" for names, count in self.groups())

    def describe(self) -> str:
        """e.g. "debate udpo/gsm8k/mad_n5 needs 8 × 80 GB h800 GPUs (scout 4, phi-4 + qwen3-8b 1, ...);
        h800 nodes have 8: ok"."""
        if not self.placement:
            return f"{self.job} needs no GPU (no model runs in it)"
        verdict = "ok" if self.gpus <= self.gpu_type.per_node else "does not fit"
        nodes = f"{self.nodes} nodes of " if self.nodes > 1 else ""
        return (
            f"{self.job} needs {nodes}{self.gpus} × {self.gpu_type.label} {self.gpu_type.name} GPUs ({self.breakdown()}); "
            f"{self.gpu_type.name} nodes have {self.gpu_type.per_node}: {verdict}"
        )


# ------------------------------------------------------------------------------- model sizes


def _attention_config(config: dict) -> dict:
    """The text model's part of a config.json (multimodal models nest it under text_config)."""
    return config.get("text_config") or config.get("llm_config") or config


def kv_bytes_per_token(config: dict, dtype_bytes: int) -> int | None:
    """2 (K and V) × layers × KV heads × head dim × bytes, from a config.json; None if it lacks the shape."""
    text = _attention_config(config)
    layers, heads = text.get("num_hidden_layers"), text.get("num_attention_heads")
    if not layers or not heads:
        return None
    kv_heads = text.get("num_key_value_heads") or heads
    head_dim = text.get("head_dim") or (text.get("hidden_size") or 0) // heads
    return 2 * int(layers) * int(kv_heads) * int(head_dim) * dtype_bytes if head_dim else None


def _context(config: dict) -> int | None:
    text = _attention_config(config)
    return text.get("max_position_embeddings") or config.get("max_position_embeddings")


def _dtype_bytes(dtype: str, native: int = 2) -> int:
    return DTYPE_BYTES.get(dtype, native)


def weights_bytes(folder: str | Path) -> int:
    """A model folder's weight files in bytes (safetensors, else PyTorch .bin)."""
    files = list(Path(folder).glob("*.safetensors")) or list(Path(folder).glob("*.bin"))
    if not files:
        raise FileNotFoundError(f"{folder}: no *.safetensors or *.bin weight files")
    return sum(f.stat().st_size for f in files)


def size_from_folder(folder: str | Path, dtype: str = "auto") -> ModelSize | None:
    """A prepared model folder's size: its weight files (converted to `dtype`) and its config.json."""
    folder = Path(folder)
    config_file = folder / "config.json"
    if not config_file.is_file():
        return None
    try:
        on_disk = weights_bytes(folder)
    except FileNotFoundError:
        return None
    config = json.loads(config_file.read_text())
    stored = str(
        _attention_config(config).get("torch_dtype") or config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    )
    stored_bytes = DTYPE_BYTES.get(stored.replace("torch.", ""), 2)
    weights = on_disk if dtype == "auto" else on_disk * _dtype_bytes(dtype, stored_bytes) // stored_bytes
    return ModelSize(
        weights, kv_bytes_per_token(config, _dtype_bytes(dtype, stored_bytes)), _context(config), f"folder {folder}"
    )


def size_from_table(entry: dict, dtype: str, origin: str) -> ModelSize:
    bytes_per = _dtype_bytes(dtype, 2)
    weights = int(
        entry.get("weights_bytes")
        if dtype == "auto" and entry.get("weights_bytes")
        else entry["parameters"] * bytes_per
    )
    kv = 2 * entry["layers"] * entry["kv_heads"] * entry["head_dim"] * bytes_per
    return ModelSize(weights, kv, entry.get("context"), origin)


@functools.cache
def size_from_hub(repo: str, revision: str | None, dtype: str) -> ModelSize:  # pragma: no cover - needs network
    """Online: the safetensors metadata's parameter count and the repo's config.json."""
    from huggingface_hub import get_safetensors_metadata, hf_hub_download

    meta = get_safetensors_metadata(repo, revision=revision)
    config = json.loads(Path(hf_hub_download(repo, "config.json", revision=revision)).read_text())
    stored = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1, "I8": 1}
    native = sum(count * stored.get(kind, 2) for kind, count in meta.parameter_count.items())
    params = sum(meta.parameter_count.values())
    weights = native if dtype == "auto" else params * _dtype_bytes(dtype)
    return ModelSize(weights, kv_bytes_per_token(config, _dtype_bytes(dtype, 2)), _context(config), f"hub {repo}")


def model_size(source: str, dtype: str, folder: str | Path | None = None) -> ModelSize:
    """A model's size by its config `source`: the prepared folder, the shipped tables, else the Hub."""
    if folder is not None and (found := size_from_folder(folder, dtype)) is not None:
        return found
    if source.startswith("bundled:"):
        name = source.split(":", 1)[1]
        if name in BUNDLED_MODELS:
            return size_from_table(BUNDLED_MODELS[name], dtype, f"bundled {name}")
    if source.startswith("hf:"):
        repo, _, revision = source[3:].partition("@")
        if repo in KNOWN_MODELS:
            return size_from_table(KNOWN_MODELS[repo], dtype, f"known {repo}")
        try:
            return size_from_hub(repo, revision or None, dtype)
        except Exception as e:  # offline, gated, or no safetensors
            raise GpuPlanError(
                f"cannot size model {source}: not in debatelab.gpu_plan.KNOWN_MODELS and the Hub "
                f"did not answer ({type(e).__name__}: {e}); prepare its folder first "
                f"(snakemake --until prepare_model) or add it to KNOWN_MODELS"
            ) from e
    raise GpuPlanError(f"cannot size model {source}: its folder {folder} is not prepared yet")


def engine_need(name: str, size: ModelSize, options: dict, backend: str) -> ModelNeed:
    """An inference engine's need: weights plus one sequence of KV cache at vLLM's `max_model_len`
    (else the model's context), on its `tensor_parallel_size` GPUs; a vLLM agent's own lower
    `gpu_memory_utilization` is its reserved share (`reserved_share`)."""
    options = options if backend == "vllm" else {}
    tokens = options.get("max_model_len") or size.context or 0
    kv = (size.kv_per_token or 0) * int(tokens)
    return ModelNeed(
        name,
        size.weights,
        kv,
        int(options.get("tensor_parallel_size") or 1),
        exact=True,
        reserved=reserved_share(options),
    )


# ------------------------------------------------------------------------------------ packing


def _smallest_fitting(need: ModelNeed, room: float) -> int:
    """The fewest GPUs (a power of two, as tensor parallelism splits attention heads) that hold `need`."""
    k = 1
    while need.total / k + OVERHEAD_BYTES > room and k < 1024:
        k *= 2
    return k


def footprint(need: ModelNeed, count: int, memory: float, overhead: int = OVERHEAD_BYTES) -> float:
    """Bytes a model takes on each of its `count` GPUs: its reserved share, else its need plus overhead."""
    return need.reserved * memory if need.reserved is not None else need.total / count + overhead


def pack(
    needs: list[ModelNeed],
    room: float,
    *,
    overhead: int = OVERHEAD_BYTES,
    gpus: int | None = None,
    job: str = "job",
    memory: float | None = None,
) -> dict[str, list[int]]:
    """GPU indices per model, largest first: a model over several GPUs gets GPUs of its own; one that
    fits one GPU joins the first GPU with room left (first fit), else takes a new one. `room`: bytes
    each GPU may hold; `memory`: a GPU's bytes (for reserved shares); `gpus`: a fixed number to place
    on (training), else as many as needed."""
    memory = memory or room
    placement: dict[str, list[int]] = {}
    left: dict[int, float] = {}  # shared GPU -> room left
    next_gpu = 0
    for need in sorted(needs, key=lambda n: (-n.total, n.name)):
        if need.exact:
            count = need.tensor_parallel
            limit = need.reserved * memory if need.reserved is not None else room
            what = (
                f"the {limit / GIB:.1f} GiB its gpu_memory_utilization {need.reserved:g} gives"
                if need.reserved is not None
                else f"the {limit / GIB:.1f} GiB usable on one GPU"
            )
            if need.total / count + overhead > limit:
                fix = (
                    f"set its tensor_parallel_size to {_smallest_fitting(need, limit)}"
                    if need.reserved is None
                    else "raise its gpu_memory_utilization or tensor_parallel_size"
                )
                raise GpuPlanError(
                    f"{job}: model {need.name} needs {(need.total / count + overhead) / GIB:.1f} GiB per GPU at "
                    f"tensor_parallel_size {count} (weights {need.weights / GIB:.1f} GiB, KV cache {need.kv_cache / GIB:.1f} GiB, "
                    f"overhead {overhead / GIB:.0f} GiB), more than {what}; {fix} or lower max_model_len"
                )
        else:
            count = max(need.tensor_parallel, math.ceil(need.total / max(room - overhead, 1)))
        size = footprint(need, count, memory, overhead)
        if count == 1:
            shared = next((g for g in sorted(left) if left[g] >= size), None)
            if shared is not None:
                left[shared] -= size
                placement[need.name] = [shared]
                continue
        placement[need.name] = list(range(next_gpu, next_gpu + count))
        if count == 1:
            left[next_gpu] = room - size
        next_gpu += count
    if gpus is not None and next_gpu > gpus:
        listing = ", ".join(f"{n.name} {n.total / GIB:.1f} GiB" for n in sorted(needs, key=lambda n: -n.total))
        raise GpuPlanError(
            f"{job}: the models ({listing}) do not fit on {gpus} GPU(s) of {room / GIB:.1f} GiB usable "
            f"each (they need {next_gpu}); give the job more GPUs"
        )
    return placement


def memory_shares(
    placement: dict[str, list[int]], needs: dict[str, ModelNeed], usable: float, overhead: int = OVERHEAD_BYTES
) -> dict[str, float]:
    """Each engine's gpu_memory_utilization: its own when the agent sets one; `usable` when it has its
    GPUs alone; on a shared GPU, the usable part left by reserved shares split in proportion to the
    models' needs (vLLM's limit is per instance)."""
    on_gpu: dict[int, list[str]] = {}
    for name, gpus in placement.items():
        for g in gpus:
            on_gpu.setdefault(g, []).append(name)
    shares = {}
    for name, gpus in placement.items():
        if needs[name].reserved is not None:
            shares[name] = needs[name].reserved
            continue
        sharing = on_gpu[gpus[0]]
        free = usable - sum(needs[m].reserved for m in sharing if needs[m].reserved is not None)
        flexible = [m for m in sharing if needs[m].reserved is None]
        total = sum(needs[m].total + overhead for m in flexible)
        shares[name] = free * (needs[name].total + overhead) / total
    return shares


def place_job(job: str, needs: list[ModelNeed], gpu_type: GpuType, usable: float = 0.9) -> JobPlan:
    """One inference job's models packed on GPUs of `gpu_type`, with each engine's memory share."""
    placement = pack(needs, gpu_type.memory * usable, job=job, memory=gpu_type.memory) if needs else {}
    by_name = {n.name: n for n in needs}
    return JobPlan(job, gpu_type, usable, by_name, placement, memory_shares(placement, by_name, usable))


def plan_job(job: str, needs: list[ModelNeed], gpu_type: GpuType, usable: float = 0.9) -> JobPlan:
    """The plan of one inference job (`place_job`); raises when a node of that type cannot hold it."""
    plan = place_job(job, needs, gpu_type, usable)
    if plan.gpus > gpu_type.per_node:
        raise GpuPlanError(plan.describe())
    return plan


def training_state_bytes(
    weights: int, dtype: str, zero_stage: int = 0, processes: int = 1, float32_gradients: bool = False
) -> int:
    """What one process of full fine-tuning holds of a model whose weights take `weights` bytes in
    training `dtype`: the weights, their gradients (same dtype) and AdamW's two float32 moments per
    parameter. Under DeepSpeed ZeRO (`zero_stage` 1-3 over `processes`) 16-bit weights get float32
    master copies, split among the processes with Adam's moments (stage 1), the gradients too
    (stage 2); stage 3 splits the weights as well, but the rollouts gather them whole, so a process
    holds them whole at its peak as under stage 2. FSDP (stage 3 here) trains the float32 masters
    themselves, so their gradients are float32 too (`float32_gradients`)."""
    parameters = weights // _dtype_bytes(dtype, 2)
    adam = 8 * parameters
    if not zero_stage:
        return 2 * weights + adam
    master = 4 * parameters if _dtype_bytes(dtype, 2) < 4 else 0
    if zero_stage == 1:
        return 2 * weights + (adam + master) // processes
    gradients = 4 * parameters if float32_gradients else weights
    return weights + (gradients + adam + master) // processes


#: The accelerate `distributed_type`s the training engine runs: one process, DDP over GPUs or CPU
#: processes, DeepSpeed ZeRO and FSDP. Any other (XLA, MEGATRON_LM, a typo such as DEEP_SPEED) would
#: train as one plain process, the config unread (docs/training.md).
ACCELERATE_DISTRIBUTED_TYPES = ("NO", "MULTI_GPU", "MULTI_CPU", "DEEPSPEED", "FSDP")


def accelerate_config_fields(path: str | None) -> dict:
    """An accelerate config file's fields ({} when there is no such file). The path as the run
    gives it, from the working directory or the workflow's folder, where `config/accelerate/` ships.
    A file that is no mapping, or whose `distributed_type` (or ZeRO stage) the engine doesn't run, is
    a ConfigError naming it (`check_accelerate_fields`)."""
    if not path:
        return {}
    from .config_schema import load_yaml_file

    for candidate in (Path(path), Path(__file__).resolve().parents[2] / path):
        if candidate.is_file():
            fields = load_yaml_file(candidate, what="accelerate config")
            check_accelerate_fields(candidate, fields)
            return fields
    return {}


def check_accelerate_fields(path, fields) -> None:
    """An accelerate config's fields as the engine reads them: a mapping, a `distributed_type` it runs,
    mappings under `deepspeed_config` / `fsdp_config` and a ZeRO stage 0..3."""
    from .errors import ConfigError

    where = f"accelerate config {path}"
    if not isinstance(fields, dict):
        raise ConfigError(
            f"{where}: not an accelerate config (a mapping such as `distributed_type: DEEPSPEED`), but "
            + ("an empty file" if fields is None else f"a {type(fields).__name__}: {str(fields)[:60]!r}")
        )
    if "distributed_type" not in fields:  # accelerate launch requires it
        raise ConfigError(f"{where}: no distributed_type (one of {', '.join(ACCELERATE_DISTRIBUTED_TYPES)})")
    kind = fields["distributed_type"]
    if kind not in ACCELERATE_DISTRIBUTED_TYPES:  # accelerate reads it as its enum's value: capitals
        raise ConfigError(
            f"{where}: distributed_type = {kind!r} is not one the training engine runs "
            f"({', '.join(ACCELERATE_DISTRIBUTED_TYPES)}, in capitals as accelerate reads them); the job would "
            "train as one plain process"
        )
    for block in ("deepspeed_config", "fsdp_config"):
        if fields.get(block) is not None and not isinstance(fields[block], dict):
            raise ConfigError(f"{where}: {block} = {fields[block]!r} is not a mapping")
    stage = (fields.get("deepspeed_config") or {}).get("zero_stage", 2)
    if kind == "DEEPSPEED" and (isinstance(stage, bool) or stage not in (0, 1, 2, 3)):
        raise ConfigError(f"{where}: deepspeed_config.zero_stage = {stage!r} is not a ZeRO stage (0, 1, 2 or 3)")


def accelerate_distributed_type(path: str | None) -> str | None:
    """An accelerate config's `distributed_type` ("DEEPSPEED", "FSDP", "MULTI_GPU", ...), upper case;
    None without a file."""
    config = accelerate_config_fields(path)
    return str(config.get("distributed_type", "NO")).upper() if config else None


def accelerate_zero_stage(path: str | None) -> int | None:
    """What an accelerate config file splits among the processes, as a DeepSpeed ZeRO stage: its
    stage under DeepSpeed, 3 under FSDP (which splits the weights, their gradients and the optimizer
    states, as stage 3 does); None when it shards nothing (DDP, or no such file)."""
    config = accelerate_config_fields(path)
    kind = str(config.get("distributed_type", "NO")).upper()
    if kind == "FSDP":
        return 3
    if kind != "DEEPSPEED":
        return None
    return int((config.get("deepspeed_config") or {}).get("zero_stage", 2))


def training_placement(sizes: dict[str, int], gpus: int, capacity: int, share: float) -> dict[str, list[int]]:
    """Model parallelism for training: each base model's weights may take `share` of a GPU of
    `capacity` bytes (the rest: optimizer states, activations, rollouts); same packing as inference."""
    needs = [ModelNeed(name, size, exact=False) for name, size in sizes.items()]
    return pack(needs, capacity * share, overhead=0, gpus=gpus, job="model parallelism")


# ------------------------------------------------------------------------- the config's jobs

#: vLLM's default gpu_memory_utilization: the share of each GPU a job's engines fill together. An
#: agent that sets a lower one has split a GPU by hand (confidence.yaml): its engine keeps that share.
USABLE = 0.9


def gpu_types(config: dict) -> dict[str, GpuType]:
    return {
        name: GpuType(name, int(spec["memory_gib"] * GIB), int(spec["per_node"]))
        for name, spec in (config.get("gpus") or {}).get("types", {}).items()
    }


def job_gpu_type(config: dict, gpu_model: str | None) -> GpuType:
    """The GPU type a rule's jobs run on: the profile's `gpu_model` for the rule, else `gpus.default_type`."""
    types = gpu_types(config)
    name = gpu_model or (config.get("gpus") or {}).get("default_type")
    if name not in types:
        where = "the profile's gpu_model" if gpu_model else "the config's gpus.default_type"
        raise GpuPlanError(
            f"GPU type {name!r} ({where}) is not in the config's gpus.types "
            f"{sorted(types)}: state its memory_gib and per_node there"
        )
    return types[name]


def _sized_model(exp, model: str) -> tuple[str, str, str]:
    """(source, dtype, folder) of the model whose weights `model` has: a trained model has the weights
    (merged, same size) of the untrained model its run started from (`Experiment.origin_model`)."""
    model = exp.origin_model(model)
    spec = exp.models[model]
    return spec["source"], spec.get("dtype", "auto"), exp.model_dir(model)


def reserved_share(options: dict) -> float | None:
    value = options.get("gpu_memory_utilization")
    return float(value) if value is not None and float(value) < USABLE else None


def model_need(exp, model: str, options: dict, backend: str) -> ModelNeed | None:
    """The need of one model's engine in an inference job (None: a remote API uses no GPU)."""
    if backend == "openai":
        return None
    return engine_need(model, model_size(*_sized_model(exp, model)), options, backend)


def inference_needs(exp, agents: list[str], dataset: str | None) -> list[ModelNeed]:
    """One engine per model of `agents`, with the options of the first agent using it (as the jobs build
    them); adapter-served models (`adapter: true`) share one engine of their base model."""
    needs: dict[str, ModelNeed] = {}
    served: dict[str, set[str]] = {}  # base model -> its adapter-served models here
    for agent in agents:
        model = exp.agents[agent]["model"]
        base = exp.adapter_base(model)
        key = model if base is None else f"{base}+adapters"
        if base is not None:
            served.setdefault(key, set()).add(model)
        if key not in needs:
            settings = exp.agent_settings(agent, dataset)
            need = model_need(exp, base or model, settings["backend_options"], settings["backend"])
            if need is not None:
                needs[key] = need
    for key, models in served.items():  # named for the plan's line: the base and how many adapters it serves
        label = f"{key[: -len('+adapters')]} with {len(models)} adapter{'s' if len(models) > 1 else ''}"
        needs[key] = dataclasses.replace(needs[key], name=label)
    return list(needs.values())


def engine_models(exp, agents: list[str]) -> dict[str, list[str]]:
    """The models each engine of `inference_needs(exp, agents, ...)` serves, by the engine's name in the
    plan: a model its own engine; the adapter-served models of one base model its shared engine."""
    served: dict[str, list[str]] = {}
    for agent in agents:
        model = exp.agents[agent]["model"]
        base = exp.adapter_base(model)
        key = model if base is None else f"{base}+adapters"
        if model not in served.setdefault(key, []):
            served[key].append(model)
    out = {}
    for key, models in served.items():
        if key.endswith("+adapters") and exp.adapter_base(models[0]) is not None:
            n = len(models)
            key = f"{key[: -len('+adapters')]} with {n} adapter{'s' if n > 1 else ''}"
        out[key] = models
    return out


def experiment_job_plan(exp, rule: str, wildcards: dict, gpu_type: GpuType) -> JobPlan:
    """The plan of one GPU job of the workflow, by rule and wildcards."""
    job = f"{rule} {exp.name}/" + "/".join(str(v) for v in wildcards.values())
    if rule == "zero_shot":
        needs = inference_needs(exp, [wildcards["agent"]], wildcards["dataset"])
    elif rule == "debate":
        needs = (
            inference_needs(exp, exp.protocol_agents(wildcards["protocol"]), wildcards["dataset"])
            if exp.protocol_models(wildcards["protocol"])
            else []
        )
    elif rule == "attack_prompt":
        options = dict(exp.config["backends"].get(exp.attack["backend"], {}))
        need = model_need(exp, exp.attack["rewriter"], options, exp.attack["backend"])
        needs = [need] if need else []
    elif rule in ("train", "train_agents", "udpo_warmup"):
        return training_job_plan(exp, rule, wildcards["run"], gpu_type, job)
    else:
        raise GpuPlanError(f"no GPU plan for rule {rule!r}")
    return plan_job(job, needs, gpu_type, USABLE)


def training_job_plan(exp, rule: str, run: str, gpu_type: GpuType, job: str) -> JobPlan:
    """A training job holds its run's GPUs (`gpus`; a warm-up without model parallelism one). What
    each model holds: a LoRA base its weights (agents on one base share them); under full
    fine-tuning every agent its own weights, gradients and AdamW states (`training_state_bytes`,
    in the run's `dtype`, split over the processes under its accelerate config's DeepSpeed ZeRO or FSDP;
    the warm-up only generates: weights). With model parallelism the models
    are packed over the GPUs as the job will place them; otherwise every process holds every model
    whole, so they must fit one GPU together."""
    spec = exp.training_runs[run]
    count = spec["gpus"] if rule != "udpo_warmup" or spec.get("parallelism", "data") == "model" else 1
    settings = exp.run_settings(run)
    full = settings.finetuning == "full" and rule != "udpo_warmup"
    dtype = "bfloat16" if settings.dtype == "auto" else settings.dtype  # "auto" trains in bfloat16 on a GPU
    processes = count * spec.get("nodes", 1)
    stage = accelerate_zero_stage(spec.get("accelerate_config")) or 0  # one process too: the engine's masters
    fsdp = stage > 0 and accelerate_distributed_type(spec.get("accelerate_config")) == "FSDP"
    sizes: dict[str, int] = {}
    for agent in exp.run_agents(run):
        source, stored, folder = _sized_model(exp, exp.agents[agent]["model"])
        if full:
            weights = model_size(source, dtype, folder).weights
            sizes[agent] = training_state_bytes(weights, dtype, stage, processes, float32_gradients=fsdp)
        else:
            sizes.setdefault(Path(folder).name, model_size(source, stored, folder).weights)
    needs = [ModelNeed(name, size, exact=False) for name, size in sizes.items()]
    room = gpu_type.memory * WEIGHTS_SHARE
    if spec.get("parallelism", "data") == "model" and count > 1:
        placement = pack(needs, room, overhead=0, gpus=count, job=job)
    else:
        placement = pack(needs, room, overhead=0, gpus=1, job=job + " (every process holds every model)")
        placement = {name: list(range(count)) for name in placement}
    plan = JobPlan(
        job,
        gpu_type,
        WEIGHTS_SHARE,
        {n.name: n for n in needs},
        placement,
        {n.name: WEIGHTS_SHARE for n in needs},
        held=count,
        nodes=spec.get("nodes", 1) if rule != "udpo_warmup" else 1,
    )
    if plan.gpus > gpu_type.per_node:
        raise GpuPlanError(plan.describe())
    return plan


# ------------------------------------------------------------------ inside a job: device slices


def visible_gpus() -> list[str]:
    """The GPUs this job may use, as CUDA names them (SLURM sets CUDA_VISIBLE_DEVICES to the allocation)."""
    import os

    import torch

    if not torch.cuda.is_available():
        return []
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    names = [d.strip() for d in listed.split(",") if d.strip()] if listed else []
    return names or [str(i) for i in range(torch.cuda.device_count())]


def engine_slices(
    engines: dict[str, tuple[str, dict, str]], gpu_memory: int | None = None, gpus: list[str] | None = None
) -> dict[str, dict]:
    """Inside a job with several models: each engine's GPUs and memory share, planned as the DAG
    planned the job (same packing, sizes from the prepared folders, the GPUs the job got).
    `engines`: model -> (folder, backend options, backend). Returns model -> backend options to add:
    `devices` (CUDA names of its GPUs) and, for vLLM, `gpu_memory_utilization`. Empty without CUDA
    or with one model (it has the job's GPUs to itself, as before)."""
    gpus = visible_gpus() if gpus is None else gpus
    local = {m: e for m, e in engines.items() if e[2] != "openai"}
    if not gpus or len(local) < 2:
        return {}
    if gpu_memory is None:
        import torch

        gpu_memory = torch.cuda.get_device_properties(0).total_memory
    needs = []
    for model, (folder, options, backend) in local.items():
        size = size_from_folder(folder, "auto")
        if size is None:
            raise GpuPlanError(f"model {model}: {folder} is not a prepared model folder")
        needs.append(engine_need(model, size, options, backend))
    plan = place_job("this job", needs, GpuType("job", gpu_memory, len(gpus)), USABLE)
    if plan.gpus > len(gpus):
        raise GpuPlanError(
            f"this job's models need {plan.gpus} GPU(s) of {gpu_memory / GIB:.0f} GiB ({plan.breakdown()}); "
            f"the job got {len(gpus)} GPU(s) ({','.join(gpus)}): plan it for this GPU type "
            f"(the profile's gpu_model and the config's gpus.types)"
        )
    slices = {}
    for model, indices in plan.placement.items():
        extra = {"devices": [gpus[i] for i in indices]}
        if local[model][2] == "vllm":
            extra["gpu_memory_utilization"] = min(
                plan.shares[model], float(local[model][1].get("gpu_memory_utilization") or USABLE)
            )
        slices[model] = extra
    return slices
