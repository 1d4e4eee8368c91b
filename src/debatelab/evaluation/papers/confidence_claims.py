"""The confidence paper's claims (Elahi & Di Eugenio, arXiv:2606.13591: conf-1 to conf-10, each with
the section, table or figure that states it) as `claim_engine.ClaimSpec` rows (`CALIBRATION_SPECS`,
`LIFT_SPECS`, `METRIC_SPECS`, `SHIFT_SPEC`), run on the contexts the `*_contexts` functions build
(the tables are `confidence`'s).

F1, AUARC and ECE are statistics of a run's whole test part, and the files read here hold them per
run, not per question; so conf-1 to conf-9 take each calibration run (averaged over pairs, which share
the run's questions) as the unit and bootstrap runs, paired where both sides are one run's
(`calibration.runs` ≥ `intervals.MIN_UNITS` for an interval; fewer give "n/a (too few)"). conf-10 is a
mean over debated answers, bootstrapped over questions (`question_mean`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ...intervals import MIN_UNITS, Estimate
from ..claim_engine import DIFFERENCE, MEAN, Case, ClaimSpec, Missing, Resampled, Untestable, evaluate_claims
from ..claims import Claim, finite
from ..run import RunOutputs
from .confidence import AMBIGUOUS, AUARC_TOLERANCE, MONOTONE, PROTOCOLS

# --------------------------------------------------------------------------- claims

# A run's test part is drawn from (seed, run) alone, so run r tests every pair of a dataset on the
# same questions: a run, averaged over its pairs, is one unit, and two methods (or calibrators) of
# one run are paired. The files the evaluation reads hold per-run metrics, not per-question ones.
RUN_UNIT = "calibration runs, each averaged over pairs"
QUESTION_UNIT = "questions, every pair and agent of a question together"


def _few_units(unit: str, detail: str = "") -> Callable[[Estimate], str]:
    """A row's detail: how many units there are where fewer than `intervals.MIN_UNITS` (in this
    paper's words, naming the `calibration.runs` knob), then `detail`."""

    def text(estimate: Estimate) -> str:
        few = ""
        if estimate.n < MIN_UNITS:
            what = "calibration run" if unit == RUN_UNIT else "question"
            knob = " (`calibration.runs`)" if unit == RUN_UNIT else ""
            few = f"{estimate.n} {what}{'' if estimate.n == 1 else 's'}{knob}: an interval needs at least {MIN_UNITS}"
        return "; ".join(d for d in (few, detail) if d)

    return text


def paired_runs(a: pd.Series, b: pd.Series, statistic=lambda d: d.mean(axis=1)) -> Resampled:
    """mean(a) − mean(b) over the runs both have (index: run), paired over runs; `statistic` of the
    resampled differences (R, runs) → R values."""
    joined = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    difference = (joined["a"] - joined["b"]).to_numpy(float)
    return Resampled(lambda i: statistic(difference[i]), len(difference), paired=True, vectorized=True)


@dataclass(frozen=True)
class Versus:
    """A context: two sides' per-run values in one scope (`name`: the protocol, `kind`: the calibrator)."""

    scope: str
    a: pd.Series
    b: pd.Series
    kind: str = ""
    name: str = ""


def _paired(v: Versus) -> list[Case]:
    """mean(a) − mean(b) over the runs both sides have."""
    return [Case(v.scope, paired_runs(v.a, v.b), {"kind": v.kind, "name": v.name}, _few_units(RUN_UNIT))]


ECE_LOWER = "a fitted calibrator lowers test ECE compared with raw"
AUARC_KEPT = f"a monotone calibrator leaves single-agent AUARC about unchanged (|Δ| ≤ {AUARC_TOLERANCE})"
CALIBRATION_SPECS = [
    ClaimSpec(
        "conf-1",
        ECE_LOWER,
        DIFFERENCE,
        lambda v: _paired(Versus(v.scope, v.a["ece"], v.b["ece"], v.kind)),
        "ECE(calibrated) − ECE(raw), test, mean over runs × pairs × streams",
        "<",
        unit=RUN_UNIT,
        source="Elahi & Di Eugenio §2.1 (post-hoc calibrators reduce ECE), §3.3",
    ),
    ClaimSpec(
        "conf-2",
        AUARC_KEPT,
        DIFFERENCE,
        lambda v: (
            [
                Case(
                    v.scope,
                    paired_runs(v.a["auarc"], v.b["auarc"], lambda d: np.abs(d.mean(axis=1))),
                    detail=_few_units(
                        RUN_UNIT, f"tolerance {AUARC_TOLERANCE}: isotonic steps tie confidences, so AUARC can move"
                    ),
                )
            ]
            if v.kind in MONOTONE
            else []
        ),
        "|AUARC(calibrated) − AUARC(raw)|, test, per stream, in [0, 1]",
        "<=",
        AUARC_TOLERANCE,
        margin_reason="[CHOICE] margin 0: the tolerance AUARC_TOLERANCE is already the threshold",
        unit=RUN_UNIT,
        source="Elahi & Di Eugenio §2.1 (monotone calibration barely moves discrimination), §3.3",
    ),
]


