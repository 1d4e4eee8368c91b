"""The confidence paper's stages on cached streams: calibration fitting, protocol search, the test
report and the experiment summary (spec 004 §4-6, §9). No model is called here.

Files (per dataset and pair of agents):

- ``calibration/{dataset}/{pair}.json``: per run, the validation question ids and one fitted
  calibrator per (estimator, calibrator kind, agent, stream), as `calibration.calibrator_from_dict`
  reads them; ``.csv`` next to it: raw vs calibrated ECE / NLL / Brier / AUARC on both splits.
- ``search/{dataset}/{pair}/{protocol}.json``: the best θ per (estimator, calibrator, run);
  ``.trials.parquet``: every trial; ``.history.png``: the optimisation history.
- ``protocols/{dataset}/{pair}/predictions.parquet``: one row per (run, estimator, calibrator,
  method, test question) with answer, correctness and confidence; ``metrics.csv``: the metrics of
  every method on the test split; ``reliability.png`` and ``accuracy_rejection.png``.

Methods: ``zero_shot:{agent}`` per agent, ``zero_shot`` (zs*: the pair member with the higher
validation zero-shot F1), ``mad`` and ``mad_d`` (each reporting the agent that is validation-better
under that method), and the searched protocols ``wsv``, ``cga``, ``hid``.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from . import metrics
from .calibration import calibrator_from_dict, fit_calibrator
from .io import (
    DataFileError,
    read_json_checked,
    read_parquet_checked,
    save_figure_atomic,
    write_json_atomic,
    write_parquet_atomic,
    write_text_atomic,
)
from .protocol_search import SearchSettings, search
from .protocols import mad_d, run_protocol, single_agent
from .streams import ESTIMATOR_COLUMNS, STREAM_COLUMNS, StreamArrays, split_questions, stream_arrays

log = logging.getLogger(__name__)

BASELINES = ("zero_shot", "mad", "mad_d")


def read_streams(path: str | Path) -> pd.DataFrame:
    return read_parquet_checked(path, STREAM_COLUMNS)


# --- calibration -------------------------------------------------------------------------------

def fit_calibrators(streams: pd.DataFrame, *, seed: int, runs: int, val_fraction: float,
                    estimators: Sequence[str], calibrators: Sequence[str]) -> dict:
    """One calibrator per (run, estimator, kind, agent, stream), each fitted on that run's validation
    split: the fixed one when the streams carry a `split` column, else a fresh seeded cut per run."""
    question_ids = np.sort(streams["question_id"].unique())
    fixed = streams["split"].notna().any() if "split" in streams else False
    fixed_val = np.sort(streams.loc[streams["split"] == "val", "question_id"].unique()) if fixed else None
    out = {"seed": seed, "val_fraction": None if fixed else val_fraction, "estimators": list(estimators),
           "calibrators": list(calibrators), "runs": []}
    for run in range(runs):
        val_ids = fixed_val if fixed else question_ids[split_questions(question_ids, seed, run, val_fraction)]
        val = streams[streams["question_id"].isin(val_ids)]
        fitted = []
        for estimator in estimators:
            column = ESTIMATOR_COLUMNS[estimator]
            for kind in calibrators:
                for (agent_index, stream), rows in val.groupby(["agent_index", "stream"]):
                    calibrator = fit_calibrator(kind, rows[column].to_numpy(float), rows["correct"].to_numpy(bool))
                    fitted.append({"estimator": estimator, "calibrator": kind, "agent_index": int(agent_index),
                                   "agent": rows["agent"].iloc[0], "stream": int(stream), "fit": calibrator.to_dict()})
        out["runs"].append({"run": run, "val_question_ids": [str(q) for q in val_ids], "fitted": fitted})
    return out


def calibrated(streams: pd.DataFrame, calibration: dict, run: int, estimator: str, calibrator: str) -> pd.DataFrame:
    """The streams with column ``p``: the raw confidence through that run's fitted calibrator."""
    fitted = {(f["agent_index"], f["stream"]): calibrator_from_dict(f["fit"])
              for f in calibration["runs"][run]["fitted"]
              if f["estimator"] == estimator and f["calibrator"] == calibrator}
    if len(fitted) != 4:
        raise DataFileError(f"calibration has no {calibrator!r} fit of {estimator!r} for run {run}")
    frame = streams.copy()
    frame["p"] = np.nan
    raw = ESTIMATOR_COLUMNS[estimator]
    for (agent_index, stream), model in fitted.items():
        rows = (frame["agent_index"] == agent_index) & (frame["stream"] == stream)
        frame.loc[rows, "p"] = model.predict(frame.loc[rows, raw].to_numpy(float))
    return frame


