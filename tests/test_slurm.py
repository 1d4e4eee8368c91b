"""The workflow through a real single-node SLURM: slurmctld, slurmd and munge started here.

Every job must reach SLURM (sbatch), and GPU-heavy rules must carry their GPU request
(`--gpus=a100:1`, served by a fake a100 GRES). Status comes from squeue: no accounting daemon.
Snakemake starts through tests/snakemake_on_test_slurm.py: the real CLI and plugin, its fixed
waits (before each sbatch, between status polls) shortened for a one-node cluster.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import require
from workflow_helpers import REPO_ROOT, snakemake

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


@pytest.fixture(scope="module")
def slurm_cluster():
    require(shutil.which("slurmctld") is not None, "slurm-wlm is not installed (tools/setup.sh installs it as root)")
    require(os.geteuid() == 0, "starting slurmctld/slurmd needs root")
    setup = subprocess.run(
        ["bash", str(REPO_ROOT / "tools/setup_local_slurm.sh")], capture_output=True, text=True, timeout=300
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    deadline = time.time() + 60
    while time.time() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True).stdout
        if "idle" in state or "mix" in state:
            break
        time.sleep(1)
    else:
        pytest.fail(f"SLURM node never became idle: {state!r}")
    yield
    subprocess.run(["bash", str(REPO_ROOT / "tools/stop_local_slurm.sh")])


def _squeue_jobs() -> list[dict]:
    out = subprocess.run(
        ["squeue", "--states=all", "-h", "-O", "JobID:|,Partition:|,State:|,Comment:|,tres-per-job:|"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    jobs = []
    for line in out.strip().splitlines():
        job_id, partition, state, comment, tres = line.split("|")[:5]
        jobs.append({"id": job_id, "partition": partition, "state": state, "comment": comment, "tres": tres})
    return jobs


def _test_profile(tmp_path) -> Path:
    """The node has 2 CPUs and ~20 GB: a copy of the real profile with requests shrunk to fit it;
    partitions and GPU types stay exactly as the profile sets them (GPU counts come from the plans)."""
    profile = yaml.safe_load((REPO_ROOT / "profiles/slurm/config.yaml").read_text())
    for resources in [profile["default-resources"], *profile["set-resources"].values()]:
        resources.update({k: v for k, v in (("mem_mb", 3000), ("cpus_per_task", 1), ("runtime", 30)) if k in resources})
    profile["set-threads"] = {rule: 1 for rule in profile.get("set-threads", {})}
    profile.update(
        {"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": 1, "latency-wait": 5, "jobs": 4}
    )
    test_profile = tmp_path / "profile"
    test_profile.mkdir()
    (test_profile / "config.yaml").write_text(yaml.safe_dump(profile))
    return test_profile


def test_dag_runs_through_real_slurm_with_gpu_requests(slurm_cluster, tmp_path):
    before = {j["id"] for j in _squeue_jobs()}
    test_profile = _test_profile(tmp_path)
    workdir = tmp_path / "work"
    workdir.mkdir()
    # The tiny experiment with two protocols, one of them with a trained agent: enough to see debate jobs
    # land on the H800 partition; and one pair on one dataset with one searched protocol: the CPU stages
    # on the CPU partition.
    config = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())
    # One dataset keeps the job count (and CI time) down; every kind of rule is still there.
    config["datasets"].pop("commonsense_qa")
    config["debate"]["protocols"] = {k: config["debate"]["protocols"][k] for k in ("mad_pair", "trained")}
    # UDPO's jobs are tested in test_workflow; here the single-policy train job stands for the stage.
    config["training"]["runs"].pop("udpo")
    config["training"]["runs"].pop("umad")
    config["training"]["runs"].pop("rmaac")
    config["models"].pop("tiny-udpo-bob")
    config["agents"].pop("dave")
    config["debate"]["protocols"]["trained"]["participants"] = ["carol", "bob"]
    config["protocol_search"]["protocols"] = ["cga"]
    config["evaluation"] = {"papers": ["svr_mad"]}  # one evaluate job stands for the stage
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    snakemake(
        workdir, "--configfile", str(tmp_path / "config.yaml"), "--profile", str(test_profile), timeout=1500, slurm=True
    )
    jobs = [j for j in _squeue_jobs() if j["id"] not in before]
    by_rule: dict[str, list[dict]] = {}
    for job in jobs:
        rule = re.match(r"rule_(\w+?)(?:_wildcards_|$)", job["comment"])
        assert rule, f"job {job} has no rule comment"
        by_rule.setdefault(rule.group(1), []).append(job)
    # Every job of the DAG went through sbatch (`all` is a local rule: it has no work).
    assert {r: len(js) for r, js in by_rule.items()} == {
        "download_dataset": 1,
        "prepare_model": 1,
        "train": 1,
        "zero_shot": 3,
        "summarize_zero_shot": 1,
        "debate": 2,
        "uncertainty": 2,
        "summarize_debate": 1,
        "streams": 1,
        "fit_calibrators": 1,
        "search_protocol": 1,
        "apply_protocol": 1,
        "summarize_confidence": 1,
        "evaluate": 1,
    }
    assert all(j["state"] == "COMPLETED" for j in jobs), jobs
    for job in by_rule["zero_shot"]:
        assert job["partition"] == "gpu_a100"
        assert job["tres"] == "gres:gpu:a100:1", job
    for job in by_rule["debate"] + by_rule["train"]:
        assert job["partition"] == "gpu_h800"
        assert job["tres"] == "gres:gpu:h800:1", job
    cpu_rules = (
        "download_dataset",
        "summarize_zero_shot",
        "uncertainty",
        "fit_calibrators",
        "search_protocol",
        "apply_protocol",
        "evaluate",
    )
    for job in [j for rule in cpu_rules for j in by_rule[rule]]:
        assert job["partition"] == "cpu" and "gpu" not in job["tres"]
    # Each job's own log says where it ran: inside a SLURM allocation, GPU rules with a device.
    for log in (workdir / "logs/tiny/zero_shot").rglob("*.log"):
        text = log.read_text()
        assert re.search(r"SLURM_JOB_ID=\d+", text), text[:500]
        assert "SLURM_JOB_PARTITION=gpu_a100" in text
        assert re.search(r"CUDA_VISIBLE_DEVICES=\d", text)
    assert (workdir / "results/tiny/summary/zero_shot.csv").exists()
    assert (workdir / "results/tiny/summary/debate.csv").exists()
    assert (workdir / "results/tiny/summary/confidence_paper.csv").exists()


def _two_model_config(tmp_path, h800_per_node: int) -> Path:
    """Two models debating, on GPUs of 3 GiB: each engine needs its 2 GiB of overhead plus its weights,
    more than the 2.7 GiB a GPU offers at 0.9, so the debate's GPU plan asks for 2 h800s."""
    config = {
        "experiment": "gpuplan",
        "seed": 0,
        "datasets": {"asdiv": {"split": "test", "limit": 2}},
        "models": {
            "tiny-a": {"source": "bundled:tiny-random-llama"},
            "tiny-b": {"source": "bundled:tiny-random-llama"},
        },
        "agents": {"alice": {"model": "tiny-a", "max_tokens": 4}, "bob": {"model": "tiny-b", "max_tokens": 4}},
        "backends": {"transformers": {"batch_size": 4, "num_threads": 1}},
        "zero_shot": {"samples": 1, "batch_size": 4},
        "debate": {
            "batch_size": 4,
            "protocols": {"pair": {"kind": "all_to_all", "rounds": 1, "participants": ["alice", "bob"]}},
        },
        "gpus": {
            "types": {"a100": {"memory_gib": 3, "per_node": 1}, "h800": {"memory_gib": 3, "per_node": h800_per_node}}
        },
    }
    path = tmp_path / f"gpuplan_{h800_per_node}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_job_asks_slurm_for_the_gpus_its_plan_needs_and_one_that_cannot_fit_is_never_submitted(
    slurm_cluster, tmp_path
):
    test_profile = _test_profile(tmp_path)
    target = "results/gpuplan/debate/asdiv/pair/turns.parquet"
    (tmp_path / "refused").mkdir()
    (tmp_path / "work").mkdir()
    # a node type with one h800: the plan needs two, so the run stops while the DAG is built
    before = {j["id"] for j in _squeue_jobs()}
    refused = snakemake(
        tmp_path / "refused",
        "--configfile",
        str(_two_model_config(tmp_path, 1)),
        "--profile",
        str(test_profile),
        target,
        check=False,
        slurm=True,
        timeout=300,
    )
    assert refused.returncode != 0
    assert (
        "debate gpuplan/asdiv/pair needs 2 × 3 GB h800 GPUs (tiny-a 1, tiny-b 1); h800 nodes have 1: does not fit"
        in refused.stdout + refused.stderr
    )
    assert {j["id"] for j in _squeue_jobs()} == before, "a job was submitted"
    # nodes with two: the debate job is submitted asking for both, and runs
    snakemake(
        tmp_path / "work",
        "--configfile",
        str(_two_model_config(tmp_path, 2)),
        "--profile",
        str(test_profile),
        target,
        slurm=True,
        timeout=1200,
    )
    jobs = [j for j in _squeue_jobs() if j["id"] not in before]
    debate = [j for j in jobs if j["comment"].startswith("rule_debate")]
    zero_shot = [j for j in jobs if j["comment"].startswith("rule_zero_shot")]
    assert len(debate) == 1 and debate[0]["tres"] == "gres:gpu:h800:2" and debate[0]["state"] == "COMPLETED", debate
    assert len(zero_shot) == 2 and all(j["tres"] == "gres:gpu:a100:1" for j in zero_shot), zero_shot
    log = (tmp_path / "work/logs/gpuplan/debate/asdiv/pair.log").read_text()
    assert re.search(r"CUDA_VISIBLE_DEVICES=\d,\d", log), log[:1000]


