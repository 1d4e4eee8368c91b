"""Checkable claims: each claim a spec lists as testable on CPU, measured on this run with its
uncertainty.

A claim is a statistic (a difference of accuracies, a correlation, a slope, ...) with a 95 %
interval and an expected direction against a threshold (``expect`` "> 0", "< 0", ">= 0", ...).
The verdict reads the interval, never the point value alone:

- ``holds``: the whole interval is on the claimed side of the threshold;
- ``fails``: the whole interval is on the other side;
- ``inconclusive``: the interval covers the threshold (the run can't tell);
- ``n/a``: the run can't test the claim (its protocols or runs are not in the config, too few
  questions); ``detail`` says why. Such a claim is a row, never left out.

Intervals come from the test that fits the statistic (`Estimate` constructors below): a bootstrap
over questions for means and differences of per-question quantities (paired when two methods answer
the same questions), Fisher's z for a correlation, the large-sample normal interval of Cohen's d,
the t interval of an OLS slope, and no interval at all for quantities that are computed, not
sampled (an identity that must hold on every row: ``Estimate.exact``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
VERDICTS = ("holds", "fails", "inconclusive", "n/a")
EXPECTATIONS = (">", ">=", "<", "<=")
CLAIM_COLUMNS = [
    "claim",
    "statement",
    "scope",
    "statistic",
    "value",
    "low",
    "high",
    "expect",
    "verdict",
    "n",
    "interval",
    "detail",
]


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class Estimate:
    """A statistic measured on `n` units (questions, trajectories, steps) with its 95 % interval."""

    value: float
    low: float
    high: float
    n: int
    method: str  # how the interval was made, e.g. "paired bootstrap over questions"

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.value, self.low, self.high))

    @classmethod
    def missing(cls, n: int = 0, method: str = "") -> Estimate:
        return cls(math.nan, math.nan, math.nan, int(n), method)

    @classmethod
    def exact(cls, value: float, n: int) -> Estimate:
        """A computed quantity with no sampling error (e.g. the largest violation of an identity over
        all rows): the interval is the value itself."""
        value = float(value)
        return cls(value, value, value, int(n), "exact (computed on every row, no sampling)")

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (e.g. a share as points: factor 100)."""
        lo, hi = sorted((self.low * factor, self.high * factor))
        return Estimate(self.value * factor, lo, hi, self.n, self.method)


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates, the undefined (NaN) ones dropped; NaN if none is left."""
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return math.nan, math.nan
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap(
    statistic: Callable[[np.ndarray], float],
    n_units: int,
    *,
    unit: str = "questions",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> Estimate:
    """Percentile bootstrap over units: `statistic(index)` computes the statistic on the units at
    `index` (an int array, with repeats); the point value is `statistic(arange(n_units))`.

    Units are what was sampled (questions, or debates); everything measured on one unit (all its
    agents, rounds, protocols) moves together, which makes a comparison on shared questions paired.
    Replicates where the statistic is undefined (NaN: e.g. a resample with no failures) are dropped.
    The seed is fixed so a claims file is repeatable.
    """
    n_units = int(n_units)
    method = f"bootstrap over {unit} ({resamples} resamples, percentile)"
    if n_units < 2:
        return Estimate.missing(n_units, method)
    value = float(statistic(np.arange(n_units)))
    rng = np.random.default_rng(seed)
    replicates = np.array([statistic(rng.integers(0, n_units, n_units)) for _ in range(resamples)], dtype=float)
    low, high = percentile_interval(replicates, confidence)
    return Estimate(value, low, high, n_units, method)


def mean_estimate(values: Sequence[float], *, unit: str = "questions", seed: int = 0) -> Estimate:
    """The mean of one value per unit, bootstrapped over units."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    return bootstrap(lambda i: float(np.mean(x[i])), len(x), unit=unit, seed=seed)


def paired_difference(a: Sequence[float], b: Sequence[float], *, unit: str = "questions", seed: int = 0) -> Estimate:
    """mean(a) − mean(b) where a[i] and b[i] are measured on the same unit (e.g. correctness of two
    methods on question i), bootstrapped over units: a paired comparison."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_difference: a and b differ in length ({a.size} vs {b.size})")
    keep = np.isfinite(a) & np.isfinite(b)
    d = a[keep] - b[keep]
    est = bootstrap(lambda i: float(np.mean(d[i])), len(d), unit=unit, seed=seed)
    return Estimate(est.value, est.low, est.high, est.n, est.method.replace("bootstrap", "paired bootstrap", 1))


def independent_difference(
    a: Sequence[float], b: Sequence[float], *, unit: str = "questions", seed: int = 0
) -> Estimate:
    """mean(a) − mean(b) for two independent samples (different questions), each resampled on its own."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    method = f"bootstrap over {unit}, each sample on its own ({BOOTSTRAP_RESAMPLES} resamples, percentile)"
    if len(a) < 2 or len(b) < 2:
        return Estimate.missing(len(a) + len(b), method)
    rng = np.random.default_rng(seed)
    reps = np.array(
        [
            a[rng.integers(0, len(a), len(a))].mean() - b[rng.integers(0, len(b), len(b))].mean()
            for _ in range(BOOTSTRAP_RESAMPLES)
        ]
    )
    low, high = percentile_interval(reps, CONFIDENCE)
    return Estimate(float(a.mean() - b.mean()), low, high, len(a) + len(b), method)


