"""Confidence protocols (Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5): Table 1 (F1 / AUARC lift over zs* with k significant
pairs), the raw-vs-calibrated test ECE of every stream, the lift plot and the claims conf-1 to conf-10.

Sources, all written by the confidence stage: the experiment summary's lift table
(`summary/confidence_lift.csv`, one row per dataset × estimator × calibrator × method), the
calibration reports (`calibration/{dataset}/{pair}.csv`, one row per run × estimator ×
calibrator × agent × stream × split) and the test metrics (`protocols/{dataset}/{pair}/metrics.csv`,
one row per run × estimator × calibrator × method). The paper's SeqProb rows are the stage's
`seqprob` estimator, its SelfRep (self-report) rows `verbal`. Lifts are in points; ECE and AUARC
of the calibration table in [0, 1].

Table 1's k is the lift table's: pairs whose paired one-sided t-tests over the runs (each run on
its own data, `confidence.stage`) beat every comparator at α; a comparison without variance over
runs is not significant, and k is "–" (NaN) where no pair could be tested
(`reporting.confidence.lift_table`).

The claims are `confidence_claims`; `calibration_runs` and `method_runs` are their units.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...reporting.confidence import paper_layout, plot_lift
from ..paper_numbers import long_table
from ..result import PaperEvaluation
from ..run import RunOutputs

METHODS = ["mad", "mad_d", "wsv", "cga", "hid"]
PROTOCOLS = ["wsv", "cga", "hid"]
CALIBRATOR_ORDER = ["raw", "beta", "polynomial", "isotonic"]
MONOTONE = ("beta", "isotonic")  # rank-preserving, so AUARC should barely move (claim conf-2)
AUARC_TOLERANCE = 0.02  # |Δ AUARC| in [0, 1] that still counts as "about unchanged"
AMBIGUOUS = ("boolq", "vast", "ezstance")  # conf-3: stance and BoolQ, where debate hurts F1
CELL_METRICS = ["f1_lift", "auarc_lift", "f1_k", "auarc_k"]


def report_calibrator(outputs: RunOutputs, lift: pd.DataFrame) -> str | None:
    """The evaluation's `calibrator` (default beta, the paper's), else the first one the run has."""
    present = list(dict.fromkeys(lift["calibrator"])) if "calibrator" in lift else []
    wanted = outputs.settings.get("calibrator", "beta")
    return wanted if wanted in present else (present[0] if present else None)


def _label(outputs: RunOutputs, dataset: str) -> str:
    """The run dataset, with the paper's benchmark in brackets where it stands in for another."""
    paper = outputs.paper_dataset(dataset)
    return dataset if paper == dataset else f"{dataset} ({paper})"


def _n_cells(frame: pd.DataFrame) -> pd.Series:
    return (frame["n_pairs"].astype(int) * frame["n_runs"].astype(int)).astype(int)


# --------------------------------------------------------------------------- Table 1


def table1(lift: pd.DataFrame, calibrator: str | None, outputs: RunOutputs) -> pd.DataFrame:
    """The stage's own Table 1 layout, dataset columns named as `_label` does."""
    if lift.empty or calibrator is None:
        return pd.DataFrame(columns=["estimator", "method"])
    layout = paper_layout(lift, calibrator)
    layout.columns.name = None
    return layout.rename(columns={d: _label(outputs, d) for d in lift["dataset"].unique()})


def table1_cells(lift: pd.DataFrame, calibrator: str | None, outputs: RunOutputs) -> pd.DataFrame:
    """Long cells (estimator, method, dataset = the paper's, metric, value, n = pairs × runs); a lift
    with its 95 % t interval over runs (`low`, `high`, from the summary's lift table), k without."""
    columns = ["estimator", "method", "dataset", "metric", "value", "low", "high", "n", "run_dataset"]
    if lift.empty or calibrator is None:
        return pd.DataFrame(columns=columns)
    part = lift[lift["calibrator"] == calibrator]
    wide = pd.DataFrame(
        {
            "estimator": part["estimator"],
            "method": part["method"],
            "dataset": part["dataset"].map(outputs.paper_dataset),
            "run_dataset": part["dataset"],
            "n": _n_cells(part),
            "f1_lift": part["lift_f1"],
            "auarc_lift": part["lift_auarc"],
            **{
                f"{metric}_lift_{end}": part.get(f"lift_{metric}_{end}", np.nan)
                for metric in ("f1", "auarc")
                for end in ("low", "high")
            },
            "f1_k": part["k_f1"],
            "auarc_k": part["k_auarc"],
        }
    )
    return long_table(wide, ["estimator", "method", "dataset"], CELL_METRICS)[columns]


# --------------------------------------------------------------------------- calibration


def calibration_frame(outputs: RunOutputs) -> pd.DataFrame:
    """The calibration reports with `dataset` and `pair` (`RunOutputs.calibration` takes them from
    each file's path; a frame given without them counts as one dataset and pair, "all")."""
    frame = outputs.calibration
    if frame.empty or {"dataset", "pair"} <= set(frame.columns):
        return frame
    return frame.assign(**{c: frame.get(c, "all") for c in ("dataset", "pair")})


