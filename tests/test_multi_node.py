"""A training run over several nodes (`nodes: N`, `gpus` on each): refused outside a SLURM
allocation, submitted as N nodes with one srun task each, each task starting its node's launcher
with its machine rank; and two launchers on one machine (node ranks 0 and 1, localhost as the main
address) train as one node with two processes does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from types import SimpleNamespace

import distributed_helpers
import pytest
import torch
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import ConfigError, Experiment
from debatelab.config_schema import validate_config
from debatelab.training.core import launch


def test_a_several_node_run_is_refused_outside_a_slurm_allocation_of_that_many_nodes(monkeypatch, tmp_path):
    for key in ("SLURM_JOB_ID", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ValueError, match=r"nodes = 2 runs in a SLURM allocation of 2 nodes .* not inside a SLURM job"):
        launch.launch_or_train(processes=4, nodes=2, checkpoint_dir=str(tmp_path), metrics_path="m.parquet")
    assert not list(tmp_path.iterdir())  # refused before the job spec is written
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu1")
    with pytest.raises(ValueError, match=r"this process is a SLURM job of 1 node\(s\)"):
        launch.launch_or_train(processes=4, nodes=2, checkpoint_dir=str(tmp_path), metrics_path="m.parquet")


def test_the_job_starts_one_srun_task_per_node_each_launching_its_node_with_its_rank(monkeypatch, tmp_path):
    """In an allocation of nodes gpu[3-4]: `srun` one task per node, every CPU of the node to it,
    each running `launch --node`, which starts accelerate (GPUs) or torchrun (CPUs) as machine rank
    SLURM_NODEID with gpu3 as the main address."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"  # what `scontrol show hostnames gpu[3-4]` prints
    scontrol.write_text('#!/bin/sh\n[ "$1 $2 $3" = "show hostnames gpu[3-4]" ] && printf "gpu3\\ngpu4\\n"\n')
    scontrol.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "123456")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[3-4]")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "64")
    zero2 = str(REPO_ROOT / "config/accelerate/zero2_8gpu.yaml")
    cmd = launch.slurm_launch_command(2, 8, ["job.json", "train.log"], zero2)
    srun = cmd[: cmd.index(sys.executable)]
    assert srun == ["srun", "--nodes", "2", "--ntasks", "2", "--ntasks-per-node", "1", "--kill-on-bad-exit=1",
                    "--cpus-per-task", "64"]  # fmt: skip
    node_args = cmd[cmd.index("--node") + 1 :]
    assert node_args == ["2", "8", "gpu3", str(29500 + 123456 % 10000), zero2, "job.json", "train.log"]

    started = []
    monkeypatch.setattr(subprocess, "run", lambda command, check: started.append(command))
    monkeypatch.setattr(launch, "uses_accelerate", lambda config, gpu=None: gpu is not False)  # a GPU node
    monkeypatch.setenv("SLURM_NODEID", "1")
    launch.main(["--node", *node_args])
    (node,) = started
    assert node[node.index("--num_processes") + 1] == "16" and node[node.index("--num_machines") + 1] == "2"
    assert node[node.index("--machine_rank") + 1] == "1" and node[node.index("--main_process_ip") + 1] == "gpu3"
    assert node[node.index("--config_file") + 1] == zero2
    # each node started by srun itself: accelerate's default hands DeepSpeed over several machines to pdsh
    assert node[node.index("--deepspeed_multinode_launcher") + 1] == "standard"
    assert node[-4:] == ["-m", "debatelab.training.core.launch", "job.json", "train.log"]
    fsdp = launch.node_launch_command(
        nodes=2, processes_per_node=8, program=["-m", "x"], node_rank=1, main_address="gpu3", main_port=1,
        accelerate_config=str(REPO_ROOT / "config/accelerate/fsdp2_8gpu.yaml"), gpu=True,
    )  # fmt: skip
    assert "--deepspeed_multinode_launcher" not in fsdp and fsdp[fsdp.index("--machine_rank") + 1] == "1"
    cpu = launch.node_launch_command(
        nodes=2, processes_per_node=1, program=["-m", "x"], node_rank=0, main_address="gpu3", main_port=1, gpu=False
    )
    assert cpu[2:] == ["torch.distributed.run", "--nproc_per_node", "1", "--nnodes", "2", "--node_rank", "0",
                       "--master_addr", "gpu3", "--master_port", "1", "-m", "x"]  # fmt: skip


