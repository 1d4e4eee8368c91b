"""Entry point of a training job in each process of `accelerate launch` (several GPUs):

    accelerate launch --num_processes N [--config_file config/accelerate/<...>.yaml] \
        -m debatelab.training.launch job.json

`job.json` names the job (`train_job`, or `train_agents_job` of a multi-agent run) and holds its
arguments (`stage.write_job_spec`). The launcher's environment
(RANK, WORLD_SIZE, MASTER_ADDR) gives the process group: NCCL on GPUs, Gloo on CPUs (there,
`python -m torch.distributed.run --nproc_per_node N`, since accelerate launches several CPU
processes only through MPI); the trainer wraps the policy in DDP.
"""
from __future__ import annotations

import os
import sys

from ..runlog import job_log


def init_process_group() -> int:
    """Join the launcher's process group (when there is more than one process); returns the rank."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return dist.get_rank() if dist.is_initialized() else 0


def main(argv: list[str] | None = None) -> None:
    from .stage import job_function, read_job_spec

    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        raise SystemExit("usage: python -m debatelab.training.launch job.json [log file]")
    rank = init_process_group()
    with job_log(args[1] if len(args) == 2 and rank == 0 else None):
        kind, job = read_job_spec(args[0])
        job_function(kind)(**job)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