def calibration_contexts(runs: pd.DataFrame) -> list:
    """conf-1 (every fitted calibrator lowers test ECE) and conf-2 (monotone ones keep AUARC): per
    (dataset, estimator, fitted calibrator), its runs beside raw's (a run's raw and calibrated
    streams score the same questions)."""
    kinds = set(runs["calibrator"]) if not runs.empty else set()
    if "raw" not in kinds or kinds == {"raw"}:
        reason = (
            "no calibration report"
            if runs.empty
            else "needs raw and at least one fitted calibrator in `calibration.calibrators`"
        )
        return [
            Untestable(reason, claim="conf-1", statement=ECE_LOWER),
            Untestable(reason, claim="conf-2", statement=AUARC_KEPT),
        ]
    contexts = []
    by = runs.set_index(["dataset", "estimator", "calibrator", "run"]).sort_index()
    for (dataset, estimator), g in runs.groupby(["dataset", "estimator"], sort=False):
        if "raw" not in set(g["calibrator"]):
            continue
        raw = by.loc[(dataset, estimator, "raw")]
        for kind in dict.fromkeys(g["calibrator"]):
            if kind != "raw":
                contexts.append(
                    Versus(f"{dataset}, {estimator}, {kind}", by.loc[(dataset, estimator, kind)], raw, kind)
                )
    if not any(c.kind in MONOTONE for c in contexts):
        contexts.append(
            Untestable("no monotone calibrator (beta, isotonic) was fitted", claim="conf-2", statement=AUARC_KEPT)
        )
    return contexts


