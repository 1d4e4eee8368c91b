"""The workflow as Snakemake's linter sees it, and the software environment its rules name."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow_helpers import snakemake_env

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


@pytest.mark.parametrize("configfile", [None, "config/experiments/learning_cpu.yaml"])
def test_snakemake_lint_finds_nothing(configfile, tmp_path):
    extra = ["--configfile", str(REPO / configfile)] if configfile else []
    done = subprocess.run(
        [SNAKEMAKE, "--lint", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path), *extra],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env=snakemake_env(),  # SLURM_CONF: no 9 s wait for a SLURM controller
    )
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
        assert text.count("\n    script:\n") == text.count("\n    conda:\n        SOFTWARE_ENV\n    script:\n"), (
            smk.name
        )


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
    assert {
        "train",
        "train_agents",
        "udpo_warmup",
        "udpo_coefficients",
        "trained_agent",
        "attack_prompt",
        "evaluate",
    } <= rules
    readme = (REPO / "README.md").read_text()
    assert readme_dag.MERMAID_BLOCK.search(readme).group(0) == readme_dag.flowchart(rules, edges), (
        "README.md's DAG is stale: run tools/readme_dag.py --write"
    )


def _map_section() -> str:
    readme = (REPO / "README.md").read_text()
    return readme[readme.index("## Where things are") : readme.index("## Documentation")]


def _defines(path: Path, name: str) -> bool:
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def test_the_readme_is_a_short_map_whose_every_module_exists_and_which_names_every_package():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    for link in re.findall(r"\]\(([^)#]+)\)", readme):  # every page it links to is there
        assert (REPO / link).exists(), link
    library = REPO / "src" / "debatelab"
    section = "\n".join(line for line in _map_section().splitlines() if line.startswith("|"))  # its two tables
    named_packages, named_files = set(), set()
    # `pkg/` (`module`, ...): a package and every one of its modules; `file.py` (`Name`, ...): what it defines
    for path, names in re.findall(r"`([a-z_/]+/|[a-z_]+\.py)`(?: \(([^)]*)\))?", section):
        if path.startswith(("rules/", "workflow_scripts/", "config/", "tests/", "envs/", "src/")):
            assert (REPO / path).exists(), path
            continue
        listed = re.findall(r"`(\w+)`", names)
        if path.endswith("/"):
            package = library / path
            assert (package / "__init__.py").exists(), f"{path}: no such package"
            named_packages.add(package)
            if listed:
                modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
                modules |= {p.name for p in package.iterdir() if (p / "__init__.py").exists()}
                assert set(listed) <= modules, f"{path}: no module {sorted(set(listed) - modules)}"
                assert {m for m in modules if (package / m / "__init__.py").exists()} | set(listed) >= modules, (
                    f"{path}: modules missing from the map: {sorted(modules - set(listed))}"
                )
        else:
            module = library / path
            assert module.exists(), f"{path}: no such module"
            named_files.add(module)
            for name in listed:
                assert _defines(module, name), f"{path} defines no {name}"
    packages = {p.parent for p in library.rglob("__init__.py") if "__pycache__" not in p.parts} - {library}
    assert not packages - named_packages, (
        f"packages missing from the map: {sorted(map(str, packages - named_packages))}"
    )
    top_level = {p for p in library.glob("*.py") if p.name != "__init__.py"}
    assert not top_level - named_files, (
        f"modules missing from the map: {sorted(p.name for p in top_level - named_files)}"
    )


def test_ruff_finds_nothing_and_every_file_is_formatted():
    """`ruff check` and `ruff format --check` with the settings in pyproject.toml (the CI runs them here)."""
    ruff = str(Path(sys.executable).with_name("ruff"))
    for command in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=300)
        assert done.returncode == 0, f"{' '.join(command[1:])}:\n{done.stdout}{done.stderr}"


def test_no_module_imports_a_private_name_of_another():
    """Leading-underscore names stay in their module: what others use is public (issue 30)."""
    import ast

    found = []
    for path in sorted((REPO / "src" / "debatelab").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("debatelab")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    found.append(f"{path.relative_to(REPO)}:{node.lineno} imports {private} from {node.module}")
    assert not found, "\n".join(found)


def test_no_tracked_file_points_outside_the_repository_to_the_private_specs_or_notes():
    """A clone of the repository has no shared folder beside it (the specs, notes and paper texts this
    project was written from): docs, configs and code cite the papers themselves (title, arXiv id,
    section / table / equation) and, for code facts, the authors' repository and file, never a path
    there or a spec's section number."""
    # built from parts so that this file does not match itself
    shared = "shared"
    needles = ("../" + shared, shared + "/specs", shared + "/notes", shared + "/papers")
    # nor by a spec's section number: a reader has the papers, not the specs
    spec_number = re.compile("spec" + r" (00\d|§)|\b00[0-4] §")
    files = subprocess.run(["git", "ls-files", "-z"], capture_output=True, text=True, cwd=REPO, check=True).stdout
    hits = []
    for name in filter(None, files.split("\0")):
        path = REPO / name
        if not path.is_file():
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if any(needle in line for needle in needles) or spec_number.search(line):
                hits.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not hits, "\n".join(hits)