TRAIN_FAULTS = str(REPO_ROOT / "tests/configs/train_faults.yaml")
SLURMCTLD_LOG = Path("/var/log/slurm/slurmctld.log")  # where tools/setup_local_slurm.sh has slurmctld log


def _requeue(job: str) -> None:
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True, text=True)


def _preempt(job: str) -> None:
    """A job of the higher-tier partition `urgent` that needs the whole node: SLURM requeues the train job
    to make room (PreemptMode=REQUEUE), as a cluster's preemption does."""
    subprocess.run(
        ["sbatch", "-p", "urgent", "--exclusive", "--mem=0", "-o", "/dev/null", "--wrap", "sleep 1"],
        check=True,
        capture_output=True,
        text=True,
    )


def _fail_node(job: str) -> None:
    """The job's node goes DOWN under it: SLURM kills the job and requeues it as after a node failure.
    The node comes back by itself (ReturnToService=2) or is resumed here once the job has left it."""
    node = re.search(
        r"\bNodeList=(\S+)", subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    )
    assert node, f"job {job} has no node"
    subprocess.run(
        ["scontrol", "update", f"nodename={node.group(1)}", "state=down", "reason=debatelab-test"],
        check=True,
        capture_output=True,
        text=True,
    )
    deadline = time.time() + 60
    while any(j["id"] == job and j["state"] == "RUNNING" for j in _squeue_jobs()) and time.time() < deadline:
        time.sleep(0.5)
    while (
        "down"
        in subprocess.run(["sinfo", "-h", "-n", node.group(1), "-o", "%T"], capture_output=True, text=True).stdout
    ):
        # refused when the node has just come back by itself
        subprocess.run(["scontrol", "update", f"nodename={node.group(1)}", "state=resume"], capture_output=True)
        assert time.time() < deadline + 60, "the node never came back"
        time.sleep(1)