def correlation(x: Sequence[float], y: Sequence[float]) -> Estimate:
    """Pearson r (point-biserial when one variable is 0/1) with Fisher's z interval:
    tanh(atanh(r) ± z_.975 / sqrt(n − 3)). Undefined for n < 4 or a constant variable."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = len(x)
    method = "Fisher z interval"
    if n < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Estimate.missing(n, method)
    r = float(np.clip(np.corrcoef(x, y)[0, 1], -1.0, 1.0))
    if abs(r) == 1.0:
        return Estimate(r, r, r, n, method)
    z, half = math.atanh(r), stats.norm.ppf(0.5 + CONFIDENCE / 2) / math.sqrt(n - 3)
    return Estimate(r, math.tanh(z - half), math.tanh(z + half), n, method)


def cohens_d(group_1: Sequence[float], group_0: Sequence[float]) -> Estimate:
    """Cohen's d of group_1 over group_0 (pooled SD) with the large-sample normal interval
    d ± z_.975 · sqrt((n1 + n0)/(n1·n0) + d² / (2(n1 + n0))) (Hedges & Olkin 1985)."""
    from debatelab import metrics

    a, b = np.asarray(group_1, dtype=float), np.asarray(group_0, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    n1, n0 = len(a), len(b)
    method = "normal interval of Cohen's d (Hedges & Olkin)"
    d = metrics.cohens_d(a, b) if n1 and n0 else math.nan
    if not math.isfinite(d):
        return Estimate.missing(n1 + n0, method)
    se = math.sqrt((n1 + n0) / (n1 * n0) + d * d / (2 * (n1 + n0)))
    half = stats.norm.ppf(0.5 + CONFIDENCE / 2) * se
    return Estimate(float(d), d - half, d + half, n1 + n0, method)


def slope(x: Sequence[float], y: Sequence[float], *, unit: str = "steps") -> Estimate:
    """The OLS slope of y on x with its t interval (n − 2 degrees of freedom)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    n = len(x)
    method = f"t interval of the OLS slope over {unit}"
    if n < 3 or np.ptp(x) == 0:
        return Estimate.missing(n, method)
    fit = stats.linregress(x, y)
    half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 2) * fit.stderr
    return Estimate(float(fit.slope), float(fit.slope - half), float(fit.slope + half), n, method)


def proportion(successes: int, n: int) -> Estimate:
    """A share k/n with its exact (Clopper-Pearson) interval."""
    method = "exact binomial (Clopper-Pearson) interval"
    if n <= 0:
        return Estimate.missing(0, method)
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(CONFIDENCE, method="exact")
    return Estimate(successes / n, float(ci.low), float(ci.high), int(n), method)


def mcnemar_p(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired correctness: a binomial test on the discordant
    pairs (a right, b wrong vs a wrong, b right)."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


def accuracy_difference(correct_a: Sequence[bool], correct_b: Sequence[bool], *, seed: int = 0) -> Estimate:
    """Accuracy of a minus accuracy of b on the same questions, in points, with a paired bootstrap
    interval; the exact McNemar p-value is in `method`."""
    est = paired_difference(np.asarray(correct_a, float), np.asarray(correct_b, float), seed=seed).scaled(100)
    p = mcnemar_p(correct_a, correct_b)
    return Estimate(est.value, est.low, est.high, est.n, f"{est.method}; McNemar exact p = {p:.3g}")


# --------------------------------------------------------------------------- claims


def verdict(estimate: Estimate, expect: str, threshold: float = 0.0) -> str:
    """holds / fails / inconclusive from where the interval lies against the threshold (module doc)."""
    if expect not in EXPECTATIONS:
        raise ValueError(f"expect must be one of {EXPECTATIONS}, got {expect!r}")
    if not estimate.finite:
        return "n/a"
    low, high = estimate.low - threshold, estimate.high - threshold
    if expect in ("<", "<="):  # mirror: a claim that the statistic is below the threshold
        low, high, expect = -high, -low, expect.replace("<", ">")
    if (low > 0) if expect == ">" else (low >= 0):
        return "holds"
    if (high <= 0) if expect == ">" else (high < 0):
        return "fails"
    return "inconclusive"


@dataclass(frozen=True)
class Claim:
    claim: str  # the spec's number, e.g. "§11.1"
    statement: str
    scope: str = ""  # dataset / protocol / run the row measures
    statistic: str = ""  # what `value` is
    value: float = math.nan
    low: float = math.nan  # the 95 % interval of value
    high: float = math.nan
    expect: str = ""  # what the claim says of value, e.g. "> 0"
    verdict: str = "n/a"  # holds / fails / inconclusive / n/a
    n: int = 0  # questions, trajectories or steps behind the value
    interval: str = ""  # how the interval was made
    detail: str = ""

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
    ) -> Claim:
        """A claim that `statistic` `expect`s `threshold`, decided by `estimate`'s interval."""
        decided = verdict(estimate, expect, threshold)
        if decided == "n/a" and not detail:
            detail = f"the statistic or its interval is undefined on these {estimate.n} units"
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
        )

    @classmethod
    def untestable(cls, claim: str, statement: str, reason: str, scope: str = "") -> Claim:
        return cls(claim, statement, scope=scope, detail=reason)

    @property
    def holds(self) -> bool | None:
        """True / False when the interval decides the claim, None when inconclusive or untestable."""
        return {"holds": True, "fails": False}.get(self.verdict)


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    return pd.DataFrame([{c: getattr(claim, c) for c in CLAIM_COLUMNS} for claim in claims], columns=CLAIM_COLUMNS)


def verdict_counts(frame: pd.DataFrame) -> str:
    """'3 hold, 1 fails, 5 inconclusive, 2 n/a' for a claims frame."""
    counts = frame["verdict"].value_counts()
    return (
        f"{counts.get('holds', 0)} hold, {counts.get('fails', 0)} fail, "
        f"{counts.get('inconclusive', 0)} inconclusive (the interval covers the threshold), "
        f"{counts.get('n/a', 0)} can't be tested in this run (detail says why)"
    )


def finite(value: float) -> bool:
    return value is not None and bool(np.isfinite(value))