def calibration_cells(cal: pd.DataFrame) -> pd.DataFrame:
    """Test-split ECE and single-agent AUARC per (dataset, estimator, calibrator), averaged over
    pairs, runs, agents and streams; n = test questions × runs, summed over pairs."""
    columns = ["dataset", "estimator", "calibrator", "ece", "auarc", "n"]
    if cal.empty:
        return pd.DataFrame(columns=columns)
    test = cal[cal["split"] == "test"]
    keys = ["dataset", "estimator", "calibrator"]
    means = test.groupby(keys, sort=False)[["ece", "auarc"]].mean()
    # every (agent, stream) of a (pair, run) sees the same test questions: count them once
    n = test.groupby([*keys, "pair", "run"], sort=False)["n"].max().groupby(level=keys, sort=False).sum()
    return means.assign(n=n.astype(int)).reset_index()[columns]


def calibration_table(cells: pd.DataFrame, outputs: RunOutputs) -> pd.DataFrame:
    """Rows (dataset, estimator); columns ece_<calibrator> and auarc_<calibrator>, raw first, and n."""
    if cells.empty:
        return pd.DataFrame(columns=["dataset", "run_dataset", "estimator", "n"])
    present = list(dict.fromkeys(cells["calibrator"]))
    kinds = [k for k in CALIBRATOR_ORDER if k in present] + [k for k in present if k not in CALIBRATOR_ORDER]
    wide = cells.pivot_table(
        index=["dataset", "estimator"], columns="calibrator", values=["ece", "auarc"], aggfunc="first", sort=False
    )
    wide.columns = [f"{metric}_{kind}" for metric, kind in wide.columns]
    wide = wide[[f"{m}_{k}" for m in ("ece", "auarc") for k in kinds]].round(4)
    wide["n"] = cells.groupby(["dataset", "estimator"], sort=False)["n"].max()
    out = wide.reset_index().rename(columns={"dataset": "run_dataset"})
    out.insert(0, "dataset", out["run_dataset"].map(outputs.paper_dataset))
    return out


# --------------------------------------------------------------------------- per-run metrics (the claims' units)


def calibration_runs(cal: pd.DataFrame) -> pd.DataFrame:
    """Test-split ECE and single-agent AUARC per (dataset, estimator, calibrator, run): the mean over
    pairs, agents and streams (their mean over runs is `calibration_cells`' with balanced runs)."""
    columns = ["dataset", "estimator", "calibrator", "run", "ece", "auarc"]
    if cal.empty:
        return pd.DataFrame(columns=columns)
    test = cal[cal["split"] == "test"]
    return test.groupby(columns[:4], sort=False)[["ece", "auarc"]].mean().reset_index()


def method_runs(outputs: RunOutputs) -> pd.DataFrame:
    """Test F1 and AUARC (points) per (dataset, estimator, calibrator, method, run), each the mean
    over pairs; single agents (`zero_shot:<agent>`) left out, `zero_shot` is zs*. A lift of Table 1
    is the mean over runs of a method's value minus zs*'s (with every pair in every run)."""
    table = outputs.confidence_metrics
    columns = ["dataset", "estimator", "calibrator", "method", "run", "f1", "auarc"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    table = table[~table["method"].str.startswith("zero_shot:")]
    out = table.groupby(columns[:5], sort=False)[["f1", "auarc"]].mean()
    return (out * 100).reset_index()


# --------------------------------------------------------------------------- plot


def plot(lift: pd.DataFrame, calibrator: str, outputs: RunOutputs):
    """The stage's lift bars, datasets labelled as in Table 1 and n = pairs × runs in the title."""
    part = lift[lift["calibrator"] == calibrator]
    pairs, runs = sorted(set(part["n_pairs"].astype(int))), sorted(set(part["n_runs"].astype(int)))
    span = lambda v: str(v[0]) if len(v) == 1 else f"{v[0]}–{v[-1]}"  # noqa: E731
    title = (
        f"{outputs.experiment}: F1 and AUARC lift over the best zero-shot agent (zs*), "
        f"n = {span(pairs)} pairs × {span(runs)} runs per bar"
    )
    return plot_lift(part.assign(dataset=part["dataset"].map(lambda d: _label(outputs, d))), calibrator, title)


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    from .confidence_claims import paper_claims  # imports this module's tables: here, not at the top

    lift = outputs.confidence_lift
    calibrator = report_calibrator(outputs, lift)
    cal = calibration_frame(outputs)
    cal_cells = calibration_cells(cal)
    runs = method_runs(outputs)
    if calibrator is None and not runs.empty:
        wanted = outputs.settings.get("calibrator", "beta")
        calibrator = wanted if wanted in set(runs["calibrator"]) else runs["calibrator"].iloc[0]
    result = PaperEvaluation()
    result.tables["table1"] = table1(lift, calibrator, outputs)
    result.cells["table1"] = table1_cells(lift, calibrator, outputs)
    result.tables["calibration"] = calibration_table(cal_cells, outputs)
    result.claims = paper_claims(outputs, calibrator, calibration_runs(cal), runs)
    if not lift.empty and calibrator is not None:
        result.figures["lift"] = plot(lift, calibrator, outputs)
    return result
