"""Estimates with their 95 % interval and the two-sided test each interval inverts: what every
number of a run that the tool reports as measured carries (docs/evaluation.md "Verdicts").

One estimator per statistic family, each returning an `Estimate` whose ``p_value(null)`` is the
test its interval inverts:

- paired correctness (accuracy of a and b on the same questions, one 0/1 outcome each):
  `paired_accuracy_difference`, the exact interval conditional on the discordant questions, which
  agrees with the exact McNemar test; a boundary other than 0 (a margin, a threshold) is judged by
  Tango's score interval and test instead (`Estimate.at_boundary`): the conditional interval holds
  the share of discordant questions fixed, which only the null of 0 allows;
- a single proportion: `proportion`, Clopper-Pearson (the exact binomial test);
- means, paired differences of non-binary per-unit quantities, correlations, Cohen's d, slopes and
  any statistic of resampled units (`bootstrap`): the BCa bootstrap (`scipy.stats.bootstrap`),
  clustered where rows are not independent (a question's rows are drawn together), percentile where
  BCa is undefined (the method string says so);
- `Estimate.exact`: quantities computed on every row, with no sampling error (an identity's largest
  violation): no interval, no p.

Claims and their verdicts are built on these in `evaluation.claims`; the stages use them for their
own tables (the uncertainty stage's failure diagnostics).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE  # the level every p-value is read at (two-sided, as the 95 % interval)
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_BATCH = 250  # resamples (and jackknife replicates) computed at once: bounds the memory
MIN_UNITS = 10  # fewer bootstrap units than this: no interval, verdict "n/a (too few)" (docs/evaluation.md)
# Replicates are rounded to this many significant digits of the statistic's scale: the same fraction
# summed in another order differs in its last bits, and BCa's bias correction and the p-value count ties.
TIE_DIGITS = 12


# --------------------------------------------------------------------------- estimates


@dataclass(frozen=True)
class Estimate:
    """A statistic measured on `n` units (questions, trajectories, steps) with its 95 % interval and,
    through `test`, the two-sided p-value of "statistic = null" by the test the interval inverts."""

    value: float
    low: float
    high: float
    n: int
    method: str  # how the interval was made, e.g. "exact conditional (McNemar) interval"
    test: Callable[[float], float] | None = field(default=None, compare=False, repr=False)
    too_few: bool = False  # fewer than MIN_UNITS units: no interval (verdict "n/a (too few)")
    exact_value: bool = False  # computed on every row, no sampling (Estimate.exact)
    # the estimate (interval and test) that judges a boundary other than 0, where this one's test is
    # exact at 0 only (`paired_counts_difference`); None: this one judges every boundary
    off_zero: Callable[[float], Estimate] | None = field(default=None, compare=False, repr=False)

    @property
    def finite(self) -> bool:
        return all(math.isfinite(v) for v in (self.value, self.low, self.high))

    def p_value(self, null: float = 0.0) -> float:
        """Two-sided p-value of "the statistic equals `null`"; NaN without a test."""
        if self.test is None or not self.finite:
            return math.nan
        return float(min(1.0, max(0.0, self.test(float(null)))))

    @property
    def p(self) -> float:
        return self.p_value(0.0)

    @classmethod
    def missing(cls, n: int = 0, method: str = "") -> Estimate:
        return cls(math.nan, math.nan, math.nan, int(n), method)

    @classmethod
    def few(cls, value: float, n: int, method: str) -> Estimate:
        """Fewer than MIN_UNITS units: the value without an interval."""
        return cls(float(value), math.nan, math.nan, int(n), f"{method}; fewer than {MIN_UNITS} units", too_few=True)

    @classmethod
    def exact(cls, value: float, n: int) -> Estimate:
        """A computed quantity with no sampling error (e.g. the largest violation of an identity over
        all rows): the interval is the value itself, and there is no p-value."""
        value = float(value)
        return cls(value, value, value, int(n), "exact (computed on every row, no sampling)", exact_value=True)

    def at_boundary(self, bound: float) -> Estimate:
        """The estimate whose interval and test judge a claim at `bound`: itself, or at a boundary
        other than 0 its `off_zero` estimate."""
        if self.off_zero is None or bound == 0:
            return self
        return self.off_zero(float(bound))

    def scaled(self, factor: float) -> Estimate:
        """The same estimate in other units (e.g. a share as points: factor 100)."""
        lo, hi = sorted((self.low * factor, self.high * factor))
        test = None if self.test is None else (lambda null, t=self.test: t(null / factor))
        off_zero = None if self.off_zero is None else (lambda bound, o=self.off_zero: o(bound / factor).scaled(factor))
        return dataclasses.replace(self, value=self.value * factor, low=lo, high=hi, test=test, off_zero=off_zero)

    def described(self, method: str) -> Estimate:
        """The same estimate, its method string replaced."""
        return dataclasses.replace(self, method=method)


def percentile_interval(replicates: np.ndarray, confidence: float) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates, the undefined (NaN) ones dropped; NaN if none is left."""
    replicates = replicates[np.isfinite(replicates)]
    if replicates.size == 0:
        return math.nan, math.nan
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return float(low), float(high)


