"""Verdicts that agree with an exact test (issue 43, part 1).

Every expected value here is worked out by hand or taken from scipy.stats itself (the exact binomial
test, McNemar as the binomial test on the discordant questions, `scipy.stats.bootstrap` with BCa),
never from the code under test. Each test failed on the code before this change (a paired percentile
bootstrap for every statistic; ">=" holding when the lower bound touched 0): the reason is in each
docstring. Names the old module lacked are imported inside the tests that use them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from debatelab import intervals
from debatelab.evaluation import claims as claims_module
from debatelab.evaluation.claims import Claim, claims_frame, verdict
from debatelab.evaluation.comparisons import comparison_table
from debatelab.intervals import Estimate, accuracy_difference


def _paired(n: int, only_a: int, only_b: int, both: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Correctness of a and b on n shared questions with the given discordant counts."""
    a, b = np.zeros(n, bool), np.zeros(n, bool)
    a[:only_a] = True
    b[only_a : only_a + only_b] = True
    a[only_a + only_b : only_a + only_b + both] = b[only_a + only_b : only_a + only_b + both] = True
    return a, b


def _score_by_likelihood(b: int, c: int, n: int, delta: float) -> float:
    """Tango's score statistic by hand: the share q of "only b right" that maximises the
    multinomial likelihood under acc(a) − acc(b) = delta (found numerically, not by the closed
    form the code uses), then (b − c − n·delta) / sqrt(n (2q + delta (1 − delta)))."""
    from scipy import optimize

    def minus_log_likelihood(q):
        terms = ((b, q + delta), (c, q), (n - b - c, 1 - 2 * q - delta))
        return -sum(k * math.log(p) for k, p in terms if k)

    low, high = max(0.0, -delta), (1 - delta) / 2
    q = optimize.minimize_scalar(
        minus_log_likelihood, bounds=(low + 1e-12, high - 1e-12), method="bounded", options={"xatol": 1e-12}
    ).x
    return (b - c - n * delta) / math.sqrt(n * (2 * q + delta * (1 - delta)))


def _score_interval_by_search(b: int, c: int, n: int) -> tuple[float, float]:
    """The deltas whose score statistic (`_score_by_likelihood`) stays within ±1.96, as a share: each
    end where it crosses ±1.96 on its side of the observed difference (±1 where it never does)."""
    from scipy import optimize

    z, observed, edge = stats.norm.ppf(0.975), (b - c) / n, 1 - 1e-9
    score = lambda d: _score_by_likelihood(b, c, n, d)  # noqa: E731
    low = -1.0 if score(-edge) < z else optimize.brentq(lambda d: score(d) - z, -edge, observed)
    high = 1.0 if score(edge) > -z else optimize.brentq(lambda d: score(d) + z, observed, edge)
    return low, high


def _conditional_interval(b: int, c: int, n: int) -> tuple[float, float]:
    """By hand: Clopper-Pearson [pL, pU] of b/m (scipy's exact binomial interval), mapped by
    d = (m/n)(2p − 1), in points."""
    m = b + c
    ci = stats.binomtest(b, m).proportion_ci(0.95, method="exact")
    return 100 * (m / n) * (2 * ci.low - 1), 100 * (m / n) * (2 * ci.high - 1)


# --------------------------------------------------------------------------- paired correctness


def test_the_paired_interval_excludes_zero_exactly_when_mcnemar_rejects():
    """On a grid of discordant counts (b, c) on 100 questions, the interval of the accuracy difference
    lies off 0 exactly when the exact McNemar p (scipy's binomial test of b of b + c at 1/2) is
    below 0.05. The old paired bootstrap broke this both ways (e.g. b = 4, c = 0: p = 0.125, interval
    [0.5, 4.0] off 0)."""
    disagreements = []
    for b in range(0, 16):
        for c in range(0, 16):
            if b + c == 0:
                continue
            a, bb = _paired(100, b, c)
            est = accuracy_difference(a, bb)
            p = stats.binomtest(b, b + c, 0.5).pvalue
            if (est.low > 0 or est.high < 0) != (p < 0.05):
                disagreements.append((b, c, est.low, est.high, p))
    assert disagreements == []


