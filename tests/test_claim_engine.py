"""claim_engine (issue 43 part 2): a claim is a ClaimSpec row, and the engine picks the interval from
the row's statistic family and the per-unit data, so the exact-test rules, MIN_UNITS, margins and
Holm hold for every paper by construction. Values here are worked out by hand or with scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from debatelab.evaluation.claim_engine import (
    DIFFERENCE,
    EXACT,
    MEAN,
    PAIRED_ACCURACY,
    PROPORTION,
    Case,
    ClaimSpec,
    Exact,
    For,
    Missing,
    Outcomes,
    Resampled,
    Rows,
    Shares,
    Untestable,
    evaluate_claims,
    only,
)
from debatelab.evaluation.claims import TOO_FEW, claims_frame


def _spec(family=PAIRED_ACCURACY, cases=None, **kw) -> ClaimSpec:
    return ClaimSpec("x-1", "a beats b", family, cases or (lambda c: [c]), "acc(a) − acc(b)", source="X §1", **kw)


def _one_outcome_shares(only_a: int, only_b: int, both: int, neither: int) -> Shares:
    a = [1] * only_a + [0] * only_b + [1] * both + [0] * neither
    b = [0] * only_a + [1] * only_b + [1] * both + [0] * neither
    ones = np.ones(len(a))
    return Shares(np.array(a, float), ones, np.array(b, float), ones, scale=100)


def test_one_outcome_per_question_is_paired_correctness_with_its_exact_mcnemar_test():
    """b = 4, c = 0 of 200 questions: a difference of 2 points whose exact McNemar p is 0.125; the
    engine takes the exact interval, which covers 0: inconclusive, never holds."""
    spec = ClaimSpec(
        "x-1", "a beats b on {where}", PAIRED_ACCURACY, lambda c: [c], "acc(a) − acc(b), points", source="X §1"
    )
    claims = evaluate_claims([spec], [Case("gsm8k", _one_outcome_shares(4, 0, 100, 96), {"where": "gsm8k"})])
    row = claims_frame(claims).iloc[0]
    assert row["statement"] == "a beats b on gsm8k"
    assert row["value"] == pytest.approx(2.0) and row["n"] == 200
    assert row["p"] == pytest.approx(stats.binomtest(4, 4, 0.5).pvalue) == pytest.approx(0.125)
    assert row["low"] < 0 < row["high"] and row["verdict"] == "inconclusive"
    assert row["interval"].startswith("exact interval conditional on the 4 discordant of 200 questions")


def test_a_clear_gain_holds_and_a_reversed_one_fails():
    gain = evaluate_claims([_spec()], [Case("x", _one_outcome_shares(30, 2, 50, 18))])[0]
    loss = evaluate_claims([_spec()], [Case("x", _one_outcome_shares(2, 30, 50, 18))])[0]
    assert gain.verdict == "holds" and gain.value == pytest.approx(28.0)
    assert loss.verdict == "fails" and loss.value == pytest.approx(-28.0)
    assert gain.p == pytest.approx(stats.binomtest(30, 32, 0.5).pvalue)


def test_several_answers_per_question_go_to_the_sign_flip_test():
    """Two threads a question: each question's difference is +0.5, so the paired sign-flip test over
    the 20 questions (Monte Carlo beyond 16: p = 2 · 1 / 10,000, twice the tail of the observed
    pattern only)."""
    hits_a, hits_b, counts = np.array([2.0, 1.0] * 10), np.array([1.0, 0.0] * 10), np.full(20, 2.0)
    row = evaluate_claims([_spec()], [Case("x", Shares(hits_a, counts, hits_b, counts, scale=100))])[0]
    assert row.value == pytest.approx(50.0) and row.n == 20 and row.verdict == "holds"
    assert row.interval.startswith("paired sign-flip test over questions") and row.p == pytest.approx(2 / 10_000)


def test_several_threads_agreeing_on_four_questions_do_not_hold():
    """The issue's case: 4 of 100 questions differ, all one way, each with 5 threads that agree. The
    clustered bootstrap said holds, p = 0.007; the sign-flip test over questions gives the exact
    test's 2/16 = 0.125 and inconclusive, as the exact McNemar test on the 4 questions does."""
    counts = np.full(100, 5.0)
    hits_a = np.r_[np.full(4, 5.0), np.full(48, 5.0), np.zeros(48)]
    hits_b = np.r_[np.zeros(4), np.full(48, 5.0), np.zeros(48)]
    row = evaluate_claims([_spec()], [Case("x", Shares(hits_a, counts, hits_b, counts, scale=100))])[0]
    assert row.value == pytest.approx(4.0) and row.p == pytest.approx(0.125) and row.verdict == "inconclusive"
    assert row.low < 0 < row.high