def calibration_report(streams: pd.DataFrame, calibration: dict, bins: int = 10, weighting: str = "count") -> pd.DataFrame:
    """Raw vs calibrated confidence quality of every stream on the validation and test splits."""
    rows = []
    for run_info in calibration["runs"]:
        run = run_info["run"]
        is_val = streams["question_id"].isin(run_info["val_question_ids"])
        for estimator in calibration["estimators"]:
            for kind in calibration["calibrators"]:
                frame = calibrated(streams, calibration, run, estimator, kind)
                for (agent, stream, split), part in frame.assign(split=np.where(is_val, "val", "test")).groupby(
                        ["agent", "stream", "split"]):
                    p = part["p"].fillna(0.5).to_numpy(float)
                    z = part["correct"].to_numpy(bool)
                    rows.append({"run": run, "estimator": estimator, "calibrator": kind, "agent": agent,
                                 "stream": stream, "split": split, "n": len(part),
                                 "ece": metrics.ece(p, z, bins=bins, weighting=weighting), "nll": metrics.nll(p, z),
                                 "brier": metrics.brier(p, z), "auarc": metrics.auarc(p, z, seed=run)})
    return pd.DataFrame(rows)


def fit_calibrators_job(streams_path, out_path, report_path, *, seed: int, runs: int, val_fraction: float,
                        estimators: Sequence[str], calibrators: Sequence[str], ece_bins: int = 10,
                        ece_weighting: str = "count") -> dict:
    streams = read_streams(streams_path)
    calibration = fit_calibrators(streams, seed=seed, runs=runs, val_fraction=val_fraction,
                                  estimators=estimators, calibrators=calibrators)
    write_json_atomic(calibration, out_path)
    report = calibration_report(streams, calibration, ece_bins, ece_weighting)
    write_text_atomic(report.to_csv(index=False), report_path)
    return calibration


# --- the pair's arrays per (run, estimator, calibrator) ---------------------------------------

def split_arrays(streams: pd.DataFrame, calibration: dict, run: int, estimator: str,
                 calibrator: str) -> tuple[StreamArrays, StreamArrays]:
    arrays = stream_arrays(calibrated(streams, calibration, run, estimator, calibrator), "p")
    is_val = np.isin(arrays.question_ids, calibration["runs"][run]["val_question_ids"])
    return arrays.subset(is_val), arrays.subset(~is_val)


def better_agent(arrays: StreamArrays, method: str) -> int:
    """The agent with the higher validation F1 under a single-agent method (tie: M1)."""
    scores = [metrics.weighted_f1(arrays.gold, baseline(method, arrays, agent)[0]) for agent in (0, 1)]
    return 0 if scores[0] >= scores[1] else 1


def baseline(method: str, arrays: StreamArrays, agent: int) -> tuple[np.ndarray, np.ndarray]:
    if method == "zero_shot":
        return single_agent(arrays.pred, arrays.conf, agent, 0)
    if method == "mad":
        return single_agent(arrays.pred, arrays.conf, agent, 1)
    if method == "mad_d":
        return mad_d(arrays.pred, arrays.conf, agent)
    raise ValueError(f"unknown baseline {method!r} (known: {BASELINES})")


# --- search ------------------------------------------------------------------------------------

def search_protocol_job(streams_path, calibration_path, out_path, trials_path, plot_path, journal_path, *,
                        dataset: str, pair: str, protocol: str, settings: dict, show_progress: bool = True) -> dict:
    """Search θ of ``protocol`` for every (estimator, calibrator, run) of the calibration file."""
    streams = read_streams(streams_path)
    calibration = read_json_checked(calibration_path)
    search_settings = SearchSettings(**settings)
    combos = [(e, c, r["run"]) for e in calibration["estimators"] for c in calibration["calibrators"]
              for r in calibration["runs"]]
    best, trials = [], []
    for estimator, kind, run in tqdm(combos, desc=f"search {protocol} {dataset}/{pair}", disable=not show_progress):
        val, _ = split_arrays(streams, calibration, run, estimator, kind)
        tie_agent = better_agent(val, "zero_shot")
        seed = calibration["seed"] * 1000 + run
        result = search(protocol, val, search_settings, storage_path=journal_path, seed=seed, tie_agent=tie_agent,
                        label=f"{dataset}/{pair}/{protocol}/{estimator}/{kind}/run{run}")
        best.append({"estimator": estimator, "calibrator": kind, "run": run, "params": result.params,
                     "value": result.value, "n_trials": result.n_trials, "stopped_early": result.stopped_early,
                     "tie_agent": tie_agent, "study": result.study_name})
        trials.append(result.trials.assign(estimator=estimator, calibrator=kind, run=run))
    out = {"dataset": dataset, "pair": pair, "protocol": protocol, "objective": search_settings.objective,
           "wsv_softmax_support": search_settings.wsv_softmax_support, "best": best}
    write_json_atomic(out, out_path)
    trials_frame = pd.concat(trials, ignore_index=True)
    write_parquet_atomic(trials_frame, trials_path)
    save_figure_atomic(plot_history(trials_frame, f"{protocol} on {dataset}/{pair}"), plot_path)
    return out