def test_a_difference_carried_by_four_discordant_questions_does_not_hold():
    """b = 4, c = 0 on 200 questions: +2 points, exact McNemar p = 2 · 0.5⁴ = 0.125. The old paired
    bootstrap gave [0.5, 4.0] (a resample without a discordant question has probability
    (196/200)²⁰⁰ ≈ 1.8 % < 2.5 %) and the claim "held"."""
    a, b = _paired(200, only_a=4, only_b=0, both=20)
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    assert claim.value == pytest.approx(2.0)
    assert (claim.low, claim.high) == pytest.approx(_conditional_interval(4, 0, 200), rel=1e-9)
    assert claim.low < 0 < claim.high and claim.verdict == "inconclusive"
    assert claim.p == pytest.approx(0.125)


def test_a_large_effect_holds_with_the_exact_interval_and_p():
    """b = 60, c = 10 on 200 questions: +25 points; the interval is the mapped Clopper-Pearson one
    (the old bootstrap's differed), p the exact McNemar p."""
    a, b = _paired(200, only_a=60, only_b=10, both=50)
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    assert (claim.low, claim.high) == pytest.approx(_conditional_interval(60, 10, 200), rel=1e-9)
    assert claim.p == pytest.approx(stats.binomtest(60, 70, 0.5).pvalue, rel=1e-9)
    assert claim.verdict == "holds"


def test_a_reversed_large_effect_fails():
    a, b = _paired(200, only_a=10, only_b=60, both=50)
    claim = Claim.measured("§x", "a beats b", "fixture", "acc(a) − acc(b), points", accuracy_difference(a, b))
    assert (claim.low, claim.high) == pytest.approx(_conditional_interval(10, 60, 200), rel=1e-9)
    assert claim.high < 0 and claim.verdict == "fails" and claim.p < 1e-9


def test_a_difference_indistinguishable_from_zero_does_not_hold_as_at_least():
    """ ">= 0" on b = 3, c = 0 (p = 0.25): the old bootstrap's lower bound was exactly 0 and ">="
    held; now the interval must clear the boundary strictly and the test must reject it."""
    a, b = _paired(200, only_a=3, only_b=0)
    claim = Claim.measured("§x", "a at least b", "fixture", "points", accuracy_difference(a, b), expect=">=")
    assert claim.verdict == "inconclusive" and claim.p == pytest.approx(0.25)
    # an interval that is the point 0 (no discordant question) proves nothing either way
    assert verdict(Estimate(0.0, 0.0, 0.0, 200, "m"), ">=", 0.0) == "inconclusive"


def test_at_least_claims_read_their_margin():
    """ ">= t" with margin δ: holds when the whole interval is above t − δ, fails when it is all below,
    else inconclusive (docs/evaluation.md). The old `Claim.measured` took no margin."""
    near_zero = Estimate(-0.2, -0.5, 0.3, 100, "m")
    assert Claim.measured("§x", "s", "", "", near_zero, ">=", margin=0.0).verdict == "inconclusive"
    assert Claim.measured("§x", "s", "", "", near_zero, ">=", margin=1.0).verdict == "holds"
    below = Estimate(-2.5, -3.0, -2.0, 100, "m")
    claim = Claim.measured("§x", "s", "", "", below, ">=", margin=1.0)
    assert claim.verdict == "fails" and claim.margin == 1.0
    assert (
        Claim.measured("§x", "s", "", "", Estimate(2.5, 2.0, 3.0, 100, "m"), "<=", 1.0, margin=0.5).verdict == "fails"
    )
    assert "margin" in claims_module.CLAIM_COLUMNS
    with pytest.raises(ValueError, match="margin"):
        verdict(near_zero, ">", 0.0, margin=1.0)


