"""Paired comparisons of accuracy on the same held-out questions: a trained agent against its base
(single agent), a debate of trained agents against the same debate of the base model, or any two
agents or protocols the config names (`evaluation.comparisons`).

Output (``summary/comparisons.csv``), one row per (comparison, dataset):

======================  ======================================================================
comparison              the config's name for it
kind                    "single agent" (two agents' zero-shot answers) or "debate" (two
                        protocols' final answers)
dataset                 the questions both sides answered (only questions both have count)
treatment, control      the agents or protocols compared
n                       questions
acc_treatment           accuracy in points: mean over the question's samples (single agent) or
acc_control             threads (debate), then over questions
difference              acc_treatment − acc_control, points
low, high               its 95 % interval: paired bootstrap over questions
mcnemar_p               exact McNemar p (one sample / thread per question; else empty)
verdict                 better / worse when the interval is above / below 0, else inconclusive
======================  ======================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import read_parquet_checked, save_figure_atomic, write_text_atomic
from ..reporting.figures import subplots
from .claims import mcnemar_p, paired_difference

COMPARISON_COLUMNS = [
    "comparison",
    "kind",
    "dataset",
    "treatment",
    "control",
    "n",
    "acc_treatment",
    "acc_control",
    "difference",
    "low",
    "high",
    "mcnemar_p",
    "verdict",
]


def two_sided_verdict(low: float, high: float) -> str:
    """better / worse only when the whole interval is above / below 0 (a tie is neither)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "n/a"
    return "better" if low > 0 else "worse" if high < 0 else "inconclusive"


def _per_question(frame: pd.DataFrame, key: str, name: str, dataset: str) -> pd.DataFrame:
    """Correctness of one agent (zero-shot) or protocol (debate) per question: the mean over samples
    or threads, and how many there were."""
    part = frame[(frame[key] == name) & (frame["dataset"] == dataset)]
    return part.groupby("question_id")["correct"].agg(["mean", "size"])


def compare_pair(frame: pd.DataFrame, key: str, treatment: str, control: str, dataset: str) -> dict:
    """One row of the table (module docstring) from rows with columns `key`, dataset, question_id, correct."""
    a = _per_question(frame, key, treatment, dataset)
    b = _per_question(frame, key, control, dataset)
    shared = a.index.intersection(b.index)
    a, b = a.loc[shared], b.loc[shared]
    estimate = paired_difference(a["mean"].to_numpy(float), b["mean"].to_numpy(float)).scaled(100)
    single = len(shared) > 0 and bool((a["size"] == 1).all() and (b["size"] == 1).all())
    return {
        "dataset": dataset,
        "treatment": treatment,
        "control": control,
        "n": len(shared),
        "acc_treatment": 100 * a["mean"].mean() if len(shared) else np.nan,
        "acc_control": 100 * b["mean"].mean() if len(shared) else np.nan,
        "difference": estimate.value,
        "low": estimate.low,
        "high": estimate.high,
        "mcnemar_p": mcnemar_p(a["mean"] > 0.5, b["mean"] > 0.5) if single else np.nan,
        "verdict": two_sided_verdict(estimate.low, estimate.high),
    }


def comparison_table(
    comparisons: Mapping[str, Mapping[str, str]],
    zero_shot: pd.DataFrame | None,
    questions: pd.DataFrame | None,
) -> pd.DataFrame:
    """Every configured comparison on every dataset both sides answered. `zero_shot` has one row per
    (question, agent, sample), `questions` one per (question, protocol, thread)."""
    rows = []
    for name, spec in comparisons.items():
        treatment, control = spec["treatment"], spec["control"]
        for kind, frame, key in (("single agent", zero_shot, "agent"), ("debate", questions, "protocol")):
            if frame is None or frame.empty or not {treatment, control} <= set(frame[key]):
                continue
            both = set(frame.loc[frame[key] == treatment, "dataset"]) & set(frame.loc[frame[key] == control, "dataset"])
            for dataset in sorted(both):
                rows.append({"comparison": name, "kind": kind, **compare_pair(frame, key, treatment, control, dataset)})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


def plot_comparisons(table: pd.DataFrame):
    """Each comparison's difference with its 95 % interval (a forest plot), one panel per dataset."""
    datasets = list(dict.fromkeys(table["dataset"])) or ["(none)"]
    fig, axes = subplots(1, len(datasets), figsize=(6 * len(datasets), 0.5 * max(3, len(table)) + 1.5), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        part = table[table["dataset"] == dataset].reset_index(drop=True)
        y = np.arange(len(part))[::-1]
        err = np.vstack([part["difference"] - part["low"], part["high"] - part["difference"]])
        ax.errorbar(part["difference"], y, xerr=err, fmt="o", capsize=3)
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_yticks(
            y, [f"{c} ({k}, n={n})" for c, k, n in zip(part["comparison"], part["kind"], part["n"])], fontsize="small"
        )
        ax.set_xlabel("accuracy difference, points (95 % interval)")
        ax.set_title(f"{dataset}: treatment − control on the same questions", fontsize="medium")
    fig.tight_layout()
    return fig


def summarize_comparisons(
    comparisons: Mapping[str, Mapping[str, str]],
    zero_shot_paths: Sequence[str | Path],
    question_paths: Sequence[str | Path],
    table_path: str | Path,
    plot_path: str | Path,
) -> pd.DataFrame:
    columns = ["dataset", "question_id", "correct"]
    zero_shot = (
        pd.concat([read_parquet_checked(p, [*columns, "agent"]) for p in zero_shot_paths], ignore_index=True)
        if zero_shot_paths
        else None
    )
    questions = (
        pd.concat([read_parquet_checked(p, [*columns, "protocol"]) for p in question_paths], ignore_index=True)
        if question_paths
        else None
    )
    table = comparison_table(comparisons, zero_shot, questions)
    write_text_atomic(table.to_csv(index=False, float_format="%.4g"), table_path)
    save_figure_atomic(plot_comparisons(table), plot_path)
    return table
