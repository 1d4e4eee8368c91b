"""Running a training job in one process or several (`launch_or_train`), on one node or several,
and the entry point of each process of `accelerate launch` (GPUs, or any run with a DeepSpeed
or FSDP config) or torchrun (CPU processes without one; `uses_accelerate`):

    accelerate launch --num_processes N [--config_file config/accelerate/<...>.yaml] \
        -m debatelab.training.core.launch job.json

`job.json` holds the arguments of the training job (`stage.train_job`, of rules `train` and
`train_agents` alike; `write_job_spec`). The launcher's environment (RANK, WORLD_SIZE,
MASTER_ADDR) gives the process group: NCCL on GPUs, Gloo on CPUs (there, `python -m
torch.distributed.run --nproc_per_node N`, since accelerate launches several CPU processes only
through MPI); the trainer wraps the policy in DDP.

Several nodes (a run's `nodes`), inside a SLURM allocation of that many nodes: the job, on the
allocation's first node, starts one `srun` task per node (`slurm_launch_command`); each task runs
this module with `--node`, which starts its node's launcher (`node_launch_command`) with the
node's rank (SLURM_NODEID), the first node as the main address and a port from the job id. The
job spec and the checkpoints are read and written on the shared filesystem the results live on.
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
from ..settings import TrainSettings
from ..stage import train_job
from .distributed import init_process_group

log = logging.getLogger(__name__)


def write_job_spec(path: str | Path, **job) -> None:
    """`train_job`'s arguments as JSON, for `python -m debatelab.training.core.launch` in each
    process of `accelerate launch`."""
    job = dict(job)
    job["agents"] = {name: {**spec.__dict__} for name, spec in job["agents"].items()}
    job["settings"] = job["settings"].to_dict()
    write_json_atomic({"arguments": {k: str(v) if isinstance(v, Path) else v for k, v in job.items()}}, path)


def read_job_spec(path: str | Path) -> dict:
    """`train_job`'s arguments from `write_job_spec`'s file."""
    job = json.loads(Path(path).read_text())["arguments"]
    job["agents"] = {name: AgentSpec(**value) for name, value in job["agents"].items()}
    job["settings"] = TrainSettings(**job["settings"])
    return job


def launch_or_train(
    *,
    processes: int = 1,
    nodes: int = 1,
    accelerate_config: str | None = None,
    log_path: str | None = None,
    **job,
):
    """Run a training job (`stage.train_job`'s arguments `job`) in this
    process, or with several processes (`processes` over all `nodes`): `accelerate launch` on GPUs
    (one per GPU) and with a DeepSpeed or FSDP config anywhere, else torchrun's Gloo processes on a CPU; over
    several nodes, one `srun` task per node of this SLURM allocation starts its node's share. The
    job's arguments travel as JSON beside the checkpoints. One process under a DeepSpeed or FSDP config
    is launched too (its engine reads the launcher's environment): bfloat16 weights then train on the
    engine's float32 masters, and the config is never ignored."""
    if nodes > 1:
        slurm_allocation(nodes)  # refused outside an allocation of that many nodes, before anything is written
        if processes % nodes:
            raise ValueError(f"training: {processes} processes do not divide among nodes = {nodes}")
    if processes <= 1 and nodes == 1 and not (accelerate_config and is_sharding_config(accelerate_config)):
        return train_job(**job)
    import subprocess

    spec = Path(job["checkpoint_dir"]) / "job.json"
    write_job_spec(spec, **job)
    entry = ["-m", "debatelab.training.core.launch"]
    logs = [str(log_path)] if log_path else []
    if nodes == 1:  # a free port: two jobs training on one machine at once must not meet on the default one
        cmd = node_launch_command(
            nodes=1,
            processes_per_node=processes,
            program=entry + [str(spec)] + logs,
            main_port=free_port(),
            accelerate_config=accelerate_config,
        )
    else:
        cmd = slurm_launch_command(nodes, processes // nodes, [str(spec)] + logs, accelerate_config)
    log.info("launching %d training processes on %d node(s): %s", processes, nodes, " ".join(cmd))
    subprocess.run(cmd, check=True)
    return pd.read_parquet(job["metrics_path"])


def uses_accelerate(accelerate_config: str | None, gpu: bool | None = None) -> bool:
    """Whether a node's processes start under `accelerate launch` (GPUs, or a DeepSpeed or FSDP
    config: accelerate exports its settings), else under torchrun (Gloo processes on a CPU)."""
    if gpu is None:
        import torch

        gpu = torch.cuda.is_available()
    return gpu or bool(accelerate_config and is_sharding_config(accelerate_config))


def node_launch_command(
    *,
    nodes: int,
    processes_per_node: int,
    program: list[str],
    node_rank: int = 0,
    main_address: str | None = None,
    main_port: int | None = None,
    accelerate_config: str | None = None,
    gpu: bool | None = None,
) -> list[str]:
    """The command that starts one node's `processes_per_node` processes, each running `program`
    (python arguments: `-m module ...`), as node `node_rank` of `nodes` whose rank-0 node listens at
    `main_address:main_port`: `accelerate launch` (`uses_accelerate`) or torchrun."""
    several = nodes > 1
    if uses_accelerate(accelerate_config, gpu):
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(nodes * processes_per_node)]
        cmd += ["--num_machines", str(nodes)]
        if several:
            cmd += ["--machine_rank", str(node_rank), "--main_process_ip", str(main_address)]
            if accelerate_config and _distributed_type(accelerate_config) == "DEEPSPEED":
                # else accelerate hands several machines to DeepSpeed's own pdsh runner, which drops
                # --machine_rank and starts every node from a hostfile; here srun already starts each node
                cmd += ["--deepspeed_multinode_launcher", "standard"]
        if main_port is not None:
            cmd += ["--main_process_port", str(main_port)]
        cmd += ["--config_file", str(accelerate_config)] if accelerate_config else ["--multi_gpu"]
    else:  # accelerate starts several CPU processes only through MPI (DeepSpeed's aside); torchrun gives Gloo processes
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes_per_node)]
        if several:
            cmd += ["--nnodes", str(nodes), "--node_rank", str(node_rank), "--master_addr", str(main_address)]
        if main_port is not None:
            cmd += ["--master_port", str(main_port)]
    return cmd + list(program)


