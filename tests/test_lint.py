"""The workflow as Snakemake's linter sees it, and the software environment its rules name."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.mark.parametrize("configfile", [None, "config/experiments/learning_cpu.yaml"])
def test_snakemake_lint_finds_nothing(configfile, tmp_path):
    extra = ["--configfile", str(REPO / configfile)] if configfile else []
    done = subprocess.run([SNAKEMAKE, "--lint", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                           *extra], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Lints for" not in done.stdout + done.stderr, done.stdout + done.stderr
    assert "your workflow is in a good condition" in done.stdout + done.stderr


def test_every_rule_names_the_environment_that_setup_installs():
    env = yaml.safe_load((REPO / "envs/debatelab.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    setup = (REPO / "tools/setup.sh").read_text()
    torch_pin = re.search(r"install -q (torch==[\d.]+)", setup).group(1)
    assert torch_pin in pip and any(p.startswith("-e ..") for p in pip)  # the CPU torch first, then this package
    python = re.search(r'requires-python = ">=(\d+\.\d+)', (REPO / "pyproject.toml").read_text()).group(1)
    assert f"python={python}" in env["dependencies"]
    for smk in (REPO / "rules").glob("*.smk"):
        text = smk.read_text()
        assert text.count("\n    script:\n") == text.count("\n    conda:\n        SOFTWARE_ENV\n    script:\n"), smk.name


def test_the_readmes_dag_is_the_rules_of_the_shipped_configs():
    """README.md's mermaid flowchart equals the union of `snakemake --rulegraph` over the configs
    that together reach every rule (tools/readme_dag.py --write regenerates it)."""
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import readme_dag
    finally:
        sys.path.pop(0)
    rules, edges = readme_dag.union_graph()
    assert not readme_dag.missing_rules(rules)
    assert {"train", "train_agents", "udpo_warmup", "udpo_coefficients", "trained_agent", "attack_prompt",
            "evaluate"} <= rules
    readme = (REPO / "README.md").read_text()
    assert readme_dag.MERMAID_BLOCK.search(readme).group(0) == readme_dag.flowchart(rules, edges), \
        "README.md's DAG is stale: run tools/readme_dag.py --write"