def test_the_engine_never_holds_while_the_matching_test_does_not_reject():
    """An interval off 0 whose test says p ≥ 0.05 is inconclusive (the old Estimate had no test)."""
    est = Estimate(0.15, 0.1, 0.2, 100, "m", test=lambda null: 0.2)
    assert verdict(est, ">") == "inconclusive"
    assert verdict(Estimate(0.15, 0.1, 0.2, 100, "m", test=lambda null: 0.01), ">") == "holds"


def test_comparisons_give_the_exact_interval_and_its_p():
    """comparisons.csv: b = 4, c = 0 on 200 questions is inconclusive with p = 0.125 (the old table
    said "better", its interval [0.5, 4.0] and a McNemar p that disagreed with it)."""
    a, b = _paired(200, only_a=4, only_b=0, both=30)
    rows = [
        {"dataset": "arith", "question_id": f"q{i}", "agent": agent, "sample": 0, "correct": bool(c)}
        for agent, correct in (("t", a), ("c", b))
        for i, c in enumerate(correct)
    ]
    row = comparison_table({"x": {"treatment": "t", "control": "c"}}, pd.DataFrame(rows), None).iloc[0]
    assert (row["low"], row["high"]) == pytest.approx(_conditional_interval(4, 0, 200), rel=1e-9)
    assert row["p"] == pytest.approx(0.125) and row["verdict"] == "inconclusive"


def test_a_margin_on_paired_correctness_is_judged_by_the_score_interval():
    """SDRL's "no drop of 2 points or more" on 200 questions, b = 0, c = 2: the conditional interval
    holds the 2 discordant questions fixed, so it could not reach −2 points and the claim "held" with
    p = 0. Judged at −2 points, Tango's score interval (the share of discordant questions free) is
    [−3.57, 0.90] points (`_score_interval_by_search`): it covers −2, and its score test doesn't reject."""
    a, b = _paired(200, only_a=0, only_b=2)
    claim = Claim.measured("§x", "no drop", "fixture", "points", accuracy_difference(a, b), ">=", margin=2.0)
    assert (claim.low, claim.high) == pytest.approx(100 * np.array(_score_interval_by_search(0, 2, 200)), abs=1e-4)
    assert claim.low < -2 < claim.high and claim.verdict == "inconclusive"
    assert claim.p == pytest.approx(2 * stats.norm.sf(abs(_score_by_likelihood(0, 2, 200, -0.02))), rel=1e-6)
    assert "Tango" in claim.interval
    # at 0 the same comparison keeps the exact conditional interval and McNemar's p
    at_zero = Claim.measured("§x", "a beats b", "fixture", "points", accuracy_difference(a, b))
    assert (at_zero.low, at_zero.high) == pytest.approx(_conditional_interval(0, 2, 200), rel=1e-9)
    assert at_zero.p == pytest.approx(stats.binomtest(0, 2, 0.5).pvalue)


def test_no_discordant_question_proves_no_margin():
    """b = c = 0 on 20 questions: the conditional interval is the point 0, so "≥ −2 points" held with
    p = 0. The score interval is ±z²/(n + z²) (the score statistic is −sqrt(n·d / (1 − d)) at d > 0),
    ±16.1 points here: inconclusive."""
    a, b = _paired(20, only_a=0, only_b=0, both=10)
    claim = Claim.measured("§x", "no drop", "fixture", "points", accuracy_difference(a, b), ">=", margin=2.0)
    z2 = stats.norm.ppf(0.975) ** 2
    assert (claim.low, claim.high) == pytest.approx((-100 * z2 / (20 + z2), 100 * z2 / (20 + z2)), rel=1e-8)
    assert claim.verdict == "inconclusive" and claim.p > 0.05