def test_a_boundary_other_than_zero_goes_to_the_bootstrap():
    """The sign-flip interval is conditional on the informative questions, sound at 0 only: a margin
    is judged by the clustered bootstrap of the pooled difference."""
    counts = np.full(40, 3.0)
    hits_a, hits_b = np.tile([3.0, 2.0, 1.0, 0.0], 10), np.tile([2.0, 2.0, 1.0, 1.0], 10)
    spec = _spec(expect=">=", margin=2.0, margin_reason="[CHOICE] test")
    row = evaluate_claims([spec], [Case("x", Shares(hits_a, counts, hits_b, counts, scale=100))])[0]
    assert row.value == pytest.approx(0.0) and "bootstrap" in row.interval


def test_an_average_over_datasets_is_tested_with_its_weights():
    """Two datasets of 10 and 30 questions, one thread: the statistic is the mean of the datasets'
    differences (+0.5 and 0), not the pooled +0.125, and the sign-flip test weights each question by
    1/(2 · its dataset's questions)."""
    ones = np.ones(40)
    hits_a, hits_b = np.ones(40), np.r_[np.tile([1.0, 0.0], 5), np.ones(30)]
    data = Shares(hits_a, ones, hits_b, ones, exact_allowed=False, groups=np.r_[np.zeros(10), np.ones(30)])
    row = evaluate_claims([_spec()], [Case("x", data)])[0]
    assert row.value == pytest.approx(0.25) and "sign-flip" in row.interval
    assert row.p == pytest.approx(2 / 32)  # 5 informative questions of equal weight, all one way


def test_a_statistic_that_is_not_the_plain_difference_is_never_exact():
    ones = np.ones(20)
    data = Shares(np.ones(20), ones, np.zeros(20), ones, exact_allowed=False)
    row = evaluate_claims([_spec()], [Case("x", data)])[0]
    assert "bootstrap" in row.interval


def test_few_units_give_no_interval():
    data = Resampled(lambda i: float(np.mean(np.arange(5.0)[i])), 5)
    row = evaluate_claims([_spec(MEAN)], [Case("x", data)])[0]
    assert row.verdict == TOO_FEW and row.value == 2.0 and math.isnan(row.low)
    assert "5 units: an interval needs at least 10" in row.detail


def test_a_non_inferiority_row_states_its_margin_and_its_reason():
    with pytest.raises(ValueError, match="margin's reason"):
        _spec(expect=">=")
    with pytest.raises(ValueError, match="margin belongs"):
        _spec(expect=">", margin=1.0)
    with pytest.raises(ValueError, match="unknown statistic family"):
        _spec("median")
    """≥ 0 within 2 points on a difference indistinguishable from 0 (b = c = 3 of 100): the interval
    reaches below −2, so it does not hold."""
    spec = _spec(expect=">=", margin=2.0, margin_reason="[CHOICE] test")
    row = evaluate_claims([spec], [Case("x", _one_outcome_shares(3, 3, 50, 44))])[0]
    assert row.value == 0.0 and row.margin == 2.0 and row.low < -2 and row.verdict == "inconclusive"


def test_a_family_takes_only_its_kinds_of_data():
    with pytest.raises(TypeError, match="paired accuracy difference"):
        evaluate_claims([_spec()], [Case("x", Rows([1.0, 2.0]))])


