"""Sharded data-parallel training: DeepSpeed ZeRO splits the optimizer states (stage 1), the
gradients too (stage 2), and the weights too (stage 3) among the processes, for full fine-tuning
of models whose weights, gradients and Adam states don't fit one GPU; PyTorch's FSDP2 splits what
stage 3 does (`fsdp.FsdpEngine`, which answers what is asked here of a DeepSpeed engine). The
functions below take either engine (None: no sharding).

Switched on by `accelerate launch` with a DeepSpeed config (`config/accelerate/zero2_8gpu.yaml`,
`zero3_8gpu.yaml`): accelerate exports the config's fields (`ACCELERATE_USE_DEEPSPEED`,
`ACCELERATE_DEEPSPEED_*`), its state turns them into a `DeepSpeedPlugin`, the run's settings fill
what the training loop decides, and `Accelerator.prepare` builds the engine (`deepspeed.initialize`
over that config). On CPU processes accelerate is given the Gloo backend (`InitProcessGroupKwargs`):
without a backend its state falls back to one process, with it DeepSpeed runs over Gloo, which is
where the tests check it. Micro-batches per optimizer step vary (token budgets, SDRL's kept groups),
so the loop marks the last one itself (`set_gradient_accumulation_boundary`) and scales the loss
itself, as with DDP, calling the engine rather than `Accelerator.backward`; clipping is the run's
`max_grad_norm`, applied by DeepSpeed.

Stage 3 (`sharded`): each process holds a shard of every weight, and a forward pass gathers each
layer's weights from all processes, so every process runs the same number of forward passes (the
trainer pads its micro-batches with empty passes). For rollouts, held-out answers and a vLLM sync,
`for_generation` gathers the whole model into every process and takes DeepSpeed's hooks off (TRL's
`unwrap_model_for_generation`), so each process generates alone; the saved model takes the
gathered weights (`gathered`).

Checkpoints: a DeepSpeed engine is saved by its `Accelerator.save_state` into
`{checkpoint_dir}/.zero-step-NNNNN/` (DeepSpeed's own checkpoint, `engine.save_checkpoint`: the
weights and each process's optimizer partition with its fp32 master weights, readable by DeepSpeed's
`zero_to_fp32.py`) and restored by its `load_state`; an FSDP engine saves its shards of the weights
and of the optimizer there (`fsdp.FsdpEngine.save_partition`). The checkpoint then takes the folder in whole
(`checkpoint.py`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import weakref
from pathlib import Path

from . import fsdp

log = logging.getLogger(__name__)

PARTITIONS = "optimizer-zero"  # the folder of the engines' checkpoints inside a checkpoint
DEEPSPEED_TAG = "pytorch_model"  # the folder `Accelerator.save_state` gives its one DeepSpeed engine

# each DeepSpeed engine's Accelerator, which built it and saves and loads it
_ACCELERATORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def deepspeed_requested() -> bool:
    """Whether this process was started by `accelerate launch` with a DeepSpeed config."""
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"


def requested() -> bool:
    """Whether this process was started by `accelerate launch` with a DeepSpeed or an FSDP config."""
    return deepspeed_requested() or fsdp.requested()


def layout(world: int) -> str | None:
    """How the optimizer state is split, for the resume fingerprint: None (whole in every process),
    "zero<stage> x <processes>" or "fsdp2 x <processes>" (a checkpoint resumes only into the same split)."""
    if not requested():
        return None
    if fsdp.requested():
        return f"fsdp2 x {world}"
    return f"zero{os.environ.get('ACCELERATE_DEEPSPEED_ZERO_STAGE', '2')} x {world}"


def deepspeed_config(settings, world: int, dtype, config: dict) -> dict:
    """The launcher's DeepSpeed config (`config`: accelerate's plugin's, from the launcher's
    environment) with the loop's own choices filled in, in place (the plugin and `prepare` read that
    dict, which the plugin shares with its `hf_ds_config`); returns it. Refused settings raise before
    the loop's choices are filled."""
    import torch

    zero = config.setdefault("zero_optimization", {})
    stage = int(zero.get("stage", 2))
    if stage not in (1, 2, 3):
        raise ValueError(f"DeepSpeed ZeRO stage {stage} in the accelerate config: training supports stages 1, 2 and 3")
    if str((zero.get("offload_param") or {}).get("device", "none")) != "none":
        raise ValueError(
            "DeepSpeed offload_param_device in the accelerate config: weights stay on the GPUs (not tested)"
        )
    clipping = config.get("gradient_clipping", "auto")
    if clipping not in ("auto", None) and float(clipping) != float(settings.max_grad_norm or 0.0):
        log.warning(
            "accelerate config gradient_clipping %s ignored: the run's max_grad_norm (%s) applies",
            clipping,
            settings.max_grad_norm,
        )
    config.update(
        {
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": 1,
            "train_batch_size": world,
            "gradient_clipping": float(settings.max_grad_norm or 0.0),
            # the policy's own torch AdamW (and schedule): what a single process or DDP runs
            "zero_allow_untested_optimizer": True,
            "zero_force_ds_cpu_optimizer": False,
            # weights load in the training dtype; with bfloat16, DeepSpeed keeps fp32 master partitions
            "bf16": {"enabled": dtype == torch.bfloat16},
            "fp16": {"enabled": False},
            "steps_per_print": 2**31 - 1,
            "wall_clock_breakdown": False,
        }
    )
    return config


