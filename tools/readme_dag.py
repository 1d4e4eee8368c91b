"""The README's DAG: the union of `snakemake --rulegraph mermaid-js` over the shipped configs that
together reach every rule (no single config runs them all: the default has no multi-agent training,
the attack runs only in the UDPO configs), as one mermaid flowchart.

    .venv/bin/python tools/readme_dag.py            print the flowchart
    .venv/bin/python tools/readme_dag.py --write    replace the README's ```mermaid block with it
    .venv/bin/python tools/readme_dag.py --check    exit 1 when the README's block differs (tests run this)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))
# Together these reach every rule (checked: `missing_rules`).
CONFIGS = (
    "config/config.yaml",
    "config/experiments/learning_cpu.yaml",
    "config/experiments/udpo_cpu.yaml",
    "config/experiments/learning_micro.yaml",  # rule micro_model
)
MERMAID_BLOCK = re.compile(r"```mermaid\n.*?```\n", re.S)


def workflow_rules() -> set[str]:
    """Every rule the Snakefile and rules/*.smk define."""
    names = set()
    for path in [REPO / "Snakefile", *sorted((REPO / "rules").glob("*.smk"))]:
        names |= set(re.findall(r"^rule (\w+):", path.read_text(), re.M))
    return names


def rulegraph(configfile: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The rules and (upstream, downstream) edges of one config's DAG."""
    with tempfile.TemporaryDirectory() as workdir:
        done = subprocess.run(
            [
                SNAKEMAKE,
                "--snakefile",
                str(REPO / "Snakefile"),
                "--directory",
                workdir,
                "--configfile",
                str(REPO / configfile),
                "--rulegraph",
                "mermaid-js",
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
            # A rule graph needs no SLURM. Where SLURM is installed but no controller runs, the
            # plugin's `scontrol show config` at every snakemake start waits 9 s; this fails it at once.
            env={**os.environ, "SLURM_CONF": "/dev/null"},
        )
    if done.returncode:
        raise RuntimeError(f"snakemake --rulegraph with {configfile} failed:\n{done.stderr[-2000:]}")
    ids = dict(re.findall(r"^\s*(id\d+)\[(\w+)\]", done.stdout, re.M))
    edges = {(ids[a], ids[b]) for a, b in re.findall(r"^\s*(id\d+) --> (id\d+)", done.stdout, re.M)}
    return set(ids.values()), edges


def union_graph(configs=CONFIGS) -> tuple[set[str], set[tuple[str, str]]]:
    rules, edges = set(), set()
    for configfile in configs:
        r, e = rulegraph(configfile)
        rules |= r
        edges |= e
    return rules, edges


def missing_rules(rules: set[str]) -> set[str]:
    return workflow_rules() - rules


def flowchart(rules: set[str], edges: set[tuple[str, str]]) -> str:
    """A mermaid flowchart, rules in dependency order (ties by name), so the text is stable: one line
    per rule, `a & b --> rule`."""
    order, placed = [], set()
    while len(order) < len(rules):
        ready = sorted(r for r in rules - placed if all(a in placed for a, b in edges if b == r))
        if not ready:
            raise ValueError(f"a cycle among {sorted(rules - placed)}")
        order += ready
        placed |= set(ready)
    lines = ["flowchart TB"]
    for rule in order:  # one line per rule with inputs: its upstream rules joined by &
        upstream = [a for a in order if (a, rule) in edges]
        if upstream:
            lines.append(f"    {' & '.join(upstream)} --> {rule}")
    return "```mermaid\n" + "\n".join(lines) + "\n```\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    rules, edges = union_graph()
    if missing_rules(rules):
        print(f"no shipped config in {CONFIGS} reaches {sorted(missing_rules(rules))}", file=sys.stderr)
        return 1
    block = flowchart(rules, edges)
    readme = (REPO / "README.md").read_text()
    current = MERMAID_BLOCK.search(readme)
    if args.write:
        (REPO / "README.md").write_text(MERMAID_BLOCK.sub(lambda _: block, readme, count=1))
    elif args.check:
        if current is None or current.group(0) != block:
            print("README.md's DAG differs from the rules: run tools/readme_dag.py --write", file=sys.stderr)
            return 1
    else:
        print(block, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