def test_proportion_exact_and_missing():
    outcome = evaluate_claims([_spec(PROPORTION)], [Case("x", Outcomes([True] * 9 + [False]))])[0]
    ci = stats.binomtest(9, 10).proportion_ci(0.95, method="exact")
    assert (outcome.value, outcome.low, outcome.high) == pytest.approx((0.9, ci.low, ci.high))
    bound = _spec(EXACT, expect="<=", threshold=1e-9, margin_reason="an identity")
    exact, missing = evaluate_claims([bound], [Case("x", Exact(0.0, 7)), Case("y", Missing(0), detail="no row")])
    assert exact.verdict == "holds" and exact.n == 7 and math.isnan(exact.p)
    assert missing.verdict == "n/a" and missing.detail == "no row"


def test_contexts_in_order_untestable_rows_passed_through_and_cases_routed_by_key():
    with pytest.raises(ValueError, match="needs the case's field 'where'"):
        evaluate_claims(
            [ClaimSpec("x-1", "on {where}", MEAN, lambda c: [c], source="X §1")], [Case("x", Rows(np.ones(3)))]
        )
    specs = [
        ClaimSpec("x-1", "a beats b on {where}", DIFFERENCE, only("first"), "d", scale=100, source="X §4.3, Table 3"),
        ClaimSpec("x-2", "second", DIFFERENCE, only("second"), "d", source="X App. B, Figure 7"),
    ]
    rows = Rows(np.linspace(1, 2, 12), np.linspace(0, 1, 12)[::-1])  # differences 0 to 2, mean 1
    contexts = [
        Untestable("no such protocol", "s0", claim="x-1..2", statement="skipped", source="X §4.3, App. B"),
        For("second", Case("s1", rows)),
        For("first", Case("s2", rows, {"where": "here"}, detail=lambda e: f"n = {e.n}")),
        For("first", Untestable("no debate", "s3", {"where": "there"})),
        Untestable("no second protocol", "s4", claim="x-2", statement="second"),
    ]
    claims = evaluate_claims(specs, contexts)
    assert [(c.claim, c.scope, c.verdict) for c in claims] == [
        ("x-1..2", "s0", "n/a"),
        ("x-2", "s1", "holds"),
        ("x-1", "s2", "holds"),
        ("x-1", "s3", "n/a"),
        ("x-2", "s4", "n/a"),
    ]
    # every row names where the paper states it: the spec's source, or the untestable context's own
    # (else that of the spec of its id)
    assert [c.source for c in claims] == [
        "X §4.3, App. B",
        "X App. B, Figure 7",
        "X §4.3, Table 3",
        "X §4.3, Table 3",
        "X App. B, Figure 7",
    ]
    assert list(claims_frame(claims).columns[:3]) == ["claim", "source", "statement"]
    assert claims[0].detail == "no such protocol" and claims[3].statement == "a beats b on there"
    assert claims[2].statement == "a beats b on here"
    assert claims[2].detail == "n = 12" and claims[2].value == pytest.approx(100 * claims[1].value)


def test_every_row_names_where_its_paper_states_the_claim():
    with pytest.raises(ValueError, match="source"):
        ClaimSpec("x-1", "a beats b", DIFFERENCE, lambda c: [c], "d")
    with pytest.raises(ValueError, match="source"):
        evaluate_claims([_spec()], [Untestable("no run", claim="x-3", statement="other")])


def test_the_sign_flip_interval_with_one_outcome_per_question_is_mcnemars():
    """d = ±1 on b + c ≤ 16 discordant questions of 50 (all sign patterns): the sign-flip p is the
    exact McNemar p and its conditional interval the Clopper-Pearson one mapped by (m/n)(2π − 1)."""
    from debatelab.intervals import paired_counts_difference, sign_flip_difference

    for b in range(9):
        for c in range(8):
            d = np.r_[np.ones(b), -np.ones(c), np.zeros(50 - b - c)]
            flip, exact = sign_flip_difference(d), paired_counts_difference(b, c, 50)
            assert flip.p == pytest.approx(exact.p, abs=1e-12), (b, c)
            assert (flip.low, flip.high) == pytest.approx((exact.low, exact.high), abs=1e-6), (b, c)