def test_at_a_boundary_other_than_zero_the_interval_leaves_it_out_exactly_when_the_score_test_rejects():
    """On a grid of (b, c) on 60 questions and boundaries from −20 to +20 points, the judged interval
    excludes the boundary exactly when its p < 0.05, and its ends are the score interval found with
    the likelihood maximised numerically."""
    disagreements, far = [], []
    for b in range(0, 9):
        for c in range(0, 9):
            est = intervals.paired_counts_difference(b, c, 60)
            for bound in (-0.2, -0.05, -0.02, 0.02, 0.05, 0.2):
                judged = est.at_boundary(bound)
                if (judged.low > bound or judged.high < bound) != (judged.p_value(bound) < 0.05):
                    disagreements.append((b, c, bound))
            by_search = _score_interval_by_search(b, c, 60)
            judged = est.at_boundary(0.05)
            if abs(judged.low - by_search[0]) > 1e-6 or abs(judged.high - by_search[1]) > 1e-6:
                far.append((b, c, judged.low, judged.high, by_search))
    assert disagreements == [] and far == []


# --------------------------------------------------------------------------- proportions


def test_a_proportion_is_clopper_pearson_with_the_exact_binomial_test():
    est = intervals.proportion(7, 20)
    ci = stats.binomtest(7, 20).proportion_ci(0.95, method="exact")
    assert (est.low, est.high) == pytest.approx((ci.low, ci.high))
    # at 1/2 the binomial distribution is symmetric: twice the smaller tail is scipy's two-sided p
    assert est.p_value(0.5) == pytest.approx(stats.binomtest(7, 20, 0.5).pvalue)


# --------------------------------------------------------------------------- bootstrap (BCa)


def test_a_mean_is_the_bca_interval_of_scipy_bootstrap():
    """The same resamples (seed 0, 2000) as scipy.stats.bootstrap(method="BCa") give its interval
    (the old code took percentiles)."""
    x = np.random.default_rng(3).exponential(size=60)
    est = intervals.mean_estimate(x)
    ref = stats.bootstrap((x,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(0))
    assert (est.low, est.high) == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), rel=1e-9)
    assert "BCa" in est.method and est.value == pytest.approx(x.mean())
    # the p-value inverts that interval: 0 is far below every resample, the mean's true value is not
    assert est.p_value(0.0) < 0.001 and est.p_value(1.0) > 0.05