def plot_history(trials: pd.DataFrame, title: str):
    """Running best objective per study (one line per estimator × calibrator, run 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    first_run = trials[trials["run"] == trials["run"].min()]
    for (estimator, kind), part in first_run.groupby(["estimator", "calibrator"]):
        ax.plot(part["trial"], part["value"], ".", alpha=0.25, markersize=3)
        ax.plot(part["trial"], part["best_value"], "-", label=f"{estimator}/{kind}", color=ax.lines[-1].get_color())
    ax.set_xlabel("trial")
    ax.set_ylabel("objective (lower is better)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    plt.close(fig)
    return fig


# --- test report -------------------------------------------------------------------------------

def evaluate_methods(streams: pd.DataFrame, calibration: dict, searches: Sequence[dict], *, bins: int = 10,
                     weighting: str = "count") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every baseline and searched protocol on the test split of every run; (predictions, metrics)."""
    params = {(s["protocol"], b["estimator"], b["calibrator"], b["run"]): (b["params"], s["wsv_softmax_support"])
              for s in searches for b in s["best"]}
    agents = streams.sort_values("agent_index").drop_duplicates("agent_index")["agent"].tolist()
    predictions, rows = [], []
    for estimator in calibration["estimators"]:
        for kind in calibration["calibrators"]:
            for run_info in calibration["runs"]:
                run = run_info["run"]
                val, test = split_arrays(streams, calibration, run, estimator, kind)
                tie_agent = better_agent(val, "zero_shot")
                outputs = {}
                for agent in (0, 1):
                    outputs[(f"zero_shot:{agents[agent]}", agents[agent])] = baseline("zero_shot", test, agent)
                for method in BASELINES:
                    agent = better_agent(val, method)
                    outputs[(method, agents[agent])] = baseline(method, test, agent)
                for search_result in searches:
                    protocol = search_result["protocol"]
                    theta, support = params[(protocol, estimator, kind, run)]
                    outputs[(protocol, "")] = run_protocol(protocol, test.pred, test.conf, test.n_labels, theta,
                                                           tie_agent=tie_agent, wsv_softmax_support=support)
                for (method, agent), (answer, confidence) in outputs.items():
                    correct = test.correct(answer)
                    key = {"run": run, "estimator": estimator, "calibrator": kind, "method": method, "agent": agent}
                    rows.append({**key, **metrics.summarize(test.gold, answer, correct, confidence, bins=bins,
                                                            weighting=weighting, seed=run)})
                    predictions.append(pd.DataFrame({**key, "question_id": test.question_ids,
                                                     "answer": test.decode(answer), "correct": correct,
                                                     "confidence": confidence}))
    return pd.concat(predictions, ignore_index=True), pd.DataFrame(rows)


def apply_protocol_job(streams_path, calibration_path, search_paths, predictions_path, metrics_path,
                       reliability_path, rejection_path, *, dataset: str, pair: str, ece_bins: int = 10,
                       ece_weighting: str = "count", plot_calibrator: str | None = None) -> pd.DataFrame:
    streams = read_streams(streams_path)
    calibration = read_json_checked(calibration_path)
    searches = [read_json_checked(p) for p in search_paths]
    predictions, table = evaluate_methods(streams, calibration, searches, bins=ece_bins, weighting=ece_weighting)
    table.insert(0, "pair", pair)
    table.insert(0, "dataset", dataset)
    write_parquet_atomic(predictions, predictions_path)
    write_text_atomic(table.to_csv(index=False), metrics_path)
    kind = plot_calibrator if plot_calibrator in calibration["calibrators"] else calibration["calibrators"][0]
    shown = predictions[(predictions["calibrator"] == kind) & (predictions["run"] == 0)
                        & ~predictions["method"].str.startswith("zero_shot:")]
    title = f"{dataset}/{pair}, {kind} calibration, test split, run 0"
    save_figure_atomic(plot_reliability(shown, ece_bins, title), reliability_path)
    save_figure_atomic(plot_accuracy_rejection(shown, title), rejection_path)
    return table


