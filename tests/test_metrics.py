"""Shared metrics (Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5) against hand-worked values."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import f1_score

from debatelab import metrics as M
from debatelab.probability import EPSILON


def _naive_auarc(confidence, correct, seed):
    """Loop version of Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5 for cross-checking the cumsum one."""
    c, z = np.asarray(confidence, float), np.asarray(correct, float)
    idx = np.arange(c.size)
    if seed is not None:
        idx = np.random.default_rng(seed).permutation(c.size)
    order = sorted(idx, key=lambda i: -c[i])  # Python's sort is stable
    return float(np.mean([z[order[:k]].mean() for k in range(1, c.size + 1)]))


def test_auarc_hand_worked():
    c, z = [0.9, 0.8, 0.7, 0.6], [1, 0, 1, 0]
    expected = (1 + 1 / 2 + 2 / 3 + 2 / 4) / 4
    assert M.auarc(c, z) == pytest.approx(expected)
    # the input order does not matter without ties
    assert M.auarc(c[::-1], z[::-1], seed=5) == pytest.approx(expected)
    coverage, acc = M.accuracy_rejection_curve(c, z)
    np.testing.assert_allclose(coverage, [0.25, 0.5, 0.75, 1.0])
    np.testing.assert_allclose(acc, [1, 1 / 2, 2 / 3, 2 / 4])


def test_auarc_ties_are_broken_reproducibly_by_seed():
    c, z = [0.5, 0.5, 0.5, 0.5], [1, 0, 0, 0]
    assert M.auarc(c, z, seed=3) == M.auarc(c, z, seed=3)
    # the correct item can land anywhere among the ties, so seeds disagree
    values = {M.auarc(c, z, seed=s) for s in range(20)}
    assert len(values) > 1
    assert values <= {
        (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4,
        (0 + 1 / 2 + 1 / 3 + 1 / 4) / 4,
        (0 + 0 + 1 / 3 + 1 / 4) / 4,
        (0 + 0 + 0 + 1 / 4) / 4,
    }
    # seed=None keeps the input order among ties
    assert M.auarc(c, z, seed=None) == pytest.approx((1 + 1 / 2 + 1 / 3 + 1 / 4) / 4)
    assert M.auarc(c, z[::-1], seed=None) == pytest.approx((0 + 0 + 0 + 1 / 4) / 4)


def test_auarc_ties_within_one_correctness_class_do_not_matter():
    c, z = [0.9, 0.5, 0.5, 0.1], [1, 1, 1, 0]
    for seed in [None, *range(10)]:
        assert M.auarc(c, z, seed=seed) == pytest.approx((1 + 1 + 1 + 3 / 4) / 4)


@pytest.mark.parametrize("seed", [None, 0, 1, 42])
def test_auarc_matches_loop_reference_with_ties(seed):
    rng = np.random.default_rng(0)
    c = rng.integers(0, 5, 60) / 4  # many ties
    z = rng.integers(0, 2, 60)
    assert M.auarc(c, z, seed=seed) == pytest.approx(_naive_auarc(c, z, seed), abs=1e-12)


def test_ece_count_and_uniform_weighting_two_bins():
    # bin [0, .5): conf .1 .3 .2 (mean .2), acc 1/3, gap 2/15
    # bin [.5, 1]: conf .8 1.0 (mean .9), acc 1, gap 1/10 — 1.0 must land here
    c = [0.1, 0.3, 0.2, 0.8, 1.0]
    z = [0, 1, 0, 1, 1]
    assert M.ece(c, z, bins=2, weighting="count") == pytest.approx(3 / 5 * 2 / 15 + 2 / 5 * 1 / 10)
    assert M.ece(c, z, bins=2, weighting="uniform") == pytest.approx((2 / 15 + 1 / 10) / 2)
    assert M.ece(c, z, bins=2) == pytest.approx(0.12)


def test_ece_uniform_ignores_empty_bins_and_one_lands_in_last_bin():
    assert M.ece([1.0], [1], bins=10, weighting="uniform") == pytest.approx(0.0)
    assert M.ece([1.0, 0.05], [0, 0], bins=10, weighting="uniform") == pytest.approx((1.0 + 0.05) / 2)
    table = M.reliability_table([1.0, 0.95, 0.0], [1, 1, 0], bins=10)
    assert table["count"].tolist() == [1] + [0] * 8 + [2]


def test_ece_perfectly_calibrated_bins_is_zero():
    assert M.ece([0.25] * 4 + [0.75] * 4, [1, 0, 0, 0, 1, 1, 1, 0], bins=2) == pytest.approx(0.0)


def test_nll_of_confident_wrong_answer_is_finite():
    value = M.nll([1.0], [0])
    assert math.isfinite(value)
    assert value == pytest.approx(-math.log(EPSILON))
    assert M.nll([0.0, 1.0], [0, 1]) == pytest.approx(-math.log(1 - EPSILON))
    assert M.nll([0.8, 0.4], [1, 0]) == pytest.approx(-(math.log(0.8) + math.log(0.6)) / 2)


def test_brier():
    assert M.brier([0.9, 0.2, 1.0], [1, 0, 0]) == pytest.approx((0.01 + 0.04 + 1.0) / 3)


def test_accuracy_and_bool_inputs():
    assert M.accuracy([True, False, True, True]) == 0.75
    assert M.brier([1.0, 0.0], [True, False]) == 0.0


def test_weighted_f1_maps_missing_predictions_to_invalid():
    gold = ["yes", "no", "no", "yes", "maybe", 1]
    pred = ["yes", None, "no", float("nan"), "maybe", 1]
    expected = f1_score(
        ["yes", "no", "no", "yes", "maybe", "1"],
        ["yes", "invalid", "no", "invalid", "maybe", "1"],
        average="weighted",
        zero_division=0,
    )
    assert M.weighted_f1(gold, pred) == pytest.approx(expected)
    assert M.weighted_f1(gold, pred) < 1.0
    assert M.weighted_f1(["a", "b"], ["a", "b"]) == 1.0


def test_auroc():
    assert M.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    assert math.isnan(M.auroc([0.1, 0.9], [1, 1]))
    assert math.isnan(M.auroc([0.1, 0.9], [0, 0]))


def test_empty_inputs_give_nan():
    for value in (
        M.accuracy([]),
        M.weighted_f1([], []),
        M.auarc([], []),
        M.auroc([], []),
        M.ece([], []),
        M.ece([], [], weighting="uniform"),
        M.brier([], []),
        M.nll([], []),
    ):
        assert math.isnan(value)
    summary = M.summarize([], [], [], [])
    assert summary["n"] == 0
    assert all(math.isnan(v) for k, v in summary.items() if k != "n")
    coverage, acc = M.accuracy_rejection_curve([], [])
    assert coverage.size == 0 and acc.size == 0
    assert M.reliability_table([], [])["count"].sum() == 0


@pytest.mark.parametrize(
    "call",
    [
        lambda: M.auarc([0.1, 0.2], [1]),
        lambda: M.auroc([0.1], [1, 0]),
        lambda: M.ece([0.1, 0.2], [1]),
        lambda: M.brier([0.1], [1, 0]),
        lambda: M.nll([0.1], [1, 0]),
        lambda: M.reliability_table([0.1], [1, 0]),
        lambda: M.weighted_f1(["a"], ["a", "b"]),
        lambda: M.summarize(["a"], ["a"], [1, 0], [0.1, 0.2]),
    ],
)
def test_mismatched_lengths_raise(call):
    with pytest.raises(ValueError, match="same length"):
        call()


def test_bad_values_raise():
    with pytest.raises(ValueError, match="confidence must lie in"):
        M.ece([1.2], [1])
    with pytest.raises(ValueError, match="confidence must lie in"):
        M.auarc([np.nan], [1])
    with pytest.raises(ValueError, match="correct must be"):
        M.accuracy([0, 2])
    with pytest.raises(ValueError, match="weighting"):
        M.ece([0.5], [1], weighting="l2")
    with pytest.raises(ValueError, match="bins"):
        M.ece([0.5], [1], bins=0)


def test_reliability_table():
    rng = np.random.default_rng(1)
    c, z = rng.uniform(0, 1, 257), rng.integers(0, 2, 257)
    table = M.reliability_table(c, z, bins=8)
    assert list(table.columns) == ["bin_lower", "bin_upper", "count", "mean_confidence", "accuracy"]
    assert len(table) == 8 and table["count"].sum() == 257
    np.testing.assert_allclose(table["bin_lower"], np.arange(8) / 8)
    np.testing.assert_allclose(table["bin_upper"], np.arange(1, 9) / 8)
    full = table[table["count"] > 0]
    ece = (full["count"] / 257 * (full["accuracy"] - full["mean_confidence"]).abs()).sum()
    assert M.ece(c, z, bins=8) == pytest.approx(ece)
    empty = M.reliability_table([0.05], [1], bins=4)
    assert empty["count"].tolist() == [1, 0, 0, 0]
    assert empty.loc[1:, ["mean_confidence", "accuracy"]].isna().all().all()


def test_summarize_collects_every_metric():
    gold = ["a", "b", "a", "b"]
    pred = ["a", "b", "b", None]
    correct = [True, True, False, False]
    conf = [0.9, 0.6, 0.7, 0.2]
    s = M.summarize(gold, pred, correct, conf, bins=5, weighting="uniform", seed=3)
    assert set(s) == {"accuracy", "f1", "auarc", "auroc", "ece", "brier", "nll", "n"}
    assert s["n"] == 4 and s["accuracy"] == 0.5
    assert s["f1"] == pytest.approx(M.weighted_f1(gold, pred))
    assert s["auarc"] == pytest.approx(M.auarc(conf, correct, seed=3))
    assert s["ece"] == pytest.approx(M.ece(conf, correct, bins=5, weighting="uniform"))
    assert s["auroc"] == pytest.approx(0.75)
    assert s["brier"] == pytest.approx(M.brier(conf, correct))
    assert s["nll"] == pytest.approx(M.nll(conf, correct))