def free_port() -> int:
    """A TCP port no process on this machine listens on now, for one node's process group."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def slurm_allocation(nodes: int) -> tuple[list[str], int | None]:
    """(the host names of this SLURM allocation, first node first; its CPUs per node, None when
    unknown), from SLURM's environment or, where the job step hid it (the Snakemake SLURM plugin
    keeps only SLURM_JOB_ID), from `scontrol show job`. A ValueError when this process runs outside
    an allocation of at least `nodes` nodes (a laptop, or a one-node job)."""
    import os
    import subprocess

    job = os.environ.get("SLURM_JOB_ID")
    count, listing = int(os.environ.get("SLURM_JOB_NUM_NODES", "0") or 0), os.environ.get("SLURM_JOB_NODELIST")
    cpus = int(os.environ["SLURM_CPUS_ON_NODE"]) if os.environ.get("SLURM_CPUS_ON_NODE") else None
    if job and not listing:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
        fields = dict(item.split("=", 1) for item in shown.split() if "=" in item)
        count, listing = int(fields.get("NumNodes", "0").split("-")[0] or 0), fields.get("NodeList")
        cpus = int(fields["NumCPUs"]) // max(count, 1) if fields.get("NumCPUs", "").isdigit() else None
    if not job or count < nodes:
        where = f"a SLURM job of {count} node(s)" if job else "not inside a SLURM job"
        raise ValueError(
            f"training: nodes = {nodes} runs in a SLURM allocation of {nodes} nodes (snakemake --profile "
            f"profiles/slurm submits it so); this process is {where}. Set the run's nodes: 1 to train on this machine"
        )
    hosts = subprocess.run(
        ["scontrol", "show", "hostnames", listing], capture_output=True, text=True, check=True
    ).stdout.split()
    return hosts or [listing], cpus


def slurm_launch_command(nodes: int, processes_per_node: int, job_args: list[str], accelerate_config=None) -> list[str]:
    """`srun` with one task per node of the allocation, each running `python -m
    debatelab.training.core.launch --node ...` (`node_main`), which starts its node's processes; the
    first node is the main address, the port comes from the job id."""
    import os

    hosts, cpus = slurm_allocation(nodes)
    port = 29500 + int(os.environ.get("SLURM_JOB_ID", "0")) % 10000
    cmd = ["srun", "--nodes", str(nodes), "--ntasks", str(nodes), "--ntasks-per-node", "1", "--kill-on-bad-exit=1"]
    if cpus:  # a step's task gets one CPU unless told: the node's processes need them all
        cmd += ["--cpus-per-task", str(cpus)]
    cmd += [sys.executable, "-m", "debatelab.training.core.launch", "--node", str(nodes), str(processes_per_node)]
    cmd += [hosts[0], str(port), str(accelerate_config or "")]
    return cmd + list(job_args)


def node_main(args: list[str]) -> None:
    """One node's task of a several-node run: `NODES PROCESSES_PER_NODE MAIN_ADDRESS PORT ACCELERATE_CONFIG
    job.json [log]`, its rank from SLURM (SLURM_NODEID)."""
    import os
    import socket
    import subprocess

    nodes, per_node, address, port, accelerate_config, *job_args = args
    cmd = node_launch_command(
        nodes=int(nodes),
        processes_per_node=int(per_node),
        program=["-m", "debatelab.training.core.launch", *job_args],
        node_rank=int(os.environ["SLURM_NODEID"]),
        main_address=address,
        main_port=int(port),
        accelerate_config=accelerate_config or None,
    )
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    print(
        f"debatelab: node {os.environ['SLURM_NODEID']} of {nodes} ({node}): {' '.join(cmd)}",
        file=sys.stderr,
        flush=True,
    )
    subprocess.run(cmd, check=True)


def _distributed_type(path: str | Path) -> str | None:
    """An accelerate config file's `distributed_type` (`gpu_plan.accelerate_distributed_type`, which
    reads the file for the GPU plans); a FileNotFoundError naming a missing file."""
    from ...gpu_plan import accelerate_distributed_type

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"accelerate_config {path}: no such file")
    return accelerate_distributed_type(str(path))


def is_sharding_config(path: str | Path) -> bool:
    """Whether an accelerate config file shards the training state: `distributed_type: DEEPSPEED`
    (ZeRO, any stage) or `FSDP`."""
    return _distributed_type(path) in ("DEEPSPEED", "FSDP")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--node"]:
        return node_main(args[1:])
    if len(args) not in (1, 2):
        raise SystemExit(
            "usage: python -m debatelab.training.core.launch job.json [log file]\n"
            "       python -m debatelab.training.core.launch --node NODES PROCESSES_PER_NODE MAIN_ADDRESS PORT "
            "ACCELERATE_CONFIG job.json [log file]"
        )
    rank = init_process_group()
    with job_log(args[1] if len(args) == 2 and rank == 0 else None):
        train_job(**read_job_spec(args[0]))
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
