"""PyTorch FSDP2 (`fully_shard`) for data-parallel training: every weight, its gradient and its
Adam states split among the processes (what DeepSpeed ZeRO-3 splits), with PyTorch's own
sharding instead of DeepSpeed's.

Switched on by `accelerate launch` with an FSDP config of `fsdp_version: 2`
(`config/accelerate/fsdp2_8gpu.yaml`): accelerate exports the config's fields (`ACCELERATE_USE_FSDP`,
`FSDP_*`), `accelerate.utils.FullyShardedDataParallelPlugin` reads them back, and `FsdpEngine`
wraps the model as accelerate's `fsdp2_prepare_model` does: each unit of the plugin's wrap policy
(a decoder layer) its own FSDP unit, then the whole model. accelerate's `Accelerator` runs FSDP on
accelerators only (on CPUs it ignores the plugin); `fully_shard` itself runs on CPU processes with
Gloo, which is where the tests check it.

`FsdpEngine` has what the trainer asks of a DeepSpeed engine (`strategy.StepStrategy`, `zero.py`):
the micro-batch boundary (gradients are reduce-scattered, averaged over the processes, in the last
micro-batch's backward pass), the optimizer step with the run's clipping, the whole model in
every process for generation (each unit unsharded, no gathering inside the forward passes, so
each process generates alone), the weights gathered whole for the saved model, and checkpoints of
each process's shards of the weights and of the optimizer state, written and read by the functions
accelerate's `save_state` / `load_state` call for FSDP (`save_fsdp_model`, `save_fsdp_optimizer`,
`torch.distributed.checkpoint` under `SHARDED_STATE_DICT`).

16-bit weights: the trained weights are kept in float32 (the master copy that DeepSpeed keeps too)
and all-gathered in the weights' 16-bit dtype for the forward passes; gradients are averaged in
float32 (`MixedPrecisionPolicy`).
"""

from __future__ import annotations

import contextlib
import logging
import os

log = logging.getLogger(__name__)

# what accelerate's save_fsdp_model and save_fsdp_optimizer name the shards' folders (model and optimizer 0)
CHECKPOINT_FOLDERS = ("pytorch_model_fsdp_0", "optimizer_0")


def requested() -> bool:
    """Whether this process was started by `accelerate launch` with an FSDP config."""
    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def unsupported(
    version, offload: bool, ram_efficient_loading: bool, state_dict_type: str = "SHARDED_STATE_DICT"
) -> str | None:
    """Why this engine doesn't run these FSDP settings (None: it does): the config's check at the dry
    run (`config.Experiment.accelerate_config`) and the launcher's (`plugin`)."""
    if str(version) != "2":
        return f"fsdp_version {version}: training runs FSDP2 (fsdp_config: fsdp_version: 2)"
    if str(state_dict_type).upper() != "SHARDED_STATE_DICT":
        return (
            f"fsdp_state_dict_type {state_dict_type} is not supported: checkpoints are SHARDED_STATE_DICT "
            "(each process writes its shards; the trained model is saved whole all the same)"
        )
    if offload:
        return "fsdp_offload_params true is not supported (the weights stay on the GPUs)"
    if ram_efficient_loading:
        return "fsdp_cpu_ram_efficient_loading true is not supported (each process loads the model)"
    return None


def plugin():
    """The launcher's FSDP settings (`FullyShardedDataParallelPlugin` from accelerate's environment);
    a ValueError for what this engine doesn't run."""
    from accelerate.utils import FullyShardedDataParallelPlugin

    settings = FullyShardedDataParallelPlugin()
    offload = type(settings.cpu_offload).__name__ == "CPUOffloadPolicy"
    why = unsupported(settings.fsdp_version, offload, settings.cpu_ram_efficient_loading, settings.state_dict_type.name)
    if why:
        raise ValueError(f"accelerate config: {why}")
    return settings


