"""The papers' published numbers, transcribed once into `config/paper_numbers/<paper>.yaml`, and
the comparison of a run's values with them.

File layout (one file per paper)::

    paper: sdrl
    source: "Liu et al., Prepare Reasoning Language Models for ... (SDRL), arXiv:2601.22297, Tables 1-6"
    backbones: [Q2.5-3B, Q3-4B-Base]  # the paper's models, as its tables spell them
    tables:
      table1:                       # a table the evaluation builds (tables/<paper>/table1.csv)
        where: "Table 1 (decentralized MAD, N = 5, T = 1), accuracy %"
        columns: [model, dataset, n_agents, method, metric, value]
        backbone: model             # the key naming the backbone each cell is on
        rows:
          - [Q2.5-3B, math500, 5, DAPO, maj, 70.9]

`columns` names the cell's keys and ends with `value`; `match` (default: every key) lists the keys
a run cell must share with it (the others only describe the cell). Datasets are the benchmark names
of `debatelab.data.BENCHMARKS` (a config maps a stand-in with `evaluation.paper_datasets`); values
are in the paper's units (%, points, ×10³ tokens).

Backbones. `backbones` lists the paper's models; a config says which one each of its models stands
for (`models.<name>.paper_backbone`, checked against this list when the config loads). A table whose
cells differ by backbone names that key in `backbone`; every value there is one of `backbones`, and
the key is always matched (a `match` leaving it out is an error), so a run cell is compared with its
own backbone's row only. The paper's builder fills the key of a run cell from its seats (`run.
RunOutputs.backbone`): the backbone when every seat stands for the same one, the seats' backbones
joined by " + " for a mixed ensemble (no published row has one), and "" (`run.NO_BACKBONE`) when
some seat's model names none. [CHOICE] Such a cell matches no backbone-specific row rather than
every one: its vs_paper rows show NaN run values (an unclaimed model is no evidence about either
backbone). A CPU twin's stand-in model claims the backbone of the model it replaces, as
`evaluation.paper_datasets` maps its stand-in datasets. Tables without a `backbone` key are on one
setting the paper states in `where` and join without one (UDPO's heterogeneous five-model ensemble,
the confidence paper's average over six model pairs; UMAD's `setting` key names its pair: homo =
Qwen2.5-3B-Instruct x 2, hetero = + Qwen3-4B-Instruct-2507).
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from ..intervals import mean_estimate, proportion

#: The papers' published numbers, one YAML per paper; its `backbones:` are what a model's
#: `paper_backbone` may name (`paper_backbones`).
PAPER_NUMBERS_DIR = Path(__file__).resolve().parents[3] / "config" / "paper_numbers"

VS_PAPER_COLUMNS = [
    "paper_value",
    "run_value",
    "run_low",
    "run_high",
    "paper_in_interval",
    "difference",
    "run_dataset",
    "n",
    "paper_where",
]


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
    backbones = [str(b) for b in doc.get("backbones") or []]
    tables = {}
    for name, spec in doc["tables"].items():
        columns = spec.get("columns") if isinstance(spec, dict) else None
        if not columns or columns[-1] != "value":
            raise PaperNumbersError(f"{path}: table {name}: `columns` must list the keys and end with `value`")
        rows = spec.get("rows") or []
        for i, row in enumerate(rows):
            if not isinstance(row, list) or len(row) != len(columns):
                raise PaperNumbersError(
                    f"{path}: table {name}, row {i}: {row!r} has {len(row) if isinstance(row, list) else 'no'}"
                    f" fields, columns {columns} need {len(columns)}"
                )
            if not isinstance(row[-1], (int, float)) or isinstance(row[-1], bool):
                raise PaperNumbersError(f"{path}: table {name}, row {i}: value {row[-1]!r} is not a number")
        frame = pd.DataFrame(rows, columns=columns)
        frame["where"] = spec.get("where", name)
        match = spec.get("match") or columns[:-1]
        unknown = [k for k in match if k not in columns[:-1]]
        if unknown:
            raise PaperNumbersError(f"{path}: table {name}: `match` names {unknown}, not among the keys {columns[:-1]}")
        backbone = spec.get("backbone")
        if backbone is not None:
            if backbone not in columns[:-1] or backbone not in match:
                raise PaperNumbersError(
                    f"{path}: table {name}: `backbone: {backbone}` must be a key of {columns[:-1]} "
                    f"that `match` lists (a cell is compared with its own backbone's row only)"
                )
            unknown = sorted(set(frame[backbone].astype(str)) - set(backbones))
            if unknown:
                raise PaperNumbersError(
                    f"{path}: table {name}: backbones {unknown} are not among `backbones` {backbones}"
                )
        frame.attrs["match"] = list(match)
        frame.attrs["backbone"] = backbone
        tables[name] = frame
    return tables


def compare_with_paper(run_long: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per published cell: its keys, the paper's value, this run's value (NaN where the run
    has no such cell) with its 95 % interval (`run_low`, `run_high`: NaN where the cell has none),
    whether the paper's value lies in that interval (`paper_in_interval`: empty without one), the
    difference run − paper, the run dataset and n behind the run value.

    `run_long` holds the run's cells in the same keys (dataset already the paper's name), a
    `value`, `n` and `run_dataset`, and `low` / `high` where its builder gives intervals. Key values
    are compared as strings, so 5 and "5" match."""
    described = [c for c in published.columns if c not in ("value", "where")]
    keys = list(published.attrs.get("match") or described)
    missing = [k for k in keys if k not in run_long.columns]
    if missing:
        raise KeyError(f"the run's table has no key column {missing} that the published cells use")
    left = published.assign(**{f"_k_{k}": published[k].astype(str) for k in keys})
    run_long = run_long.assign(**{c: run_long[c] if c in run_long else np.nan for c in ("low", "high")})
    right = run_long[keys + ["value", "low", "high", "n", "run_dataset"]].rename(
        columns={"value": "run_value", "low": "run_low", "high": "run_high"}
    )
    right = right.assign(**{f"_k_{k}": right[k].astype(str) for k in keys}).drop(columns=keys)
    merged = left.merge(right, on=[f"_k_{k}" for k in keys], how="left")
    merged = merged.drop(columns=[f"_k_{k}" for k in keys]).rename(
        columns={"value": "paper_value", "where": "paper_where"}
    )
    merged[["run_low", "run_high"]] = merged[["run_low", "run_high"]].astype(float)
    merged["difference"] = merged["run_value"] - merged["paper_value"]
    known = merged["run_low"].notna() & merged["run_high"].notna()
    inside = (merged["run_low"] <= merged["paper_value"]) & (merged["paper_value"] <= merged["run_high"])
    merged["paper_in_interval"] = inside.where(known).astype(object).where(known, None)
    return merged[described + VS_PAPER_COLUMNS]


