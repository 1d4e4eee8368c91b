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
acc_*_low, acc_*_high   each accuracy's 95 % interval: Clopper-Pearson with one sample / thread
                        per question, else the BCa bootstrap of the per-question means
difference              acc_treatment − acc_control, points
low, high               its 95 % interval: with one sample / thread per question on both sides,
                        the exact interval conditional on the discordant questions
                        (`intervals.paired_accuracy_difference`); else (per-question means over
                        several samples) the paired BCa bootstrap over questions
p                       the two-sided p-value of "difference = 0" by the test that interval
                        inverts: exact McNemar, or the BCa bootstrap's; p < 0.05 exactly when the
                        interval excludes 0
test                    which of the two (the interval's method)
verdict                 better / worse when the interval is above / below 0 and p < 0.05, else
                        inconclusive; n/a (too few) for a bootstrap on fewer than
                        `intervals.MIN_UNITS` questions
p_holm                  p after Holm's step-down adjustment over every row of the table with a p
verdict_holm            the verdict, inconclusive where p_holm ≥ 0.05 (the table's multiplicity)
======================  ======================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..intervals import ALPHA, Estimate, mean_estimate, paired_accuracy_difference, paired_difference, proportion
from ..io import read_parquet_checked, save_figure_atomic, write_text_atomic
from ..reporting.figures import subplots
from .claims import TOO_FEW, holm

COMPARISON_COLUMNS = [
    "comparison",
    "kind",
    "dataset",
    "treatment",
    "control",
    "n",
    "acc_treatment",
    "acc_treatment_low",
    "acc_treatment_high",
    "acc_control",
    "acc_control_low",
    "acc_control_high",
    "difference",
    "low",
    "high",
    "p",
    "test",
    "verdict",
    "p_holm",
    "verdict_holm",
]


def two_sided_verdict(estimate: Estimate) -> str:
    """better / worse only when the whole interval is above / below 0 (a tie is neither) and the
    matching test rejects 0 (p < 0.05)."""
    if estimate.too_few:
        return TOO_FEW
    if not estimate.finite:
        return "n/a"
    p = estimate.p
    rejected = not np.isfinite(p) or p < ALPHA
    return "better" if estimate.low > 0 and rejected else "worse" if estimate.high < 0 and rejected else "inconclusive"


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
    single = len(shared) > 0 and bool((a["size"] == 1).all() and (b["size"] == 1).all())
    if single:  # one 0/1 outcome per question and side: paired correctness, exact
        estimate = paired_accuracy_difference(a["mean"].to_numpy() > 0.5, b["mean"].to_numpy() > 0.5).scaled(100)
    else:
        estimate = paired_difference(a["mean"].to_numpy(float), b["mean"].to_numpy(float)).scaled(100)
    accuracy = {}
    for side, means in (("treatment", a["mean"]), ("control", b["mean"])):
        one = proportion(int((means > 0.5).sum()), len(means)) if single else mean_estimate(means.to_numpy(float))
        one = one.scaled(100)
        accuracy |= {f"acc_{side}": one.value, f"acc_{side}_low": one.low, f"acc_{side}_high": one.high}
    return {
        "dataset": dataset,
        "treatment": treatment,
        "control": control,
        "n": len(shared),
        **accuracy,
        "difference": estimate.value,
        "low": estimate.low,
        "high": estimate.high,
        "p": estimate.p,
        "test": estimate.method,
        "verdict": two_sided_verdict(estimate),
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
    table = pd.DataFrame(rows, columns=COMPARISON_COLUMNS)
    table["p_holm"] = holm(table["p"].to_numpy(float)) if len(table) else np.zeros(0)
    table["verdict_holm"] = [
        "inconclusive" if v in ("better", "worse") and np.isfinite(ph) and ph >= ALPHA else v
        for v, ph in zip(table["verdict"], table["p_holm"])
    ]
    return table


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
