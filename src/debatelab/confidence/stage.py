"""The confidence paper's stage jobs on cached streams: calibration fitting, protocol search and
the test-split evaluation (Elahi & Di Eugenio, arXiv:2606.13591 §3.3; §3.4; §4.1, §5). No model is called here; the experiment summary
(lift table, Table 1 layout, plots) is `debatelab.reporting.confidence`.

Files (per dataset and pair of agents):

- ``calibration/{dataset}/{pair}.json``: per run, the validation and test question ids (a
  bootstrap sample repeats an id) and one fitted calibrator per (estimator, calibrator kind, agent,
  stream), as `calibrators.calibrator_from_dict` reads them; ``.csv`` next to it: raw vs
  calibrated ECE / NLL / Brier / AUARC on both parts of every run.
- ``search/{dataset}/{pair}/{protocol}.json``: the best θ per (estimator, calibrator, run);
  ``.trials.parquet``: every trial; ``.history.png``: the optimisation history.
- ``protocols/{dataset}/{pair}/predictions.parquet``: one row per (run, estimator, calibrator,
  method, test question of the run; a question the run's bootstrap sample drew twice has two
  rows) with answer, correctness and confidence; ``metrics.csv``: the metrics of every method on
  each run's test part; ``reliability.png`` and ``accuracy_rejection.png``.

Runs (`calibration.runs`, the paper's 5 per pair for its t-tests): each run has its own data, so
the baselines vary over runs as much as the protocols do (`run_questions`). With a fixed
validation split, run r draws a bootstrap sample of the validation and of the test questions
(seeded by experiment seed, r and the side); without one, a fresh seeded val/test cut. Each run's
calibrators are fitted, and θ searched (TPE seed = seed·1000 + r), on that run's validation part,
and every method is scored on its test part. No generation is redone: all of it reads the cached
streams.

Methods: ``zero_shot:{agent}`` per agent, ``zero_shot`` (zs*: the pair member with the higher
validation zero-shot F1), ``mad`` and ``mad_d`` (each reporting the agent that is validation-better
under that method), and the searched protocols ``wsv``, ``cga``, ``hid``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .. import metrics
from ..estimators import CONFIDENCE_ESTIMATORS, ESTIMATORS
from ..io import (
    DataFileError,
    read_json_checked,
    read_parquet_checked,
    save_figure_atomic,
    write_json_atomic,
    write_parquet_atomic,
    write_text_atomic,
)
from ..reporting.confidence import plot_accuracy_rejection, plot_history, plot_reliability
from .calibrators import CALIBRATORS, calibrator_from_dict, fit_calibrator
from .fusion import BASELINES, apply_method
from .search import SearchSettings, tpe_search
from .streams import (
    ESTIMATOR_COLUMNS,
    STREAM_COLUMNS,
    StreamArrays,
    resample_questions,
    split_questions,
    stream_arrays,
)

log = logging.getLogger(__name__)

RESAMPLING = ("bootstrap", "none")


@dataclass(frozen=True)
class CalibrationSettings:
    """Config `calibration` (defaults match config/schema.yaml): what is fitted, on how many runs."""

    runs: int = 5
    val_fraction: float = 0.5
    estimators: tuple[str, ...] = ESTIMATORS
    calibrators: tuple[str, ...] = CALIBRATORS
    ece_bins: int = 10
    ece_weighting: str = "count"
    resample: str = "bootstrap"

    def __post_init__(self):
        object.__setattr__(self, "estimators", tuple(self.estimators))
        object.__setattr__(self, "calibrators", tuple(self.calibrators))
        if self.runs < 1 or self.ece_bins < 1:
            raise ValueError(f"calibration runs and ece_bins must be >= 1, got {self.runs} and {self.ece_bins}")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"calibration val_fraction must be in (0, 1), got {self.val_fraction}")
        for name, allowed in (("estimators", CONFIDENCE_ESTIMATORS), ("calibrators", CALIBRATORS)):
            unknown = [v for v in getattr(self, name) if v not in allowed]
            if unknown or not getattr(self, name):
                raise ValueError(f"calibration {name} must be some of {allowed}, got {list(getattr(self, name))}")
        if self.resample not in RESAMPLING:
            raise ValueError(f"calibration resample must be one of {RESAMPLING}, got {self.resample!r}")
        if self.ece_weighting not in metrics.ECE_WEIGHTINGS:
            raise ValueError(f"ece_weighting must be one of {metrics.ECE_WEIGHTINGS}, got {self.ece_weighting!r}")


def read_streams(path: str | Path) -> pd.DataFrame:
    return read_parquet_checked(path, STREAM_COLUMNS)


# --- calibration -------------------------------------------------------------------------------


def run_questions(
    streams: pd.DataFrame, *, seed: int, run: int, val_fraction: float, resample: str = "bootstrap"
) -> tuple[np.ndarray, np.ndarray]:
    """(validation ids, test ids) of one run, each sorted. With a fixed split (the streams' `split`
    column) every run draws a bootstrap sample of each side (``resample="bootstrap"``: an id may
    repeat, and runs differ as re-run data would) or keeps both whole (``"none"``: the runs then
    share their data); without one, a fresh seeded cut of the questions by ``val_fraction``."""
    if "split" in streams and streams["split"].notna().any():
        val = np.sort(streams.loc[streams["split"] == "val", "question_id"].unique())
        test = np.sort(streams.loc[streams["split"] != "val", "question_id"].unique())
        if resample == "bootstrap":
            return resample_questions(val, seed, run, "val"), resample_questions(test, seed, run, "test")
        return val, test
    question_ids = np.sort(streams["question_id"].unique())
    in_val = split_questions(question_ids, seed, run, val_fraction)
    return question_ids[in_val], question_ids[~in_val]


def take_questions(streams: pd.DataFrame, question_ids) -> pd.DataFrame:
    """The rows of ``question_ids``, a question listed k times k times over (a bootstrap sample)."""
    counts = pd.Series(np.asarray(question_ids, dtype=object)).value_counts()
    times = streams["question_id"].map(counts).fillna(0).astype(int).to_numpy()
    return streams.iloc[np.repeat(np.arange(len(streams)), times)]


def fit_calibrators(streams: pd.DataFrame, *, seed: int, settings: CalibrationSettings) -> dict:
    """One calibrator per (run, estimator, kind, agent, stream), each fitted on that run's validation
    part (`run_questions`): a bootstrap sample of the fixed validation split when the streams carry
    a `split` column, else a fresh seeded cut per run."""
    runs, val_fraction = settings.runs, settings.val_fraction
    estimators, calibrators = settings.estimators, settings.calibrators
    fixed = streams["split"].notna().any() if "split" in streams else False
    out = {
        "seed": seed,
        "val_fraction": None if fixed else val_fraction,
        "resample": settings.resample if fixed else None,
        "estimators": list(estimators),
        "calibrators": list(calibrators),
        "runs": [],
    }
    for run in range(runs):
        val_ids, test_ids = run_questions(
            streams, seed=seed, run=run, val_fraction=val_fraction, resample=settings.resample
        )
        val = take_questions(streams, val_ids)
        fitted = []
        for estimator in estimators:
            column = ESTIMATOR_COLUMNS[estimator]
            for kind in calibrators:
                for (agent_index, stream), rows in val.groupby(["agent_index", "stream"]):
                    calibrator = fit_calibrator(kind, rows[column].to_numpy(float), rows["correct"].to_numpy(bool))
                    fitted.append(
                        {
                            "estimator": estimator,
                            "calibrator": kind,
                            "agent_index": int(agent_index),
                            "agent": rows["agent"].iloc[0],
                            "stream": int(stream),
                            "fit": calibrator.to_dict(),
                        }
                    )
        out["runs"].append(
            {
                "run": run,
                "val_question_ids": [str(q) for q in val_ids],
                "test_question_ids": [str(q) for q in test_ids],
                "fitted": fitted,
            }
        )
    return out


def calibrated(streams: pd.DataFrame, calibration: dict, run: int, estimator: str, calibrator: str) -> pd.DataFrame:
    """The streams with column ``p``: the raw confidence through that run's fitted calibrator."""
    fitted = {
        (f["agent_index"], f["stream"]): calibrator_from_dict(f["fit"])
        for f in calibration["runs"][run]["fitted"]
        if f["estimator"] == estimator and f["calibrator"] == calibrator
    }
    if len(fitted) != 4:
        raise DataFileError(f"calibration has no {calibrator!r} fit of {estimator!r} for run {run}")
    frame = streams.copy()
    frame["p"] = np.nan
    raw = ESTIMATOR_COLUMNS[estimator]
    for (agent_index, stream), model in fitted.items():
        rows = (frame["agent_index"] == agent_index) & (frame["stream"] == stream)
        frame.loc[rows, "p"] = model.predict(frame.loc[rows, raw].to_numpy(float))
    return frame