def _per_estimator_figure(predictions: pd.DataFrame, title: str, xlabel: str, draw, decorate=None):
    """One panel per estimator with one line per method; ``draw(ax, part, method)`` plots a line,
    ``decorate(ax)`` what every panel has once (a reference line, limits)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    estimators = sorted(predictions["estimator"].unique())
    fig, axes = plt.subplots(1, len(estimators), figsize=(5.5 * len(estimators), 4.2), squeeze=False)
    for ax, estimator in zip(axes[0], estimators):
        if decorate:
            decorate(ax)
        for method, part in predictions[predictions["estimator"] == estimator].groupby("method", sort=False):
            draw(ax, part, method)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accuracy")
        ax.set_title(estimator)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    plt.close(fig)
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

    return _per_estimator_figure(predictions, f"Accuracy-rejection: {title}", "fraction kept (most confident first)", draw)


# --- experiment summary ------------------------------------------------------------------------

def lift_table(table: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Lift in points over zs* per (dataset, estimator, calibrator, method), averaged over pairs, with
    k = pairs where the method is significantly better (paired one-sided t-test over runs, p < alpha)
    than every comparator: zs*, MAD and MAD-D for the protocols, zs* for MAD and MAD-D."""
    from scipy import stats

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
            comparators = ["zero_shot"] if method in BASELINES else [m for m in BASELINES if m in wide]
            row = {"dataset": dataset, "estimator": estimator, "calibrator": kind, "method": method,
                   "n_pairs": part.index.get_level_values("pair").nunique(),
                   "n_runs": int(part.groupby(level="pair").size().min())}
            for metric in ("f1", "auarc"):
                lift = 100 * (part[metric] - wide["zero_shot"][metric])
                row[f"lift_{metric}"] = float(lift.groupby(level="pair").mean().mean())
                wins = 0
                for pair_name, values in part[metric].groupby(level="pair"):
                    better = []
                    for comparator in comparators:
                        other = wide[comparator][metric].xs(pair_name, level="pair")
                        diff = values.to_numpy() - other.to_numpy()
                        if len(diff) < 2 or np.allclose(diff, diff[0]):
                            p = 0.0 if len(diff) >= 2 and diff[0] > 0 else 1.0  # no variance: sign decides
                        else:
                            p = stats.ttest_rel(values.to_numpy(), other.to_numpy(), alternative="greater").pvalue
                        better.append(p < alpha)
                    wins += all(better)
                row[f"k_{metric}"] = wins if row["n_runs"] >= 2 else np.nan
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
    wide = frame.sort_values(["estimator", "_o"]).pivot_table(index=["estimator", "_o", "method"], columns="dataset",
                                                              values="cell", aggfunc="first")
    return wide.reset_index().drop(columns="_o")


def plot_lift(lift: pd.DataFrame, calibrator: str, title: str):
    """Bars of F1 and AUARC lift over zs* per method, one group per dataset × estimator."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    part = lift[lift["calibrator"] == calibrator]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), squeeze=False)
    for ax, metric in zip(axes[0], ("f1", "auarc")):
        if not part.empty:
            wide = part.pivot_table(index=["dataset", "estimator"], columns="method", values=f"lift_{metric}")
            wide.plot.bar(ax=ax, rot=30)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(f"{metric.upper()} lift over zs* (points)")
        ax.legend(fontsize=7)
    fig.suptitle(f"{title} ({calibrator} calibration)", fontsize=9)
    fig.tight_layout()
    plt.close(fig)
    return fig


def summarize_confidence(metrics_paths: Sequence[str | Path], table_path, lift_path, paper_path, plot_path, *,
                         calibrator: str = "beta", alpha: float = 0.05) -> pd.DataFrame:
    table = pd.concat([pd.read_csv(p) for p in metrics_paths], ignore_index=True)
    means = (table.groupby(["dataset", "pair", "estimator", "calibrator", "method"], sort=False)
             [["accuracy", "f1", "auarc", "auroc", "ece", "brier", "nll"]].mean().reset_index())
    write_text_atomic(means.to_csv(index=False), table_path)
    lift = lift_table(table, alpha)
    write_text_atomic(lift.to_csv(index=False), lift_path)
    if calibrator not in set(table["calibrator"]):
        calibrator = table["calibrator"].iloc[0]
    write_text_atomic(paper_layout(lift, calibrator).to_csv(index=False), paper_path)
    save_figure_atomic(plot_lift(lift, calibrator, "Confidence protocols vs the best zero-shot agent"), plot_path)
    return lift