def _freeze(job: str) -> None:
    """Stop the job's processes (SIGSTOP) until SLURM ends them: SLURM sends SIGCONT with its SIGTERM, so
    the job leaves no later checkpoint behind whatever the scheduler's delay."""
    listed = subprocess.run(["scontrol", "listpids", job], capture_output=True, text=True).stdout.split("\n")[1:]
    for line in listed:
        fields = line.split()
        if fields and fields[0].isdigit():
            try:
                os.kill(int(fields[0]), signal.SIGSTOP)
            except ProcessLookupError:
                pass


TRAIN_LOG = "logs/trainkill/train/sdrl.log"
TRAIN_RUN = "results/trainkill/train/sdrl"  # the run's outputs and checkpoints
STEPS = 12
RESUMED = re.compile(r"resuming from \S+ \(step (\d+)\)")


def _at_checkpoint(step: int):
    """A fault's moment: the train job has written checkpoint `step`."""

    def reached(workdir: Path) -> bool:
        latest = workdir / TRAIN_RUN / "checkpoint/latest"
        return latest.exists() and latest.read_text().strip() == f"step-{step:05d}"

    return reached


def _once_resumed(workdir: Path) -> bool:
    """A fault's moment: the restarted train job has loaded its checkpoint (each start of the job
    begins a new log), so the job is inside its resumed run whatever its steps' speed."""
    log = workdir / TRAIN_LOG
    return log.exists() and RESUMED.search(log.read_text()) is not None


