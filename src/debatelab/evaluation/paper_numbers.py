"""The papers' published numbers, transcribed once into `config/paper_numbers/<paper>.yaml`, and
the comparison of a run's values with them.

File layout (one file per paper)::

    paper: udpo
    source: "../shared/specs/000_udpo.md §10"
    tables:
      table1:                       # a table the evaluation builds (tables/<paper>/table1.csv)
        where: "Table 1 (heterogeneous ensemble, T = 5), accuracy %"
        columns: [dataset, n_agents, method, metric, value]
        rows:
          - [gsm8k, 3, MAD, accuracy, 51.2]

`columns` names the cell's keys and ends with `value`; `match` (default: every key) lists the keys
a run cell must share with it (the others, such as the paper's model, only describe the cell).
Datasets are the benchmark names of `debatelab.data.BENCHMARKS` (a config maps a stand-in with
`evaluation.paper_datasets`); values are in the paper's units (%, points, ×10³ tokens).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

PAPER_NUMBERS_DIR = Path(__file__).resolve().parents[3] / "config" / "paper_numbers"
VS_PAPER_COLUMNS = ["paper_value", "run_value", "difference", "run_dataset", "n", "paper_where"]


class PaperNumbersError(ValueError):
    """A paper-numbers file that doesn't follow the layout; the message names file, table and row."""


def load_paper_numbers(paper: str, directory: str | Path = PAPER_NUMBERS_DIR) -> dict[str, pd.DataFrame]:
    """{table: one row per published cell, columns = the table's keys + value + where}."""
    path = Path(directory) / f"{paper}.yaml"
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise PaperNumbersError(f"{path}: {err}") from err
    if not isinstance(doc, dict) or doc.get("paper") != paper or not isinstance(doc.get("tables"), dict):
        raise PaperNumbersError(f"{path}: needs `paper: {paper}` and a `tables` mapping")
    tables = {}
    for name, spec in doc["tables"].items():
        columns = spec.get("columns") if isinstance(spec, dict) else None
        if not columns or columns[-1] != "value":
            raise PaperNumbersError(f"{path}: table {name}: `columns` must list the keys and end with `value`")
        rows = spec.get("rows") or []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(columns):
                raise PaperNumbersError(f"{path}: table {name}, row {i}: {row!r} has {len(row) if isinstance(row, list) else 'no'}"
                                        f" fields, columns {columns} need {len(columns)}")
            if not isinstance(row[-1], (int, float)) or isinstance(row[-1], bool):
                raise PaperNumbersError(f"{path}: table {name}, row {i}: value {row[-1]!r} is not a number")
        frame = pd.DataFrame(rows, columns=columns)
        frame["where"] = spec.get("where", name)
        match = spec.get("match") or columns[:-1]
        unknown = [k for k in match if k not in columns[:-1]]
        if unknown:
            raise PaperNumbersError(f"{path}: table {name}: `match` names {unknown}, not among the keys {columns[:-1]}")
        frame.attrs["match"] = list(match)
        tables[name] = frame
    return tables


def compare_with_paper(run_long: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per published cell: its keys, the paper's value, this run's value (NaN where the run
    has no such cell), the difference run − paper, the run dataset and n behind the run value.

    `run_long` holds the run's cells in the same keys (dataset already the paper's name), a
    `value`, `n` and `run_dataset`. Key values are compared as strings, so 5 and "5" match."""
    described = [c for c in published.columns if c not in ("value", "where")]
    keys = list(published.attrs.get("match") or described)
    missing = [k for k in keys if k not in run_long.columns]
    if missing:
        raise KeyError(f"the run's table has no key column {missing} that the published cells use")
    left = published.assign(**{f"_k_{k}": published[k].astype(str) for k in keys})
    right = run_long[keys + ["value", "n", "run_dataset"]].rename(columns={"value": "run_value"})
    right = right.assign(**{f"_k_{k}": right[k].astype(str) for k in keys}).drop(columns=keys)
    merged = left.merge(right, on=[f"_k_{k}" for k in keys], how="left")
    merged = merged.drop(columns=[f"_k_{k}" for k in keys]).rename(columns={"value": "paper_value", "where": "paper_where"})
    merged["difference"] = merged["run_value"] - merged["paper_value"]
    return merged[described + VS_PAPER_COLUMNS]


def long_table(frame: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], n_column: str = "n") -> pd.DataFrame:
    """Melt a wide per-cell frame (keys + metric columns + n + run_dataset) into the long form above."""
    long = frame.melt(id_vars=[*keys, n_column, "run_dataset"], value_vars=list(metrics), var_name="metric",
                      value_name="value")
    return long.rename(columns={n_column: "n"}).astype({"value": float}).replace({np.inf: np.nan})
