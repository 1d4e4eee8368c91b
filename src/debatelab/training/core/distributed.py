"""Several training processes (data parallel, `accelerate launch` or torchrun): this process's rank
and the process count, and the collectives the trainers use. With one process every function is
the identity (no process group needed).

* `init_process_group`: join the launcher's group (NCCL on GPUs, Gloo on CPUs);
* `rank_and_world`, `default_device`, `barrier`;
* `all_reduce` (a number's sum or max over the processes), `pooled` (mean and std of every
  process's values), `gathered` (every process's items in the batch's order);
* `data_parallel`: an agent's trained weights in accelerate's DDP wrapper (the model itself, or
  one adapter of a base that several agents share).
"""

from __future__ import annotations

import os

import numpy as np

from .zero import requested


def init_process_group() -> int:
    """Join the launcher's process group (when there is more than one process, or one under a DeepSpeed
    or FSDP config: its engine runs over a group of one); returns the rank."""
    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "0"))
    if (world > 1 or (world == 1 and requested())) and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank() if dist.is_initialized() else 0


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes): (0, 1) outside a process group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def default_device(rank: int = 0) -> str:
    """The training process's device: its own GPU (by rank) when there are GPUs, else the CPU."""
    import torch

    return f"cuda:{rank % max(torch.cuda.device_count(), 1)}" if torch.cuda.is_available() else "cpu"


def barrier(world: int) -> None:
    """Wait for every process (nothing to wait for with one)."""
    if world > 1:
        import torch.distributed as dist

        dist.barrier()


def all_reduce(value: float, op: str = "sum") -> float:
    """`value` summed (or its max, `op="max"`) over the processes; `value` itself with one process."""
    import torch
    import torch.distributed as dist

    rank, world = rank_and_world()
    if world == 1:
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return float(tensor.item())


def pooled(values, *, std: bool = False):
    """The mean (and standard deviation) of `values` over every process's values."""
    values = np.asarray(values, dtype=float).ravel()
    count = all_reduce(values.size)
    total = all_reduce(float(values.sum()))
    mean = total / count if count else float("nan")
    if not std:
        return mean
    squares = all_reduce(float(((values - mean) ** 2).sum()))
    return mean, (squares / count) ** 0.5 if count else float("nan")


def gathered(local: list, rank: int, world: int) -> list:
    """Every process's `local` items (process r's j-th item is the batch's item r + j·world), in the
    batch's order."""
    if world == 1:
        return list(local)
    import torch.distributed as dist

    parts: list = [None] * world
    dist.all_gather_object(parts, list(local))
    out = [None] * sum(len(part) for part in parts)
    for r, part in enumerate(parts):
        out[r::world] = part
    return out


def data_parallel(model, parameters: dict | None = None):
    """`model` wrapped for data parallelism by accelerate (`Accelerator.prepare_model`): torch's
    `DistributedDataParallel` over this launch's process group, as accelerate makes it on GPUs
    (MULTI_GPU, NCCL) and on CPU processes (MULTI_CPU, Gloo). The model stays where it is, and
    accelerate's mixed precision stays off: the run's `dtype` and `autocast` settings decide. The
    gradients live in DDP's buckets (`gradient_as_bucket_view`); buffers are not broadcast.

    `parameters`: only these of `model`'s weights (by name: one agent's LoRA adapter on a base that
    other agents' adapters share). The wrapper then holds them alone and runs `model`'s forward as
    is, so it reduces that agent's gradients and none of the others' (they must require a gradient
    while it is built: DDP keeps those)."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, DistributedType

    accelerator = Accelerator(
        cpu=not torch.cuda.is_available(),
        mixed_precision="no",
        device_placement=False,
        # the gradients are views into DDP's reduction buckets, not a second copy beside them (as
        # `gpu_plan.training_state_bytes` counts them: one copy; `benchmarks/ddp_memory.py`)
        # and the buffers (rotary frequencies, loaded alike everywhere and never trained) are not sent
        # from rank 0 before every forward
        kwargs_handlers=[DistributedDataParallelKwargs(gradient_as_bucket_view=True, broadcast_buffers=False)],
    )
    if accelerator.distributed_type not in (DistributedType.MULTI_GPU, DistributedType.MULTI_CPU):
        raise RuntimeError(
            f"training: data parallelism over {rank_and_world()[1]} processes, but accelerate sees "
            f"{accelerator.distributed_type.value}: start the processes with accelerate launch or torchrun"
        )
    module = model if parameters is None else _holding(model, parameters)
    return accelerator.prepare_model(module, device_placement=False)


def _holding(model, parameters: dict):
    """A module whose parameters are `parameters` (shared with `model`, not copied) and whose forward is
    `model`'s."""
    import torch

    class Holding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            object.__setattr__(self, "inner", model)  # not a submodule: its other weights stay outside
            self.held = torch.nn.ParameterList(parameters.values())

        def forward(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

        def get_output_embeddings(self):  # the packed update gathers the head's inputs (`loss.packed_token_logprobs`)
            return self.inner.get_output_embeddings()

    return Holding()