def _binomial_central_p(k: int, m: int, p0: float) -> float:
    """The two-sided binomial p-value that inverts the Clopper-Pearson interval: twice the smaller
    tail of Binomial(m, p0) at k, capped at 1 (for p0 = 1/2 it equals scipy's binomtest)."""
    if m == 0:
        return 1.0
    if p0 <= 0.0 or p0 >= 1.0:
        return 1.0 if k == round(p0 * m) else 0.0
    lower, upper = stats.binom.cdf(k, m, p0), stats.binom.sf(k - 1, m, p0)
    return float(min(1.0, 2 * min(lower, upper)))


def proportion(successes: int, n: int) -> Estimate:
    """A share k/n with its exact (Clopper-Pearson) interval; p: the exact binomial test."""
    method = "exact binomial (Clopper-Pearson) interval"
    if n <= 0:
        return Estimate.missing(0, method)
    k, n = int(successes), int(n)
    ci = stats.binomtest(k, n).proportion_ci(CONFIDENCE, method="exact")
    return Estimate(k / n, float(ci.low), float(ci.high), n, method, lambda null: _binomial_central_p(k, n, null))


def discordant_counts(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> tuple[int, int, int]:
    """(b, c, n): questions only a got right, only b got right, and all questions."""
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired correctness: a and b differ in length ({a.size} vs {b.size})")
    return int(np.sum(a & ~b)), int(np.sum(~a & b)), int(a.size)


def mcnemar_p(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> float:
    """Two-sided exact McNemar p-value for paired correctness: a binomial test on the discordant
    pairs (a right, b wrong vs a wrong, b right)."""
    only_a, only_b, _ = discordant_counts(correct_a, correct_b)
    if only_a + only_b == 0:
        return 1.0
    return float(stats.binomtest(only_a, only_a + only_b, 0.5).pvalue)


PAIRED_EXACT = (
    "exact interval conditional on the {m} discordant of {n} questions (Clopper-Pearson on b/m; exact McNemar)"
)


PAIRED_SCORE = (
    "Tango's score interval for a paired difference of {n} questions ({m} discordant), judging a boundary other than 0"
)


def tango_score(only_a: int, only_b: int, n: int, delta: float) -> float:
    """Tango's score statistic of "acc(a) − acc(b) = delta" on n paired questions, b = only_a of
    them right for a only and c = only_b for b only (Tango 1998, "Equivalence test and confidence
    interval for the difference in proportions for the paired-sample design", Statistics in Medicine
    17:891-908): (b − c − n·delta) / sqrt(n (2 q + delta (1 − delta))), q the maximum-likelihood share
    of "b only" under the null, the root of 2n q² + (−b − c + (2n − b + c) delta) q − c delta (1 − delta)."""
    b, c, n = float(only_a), float(only_b), float(n)
    quad_b = -b - c + (2 * n - b + c) * delta
    quad_c = -c * delta * (1 - delta)
    q = (math.sqrt(max(quad_b * quad_b - 8 * n * quad_c, 0.0)) - quad_b) / (4 * n)
    variance = n * (2 * q + delta * (1 - delta))
    diff = b - c - n * delta
    if variance <= 0:
        return 0.0 if diff == 0 else math.copysign(math.inf, diff)
    return diff / math.sqrt(variance)


def tango_interval(only_a: int, only_b: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The deltas whose score test (`tango_score`) does not reject at 1 − confidence: the statistic
    falls as delta rises, so each end is the root of |score| = z on its side of the observed
    difference (an end at ±1 where the score never reaches z)."""
    from scipy.optimize import brentq

    z = float(stats.norm.ppf(0.5 + confidence / 2))
    observed = (only_a - only_b) / n
    edge = 1 - 1e-12
    score = lambda delta: tango_score(only_a, only_b, n, delta)  # noqa: E731 - one line, used twice
    high = 1.0 if score(edge) >= -z else brentq(lambda d: score(d) + z, observed, edge, xtol=1e-12)
    low = -1.0 if score(-edge) <= z else brentq(lambda d: score(d) - z, -edge, observed, xtol=1e-12)
    return low, high


def paired_score_difference(only_a: int, only_b: int, n: int, *, confidence: float = CONFIDENCE) -> Estimate:
    """acc(a) − acc(b) as a share with Tango's score interval, its p the score test's two-sided p
    (the interval is the set of deltas it doesn't reject). Unlike the conditional interval it lets
    the share of discordant questions vary: with few of them it is wide, never a point."""
    b, c, n = int(only_a), int(only_b), int(n)
    method = PAIRED_SCORE.format(m=b + c, n=n)
    if n <= 0:
        return Estimate.missing(0, method)
    low, high = tango_interval(b, c, n, confidence)
    return Estimate(
        (b - c) / n, low, high, n, method, lambda null: float(2 * stats.norm.sf(abs(tango_score(b, c, n, null))))
    )


def paired_counts_difference(only_a: int, only_b: int, n: int, *, confidence: float = CONFIDENCE) -> Estimate:
    """acc(a) − acc(b) as a share, from the discordant counts of n paired questions: b = only_a,
    c = only_b, m = b + c. Conditional on m, b ~ Binomial(m, π) and the difference is
    (m/n)(2π − 1); the Clopper-Pearson interval [πL, πU] of b/m maps to the interval of the
    difference, and its test at 0 (π = 1/2) is the exact McNemar test, so the interval excludes 0
    exactly when McNemar's p < 1 − confidence (tests/test_verdicts.py checks a grid of (b, c)).
    Conditioning on m is exact at 0 only: a boundary other than 0 is judged by
    `paired_score_difference` (`Estimate.at_boundary`)."""
    b, c, n = int(only_a), int(only_b), int(n)
    m = b + c
    method = PAIRED_EXACT.format(m=m, n=n)
    if n <= 0:
        return Estimate.missing(0, method)
    score = functools.cache(lambda: paired_score_difference(b, c, n, confidence=confidence))  # when asked
    mcnemar = float(stats.binomtest(b, m, 0.5).pvalue) if m else 1.0
    test = lambda null: mcnemar if null == 0 else score().p_value(null)  # noqa: E731
    if m == 0:  # no discordant question: conditionally the difference is exactly 0
        return Estimate(0.0, 0.0, 0.0, n, method, test, off_zero=lambda bound: score())
    ci = stats.binomtest(b, m).proportion_ci(confidence, method="exact")
    low, high = (m / n) * (2 * float(ci.low) - 1), (m / n) * (2 * float(ci.high) - 1)
    return Estimate((b - c) / n, low, high, n, method, test, off_zero=lambda bound: score())


def paired_accuracy_difference(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> Estimate:
    """acc(a) − acc(b) as a share, a and b one 0/1 outcome per question on the same questions: the
    exact conditional interval of `paired_counts_difference`, p the exact McNemar test."""
    return paired_counts_difference(*discordant_counts(correct_a, correct_b))


SIGN_FLIP_EXACT = 16  # at most this many units: every sign pattern (2^16 = 65,536), else Monte Carlo
SIGN_FLIP_RESAMPLES = 9999  # random sign patterns beyond that (p resolution 1/10,000; seed fixed)

PAIRED_SIGN_FLIP = (
    "paired sign-flip test over {unit} on each one's mean difference{weights} ({m} informative of {n}; "
    "{patterns}), interval by inverting it conditional on the informative and their |difference|"
)


def _bisect(f: Callable[[float], float], target: float, rising: bool) -> float:
    """The π in [0, 1] where a monotone f crosses `target` (f rising or falling in π), to 1e-8."""
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-8:
        mid = (lo + hi) / 2
        if (f(mid) < target) == rising:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def sign_flip_difference(
    differences: Sequence[float],
    weights: Sequence[float] | None = None,
    *,
    off_zero: Callable[[float], Estimate] | None = None,
    resamples: int = SIGN_FLIP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    unit: str = "questions",
) -> Estimate:
    """The weighted mean Σ w·d / Σ w of per-unit paired differences d (e.g. each question's share
    right over its threads, a minus b) with the paired randomization (sign-flip) test over units:
    under the null that the two arms are exchangeable within a unit, d is as likely as −d, so every
    pattern of flipped signs is as likely as the observed one. p: the share of patterns whose
    statistic is at least as far from 0, over every pattern of the m informative units (d ≠ 0) when
    m ≤ SIGN_FLIP_EXACT, else over `resamples` random ones (seed fixed) with the observed one counted,
    (1 + #) / (1 + B) (Phipson & Smyth 2010, SAGMB 9:39). Valid at any m: with 4 informative units
    p is never below 2/16. With one 0/1 outcome per unit and equal weights it is the exact McNemar test.

    The interval is conditional on which units are informative and on their |d|, as the exact
    McNemar interval is on the discordant questions: each informative unit's sign is + with
    probability π, independently, so the statistic is Σ c·s (c = w|d|, Σ w = 1) with mean
    (2π − 1)·Σ c; the central test of π (twice the smaller tail, π = 1/2 the sign-flip test above)
    is inverted for [πL, πU] as Clopper-Pearson inverts the binomial one (which it is, for equal c),
    and mapped to [(2πL − 1)·Σ c, (2πU − 1)·Σ c]: it excludes 0 exactly when p < 1 − confidence.
    Conditioning is sound at 0 only (off 0 the magnitudes and the uninformative units carry
    information): a boundary other than 0 is judged by `off_zero` (`Estimate.at_boundary`) when given."""
    d = np.asarray(differences, dtype=float)
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=float)
    if d.shape != w.shape:
        raise ValueError(f"sign_flip_difference: {d.size} differences, {w.size} weights")
    keep = np.isfinite(d) & np.isfinite(w) & (w > 0)
    d, w = d[keep], w[keep]
    n = int(d.size)
    text = {"unit": unit, "weights": "" if weights is None else ", weighted", "n": n}
    if n == 0:
        return Estimate.missing(0, PAIRED_SIGN_FLIP.format(m=0, patterns="no unit with both sides", **text))
    w = w / w.sum()
    value = float(np.sum(w * d))
    informative = np.abs(d) > 1e-12 * max(1.0, float(np.abs(d).max()))
    m = int(informative.sum())
    if m == 0:  # no unit differs: conditionally the difference is exactly 0
        method = PAIRED_SIGN_FLIP.format(m=0, patterns="no sign pattern moves it", **text)
        return Estimate(0.0, 0.0, 0.0, n, method, lambda null: 1.0 if null == 0 else 0.0, off_zero=off_zero)
    c = (w * np.abs(d))[informative]
    reach = float(c.sum())  # the statistic with every sign +
    tie = 1e-10 * reach  # sums equal in exact arithmetic land a few ulps apart
    if m <= SIGN_FLIP_EXACT:
        plus = ((np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1).astype(float)
        flipped, k = (2 * plus - 1) @ c, plus.sum(axis=1).astype(int)
        at_least = np.bincount(k[flipped >= value - tie], minlength=m + 1)
        at_most = np.bincount(k[flipped <= value + tie], minlength=m + 1)
        powers = np.arange(m + 1)

        def tails(pi: float) -> tuple[float, float]:
            prob = pi**powers * (1 - pi) ** (m - powers)
            return float(at_least @ prob), float(at_most @ prob)

        patterns = f"all {2**m:,} sign patterns"
    else:
        # pattern b's sign i is + where its uniform u_bi < π, so its statistic rises with π: it is
        # ≥ the observed one for π above one threshold and ≤ it up to another (found once, from the
        # cumulative c in the order of u_b), and each tail is a count of thresholds
        uniforms = np.random.default_rng(seed).random((resamples, m))
        order = np.argsort(uniforms, axis=1)
        ordered = np.take_along_axis(uniforms, order, axis=1)
        cumulative = np.cumsum(c[order], axis=1)  # Σ c of the j + 1 smallest u
        top = np.concatenate([ordered, np.ones((resamples, 1))], axis=1)
        needed = np.where((value - tie + reach) / 2 > 0, np.sum(cumulative < (value - tie + reach) / 2, axis=1) + 1, 0)
        above = np.sort(np.where(needed == 0, -1.0, np.where(needed > m, 2.0, top[np.arange(resamples), needed - 1])))
        allowed = np.sum(cumulative <= (value + tie + reach) / 2, axis=1)
        below = np.sort(np.where(allowed >= m, 2.0, top[np.arange(resamples), np.minimum(allowed, m)]))

        def tails(pi: float) -> tuple[float, float]:
            at_least = int(np.searchsorted(above, pi, side="left"))  # thresholds < π
            at_most = resamples - int(np.searchsorted(below, pi, side="left"))  # thresholds ≥ π
            return (1 + at_least) / (1 + resamples), (1 + at_most) / (1 + resamples)

        patterns = f"{resamples:,} random sign patterns, seed {seed}"

    def test(null: float) -> float:
        pi = (1 + null / reach) / 2
        if not 0 <= pi <= 1:
            return 0.0
        return min(1.0, 2 * min(tails(pi)))

    half = (1 - confidence) / 2
    low_pi = 0.0 if tails(0.0)[0] >= half else _bisect(lambda pi: tails(pi)[0], half, rising=True)
    high_pi = 1.0 if tails(1.0)[1] >= half else _bisect(lambda pi: tails(pi)[1], half, rising=False)
    low, high = min(reach * (2 * low_pi - 1), value), max(reach * (2 * high_pi - 1), value)
    method = PAIRED_SIGN_FLIP.format(m=m, patterns=patterns, **text)
    return Estimate(value, low, high, n, method, test, off_zero=off_zero)


def accuracy_difference(correct_a: Sequence[bool], correct_b: Sequence[bool], *, seed: int = 0) -> Estimate:
    """`paired_accuracy_difference` in points (`seed` is unused: the interval is exact)."""
    del seed
    est = paired_accuracy_difference(correct_a, correct_b).scaled(100)
    return est.described(f"{est.method}; McNemar exact p = {est.p:.3g}")


def t_intervals(
    means: Sequence[float], sds: Sequence[float], counts: Sequence[int], confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the t interval of a mean from its sample's mean, SD (ddof 1) and size, one
    row each: mean ± t_{n−1} · sd / √n, the interval the one-sample t-test inverts, for a mean over
    independent repetitions (runs). NaN where n < 2."""
    means, sds, counts = (np.asarray(a, dtype=float) for a in (means, sds, counts))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = stats.t.ppf(0.5 + confidence / 2, counts - 1) * sds / np.sqrt(counts)
    half = np.where(counts >= 2, half, np.nan)
    return means - half, means + half


def is_binary(*arrays: np.ndarray) -> bool:
    """Every value 0 or 1 (one correctness outcome per unit)."""
    return all(np.isin(np.asarray(x, dtype=float), (0.0, 1.0)).all() for x in arrays)


# --------------------------------------------------------------------------- bootstrap


def _batched(statistic: Callable, vectorized: bool) -> Callable[[np.ndarray], np.ndarray]:
    """The statistic of a 2-D int array of unit indices (one resample a row), one value a row."""
    if vectorized:
        return lambda index: np.asarray(statistic(index), dtype=float).reshape(index.shape[0])
    return lambda index: np.array([statistic(row) for row in index], dtype=float)


def _jackknife(batch: Callable[[np.ndarray], np.ndarray], n_units: int) -> np.ndarray:
    """The statistic with each unit left out in turn."""
    units = np.arange(n_units)
    values = []
    for start in range(0, n_units, BOOTSTRAP_BATCH):
        rows = np.array([np.delete(units, i) for i in range(start, min(n_units, start + BOOTSTRAP_BATCH))])
        values.append(batch(rows))
    return np.concatenate(values)


def _tie_rounding(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    """Statistics rounded to `TIE_DIGITS` significant digits of `scale` (the largest |value| among the
    point value and its jackknife), so that resamples equal in exact arithmetic tie in floats too,
    whatever order their sums took: with the value (BCa's bias correction) and with a null such as 0
    (the p-value). Without a finite non-zero scale, unrounded."""
    if not (math.isfinite(scale) and scale > 0):
        return lambda values: values
    decimals = TIE_DIGITS - math.ceil(math.log10(scale))
    return lambda values: np.round(values, decimals)


def _share_below(replicates: np.ndarray, point: float) -> float:
    """(#below + #at-or-below) / 2B: scipy's mid-rank percentile of `point` among the replicates."""
    return float((np.sum(replicates < point) + np.sum(replicates <= point)) / (2 * replicates.size))


def _beyond_p(null: float, value: float, replicates: np.ndarray, units: int) -> float:
    """p for a null outside every replicate: below the bootstrap's resolution 1/B, so the normal
    tail with the bootstrap standard error, capped at 1/B. Without spread (every resample gives the
    same value: every unit agrees) the exact sign test's 2^(1 − n) over the n units, never 0."""
    se = float(np.std(replicates, ddof=1)) if replicates.size > 1 else 0.0
    if se == 0:
        return 1.0 if null == value else min(1.0, 2.0 ** (1 - units))
    return min(1.0 / replicates.size, float(2 * stats.norm.sf(abs(value - null) / se)))


def _quantile_levels(null: float, replicates: np.ndarray) -> tuple[float, float] | None:
    """The levels q at which the replicates' linear quantile (numpy's and `scipy.stats.quantile`'s
    default, what scipy's bootstrap reads its ends from) reaches `null`: (the largest q with
    quantile ≤ null, the smallest q with quantile ≥ null); they differ where replicates tie at null.
    None when null lies outside the replicates."""
    x = np.sort(replicates)
    last = x.size - 1
    if last < 1 or null < x[0] or null > x[-1]:
        return None
    at_most, below = int(np.searchsorted(x, null, "right")), int(np.searchsorted(x, null, "left"))
    # the quantile at q is x[h] interpolated, h = last * q; invert it on the segment holding null
    upper = 1.0 if at_most > last else (at_most - 1 + (null - x[at_most - 1]) / (x[at_most] - x[at_most - 1])) / last
    lower = 0.0 if below == 0 else (below - 1 + (null - x[below - 1]) / (x[below] - x[below - 1])) / last
    return upper, lower


def _bca_p(null: float, value: float, replicates: np.ndarray, units: int, z0: float = 0.0, accel: float = 0.0) -> float:
    """The p-value the BCa interval inverts: the smallest 1 − confidence whose interval (scipy's: its
    ends the linear quantiles of the replicates at BCa-adjusted levels) leaves `null` out, so p < 0.05
    exactly when the 95 % interval excludes null. An end passes null when its level passes the
    quantile level q of null (`_quantile_levels`); for the level q, w = Φ⁻¹(q) − z0 and the end's
    normal quantile is z = w / (1 + a·w) − z0 (Efron & Tibshirani 1993, eq. 14.10 solved for α):
    the lower end gives p = 2Φ(z), the upper 2(1 − Φ(z)). With z0 = a = 0 it is the percentile p."""
    levels = _quantile_levels(null, replicates)
    if levels is None:
        return _beyond_p(null, value, replicates, units)
    p = 1.0
    for q, lower_end in zip(levels, (True, False)):
        if (q <= 0.0 and lower_end) or (q >= 1.0 and not lower_end):
            return _beyond_p(null, value, replicates, units)  # an end passes null at every level
        if 0.0 < q < 1.0:
            w = stats.norm.ppf(q) - z0
            if 1 + accel * w <= 0:  # outside the range where the BCa map is monotone: as far as beyond
                return _beyond_p(null, value, replicates, units)
            z = w / (1 + accel * w) - z0
            p = min(p, float(2 * (stats.norm.cdf(z) if lower_end else stats.norm.sf(z))))
    return min(1.0, p)


def bootstrap(
    statistic: Callable[[np.ndarray], float],
    n_units: int,
    *,
    unit: str = "questions",
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    vectorized: bool = False,
    paired: bool = False,
) -> Estimate:
    """BCa bootstrap over units (`scipy.stats.bootstrap`, method "BCa"): `statistic(index)` computes
    the statistic on the units at `index` (an int array, with repeats); with `vectorized` it takes a
    2-D array (one resample a row) and returns one value a row. The point value is the statistic on
    every unit.

    Units are what was sampled (questions, or debates, runs, steps); everything measured on one unit
    (all its agents, rounds, threads, protocols) moves together: a comparison on shared units is
    paired (`paired` only names it so) and rows of one question are clustered. Fewer than
    `MIN_UNITS` units: the value without an interval (`Estimate.few`). Where BCa is undefined (a
    constant statistic: no acceleration; or resamples where the statistic is undefined, NaN) the
    interval is the percentile one over the finite replicates, and the method says so. A resample's
    statistic is rounded to `TIE_DIGITS` significant digits of its scale (`_tie_rounding`). The p-value
    (`Estimate.p_value`) inverts the interval that was used. The seed is fixed so a claims file is
    repeatable.
    """
    n_units = int(n_units)
    name = f"{'paired ' if paired else ''}bootstrap over {unit} ({resamples} resamples"
    if n_units < 1:
        return Estimate.missing(0, f"{name})")
    raw = _batched(statistic, vectorized)
    value = float(raw(np.arange(n_units)[None, :])[0])
    if n_units < MIN_UNITS:
        return Estimate.few(value, n_units, f"{name})")
    if not math.isfinite(value):
        return Estimate.missing(n_units, f"{name}; the statistic is undefined on these units)")
    jack = _jackknife(raw, n_units)
    rounded = _tie_rounding(float(np.nanmax(np.abs(np.append(jack, value)))))
    value, jack = float(rounded(value)), rounded(jack)  # as scipy's BCa sees them, through `batch`

    def batch(index: np.ndarray) -> np.ndarray:
        return rounded(raw(index))

    def on_indices(index: np.ndarray, axis: int = -1) -> np.ndarray:
        index = np.asarray(index).astype(int)
        return batch(index.reshape(-1, index.shape[-1])).reshape(index.shape[:-1])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate BCa falls back below, named in the method
        result = stats.bootstrap(
            (np.arange(n_units),),
            on_indices,
            n_resamples=resamples,
            batch=BOOTSTRAP_BATCH,
            vectorized=True,
            confidence_level=confidence,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    replicates = np.asarray(result.bootstrap_distribution, dtype=float)
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    if np.isfinite(replicates).all() and math.isfinite(low) and math.isfinite(high):
        spread = jack.mean() - jack
        accel = float(np.sum(spread**3) / (6 * np.sum(spread**2) ** 1.5)) if np.ptp(jack) > 0 else math.nan
        z0 = float(stats.norm.ppf(_share_below(replicates, value)))
        if math.isfinite(accel) and math.isfinite(z0):
            return Estimate(
                value,
                low,
                high,
                n_units,
                f"{name}, BCa)",
                lambda null: _bca_p(null, value, replicates, n_units, z0, accel),
            )
    finite = replicates[np.isfinite(replicates)]
    why = (
        f"{replicates.size - finite.size} resamples undefined, dropped"
        if finite.size < replicates.size
        else "BCa undefined (no spread in the jackknife)"
    )
    low, high = percentile_interval(finite, confidence)
    if not (math.isfinite(low) and math.isfinite(high)):
        return Estimate.missing(n_units, f"{name}; no resample defines the statistic)")
    return Estimate(
        value,
        low,
        high,
        n_units,
        f"{name}, percentile: {why})",
        lambda null: _bca_p(null, value, finite, n_units),  # z0 = a = 0: the percentile interval's p
    )


def cluster_codes(n_rows: int, clusters: Sequence | None) -> tuple[np.ndarray, int]:
    """Each row's unit as an int 0..k−1 and k: the rows themselves without `clusters`, else one unit
    per distinct cluster label (e.g. the question a trajectory answered), numbered in the labels'
    sorted order, so that a clustered bootstrap does not depend on the order of the rows."""
    if clusters is None:
        return np.arange(n_rows), n_rows
    labels = list(clusters) if not isinstance(clusters, (np.ndarray, pd.Series, pd.Index)) else clusters
    try:
        codes, uniques = pd.factorize(pd.Index(labels), sort=True)
    except TypeError:  # labels that don't compare (mixed types): first-seen order
        codes, uniques = pd.factorize(pd.Index(labels))
    if len(codes) != n_rows:
        raise ValueError(f"clusters: {len(codes)} labels for {n_rows} rows")
    return codes.astype(int), len(uniques)


def sums_bootstrap(
    columns: np.ndarray,
    statistic_of_sums: Callable[[np.ndarray], np.ndarray],
    *,
    clusters: Sequence | None = None,
    unit: str = "questions",
    paired: bool = False,
) -> Estimate:
    """The bootstrap of a statistic of column sums over rows (a mean, Pearson r, Cohen's d, an OLS
    slope: each a function of a few sums): each unit's sums are taken once, a resample adds up its
    units' sums. `statistic_of_sums` maps (..., c) sums to (...) values. With `clusters` the unit is
    the cluster (a question's rows drawn together), else the row."""
    columns = np.asarray(columns, dtype=float)
    codes, k = cluster_codes(len(columns), clusters)
    per_unit = np.zeros((k, columns.shape[1]))
    np.add.at(per_unit, codes, columns)
    if clusters is not None:
        unit = f"{unit}, each one's rows drawn together"
    return bootstrap(
        lambda index: statistic_of_sums(per_unit[index].sum(axis=-2)), k, unit=unit, vectorized=True, paired=paired
    )


def _spread(count, total, squares):
    """Σ(x − x̄)² from n, Σx, Σx²; 0 for a constant (float residue far below 1e-12 · n)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        spread = squares - total * total / count
    return np.where(spread > 1e-12 * count, spread, 0.0)


def _mean_of_sums(sums):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sums[..., 0] > 0, sums[..., 1] / sums[..., 0], np.nan)


def _r_of_sums(sums):
    n, sx, sy, sxx, syy, sxy = (sums[..., j] for j in range(6))
    vx, vy = _spread(n, sx, sxx), _spread(n, sy, syy)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (sxy - sx * sy / n) / np.sqrt(vx * vy)
    return np.where((vx > 0) & (vy > 0), np.clip(r, -1.0, 1.0), np.nan)


def _d_of_sums(sums):
    n1, s1, q1, n0, s0, q0 = (sums[..., j] for j in range(6))
    pooled = _spread(n1, s1, q1) + _spread(n0, s0, q0)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = (s1 / n1 - s0 / n0) / np.sqrt(pooled / (n1 + n0 - 2))
    return np.where((n1 > 0) & (n0 > 0) & (n1 + n0 > 2) & (pooled > 0), d, np.nan)


def _slope_of_sums(sums):
    n, sx, sy, sxx, sxy = (sums[..., j] for j in range(5))
    vx = _spread(n, sx, sxx)
    with np.errstate(invalid="ignore", divide="ignore"):
        b = (sxy - sx * sy / n) / vx
    return np.where(vx > 0, b, np.nan)


def _finite_rows(*arrays, clusters=None):
    arrays = [np.asarray(a, dtype=float) for a in arrays]
    keep = np.logical_and.reduce([np.isfinite(a) for a in arrays])
    kept = [a[keep] for a in arrays]
    if clusters is not None:
        clusters = np.asarray(pd.Index(list(clusters) if not hasattr(clusters, "__array__") else clusters))[keep]
    return kept, clusters


def mean_estimate(values: Sequence[float], *, clusters: Sequence | None = None, unit: str = "questions") -> Estimate:
    """The mean over rows (one value per unit, or several per cluster with `clusters`), BCa bootstrap."""
    (x,), clusters = _finite_rows(values, clusters=clusters)
    return sums_bootstrap(np.column_stack([np.ones_like(x), x]), _mean_of_sums, clusters=clusters, unit=unit)


def paired_difference(
    a: Sequence[float], b: Sequence[float], *, clusters: Sequence | None = None, unit: str = "questions"
) -> Estimate:
    """mean(a) − mean(b) where a[i] and b[i] are measured on the same unit (e.g. a per-question mean
    over threads of two methods), BCa bootstrap over units: a paired comparison. For one 0/1
    correctness outcome per question use `paired_accuracy_difference` (exact, McNemar)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired_difference: a and b differ in length ({a.size} vs {b.size})")
    (a, b), clusters = _finite_rows(a, b, clusters=clusters)
    d = a - b
    return sums_bootstrap(
        np.column_stack([np.ones_like(d), d]), _mean_of_sums, clusters=clusters, unit=unit, paired=True
    )


def correlation(x: Sequence[float], y: Sequence[float], *, clusters: Sequence | None = None) -> Estimate:
    """Pearson r (point-biserial when one variable is 0/1), BCa bootstrap over rows, or over
    clusters (questions) whose rows move together. Fisher's z is not used: it assumes bivariate
    normal, independent rows, and neither a 0/1 variable nor a question's trajectories are that."""
    (x, y), clusters = _finite_rows(x, y, clusters=clusters)
    columns = np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])
    est = sums_bootstrap(columns, _r_of_sums, clusters=clusters, unit="questions" if clusters is not None else "rows")
    return est


def cohens_d(
    group_1: Sequence[float],
    group_0: Sequence[float],
    *,
    clusters_1: Sequence | None = None,
    clusters_0: Sequence | None = None,
) -> Estimate:
    """Cohen's d of group_1 over group_0 (pooled SD), BCa bootstrap over rows (the groups are
    outcomes, e.g. failures and successes, so a resample draws rows and their group with them), or
    over clusters shared by both groups (`clusters_1`, `clusters_0`: a question's rows together)."""
    a, b = np.asarray(group_1, dtype=float), np.asarray(group_0, dtype=float)
    values = np.concatenate([a, b])
    first = np.concatenate([np.ones(a.size, bool), np.zeros(b.size, bool)])
    clusters = None
    if clusters_1 is not None or clusters_0 is not None:
        clusters = np.concatenate(
            [np.asarray(list(clusters_1), dtype=object), np.asarray(list(clusters_0), dtype=object)]
        )
    (values, first_f), clusters = _finite_rows(values, first.astype(float), clusters=clusters)
    f, s = first_f, 1 - first_f
    columns = np.column_stack([f, f * values, f * values**2, s, s * values, s * values**2])
    return sums_bootstrap(columns, _d_of_sums, clusters=clusters, unit="questions" if clusters is not None else "rows")


def slope(x: Sequence[float], y: Sequence[float], *, unit: str = "steps", clusters: Sequence | None = None) -> Estimate:
    """The OLS slope of y on x, BCa bootstrap of (x, y) pairs over `unit` (or clusters)."""
    (x, y), clusters = _finite_rows(x, y, clusters=clusters)
    columns = np.column_stack([np.ones_like(x), x, y, x * x, x * y])
    return sums_bootstrap(columns, _slope_of_sums, clusters=clusters, unit=unit)