def test_one_node_s_launcher_listens_on_the_free_port_it_is_given():
    """`launch_or_train` gives each job's process group a port no process listens on (`free_port`), so
    two training jobs on one machine don't meet on torchrun's or accelerate's default port."""
    import socket

    port = launch.free_port()
    with socket.socket() as check:
        check.bind(("127.0.0.1", port))  # free indeed
    cpu = launch.node_launch_command(nodes=1, processes_per_node=2, program=["-m", "x"], main_port=port, gpu=False)
    assert cpu[cpu.index("--master_port") + 1] == str(port) and "--nnodes" not in cpu
    gpu = launch.node_launch_command(nodes=1, processes_per_node=2, program=["-m", "x"], main_port=port, gpu=True)
    assert gpu[gpu.index("--main_process_port") + 1] == str(port) and "--machine_rank" not in gpu


def _two_node_config(nodes=2, **run):
    config = yaml.safe_load((REPO_ROOT / "config/experiments/sdrl.yaml").read_text())
    config["training"]["runs"]["dapo"].update(nodes=nodes, **run)
    return config


def test_a_run_s_nodes_are_checked_and_planned_per_node():
    from debatelab import gpu_plan as gp

    exp = Experiment(validate_config(_two_node_config()))
    assert "nodes" not in exp.train_settings("dapo")  # where it runs, not what it trains
    plan = gp.experiment_job_plan(exp, "train", {"run": "dapo"}, gp.GpuType("h800", 80 * 2**30, 8))
    assert (plan.gpus, plan.nodes, plan.total_gpus) == (8, 2, 16)
    assert plan.describe().startswith("train sdrl/dapo needs 2 nodes of 8 × 80 GB h800 GPUs")
    with pytest.raises(
        ConfigError,
        match=r"training\.runs\.dapo\.dapo\.prompts_per_step = 256 must divide among nodes × gpus = 3 × 8 processes",
    ):
        Experiment(validate_config(_two_node_config(nodes=3)))
    config = yaml.safe_load((REPO_ROOT / "config/experiments/umad.yaml").read_text())
    config["training"]["runs"]["umad"].update(nodes=2, parallelism="model")
    with pytest.raises(ConfigError, match=r"training\.runs\.umad\.nodes = 2: parallelism 'model' runs one process"):
        Experiment(validate_config(config))


