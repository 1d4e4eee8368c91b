"""The debate summary: every protocol side by side, SVR-MAD's Table 1 layout, cost against accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..io import read_parquet_checked, save_figure_atomic, write_text_atomic
from .figures import subplots

DEBATE_SUMMARY_COLUMNS = [
    "dataset",
    "protocol",
    "kind",
    "questions",
    "threads",
    "accuracy",
    "parse_failure_rate",
    "final_parse_failure_rate",
    "mean_ncomm",
    "mean_total_tokens",
    "mean_debate_calls",
    "mean_rounds",
    "early_stop_rate",
    "pre_majority_accuracy",
    "non_unanimous_questions",
    "accuracy_non_unanimous",
    "mean_ncomm_non_unanimous",
    "mean_total_tokens_non_unanimous",
]
DEBATE_QUESTION_INPUTS = [
    "question_id",
    "dataset",
    "protocol",
    "kind",
    "thread",
    "correct",
    "parse_failed",
    "rounds_used",
    "stopped_early",
    "ncomm",
    "debate_calls",
    "total_tokens",
    "pre_correct",
    "pre_unanimous",
]
DEBATE_TURN_INPUTS = ["dataset", "protocol", "round", "parse_failed"]
PAPER_METRICS = ["NComm", "Tok", "Acc"]


def debate_summary(question_frames: Sequence[pd.DataFrame], turn_frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """One row per (dataset, protocol), sorted by dataset then mean_total_tokens.

    Means run over (question, thread) rows of questions.parquet unless said otherwise:

    - kind: protocol kind; questions: distinct question ids; threads: distinct thread ids
    - accuracy: share of final answers that are correct
    - parse_failure_rate: share of debate turns (round >= 1) with no parsable answer; NaN without debate calls
    - final_parse_failure_rate: share of final answers that are null
    - mean_ncomm, mean_total_tokens, mean_debate_calls, mean_rounds (rounds_used)
    - early_stop_rate: share that stopped before the round limit
    - pre_majority_accuracy: accuracy of the pre-debate plurality (Self-Consistency on the same answers)
    - non_unanimous_questions: distinct question ids whose pre-debate answers disagree
      (SVR-MAD's "valid" questions); accuracy_non_unanimous, mean_ncomm_non_unanimous and
      mean_total_tokens_non_unanimous are taken over those alone, NaN if there are none
    """
    questions = pd.concat(question_frames, ignore_index=True)
    turns = pd.concat(turn_frames, ignore_index=True)
    debate_turns = turns[turns["round"] >= 1]
    turn_parse_failures = debate_turns.groupby(["dataset", "protocol"])["parse_failed"].mean()
    rows = []
    for (dataset, protocol), g in questions.groupby(["dataset", "protocol"], sort=True):
        valid = g[~g["pre_unanimous"].astype(bool)]
        rows.append(
            {
                "dataset": dataset,
                "protocol": protocol,
                "kind": g["kind"].iloc[0],
                "questions": g["question_id"].nunique(),
                "threads": g["thread"].nunique(),
                "accuracy": g["correct"].mean(),
                "parse_failure_rate": turn_parse_failures.get((dataset, protocol), float("nan")),
                "final_parse_failure_rate": g["parse_failed"].mean(),
                "mean_ncomm": g["ncomm"].mean(),
                "mean_total_tokens": g["total_tokens"].mean(),
                "mean_debate_calls": g["debate_calls"].mean(),
                "mean_rounds": g["rounds_used"].mean(),
                "early_stop_rate": g["stopped_early"].mean(),
                "pre_majority_accuracy": g["pre_correct"].mean(),
                "non_unanimous_questions": valid["question_id"].nunique(),
                # mean() of an empty column is NaN, as wanted
                "accuracy_non_unanimous": valid["correct"].mean(),
                "mean_ncomm_non_unanimous": valid["ncomm"].mean(),
                "mean_total_tokens_non_unanimous": valid["total_tokens"].mean(),
            }
        )
    summary = pd.DataFrame(rows, columns=DEBATE_SUMMARY_COLUMNS)
    return summary.sort_values(["dataset", "mean_total_tokens"], kind="stable", ignore_index=True)


def debate_table_paper_layout(summary: pd.DataFrame) -> pd.DataFrame:
    """SVR-MAD Table 1: rows = protocol, columns = (dataset, metric) for metric in NComm, Tok, Acc.

    As in the paper, all three are over the non-unanimous ("valid") questions: NComm = mean
    transfers per question, Tok = mean total tokens per question / 10³, Acc = % correct; one decimal.
    Protocols keep the summary's order (cheapest first on the first dataset).
    """
    metrics = pd.DataFrame(
        {
            "dataset": summary["dataset"],
            "protocol": summary["protocol"],
            "NComm": summary["mean_ncomm_non_unanimous"],
            "Tok": summary["mean_total_tokens_non_unanimous"] / 1000,
            "Acc": summary["accuracy_non_unanimous"] * 100,
        }
    )
    table = metrics.pivot(index="protocol", columns="dataset", values=PAPER_METRICS)
    table = table.swaplevel(axis=1).rename_axis(columns=["dataset", "metric"])
    columns = pd.MultiIndex.from_product([summary["dataset"].unique(), PAPER_METRICS], names=["dataset", "metric"])
    return table.reindex(index=summary["protocol"].unique(), columns=columns).round(1)


def plot_debate_cost_accuracy(summary: pd.DataFrame):
    """Accuracy (%) against mean tokens per question, one panel per dataset, one marker per protocol
    named in a shared legend (labels on the points overlapped)."""
    datasets = list(summary["dataset"].unique())
    protocols = list(dict.fromkeys(summary["protocol"]))
    markers = "osD^vP*Xh<>p"
    fig, axes = subplots(1, len(datasets), figsize=(5 * len(datasets), 3.8), squeeze=False, sharey=True)
    for ax, dataset in zip(axes[0], datasets):
        sub = summary[summary["dataset"] == dataset]
        for i, protocol in enumerate(protocols):
            row = sub[sub["protocol"] == protocol]
            if len(row):
                ax.scatter(
                    row["mean_total_tokens"],
                    100 * row["accuracy"],
                    marker=markers[i % len(markers)],
                    color=f"C{i % 10}",
                    s=40,
                    label=protocol,
                )
        ax.set_xlabel("mean tokens per question")
        ax.set_ylim(-3, 103)
        ax.set_title(f"{dataset} (n={int(sub['questions'].max())} questions)", fontsize="medium")
    axes[0][0].set_ylabel("accuracy (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:  # a protocol missing from the first dataset still gets its legend entry
        for handle, label in zip(*ax.get_legend_handles_labels()):
            if label not in labels:
                handles.append(handle)
                labels.append(label)
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
    fig.tight_layout()
    return fig


def summarize_debate(
    question_paths: Sequence[str | Path],
    turn_paths: Sequence[str | Path],
    table_path: str | Path,
    paper_table_path: str | Path,
    plot_path: str | Path,
) -> pd.DataFrame:
    """Write the debate summary CSV, its SVR-MAD Table 1 layout and the cost/accuracy plot; return the summary.

    The paper-layout CSV flattens its columns to "<dataset> <metric>"."""
    question_frames = [read_parquet_checked(p, DEBATE_QUESTION_INPUTS) for p in question_paths]
    turn_frames = [read_parquet_checked(p, DEBATE_TURN_INPUTS) for p in turn_paths]
    summary = debate_summary(question_frames, turn_frames)
    write_text_atomic(summary.to_csv(index=False, float_format="%.4f"), table_path)
    paper = debate_table_paper_layout(summary)
    paper.columns = [f"{dataset} {metric}" for dataset, metric in paper.columns]
    write_text_atomic(paper.to_csv(float_format="%.1f"), paper_table_path)
    save_figure_atomic(plot_debate_cost_accuracy(summary), plot_path)
    return summary
