"""Post-hoc calibrators (Elahi & Di Eugenio, arXiv:2606.13591 §3.3) on synthetic (confidence, correct) pairs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.special import expit, logit
from sklearn.isotonic import IsotonicRegression

from debatelab.confidence.calibrators import (
    CALIBRATORS,
    BetaCalibrator,
    calibrator_from_dict,
    fit_calibrator,
)
from debatelab.metrics import ece, nll
from debatelab.probability import EPSILON

FITTED = ("beta", "polynomial", "isotonic")
GRID = np.linspace(0.0, 1.0, 101)


def _overconfident(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Confidences whose true accuracy is σ(0.4·logit(c)): far less extreme than claimed."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0.0, 1.0, n)
    z = rng.random(n) < expit(0.4 * logit(np.clip(c, EPSILON, 1 - EPSILON)))
    return c, z.astype(int)


def _assert_valid(p: np.ndarray) -> None:
    assert np.all(np.isfinite(p))
    assert p.min() >= EPSILON and p.max() <= 1 - EPSILON


def test_isotonic_matches_sklearn_inside_and_outside_fitted_range():
    rng = np.random.default_rng(3)
    c = rng.uniform(0.2, 0.8, 500)
    z = (rng.random(500) < c).astype(int)
    cal = fit_calibrator("isotonic", c, z)
    ref = IsotonicRegression(out_of_bounds="clip").fit(c, z)
    x = np.concatenate([[0.0, 0.05, 0.2, 0.8, 0.95, 1.0], rng.uniform(0, 1, 300), c[:50]])
    expected = np.clip(ref.predict(x), EPSILON, 1 - EPSILON)
    np.testing.assert_allclose(cal.predict(x), expected, rtol=0, atol=1e-12)
    # outside the range the fit is flat at the edge values
    assert cal.predict([0.0])[0] == pytest.approx(cal.predict([c.min()])[0])
    assert cal.predict([1.0])[0] == pytest.approx(cal.predict([c.max()])[0])


def test_beta_identity_parameters_are_the_identity():
    cal = calibrator_from_dict({"kind": "beta", "n_fit": 0, "fallback": None, "a": 1.0, "b": 1.0, "c": 0.0})
    assert isinstance(cal, BetaCalibrator)
    np.testing.assert_allclose(cal.predict(GRID), np.clip(GRID, EPSILON, 1 - EPSILON), rtol=0, atol=1e-12)


def test_parametric_predictions_follow_the_spec_formulas():
    x = np.linspace(0.01, 0.99, 50)
    beta = calibrator_from_dict({"kind": "beta", "n_fit": 1, "fallback": None, "a": 2.0, "b": 0.5, "c": 0.3})
    np.testing.assert_allclose(beta.predict(x), expit(2.0 * np.log(x) - 0.5 * np.log(1 - x) + 0.3), rtol=1e-12)
    poly = calibrator_from_dict(
        {"kind": "polynomial", "n_fit": 1, "fallback": None, "t0": 3.0, "t1": -2.0, "t2": 1.5, "t3": -0.4}
    )
    np.testing.assert_allclose(poly.predict(x), expit(3.0 * x**3 - 2.0 * x**2 + 1.5 * x - 0.4), rtol=1e-12)


def test_beta_recovers_known_parameters():
    a, b, k = 2.0, 0.5, 0.3
    rng = np.random.default_rng(20240)
    c = rng.uniform(0.02, 0.98, 20_000)
    z = (rng.random(c.size) < expit(a * np.log(c) - b * np.log1p(-c) + k)).astype(int)
    cal = fit_calibrator("beta", c, z)
    # Over 30 seeds at n=20000 the estimates had sd ≈ 0.08 (a), 0.05 (b), 0.10 (c):
    # these bounds are ~3 sd, still far from a/b swapped (2 ↔ 0.5) or c = −0.3.
    assert cal.a == pytest.approx(a, abs=0.25)
    assert cal.b == pytest.approx(b, abs=0.15)
    assert cal.c == pytest.approx(k, abs=0.3)
    # the fit is the maximum-likelihood point: no worse than the true parameters
    truth = expit(a * np.log(c) - b * np.log1p(-c) + k)
    assert nll(cal.predict(c), z) <= nll(truth, z) + 1e-9


def test_polynomial_beats_raw_and_never_loses_to_constant():
    c_val, z_val = _overconfident(3000, seed=1)
    c_test, z_test = _overconfident(3000, seed=2)
    cal = fit_calibrator("polynomial", c_val, z_val)
    constant = np.full(c_val.size, np.clip(z_val.mean(), EPSILON, 1 - EPSILON))
    assert nll(cal.predict(c_val), z_val) <= nll(constant, z_val) + 1e-12
    assert nll(cal.predict(c_test), z_test) < nll(c_test, z_test) - 0.05


def test_polynomial_on_uninformative_confidence_stays_near_constant():
    rng = np.random.default_rng(5)
    c = rng.uniform(0, 1, 400)
    z = (rng.random(400) < 0.7).astype(int)
    cal = fit_calibrator("polynomial", c, z)
    constant = np.full(c.size, z.mean())
    assert nll(cal.predict(c), z) <= nll(constant, z) + 1e-12


@pytest.mark.parametrize("kind", CALIBRATORS)
def test_json_round_trip_gives_identical_predictions(kind):
    c, z = _overconfident(400, seed=7)
    cal = fit_calibrator(kind, c, z)
    d = cal.to_dict()
    assert d["kind"] == kind and d["n_fit"] == 400
    back = calibrator_from_dict(json.loads(json.dumps(d)))
    assert back == cal
    x = np.concatenate([GRID, [np.nan]])
    np.testing.assert_array_equal(back.predict(x), cal.predict(x))


def test_beta_to_dict_uses_spec_parameter_names():
    d = fit_calibrator("beta", *_overconfident(200, seed=8)).to_dict()
    assert {"a", "b", "c"} <= set(d)
    assert d["a"] >= 0 and d["b"] >= 0


@pytest.mark.parametrize("kind", CALIBRATORS)
def test_nan_confidences_are_dropped_from_fit_and_kept_in_predict(kind):
    c, z = _overconfident(300, seed=9)
    c_nan = np.concatenate([c, [np.nan, np.nan]])
    z_nan = np.concatenate([z, [1, 0]])
    with_nan = fit_calibrator(kind, c_nan, z_nan)
    assert with_nan == fit_calibrator(kind, c, z)
    assert with_nan.to_dict()["n_fit"] == 300
    p = with_nan.predict([0.3, np.nan, 0.9])
    assert np.isnan(p[1]) and np.all(np.isfinite(p[[0, 2]]))


@pytest.mark.parametrize("kind", CALIBRATORS)
@pytest.mark.parametrize(
    "case, c, z",
    [
        ("all correct", [0.2, 0.6, 0.9, 1.0], [1, 1, 1, 1]),
        ("all wrong", [0.0, 0.3, 0.7], [0, 0, 0]),
        ("single point", [0.8], [0]),
        ("one confidence value", [0.5] * 6, [1, 0, 1, 1, 0, 1]),
        ("empty", [], []),
        ("all NaN", [np.nan, np.nan], [1, 0]),
    ],
)
def test_degenerate_fits_give_finite_clipped_outputs(kind, case, c, z):
    cal = fit_calibrator(kind, c, z)
    _assert_valid(cal.predict(GRID))
    back = calibrator_from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(back.predict(GRID), cal.predict(GRID))


@pytest.mark.parametrize("kind", FITTED)
def test_no_usable_pairs_falls_back_to_raw(kind):
    cal = fit_calibrator(kind, [np.nan], [1])
    assert cal.to_dict()["fallback"] == "raw"
    np.testing.assert_array_equal(cal.predict(GRID), fit_calibrator("raw", [], []).predict(GRID))


@pytest.mark.parametrize("kind", FITTED)
def test_calibration_lowers_held_out_ece_of_overconfident_model(kind):
    c_val, z_val = _overconfident(4000, seed=11)
    c_test, z_test = _overconfident(4000, seed=12)
    cal = fit_calibrator(kind, c_val, z_val)
    raw_ece = ece(c_test, z_test)
    assert raw_ece > 0.1  # the synthetic model is badly calibrated
    assert ece(cal.predict(c_test), z_test) < raw_ece / 2


def test_monotone_calibrators_keep_the_ranking():
    c, z = _overconfident(1000, seed=13)
    for kind in ("beta", "isotonic"):
        p = fit_calibrator(kind, c, z).predict(GRID)
        assert np.all(np.diff(p) >= -1e-15), kind


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="kind must be one of"):
        fit_calibrator("platt", [0.5], [1])
    with pytest.raises(ValueError, match="same length"):
        fit_calibrator("beta", [0.5, 0.6], [1])
    with pytest.raises(ValueError, match="confidences must lie in"):
        fit_calibrator("beta", [1.5], [1])
    with pytest.raises(ValueError, match="correct must be"):
        fit_calibrator("beta", [0.5], [2])
    with pytest.raises(ValueError, match="kind"):
        calibrator_from_dict({"kind": "temperature"})
    with pytest.raises(ValueError, match="confidences must lie in"):
        fit_calibrator("raw", [], []).predict([-0.1])