def _train_until(
    workdir: Path, profile: Path, config: Path, faults: tuple = (), env: dict | None = None
) -> tuple[str | None, list[dict], str, list[str]]:
    """Run the SDRL train job of `config` through SLURM; for each (moment, fault)
    of `faults`, call the fault on the train job's id once `moment(workdir)` holds. Returns that id, the
    run's SLURM jobs, Snakemake's output and the job's log as it was at each fault."""
    from workflow_helpers import SNAKEMAKE_ON_TEST_SLURM, snakemake_env

    target = f"{TRAIN_RUN}/metrics.parquet"
    before = {j["id"] for j in _squeue_jobs()}
    cmd = [
        *SNAKEMAKE_ON_TEST_SLURM,
        "--snakefile",
        str(REPO_ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        "--profile",
        str(profile),
        target,
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**snakemake_env(slurm=True), **(env or {})},
    )
    job, logs = None, []
    deadline = time.time() + 900
    for moment, fault in faults:
        while not moment(workdir):
            assert proc.poll() is None and time.time() < deadline, f"the train job ended before {moment.__name__}"
            time.sleep(0.05)
        time.sleep(0.3)
        train = [j for j in _squeue_jobs() if j["comment"].startswith("rule_train_") and j["state"] == "RUNNING"]
        assert len(train) == 1 and job in (None, train[0]["id"]), train
        job = train[0]["id"]
        _freeze(job)  # a loaded machine's scheduler may act after the job's last steps: hold it here
        logs.append((workdir / TRAIN_LOG).read_text())
        fault(job)
    out, _ = proc.communicate(timeout=1500)
    assert proc.returncode == 0, out[-6000:]
    return job, [j for j in _squeue_jobs() if j["id"] not in before], out, logs


def _weights(root: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((root / TRAIN_RUN / "model").glob("*.safetensors")) for k, v in load_file(f).items()}


@pytest.fixture(scope="module")
def uninterrupted_train(tmp_path_factory):
    """The train job run here without SLURM or a fault, on one thread as the test profile's jobs: the
    test profile, the config and the final weights. The config is tests/configs/train_faults.yaml with
    12 SDRL steps: a step of the tiny model takes a fraction of a second, and a fault must fall with
    steps still to go."""
    root = tmp_path_factory.mktemp("slurm_train")
    profile, config = _test_profile(root), root / "train_faults.yaml"
    settings = yaml.safe_load(Path(TRAIN_FAULTS).read_text())
    settings["training"]["runs"]["sdrl"]["steps"] = STEPS
    config.write_text(yaml.safe_dump(settings))
    target = f"{TRAIN_RUN}/metrics.parquet"
    local = str(REPO_ROOT / "profiles/local")
    snakemake(root / "whole", target, "--configfile", str(config), "--profile", local, "--set-threads", "train=1")
    return profile, config, _weights(root / "whole")


