"""A killed and resumed run ends identical to an uninterrupted one, through the real Snakemake.

The run is killed (SIGKILL to the whole process group, as a preempted SLURM job is) after a
given number of cache flushes of a zero_shot or a debate job, unlocked and rerun. Every output
must equal the uninterrupted run's, and the cache must hold exactly the uninterrupted run's flush
units: no finished unit was generated again, and the kill lost only the unit in flight.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from workflow_helpers import REPO_ROOT, SNAKEMAKE, snakemake, snakemake_env

from debatelab.compare import compare_trees

CONFIG = str(REPO_ROOT / "tests/configs/resume.yaml")
LOCAL = str(REPO_ROOT / "profiles/local")
CACHE = "results/resume/cache/tiny-random-llama"

pytestmark = pytest.mark.slow


def _units(workdir: Path) -> set[tuple]:
    """The flush units on disk, by content (unit ids hash the model folder's path, which differs between
    working directories)."""
    import pyarrow.parquet as pq

    units = set()
    for part in (workdir / CACHE).glob("part-*.parquet"):
        rows = pq.read_table(part, columns=["text", "token_logprobs"]).to_pylist()
        units.add(tuple(sorted((r["text"], tuple(r["token_logprobs"] or ())) for r in rows)))
    return units


def _parts(workdir: Path) -> int:
    return len(list((workdir / CACHE).glob("part-*.parquet")))


def _running(workdir: Path, rule: str) -> list[Path]:
    """Jobs of `rule` that have started (their log exists) and not finished (no output yet)."""
    logs = workdir / "logs/resume" / rule
    out = []
    for log in logs.rglob("*.log") if logs.exists() else []:
        name = log.relative_to(logs).with_suffix("")
        target = (
            workdir
            / "results/resume"
            / rule
            / (f"{name}.parquet" if rule == "zero_shot" else f"{name}/questions.parquet")
        )
        if not target.exists():
            out.append(log)
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("uninterrupted")
    snakemake(workdir, "--configfile", CONFIG, "--profile", LOCAL)
    return workdir


def _kill_after_flushes(workdir: Path, rule: str, flushes: int, timeout: float = 900) -> dict:
    """Start the DAG, SIGKILL its process group once a running `rule` job has flushed `flushes` units."""
    env = snakemake_env()
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
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    watched, start_parts, deadline = None, 0, time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the run finished before {flushes} flushes of a running {rule} job"
            running = _running(workdir, rule)
            if watched not in running:  # a new job of the rule started (or the watched one finished)
                watched, start_parts = (running[0], _parts(workdir)) if running else (None, 0)
            elif _parts(workdir) >= start_parts + flushes:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return {"job": watched.name, "parts_at_kill": _parts(workdir), "start_parts": start_parts}
            time.sleep(0.02)
        raise AssertionError(f"no {rule} job flushed {flushes} units within {timeout} s")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_killed_twice_and_resumed_run_ends_identical(uninterrupted, tmp_path):
    """Killed after the first flush of a zero_shot job, rerun, killed again after the second flush of a
    debate job, rerun to the end: every output equals the uninterrupted run's."""
    units_at_kill = []
    for rule, flushes in (("zero_shot", 1), ("debate", 2)):
        kill = _kill_after_flushes(tmp_path, rule, flushes)
        assert kill["parts_at_kill"] >= kill["start_parts"] + flushes
        assert not (tmp_path / "results/resume/summary/debate.csv").exists()  # the kill fell before the end
        units_at_kill.append(_units(tmp_path))
        snakemake(tmp_path, "--unlock", "--configfile", CONFIG)
    snakemake(tmp_path, "--configfile", CONFIG, "--profile", LOCAL)

    comparison = compare_trees(uninterrupted / "results/resume", tmp_path / "results/resume")
    assert comparison.same and not comparison.close, comparison.summary()
    assert len(comparison.identical) > 20
    # The cache holds exactly the uninterrupted run's units: every unit finished before a kill was
    # kept and served, none was generated twice; only the units in flight were lost.
    assert _units(tmp_path) == _units(uninterrupted)
    assert units_at_kill[0] < units_at_kill[1] < _units(uninterrupted)
    assert _parts(tmp_path) == _parts(uninterrupted)
