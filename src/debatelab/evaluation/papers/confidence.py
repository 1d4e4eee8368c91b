"""Confidence protocols (spec 004 §9-§10): Table 1 (F1 / AUARC lift over zs* with k significant
pairs), the raw-vs-calibrated test ECE of every stream, the lift plot and the claims of §10.

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
"""
from __future__ import annotations

import pandas as pd

from ...reporting.confidence import paper_layout, plot_lift
from ..claims import Claim, finite
from ..paper_numbers import long_table
from ..run import RunOutputs
from ..stage import PaperEvaluation

METHODS = ["mad", "mad_d", "wsv", "cga", "hid"]
PROTOCOLS = ["wsv", "cga", "hid"]
CALIBRATOR_ORDER = ["raw", "beta", "polynomial", "isotonic"]
MONOTONE = ("beta", "isotonic")  # rank-preserving, so AUARC should barely move (§10.2)
AUARC_TOLERANCE = 0.02  # |Δ AUARC| in [0, 1] that still counts as "about unchanged"
AMBIGUOUS = ("boolq", "vast", "ezstance")  # §10.3: stance and BoolQ, where debate hurts F1
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
    """Long cells (estimator, method, dataset = the paper's, metric, value, n = pairs × runs)."""
    columns = ["estimator", "method", "dataset", "metric", "value", "n", "run_dataset"]
    if lift.empty or calibrator is None:
        return pd.DataFrame(columns=columns)
    part = lift[lift["calibrator"] == calibrator]
    wide = pd.DataFrame({
        "estimator": part["estimator"], "method": part["method"],
        "dataset": part["dataset"].map(outputs.paper_dataset), "run_dataset": part["dataset"], "n": _n_cells(part),
        "f1_lift": part["lift_f1"], "auarc_lift": part["lift_auarc"], "f1_k": part["k_f1"],
        "auarc_k": part["k_auarc"]})
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
    wide = cells.pivot_table(index=["dataset", "estimator"], columns="calibrator", values=["ece", "auarc"],
                             aggfunc="first", sort=False)
    wide.columns = [f"{metric}_{kind}" for metric, kind in wide.columns]
    wide = wide[[f"{m}_{k}" for m in ("ece", "auarc") for k in kinds]].round(4)
    wide["n"] = cells.groupby(["dataset", "estimator"], sort=False)["n"].max()
    out = wide.reset_index().rename(columns={"dataset": "run_dataset"})
    out.insert(0, "dataset", out["run_dataset"].map(outputs.paper_dataset))
    return out


# --------------------------------------------------------------------------- test metrics


def method_means(outputs: RunOutputs) -> pd.DataFrame:
    """F1 and AUARC (points) per (dataset, estimator, calibrator, method) on the test split: mean
    over runs per pair, then over pairs (as the lift table averages); n = test questions × runs."""
    table = outputs.confidence_metrics
    columns = ["dataset", "estimator", "calibrator", "method", "f1", "auarc", "n"]
    if table.empty:
        return pd.DataFrame(columns=columns)
    table = table[~table["method"].str.startswith("zero_shot:")]
    if "n" not in table:
        table = table.assign(n=1)
    keys = ["dataset", "estimator", "calibrator", "method"]
    per_pair = table.groupby([*keys, "pair"], sort=False).agg(f1=("f1", "mean"), auarc=("auarc", "mean"),
                                                               n=("n", "sum"))
    out = per_pair.groupby(level=keys, sort=False).agg(f1=("f1", "mean"), auarc=("auarc", "mean"), n=("n", "sum"))
    out[["f1", "auarc"]] *= 100
    return out.reset_index()[columns]


# --------------------------------------------------------------------------- claims


