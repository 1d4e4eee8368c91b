"""Running a training job in one process or several (`launch_or_train`), and the entry point of
each process of `accelerate launch` (several GPUs):

    accelerate launch --num_processes N [--config_file config/accelerate/<...>.yaml] \
        -m debatelab.training.core.launch job.json

`job.json` names the job (`JOBS`: "train", or "train_agents" of a multi-agent run) and holds its
arguments (`write_job_spec`); a job is found by its kind, never by a module path written in the
file. The launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR) gives the process group: NCCL on
GPUs, Gloo on CPUs (there, `python -m torch.distributed.run --nproc_per_node N`, since accelerate
launches several CPU processes only through MPI); the trainer wraps the policy in DDP.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd

from ...io import write_json_atomic
from ...llm.agent import AgentSpec
from ...runlog import job_log
from ..multi_agent_stage import train_agents_job
from ..settings import TrainSettings
from ..stage import train_job
from .distributed import init_process_group

log = logging.getLogger(__name__)

#: The jobs a training process can run: "train" (one policy), "train_agents" (every agent of a debate).
JOBS = {"train": train_job, "train_agents": train_agents_job}


def job_function(kind: str):
    try:
        return JOBS[kind]
    except KeyError:
        raise ValueError(f"training job kind {kind!r}: expected one of {list(JOBS)}") from None


def write_job_spec(path: str | Path, *, job_kind: str = "train", **job) -> None:
    """A job's arguments as JSON, for `python -m debatelab.training.core.launch` in each process of
    `accelerate launch`; `job_kind` names the function (`JOBS`)."""
    job = dict(job)
    if "policy" in job:
        job["policy"] = {**job["policy"].__dict__}
    if "agents" in job:
        job["agents"] = {name: {**spec.__dict__} for name, spec in job["agents"].items()}
    job["settings"] = job["settings"].to_dict()
    write_json_atomic(
        {"job": job_kind, "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in job.items()}}, path
    )


def read_job_spec(path: str | Path) -> tuple[str, dict]:
    """(job kind, its arguments) of `write_job_spec`'s file."""
    spec = json.loads(Path(path).read_text())
    job = spec["arguments"]
    if "policy" in job:
        job["policy"] = AgentSpec(**job["policy"])
    if "agents" in job:
        job["agents"] = {name: AgentSpec(**value) for name, value in job["agents"].items()}
    job["settings"] = TrainSettings(**job["settings"])
    return spec["job"], job


def launch_or_train(
    *,
    processes: int = 1,
    accelerate_config: str | None = None,
    log_path: str | None = None,
    job_kind: str = "train",
    **job,
):
    """Run a training job (`train_job`, or `train_agents_job` with `job_kind="train_agents"`) in this
    process, or with several processes: `accelerate launch` on GPUs (one per GPU) and with a
    DeepSpeed config anywhere, else torchrun's Gloo processes on a CPU. The job's arguments travel
    as JSON beside the checkpoints."""
    if processes <= 1:
        return job_function(job_kind)(**job)
    import subprocess

    import torch

    spec = Path(job["checkpoint_dir"]) / "job.json"
    write_job_spec(spec, job_kind=job_kind, **job)
    if torch.cuda.is_available() or (accelerate_config and is_deepspeed_config(accelerate_config)):
        cmd = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
        ]
        cmd += ["--config_file", str(accelerate_config)] if accelerate_config else ["--multi_gpu"]
    else:  # accelerate starts several CPU processes only through MPI (DeepSpeed's aside); torchrun gives Gloo processes
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    cmd += ["-m", "debatelab.training.core.launch", str(spec)] + ([str(log_path)] if log_path else [])
    log.info("launching %d training processes: %s", processes, " ".join(cmd))
    subprocess.run(cmd, check=True)
    return pd.read_parquet(job["metrics_path"])


def is_deepspeed_config(path: str | Path) -> bool:
    """Whether an accelerate config file runs DeepSpeed (`distributed_type: DEEPSPEED`)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"accelerate_config {path}: no such file")
    return str((yaml.safe_load(path.read_text()) or {}).get("distributed_type", "")).upper() == "DEEPSPEED"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        raise SystemExit("usage: python -m debatelab.training.core.launch job.json [log file]")
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
