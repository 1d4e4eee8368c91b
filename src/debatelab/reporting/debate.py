"""The debate summary: every protocol side by side, SVR-MAD's Table 1 layout, cost against accuracy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ..cost import jobs_gpu_usd, prices_of, tokens_usd, usd_text
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
    "cost_usd",
    "mean_cost_usd",
    "mean_cost_usd_non_unanimous",
    "gpu_cost_usd",
]
USD_COLUMNS = ["cost_usd", "mean_cost_usd", "mean_cost_usd_non_unanimous", "gpu_cost_usd"]
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
#: read for the dollar columns (cached_tokens too where the file has it)
DEBATE_TURN_COST_INPUTS = ["question_id", "thread", "model", "prompt_tokens", "completion_tokens"]
PAPER_METRICS = ["NComm", "Tok", "Acc"]


def debate_summary(
    question_frames: Sequence[pd.DataFrame],
    turn_frames: Sequence[pd.DataFrame],
    prices: Mapping | None = None,
    gpu_usd: Mapping[tuple[str, str], float] | None = None,
    zero_shot_rates: Mapping[tuple[str, str], float] | None = None,
) -> pd.DataFrame:
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
    - cost_usd: dollars of every call in total_tokens (the pre-debate answers used and the debate
      calls; not confidence elicitation) at each call's model's price (`debatelab.cost`; no price:
      0), summed over all (question, thread) rows; mean_cost_usd and mean_cost_usd_non_unanimous its
      means as mean_total_tokens's. Turns without the cost columns (no `model`): NaN. With `gpu_hour`
      prices it includes the GPU-hours of the calls (`question_costs`)
    - gpu_cost_usd: of cost_usd, the GPU-hour part (0 without a `gpu_hour` price)
    """
    questions = pd.concat(question_frames, ignore_index=True)
    turns = pd.concat(turn_frames, ignore_index=True)
    questions = question_costs(questions, turns, prices, gpu_usd, zero_shot_rates)
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
                "cost_usd": g["cost_usd"].sum(min_count=1),
                "gpu_cost_usd": g["gpu_cost_usd"].sum(),
                "mean_cost_usd": g["cost_usd"].mean(),
                "mean_cost_usd_non_unanimous": valid["cost_usd"].mean(),
            }
        )
    summary = pd.DataFrame(rows, columns=DEBATE_SUMMARY_COLUMNS)
    return summary.sort_values(["dataset", "mean_total_tokens"], kind="stable", ignore_index=True)


def question_costs(
    questions: pd.DataFrame,
    turns: pd.DataFrame,
    prices: Mapping | None = None,
    gpu_usd: Mapping[tuple[str, str], float] | None = None,
    zero_shot_rates: Mapping[tuple[str, str], float] | None = None,
) -> pd.DataFrame:
    """`questions` with `cost_usd` (dollars of the calls in `total_tokens`) and `gpu_cost_usd` (its
    GPU-hour part) per (question, thread) row.

    Tokens: every turn at its model's price (`debatelab.cost.tokens_usd`; turns without the cost
    columns: NaN). GPU-hours, where a model has a `gpu_hour` price: `gpu_usd` = {(dataset, protocol):
    the debate job's GPU dollars} spread over its rows by their debate calls' tokens (round >= 1;
    equal parts when it made none), plus each pre-debate answer (round 0) at `zero_shot_rates` =
    {(dataset, agent): its zero-shot job's GPU dollars per token}: [CHOICE] the zero-shot jobs are
    shared by every protocol, so each protocol pays for the answers it used, by their tokens, as its
    `total_tokens` counts them."""
    keys = ["dataset", "protocol", "question_id", "thread"]
    if all(c in turns.columns for c in DEBATE_TURN_COST_INPUTS):
        turns = turns.assign(cost_usd=tokens_usd(turns, prices_of(prices)))
        per_question = turns.groupby(keys, as_index=False)["cost_usd"].sum()
        questions = questions.merge(per_question, on=keys, how="left", validate="many_to_one")
        questions["cost_usd"] = questions["cost_usd"].fillna(0.0)
    else:
        questions = questions.assign(cost_usd=float("nan"))
    questions = questions.assign(gpu_cost_usd=0.0)
    if not (gpu_usd or zero_shot_rates) or not all(c in turns.columns for c in DEBATE_TURN_COST_INPUTS):
        return questions
    tokens = turns["prompt_tokens"].astype(float) + turns["completion_tokens"].astype(float)
    debate_tokens = tokens.where(turns["round"] >= 1, 0.0)
    rates = zero_shot_rates or {}
    if "agent_config" in turns.columns:
        rate = pd.Series(
            [rates.get((d, a), 0.0) for d, a in zip(turns["dataset"], turns["agent_config"])], index=turns.index
        )
    else:
        rate = pd.Series(0.0, index=turns.index)
    pre_usd = (tokens * rate).where(turns["round"] == 0, 0.0)
    parts = (
        turns.assign(_debate_tokens=debate_tokens, _pre_usd=pre_usd)
        .groupby(keys, as_index=False)[["_debate_tokens", "_pre_usd"]]
        .sum()
    )
    questions = questions.merge(parts, on=keys, how="left", validate="many_to_one")
    questions[["_debate_tokens", "_pre_usd"]] = questions[["_debate_tokens", "_pre_usd"]].fillna(0.0)
    job = pd.Series(0.0, index=questions.index)
    for (dataset, protocol), usd in (gpu_usd or {}).items():
        rows = (questions["dataset"] == dataset) & (questions["protocol"] == protocol)
        if not rows.any():
            continue
        weights = questions.loc[rows, "_debate_tokens"]
        total = weights.sum()
        job[rows] = usd * (weights / total if total > 0 else 1.0 / rows.sum())
    questions["gpu_cost_usd"] = job + questions["_pre_usd"]
    questions["cost_usd"] = questions["cost_usd"] + questions["gpu_cost_usd"]
    return questions.drop(columns=["_debate_tokens", "_pre_usd"])