def wrap(model, optimizer, settings, world: int):
    """The engine over `model` and its optimizer (the one the policy's scheduler drives): FSDP2's
    (`fsdp.FsdpEngine`) under an FSDP config, else DeepSpeed's, built by accelerate's
    `Accelerator.prepare` (one `Accelerator` per engine: accelerate's DeepSpeed path takes one model
    per instance, and a multi-agent run has one engine per agent)."""
    if fsdp.requested():
        return fsdp.FsdpEngine(model, optimizer, settings, world)
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, InitProcessGroupKwargs

    accelerator = Accelerator(
        mixed_precision="no",  # the run's dtype decides; bfloat16 gets DeepSpeed's fp32 masters below
        device_placement=False,
        # CPU processes: without a backend accelerate's state runs DeepSpeed as one process
        kwargs_handlers=[] if torch.cuda.is_available() else [InitProcessGroupKwargs(backend="gloo")],
    )
    # accelerate registers a stage-3 config with transformers, whose `from_pretrained` would then
    # partition every later load collectively (zero.Init); each process loads whole weights itself
    # (an agent, the base rank 0 saves into) and the engine partitions them
    from transformers.integrations import unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    if accelerator.distributed_type != DistributedType.DEEPSPEED or accelerator.num_processes != world:
        raise RuntimeError(
            f"training: a DeepSpeed engine over {world} processes, but accelerate sees "
            f"{accelerator.distributed_type.value} over {accelerator.num_processes}: start the processes with "
            "accelerate launch and a DeepSpeed config"
        )
    dtype = next(p for p in model.parameters() if p.requires_grad).dtype
    config = deepspeed_config(settings, world, dtype, accelerator.state.deepspeed_plugin.deepspeed_config)
    engine, _ = accelerator.prepare(model, optimizer)
    _ACCELERATORS[engine] = accelerator
    log.info(
        "DeepSpeed ZeRO stage %d over %d processes (bf16 master weights: %s)",
        config["zero_optimization"]["stage"],
        world,
        config["bf16"]["enabled"],
    )
    return engine


def sharded(engine) -> bool:
    """Whether `engine` (None: no sharding) splits the weights themselves (ZeRO stage 3, FSDP)."""
    if isinstance(engine, fsdp.FsdpEngine):
        return True
    return engine is not None and engine.zero_optimization_stage() == 3


def full_weights(engine, named: dict, clone: bool = True) -> dict:
    """The weights `named` (parameters by name) whole, detached (copies, unless `clone` is False and
    they are whole already); where `engine` splits them, gathered from every process (each must call)."""
    if isinstance(engine, fsdp.FsdpEngine):
        return engine.full_weights(named)
    if not sharded(engine) and not clone:
        return {n: p.detach() for n, p in named.items()}
    with gathered(engine, named.values()):
        return {n: p.detach().clone() for n, p in named.items()}


def load_weights(engine, named: dict, state: dict) -> None:
    """Whole weights `state` (by name, every process holding them) into the parameters `named`;
    where `engine` splits them, by every process (ZeRO-3 keeps rank 0's)."""
    import torch

    if isinstance(engine, fsdp.FsdpEngine):
        engine.load_weights(named, state)
        return
    with gathered(engine, named.values(), modifier_rank=0), torch.no_grad():
        for n, p in named.items():
            p.copy_(state[n])


def gathered(engine, params, modifier_rank: int | None = None):
    """A context in which every process holds `params` whole (stage 3; else nothing to do). Entered and
    left by every process together. `modifier_rank`: the process whose changes inside are kept."""
    if not sharded(engine):
        return contextlib.nullcontext()
    import deepspeed

    return deepspeed.zero.GatheredParameters(list(params), modifier_rank=modifier_rank)