def long_table(frame: pd.DataFrame, keys: Sequence[str], metrics: Sequence[str], n_column: str = "n") -> pd.DataFrame:
    """Melt a wide per-cell frame (keys + metric columns + n + run_dataset) into the long form above;
    a metric's `<metric>_low` / `<metric>_high` columns, where the frame has them (`cell_intervals`),
    become the cell's `low` / `high` (NaN for the others). A frame without cells gives the columns."""
    columns = [*keys, n_column, "run_dataset", "metric", "value", "low", "high"]
    if frame.empty:
        return pd.DataFrame(columns=columns).rename(columns={n_column: "n"})
    parts = []
    for metric in metrics:
        part = frame[[*keys, n_column, "run_dataset"]].assign(metric=metric, value=frame[metric])
        for end in ("low", "high"):
            part[end] = frame[f"{metric}_{end}"] if f"{metric}_{end}" in frame else np.nan
        parts.append(part)
    long = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)
    long = long[columns].rename(columns={n_column: "n"})
    return long.astype({"value": float, "low": float, "high": float}).replace({np.inf: np.nan, -np.inf: np.nan})


def bound_columns(metrics) -> list[str]:
    """`<metric>_low`, `<metric>_high` of each metric, in order: a wide cell frame's interval columns."""
    return [f"{m}_{end}" for m in metrics for end in ("low", "high")]


def joined_datasets(names) -> str:
    """The run datasets behind an average over datasets, as its cell's `run_dataset` names them ("a+b")."""
    return "+".join(sorted(set(names)))


def agreed_outcomes(values: pd.DataFrame, questions) -> pd.DataFrame | None:
    """Each question's 0/1 outcome of each column where the rows count questions: `values` are 0/1
    outcomes (the caller checks) and each question's rows (threads, samples) agree on every column;
    else None. A share of such rows is a binomial count of questions, with an exact interval
    (`cell_intervals`)."""
    values = pd.DataFrame(values).astype(float)
    per_question = values.groupby(np.asarray(questions)).mean()
    if per_question.empty or not per_question.isin([0.0, 1.0]).all().all():
        return None  # a mean of 0/1 values is 0 or 1 only where they all agree
    return per_question


def _mean_present(values: np.ndarray, axis: int) -> np.ndarray:
    """The mean over `axis` of the values that are not NaN; NaN where all are."""
    present = ~np.isnan(values)
    count = present.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.where(present, values, 0.0).sum(axis=axis) / count, np.nan)


