"""Training jobs killed mid-step inside a Snakemake run, then the run restarted (issue 29).

A `train` job (SDRL) and a `train_agents` job (UMAD) are each SIGKILLed with the whole run (as a
preempted node is) a moment after their second checkpoint, so the kill falls inside a later step; then
the whole run is unlocked and restarted with --rerun-incomplete (both profiles set it). Each job resumes from its
checkpoint, and the trained weights and every downstream output (the trained agents' answers and
debate, the summaries) equal an uninterrupted run's, byte for byte on this CPU.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from workflow_helpers import REPO_ROOT, SNAKEMAKE, snakemake, snakemake_env

from debatelab.compare import compare_trees

CONFIG = str(REPO_ROOT / "tests/configs/train_faults.yaml")
LOCAL = str(REPO_ROOT / "profiles/local")
RESULTS = "results/trainkill"
TIMINGS = ["rollout_seconds", "update_seconds", "tokens_per_second", "heldout_seconds"]

pytestmark = pytest.mark.slow


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(folder.rglob("*.safetensors")) for k, v in load_file(f).items()}


def _kill_inside_step(workdir: Path, run: str, step: int = 2, timeout: float = 600) -> None:
    """Run the DAG up to `run`'s training; SIGKILL its process group shortly after checkpoint `step`."""
    cmd = [
        SNAKEMAKE,
        "--snakefile",
        str(REPO_ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        CONFIG,
        "--profile",
        LOCAL,
        f"{RESULTS}/train/{run}/metrics.parquet",
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=snakemake_env(), start_new_session=True
    )
    latest = workdir / RESULTS / "train" / run / "checkpoint/latest"
    deadline = time.monotonic() + timeout
    try:
        while not (latest.exists() and latest.read_text().strip() == f"step-{step:05d}"):
            assert proc.poll() is None, f"the run ended before {run}'s checkpoint {step}"
            assert time.monotonic() < deadline, f"{run} wrote no checkpoint {step} within {timeout} s"
            time.sleep(0.01)
        time.sleep(0.3)  # into the next step's rollouts
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    whole = tmp_path_factory.mktemp("uninterrupted")
    snakemake(whole, "--configfile", CONFIG, "--profile", LOCAL)
    return whole


def test_killed_train_and_train_agents_jobs_resume_to_an_uninterrupted_runs_outputs(uninterrupted, tmp_path):
    whole, killed = uninterrupted, tmp_path / "killed"

    for run, model in (("sdrl", "model"), ("umad", "agents")):
        _kill_inside_step(killed, run)
        assert not (killed / RESULTS / "train" / run / model).exists()  # the kill fell before the job's end
        snakemake(killed, "--unlock", "--configfile", CONFIG)
    snakemake(killed, "--configfile", CONFIG, "--profile", LOCAL)

    for run in ("sdrl", "umad"):
        log = (killed / f"logs/trainkill/train/{run}.log").read_text()
        resumed = re.search(r"resuming from \S+ \(step (\d)\)", log)  # step 2, or 3 when the kill came late
        assert resumed and 2 <= int(resumed.group(1)) < 5, (run, log[-3000:])
        first = _weights(whole / RESULTS / "train" / run)
        second = _weights(killed / RESULTS / "train" / run)
        assert first.keys() == second.keys() and len(first) > 0
        assert all((first[k] == second[k]).all() for k in first), run
    # every output but wall times: the step timings (and the curves that plot them) and the checkpoints
    # (not outputs; their fingerprints hold each working directory's paths)
    comparison = compare_trees(whole / RESULTS, killed / RESULTS, ignore_columns=TIMINGS)
    different = {
        name for name in comparison.different if "/checkpoint/" not in name and not name.endswith("curves.png")
    }
    assert not different and not comparison.close, comparison.summary()
    assert len(comparison.identical) > 30
    assert (killed / RESULTS / "debate/asdiv/trained/questions.parquet").exists()


def test_an_input_cut_short_is_an_error_naming_the_file_not_a_pyarrow_traceback(uninterrupted, tmp_path):
    """The dataset file of a finished run loses its second half (a full disk); the rerun of a job that
    reads it fails naming the file, and the job's log holds no traceback from inside pyarrow."""
    import shutil

    workdir = tmp_path / "run"
    shutil.copytree(uninterrupted, workdir, symlinks=True)
    data = workdir / "data/asdiv/test/auto.parquet"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    target = f"{RESULTS}/zero_shot/asdiv/alice.parquet"
    proc = snakemake(
        workdir,
        "--configfile",
        CONFIG,
        "--profile",
        LOCAL,
        "--forcerun",
        "zero_shot",
        target,
        "--keep-going",
        check=False,
    )  # --keep-going: the training job, which reads the same file (newer now), may be scheduled first and fail
    assert proc.returncode != 0
    log_path = workdir / "logs/trainkill/zero_shot/asdiv/alice.log"
    log = log_path.read_text() if log_path.stat().st_mtime >= data.stat().st_mtime else "(the job did not run)"
    assert "data/asdiv/test/auto.parquet: not a readable Parquet file" in log, proc.stderr[-6000:]
    assert "delete it and rerun the rule that writes it" in log
    assert "site-packages/pyarrow" not in log
