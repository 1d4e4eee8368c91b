"""Settings of a training run (config `training.runs.<run>`): `TrainSettings`, what every method reads
(the loop, the update, the weights, where rollouts run), and one block of the run's own method (its
settings class in `methods/`, `TrainSettings.own`), each validating itself. A block of another
method, or a key only multi-agent methods read (`MULTI_AGENT_KEYS`) on a single-policy run, is an
error naming the key and the method (`TrainSettings.from_config`). Defaults are Liu et al.,
arXiv:2601.22297 §6.1.1, App. A.1's values (DAPO / SDRL on Qwen2.5-3B) and match config/schema.yaml
(a test checks it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

from .methods import METHODS
from .methods.dapo import DapoSettings
from .methods.mappo import MappoSettings
from .methods.sdrl import SdrlSettings
from .methods.udpo import UdpoSettings
from .methods.umad import UmadSettings

AGGREGATIONS = ("token_mean", "sequence_mean")
KL_ESTIMATORS = ("k1", "k3")
FINETUNING = ("lora", "full")
ROLLOUT_BACKENDS = ("auto", "transformers", "vllm")
LR_SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class LoraSettings:
    """PEFT LoRA adapter on every linear layer of the policy (no dropout: the rollout policy and the
    first update's policy are then the same function, ratio = 1)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: str = "all-linear"

    def __post_init__(self):
        if self.r < 1 or self.alpha <= 0 or not 0 <= self.dropout < 1:
            raise ValueError(f"lora: r >= 1, alpha > 0 and dropout in [0, 1) are required, got {self}")


#: The methods' own settings blocks (config keys) -> a method of each (`methods.METHODS`; a preset shares its base's).
BLOCKS = {m.block: m for m in reversed(METHODS.values())}
#: Run keys that only the multi-agent methods read: a single-policy run that names one is refused.
MULTI_AGENT_KEYS = ("protocol", "overlong_shaping", "parallelism")


#: DAPO's soft overlong punishment: read by DAPO and SDRL, and by a multi-agent run with `overlong_shaping`.
OVERLONG_KEYS = ("overlong_buffer", "overlong_penalty")
#: The overlong buffer where none is given and the punishment is read (DAPO's, Liu et al., arXiv:2601.22297 App. A.1).
DEFAULT_OVERLONG_BUFFER = 2048


def reads_overlong(method: str, overlong_shaping: bool) -> bool:
    """Whether a run of `method` punishes overlong replies (reads `OVERLONG_KEYS`)."""
    return not METHODS[method].multi_agent or bool(overlong_shaping)


def refuse_overlong_keys(method: str, keys) -> None:
    """A ValueError naming the first of `keys` (of `OVERLONG_KEYS`) on a multi-agent run without
    `overlong_shaping`, which has no overlong punishment to read them."""
    keys = list(keys)
    if keys:
        raise ValueError(
            f"training: {keys[0]} is read by {method!r} only with overlong_shaping: true (its paper has no "
            f"length shaping; without it a reply's length does not change its reward)"
        )


#: What a colocated vLLM engine reads: unread when the rollouts run on transformers.
VLLM_KEYS = ("vllm_gpu_memory_utilization", "vllm_max_model_len", "vllm_enforce_eager", "vllm_sleep")


def unread_conditional_keys(settings: TrainSettings) -> list[tuple[tuple[str, ...], str]]:
    """The run keys `settings` don't read because of its other settings, each group with the condition
    under which it would be: `kl_estimator` without a KL weight, the vLLM engine's keys with rollouts
    on transformers, `shared_prompts` with padded updates. Set off their defaults, they are refused."""
    unread = []
    if not settings.kl_weight_positive:
        unread.append((("kl_estimator",), f"with a KL term ({settings.kl_weight_key} > 0; this run's is 0)"))
    if settings.rollout_backend == "transformers":
        unread.append((VLLM_KEYS, "with rollouts on vLLM (rollout_backend auto or vllm; this run's is transformers)"))
    if not settings.packed_updates:
        unread.append((("shared_prompts",), "with packed_updates: true (this run's passes are padded)"))
    return unread


def refuse_lora_block() -> None:
    """A ValueError for a `lora` block on a run that trains every weight (`finetuning: full`), which has
    no adapter to shape: written in its config (`from_config`) or set off its defaults (the constructor)."""
    raise ValueError(
        "training: lora is read only with finetuning: lora (an adapter's rank, alpha, dropout and modules); "
        "this run has finetuning: full, which trains every weight and has no adapter"
    )


def refuse_multi_agent_keys(method: str, keys) -> None:
    """A ValueError naming the first of `keys` (of `MULTI_AGENT_KEYS`) when `method` trains one policy:
    written in its config (`from_config`) or set off its default (the constructor)."""
    keys = list(keys)
    if keys and method in METHODS and not METHODS[method].multi_agent:
        raise ValueError(
            f"training: {keys[0]} is read by the multi-agent methods only "
            f"({', '.join(m for m in METHODS if METHODS[m].multi_agent)}), not by {method!r}"
        )


def method_block(block: str, values: dict | None = None, method: str | None = None):
    """A method's own settings block (its settings class in `methods/`, named by the registry) from its
    config values; a key the class lacks is a ValueError naming it, the method whose block it is (a
    preset shares its base's: rmaac's is mappo's) and the block's keys."""
    cls = BLOCKS[block].settings
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(values or {}) - set(known))
    if unknown:
        whose = f", the block of {method!r}" if method and method != block else ""
        raise ValueError(f"training: {block}.{unknown[0]} is no setting of {block}{whose} (its keys: {known})")
    return cls(**(values or {}))