def dataset_average_statistic(rows: pd.DataFrame, columns: list[str], thread: str | None = None):
    """A table's average over datasets as a function of resampled questions, for `intervals.bootstrap`:
    per (dataset, thread) the mean of each column over its rows, averaged over the datasets a thread
    has, then over the threads (`thread` None: one), as SDRL's tables and UMAD's Avg print them. The
    unit is the (dataset, question): all its rows move together. Each dataset keeps its own mean in
    every resample, so the unweighted average over datasets is what is resampled, not the pooled
    share (which would weight datasets by their size). Returns (statistic, questions):
    the statistic maps an int array of question indices, one resample a row, to (resamples,
    len(columns)) shares; on every question once it is the printed value / 100."""
    # numbered in sorted order, as `intervals.cluster_codes` numbers clusters: the row order doesn't matter
    question = rows.groupby(["dataset", "question_id"], sort=True).ngroup().to_numpy()
    n_questions = int(question.max()) + 1
    dataset, n_datasets = pd.factorize(rows["dataset"])[0], rows["dataset"].nunique()
    threads, n_threads = (pd.factorize(rows[thread])[0], rows[thread].nunique()) if thread else (0, 1)
    # per question and (dataset, thread): its rows, then each column's sum
    sums = np.zeros((n_questions, n_datasets * n_threads, 1 + len(columns)))
    values = np.column_stack([np.ones(len(rows)), rows[columns].to_numpy(dtype=float)])
    np.add.at(sums, (question, dataset * n_threads + threads), values)
    sums = sums.reshape(n_questions, -1)

    def statistic(index: np.ndarray) -> np.ndarray:
        index = np.atleast_2d(index)
        draws = len(index)
        offsets = np.arange(draws)[:, None] * n_questions
        drawn = np.bincount((offsets + index).ravel(), minlength=draws * n_questions).reshape(draws, n_questions)
        totals = (drawn @ sums).reshape(draws, n_datasets, n_threads, 1 + len(columns))
        with np.errstate(invalid="ignore", divide="ignore"):  # a (dataset, thread) the resample missed: NaN, skipped
            means = totals[..., 1:] / totals[..., :1]
        return _mean_present(_mean_present(means, axis=1), axis=1)

    return statistic, n_questions


def cell_intervals(
    rows: pd.DataFrame,
    keys: Sequence[str],
    metrics: dict[str, tuple[str, float]],
    cluster: str = "question_id",
    shares: Collection[str] = (),
) -> pd.DataFrame:
    """The 95 % interval of each cell's mean (rows grouped by `keys`) of each metric: `metrics` maps
    the cell's column to (the rows' column, scale), e.g. {"accuracy": ("correct", 100)}; NaN values
    are left out. Returns keys + `<metric>_low` + `<metric>_high`, one row per cell.

    The metrics named in `shares` are shares of 0/1 outcomes (a value other than 0 or 1 is an
    error). Where each `cluster` value's (question's) rows all agree (one thread each, or threads
    that agree) such a share is a binomial count of questions and gets Clopper-Pearson's interval,
    exact at any n (never a zero-width interval at 0 % or 100 %). Any other metric, and a share whose
    threads disagree somewhere, gets the BCa bootstrap over `cluster` values, a question's rows
    drawn together, none (NaN) under `intervals.MIN_UNITS` questions. A count that happens to be 0
    or 1 is no share: it is bootstrapped like any mean."""
    unknown = set(shares) - set(metrics)
    if unknown:
        raise ValueError(f"cell_intervals: shares {sorted(unknown)} are not among the metrics {list(metrics)}")
    columns = [*keys, *bound_columns(metrics)]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for cell, group in rows.groupby(list(keys), sort=False, dropna=False):
        row = dict(zip(keys, cell if isinstance(cell, tuple) else (cell,)))
        for name, (column, scale) in metrics.items():
            values = group[column].astype(float)
            kept = values.notna().to_numpy()
            x, units = values.to_numpy()[kept], group[cluster].to_numpy()[kept]
            est = None
            if name in shares:
                if not np.isin(x, (0.0, 1.0)).all():
                    raise ValueError(f"cell_intervals: share {name!r} ({column}) has values other than 0 and 1")
                counts = agreed_outcomes(pd.Series(x), units)
                if counts is not None:
                    est = proportion(int(counts.iloc[:, 0].sum()), len(counts))
            if est is None:
                est = mean_estimate(x, clusters=units)
            row[f"{name}_low"], row[f"{name}_high"] = est.low * scale, est.high * scale
        out.append(row)
    return pd.DataFrame(out, columns=columns)


@functools.cache
def paper_backbones(paper: str) -> tuple[str, ...]:
    """The backbones a paper's published numbers name (`backbones:` of config/paper_numbers/<paper>.yaml),
    spelled as there; empty where the file lists none."""
    doc = yaml.safe_load((PAPER_NUMBERS_DIR / f"{paper}.yaml").read_text()) or {}
    return tuple(str(b) for b in doc.get("backbones") or ())
