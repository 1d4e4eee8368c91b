"""Checkable claims: each claim of a paper testable on CPU, measured on this run with its
uncertainty; each names where the paper states it (`Claim.source`).

A claim is a statistic (a difference of accuracies, a correlation, a slope, ...) with a 95 % interval,
a two-sided p-value and an expected direction against a threshold (``expect`` "> 0", "< 0", ">= 0",
...), with a margin for "≥" / "≤" claims. The verdict reads the interval and the p-value of the test
the interval inverts, never the point value alone (`verdict`, docs/evaluation.md "Verdicts"):

- ``holds``: the whole interval is strictly on the claimed side of the boundary (the threshold; for
  "≥ t" with margin δ, t − δ; for "≤ t", t + δ) and the matching test rejects the boundary
  (p < 0.05): both are required, so an interval and a test that disagree by rounding give no verdict;
- ``fails``: the whole interval is strictly on the other side (and p < 0.05);
- ``inconclusive``: the interval covers the boundary (the run can't tell);
- ``n/a``: the run can't test the claim (its protocols or runs are not in the config); ``detail``
  says why. Such a claim is a row, never left out;
- ``n/a (too few)``: a bootstrapped statistic on fewer than `MIN_UNITS` units (questions, runs,
  steps): the value is shown, no interval.

`claims_frame` adds ``p_holm`` (Holm's step-down adjustment over the paper's claims that have a
p-value) and ``verdict_holm``: a holds / fails whose adjusted p is ≥ 0.05 reads
``inconclusive (Holm)``.

Every estimate comes from `debatelab.intervals` (one estimator per statistic family, each an
`Estimate` whose ``p_value(null)`` is the test its interval inverts: exact and score intervals for
correctness, the BCa bootstrap for the rest, clustered by question where rows are not independent).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..intervals import ALPHA, MIN_UNITS, Estimate

TOO_FEW = "n/a (too few)"
HOLM_INCONCLUSIVE = "inconclusive (Holm)"
VERDICTS = ("holds", "fails", "inconclusive", "n/a", TOO_FEW)
EXPECTATIONS = (">", ">=", "<", "<=")
CLAIM_COLUMNS = [
    "claim",
    "source",
    "statement",
    "scope",
    "statistic",
    "value",
    "low",
    "high",
    "expect",
    "margin",
    "verdict",
    "p",
    "p_holm",
    "verdict_holm",
    "n",
    "interval",
    "detail",
]


# --------------------------------------------------------------------------- claims


def boundary(expect: str, threshold: float = 0.0, margin: float = 0.0) -> float:
    """The value a claim's interval must clear: the threshold for "> t" / "< t"; for "≥ t" with
    margin δ, t − δ (at least t, within δ: non-inferiority); for "≤ t", t + δ."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    if not (margin >= 0):
        raise ValueError(f"margin must be ≥ 0, got {margin!r}")
    if margin and expect in (">", "<"):
        raise ValueError(f"a margin belongs to '>=' / '<=' claims, not {expect!r}")
    return threshold - margin if expect == ">=" else threshold + margin if expect == "<=" else threshold


def verdict(estimate: Estimate, expect: str, threshold: float = 0.0, margin: float = 0.0, alpha: float = ALPHA) -> str:
    """holds / fails / inconclusive / n/a / n/a (too few) (module doc). The interval must lie
    strictly on one side of the boundary (`boundary`) and, where the estimate has a test, its
    p-value at the boundary must be < alpha: a verdict never holds while the matching test doesn't
    reject. An exact estimate (no sampling) compares its value: ">=" holds at equality."""
    bound = boundary(expect, threshold, margin)
    estimate = estimate.at_boundary(bound)
    if estimate.too_few:
        return TOO_FEW
    if not estimate.finite:
        return "n/a"
    above = expect in (">", ">=")
    if estimate.exact_value:
        v = estimate.value - bound if above else bound - estimate.value
        return "holds" if (v > 0 if expect in (">", "<") else v >= 0) else "fails"
    low, high = estimate.low - bound, estimate.high - bound
    if not above:
        low, high = -high, -low
    p = estimate.p_value(bound)
    rejected = not math.isfinite(p) or p < alpha
    if low > 0 and rejected:
        return "holds"
    if high < 0 and rejected:
        return "fails"
    return "inconclusive"


