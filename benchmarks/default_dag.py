"""Wall time and peak memory of the default DAG (config/config.yaml) from a clean working directory,
as the README's first command runs it: `snakemake --profile profiles/local`.

    .venv/bin/python benchmarks/default_dag.py [--workdir DIR] [--configfile FILE] [--keep] [TARGET ...]

TARGETs (files or rules) time one part of a DAG, e.g. one method of the learning experiment:
    benchmarks/default_dag.py --configfile config/experiments/learning_cpu.yaml --workdir /tmp/lc \
        results/learning_cpu/train/dapo/metrics.parquet
A second call with the same --workdir runs only what the first left to do.

Peak RSS is the largest sum, over one sampling instant, of the resident memory of snakemake and
every process it started (jobs run as child processes); sampled every 0.2 s. Prints the totals and
the slowest rules from the jobs' `benchmark:` files.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import psutil

REPO = Path(__file__).resolve().parents[1]


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass  # ended between listing and reading
    return total


def rule_times(results: Path, since: float = 0.0) -> pd.DataFrame:
    """Seconds per rule, summed over its jobs, from results/*/benchmarks/<rule>/**.tsv written after
    `since` (a reused working directory holds earlier runs' files)."""
    rows = []
    for tsv in results.glob("*/benchmarks/**/*.tsv"):
        if tsv.stat().st_mtime < since:
            continue
        rule = tsv.relative_to(results).parts[2]
        rows.append({"rule": rule, "s": float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])})
    frame = pd.DataFrame(rows, columns=["rule", "s"])
    return frame.groupby("rule")["s"].agg(["count", "sum", "max"]).sort_values("sum", ascending=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a fresh temporary folder")
    ap.add_argument("--configfile", default=None, help="default: the workflow's own config/config.yaml")
    ap.add_argument("--keep", action="store_true", help="keep the temporary working directory")
    ap.add_argument("targets", nargs="*", help="what to build (default: the config's whole DAG)")
    args = ap.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="debatelab-default-"))
    workdir.mkdir(parents=True, exist_ok=True)
    snakemake = Path(sys.executable).parent / "snakemake"
    cmd = [
        str(snakemake),
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--profile",
        str(REPO / "profiles/local"),
    ]
    if args.configfile:
        cmd += ["--configfile", str(Path(args.configfile).resolve())]
    if args.targets:
        cmd += ["--", *args.targets]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}", "HF_HUB_OFFLINE": "1"}
    start, started_at, peak = time.perf_counter(), time.time(), 0
    with open(workdir / "snakemake.out", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        watched = psutil.Process(proc.pid)
        while proc.poll() is None:
            peak = max(peak, tree_rss(watched))
            time.sleep(0.2)
    wall = time.perf_counter() - start
    print(
        f"{' '.join(args.targets) or 'default DAG'}: exit {proc.returncode}, wall {wall / 60:.1f} min ({wall:.0f} s), "
        f"peak RSS {peak / 2**30:.2f} GiB, {os.cpu_count()} CPUs, workdir {workdir}"
    )
    times = rule_times(workdir / "results", since=started_at)
    if len(times):
        print("seconds per rule (sum over its jobs, from benchmark: files):")
        print(times.round(1).to_string())
    if proc.returncode != 0:
        print((workdir / "snakemake.out").read_text()[-3000:])
    if not args.keep and args.workdir is None and proc.returncode == 0:
        shutil.rmtree(workdir)
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