def run_split_ids(calibration: dict, run: int, question_ids) -> tuple[list, list]:
    """A run's (validation ids, test ids) from the calibration file; a file that lists only the
    validation ids (written before runs resampled) tests on the other ``question_ids``."""
    info = calibration["runs"][run]
    val = list(info["val_question_ids"])
    if "test_question_ids" in info:
        return val, list(info["test_question_ids"])
    in_val = set(val)
    return val, [q for q in np.sort(np.unique(np.asarray(question_ids, dtype=object))) if q not in in_val]


def calibration_report(
    streams: pd.DataFrame, calibration: dict, bins: int = 10, weighting: str = "count"
) -> pd.DataFrame:
    """Raw vs calibrated confidence quality of every stream on each run's validation and test part."""
    rows = []
    for run_info in calibration["runs"]:
        run = run_info["run"]
        val_ids, test_ids = run_split_ids(calibration, run, streams["question_id"])
        for estimator in calibration["estimators"]:
            for kind in calibration["calibrators"]:
                frame = calibrated(streams, calibration, run, estimator, kind)
                parts = pd.concat(
                    [
                        take_questions(frame, val_ids).assign(split="val"),
                        take_questions(frame, test_ids).assign(split="test"),
                    ],
                    ignore_index=True,
                )
                for (agent, stream, split), part in parts.groupby(["agent", "stream", "split"]):
                    p = part["p"].fillna(0.5).to_numpy(float)
                    z = part["correct"].to_numpy(bool)
                    rows.append(
                        {
                            "run": run,
                            "estimator": estimator,
                            "calibrator": kind,
                            "agent": agent,
                            "stream": stream,
                            "split": split,
                            "n": len(part),
                            "ece": metrics.ece(p, z, bins=bins, weighting=weighting),
                            "nll": metrics.nll(p, z),
                            "brier": metrics.brier(p, z),
                            "auarc": metrics.auarc(p, z, seed=run),
                        }
                    )
    return pd.DataFrame(rows)


