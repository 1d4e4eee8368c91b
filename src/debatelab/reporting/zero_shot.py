"""The zero-shot summary: accuracy, parse failures, confidence and tokens per dataset and agent."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..cost import Price, jobs_gpu_usd, prices_of, tokens_usd, usd_text
from ..io import read_parquet_checked, save_figure_atomic, write_text_atomic
from .figures import subplots

ZERO_SHOT_SUMMARY_COLUMNS = [
    "dataset",
    "agent",
    "model",
    "questions",
    "samples",
    "accuracy",
    "parse_failure_rate",
    "truncated_rate",
    "mean_conf_verbal",
    "mean_conf_seqprob",
    "tokens_per_question",
    "confidence_tokens_per_question",
    "cost_usd",
    "cost_usd_per_question",
    "gpu_cost_usd",
]


def zero_shot_summary(
    frames: Sequence[pd.DataFrame],
    prices: Mapping[str, Price | Mapping] | None = None,
    gpu_jobs: Sequence[Mapping] = (),
) -> pd.DataFrame:
    """One row per (dataset, agent). `cost_usd`: dollars of the answer calls (the tokens of
    `tokens_per_question`) at the model's price (`debatelab.cost`; no price: 0), plus `gpu_cost_usd`:
    the job's GPU-hours where its model has a `gpu_hour` price (`gpu_jobs`, the rule's params:
    `debatelab.cost.jobs_gpu_usd`; 0 otherwise); confidence elicitation's tokens are not priced (its
    GPU time is in the job's)."""
    df = pd.concat(frames, ignore_index=True)
    prices = prices_of(prices)
    df["cost_usd"] = tokens_usd(df, prices)
    gpu_usd = jobs_gpu_usd(gpu_jobs, ["dataset", "agent"], df, prices) if gpu_jobs else {}
    rows = []
    for (dataset, agent), g in df.groupby(["dataset", "agent"], sort=True):
        questions = g["question_id"].nunique()
        rows.append(
            {
                "dataset": dataset,
                "agent": agent,
                "model": g["model"].iloc[0],
                "questions": questions,
                "samples": len(g),
                "accuracy": g["correct"].mean(),
                "parse_failure_rate": g["parse_failed"].mean(),
                "truncated_rate": (g["finish_reason"] == "length").mean(),
                "mean_conf_verbal": g["conf_verbal"].mean(),
                "mean_conf_seqprob": g["conf_seqprob"].mean(),
                "tokens_per_question": (g["prompt_tokens"] + g["completion_tokens"]).sum() / questions,
                "confidence_tokens_per_question": g["extra_tokens"].sum() / questions,
                "cost_usd": g["cost_usd"].sum() + gpu_usd.get((dataset, agent), 0.0),
                "cost_usd_per_question": (g["cost_usd"].sum() + gpu_usd.get((dataset, agent), 0.0)) / questions,
                "gpu_cost_usd": gpu_usd.get((dataset, agent), 0.0),
            }
        )
    return pd.DataFrame(rows, columns=ZERO_SHOT_SUMMARY_COLUMNS)


def plot_zero_shot(summary: pd.DataFrame):
    """Accuracy, parse failures and mean confidences per agent, one panel per dataset."""
    metrics = [
        ("accuracy", "accuracy"),
        ("parse_failure_rate", "parse failures"),
        ("mean_conf_verbal", "self-report conf."),
        ("mean_conf_seqprob", "seq-prob conf."),
    ]
    datasets = list(summary["dataset"].unique())
    fig, axes = subplots(1, len(datasets), figsize=(5 * len(datasets), 3.8), squeeze=False, sharey=True)
    for ax, dataset in zip(axes[0], datasets):
        sub = summary[summary["dataset"] == dataset]
        width = 0.8 / len(metrics)
        for k, (col, label) in enumerate(metrics):
            xs = [i + k * width for i in range(len(sub))]
            ax.bar(xs, sub[col].fillna(0).to_numpy(), width=width, label=label)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sub))], sub["agent"], rotation=20)
        ax.set_ylim(0, 1)
        ax.set_title(f"{dataset} (n={int(sub['questions'].max())})")
    axes[0][0].set_ylabel("rate / confidence")
    axes[0][-1].legend(loc="upper right", fontsize="small")
    fig.tight_layout()
    return fig


def summarize_zero_shot(
    paths: Sequence[str | Path],
    table_path: str | Path,
    plot_path: str | Path,
    prices: Mapping | None = None,
    gpu_jobs: Sequence[Mapping] = (),
) -> pd.DataFrame:
    frames = [read_parquet_checked(p, ["dataset", "agent", "question_id", "correct", "parse_failed"]) for p in paths]
    summary = zero_shot_summary(frames, prices, gpu_jobs)
    text = usd_text(summary, ["cost_usd", "cost_usd_per_question", "gpu_cost_usd"]).to_csv(
        index=False, float_format="%.4f"
    )
    write_text_atomic(text, table_path)
    save_figure_atomic(plot_zero_shot(summary), plot_path)
    return summary