def _calibration_claims(cells: pd.DataFrame) -> list[Claim]:
    """§10.1 (every fitted calibrator lowers test ECE) and §10.2 (monotone ones keep AUARC)."""
    s1 = "a fitted calibrator lowers test ECE compared with raw"
    s2 = f"a monotone calibrator leaves single-agent AUARC about unchanged (|Δ| ≤ {AUARC_TOLERANCE})"
    kinds = set(cells["calibrator"]) if not cells.empty else set()
    if "raw" not in kinds or kinds == {"raw"}:
        reason = ("no calibration report" if cells.empty else
                  "needs raw and at least one fitted calibrator in `calibration.calibrators`")
        return [Claim.untestable("§10.1", s1, reason), Claim.untestable("§10.2", s2, reason)]
    claims = []
    by = cells.set_index(["dataset", "estimator", "calibrator"])
    for (dataset, estimator), g in cells.groupby(["dataset", "estimator"], sort=False):
        if (dataset, estimator, "raw") not in by.index:
            continue
        raw = by.loc[(dataset, estimator, "raw")]
        for _, row in g[g["calibrator"] != "raw"].iterrows():
            scope = f"{dataset}, {estimator}, {row['calibrator']}"
            d = float(row["ece"] - raw["ece"])
            claims.append(Claim("§10.1", s1, scope,
                                "ECE(calibrated) − ECE(raw), test, mean over pairs × runs × streams", d,
                                bool(d < 0) if finite(d) else None, int(row["n"])))
        for _, row in g[g["calibrator"].isin(MONOTONE)].iterrows():
            scope = f"{dataset}, {estimator}, {row['calibrator']}"
            d = float(row["auarc"] - raw["auarc"])
            claims.append(Claim("§10.2", s2, scope, "AUARC(calibrated) − AUARC(raw), test, per stream, in [0, 1]",
                                d, bool(abs(d) <= AUARC_TOLERANCE) if finite(d) else None, int(row["n"]),
                                f"tolerance ±{AUARC_TOLERANCE}: isotonic steps tie confidences, so AUARC can move"))
    if not any(c.claim == "§10.2" for c in claims):
        claims.append(Claim.untestable("§10.2", s2, "no monotone calibrator (beta, isotonic) was fitted"))
    return claims


def _lift_claims(lift: pd.DataFrame, calibrator: str | None, outputs: RunOutputs) -> list[Claim]:
    """§10.3 (MAD hurts F1 on stance / BoolQ, MAD-D less) and §10.4 (CGA/HID AUARC ≥ zs*, MAD)."""
    s3a, s3b = "MAD F1 ≤ zs* F1 (stance, BoolQ)", "MAD-D loses less F1 than MAD (stance, BoolQ)"
    s4 = "protocol AUARC ≥ AUARC of zs* and of MAD"
    if lift.empty or calibrator is None:
        reason = "no lift table (summary/confidence_lift.csv) in this run"
        return [Claim.untestable("§10.3", s3a, reason), Claim.untestable("§10.4", s4, reason)]
    part = lift[lift["calibrator"] == calibrator].assign(n=lambda f: _n_cells(f))
    claims = []
    ambiguous = part[part["dataset"].map(outputs.paper_dataset).isin(AMBIGUOUS)]
    if ambiguous.empty:
        mapped = sorted({outputs.paper_dataset(d) for d in part["dataset"]})
        claims.append(Claim.untestable("§10.3", s3a, f"no stance or BoolQ dataset (this run's map to {mapped})"))
    # F1 comes from the answers only, so it is the same for every estimator: average them
    for dataset, g in ambiguous.groupby("dataset", sort=False):
        by = g.groupby("method")[["lift_f1", "n"]].mean()
        if "mad" not in by.index:
            claims.append(Claim.untestable("§10.3", s3a, "no MAD row in the lift table", dataset))
            continue
        mad, n = float(by.loc["mad", "lift_f1"]), int(by.loc["mad", "n"])
        claims.append(Claim("§10.3", s3a, dataset, "F1(MAD) − F1(zs*), points", mad,
                            bool(mad <= 0) if finite(mad) else None, n))
        if "mad_d" in by.index:
            d = float(by.loc["mad_d", "lift_f1"]) - mad
            claims.append(Claim("§10.3", s3b, dataset, "F1 lift(MAD-D) − F1 lift(MAD), points", d,
                                bool(d >= 0) if finite(d) else None, n))
    found = False
    for (dataset, estimator), g in part.groupby(["dataset", "estimator"], sort=False):
        by = g.set_index("method")
        for protocol in ("cga", "hid"):
            if protocol not in by.index:
                continue
            found = True
            row, scope = by.loc[protocol], f"{dataset}, {estimator}, {protocol}"
            v = float(row["lift_auarc"])
            claims.append(Claim("§10.4", f"{protocol.upper()} AUARC ≥ zs* AUARC", scope,
                                "AUARC lift over zs*, points", v, bool(v >= 0) if finite(v) else None, int(row["n"])))
            if "mad" in by.index:
                d = v - float(by.loc["mad", "lift_auarc"])
                claims.append(Claim("§10.4", f"{protocol.upper()} AUARC ≥ MAD AUARC", scope,
                                    f"AUARC({protocol.upper()}) − AUARC(MAD), points", d,
                                    bool(d >= 0) if finite(d) else None, int(row["n"])))
    if not found:
        claims.append(Claim.untestable("§10.4", s4, "no CGA or HID row in the lift table"))
    return claims