@dataclass(frozen=True)
class Claim:
    claim: str  # the claim's short id within its paper, e.g. "udpo-2" (a range, "udpo-1..4", for a row of several)
    statement: str
    scope: str = ""  # dataset / protocol / run the row measures
    statistic: str = ""  # what `value` is
    value: float = math.nan
    low: float = math.nan  # the 95 % interval of value
    high: float = math.nan
    expect: str = ""  # what the claim says of value, e.g. "> 0"
    verdict: str = "n/a"  # holds / fails / inconclusive / n/a / n/a (too few)
    n: int = 0  # questions, trajectories or steps behind the value
    interval: str = ""  # how the interval was made
    detail: str = ""
    margin: float = math.nan  # for ">=" / "<=": how far past the threshold still counts (`boundary`)
    p: float = math.nan  # two-sided p-value of "value = the boundary" (the test the interval inverts)
    source: str = ""  # where the paper states it: its section, table, figure or equation, e.g. "UDPO §3.2, Figure 3"

    @classmethod
    def measured(
        cls,
        claim: str,
        statement: str,
        scope: str,
        statistic: str,
        estimate: Estimate,
        expect: str = ">",
        threshold: float = 0.0,
        detail: str = "",
        margin: float = 0.0,
        source: str = "",
    ) -> Claim:
        """A claim that `statistic` `expect`s `threshold` (within `margin` for ">=" / "<="), decided
        by `estimate`'s interval and test at the boundary (`Estimate.at_boundary`: the row shows
        the interval that decided it)."""
        estimate = estimate.at_boundary(boundary(expect, threshold, margin))
        decided = verdict(estimate, expect, threshold, margin)
        if decided == "n/a" and not detail:
            detail = f"the statistic or its interval is undefined on these {estimate.n} units"
        if decided == TOO_FEW and "needs at least" not in detail:
            few = f"{estimate.n} units: an interval needs at least {MIN_UNITS}"
            detail = f"{few}; {detail}" if detail else few
        return cls(
            claim,
            statement,
            scope,
            statistic,
            estimate.value,
            estimate.low,
            estimate.high,
            f"{expect} {threshold:g}",
            decided,
            estimate.n,
            estimate.method,
            detail,
            float(margin) if expect in (">=", "<=") else math.nan,
            estimate.p_value(boundary(expect, threshold, margin)),
            source,
        )

    @classmethod
    def untestable(cls, claim: str, statement: str, reason: str, scope: str = "", source: str = "") -> Claim:
        return cls(claim, statement, scope=scope, detail=reason, source=source)

    @property
    def holds(self) -> bool | None:
        """True / False when the interval decides the claim, None when inconclusive or untestable."""
        return {"holds": True, "fails": False}.get(self.verdict)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (NaN stays NaN and is not counted): the i-th smallest of
    m p-values times (m − i + 1), made non-decreasing, capped at 1."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    where = np.flatnonzero(np.isfinite(p))
    order = where[np.argsort(p[where], kind="stable")]
    m = len(order)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out[order] = adjusted
    return out


def holm_verdict(verdict_: str, p_holm: float, alpha: float = ALPHA) -> str:
    """A holds / fails whose Holm-adjusted p is ≥ alpha does not survive the paper's multiplicity."""
    if verdict_ in ("holds", "fails") and math.isfinite(p_holm) and p_holm >= alpha:
        return HOLM_INCONCLUSIVE
    return verdict_


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    """One row per claim (CLAIM_COLUMNS); p_holm and verdict_holm over these claims (one paper's):
    the family is every claim with a p-value (exact and untestable ones have none)."""
    rows = [{c: getattr(claim, c, None) for c in CLAIM_COLUMNS} for claim in claims]
    frame = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    frame["p"] = frame["p"].astype(float)
    frame["margin"] = frame["margin"].astype(float)
    frame["p_holm"] = holm(frame["p"].to_numpy(float)) if len(frame) else np.zeros(0)
    frame["verdict_holm"] = [holm_verdict(v, p) for v, p in zip(frame["verdict"], frame["p_holm"])]
    return frame


def verdict_counts(frame: pd.DataFrame) -> str:
    """'3 hold, 1 fails, 5 inconclusive, 2 n/a' for a claims frame."""
    counts = frame["verdict"].value_counts()
    text = (
        f"{counts.get('holds', 0)} hold, {counts.get('fails', 0)} fail, "
        f"{counts.get('inconclusive', 0)} inconclusive (the interval covers the threshold), "
        f"{counts.get('n/a', 0)} can't be tested in this run (detail says why), "
        f"{counts.get(TOO_FEW, 0)} on too few units for an interval"
    )
    if "verdict_holm" in frame:
        lost = int((frame["verdict_holm"] == HOLM_INCONCLUSIVE).sum())
        text += f"; {lost} of the holds / fails don't survive Holm's adjustment over the paper's claims"
    return text


def finite(value: float) -> bool:
    return value is not None and bool(np.isfinite(value))