def _wide(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Rows run, columns method: one (dataset, estimator, calibrator)'s `metric`."""
    return runs.pivot_table(index="run", columns="method", values=metric, aggfunc="first", sort=False)


MAD_F1, MAD_D_F1 = "MAD F1 ≤ zs* F1 (stance, BoolQ)", "MAD-D loses less F1 than MAD (stance, BoolQ)"
F1_SOURCE = "Elahi & Di Eugenio §5, Table 1 (MAD and MAD-D, F1)"
AUARC = "protocol AUARC ≥ AUARC of zs* and of MAD"
AUARC_SOURCE = "Elahi & Di Eugenio §5 (the aggregated confidence is highly discriminative), Table 1 (AUARC)"


def _f1_cases(f1: Versus, a: str, b: str, missing: str = ""):
    """F1(a) − F1(b) on one ambiguous dataset (`f1.a`: rows run, columns method); why not, with `missing`."""
    table = f1.a
    if "mad" not in table or "zero_shot" not in table:
        return [Untestable(missing, f1.scope)] if missing else []
    if a not in table:
        return []
    return [Case(f1.scope, paired_runs(table[a], table[b]), detail=_few_units(RUN_UNIT))]


def _auarc_cases(against: str):
    def cases(v: Versus):
        if against not in v.a:
            return []
        return [Case(v.scope, paired_runs(v.a[v.name.lower()], v.a[against]), {"name": v.name}, _few_units(RUN_UNIT))]

    return cases


LIFT_SPECS = [
    ClaimSpec(
        "conf-3",
        MAD_F1,
        DIFFERENCE,
        lambda v: _f1_cases(v, "mad", "zero_shot", "no MAD or zs* row in the test metrics") if v.kind == "f1" else [],
        "F1(MAD) − F1(zs*), points",
        "<=",
        margin_reason="[CHOICE] margin 0: the paper (arXiv:2606.13591, Table 1) reports MAD lowering F1 on "
        "stance and BoolQ, a loss, so the interval must lie below 0",
        unit=RUN_UNIT,
        source="Elahi & Di Eugenio §5, Table 1 (MAD, F1)",
    ),
    ClaimSpec(
        "conf-4",
        MAD_D_F1,
        DIFFERENCE,
        lambda v: _f1_cases(v, "mad_d", "mad") if v.kind == "f1" else [],
        "F1 lift(MAD-D) − F1 lift(MAD), points",
        ">=",
        margin_reason="[CHOICE] margin 0: 'loses less' is a strict comparison; the paper states no margin",
        unit=RUN_UNIT,
        source=F1_SOURCE + "; §6",
    ),
    ClaimSpec(
        "conf-5",
        "{name} AUARC ≥ zs* AUARC",
        DIFFERENCE,
        lambda v: _auarc_cases("zero_shot")(v) if v.kind == "auarc" else [],
        "AUARC lift over zs*, points",
        ">=",
        margin_reason="[CHOICE] margin 0: the paper (arXiv:2606.13591, Table 1) reports AUARC lifts of the "
        "gated protocols, gains rather than 'no worse within δ'",
        unit=RUN_UNIT,
        source=AUARC_SOURCE,
    ),
    ClaimSpec(
        "conf-6",
        "{name} AUARC ≥ MAD AUARC",
        DIFFERENCE,
        lambda v: _auarc_cases("mad")(v) if v.kind == "auarc" else [],
        "AUARC({name}) − AUARC(MAD), points",
        ">=",
        margin_reason="[CHOICE] margin 0, as against zs*",
        unit=RUN_UNIT,
        source=AUARC_SOURCE,
    ),
]


def lift_contexts(runs: pd.DataFrame, calibrator: str | None, outputs: RunOutputs) -> list:
    """conf-3, conf-4 (MAD hurts F1 on stance / BoolQ, MAD-D less) and conf-5, conf-6 (CGA/HID AUARC ≥ zs*, MAD): the
    lifts of Table 1, recomputed per run so that runs can be resampled."""
    part = runs[runs["calibrator"] == calibrator] if calibrator is not None else runs.iloc[:0]
    if part.empty:
        reason = "no per-run test metrics (protocols/{dataset}/{pair}/metrics.csv) in this run"
        return [
            Untestable(reason, claim="conf-3..4", statement=MAD_F1, source=F1_SOURCE),
            Untestable(reason, claim="conf-5..6", statement=AUARC, source=AUARC_SOURCE),
        ]
    contexts = []
    ambiguous = part[part["dataset"].map(outputs.paper_dataset).isin(AMBIGUOUS)]
    if ambiguous.empty:
        mapped = sorted({outputs.paper_dataset(d) for d in part["dataset"]})
        reason = f"no stance or BoolQ dataset (this run's map to {mapped})"
        contexts.append(Untestable(reason, claim="conf-3..4", statement=MAD_F1, source=F1_SOURCE))
    # F1 comes from the answers only, so it is the same for every estimator: average them
    for dataset, g in ambiguous.groupby("dataset", sort=False):
        f1 = g.groupby(["run", "method"], sort=False)["f1"].mean().unstack("method")
        contexts.append(Versus(dataset, f1, f1, "f1"))
    for (dataset, estimator), g in part.groupby(["dataset", "estimator"], sort=False):
        auarc = _wide(g, "auarc")
        for protocol in ("cga", "hid"):
            if protocol in auarc:
                contexts.append(Versus(f"{dataset}, {estimator}, {protocol}", auarc, auarc, "auarc", protocol.upper()))
    if not any(getattr(c, "kind", "") == "auarc" for c in contexts):
        contexts.append(
            Untestable("no CGA or HID in the test metrics", claim="conf-5..6", statement=AUARC, source=AUARC_SOURCE)
        )
    return contexts


def best_gap(values: pd.DataFrame, candidates: list[str]) -> tuple[Resampled | Missing, str, str]:
    """max over `candidates` of the mean over runs minus max over the other methods, paired over
    runs (both maxima re-taken on each resample); and the point's best candidate and best other.
    `values`: rows run, columns method (runs missing a method are left out)."""
    values = values.dropna(axis=1, how="all").dropna()
    matrix = values.to_numpy(float)
    mine = np.array([c in candidates for c in values.columns], dtype=bool)
    if not mine.any() or mine.all() or values.empty:
        return Missing(len(values), f"paired bootstrap over {RUN_UNIT}"), "", ""

    def gap(index: np.ndarray) -> np.ndarray:
        means = matrix[index].mean(axis=1)  # (resamples, methods)
        return means[:, mine].max(axis=1) - means[:, ~mine].max(axis=1)

    means = values.mean()
    resampled = Resampled(gap, len(values), paired=True, vectorized=True)
    return resampled, str(means[mine].idxmax()), str(means[~mine].idxmax())


CALIBRATED_F1 = "calibrated protocol F1 ≥ raw protocol F1"
BEST_F1, BEST_AUARC = "WSV has the best F1 of all methods", "CGA or HID has the best AUARC of all methods"
BEST_BOTH = "WSV has the best F1, CGA or HID the best AUARC of all methods"
BEST = "[CHOICE] margin 0: 'the best' is strictly above every other method"
BEST_SOURCE = "Elahi & Di Eugenio §5 (WSV results in higher F1 while CGA and HID result in higher AUARC), Figure 1; §6"


def _best_cases(metric: str, candidates: list[str], detail: str):
    def cases(v: Versus):
        if v.kind != "best":
            return []
        table = v.a[metric]
        mine = [p for p in candidates if p in table]
        if not mine or table.shape[1] <= len(mine):
            return []
        data, best, other = best_gap(table, mine)
        return [Case(v.scope, data, detail=_few_units(RUN_UNIT, detail.format(best=best, other=other)))]

    return cases


METRIC_SPECS = [
    ClaimSpec(
        "conf-7",
        CALIBRATED_F1,
        DIFFERENCE,
        lambda v: _paired(v) if v.kind not in ("best",) else [],
        "F1({kind}) − F1(raw), points",
        ">=",
        margin_reason="[CHOICE] margin 0: calibration 'raises' protocol F1 (a gain); no margin stated",
        unit=RUN_UNIT,
        source="Elahi & Di Eugenio §5 (calibration is essential), Figure 1",
    ),
    ClaimSpec(
        "conf-8",
        BEST_F1,
        DIFFERENCE,
        _best_cases("f1", ["wsv"], "best other: {other}"),
        "F1(WSV) − best other F1, points",
        ">=",
        margin_reason=BEST,
        unit=RUN_UNIT,
        source=BEST_SOURCE,
    ),
    ClaimSpec(
        "conf-9",
        BEST_AUARC,
        DIFFERENCE,
        _best_cases("auarc", ["cga", "hid"], "best: {best}; best other: {other}"),
        "best AUARC of CGA/HID − best other AUARC, points",
        ">=",
        margin_reason=BEST,
        unit=RUN_UNIT,
        source=BEST_SOURCE,
    ),
]


def metric_contexts(runs: pd.DataFrame, calibrator: str | None) -> list:
    """conf-7: calibration raises protocol F1 (each fitted calibrator's protocol F1 beside raw's);
    conf-8, conf-9: WSV has the best F1, CGA/HID the best AUARC (the shown calibrator's methods)."""
    if runs.empty:
        reason = "no test metrics (protocols/{dataset}/{pair}/metrics.csv) in this run"
        return [
            Untestable(reason, claim="conf-7", statement=CALIBRATED_F1),
            Untestable(reason, claim="conf-8..9", statement=BEST_BOTH, source=BEST_SOURCE),
        ]
    contexts = []
    kinds = set(runs["calibrator"])
    if "raw" not in kinds or kinds == {"raw"}:
        reason = "needs raw and a fitted calibrator in `calibration.calibrators`"
        contexts.append(Untestable(reason, claim="conf-7", statement=CALIBRATED_F1))
    else:
        for (dataset, estimator), g in runs.groupby(["dataset", "estimator"], sort=False):
            f1 = {kind: _wide(rows, "f1") for kind, rows in g.groupby("calibrator", sort=False)}
            if "raw" not in f1:
                continue
            for kind, wide in f1.items():
                for method in (m for m in wide.columns if kind != "raw" and m in PROTOCOLS and m in f1["raw"]):
                    contexts.append(
                        Versus(f"{dataset}, {estimator}, {kind}, {method}", wide[method], f1["raw"][method], kind)
                    )
    shown = runs[runs["calibrator"] == calibrator]
    if shown.empty:
        reason = f"no test metrics for the {calibrator} calibrator"
        contexts.append(Untestable(reason, claim="conf-8..9", statement=BEST_BOTH, source=BEST_SOURCE))
    for (dataset, estimator), g in shown.groupby(["dataset", "estimator"], sort=False):
        tables = {"f1": _wide(g, "f1"), "auarc": _wide(g, "auarc")}
        contexts.append(Versus(f"{dataset}, {estimator}, {calibrator}", tables, tables, "best"))
    return contexts


TRANSITIONS = {(True, True): "c→c", (True, False): "c→i", (False, True): "i→c", (False, False): "i→i"}


def debate_transitions(streams: pd.DataFrame) -> pd.DataFrame:
    """One row per debated (pair, question, agent): correct and raw confidences before (stream 0, the
    zero-shot answer) and after the debate (stream 1), and the transition (c→i: right, then wrong)."""
    keys = ["dataset", "pair", "question_id", "agent"]
    streams = streams.drop_duplicates([*keys, "stream"])  # a question's rows repeat in every run's split
    before = streams[streams["stream"] == 0].set_index(keys)
    after = streams[(streams["stream"] == 1) & streams["debated"].astype(bool)].set_index(keys)
    joined = before.merge(
        after, left_index=True, right_index=True, how="inner", suffixes=("_before", "_after")
    ).reset_index()
    joined["transition"] = [
        TRANSITIONS[(bool(b), bool(a))] for b, a in zip(joined["correct_before"], joined["correct_after"])
    ]
    return joined


def question_mean(rows: pd.DataFrame, column: str) -> Resampled:
    """The mean of `column` over rows (answers), resampled over questions: a question's answers
    (every pair, every agent) are drawn together, the mean re-taken over the drawn answers."""
    per_question = rows.groupby("question_id", sort=False)[column].agg(["sum", "count"])
    sums, counts = per_question["sum"].to_numpy(float), per_question["count"].to_numpy(float)
    return Resampled(lambda i: sums[i].sum(axis=1) / counts[i].sum(axis=1), len(per_question), vectorized=True)


SEQPROB_RISES = "sequence-probability confidence rises after debate, even on correct→incorrect flips"


def _shift_cases(v: tuple[str, str, pd.DataFrame, int]):
    """conf-10 (Fig. 2) on one (dataset, transition): the mean raw seqprob confidence after − before
    debate; self-report, which the paper finds moves less, is in the detail."""
    scope, transition, rows, debated = v
    if rows.empty:
        return [Untestable(f"no {transition} answer among {debated} debated", scope)]
    verbal = float((rows["conf_verbal_after"] - rows["conf_verbal_before"]).mean())
    detail = f"{len(rows)} answers" + (f"; self-report after − before: {verbal:+.4g}" if finite(verbal) else "")
    return [Case(scope, question_mean(rows, "seq_shift"), detail=_few_units(QUESTION_UNIT, detail))]


SHIFT_SPEC = ClaimSpec(
    "conf-10",
    SEQPROB_RISES,
    MEAN,
    _shift_cases,
    "mean seqprob confidence after − before debate",
    ">",
    unit=QUESTION_UNIT,
    source="Elahi & Di Eugenio §5.1, Figure 2 (right)",
)


def shift_contexts(streams: pd.DataFrame) -> list:
    """Per dataset and transition: its debated answers with their seqprob shift."""
    if streams.empty:
        return [
            Untestable("no streams (the confidence stage's streams.parquet)", claim="conf-10", statement=SEQPROB_RISES)
        ]
    joined = debate_transitions(streams)
    joined = joined.assign(seq_shift=joined["conf_seqprob_after"] - joined["conf_seqprob_before"])
    return [
        (f"{dataset}, {transition}", transition, part[part["transition"] == transition], len(part))
        for dataset, part in joined.groupby("dataset", sort=False)
        for transition in TRANSITIONS.values()
    ]


def paper_claims(
    outputs: RunOutputs, calibrator: str | None, cal_runs: pd.DataFrame, runs: pd.DataFrame
) -> list[Claim]:
    return [
        *evaluate_claims(CALIBRATION_SPECS, calibration_contexts(cal_runs)),
        *evaluate_claims(LIFT_SPECS, lift_contexts(runs, calibrator, outputs)),
        *evaluate_claims(METRIC_SPECS, metric_contexts(runs, calibrator)),
        *evaluate_claims([SHIFT_SPEC], shift_contexts(outputs.confidence_streams)),
    ]
