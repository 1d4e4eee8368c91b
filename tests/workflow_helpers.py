"""Running the real Snakemake on the real workflow from tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
# The real CLI with the SLURM plugin's fixed waits shortened (tests/snakemake_on_test_slurm.py).
SNAKEMAKE_ON_TEST_SLURM = [sys.executable, str(Path(__file__).with_name("snakemake_on_test_slurm.py"))]
# The rules reserve 2 threads and 16-32 GB for real models, so on CI's 2 cores the local profile runs
# a generation or training job alone. The tiny model's jobs generate on one thread (`num_threads: 1`)
# in well under 1 GB: with these, two run at once. Only the schedule changes, not what a job computes
# (no script reads its thread count). `=`-joined, so they can stand before targets.
TWO_TINY_JOBS_AT_ONCE = ("--max-threads=1", "--resources=mem_mb=64000")


def snakemake_env(slurm: bool = False) -> dict:
    """The environment of a snakemake run from the tests. Every snakemake start imports the SLURM
    executor plugin, which runs `scontrol show config` for a line of help text; where SLURM is
    installed but no controller runs (here, outside the SLURM test) that waits 9 s. Unless the run
    talks to SLURM, an empty SLURM config makes scontrol fail at once."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if not slurm:
        env["SLURM_CONF"] = "/dev/null"
    # Jobs run the workflow's scripts with this interpreter: put the venv first on PATH.
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


def snakemake(
    workdir: Path, *args: str, check: bool = True, timeout: int = 1200, env: dict | None = None, slurm: bool = False
):
    """Run snakemake on `workdir`; `slurm=True`: a run that talks to the test cluster, through
    SNAKEMAKE_ON_TEST_SLURM."""
    program = SNAKEMAKE_ON_TEST_SLURM if slurm else [SNAKEMAKE]
    cmd = [*program, "--snakefile", str(REPO_ROOT / "Snakefile"), "--directory", str(workdir), *args]
    full_env = {**snakemake_env(slurm), **(env or {})}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr[-12000:]}"
        )
    return proc


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
