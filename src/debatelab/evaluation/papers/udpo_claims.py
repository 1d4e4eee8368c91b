"""UDPO's claims (Tang et al., arXiv:2602.07186: udpo-1 to udpo-11, each with the section, table or
figure that states it) as `claim_engine.ClaimSpec` rows, and the functions that extract each case's
per-question data from the trajectories `udpo.trajectories` builds (the tables are `udpo`'s).

Claims carry a 95 % interval over questions, the unit of sampling (see below): a
BCa bootstrap that moves every trajectory of a question together, paired where two protocols answered
the same questions, and for an accuracy difference with one trajectory per question on both sides
the exact interval conditional on the discordant questions (McNemar, `intervals.paired_accuracy_difference`);
monotone-in-m / T claims compare the two ends; udpo-9 is an OLS slope over steps (bootstrap over steps).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ... import metrics
from ...intervals import Estimate
from ..claim_engine import (
    COHENS_D,
    CORRELATION,
    DIFFERENCE,
    PAIRED_ACCURACY,
    SLOPE,
    Case,
    ClaimSpec,
    Resampled,
    Rows,
    Shares,
    Untestable,
    evaluate_claims,
)
from ..claims import Claim, finite
from ..run import RunOutputs
from .udpo import MEASURES, PAPER_ORDER, heterogeneous, natural, standard_mad, table1

# --------------------------------------------------------------------------- claims
#
# Every claim's unit of sampling is the question (run dataset, question id): a (BCa) bootstrap
# resamples questions, and all the trajectories of a resampled question (its threads, and each
# protocol's debate of it) move together, so two protocols on the same questions are compared
# paired. The Cohen's d and correlation claims resample trajectories when each question has one
# (intervals.cohens_d, intervals.correlation), and questions when there are several (the rows are then
# not independent).


def _named_clustered(estimate: Estimate) -> str:
    return estimate.method.replace(
        "bootstrap over questions, each one's rows drawn together (",
        "cluster bootstrap over questions (a question's trajectories together; ",
        1,
    )


def _question_codes(frame: pd.DataFrame) -> tuple[np.ndarray, int]:
    """Each row's question as an int code 0..n−1, and n."""
    codes = frame.groupby(["run_dataset", "question_id"], sort=False).ngroup().to_numpy()
    return codes, int(codes.max()) + 1 if len(codes) else 0


def _clustered(statistic_of_weights, codes: np.ndarray, n_units: int) -> Resampled:
    """Resampled questions where the statistic is computed on rows: a resample weighs each row by
    how often its question was drawn (the same as repeating the rows, without copying them)."""

    def statistic(index: np.ndarray) -> float:
        return statistic_of_weights(np.bincount(index, minlength=n_units)[codes].astype(float))

    return Resampled(statistic, n_units)


