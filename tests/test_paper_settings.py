"""Each paper config is its paper: every experimental setting the paper gives (models, datasets and
splits, N, rounds, steps, learning rate and schedule, batch and mini-batch in the paper's units,
token budgets, clipping, KL, temperatures, seeds, trial budgets), as the tables in
`tests/paper_settings/<paper>.py` transcribe it with its section, is compared with the resolved
config. A difference (or a paper setting the config has no key for) fails unless the config declares it
under `paper_choices` with its reason; the declared choices are listed in those tables too, and
each must cover a real difference."""

from __future__ import annotations

import fnmatch
import importlib
import math
from functools import cache
from pathlib import Path

import pytest
from paper_settings import Check, Setting

from debatelab.config import load_experiment

ROOT = Path(__file__).resolve().parents[1]
PAPER_MODULES = ("udpo", "umad", "sdrl", "svr_mad", "confidence")
MISSING = object()


def _modules():
    return {name: importlib.import_module(f"paper_settings.{name}") for name in PAPER_MODULES}


def _configs() -> dict[str, object]:
    """{config name: the paper module whose tables check it}."""
    out = {}
    for module in _modules().values():
        for config in module.TABLES:
            out[config] = module
    return out


CONFIGS = sorted(_configs())


@cache
def experiment(name: str):
    return load_experiment(ROOT / "config" / "experiments" / f"{name}.yaml")


def _walk(value, keys):
    """value[k1][k2]...; a name with dots in it (a model "qwen2.5-3b") is the longest run of keys that is one."""
    keys = list(keys)
    while keys:
        if not isinstance(value, dict):
            return MISSING
        for n in range(len(keys), 0, -1):
            if ".".join(keys[:n]) in value:
                value, keys = value[".".join(keys[:n])], keys[n:]
                break
        else:
            return MISSING
    return value


def _name(keys: list[str], names) -> tuple[str | None, list[str]]:
    """(the longest run of leading keys that is one of `names`, the keys after it): a name may hold
    dots ("llama3.2-3b__gemma3-4b")."""
    for n in range(len(keys), 0, -1):
        if ".".join(keys[:n]) in names:
            return ".".join(keys[:n]), keys[n:]
    return None, keys


def resolve(exp, path: str, derived: dict):
    """The config's value at `path` (see `paper_settings`), or MISSING."""
    head, _, rest = path.partition(".")
    keys = rest.split(".") if rest else []
    if head == "derived":
        return derived[rest](exp) if rest in derived else MISSING
    if head == "training":
        run, keys = _name(keys, exp.training_runs)
        if run is None:
            return MISSING
        spec = {**exp.training_runs[run], **exp.run_settings(run).to_dict()}  # every block with its defaults
        return _walk(spec, keys)
    if head == "agents":
        names = {f"{a}@{d}" for a in exp.agents for d in exp.datasets} | set(exp.agents)
        agent, keys = _name(keys, names)
        if agent is None:
            return MISSING
        name, _, dataset = agent.partition("@")
        return _walk(exp.agent_settings(name, dataset or None), keys)
    if head == "protocols":
        name, keys = _name(keys, exp.protocols)
        if name is None:
            return MISSING
        spec = {
            **exp.protocols[name],
            "participants": exp.protocol_participants(name),
            "datasets": exp.protocol_datasets(name),
        }
        return _walk(spec, keys)
    return _walk(exp.config, [head, *keys])


def matches(value, paper) -> bool:
    if isinstance(paper, Check):
        return paper.test(value)
    if isinstance(paper, bool) or isinstance(value, bool):
        return value is paper
    if isinstance(paper, (int, float)) and isinstance(value, (int, float)):
        return math.isclose(value, paper, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(paper, (list, tuple)) and isinstance(value, (list, tuple)):
        return len(paper) == len(value) and all(matches(v, p) for v, p in zip(value, paper))
    return value == paper


def differences(name: str) -> list[tuple[Setting, object]]:
    module = _configs()[name]
    exp = experiment(name)
    return [
        (s, v)
        for s in module.TABLES[name]
        for v in [resolve(exp, s.path, getattr(module, "DERIVED", {}))]
        if v is MISSING or not matches(v, s.paper)
    ]


def declared(name: str) -> dict[str, str]:
    return experiment(name).config.get("paper_choices") or {}


def _covered(path: str, choices) -> bool:
    return any(fnmatch.fnmatchcase(path, pattern) for pattern in choices)


@pytest.mark.parametrize("name", CONFIGS)
def test_every_setting_is_the_papers_or_a_declared_choice(name):
    choices = declared(name)
    undeclared = [
        f"{s.path}: config {'(missing)' if v is MISSING else repr(v)}, paper {s.paper!r} ({s.source})"
        for s, v in differences(name)
        if not _covered(s.path, choices)
    ]
    assert not undeclared, f"config/experiments/{name}.yaml differs from its paper:\n  " + "\n  ".join(undeclared)


@pytest.mark.parametrize("name", CONFIGS)
def test_the_declared_choices_are_listed_with_the_papers_settings(name):
    """The config's [CHOICE]s are exactly the ones the table lists, so a new one shows in the tests."""
    module = _configs()[name]
    assert set(declared(name)) == set(module.DECLARED.get(name, ())), (
        f"config/experiments/{name}.yaml paper_choices vs tests/paper_settings/{module.__name__.split('.')[-1]}.py DECLARED"
    )


@pytest.mark.parametrize("name", CONFIGS)
def test_every_declared_choice_covers_a_real_difference(name):
    """A choice that matches no differing setting is stale (the config went back to the paper) or
    names a path that does not exist."""
    different = [s.path for s, _ in differences(name)]
    stale = [pattern for pattern in declared(name) if not any(fnmatch.fnmatchcase(p, pattern) for p in different)]
    assert not stale, f"config/experiments/{name}.yaml paper_choices that differ from nothing: {stale}"


def test_the_comparison_catches_a_drift(tmp_path):
    """The check could fail: umad.yaml with the training temperature at 1.0 differs from §6's 0.8."""
    import yaml
    from paper_settings import umad as tables

    config = yaml.safe_load((ROOT / "config/experiments/umad.yaml").read_text())
    config["training"]["runs"]["umad"]["temperature"] = 1.0
    path = tmp_path / "umad.yaml"
    path.write_text(yaml.safe_dump(config))
    exp = load_experiment(path)
    row = next(s for s in tables.TABLES["umad"] if s.path == "training.umad.temperature")
    assert not matches(resolve(exp, row.path, tables.DERIVED), row.paper)
    assert not _covered(row.path, exp.config.get("paper_choices") or {})
