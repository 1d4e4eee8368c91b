"""debatelab.diagnostics: failure-vs-success statistics and selective prediction (Tang et al., arXiv:2602.07186 §3, §5, App. B).

Expected numbers are worked out by hand in the comment next to them; p-values come from
the t distribution (scipy.stats.t) with hand-computed t and degrees of freedom, not from
the test functions the code calls.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from debatelab.io import save_figure_atomic
from debatelab.metrics import (
    FAILURE_DIAGNOSTIC_COLUMNS,
    cohens_d,
    failure_diagnostics,
    paired_t_greater,
    selective_prediction,
    welch_t,
)
from debatelab.reporting.uncertainty import plot_selective_prediction

# --------------------------------------------------------------------------- Welch t


def test_welch_t_matches_hand_computation():
    # a = 1,2,3,4: mean 2.5, s² = 5/3, s²/n = 0.416667
    # b = 2,4,6,8,10: mean 6, s² = 40/4 = 10, s²/n = 2
    # t = (2.5 − 6)/sqrt(2.416667) = −3.5/1.554563 = −2.251436
    # df = 2.416667² / (0.416667²/3 + 2²/4) = 5.840278 / 1.057870 = 5.520788
    t, p = welch_t([1, 2, 3, 4], [2, 4, 6, 8, 10])
    assert t == pytest.approx(-2.251436, abs=1e-6)
    assert p == pytest.approx(2 * stats.t.sf(2.251436, 5.520788), abs=1e-6)
    assert 0.05 < p < 0.1


def test_welch_t_is_nan_for_a_group_with_fewer_than_two_values():
    assert all(math.isnan(x) for x in welch_t([1.0], [1.0, 2.0, 3.0]))
    assert all(math.isnan(x) for x in welch_t([1.0, 2.0], []))


@pytest.mark.parametrize("b", [[0.5, 0.5, 0.5], [0.0, 0.0]])
def test_welch_t_is_nan_when_both_groups_are_constant(b):
    t, p = welch_t([0.5, 0.5], b)
    assert math.isnan(t) and math.isnan(p)


# --------------------------------------------------------------------------- Cohen's d


def test_cohens_d_matches_hand_computation():
    # failed 2,4,6: mean 4, (n−1)s² = 4+0+4 = 8; succeeded 1,2,3: mean 2, (n−1)s² = 2
    # s_pooled = sqrt((8 + 2)/(3 + 3 − 2)) = sqrt(2.5) = 1.581139; d = (4 − 2)/1.581139
    assert cohens_d([2, 4, 6], [1, 2, 3]) == pytest.approx(1.264911, abs=1e-6)
    assert cohens_d([1, 2, 3], [2, 4, 6]) == pytest.approx(-1.264911, abs=1e-6)


def test_cohens_d_with_unequal_groups_uses_pooled_sample_variance():
    # failed 1,3: mean 2, (n−1)s² = 2; succeeded 0: mean 0, (n−1)s² = 0
    # s_pooled = sqrt(2/(2 + 1 − 2)) = sqrt(2); d = 2/sqrt(2) = 1.414214
    assert cohens_d([1, 3], [0]) == pytest.approx(math.sqrt(2), abs=1e-9)


@pytest.mark.parametrize("failed, succeeded", [([], [1, 2]), ([1, 2], []), ([1], [2]), ([3, 3], [1, 1])])
def test_cohens_d_is_nan_when_undefined(failed, succeeded):
    assert math.isnan(cohens_d(failed, succeeded))


# --------------------------------------------------------------------------- selective prediction


def test_selective_prediction_keeps_least_uncertain_questions():
    # sorted by uncertainty: .1 (✓), .2 (✓), .8 (✗), .9 (✗)
    curve = selective_prediction([0.1, 0.9, 0.2, 0.8], [1, 0, 1, 0], [0.25, 0.5, 0.75, 1.0])
    assert list(curve.columns) == ["fraction", "kept", "accuracy"]
    assert curve["kept"].tolist() == [1, 2, 3, 4]
    assert curve["accuracy"].tolist() == pytest.approx([1.0, 1.0, 2 / 3, 0.5])


def test_selective_prediction_full_fraction_is_overall_accuracy():
    rng = np.random.default_rng(0)
    correct = rng.random(37) < 0.6
    curve = selective_prediction(rng.random(37), correct, [1.0])
    assert curve["accuracy"].iloc[0] == pytest.approx(correct.mean())


def test_selective_prediction_ties_keep_input_order():
    # all tied: the first question in input order is kept at 1/3 and 2/3
    curve = selective_prediction([0.5, 0.5, 0.5], [0, 1, 1], [1 / 3, 2 / 3])
    assert curve["kept"].tolist() == [1, 2]
    assert curve["accuracy"].tolist() == pytest.approx([0.0, 0.5])


def test_selective_prediction_rounds_kept_count_up_but_not_past_exact_products():
    # 0.3·10 is 3.0000000000000004 in floating point: still 3 kept; 0.01·10 → at least 1
    curve = selective_prediction(np.arange(10) / 10, [1] * 10, [0.3, 0.01, 0.25])
    assert curve["kept"].tolist() == [3, 1, 3]


@pytest.mark.parametrize(
    "uncertainty, correct, fractions",
    [([], [], [0.5]), ([0.1], [1, 0], [0.5]), ([0.1], [1], [0.0]), ([0.1], [1], [1.5])],
)
def test_selective_prediction_rejects_bad_input(uncertainty, correct, fractions):
    with pytest.raises(ValueError):
        selective_prediction(uncertainty, correct, fractions)


# --------------------------------------------------------------------------- failure diagnostics


def test_failure_diagnostics_one_row_per_measure():
    frame = pd.DataFrame(
        {
            "u": [2, 4, 6, 1, 2, 3],
            "v": [0.0, 0.0, 0.0, 0.0, 0.0, float("nan")],
            "correct": [False, False, False, True, True, True],
        }
    )
    table = failure_diagnostics(frame, ["u", "v"])
    assert list(table.columns) == FAILURE_DIAGNOSTIC_COLUMNS
    u = table.set_index("measure").loc["u"]
    assert (u["n_failed"], u["n_correct"]) == (3, 3)
    assert (u["mean_failed"], u["mean_correct"]) == (4.0, 2.0)
    assert u["cohens_d"] == pytest.approx(1.264911, abs=1e-6)
    # Welch with equal n and s² 4 and 1: t = 2/sqrt(4/3 + 1/3) = 1.549193
    assert u["welch_t"] == pytest.approx(1.549193, abs=1e-6)
    # point-biserial r: dx = −1, 1, 3, −2, −1, 0 and dy = ∓.5, so Σdx·dy = −3, Σdx² = 16, Σdy² = 1.5:
    # r = −3/√24 (higher u on failures: a negative correlation with correctness)
    assert u["pearson_r"] == pytest.approx(-3 / math.sqrt(24), abs=1e-9)
    v = table.set_index("measure").loc["v"]
    assert (v["n_failed"], v["n_correct"]) == (3, 2)  # the NaN row is left out
    assert math.isnan(v["cohens_d"]) and math.isnan(v["welch_t"]) and math.isnan(v["pearson_r"])


def test_failure_diagnostics_all_correct_gives_nan_statistics():
    frame = pd.DataFrame({"u": [0.1, 0.2, 0.3], "correct": [True, True, True]})
    row = failure_diagnostics(frame, ["u"]).iloc[0]
    assert row["n_failed"] == 0 and row["n_correct"] == 3
    assert row["mean_correct"] == pytest.approx(0.2)
    for column in ("mean_failed", "welch_t", "welch_p", "cohens_d", "cohens_d_low", "pearson_r", "pearson_p"):
        assert math.isnan(row[column]), column


def test_failure_diagnostics_give_d_and_r_intervals_over_questions_and_p_agrees_with_them():
    """Three threads of each of 15 questions repeat the question's measure (UMAD's values are per
    question) and mostly its correctness: the rows are not 45 independent units. Over questions the
    intervals are those of `intervals` with the question as cluster, wider than the rows' own, and
    each p is below 0.05 exactly when its interval leaves 0 out."""
    from debatelab import intervals

    rng = np.random.default_rng(3)
    u = np.repeat(rng.normal(size=15), 3)
    correct = (u + rng.normal(scale=1.5, size=45)) < 0
    frame = pd.DataFrame({"u": u, "correct": correct, "question_id": np.repeat([f"q{i}" for i in range(15)], 3)})
    clustered = failure_diagnostics(frame, ["u"], cluster_col="question_id").iloc[0]
    rows = failure_diagnostics(frame, ["u"]).iloc[0]
    assert (clustered["n_units"], clustered["unit"], rows["n_units"], rows["unit"]) == (15, "question_id", 45, "rows")
    q = frame["question_id"].to_numpy()
    d = intervals.cohens_d(u[~correct], u[correct], clusters_1=q[~correct], clusters_0=q[correct])
    r = intervals.correlation(u, correct.astype(float), clusters=q)
    assert (clustered["cohens_d_low"], clustered["cohens_d_high"], clustered["cohens_d_p"]) == (d.low, d.high, d.p)
    assert (clustered["pearson_r_low"], clustered["pearson_r_high"], clustered["pearson_p"]) == (r.low, r.high, r.p)
    assert clustered["cohens_d"] == pytest.approx(d.value) and clustered["pearson_r"] == pytest.approx(r.value)
    for name in ("cohens_d", "pearson_r"):
        assert clustered[f"{name}_high"] - clustered[f"{name}_low"] > rows[f"{name}_high"] - rows[f"{name}_low"]
        for row in (clustered, rows):
            assert row[f"{name}_low"] < row[name] < row[f"{name}_high"]
            p = row["cohens_d_p" if name == "cohens_d" else "pearson_p"]
            assert (p < 0.05) == (row[f"{name}_low"] > 0 or row[f"{name}_high"] < 0)


def test_failure_diagnostics_names_missing_columns():
    with pytest.raises(KeyError, match="u_sys"):
        failure_diagnostics(pd.DataFrame({"correct": [True]}), ["u_sys"])


# --------------------------------------------------------------------------- plot


def test_plot_selective_prediction_writes_a_png_atomically(tmp_path):
    from PIL import Image

    curves = pd.concat(
        [
            selective_prediction([0.1, 0.9, 0.2, 0.8], [1, 0, 1, 0], [0.5, 1.0]).assign(measure="u_sys"),
            selective_prediction([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 0], [0.5, 1.0]).assign(measure="u_inter"),
        ]
    )
    path = tmp_path / "plots" / "selective.png"
    figure = plot_selective_prediction(curves, "test")
    assert [line.get_label() for line in figure.axes[0].get_lines()] == ["u_sys", "u_inter"]
    save_figure_atomic(figure, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(path) as image:
        image.verify()
    assert os.listdir(path.parent) == ["selective.png"]  # no temporary file left behind


# --------------------------------------------------------------------------- paired t-test


def test_paired_t_greater_matches_scipy_and_calls_differences_without_variance_untestable():
    a, b = [0.71, 0.74, 0.69, 0.78, 0.75], [0.70, 0.70, 0.68, 0.72, 0.71]
    assert paired_t_greater(a, b) == pytest.approx(stats.ttest_rel(a, b, alternative="greater").pvalue)
    assert paired_t_greater(b, a) > 0.5  # the other direction is not significant
    # constant non-zero differences measure no noise: untestable, never significant (scipy says p = 0)
    assert np.isnan(paired_t_greater([0.6, 0.7, 0.8], [0.5, 0.6, 0.7]))
    assert np.isnan(paired_t_greater([0.5, 0.6, 0.7], [0.6, 0.7, 0.8]))
    assert paired_t_greater([0.5, 0.6, 0.7], [0.5, 0.6, 0.7]) == 1.0  # the same runs: not greater
    assert np.isnan(paired_t_greater([0.9], [0.1]))  # one run is no evidence
    assert np.isnan(paired_t_greater([0.9, float("nan")], [0.1, 0.2]))