def fit_calibrators_job(streams_path, out_path, report_path, *, seed: int, settings: CalibrationSettings) -> dict:
    """The `fit_calibrators` rule: the calibration JSON and its raw-vs-calibrated report."""
    streams = read_streams(streams_path)
    calibration = fit_calibrators(streams, seed=seed, settings=settings)
    write_json_atomic(calibration, out_path)
    report = calibration_report(streams, calibration, settings.ece_bins, settings.ece_weighting)
    write_text_atomic(report.to_csv(index=False), report_path)
    return calibration


# --- the pair's arrays per (run, estimator, calibrator) ---------------------------------------


def split_arrays(
    streams: pd.DataFrame, calibration: dict, run: int, estimator: str, calibrator: str
) -> tuple[StreamArrays, StreamArrays]:
    """That run's (validation, test) arrays under one estimator and calibrator."""
    arrays = stream_arrays(calibrated(streams, calibration, run, estimator, calibrator), "p")
    val_ids, test_ids = run_split_ids(calibration, run, arrays.question_ids)
    return arrays.take(val_ids), arrays.take(test_ids)


def better_agent(arrays: StreamArrays, method: str) -> int:
    """The agent with the higher validation F1 under a single-agent method (tie: M1)."""
    scores = [metrics.weighted_f1(arrays.gold, baseline(method, arrays, agent)[0]) for agent in (0, 1)]
    return 0 if scores[0] >= scores[1] else 1


def baseline(method: str, arrays: StreamArrays, agent: int) -> tuple[np.ndarray, np.ndarray]:
    if method not in BASELINES:
        raise ValueError(f"unknown baseline {method!r} (known: {BASELINES})")
    return apply_method(method, arrays.pred, arrays.conf, arrays.n_labels, agent=agent)


# --- search ------------------------------------------------------------------------------------