def test_a_train_job_preempted_then_failed_by_its_node_resumes_each_time_to_the_same_weights(
    slurm_cluster, uninterrupted_train, tmp_path
):
    """A running train job requeued by SLURM twice: preempted by a higher-tier job after checkpoint 2,
    then, running again, its node failing as soon as it has resumed (`scontrol requeue`: the zero_shot
    test below). SLURM restarts the same job each time, Snakemake waits for it without failing or
    resubmitting it, the job resumes from its last checkpoint, and its weights equal those of an
    uninterrupted run outside SLURM."""
    profile, config, uninterrupted = uninterrupted_train
    secret = f"sk-debatelab-{os.urandom(12).hex()}"
    log_start = SLURMCTLD_LOG.stat().st_size
    job, jobs, out, logs = _train_until(
        tmp_path,
        profile,
        config,
        faults=((_at_checkpoint(2), _preempt), (_once_resumed, _fail_node)),
        env={"OPENAI_API_KEY": secret},
    )
    said = SLURMCTLD_LOG.read_text()[log_start:]
    preempted = said.find(f"preempted JobId={job} has been requeued")
    failed = said.find(f"requeue job JobId={job} due to failure of node")
    assert 0 <= preempted < failed, f"the faults were not the intended kinds, in order: {said[-3000:]}"
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True).stdout
    assert "Requeue=1 Restarts=2" in shown and "JobState=COMPLETED" in shown, shown  # SLURM ran it three times
    # one submission of the train job: Snakemake neither failed it nor resubmitted it
    assert [j["id"] for j in jobs if j["comment"].startswith("rule_train_")] == [job]
    assert "Error in rule train" not in out
    # a key in the environment reaches jobs by sbatch's environment export, never the job script's text
    script = subprocess.run(["scontrol", "write", "batch_script", job, "-"], capture_output=True, text=True)
    assert script.returncode == 0 and "snakemake" in script.stdout, script.stderr
    assert secret not in script.stdout and secret not in shown
    # each start after a fault resumed from the checkpoint the job had reached (one later when the fault came
    # late), not from the start: the second as its node failed, the third at the end
    second = [int(step) for step in RESUMED.findall(logs[1])]
    third = [int(step) for step in RESUMED.findall((tmp_path / TRAIN_LOG).read_text())]
    assert len(second) == 1 and 2 <= second[0] < STEPS, logs[1][-3000:]
    assert len(third) == 1 and second[0] <= third[0] < STEPS, (tmp_path / TRAIN_LOG).read_text()[-3000:]
    weights = _weights(tmp_path)
    assert weights.keys() == uninterrupted.keys() and len(weights) > 0
    assert all((weights[k] == uninterrupted[k]).all() for k in weights)


def test_a_requeued_zero_shot_job_resumes_from_its_generation_cache(slurm_cluster, tmp_path):
    """`scontrol requeue` of a zero_shot job after its first cache flush: the restarted job serves the
    flushed units from the cache, and its answers equal those of the same job run locally."""
    from test_resume import CACHE, CONFIG, _parts, _units
    from workflow_helpers import SNAKEMAKE_ON_TEST_SLURM, snakemake_env

    from debatelab.compare import compare_trees

    target = "results/resume/zero_shot/asdiv/alice.parquet"
    snakemake(tmp_path / "local", "--configfile", CONFIG, "--profile", str(REPO_ROOT / "profiles/local"), target)
    profile, workdir = _test_profile(tmp_path), tmp_path / "slurm"
    before = {j["id"] for j in _squeue_jobs()}
    cmd = [*SNAKEMAKE_ON_TEST_SLURM, "--snakefile", str(REPO_ROOT / "Snakefile"), "--directory", str(workdir)]
    proc = subprocess.Popen(
        [*cmd, "--configfile", CONFIG, "--profile", str(profile), target],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=snakemake_env(slurm=True),
    )
    deadline = time.time() + 900
    while not (workdir / "logs/resume/zero_shot").exists() or _parts(workdir) < 1:
        assert proc.poll() is None and time.time() < deadline, "the zero_shot job ended before its first flush"
        time.sleep(0.02)
    job = [j for j in _squeue_jobs() if j["comment"].startswith("rule_zero_shot_") and j["state"] == "RUNNING"]
    assert len(job) == 1, job
    _requeue(job[0]["id"])
    flushed_before_requeue = _units(workdir)
    out, _ = proc.communicate(timeout=1500)
    assert proc.returncode == 0, out[-6000:]
    shown = subprocess.run(["scontrol", "show", "job", job[0]["id"]], capture_output=True, text=True).stdout
    assert "Restarts=1" in shown and "JobState=COMPLETED" in shown, shown
    new = [j for j in _squeue_jobs() if j["id"] not in before and j["comment"].startswith("rule_zero_shot_")]
    assert [j["id"] for j in new] == [job[0]["id"]]  # submitted once
    comparison = compare_trees(tmp_path / "local/results/resume/zero_shot", workdir / "results/resume/zero_shot")
    assert comparison.same and not comparison.close, comparison.summary()
    # units flushed before the requeue were kept, not generated again: the cache holds the local run's units
    assert flushed_before_requeue and flushed_before_requeue <= _units(workdir)
    assert _units(workdir) == _units(tmp_path / "local") and _parts(workdir) == _parts(tmp_path / "local")
    assert (workdir / CACHE).exists()