#: Each paper's claims module, the prefix of its claims' ids and the name its claims' sources lead
#: with (`ClaimSpec.source`: "UDPO §3.2, Figure 3").
CLAIM_PAPERS = {
    "udpo": ("udpo", "UDPO"),
    "umad": ("umad", "UMAD"),
    "sdrl": ("sdrl", "SDRL"),
    "svr_mad": ("svr", "SVR-MAD"),
    "confidence": ("conf", "Elahi & Di Eugenio"),
}
# a claim id given as a section number, and the numbering of our own notes (§9 to §13, "§10.4")
SECTION_AS_CLAIM_ID = re.compile(r"""(?:\bclaim\s*=\s*|\bClaimSpec\(\s*|\bClaim(?:\.untestable)?\(\s*)["']§""")
NOTES_NUMBER = re.compile(r"§(?:9|1[0-3])(?!\d)(?:\.\d+)*")


def _claim_numbering_hits(root: Path) -> list[str]:
    """Where src/ and report/ under `root` give a claim a section number for its id, or use our
    notes' numbering §9-§13 other than as a paper's own section right after its name ("UDPO §9")."""
    names = tuple(f"{name} " for _, name in CLAIM_PAPERS.values())
    files = subprocess.run(
        ["git", "ls-files", "-z", "src", "report"], capture_output=True, text=True, cwd=root, check=True
    ).stdout
    hits = []
    for name in filter(None, files.split("\0")):
        path = root / name
        if not path.is_file() or path.suffix not in (".py", ".rst", ".md", ".yaml", ".txt", ".html"):
            continue
        text = path.read_bytes().decode("utf-8", errors="replace")
        for match in SECTION_AS_CLAIM_ID.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            hits.append(f"{name}:{line}: a claim id given as a section number")
        for number, line in enumerate(text.splitlines(), 1):
            for match in NOTES_NUMBER.finditer(line):
                if not line[: match.start()].endswith(names):
                    hits.append(f"{name}:{number}: {match.group(0)} in {line.strip()[:100]}")
    return hits


def test_claims_are_never_numbered_by_our_notes_or_by_a_section():
    """A claim's id is a short id in its paper ("udpo-2"), which stays put; where the paper states it
    is its `source`, in the paper's own numbering ("UDPO §3.2, Figure 3"). Neither the numbering of
    our own notes (§9-§13: "§10.4"), which no reader can look up, nor any section number is a claim
    id anywhere in src/ or report/; a paper's own section right after the paper's name is allowed."""
    hits = _claim_numbering_hits(REPO)
    assert not hits, "\n".join(hits)


def test_every_claim_has_a_short_id_and_names_where_its_paper_states_it():
    """Every `ClaimSpec` of a paper's claims module: an id "<prefix>-<n>", unique in the paper, and a
    source that leads with the paper's name and a section, appendix, table, figure or equation; every
    literal id an untestable row names is one of them or a range of them ("udpo-1..4")."""
    import importlib

    from debatelab.evaluation.claim_engine import ClaimSpec

    for paper, (prefix, name) in CLAIM_PAPERS.items():
        module = importlib.import_module(f"debatelab.evaluation.papers.{paper}_claims")
        specs = {
            id(spec): spec
            for value in vars(module).values()
            for spec in (value if isinstance(value, list) else [value])
            if isinstance(spec, ClaimSpec)
        }.values()
        ids = [spec.id for spec in specs]
        assert ids and all(re.fullmatch(rf"{prefix}-\d+", i) for i in ids), (paper, ids)
        assert len(ids) == len(set(ids)), (paper, sorted(ids))
        for spec in specs:
            assert re.match(rf"{re.escape(name)} (§\d|App\. [A-Z]|Table \d|Figure \d|Eq)", spec.source), (
                spec.id,
                spec.source,
            )
        text = Path(module.__file__).read_text()
        for literal in re.findall(r"""\bclaim=["']([^"']*)["']""", text):
            assert re.fullmatch(rf"{prefix}-\d+(\.\.\d+)?", literal), (paper, literal)