def test_a_correlation_cohens_d_and_a_slope_are_bca_over_rows():
    """Pearson r, Cohen's d (rows drawn with their group) and the OLS slope, each against
    scipy.stats.bootstrap(paired=True, method="BCa") of the same statistic (old: Fisher z, the
    Hedges-Olkin normal interval and the t interval)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=40)
    y = 0.6 * x + rng.normal(size=40)

    def scipy_bca(statistic, *data):
        res = stats.bootstrap(data, statistic, paired=True, vectorized=False, n_resamples=2000, method="BCa", rng=0)
        return res.confidence_interval.low, res.confidence_interval.high

    r = intervals.correlation(x, y)
    assert r.value == pytest.approx(stats.pearsonr(x, y).statistic)
    assert (r.low, r.high) == pytest.approx(scipy_bca(lambda a, b: stats.pearsonr(a, b).statistic, x, y), rel=1e-7)

    group = x > 0

    def d_of(values, in_group):
        g1, g0 = values[in_group > 0.5], values[in_group < 0.5]
        pooled = ((g1.size - 1) * g1.var(ddof=1) + (g0.size - 1) * g0.var(ddof=1)) / (g1.size + g0.size - 2)
        return (g1.mean() - g0.mean()) / math.sqrt(pooled)

    d = intervals.cohens_d(y[group], y[~group])
    rows = np.concatenate([y[group], y[~group]])  # group 1's rows first, as cohens_d stacks them
    labels = np.concatenate([np.ones(group.sum()), np.zeros((~group).sum())])
    assert d.value == pytest.approx(d_of(rows, labels))
    assert (d.low, d.high) == pytest.approx(scipy_bca(d_of, rows, labels), rel=1e-7)

    s = intervals.slope(x, y, unit="steps")
    assert s.value == pytest.approx(stats.linregress(x, y).slope)
    assert (s.low, s.high) == pytest.approx(scipy_bca(lambda a, b: stats.linregress(a, b).slope, x, y), rel=1e-7)


def test_bca_falls_back_to_percentile_on_constant_data_and_says_so():
    """Constant data: the jackknife has no spread, BCa's acceleration is 0/0 (scipy returns NaN);
    the percentile interval is the point, and the method names the fallback (the old method string
    named no BCa)."""
    est = intervals.mean_estimate(np.full(20, 0.3))
    assert (est.value, est.low, est.high) == pytest.approx((0.3, 0.3, 0.3))
    assert "percentile" in est.method and "BCa undefined" in est.method


def test_resamples_equal_in_exact_arithmetic_tie_in_floats_whatever_order_their_sums_took():
    """Sums of tenths or thirds land a few ulps off an exact fraction, depending on their order, so
    BCa's bias correction counted a resample equal to the value as below or above it, and the p-value
    a replicate equal to the null 0 as a hair off it. Rounded to 12 significant digits of the
    statistic's scale, the bootstrap on floats is the bootstrap on the same numbers as integers
    (exact sums). Before: tenths gave a low end of 0.1619 against 0.1643; thirds a low end of
    1.1e-17 and p = 0.037 (a difference that "holds") against 0 and p = 0.052 (inconclusive)."""
    tenths = np.array([1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 2, 2])
    floats = intervals.bootstrap(lambda i: (tenths / 10)[i].sum(axis=-1) / 14, 14, vectorized=True)
    exact = intervals.bootstrap(lambda i: tenths[i].sum(axis=-1) / 140, 14, vectorized=True)
    assert floats.value == pytest.approx(0.2) and (floats.low, floats.high) == pytest.approx((exact.low, exact.high))
    assert floats.p_value(0.17) == pytest.approx(exact.p_value(0.17))
    a, b = np.array([1, 2, 2, 3, 2, 2, 2, 2, 3, 1]), np.array([2, 1, 0, 0, 1, 1, 2, 2, 1, 2])
    thirds, whole = intervals.paired_difference(a / 3, b / 3), intervals.paired_difference(a, b)
    assert (thirds.low, thirds.high) == pytest.approx((whole.low / 3, whole.high / 3)) and thirds.low == 0.0
    assert thirds.p == pytest.approx(whole.p) and thirds.p > 0.05


def test_too_few_units_give_no_interval():
    """Below MIN_UNITS units a bootstrapped statistic is "n/a (too few)", its value kept (the old
    bootstrap gave an interval from 2 units up)."""
    from debatelab.evaluation.claims import TOO_FEW
    from debatelab.intervals import MIN_UNITS

    assert MIN_UNITS == 10
    few = intervals.mean_estimate(np.arange(MIN_UNITS - 1, dtype=float))
    claim = Claim.measured("§x", "s", "", "mean", few, ">")
    assert claim.verdict == TOO_FEW and claim.value == pytest.approx(4.0) and math.isnan(claim.low)
    enough = intervals.mean_estimate(np.arange(MIN_UNITS, dtype=float))
    assert enough.finite and verdict(enough, ">") == "holds"
    # exact tests need no minimum: 3 of 3 discordant questions in one direction (p = 0.25)
    a, b = _paired(3, only_a=3, only_b=0)
    assert verdict(accuracy_difference(a, b), ">") == "inconclusive"


def test_a_bootstrap_p_is_below_005_exactly_when_the_bca_interval_leaves_the_null_out():
    """Per-question means of 3 samples are discrete, so replicates tie and an interval end can land
    on 0 exactly. The p used to be a mid-rank share of replicates, not the inverse of scipy's linear
    quantile ends: on 10 questions whose interval's low end was 0.0 (not excluded) p was 0.0396. Over
    200 random discrete datasets, at 0 and at 0.1, the two now agree every time."""
    a = np.array([3, 3, 1, 2, 2, 0, 3, 3, 3, 1]) / 3
    b = np.array([0, 2, 1, 1, 3, 0, 0, 3, 2, 2]) / 3
    est = intervals.paired_difference(a, b)
    assert est.low == 0.0 and est.p >= 0.05
    rng = np.random.default_rng(11)
    disagreements = []
    for _ in range(200):
        n = int(rng.integers(10, 30))
        a, b = rng.binomial(3, 0.55, n) / 3, rng.binomial(3, 0.45, n) / 3
        est = intervals.paired_difference(a, b)
        for null in (0.0, 0.1):
            if (est.low > null or est.high < null) != (est.p_value(null) < 0.05):
                disagreements.append((n, null, est.low, est.high, est.p_value(null)))
    assert disagreements == []


def test_a_difference_every_unit_agrees_on_has_the_sign_tests_p_not_zero():
    """20 questions each +1: no resample varies, the interval is the point (as the sign test's
    interval of the median is), and p is the exact sign test's 2 · 0.5²⁰, where it was 0."""
    est = intervals.paired_difference(np.ones(20), np.zeros(20))
    assert (est.low, est.high) == (1.0, 1.0)
    assert est.p == pytest.approx(stats.binomtest(20, 20, 0.5).pvalue)
    assert intervals.paired_difference(np.ones(20), np.ones(20)).p == 1.0