def test_a_two_node_train_job_runs_one_task_per_node_through_slurm(slurm_cluster, tmp_path):
    """A DAPO run with `nodes: 2, gpus: 1` on the `twins` partition (two slurmds, one fake h800 each):
    Snakemake submits it as 2 nodes and 2 GPUs; the job starts one srun task per node, node 0 and
    node 1 each start their launcher (torchrun here: no CUDA) with the first node as main address,
    and the two processes train the run to its end."""
    config = yaml.safe_load(Path(TRAIN_FAULTS).read_text())
    config["training"]["runs"] = {
        "dapo": {
            "method": "dapo",
            "policy": "alice",
            "dataset": "asdiv",
            "steps": 2,
            "nodes": 2,
            "gpus": 1,
            "max_tokens": 8,
            "overlong_buffer": 0,
            "mini_batch_size": 4,
            "micro_batch_size": 4,
            "warmup_steps": 0,
            "lora": {"r": 4, "alpha": 8},
            "dapo": {"prompts_per_step": 2, "rollouts_per_prompt": 2, "dynamic_sampling": False},
        }
    }
    for name in ("tiny-sdrl", "tiny-umad-bob"):
        config["models"].pop(name)
    for name in ("carol", "dave"):
        config["agents"].pop(name)
    config["debate"]["protocols"].pop("trained")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    profile = _test_profile(tmp_path)
    settings = yaml.safe_load((profile / "config.yaml").read_text())
    settings["set-resources"]["train"]["slurm_partition"] = "twins"
    settings["set-resources"]["train"]["mem_mb"] = 2000
    settings["slurm-keep-successful-logs"] = True  # the node tasks' lines are in the job's SLURM log
    (profile / "config.yaml").write_text(yaml.safe_dump(settings))
    before = {j["id"] for j in _squeue_jobs()}
    workdir = tmp_path / "work"
    target = "results/trainkill/train/dapo/metrics.parquet"
    snakemake(
        workdir, "--configfile", str(tmp_path / "config.yaml"), "--profile", str(profile), target,
        timeout=1500, slurm=True,
    )  # fmt: skip
    (train,) = [j for j in _squeue_jobs() if j["id"] not in before and j["comment"].startswith("rule_train_")]
    assert train["state"] == "COMPLETED" and train["partition"] == "twins", train
    shown = subprocess.run(["scontrol", "show", "job", train["id"]], capture_output=True, text=True).stdout
    assert "NumNodes=2 " in shown and "NodeList=twin[0-1]" in shown, shown
    assert re.search(r"TresPerJob=(gres:)?gpu:h800:2", shown), shown
    log = (workdir / "logs/trainkill/train/dapo.log").read_text()
    assert "launching 2 training processes on 2 node(s): srun --nodes 2 --ntasks 2 --ntasks-per-node 1" in log, log
    slurm_logs = "".join(f.read_text() for f in (workdir / ".snakemake/slurm_logs").rglob("*.log"))
    for rank, node in ((0, "twin0"), (1, "twin1")):
        line = re.search(rf"debatelab: node {rank} of 2 \({node}\): (.*)", slurm_logs)
        assert line, slurm_logs[-3000:]
        assert f"--nnodes 2 --node_rank {rank} --master_addr twin0" in line.group(1)
    info = json.loads((workdir / "results/trainkill/train/dapo/settings.json").read_text())
    assert info["processes"] == 2
    assert len(pd.read_parquet(workdir / target)) == 2