class FsdpEngine:
    """`model` sharded with FSDP2 over all the processes, and `optimizer` (built over the model's
    parameters before; its parameters are swapped for the sharded ones, so the schedule built on it
    still drives it)."""

    def __init__(self, model, optimizer, settings, world: int):
        import torch
        from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
        from accelerate.utils.other import get_module_children_bottom_up
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

        if optimizer.state:
            raise ValueError("FSDP wraps a model before its optimizer's first step")
        config = plugin()
        names = {id(p): n for n, p in model.named_parameters()}
        groups = [[names[id(p)] for p in group["params"]] for group in optimizer.param_groups]
        weights_dtype = next(model.parameters()).dtype
        precision = MixedPrecisionPolicy()
        if weights_dtype in (torch.bfloat16, torch.float16):
            for p in model.parameters():
                if p.requires_grad:
                    p.data = p.data.float()
            precision = MixedPrecisionPolicy(param_dtype=weights_dtype, reduce_dtype=torch.float32)
        mesh = init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world,))
        config.set_auto_wrap_policy(model)
        wraps = fsdp2_prepare_auto_wrap_policy(config, model)
        self.reshard_after_forward = {}  # each FSDP unit -> its setting, put back after generation
        for module in get_module_children_bottom_up(model)[:-1]:
            if wraps is not None and wraps(module) and not isinstance(module, FSDPModule):
                fully_shard(module, mesh=mesh, mp_policy=precision, reshard_after_forward=config.reshard_after_forward)
                self.reshard_after_forward[module] = config.reshard_after_forward
        # the root keeps its own weights (embeddings, head) between forward and backward, as FSDP's default does
        fully_shard(model, mesh=mesh, mp_policy=precision, reshard_after_forward=False)
        self.reshard_after_forward[model] = False
        sharded = dict(model.named_parameters())
        for group, members in zip(optimizer.param_groups, groups):
            group["params"] = [sharded[n] for n in members]
        self.module, self.optimizer, self.plugin = model, optimizer, config
        self.trainable = [p for group in optimizer.param_groups for p in group["params"]]
        self.max_grad_norm = float(settings.max_grad_norm or 0.0)
        log.info(
            "FSDP2 over %d processes: %d units, weights %s%s",
            world,
            len(self.reshard_after_forward),
            str(weights_dtype).removeprefix("torch."),
            " (float32 master weights)" if precision.param_dtype is not None else "",
        )

    def __call__(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    # -- what the optimizer step asks (`strategy.StepStrategy`) ----------------------------------
    def set_gradient_accumulation_boundary(self, last: bool) -> None:
        """Gradients are reduce-scattered in the backward pass of the step's last micro-batch only."""
        self.module.set_requires_gradient_sync(last)

    def backward(self, loss, scale_wrt_gas: bool = False) -> None:
        loss.backward()

    def step(self) -> None:
        """Clip at the run's `max_grad_norm` (the norm over every process's shard), step, zero."""
        import torch

        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.trainable, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    # -- whole weights -------------------------------------------------------------------------
    @contextlib.contextmanager
    def for_generation(self):
        """The whole model in every process, left whole after each forward pass, so each process
        generates alone; split again when it ends. Entered and left by every process together."""
        for unit in self.reshard_after_forward:
            unit.unshard()
            unit.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for unit, reshard in self.reshard_after_forward.items():
                unit.reshard()
                unit.set_reshard_after_forward(reshard, recurse=False)

    @staticmethod
    def full_weights(named: dict) -> dict:
        """`named` (parameters by name) whole, as new tensors; every process calls it (all-gathers)."""
        from torch.distributed.tensor import DTensor

        return {n: p.full_tensor() if isinstance(p, DTensor) else p.detach().clone() for n, p in named.items()}

    @staticmethod
    def load_weights(named: dict, state: dict) -> None:
        """Whole weights `state` (every process holds them) into the shards of `named`."""
        import torch
        from torch.distributed.tensor import DTensor, distribute_tensor

        with torch.no_grad():
            for n, p in named.items():
                value = state[n].to(device=p.device, dtype=p.dtype)
                if isinstance(p, DTensor):  # this process's shard of it, cut here (no communication)
                    value = distribute_tensor(value, p.device_mesh, p.placements, src_data_rank=None)
                p.copy_(value)

    # -- checkpoints ----------------------------------------------------------------------------
    def save_partition(self, folder) -> None:
        """Every process's shards of the weights and of the optimizer state into `folder`, as
        accelerate's `save_state` saves an FSDP model (`pytorch_model_fsdp_0/`, `optimizer_0/`:
        `torch.distributed.checkpoint` files, which `accelerate merge-weights` makes whole)."""
        from accelerate import PartialState
        from accelerate.utils.fsdp_utils import save_fsdp_model, save_fsdp_optimizer

        save_fsdp_model(self.plugin, PartialState(), self.module, str(folder))
        save_fsdp_optimizer(self.plugin, PartialState(), self.optimizer, self.module, str(folder))

    def load_partition(self, folder) -> None:
        """This process's shards back, as accelerate's `load_state` loads an FSDP model."""
        from accelerate import PartialState
        from accelerate.utils.fsdp_utils import load_fsdp_model, load_fsdp_optimizer

        load_fsdp_model(self.plugin, PartialState(), self.module, str(folder))
        load_fsdp_optimizer(self.plugin, PartialState(), self.optimizer, self.module, str(folder))