def search_protocol_job(
    streams_path,
    calibration_path,
    out_path,
    trials_path,
    plot_path,
    journal_path,
    *,
    dataset: str,
    pair: str,
    protocol: str,
    settings: SearchSettings,
    show_progress: bool = True,
) -> dict:
    """The `search_protocol` rule: θ of ``protocol`` for every (estimator, calibrator, run) of the
    calibration file, the trials and the optimisation history."""
    streams = read_streams(streams_path)
    calibration = read_json_checked(calibration_path)
    search_settings = settings
    combos = [
        (e, c, r["run"])
        for e in calibration["estimators"]
        for c in calibration["calibrators"]
        for r in calibration["runs"]
    ]
    best, trials = [], []
    for estimator, kind, run in tqdm(combos, desc=f"search {protocol} {dataset}/{pair}", disable=not show_progress):
        val, _ = split_arrays(streams, calibration, run, estimator, kind)
        tie_agent = better_agent(val, "zero_shot")
        seed = calibration["seed"] * 1000 + run
        result = tpe_search(
            protocol,
            val,
            search_settings,
            storage_path=journal_path,
            seed=seed,
            tie_agent=tie_agent,
            label=f"{dataset}/{pair}/{protocol}/{estimator}/{kind}/run{run}",
        )
        best.append(
            {
                "estimator": estimator,
                "calibrator": kind,
                "run": run,
                "params": result.params,
                "value": result.value,
                "n_trials": result.n_trials,
                "stopped_early": result.stopped_early,
                "tie_agent": tie_agent,
                "study": result.study_name,
            }
        )
        trials.append(result.trials.assign(estimator=estimator, calibrator=kind, run=run))
    out = {
        "dataset": dataset,
        "pair": pair,
        "protocol": protocol,
        "objective": search_settings.objective,
        "wsv_softmax_support": search_settings.wsv_softmax_support,
        "best": best,
    }
    write_json_atomic(out, out_path)
    trials_frame = pd.concat(trials, ignore_index=True)
    write_parquet_atomic(trials_frame, trials_path)
    save_figure_atomic(plot_history(trials_frame, f"{protocol} on {dataset}/{pair}"), plot_path)
    return out


# --- test report -------------------------------------------------------------------------------


def evaluate_methods(
    streams: pd.DataFrame, calibration: dict, searches: Sequence[dict], *, bins: int = 10, weighting: str = "count"
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every baseline and searched protocol on the test split of every run; (predictions, metrics)."""
    params = {
        (s["protocol"], b["estimator"], b["calibrator"], b["run"]): (b["params"], s["wsv_softmax_support"])
        for s in searches
        for b in s["best"]
    }
    agents = streams.sort_values("agent_index", kind="stable").drop_duplicates("agent_index")["agent"].tolist()
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
                    outputs[(protocol, "")] = apply_method(
                        protocol,
                        test.pred,
                        test.conf,
                        test.n_labels,
                        params=theta,
                        tie_agent=tie_agent,
                        wsv_softmax_support=support,
                    )
                for (method, agent), (answer, confidence) in outputs.items():
                    correct = test.correct(answer)
                    key = {"run": run, "estimator": estimator, "calibrator": kind, "method": method, "agent": agent}
                    rows.append(
                        {
                            **key,
                            **metrics.summarize(
                                test.gold, answer, correct, confidence, bins=bins, weighting=weighting, seed=run
                            ),
                        }
                    )
                    predictions.append(
                        pd.DataFrame(
                            {
                                **key,
                                "question_id": test.question_ids,
                                "answer": test.decode(answer),
                                "correct": correct,
                                "confidence": confidence,
                            }
                        )
                    )
    return pd.concat(predictions, ignore_index=True), pd.DataFrame(rows)


def apply_protocol_job(
    streams_path,
    calibration_path,
    search_paths,
    predictions_path,
    metrics_path,
    reliability_path,
    rejection_path,
    *,
    dataset: str,
    pair: str,
    ece_bins: int = 10,
    ece_weighting: str = "count",
    plot_calibrator: str | None = None,
) -> pd.DataFrame:
    """The `apply_protocol` rule: every method on the test split, its predictions, metrics and plots."""
    streams = read_streams(streams_path)
    calibration = read_json_checked(calibration_path)
    searches = [read_json_checked(p) for p in search_paths]
    predictions, table = evaluate_methods(streams, calibration, searches, bins=ece_bins, weighting=ece_weighting)
    table.insert(0, "pair", pair)
    table.insert(0, "dataset", dataset)
    write_parquet_atomic(predictions, predictions_path)
    write_text_atomic(table.to_csv(index=False), metrics_path)
    kind = plot_calibrator if plot_calibrator in calibration["calibrators"] else calibration["calibrators"][0]
    shown = predictions[
        (predictions["calibrator"] == kind)
        & (predictions["run"] == 0)
        & ~predictions["method"].str.startswith("zero_shot:")
    ]
    title = f"{dataset}/{pair}, {kind} calibration, test split, run 0"
    save_figure_atomic(plot_reliability(shown, ece_bins, title), reliability_path)
    save_figure_atomic(plot_accuracy_rejection(shown, title), rejection_path)
    return table
