"""The import graph between debatelab's top-level packages and modules has no cycle, and the stage
jobs that never plot or search import neither matplotlib nor Optuna.

The graph is read from the source with `ast` (every import statement, function-level ones
included), one node per top-level package or module (`debatelab.training` is one node whatever its
inside looks like), an edge a -> b when some module of a imports something of b."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "debatelab"

#: Stage packages: `reporting` plots and summarises their outputs and imports none of them (they call it).
STAGES = ("zero_shot", "debate", "uncertainty", "confidence", "training", "evaluation")

#: Edges that close a cycle today, each with what removes it. The test fails when one is gone, so
#: that it is struck from here too.
KNOWN_CYCLE_EDGES: dict[tuple[str, str], str] = {}


def _node(module: str) -> str | None:
    """The top-level package or module of a dotted `debatelab.*` name (None for `debatelab` itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside `if TYPE_CHECKING:` blocks: imports for annotations only, never run."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            skipped.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return skipped


def _imported(tree: ast.AST, package: list[str]) -> set[str]:
    """Dotted names of everything a module imports (but under `if TYPE_CHECKING:`); `package` is the
    module's package path (for relative imports). `from X import y` yields X.y too, since y may be a
    submodule."""
    names = set()
    skipped = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def package_graph() -> dict[str, dict[str, set[str]]]:
    """node -> {imported node: the modules of node that import it}."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[:-1]
        module = ".".join(package if parts[-1] == "__init__" else parts)
        source = _node(module)
        if source is None:
            continue
        targets = graph.setdefault(source, {})
        for name in _imported(ast.parse(path.read_text(), str(path)), package):
            if name.split(".")[0] != "debatelab":
                continue
            target = _node(name)
            if target and target != source and ((PACKAGE / target).is_dir() or (PACKAGE / f"{target}.py").exists()):
                targets.setdefault(target, set()).add(module)
    return graph


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle [a, b, ..., a] of the directed graph, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_names_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_imports_are_read_at_every_level():
    tree = ast.parse(
        "import debatelab.io\n"
        "from .. import grading\n"
        "from ...training import settings\n"
        "def f():\n"
        "    from ..llm.base import Backend\n"
        "if TYPE_CHECKING:\n"
        "    from ...config import Experiment\n"
    )
    names = _imported(tree, ["debatelab", "evaluation", "papers"])
    assert {
        "debatelab.io",
        "debatelab.evaluation.grading",
        "debatelab.training.settings",
        "debatelab.evaluation.llm.base",
    } <= names
    assert "debatelab.config" not in names  # an annotation's import runs nowhere
    names = _imported(tree, ["debatelab", "debate"])
    assert {"debatelab.grading", "debatelab.llm.base"} <= names
    graph = package_graph()
    assert set(graph) >= {"config", "llm", "reporting", "estimators", *STAGES}
    assert "estimators" in graph["debate"] and "gpu_plan" in graph["llm"]  # the latter inside functions only


def test_package_imports_have_no_cycle():
    graph = package_graph()
    for (a, b), why in KNOWN_CYCLE_EDGES.items():
        assert b in graph.get(a, {}), f"{a} -> {b} no longer exists: strike it from KNOWN_CYCLE_EDGES ({why})"
    edges = {a: {b for b in targets if (a, b) not in KNOWN_CYCLE_EDGES} for a, targets in graph.items()}
    cycle = find_cycle(edges)
    if cycle:
        via = "; ".join(f"{a} -> {b} in {', '.join(sorted(graph[a][b]))}" for a, b in zip(cycle, cycle[1:]))
        pytest.fail(f"import cycle {' -> '.join(cycle)} ({via})")


def test_the_config_sits_on_top_and_reads_the_registries_directly():
    """config.py checks experiments against the registries of the packages that own them (methods in
    training, papers in evaluation, backends in llm), importing them as any module does; nothing in
    the library imports the config back (it hands an `Experiment` down, typed under TYPE_CHECKING)."""
    graph = package_graph()
    importers = {node: sorted(targets["config"]) for node, targets in graph.items() if "config" in targets}
    assert not importers, f"the config sits above the packages; these import it: {importers}"
    assert {"training", "evaluation", "models", "credentials"} <= set(graph["config"])
    assert "importlib" not in (PACKAGE / "config.py").read_text()


def test_reading_a_config_imports_no_torch():
    """A dry run parses the Snakefile, which checks the config and its training runs' settings: the
    registries it reads must not pull torch (seconds on every snakemake call and SLURM job)."""
    code = (
        "import sys; from debatelab.config import Experiment; from debatelab.training.settings import TrainSettings; "
        "from debatelab.training.methods import METHODS; [TrainSettings(method=m) for m in METHODS]; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_reporting_imports_no_stage():
    graph = package_graph()
    reached = {stage: sorted(graph["reporting"][stage]) for stage in STAGES if stage in graph["reporting"]}
    assert not reached, f"reporting imports stage packages (the stages call reporting, not the other way): {reached}"


@pytest.mark.parametrize(
    "module", ["debatelab.debate.engine", "debatelab.debate.stage", "debatelab.zero_shot.stage", "debatelab.estimators"]
)
def test_stage_imports_neither_optuna_nor_matplotlib(module):
    code = (
        f"import sys; import {module}; "
        "loaded = [m for m in ('optuna', 'matplotlib') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}
    )
    assert result.returncode == 0, result.stderr[-2000:]