def test_sbatch_receives_two_nodes_and_no_task_per_gpu_for_a_two_node_run(tmp_path):
    """The dry run with the SLURM profile gives the two-node train job `nodes=2`, `gpu=16` (the
    plugin's `--gpus` counts the whole job), `tasks_per_gpu=0`, `tasks=2` and `mpi=srun` (its job step
    then runs the script in the batch step, which starts the tasks); the plugin turns those resources
    into the sbatch call below: 2 nodes, 2 tasks, 16 H800s, no task per GPU."""
    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    config = tmp_path / "two_nodes.yaml"
    config.write_text(yaml.safe_dump(_two_node_config()))
    proc = snakemake(
        tmp_path / "work", "-n", "--profile", str(REPO_ROOT / "profiles/slurm"), "--configfile", str(config),
        "--until", "train",
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    block = re.search(r"rule train:\n(?:.*\n)*?\s+wildcards: run=dapo\n\s+resources: (.*)", out)
    assert block, out[-3000:]
    resources = dict(kv.split("=", 1) for kv in re.findall(r"(\w+=[^,]+)", block.group(1)))
    assert (resources["nodes"], resources["gpu"], resources["tasks_per_gpu"]) == ("2", "16", "0")
    assert (resources["tasks"], resources["mpi"]) == ("2", "srun")  # one task per node, started by the job itself

    class Resources(SimpleNamespace):
        def get(self, key, default=None):
            return getattr(self, key, default)

    job = SimpleNamespace(
        threads=8,
        resources=Resources(
            nodes=2, gpu=16, gpu_model="h800", tasks_per_gpu=0, tasks=2, mpi="srun", cpus_per_task=8, mem_mb=96000
        ),
    )
    params = {"run_uuid": "x", "slurm_logfile": "x.log", "comment_str": "train", "account": "-A a",
              "partition": "-p gpu_h800", "workdir": None}  # fmt: skip
    call = get_submit_command(job, params) + set_gres_string(job)
    assert "--nodes=2" in call and "--ntasks=2" in call and "--gpus=h800:16" in call, call
    assert "--ntasks-per-gpu" not in call, call


def _two_launchers(program: list[str], port: int, env: dict, accelerate_config: str | None = None) -> None:
    """Node ranks 0 and 1 of a two-node run, one process each, started side by side on this machine."""
    nodes = [
        subprocess.Popen(
            launch.node_launch_command(
                nodes=2,
                processes_per_node=1,
                program=program,
                node_rank=rank,
                main_address="127.0.0.1",
                main_port=port,
                accelerate_config=accelerate_config,
                gpu=False,
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    for node in nodes:
        _, err = node.communicate(timeout=600)
        assert node.returncode == 0, err[-3000:]


@pytest.mark.slow
def test_two_launchers_on_one_machine_train_as_one_node_with_two_processes(tmp_path, char_model_dir):
    """`node_launch_command` for node ranks 0 and 1 (one process each, localhost the main address)
    started side by side: the two steps of `ddp_update` equal those of one launcher with two processes.
    Under a DeepSpeed config (ZeRO-3) or an FSDP2 one, the two nodes start through `accelerate launch`,
    each as its own machine rank, and make the same update as one node's DDP processes (within 1e-4,
    the sharded engines' tolerance)."""
    from safetensors.torch import load_file

    env = {**os.environ, "PYTHONPATH": distributed_helpers.tests_path(), "OMP_NUM_THREADS": "1"}
    outs = {name: tmp_path / f"{name}.safetensors" for name in ("one_node", "two_nodes", "zero3", "fsdp2")}
    one = launch.node_launch_command(
        nodes=1,
        processes_per_node=2,
        program=["-m", "ddp_update", str(char_model_dir), str(outs["one_node"])],
        gpu=False,
    )
    one[one.index("--nproc_per_node") : one.index("--nproc_per_node")] = ["--master_port", "29611"]
    proc = subprocess.run(one, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _two_launchers(["-m", "ddp_update", str(char_model_dir), str(outs["two_nodes"])], 29612, env)
    for port, engine in ((29613, "zero3"), (29614, "fsdp2")):
        config = str(REPO_ROOT / f"config/accelerate/{engine}_8gpu.yaml")
        _two_launchers(["-m", "ddp_update", str(char_model_dir), str(outs[engine])], port, env, config)
    one_node, two_nodes = load_file(outs["one_node"]), load_file(outs["two_nodes"])
    assert one_node.keys() == two_nodes.keys() and int(two_nodes["steps_made"]) == 2
    grads = [k for k in one_node if k.startswith("grad.")]
    assert len(grads) > 5 and any(float(one_node[k].abs().max()) > 1e-4 for k in grads)
    # the same ranks, the same Gloo all-reduce: the same numbers
    assert all(torch.equal(one_node[k], two_nodes[k]) for k in one_node)
    weights = [k for k in one_node if not k.startswith("grad.") and k != "steps_made"]
    for engine in ("zero3", "fsdp2"):  # the engines keep the gradients in their shards
        sharded = load_file(outs[engine])
        assert int(sharded["steps_made"]) == 2 and set(weights) <= set(sharded), engine
        # lr 1e-2: every weight moved by ~2e-2; the engines' sums differ from DDP's in order only
        assert max(float((one_node[k] - sharded[k]).abs().max()) for k in weights) < 1e-4, engine


def test_a_two_node_run_stops_before_any_job_on_the_local_executor(tmp_path):
    """Run (not dry-run) on the laptop profile, a config with a two-node run stops at its start, naming
    the run and what to do, before any job (the download included) has run."""
    config = tmp_path / "two_nodes.yaml"
    config.write_text(yaml.safe_dump(_two_node_config()))
    proc = snakemake(
        tmp_path / "work", "--profile", str(REPO_ROOT / "profiles/local"), "--configfile", str(config),
        "--until", "train", check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "training.runs.dapo.nodes = 2: a run over several nodes is submitted to SLURM" in out, out[-3000:]
    assert "this run's executor is local" in out and not (tmp_path / "work/data").exists()
