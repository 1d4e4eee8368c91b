"""The SLURM profile resolves without a cluster and maps GPU-heavy rules to GPU nodes."""

from __future__ import annotations

import re

import yaml
from workflow_helpers import REPO_ROOT, snakemake

SLURM = str(REPO_ROOT / "profiles/slurm")


def _job_blocks(output: str) -> dict[str, list[str]]:
    """Rule name → the resources lines of each planned job in a dry run."""
    blocks: dict[str, list[str]] = {}
    for chunk in re.split(r"\n(?=(?:localrule|rule) \w+:)", output):
        m = re.match(r"(?:localrule|rule) (\w+):", chunk)
        if m:
            res = re.search(r"resources: (.*)", chunk)
            blocks.setdefault(m.group(1), []).append(res.group(1) if res else "")
    return blocks


def test_dry_run_maps_gpu_rules_to_gpu_nodes(tmp_path):
    proc = snakemake(tmp_path, "-n", "--profile", SLURM, "--configfile", str(REPO_ROOT / "config/config.yaml"))
    blocks = _job_blocks(proc.stdout + proc.stderr)
    assert blocks["zero_shot"], "no zero_shot job planned"
    for resources in blocks["zero_shot"]:
        assert "slurm_partition=gpu_a100" in resources
        assert "gpu=1" in resources and "gpu_model=a100" in resources
    assert blocks["debate"], "no debate job planned"
    for resources in blocks["debate"]:
        assert "slurm_partition=gpu_h800" in resources
        assert "gpu=1" in resources and "gpu_model=h800" in resources
    for rule in ("download_dataset", "prepare_model", "uncertainty", "summarize_debate"):
        for resources in blocks[rule]:
            assert "slurm_partition=cpu" in resources
            assert "gpu_model" not in resources


def test_profile_declares_a100_and_h800_for_every_gpu_heavy_rule():
    profile = yaml.safe_load((REPO_ROOT / "profiles/slurm/config.yaml").read_text())
    gpu_rules = {"zero_shot", "debate", "train"}
    models = {rule: profile["set-resources"][rule]["gpu_model"] for rule in gpu_rules}
    assert set(models.values()) == {"a100", "h800"}
    for rule in gpu_rules:
        res = profile["set-resources"][rule]
        assert res["slurm_partition"].startswith("gpu_")
        # no GPU count: each job's GPU plan sets it (a count here would override the plan)
        assert "gpu" not in res
        assert "--gres" not in str(res.get("slurm_extra", ""))  # the plugin rejects it
    assert profile["default-resources"]["slurm_account"]


def test_every_job_is_submitted_requeueable(tmp_path):
    """What sbatch receives from the profile, recorded by a stand-in sbatch on PATH: `--requeue` on every
    call, so SLURM requeues a preempted or node-failed job even where the site's JobRequeue is 0."""
    import os
    import sys
    from pathlib import Path

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "sbatch_calls"
    # sbatch records its arguments and refuses the job: the run stops after the first submissions.
    (bin_dir / "sbatch").write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho refused >&2\nexit 1\n')
    (bin_dir / "sacctmgr").write_text("#!/bin/sh\necho myaccount\n")  # the plugin checks the account
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    path = f"{bin_dir}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
    proc = snakemake(
        tmp_path / "work",
        "--profile",
        SLURM,
        "--configfile",
        str(REPO_ROOT / "config/config.yaml"),
        "--retries",
        "0",
        check=False,
        slurm=True,  # the plugin as the SLURM tests run it; SLURM_CONF: no controller to ask here
        env={"PATH": path, "SLURM_CONF": "/dev/null"},
    )
    assert proc.returncode != 0  # every submission was refused
    submitted = calls.read_text().splitlines() if calls.exists() else []
    assert submitted, proc.stdout[-3000:] + proc.stderr[-3000:]
    for call in submitted:
        assert " --requeue " in f" {call} " and "--no-requeue" not in call, call
        assert "-A myaccount" in call and re.search(r"-t \d+", call), call