def _finite_rows(rows: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    return rows[np.isfinite(rows[columns].to_numpy(float)).all(axis=1)]


def _case(scope: str, data, clustered: bool = False, **fields) -> Case:
    detail = fields.pop("detail", "")
    return Case(scope, data, fields, detail, _named_clustered if clustered else None)


def _failure_gap(rows: pd.DataFrame, measure: str) -> tuple:
    """Cohen's d of `measure`, failures over successes: rows resampled where each question has one
    trajectory, else questions; and whether clustered."""
    rows = _finite_rows(rows, [measure])
    codes, n_units = _question_codes(rows)
    clustered = n_units != len(rows)
    data = Rows(rows[measure].to_numpy(float), ~rows["correct"].to_numpy(bool), codes if clustered else None)
    return data, clustered


def _correlation(rows: pd.DataFrame, a: str, b: str) -> tuple:
    """Pearson r of columns a and b (point-biserial where one is correctness), and whether clustered."""
    rows = _finite_rows(rows, [a, b])
    codes, n_units = _question_codes(rows)
    clustered = n_units != len(rows)
    return Rows(rows[a].to_numpy(float), rows[b].to_numpy(float), codes if clustered else None), clustered


def _selective_gain(rows: pd.DataFrame, fraction: float = 0.5) -> Resampled:
    """acc(the least uncertain `fraction` by U_sys) − acc(all), points (metrics.selective_prediction:
    ranked by U_sys ascending, ties in row order, the lowest ceil(fraction · n) kept)."""
    order = metrics.ranked_order(-rows["u_sys"].to_numpy(float), seed=None)
    correct = rows["correct"].to_numpy(float)[order]
    codes, n_units = _question_codes(rows)
    return _clustered(lambda w: _weighted_selective_gain(correct, w, fraction), codes[order], n_units)


def _weighted_selective_gain(ranked_correct: np.ndarray, w: np.ndarray, fraction: float) -> float:
    """100 · (acc of the first ceil(fraction · Σw) places − acc of all) for rows already ranked,
    each filling w consecutive places (the rows repeated as a resample draws them)."""
    total = w.sum()
    kept = max(1, math.ceil(fraction * total - 1e-9))
    take = np.clip(kept - (np.cumsum(w) - w), 0, w)  # the last row kept may be split
    return float(100 * ((take @ ranked_correct) / kept - (w @ ranked_correct) / total))


def _ratio_difference(
    scope: str, rows_a: pd.DataFrame, rows_b: pd.DataFrame, numerator: str, denominator: str | None = None, scale=1.0
) -> Case:
    """scale · (Σ num / Σ den of rows_a − the same of rows_b), where den counts the rows with a
    numerator unless `denominator` names a column: a cell mean of the tables (accuracy, mean U) or
    the collapse rate. Resampled over the union of both sides' questions: paired when both sides
    answered every question, as a resample then draws the same questions for both (an accuracy
    with one trajectory per question on both sides is paired correctness: exact, McNemar)."""
    both = pd.concat([rows_a.assign(_side=0), rows_b.assign(_side=1)], ignore_index=True)
    codes, n_units = _question_codes(both)
    side = both["_side"].to_numpy()
    num = both[numerator].to_numpy(float)
    den = np.isfinite(num).astype(float) if denominator is None else np.nan_to_num(both[denominator].to_numpy(float))
    sums = [
        (
            np.bincount(codes[side == s], np.nan_to_num(num)[side == s], n_units),
            np.bincount(codes[side == s], den[side == s], n_units),
        )
        for s in (0, 1)
    ]
    rows = [np.bincount(codes[side == s], minlength=n_units) for s in (0, 1)]
    shared = int(np.sum((rows[0] > 0) & (rows[1] > 0)))

    def describe(estimate: Estimate) -> str:
        if estimate.method.startswith("exact"):
            return estimate.method
        if shared == n_units:
            return estimate.method.replace("bootstrap", "paired bootstrap", 1)
        return estimate.method.replace("questions", f"the union of both sides' questions ({shared} shared)", 1)

    data = Shares(sums[0][0], sums[0][1], sums[1][0], sums[1][1], paired=False, scale=scale)
    return Case(scope, data, describe=describe)


def _rows_of(frame: pd.DataFrame, protocols, run_dataset: str) -> pd.DataFrame:
    return frame[frame["protocol"].isin(list(protocols)) & (frame["run_dataset"] == run_dataset)]


# --------------------------------------------------------------------------- the claims as rows

MAD_SCOPE = "standard MAD, all datasets"


def _pooled(mad: pd.DataFrame) -> str:
    return f"{len(mad)} trajectories of {_question_codes(mad)[1]} questions"


MEASURE_SPECS = [  # udpo-1 to udpo-4, on standard MAD (context: its trajectories)
    ClaimSpec(
        "udpo-1",
        "failures have higher {measure} than successes",
        COHENS_D,
        lambda mad: [_case(MAD_SCOPE, *_failure_gap(mad, m), measure=m, detail=_pooled(mad)) for m in MEASURES],
        "Cohen's d",
        source="UDPO §3.2, Figure 2; App. B.1, Figure 6",
    ),
    ClaimSpec(
        "udpo-2",
        "{measure} correlates negatively with correctness",
        CORRELATION,
        lambda mad: [
            _case(MAD_SCOPE, *_correlation(mad, m, "correct"), measure=m, detail=_pooled(mad)) for m in MEASURES
        ],
        "Pearson r",
        "<",
        source="UDPO §3.2, Figure 3; App. B.2, Figure 7",
    ),
    ClaimSpec(
        "udpo-3",
        "{a} and {b} correlate positively",
        CORRELATION,
        lambda mad: [
            _case(MAD_SCOPE, *_correlation(mad, a, b), a=a, b=b, detail=_pooled(mad))
            for a, b in itertools.combinations(MEASURES, 2)
        ],
        "Pearson r",
        source="UDPO §3.2, Figure 3; App. B.2, Figure 7",
    ),
    ClaimSpec(
        "udpo-4",
        "the least uncertain half (U_sys) is at least as accurate as all",
        DIFFERENCE,
        lambda mad: [_case(MAD_SCOPE, _selective_gain(mad), True, detail=_pooled(mad))],
        "acc(lowest 50% U_sys) − acc(all), points",
        ">=",
        margin_reason="[CHOICE] margin 0: the paper's selective-prediction figure ('The Value of Variance ...', "
        "Fig. 4, Fig. 8: 'uncertainty-guided abstention consistently improves accuracy'), a gain, not "
        "'no worse within δ'",
        source="UDPO §3.2, Figure 4; App. B.3, Figure 8",
    ),
]
MEASURES_SOURCE = "UDPO §3.2, Figures 2-4"


@dataclass(frozen=True)
class Ends:
    """Two protocols' trajectories on one dataset (the ends of m, T or Table 1's order)."""

    scope: str
    low: pd.DataFrame  # the rows at the smaller m / T, or the worse method
    high: pd.DataFrame
    fields: dict
    detail: str = ""


def _ends(column: str, denominator: str | None = None, scale: float = 1.0, kind: str = ""):
    def cases(ends):
        if not isinstance(ends, Ends) or ends.fields.get("kind", "") != kind:
            return []
        case = _ratio_difference(ends.scope, ends.high, ends.low, column, denominator, scale)
        return [Case(case.scope, case.data, ends.fields, ends.detail, case.describe)]

    return cases


def _under_attack(g: tuple[str, pd.DataFrame]):
    if isinstance(g, Ends):
        return []
    dataset, rows = g
    return [_case(dataset, *_correlation(rows, "u_sys", "correct"), detail=_pooled(rows))]


ATTACK = "UDPO §5.4, Table 3"
ATTACK_SPECS = [  # udpo-5, udpo-6: the ends of m at each N (paired: the same questions under m = min and m = max)
    ClaimSpec(
        "udpo-5",
        "accuracy falls as m grows (m = {ms})",
        PAIRED_ACCURACY,
        _ends("correct", scale=100, kind="m"),
        "acc(m={high}) − acc(m={low}), points",
        "<",
        source=ATTACK,
    ),
    ClaimSpec(
        "udpo-6",
        "U_sys rises as m grows (m = {ms})",
        DIFFERENCE,
        _ends("u_sys", kind="m"),
        "U_sys(m={high}) − U_sys(m={low})",
        source=ATTACK,
    ),
    ClaimSpec(
        "udpo-7",
        "U_sys correlates negatively with correctness under attack",
        CORRELATION,
        _under_attack,
        "Pearson r",
        "<",
        source="UDPO App. C.3.3, Figure 10, Table 6",
    ),
    ClaimSpec(  # udpo-8: more rounds, less uncertainty (standard MAD, same seats; paired over the questions)
        "udpo-8",
        "standard MAD: U_sys falls as T grows (T = {ts})",
        DIFFERENCE,
        _ends("u_sys", kind="T"),
        "U_sys(T={high}) − U_sys(T={low})",
        "<",
        source="UDPO App. C.2, Table 5",
    ),
]


def attack_contexts(frame: pd.DataFrame, t3: pd.DataFrame, mad: pd.DataFrame, outputs: RunOutputs) -> list:
    contexts = []
    attacked = t3[t3["method"] == "MAD"] if not t3.empty else t3
    groups = [
        (key, g.sort_values("m", kind="stable"))
        for key, g in attacked.groupby(["run_dataset", "n_agents"])
        if g["m"].nunique() >= 2
    ]
    if not groups:
        reason = "needs untrained protocols with 0 and ≥ 1 adversarial seats at one N"
        contexts.append(
            Untestable(
                reason, claim="udpo-5..6", statement="compromised agents lower accuracy and raise U", source=ATTACK
            )
        )
    for (dataset, n_agents), g in groups:
        low, high = g.iloc[0], g.iloc[-1]
        by_m = "; ".join(f"m={int(r.m)}: acc {r.accuracy:.1f}, U_sys {r.u_sys:.3f}" for r in g.itertuples())
        fields = {
            "kind": "m",
            "ms": ", ".join(str(int(m)) for m in g["m"]),
            "low": int(low["m"]),
            "high": int(high["m"]),
        }
        ends = _rows_of(frame, [low["protocol"]], dataset), _rows_of(frame, [high["protocol"]], dataset)
        contexts.append(Ends(f"{dataset}, N={n_agents}", *ends, fields, by_m))
    contexts += list(frame[frame["m"] > 0].groupby("run_dataset", sort=False))
    tested = False
    for (dataset, _), g in _with_seats(mad, outputs).groupby(["run_dataset", "seats"]):
        rounds = sorted(g["rounds"].unique())
        if len(rounds) < 2:
            continue
        tested = True
        by_t = "; ".join(f"T={t}: U_sys {u:.3f}" for t, u in g.groupby("rounds")["u_sys"].mean().items())
        fields = {"kind": "T", "ts": ", ".join(map(str, rounds)), "low": rounds[0], "high": rounds[-1]}
        contexts.append(Ends(dataset, g[g["rounds"] == rounds[0]], g[g["rounds"] == rounds[-1]], fields, by_t))
    if not tested:
        reason = "needs two untrained protocols with the same seats and different rounds"
        contexts.append(Untestable(reason, claim="udpo-8", statement="standard MAD: U_sys falls as T grows"))
    return contexts


def _training_slope(context: tuple[str, pd.DataFrame | None]):
    run, steps = context
    if steps is None or len(steps) < 3 or "r_sys" not in steps:
        return [Untestable("needs r_sys at 3 or more logged steps (a slope's interval)", run)]
    return [Case(run, Rows(steps["step"].to_numpy(float), 1 - steps["r_sys"].to_numpy(float)))]


TRAINING_SPEC = ClaimSpec(  # udpo-9: training-set U's trend down during UDPO (rewards r = 1 − U trend up)
    "udpo-9",
    "UDPO training lowers the training-set U_sys",
    SLOPE,
    _training_slope,
    "slope of U_sys = 1 − r_sys per step",
    "<",
    unit="steps",
    source="UDPO §4.2-4.3, Eqs. 3-4 (training maximises r_sys = 1 − U_sys); §5.2, Table 1",
)


GPU_SPECS = [  # UDPO > RMAAC > MAPPO > MAD at the same N, and UDPO against MAD; UDPO collapses less
    ClaimSpec(
        "udpo-10",
        "{better} is more accurate than {worse} (not expected on CPU)",
        PAIRED_ACCURACY,
        _ends("correct", scale=100, kind="order"),
        "acc({better}) − acc({worse}), points",
        source="UDPO §5.2, Table 1",
    ),
    ClaimSpec(  # "UDPO effectively reduces debate collapse", as the collapse rate of the module docstring
        "udpo-11",
        "UDPO collapses less often than MAD (not expected on CPU)",
        DIFFERENCE,
        _ends("collapsed", "had_correct", 100, kind="collapse"),
        "collapse(UDPO) − collapse(MAD), points",
        "<",
        source="UDPO §1 (contribution 3)",
    ),
]


def gpu_contexts(frame: pd.DataFrame, outputs: RunOutputs) -> list:
    """Each step of Table 1's order between the methods the run has (per dataset and N), UDPO
    against MAD, and UDPO's collapse rate against MAD's; per question, paired on shared questions."""
    contexts = []
    table1_rows = natural(heterogeneous(frame))
    t1 = table1(heterogeneous(frame), outputs.protocols)
    for (dataset, n_agents), g in t1.groupby(["run_dataset", "n_agents"]):
        by = g.set_index("method")
        present = [m for m in PAPER_ORDER if m in by.index]
        pairs = list(zip(present, present[1:]))
        if "UDPO" in present and "MAD" in present and ("UDPO", "MAD") not in pairs:
            pairs.append(("UDPO", "MAD"))
        rows = {m: _rows_of(table1_rows, [by.loc[m, "protocol"]], dataset) for m in present}
        scope = f"{dataset}, N={n_agents}"
        contexts += [Ends(scope, rows[w], rows[b], {"kind": "order", "better": b, "worse": w}) for b, w in pairs]
        if {"UDPO", "MAD"} <= set(present) and finite(by.loc["UDPO", "collapse"]) and finite(by.loc["MAD", "collapse"]):
            contexts.append(Ends(scope, rows["MAD"], rows["UDPO"], {"kind": "collapse"}))
    return contexts


def paper_claims(frame: pd.DataFrame, t3: pd.DataFrame, outputs: RunOutputs) -> list[Claim]:
    mad = standard_mad(frame)
    measures = (
        [
            Untestable(
                "no untrained, unattacked all-to-all protocol",
                claim="udpo-1..4",
                statement="the U's flag failures",
                source=MEASURES_SOURCE,
            )
        ]
        if mad.empty
        else [mad]
    )
    udpo_runs = [r for r, info in outputs.runs.items() if info.method == "udpo"]
    training = [(run, outputs.training.get(run)) for run in udpo_runs] or [
        Untestable("no udpo training run", claim="udpo-9", statement="UDPO training lowers the training-set U's")
    ]
    return [
        *evaluate_claims(MEASURE_SPECS, measures),
        *evaluate_claims(ATTACK_SPECS, attack_contexts(frame, t3, mad, outputs)),
        *evaluate_claims([TRAINING_SPEC], training),
        *evaluate_claims(GPU_SPECS, gpu_contexts(frame, outputs)),
    ]


def _with_seats(frame: pd.DataFrame, outputs: RunOutputs) -> pd.DataFrame:
    return frame.assign(seats=frame["protocol"].map(lambda p: ",".join(outputs.protocols[p].participants)))