@dataclass(frozen=True)
class TrainSettings:
    method: str = "dapo"
    steps: int = 200  # rollout steps
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 8192
    # DAPO soft overlong punishment: 0 up to max_tokens − buffer, then down to −penalty at max_tokens.
    # null: DEFAULT_OVERLONG_BUFFER where it is read, 0 (no punishment) on a run that has none.
    overlong_buffer: int | None = None
    overlong_penalty: float = 1.0
    # The multi-agent methods (udpo, mappo, rmaac, umad, ippo) have no overlong punishment in their
    # papers; true adds it to each turn's reward (a [CHOICE] for short budgets, off by default). Without
    # it, their runs read neither overlong key.
    overlong_shaping: bool = False
    # Multi-agent runs: the options of the debate the rollouts run (config `protocol`, resolved by
    # `Experiment.train_protocol`: the evaluation protocol's template, peer masking, ...); null: all_to_all
    # with the debate defaults.
    protocol: dict | None = None
    # The update (Liu et al., arXiv:2601.22297 §3-5, Eq. 7).
    learning_rate: float = 1e-6
    warmup_steps: int = 10  # linear warm-up over the first rollout steps, ...
    lr_schedule: str = "constant"  # ... then constant, or cosine decay to 0 at `steps` (UDPO App. A.1)
    weight_decay: float = 0.1
    max_grad_norm: float = 1.0
    mini_batch_size: int = 128  # sequences per optimizer step
    micro_batch_size: int = 8  # sequences per forward/backward (gradient accumulation)
    micro_batch_tokens: int | None = None  # and at most this many tokens a pass (real ones when packed; null: any)
    # a pass's sequences in one row without padding (position ids restart per sequence); false: padded
    packed_updates: bool = True
    # a packed pass holds a prompt its sequences share (a group's replies, a debate's threads) once, its
    # replies seeing it through a tree-shaped mask (SDPA / eager attention); false: each sequence whole
    shared_prompts: bool = True
    # bf16 autocast of the rollouts (on transformers) and the update's forwards (π_old, reference, loss):
    # about 2-3x faster on a CPU with avx512_bf16 (SmolLM2-135M), at log-probabilities off by ~0.03 nats
    # on average: opt-in
    autocast: bool = False
    gradient_checkpointing: bool = False  # recompute activations in the backward: far less memory, slower
    epochs: int = 1  # passes over a step's sequences
    clip_low: float = 0.2
    clip_high: float = 0.28
    loss_aggregation: str = "token_mean"
    ratio_level: str = "token"  # token | sequence (GSPO) | trajectory (UDPO's paper: an agent's turns of one debate)
    kl_estimator: str = "k3"  # of the KL weight the method sets (its block's kl_coef; UDPO: η per seat)
    finetuning: str = "lora"
    lora: LoraSettings = field(default_factory=LoraSettings)  # the adapter's; written only with finetuning lora
    # The method's own block (settings classes in methods/, `methods.TrainingMethod.settings`): the
    # run's method's is built (from its config values, else its defaults); every other stays None.
    dapo: DapoSettings | None = None
    sdrl: SdrlSettings | None = None
    udpo: UdpoSettings | None = None
    umad: UmadSettings | None = None
    mappo: MappoSettings | None = None
    dtype: str = "auto"  # auto: bfloat16 on a GPU, float32 on a CPU
    rollout_batch_size: int | None = None  # sequences per generate call (null: the backend's default)
    # Where rollouts run: auto = a colocated vLLM engine when a GPU and vLLM are there, else transformers.
    rollout_backend: str = "auto"
    vllm_gpu_memory_utilization: float = 0.3  # the engine's share of the GPU; the trainer holds the rest
    vllm_max_model_len: int | None = None  # null: the model's own context length
    vllm_enforce_eager: bool = False
    # Multi-agent runs on several GPUs: data (a process per GPU, each debating its share) or model (one
    # process; each base model on GPUs of its own: agents on different, large bases, as UDPO's ensemble)
    parallelism: str = "data"
    vllm_sleep: bool = False  # free the engine's KV cache and offload its weights during the update
    checkpoint_every: int = 1
    show_progress: bool = True
    # Held-out accuracy during training (config `heldout: {dataset, every, questions}`; the dataset is a
    # workflow key): the live policy on a fixed subset, before the first step and every `every` steps.
    heldout_every: int = 5
    heldout_questions: int = 100

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"training: method must be one of {tuple(METHODS)}, got {self.method!r}")
        if isinstance(self.lora, dict):
            object.__setattr__(self, "lora", LoraSettings(**self.lora))
        if self.finetuning == "full" and self.lora != LoraSettings():
            refuse_lora_block()
        own = METHODS[self.method].block
        for block in BLOCKS:
            value = getattr(self, block)
            if block != own and value is not None:
                raise ValueError(
                    f"training: {block} is a block method {self.method!r} does not read (its block is {own!r})"
                )
        value = getattr(self, own)
        if value is None or isinstance(value, dict):
            object.__setattr__(self, own, method_block(own, value, self.method))
        defaults = {f.name: f.default for f in fields(self)}
        refuse_multi_agent_keys(self.method, [k for k in MULTI_AGENT_KEYS if getattr(self, k) != defaults[k]])
        if reads_overlong(self.method, self.overlong_shaping):
            if self.overlong_buffer is None:
                object.__setattr__(self, "overlong_buffer", DEFAULT_OVERLONG_BUFFER)
            if not 0 <= self.overlong_buffer < self.max_tokens:
                raise ValueError(f"training: overlong_buffer must be in [0, max_tokens), got {self.overlong_buffer}")
        else:  # no punishment: buffer 0 (what `to_dict` gives back and the constructor takes again)
            unread = {"overlong_buffer": (None, 0), "overlong_penalty": (defaults["overlong_penalty"],)}
            refuse_overlong_keys(self.method, [k for k in OVERLONG_KEYS if getattr(self, k) not in unread[k]])
            object.__setattr__(self, "overlong_buffer", 0)
        # the schema fills every key's default in: only a value off it shows that it was set
        for keys, condition in unread_conditional_keys(self):
            for key in keys:
                if getattr(self, key) != defaults[key]:
                    raise ValueError(f"training: {key} is read by {self.method!r} only {condition}")
        choices = {
            "loss_aggregation": AGGREGATIONS,
            "kl_estimator": KL_ESTIMATORS,
            "finetuning": FINETUNING,
            "dtype": ("auto", "float32", "bfloat16", "float16"),
            "rollout_backend": ROLLOUT_BACKENDS,
            "ratio_level": ("token", "sequence", "trajectory"),
            "lr_schedule": LR_SCHEDULES,
            "parallelism": ("data", "model"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"training: {name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.ratio_level not in METHODS[self.method].ratio_levels:  # a group of G replies is no trajectory
            raise ValueError(
                f"training: ratio_level {self.ratio_level!r} is not read by {self.method!r} (its levels: "
                f"{list(METHODS[self.method].ratio_levels)}): one ratio over an agent's turns of one debate is UDPO's"
            )
        positive = (
            "steps",
            "max_tokens",
            "mini_batch_size",
            "micro_batch_size",
            "epochs",
            "checkpoint_every",
            "heldout_every",
            "heldout_questions",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"training: {name} must be >= 1, got {getattr(self, name)}")
        if not (0 <= self.clip_low < 1 and self.clip_high >= 0):
            raise ValueError(
                f"training: clip_low in [0, 1) and clip_high >= 0 are required, got {self.clip_low}, {self.clip_high}"
            )
        if self.learning_rate <= 0 or self.temperature <= 0 or not 0 < self.top_p <= 1:
            raise ValueError("training: learning_rate > 0, temperature > 0 and top_p in (0, 1] are required")
        if not 0 < self.vllm_gpu_memory_utilization <= 1:
            raise ValueError(
                f"training: vllm_gpu_memory_utilization must be in (0, 1], got {self.vllm_gpu_memory_utilization}"
            )
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(f"training: micro_batch_tokens must be >= 1 or null, got {self.micro_batch_tokens}")
        if self.warmup_steps < 0:
            raise ValueError("training: warmup_steps must be >= 0")

    @property
    def own(self):
        """The run's method's settings block (`DapoSettings`, `SdrlSettings`, `UdpoSettings`, ...)."""
        return getattr(self, METHODS[self.method].block)

    @property
    def _kl_weight_field(self) -> str:
        """The block's setting that weighs the KL to the reference: `kl_coef`, UDPO's `eta_base` (each
        seat's η is a multiple of it)."""
        return "eta_base" if self.method == "udpo" else "kl_coef"

    @property
    def kl_weight_key(self) -> str:
        """That setting as the config names it (`<block>.<field>`)."""
        return f"{METHODS[self.method].block}.{self._kl_weight_field}"

    @property
    def kl_weight_positive(self) -> bool:
        """Whether the run has a KL term to the reference (in its loss or, UMAD's `kl_mode: reward`, its
        reward), so that it reads `kl_estimator`."""
        return float(getattr(self.own, self._kl_weight_field)) > 0

    @property
    def kl_weight(self) -> float:
        """The KL weight the update uses unless the trainer passes its own: the block's `kl_coef`
        (UDPO has none: it passes each seat's η)."""
        return float(getattr(self.own, "kl_coef", 0.0))

    def processes(self, gpus: int) -> int:
        """Processes a job with `gpus` GPUs starts: one per GPU (data parallel), or one seeing them all."""
        return gpus if self.parallelism == "data" else 1

    @classmethod
    def from_config(cls, spec: dict, **overrides) -> TrainSettings:
        """From a run's config entry; the workflow keys (policy, dataset, heldout.dataset, ...) are not
        settings. `heldout: {every, questions}` becomes `heldout_every`, `heldout_questions`. A key the
        run's method doesn't read (another method's block, a multi-agent key on a single-policy run)
        is a ValueError naming it and the method."""
        method = {**spec, **overrides}.get("method", "dapo")
        refuse_multi_agent_keys(method, [k for k in MULTI_AGENT_KEYS if k in spec and k not in overrides])
        if "lora" in spec and "lora" not in overrides and {**spec, **overrides}.get("finetuning") == "full":
            refuse_lora_block()
        if method in METHODS and not reads_overlong(method, {**spec, **overrides}.get("overlong_shaping")):
            refuse_overlong_keys(method, [k for k in OVERLONG_KEYS if k in spec and k not in overrides])
        known = {f.name for f in fields(cls)}
        spec = {**spec, **{f"heldout_{k}": v for k, v in (spec.get("heldout") or {}).items() if k != "dataset"}}
        return cls(**{k: v for k, v in {**spec, **overrides}.items() if k in known})

    def to_dict(self) -> dict:
        return asdict(self)


#: What each UDPO preparation job reads of a run's settings (the rest keeps their defaults). Snakemake
#: reruns a job whose params change, so an update-only setting (micro_batch_tokens, learning_rate,
#: steps, ...) must not rerun the warm-up debates or the coefficients computed from them.
UDPO_WARMUP_KEYS = (
    "method",
    "seed",
    "protocol",
    "temperature",
    "top_p",
    "max_tokens",
    "dtype",
    "rollout_batch_size",
    "finetuning",
    "rollout_backend",
    "vllm_gpu_memory_utilization",
    "vllm_max_model_len",
    "vllm_enforce_eager",
    "parallelism",
)
UDPO_WARMUP_UDPO_KEYS = ("rounds", "warmup_fraction")
UDPO_COEFFICIENT_UDPO_KEYS = ("kappa", "lambda_base", "eta_base", "intra_lambda", "sys_mode", "base_weights", "ablate")


def custom_reward_problem(reward: str | None) -> str | None:
    """Why a custom reward "module:function" can't be imported here, as the training job imports it
    (None: it can, or the reward is a built-in one)."""
    if reward is None or ":" not in reward:
        return None
    import importlib
    import importlib.util

    module, _, function = reward.partition(":")
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"no module {module!r} is importable (the reward's module goes on the workflow's PYTHONPATH)"
    if not callable(getattr(importlib.import_module(module), function, None)):
        return f"module {module!r} has no function {function!r}"
    return None


def udpo_job_settings(spec: dict, job: str) -> dict:
    """The part of a run's settings (`Experiment.train_settings`) that `job` ("warmup" or
    "coefficients") depends on."""
    keys, udpo_keys = {
        "warmup": (UDPO_WARMUP_KEYS, UDPO_WARMUP_UDPO_KEYS),
        "coefficients": (("method",), UDPO_COEFFICIENT_UDPO_KEYS),
    }[job]
    udpo = spec.get("udpo") or {}
    return {**{k: spec[k] for k in keys if k in spec}, "udpo": {k: udpo[k] for k in udpo_keys if k in udpo}}