def _metric_claims(means: pd.DataFrame, calibrator: str | None) -> list[Claim]:
    """§10.5: calibration raises protocol F1; WSV has the best F1, CGA/HID the best AUARC."""
    s5a = "calibrated protocol F1 ≥ raw protocol F1"
    s5b, s5c = "WSV has the best F1 of all methods", "CGA or HID has the best AUARC of all methods"
    if means.empty:
        reason = "no test metrics (protocols/{dataset}/{pair}/metrics.csv) in this run"
        return [Claim.untestable("§10.5", s5a, reason), Claim.untestable("§10.5", s5b, reason)]
    claims = []
    by = means.set_index(["dataset", "estimator", "calibrator", "method"])
    if "raw" not in set(means["calibrator"]) or set(means["calibrator"]) == {"raw"}:
        claims.append(Claim.untestable("§10.5", s5a, "needs raw and a fitted calibrator in `calibration.calibrators`"))
    else:
        for key, row in by.iterrows():
            dataset, estimator, kind, method = key
            if kind == "raw" or method not in PROTOCOLS or (dataset, estimator, "raw", method) not in by.index:
                continue
            d = float(row["f1"] - by.loc[(dataset, estimator, "raw", method), "f1"])
            claims.append(Claim("§10.5", s5a, f"{dataset}, {estimator}, {kind}, {method}",
                                f"F1({kind}) − F1(raw), points", d, bool(d >= 0) if finite(d) else None,
                                int(row["n"])))
    shown = means[means["calibrator"] == calibrator] if calibrator in set(means["calibrator"]) else means.iloc[:0]
    if shown.empty:
        claims.append(Claim.untestable("§10.5", s5b, f"no test metrics for the {calibrator} calibrator"))
    for (dataset, estimator), g in shown.groupby(["dataset", "estimator"], sort=False):
        m = g.set_index("method")
        scope = f"{dataset}, {estimator}, {calibrator}"
        if "wsv" in m.index and len(m) > 1:
            d = float(m.loc["wsv", "f1"] - m.drop(index="wsv")["f1"].max())
            claims.append(Claim("§10.5", s5b, scope, "F1(WSV) − best other F1, points", d,
                                bool(d >= 0) if finite(d) else None, int(m.loc["wsv", "n"]),
                                f"best other: {m.drop(index='wsv')['f1'].idxmax()}"))
        gated = [p for p in ("cga", "hid") if p in m.index]
        if gated and len(m) > len(gated):
            best = m.loc[gated, "auarc"].idxmax()
            d = float(m.loc[best, "auarc"] - m.drop(index=gated)["auarc"].max())
            claims.append(Claim("§10.5", s5c, scope, f"AUARC({best.upper()}) − best other AUARC, points", d,
                                bool(d >= 0) if finite(d) else None, int(m.loc[best, "n"]),
                                f"best other: {m.drop(index=gated)['auarc'].idxmax()}"))
    return claims


TRANSITIONS = {(True, True): "c→c", (True, False): "c→i", (False, True): "i→c", (False, False): "i→i"}