@contextlib.contextmanager
def for_generation(engine, model):
    """Stage 3: `model` gathered whole in every process with DeepSpeed's forward hooks off, so that
    each process generates (or syncs a vLLM engine) alone, as TRL's `unwrap_model_for_generation`
    does; the hooks come back when it ends. Entered and left by every process together."""
    if not sharded(engine):
        yield
        return
    if isinstance(engine, fsdp.FsdpEngine):
        with engine.for_generation():
            yield
        return
    from trl.models.utils import add_hooks, remove_hooks

    with gathered(engine, model.parameters()):
        remove_hooks(engine)
        try:
            yield
        finally:
            add_hooks(engine)


class GenerationHold:
    """ZeRO-3 models held gathered for generation (`for_generation`) from the step's first rollout
    (`hold`) to its last (`release`): a policy's one model, or every agent of a multi-agent run."""

    def __init__(self):
        self._stack = None

    def hold(self, engines_and_models) -> None:
        """Gather each sharded (engine, model) pair, unless already held; every process together."""
        pairs = [(engine, model) for engine, model in engines_and_models if sharded(engine)]
        if self._stack is not None or not pairs:
            return
        self._stack = contextlib.ExitStack()
        for engine, model in pairs:
            self._stack.enter_context(for_generation(engine, model))

    def release(self) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None


def staging_dir(checkpoint_dir: str | Path, step: int) -> Path:
    return Path(checkpoint_dir) / f".zero-step-{step:05d}"


def save_partition(engine, checkpoint_dir: str | Path, step: int, name: str = "") -> Path:
    """`engine`'s checkpoint in the step's staging folder (in its subfolder `name`: one per agent of a
    multi-agent run), every process its part: a DeepSpeed engine through its Accelerator's
    `save_state` (the weights and every process's optimizer partition), an FSDP engine its shards
    of the weights and of the optimizer. Returns the staging folder."""
    root = staging_dir(checkpoint_dir, step)
    folder = root / name  # "": the folder itself
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(engine, fsdp.FsdpEngine):
        engine.save_partition(folder)
    else:
        _ACCELERATORS[engine].save_state(str(folder))
    return root


def check_partitions(engine, folder: str | Path, world: int) -> None:
    """A checkpoint's DeepSpeed files are those of a run of `world` processes: DeepSpeed's optimizer
    partition of each, its weights (stage 3: each process's part) and accelerate's random states of
    each. FSDP's: a folder of shards for the weights and one for the optimizer."""
    folder = Path(folder)
    if isinstance(engine, fsdp.FsdpEngine):  # torch.distributed.checkpoint checks the shards themselves
        missing = [f"{d}/.metadata" for d in fsdp.CHECKPOINT_FOLDERS if not (folder / d / ".metadata").is_file()]
        if missing:
            raise ValueError(
                f"FSDP checkpoint {folder} lacks {', '.join(missing)} (one written by an earlier debatelab holds "
                "the optimizer's shards alone)"
            )
        return
    if list(folder.glob("rank-*.pt")):
        raise ValueError(
            f"checkpoint {folder.parent} holds optimizer partitions written by an earlier debatelab (rank-R.pt), "
            "before DeepSpeed engines were checkpointed by accelerate's save_state"
        )
    # DeepSpeed's names (`engine._get_ckpt_name`, `_get_zero_ckpt_name`; "bf16_" before a bf16 run's)
    expected = ["*zero_pp_rank_{rank}_mp_rank_00_optim_states.pt", "random_states_{rank}.pkl"]
    expected.append(
        "zero_pp_rank_{rank}_mp_rank_00_model_states.pt" if sharded(engine) else "mp_rank_00_model_states.pt"
    )
    missing = sorted(
        {p.format(rank=r) for p in expected for r in range(world) if not list(folder.rglob(p.format(rank=r)))}
    )
    ranks = {int(re.search(r"_rank_(\d+)", f.name)[1]) for f in folder.rglob("*zero_pp_rank_*")}
    ranks |= {int(f.stem.rsplit("_", 1)[1]) for f in folder.glob("random_states_*.pkl")}
    if missing or not ranks <= set(range(world)):
        raise ValueError(
            f"DeepSpeed checkpoint {folder} is not one of {world} processes (it holds ranks {sorted(ranks)}"
            f"{'; missing ' + ', '.join(missing[:4]) if missing else ''}): resume with the same gpus, or delete "
            f"{folder.parent.parent} to start afresh"
        )


def load_partition(engine, folder: str | Path) -> None:
    """`engine` back from a checkpoint's folder (`check_partitions` passed), every process its part: a
    DeepSpeed engine through its Accelerator's `load_state` (weights, optimizer partition and fp32
    master weights), an FSDP engine its shards of the weights and of the optimizer."""
    folder = Path(folder)
    if isinstance(engine, fsdp.FsdpEngine):
        engine.load_partition(folder)
        return
    _ACCELERATORS[engine].load_state(str(folder))
