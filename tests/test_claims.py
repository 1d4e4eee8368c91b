"""debatelab.evaluation.claims: every claim carries n, a 95 % interval and a verdict.

Intervals are checked against hand computation or against scipy's own routines, never against
the code's output; each verdict case (large effect, reversed large effect, tiny effect on few
questions) is built so that the expected verdict follows from the numbers in the comment.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from debatelab.evaluation.claims import Claim, claims_frame, verdict
from debatelab.intervals import (
    Estimate,
    accuracy_difference,
    bootstrap,
    cohens_d,
    correlation,
    mcnemar_p,
    mean_estimate,
    paired_difference,
    proportion,
    slope,
)

# --------------------------------------------------------------------------- verdicts


def _paired_correct(n: int, only_a: int, only_b: int, both: int) -> tuple[np.ndarray, np.ndarray]:
    """Correctness of methods a and b on n shared questions with the given discordant counts."""
    a = np.zeros(n, bool)
    b = np.zeros(n, bool)
    a[:only_a] = True
    b[only_a : only_a + only_b] = True
    a[only_a + only_b : only_a + only_b + both] = b[only_a + only_b : only_a + only_b + both] = True
    return a, b


def test_a_large_effect_holds():
    # 200 questions: a alone right on 60, b alone on 10 -> +25 points; the interval is exact conditional
    # on the 70 discordant questions: Clopper-Pearson [pL, pU] of 60/70 mapped by 100 · (70/200)(2p − 1)
    # (the normal approximation 25 ± 1.96 · 3.91 is close, but not the exact interval)
    a, b = _paired_correct(200, only_a=60, only_b=10, both=50)
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    ci = stats.binomtest(60, 70).proportion_ci(0.95, method="exact")
    assert claim.value == pytest.approx(25.0)
    assert (claim.low, claim.high) == pytest.approx((35 * (2 * ci.low - 1), 35 * (2 * ci.high - 1)))
    assert claim.verdict == "holds" and claim.holds is True and claim.n == 200 and claim.expect == "> 0"
    assert "McNemar" in claim.interval


def test_a_large_reversed_effect_fails():
    a, b = _paired_correct(200, only_a=10, only_b=60, both=50)  # −25 points, interval far below 0
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    assert claim.value == pytest.approx(-25.0) and claim.high < 0
    assert claim.verdict == "fails" and claim.holds is False


def test_a_tiny_effect_on_few_questions_is_inconclusive():
    # 10 questions, a alone right on 2, b alone on 1: +10 points, but one discordant pair either way
    # moves it by 10, so the interval covers 0
    a, b = _paired_correct(10, only_a=2, only_b=1, both=3)
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    assert claim.value == pytest.approx(10.0) and claim.low < 0 < claim.high
    assert claim.verdict == "inconclusive" and claim.holds is None


@pytest.mark.parametrize(
    "low, high, expect, threshold, expected",
    [
        (0.1, 0.3, ">", 0, "holds"),
        (-0.3, -0.1, ">", 0, "fails"),
        (-0.1, 0.3, ">", 0, "inconclusive"),
        (0.0, 0.0, ">", 0, "inconclusive"),  # an interval that touches the threshold decides nothing
        (0.0, 0.0, ">=", 0, "inconclusive"),  # ">=" with margin 0 must clear the threshold too
        (-0.3, -0.1, "<", 0, "holds"),
        (0.1, 0.3, "<", 0, "fails"),
        (0.4, 0.6, ">", 0.5, "inconclusive"),
        (0.6, 0.7, ">", 0.5, "holds"),
        (-1e-9, 1e-9, "<=", 1e-6, "holds"),  # an identity's largest violation under its tolerance
    ],
)
def test_verdict_reads_the_interval_against_the_threshold(low, high, expect, threshold, expected):
    assert verdict(Estimate((low + high) / 2, low, high, 10, "m"), expect, threshold) == expected


def test_an_undefined_statistic_is_not_applicable_with_a_reason():
    claim = Claim.measured(
        "§x", "r < 0", "fixture", "Pearson r", correlation([1] * 12, [0, 1, 0, 1, 1] * 2 + [0, 1]), expect="<"
    )
    assert claim.verdict == "n/a" and math.isnan(claim.value) and "undefined" in claim.detail
    with pytest.raises(ValueError, match="expect"):
        verdict(Estimate(1, 0, 2, 3, "m"), "=")


def test_claims_frame_has_the_interval_columns():
    a, b = _paired_correct(200, only_a=60, only_b=10, both=50)
    frame = claims_frame(
        [
            Claim.measured("§1", "a beats b", "s", "points", accuracy_difference(a, b)),
            Claim.untestable("§2", "needs a debate", "no debate protocol"),
        ]
    )
    assert list(frame["verdict"]) == ["holds", "n/a"]
    assert {"n", "value", "low", "high", "expect", "interval"} <= set(frame.columns)
    assert frame.loc[1, "detail"] == "no debate protocol" and math.isnan(frame.loc[1, "low"])


# --------------------------------------------------------------------------- intervals


def test_correlation_is_bootstrapped_not_fishers_z():
    # Fisher's z assumes bivariate normal independent rows; a 0/1 correctness column is neither, so the
    # interval is the BCa bootstrap over rows (checked against scipy in tests/test_verdicts.py)
    rng = np.random.default_rng(1)
    x = rng.normal(size=50)
    y = 0.5 * x + rng.normal(size=50)
    r = stats.pearsonr(x, y)
    est = correlation(x, y)
    assert est.value == pytest.approx(r.statistic) and "BCa" in est.method
    assert est.low < r.statistic < est.high
    assert est.n == 50


def test_cohens_d_by_hand_and_no_interval_on_six_rows():
    # groups [2, 4, 6] and [1, 2, 3]: means 4 and 2, pooled variance (8 + 2)/4 = 2.5, d = 2/sqrt(2.5) = 1.2649;
    # 6 rows are fewer than MIN_UNITS: the value without an interval
    est = cohens_d([2, 4, 6], [1, 2, 3])
    assert est.value == pytest.approx(2 / math.sqrt(2.5)) and est.too_few and math.isnan(est.low)


def test_slope_interval_by_hand():
    # y = 2x + e on x = 0..4 with e = (0, 1, -1, 1, -1): slope = Σ(x-2)(y-ȳ)/Σ(x-2)² = 18/10 = 1.8;
    # its standard error from the textbook definitions below; t(3) quantile 3.1824
    x = np.arange(5.0)
    y = 2 * x + np.array([0, 1, -1, 1, -1])
    b = np.sum((x - x.mean()) * (y - y.mean())) / np.sum((x - x.mean()) ** 2)
    resid = y - (y.mean() + b * (x - x.mean()))
    se = math.sqrt(np.sum(resid**2) / 3 / np.sum((x - x.mean()) ** 2))
    est = slope(x, y)
    assert b == pytest.approx(1.8) and se > 0
    # 5 steps are fewer than MIN_UNITS: the slope without an interval (a bootstrap of 5 pairs has
    # too few distinct resamples; the t interval above assumed normal independent errors)
    assert est.value == pytest.approx(1.8) and est.too_few and verdict(est, ">") == "n/a (too few)"


def test_proportion_is_clopper_pearson():
    # 0 of 10: the exact upper bound is 1 − 0.025^(1/10) = 0.3085
    est = proportion(0, 10)
    assert est.value == 0 and est.low == 0 and est.high == pytest.approx(1 - 0.025**0.1, rel=1e-6)


def test_mcnemar_is_the_binomial_test_on_discordant_pairs():
    a, b = _paired_correct(30, only_a=8, only_b=1, both=10)
    # P(X <= 1 or X >= 8 | n = 9, p = 1/2) = 2 · (1 + 9)/512
    assert mcnemar_p(a, b) == pytest.approx(20 / 512)
    assert mcnemar_p(a, a) == 1.0


def test_bootstrap_mean_matches_the_normal_interval_on_a_large_sample():
    # 400 Bernoulli(0.4) draws: the BCa bootstrap ≈ p̂ ± 1.96 sqrt(p̂(1 − p̂)/n)
    rng = np.random.default_rng(0)
    x = (rng.random(400) < 0.4).astype(float)
    p = x.mean()
    half = 1.96 * math.sqrt(p * (1 - p) / 400)
    est = mean_estimate(x)
    assert est.value == pytest.approx(p)
    assert est.low == pytest.approx(p - half, abs=0.01) and est.high == pytest.approx(p + half, abs=0.01)


def test_bootstrap_is_repeatable_and_moves_units_together():
    # two measurements per unit that always agree: the paired difference is exactly 0 in every resample
    a = np.array([1.0, 0.0, 1.0, 1.0, 0.0] * 3)
    est = paired_difference(a, a)
    assert (est.value, est.low, est.high) == (0.0, 0.0, 0.0)
    stat = lambda i: float(np.mean(a[i]))  # noqa: E731
    assert bootstrap(stat, 15) == bootstrap(stat, 15)
    assert bootstrap(stat, 1).finite is False