def debate_transitions(streams: pd.DataFrame) -> pd.DataFrame:
    """One row per debated (pair, question, agent): correct and raw confidences before (stream 0, the
    zero-shot answer) and after the debate (stream 1), and the transition (c→i: right, then wrong)."""
    keys = ["dataset", "pair", "question_id", "agent"]
    streams = streams.drop_duplicates([*keys, "stream"])  # a question's rows repeat in every run's split
    before = streams[streams["stream"] == 0].set_index(keys)
    after = streams[(streams["stream"] == 1) & streams["debated"].astype(bool)].set_index(keys)
    joined = before.merge(after, left_index=True, right_index=True, how="inner",
                          suffixes=("_before", "_after")).reset_index()
    joined["transition"] = [TRANSITIONS[(bool(b), bool(a))] for b, a in zip(joined["correct_before"], joined["correct_after"])]
    return joined


def _debate_confidence_claims(streams: pd.DataFrame) -> list[Claim]:
    """§10.7 (Fig. 2): the mean raw seqprob confidence after − before debate, per dataset and
    transition; it holds where the mean rises. Self-report, which the paper finds moves less, is in
    the detail."""
    statement = "sequence-probability confidence rises after debate, even on correct→incorrect flips"
    if streams.empty:
        return [Claim.untestable("§10.7", statement, "no streams (the confidence stage's streams.parquet)")]
    joined = debate_transitions(streams)
    claims = []
    for dataset, part in joined.groupby("dataset", sort=False):
        for transition in TRANSITIONS.values():
            rows = part[part["transition"] == transition]
            scope = f"{dataset}, {transition}"
            if rows.empty:
                claims.append(Claim.untestable("§10.7", statement, f"no {transition} answer among {len(part)} debated",
                                               scope=scope))
                continue
            seq = float((rows["conf_seqprob_after"] - rows["conf_seqprob_before"]).mean())
            verbal = float((rows["conf_verbal_after"] - rows["conf_verbal_before"]).mean())
            claims.append(Claim("§10.7", statement, scope, "mean seqprob confidence after − before debate", seq,
                                bool(seq > 0) if finite(seq) else None, len(rows),
                                f"self-report after − before: {verbal:+.4g}" if finite(verbal) else ""))
    return claims


def _claims(outputs: RunOutputs, lift: pd.DataFrame, calibrator: str | None, cal_cells: pd.DataFrame,
            means: pd.DataFrame) -> list[Claim]:
    claims = _calibration_claims(cal_cells) + _lift_claims(lift, calibrator, outputs)
    claims += _metric_claims(means, calibrator)
    return claims + _debate_confidence_claims(outputs.confidence_streams)


# --------------------------------------------------------------------------- plot


def plot(lift: pd.DataFrame, calibrator: str, outputs: RunOutputs):
    """The stage's lift bars, datasets labelled as in Table 1 and n = pairs × runs in the title."""
    part = lift[lift["calibrator"] == calibrator]
    pairs, runs = sorted(set(part["n_pairs"].astype(int))), sorted(set(part["n_runs"].astype(int)))
    span = lambda v: str(v[0]) if len(v) == 1 else f"{v[0]}–{v[-1]}"  # noqa: E731
    title = (f"{outputs.experiment}: F1 and AUARC lift over the best zero-shot agent (zs*), "
             f"n = {span(pairs)} pairs × {span(runs)} runs per bar")
    return plot_lift(part.assign(dataset=part["dataset"].map(lambda d: _label(outputs, d))), calibrator, title)


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    lift = outputs.confidence_lift
    calibrator = report_calibrator(outputs, lift)
    cal_cells = calibration_cells(calibration_frame(outputs))
    means = method_means(outputs)
    if calibrator is None and not means.empty:
        wanted = outputs.settings.get("calibrator", "beta")
        calibrator = wanted if wanted in set(means["calibrator"]) else means["calibrator"].iloc[0]
    result = PaperEvaluation()
    result.tables["table1"] = table1(lift, calibrator, outputs)
    result.cells["table1"] = table1_cells(lift, calibrator, outputs)
    result.tables["calibration"] = calibration_table(cal_cells, outputs)
    result.claims = _claims(outputs, lift, calibrator, cal_cells, means)
    if not lift.empty and calibrator is not None:
        result.figures["lift"] = plot(lift, calibrator, outputs)
    return result