def debate_table_paper_layout(summary: pd.DataFrame) -> pd.DataFrame:
    """SVR-MAD Table 1: rows = protocol, columns = (dataset, metric) for metric in NComm, Tok, Acc,
    and USD (mean dollars per non-unanimous question) when a model has a price.

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
            "USD": summary["mean_cost_usd_non_unanimous"] if "mean_cost_usd_non_unanimous" in summary else float("nan"),
        }
    )
    names = PAPER_METRICS + (["USD"] if priced(summary) else [])
    table = metrics.pivot(index="protocol", columns="dataset", values=names)
    table = table.swaplevel(axis=1).rename_axis(columns=["dataset", "metric"])
    columns = pd.MultiIndex.from_product([summary["dataset"].unique(), names], names=["dataset", "metric"])
    table = table.reindex(index=summary["protocol"].unique(), columns=columns).astype(float)
    rounded = table.round(1)
    for column in [c for c in table.columns if c[1] == "USD"]:  # dollars per question: cents matter
        rounded[column] = table[column].map(lambda v: float(f"{v:.4g}"))
    return rounded


def priced(summary: pd.DataFrame) -> bool:
    """Whether the summary has dollars to show (a model with a price ran)."""
    return "cost_usd" in summary and bool((summary["cost_usd"].fillna(0) > 0).any())


def plot_debate_cost_accuracy(summary: pd.DataFrame):
    """Accuracy (%) against mean tokens per question, or mean dollars per question when a model has a
    price, one panel per dataset, one marker per protocol named in a shared legend (labels on the
    points overlapped)."""
    cost, cost_label = (
        ("mean_cost_usd", "mean dollars per question")
        if priced(summary)
        else (
            "mean_total_tokens",
            "mean tokens per question",
        )
    )
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
                    row[cost],
                    100 * row["accuracy"],
                    marker=markers[i % len(markers)],
                    color=f"C{i % 10}",
                    s=40,
                    label=protocol,
                )
        ax.set_xlabel(cost_label)
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


def gpu_job_costs(
    turn_frames: Sequence[pd.DataFrame],
    prices: Mapping | None,
    gpu_jobs: Sequence[Mapping] = (),
    zero_shot_gpu_jobs: Sequence[Mapping] = (),
    zero_shot_paths: Sequence[str | Path] = (),
) -> tuple[dict, dict]:
    """({(dataset, protocol): the debate job's GPU dollars}, {(dataset, agent): the zero-shot job's GPU
    dollars per prompt + completion token}) from the jobs' benchmark files (`debatelab.cost.jobs_gpu_usd`)."""
    if not (gpu_jobs or zero_shot_gpu_jobs):
        return {}, {}
    prices = prices_of(prices)
    turns = pd.concat(turn_frames, ignore_index=True)
    gpu_usd = jobs_gpu_usd(gpu_jobs, ["dataset", "protocol"], turns[turns["round"] >= 1], prices)
    rates = {}
    if zero_shot_gpu_jobs:
        columns = ["dataset", "agent", "model", "prompt_tokens", "completion_tokens"]
        answers = pd.concat([read_parquet_checked(p, columns) for p in zero_shot_paths], ignore_index=True)
        usd = jobs_gpu_usd(zero_shot_gpu_jobs, ["dataset", "agent"], answers, prices)
        tokens = (
            (answers["prompt_tokens"] + answers["completion_tokens"])
            .groupby([answers["dataset"], answers["agent"]])
            .sum()
        )
        rates = {k: (v / tokens[k] if tokens.get(k, 0) else 0.0) for k, v in usd.items()}
    return gpu_usd, rates


def summarize_debate(
    question_paths: Sequence[str | Path],
    turn_paths: Sequence[str | Path],
    table_path: str | Path,
    paper_table_path: str | Path,
    plot_path: str | Path,
    prices: Mapping | None = None,
    gpu_jobs: Sequence[Mapping] = (),
    zero_shot_gpu_jobs: Sequence[Mapping] = (),
    zero_shot_paths: Sequence[str | Path] = (),
) -> pd.DataFrame:
    """Write the debate summary CSV, its SVR-MAD Table 1 layout and the cost/accuracy plot; return the summary.

    The paper-layout CSV flattens its columns to "<dataset> <metric>". `gpu_jobs` /
    `zero_shot_gpu_jobs`: the debate and zero-shot jobs of GPU-hour-priced models (the rule's params,
    `debatelab.cost.jobs_gpu_usd`), `zero_shot_paths` the latter's answers (their tokens)."""
    question_frames = [read_parquet_checked(p, DEBATE_QUESTION_INPUTS) for p in question_paths]
    turn_frames = [read_parquet_checked(p, DEBATE_TURN_INPUTS + DEBATE_TURN_COST_INPUTS) for p in turn_paths]
    gpu_usd, rates = gpu_job_costs(turn_frames, prices, gpu_jobs, zero_shot_gpu_jobs, zero_shot_paths)
    summary = debate_summary(question_frames, turn_frames, prices, gpu_usd, rates)
    write_text_atomic(usd_text(summary, USD_COLUMNS).to_csv(index=False, float_format="%.4f"), table_path)
    paper = debate_table_paper_layout(summary)
    paper.columns = [f"{dataset} {metric}" for dataset, metric in paper.columns]
    write_text_atomic(paper.to_csv(float_format="%.1f"), paper_table_path)
    save_figure_atomic(plot_debate_cost_accuracy(summary), plot_path)
    return summary
