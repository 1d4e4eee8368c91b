"""The papers' experimental settings, one module per paper, as `tests/test_paper_settings.py` checks
them against the paper configs.

Each module defines `TABLES = {config name: [Setting, ...]}` (the config is
`config/experiments/<name>.yaml`) and `DECLARED = {config name: {path, ...}}`: the `[CHOICE]`s that
config declares under `paper_choices`, listed here as well so that every choice is visible in the
tests. A `Setting` is a config path, the paper's value (or a `Check` for a bound) and where the
paper (or the spec that reads it) says so.

Paths (resolved by `test_paper_settings.resolve`):
  training.<run>.<key>[.<key>]       the run's settings as the train jobs get them (`Experiment.run_settings`: its
                                     method's block, e.g. sdrl.pair_mode, with its defaults)
  agents.<agent>[@<dataset>].<key>   the agent's settings, on a dataset with its per-dataset budgets
  protocols.<name>.<key>             a debate protocol's options (threads filled from evaluation.seeds)
  datasets.<name>.<key>, models.<name>.<key>, evaluation.<key>, zero_shot.<key>, ... the config itself
  derived.<name>                     a quantity computed from several settings (`DERIVED` of the module)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """A paper value that is a bound or a set, not one value: `test(value)` says whether the config's
    value meets it; `text` describes it in a failure."""

    test: Callable[[Any], bool]
    text: str

    def __repr__(self) -> str:
        return self.text


def at_least(bound) -> Check:
    return Check(lambda v: v is not None and v >= bound, f">= {bound}")


def one_of(*values) -> Check:
    return Check(lambda v: v in values, f"one of {values}")


@dataclass(frozen=True)
class Setting:
    path: str
    paper: Any
    source: str


def runs_rows(runs, rows: list[tuple[str, Any, str]]) -> list[Setting]:
    """The same (key, paper value, source) rows for each training run of `runs`."""
    return [Setting(f"training.{run}.{key}", value, source) for run in runs for key, value, source in rows]
