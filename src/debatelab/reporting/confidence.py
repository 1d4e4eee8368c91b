"""The confidence paper's report: optimisation histories, reliability and accuracy-rejection plots
of the test split, and the experiment summary (metrics averaged over runs, lift over the best
zero-shot agent with t-test counts, the paper's Table 1 layout, a lift plot)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .. import metrics
from ..intervals import t_intervals
from ..io import save_figure_atomic, write_text_atomic
from .figures import subplots


def plot_history(trials: pd.DataFrame, title: str):
    """Running best objective per study (one line per estimator × calibrator, run 0)."""
    fig, ax = subplots(figsize=(6.5, 4))
    first_run = trials[trials["run"] == trials["run"].min()]
    for (estimator, kind), part in first_run.groupby(["estimator", "calibrator"]):
        ax.plot(part["trial"], part["value"], ".", alpha=0.25, markersize=3)
        ax.plot(part["trial"], part["best_value"], "-", label=f"{estimator}/{kind}", color=ax.lines[-1].get_color())
    ax.set_xlabel("trial")
    ax.set_ylabel("objective (lower is better)")
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _per_estimator_figure(predictions: pd.DataFrame, title: str, xlabel: str, draw, decorate=None):
    """One panel per estimator with one line per method; ``draw(ax, part, method)`` plots a line,
    ``decorate(ax)`` what every panel has once (a reference line, limits)."""
    estimators = sorted(predictions["estimator"].unique())
    fig, axes = subplots(1, len(estimators), figsize=(5.5 * len(estimators), 4.2), squeeze=False)
    for ax, estimator in zip(axes[0], estimators):
        if decorate:
            decorate(ax)
        for method, part in predictions[predictions["estimator"] == estimator].groupby("method", sort=False):
            draw(ax, part, method)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy")
        ax.set_title(estimator)
        ax.legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig


def plot_reliability(predictions: pd.DataFrame, bins: int, title: str):
    """Reliability diagram per estimator: accuracy against mean confidence per bin, one line per method."""

    def draw(ax, part, method):
        table = metrics.reliability_table(part["confidence"], part["correct"], bins=bins)
        table = table[table["count"] > 0]
        ax.plot(table["mean_confidence"], table["accuracy"], "o-", markersize=3, label=method)

    def decorate(ax):
        ax.plot([0, 1], [0, 1], ":", color="grey", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)

    return _per_estimator_figure(predictions, f"Reliability: {title}", "confidence", draw, decorate)


def plot_accuracy_rejection(predictions: pd.DataFrame, title: str):
    """Accuracy of the kept answers as the least confident are rejected, one line per method."""

    def draw(ax, part, method):
        coverage, accuracy = metrics.accuracy_rejection_curve(part["confidence"], part["correct"], seed=0)
        ax.plot(coverage, accuracy, "-", label=method)

    return _per_estimator_figure(
        predictions, f"Accuracy-rejection: {title}", "fraction kept (most confident first)", draw
    )


def lift_table(table: pd.DataFrame, baselines: Sequence[str], alpha: float = 0.05) -> pd.DataFrame:
    """Lift in points over zs* per (dataset, estimator, calibrator, method), averaged over pairs, with
    k = pairs where the method is significantly better (paired one-sided t-test over runs, p < alpha)
    than every comparator: the `baselines` (the confidence stage's `confidence.fusion.BASELINES`:
    zs*, MAD and MAD-D) for the protocols, zs* for the baselines.

    Runs pair by run number. A comparison without variance over runs (`metrics.paired_t_greater` NaN) is not
    significant; ``untestable_<metric>`` counts the pairs with such a comparison, and k is NaN ("–"
    in Table 1) when no pair had a testable one or there are fewer than 2 runs.

    ``lift_<metric>_low`` / ``_high``: the 95 % t interval of the lift over runs (each run's lift
    averaged over its pairs; the interval the paired t-test over runs inverts), NaN under 2 runs."""
    table = table[~table["method"].str.startswith("zero_shot:")]
    rows = []
    keys = ["dataset", "estimator", "calibrator"]
    for (dataset, estimator, kind), group in table.groupby(keys):
        wide = {m: part.set_index(["pair", "run"]).sort_index() for m, part in group.groupby("method")}
        if "zero_shot" not in wide:
            continue
        for method, part in wide.items():
            if method == "zero_shot":
                continue
            comparators = ["zero_shot"] if method in baselines else [m for m in baselines if m in wide]
            row = {
                "dataset": dataset,
                "estimator": estimator,
                "calibrator": kind,
                "method": method,
                "n_pairs": part.index.get_level_values("pair").nunique(),
                "n_runs": int(part.groupby(level="pair").size().min()),
            }
            for metric in ("f1", "auarc"):
                lift = 100 * (part[metric] - wide["zero_shot"][metric])
                row[f"lift_{metric}"] = float(lift.groupby(level="pair").mean().mean())
                per_run = lift.groupby(level="run").mean().dropna()
                low, high = t_intervals([per_run.mean()], [per_run.std(ddof=1)], [len(per_run)])
                row[f"lift_{metric}_low"], row[f"lift_{metric}_high"] = float(low[0]), float(high[0])
                wins = untestable = 0
                for pair_name, values in part[metric].groupby(level="pair"):
                    values = values.droplevel("pair")
                    p_values = []
                    for comparator in comparators:
                        other = wide[comparator][metric].xs(pair_name, level="pair").reindex(values.index)
                        p_values.append(metrics.paired_t_greater(values.to_numpy(), other.to_numpy()))
                    untestable += any(np.isnan(p) for p in p_values)
                    wins += all(p < alpha for p in p_values)  # NaN < alpha is False
                row[f"untestable_{metric}"] = untestable
                testable = row["n_runs"] >= 2 and untestable < row["n_pairs"]
                row[f"k_{metric}"] = wins if testable else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def paper_layout(lift: pd.DataFrame, calibrator: str) -> pd.DataFrame:
    """Table 1 of the confidence paper: rows estimator × method, one column per dataset, cells
    "F1 lift(k) / AUARC lift(k)" in points over zs*."""
    part = lift[lift["calibrator"] == calibrator]

    def cell(r):
        k = lambda v: "–" if pd.isna(v) else str(int(v))  # noqa: E731
        return f"{r['lift_f1']:+.2f}({k(r['k_f1'])}) / {r['lift_auarc']:+.2f}({k(r['k_auarc'])})"

    if part.empty:
        return pd.DataFrame(columns=["estimator", "method"])
    order = {m: i for i, m in enumerate(["mad", "mad_d", "wsv", "cga", "hid"])}
    frame = part.assign(cell=part.apply(cell, axis=1), _o=part["method"].map(order).fillna(99))
    wide = frame.sort_values(["estimator", "_o"]).pivot_table(
        index=["estimator", "_o", "method"], columns="dataset", values="cell", aggfunc="first"
    )
    return wide.reset_index().drop(columns="_o")


def plot_lift(lift: pd.DataFrame, calibrator: str, title: str):
    """Bars of F1 and AUARC lift over zs* per method, one group per dataset × estimator, each with
    its 95 % t interval over runs as an error bar (where the lift table has one).

    Groups are labelled "dataset / estimator" (pandas would print the index tuples) and the one
    legend sits right of the panels, so it never hides a bar."""
    part = lift[lift["calibrator"] == calibrator]
    groups = len(part[["dataset", "estimator"]].drop_duplicates()) if not part.empty else 0
    fig, axes = subplots(1, 2, figsize=(max(12.0, 1.8 * groups + 2), 4.6), squeeze=False)  # ~0.9 in per group
    order = {m: i for i, m in enumerate(["mad", "mad_d", "wsv", "cga", "hid"])}
    handles, names = [], []
    for ax, metric in zip(axes[0], ("f1", "auarc")):
        errors = None
        if not part.empty:
            wide = part.pivot_table(index=["dataset", "estimator"], columns="method", values=f"lift_{metric}")
            wide = wide[sorted(wide.columns, key=lambda m: (order.get(m, len(order)), m))]
            if f"lift_{metric}_high" in part:  # symmetric t intervals: the half-width
                half = part.assign(half=part[f"lift_{metric}_high"] - part[f"lift_{metric}"])
                errors = half.pivot_table(index=["dataset", "estimator"], columns="method", values="half", dropna=False)
                errors = errors.reindex(index=wide.index, columns=wide.columns)
            wide.plot.bar(ax=ax, legend=False, width=0.8, yerr=errors, capsize=2, error_kw={"linewidth": 0.8})
            ax.set_xticks(
                range(len(wide)), [f"{d} / {e}" for d, e in wide.index], rotation=30, ha="right", fontsize="small"
            )
            handles, names = ax.get_legend_handles_labels()
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xlabel("dataset / estimator" + ("; bars: 95 % t interval over runs" if errors is not None else ""))
        ax.set_ylabel(f"{metric.upper()} lift over zs* (points)")
    if handles:
        fig.legend(
            handles,
            names,
            title="method",
            loc="center left",
            bbox_to_anchor=(0.9, 0.5),
            fontsize="small",
            frameon=False,
        )
    fig.suptitle(f"{title} ({calibrator} calibration)", fontsize="medium")
    fig.tight_layout(rect=(0, 0, 0.9, 1))  # the right tenth holds the legend (savefig doesn't crop)
    return fig


def summarize_confidence(
    metrics_paths: Sequence[str | Path],
    table_path,
    lift_path,
    paper_path,
    plot_path,
    *,
    baselines: Sequence[str],
    calibrator: str = "beta",
    alpha: float = 0.05,
) -> pd.DataFrame:
    """The experiment's confidence summary: metrics averaged over runs, each with `n_runs` and its
    95 % t interval over runs (`<metric>_low`, `<metric>_high`; NaN under 2 runs), the lift table
    over zs* (`lift_table`, with the stage's `baselines`), Table 1's layout and the lift plot."""
    table = pd.concat([pd.read_csv(p) for p in metrics_paths], ignore_index=True)
    names = ["accuracy", "f1", "auarc", "auroc", "ece", "brier", "nll"]
    grouped = table.groupby(["dataset", "pair", "estimator", "calibrator", "method"], sort=False)[names]
    means, sds, counts = grouped.mean(), grouped.std(ddof=1), grouped.count()
    for name in names:
        means[f"{name}_low"], means[f"{name}_high"] = t_intervals(means[name], sds[name], counts[name])
    means.insert(0, "n_runs", counts.min(axis=1))
    means = means[["n_runs", *(c for name in names for c in (name, f"{name}_low", f"{name}_high"))]].reset_index()
    write_text_atomic(means.to_csv(index=False), table_path)
    lift = lift_table(table, baselines, alpha)
    write_text_atomic(lift.to_csv(index=False), lift_path)
    if calibrator not in set(table["calibrator"]):
        calibrator = table["calibrator"].iloc[0]
    write_text_atomic(paper_layout(lift, calibrator).to_csv(index=False), paper_path)
    save_figure_atomic(plot_lift(lift, calibrator, "Confidence protocols vs the best zero-shot agent"), plot_path)
    return lift