# --------------------------------------------------------------------------- Holm


def test_holm_adjusts_over_the_papers_claims():
    """By hand, p = (0.01, 0.04, 0.03, 0.005): sorted 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06,
    0.04·1 = 0.04 → made non-decreasing 0.06; so adjusted (0.03, 0.06, 0.06, 0.02). The claims with
    0.04 and 0.03 held alone and don't survive; a claim without a p (untestable) is not counted."""
    from debatelab.evaluation.claims import HOLM_INCONCLUSIVE, holm

    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    claims = [Claim("§1", "s", verdict="holds", p=p) for p in (0.01, 0.04, 0.03, 0.005)]
    claims.append(Claim.untestable("§2", "s", "no run"))
    frame = claims_frame(claims)
    assert frame["p_holm"].iloc[:4].tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert math.isnan(frame["p_holm"].iloc[4])
    assert frame["verdict_holm"].tolist() == ["holds", HOLM_INCONCLUSIVE, HOLM_INCONCLUSIVE, "holds", "n/a"]


def test_sdrl_single_agent_accuracy_with_one_sample_is_paired_correctness():
    """SDRL's claim sdrl-8 "no single-agent drop against DAPO" with one agent and one sample per question on
    each side is paired correctness. The toy run's sample 0: SDRL right on q1 only, DAPO on q2 only,
    so b = c = 1 of n = 2: Clopper-Pearson of 1/2 mapped by 100 · (2/2)(2p − 1), McNemar p = 1 (the
    old bootstrap resampled the two per-question differences, +100 and −100)."""
    from test_evaluation_sdrl import TOY, claims_of, make_outputs

    from debatelab.evaluation.papers import sdrl

    outputs = make_outputs()
    zero_shot = outputs.zero_shot
    outputs.__dict__["zero_shot"] = zero_shot[zero_shot["sample"] == 0].reset_index(drop=True)
    single = [
        c for c in claims_of(sdrl.evaluate(outputs), "sdrl-8") if "single-agent" in c.statement and c.scope == TOY
    ][0]
    assert single.value == pytest.approx(0.0) and "Tango" in single.interval and "2 discordant" in single.interval
    # its boundary is −2 points (the margin), not 0: Tango's score interval
    assert (single.low, single.high) == pytest.approx(100 * np.array(_score_interval_by_search(1, 1, 2)), abs=1e-4)
    assert single.p > 0.05 and single.verdict == "inconclusive" and single.margin == 2.0


def test_a_clustered_interval_does_not_depend_on_the_order_of_the_rows():
    rng = np.random.default_rng(7)
    questions = np.repeat([f"q{i:02d}" for i in range(15)], 3)
    values = rng.normal(size=45) + np.repeat(rng.normal(size=15), 3)
    order = rng.permutation(45)
    one = intervals.mean_estimate(values, clusters=questions)
    shuffled = intervals.mean_estimate(values[order], clusters=questions[order])
    assert (shuffled.low, shuffled.high) == pytest.approx((one.low, one.high), rel=1e-12)
    assert shuffled.p == pytest.approx(one.p, rel=1e-9)
