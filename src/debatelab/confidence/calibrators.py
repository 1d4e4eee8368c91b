"""Post-hoc calibrators (Elahi & Di Eugenio, arXiv:2606.13591 §3.3), fitted on validation pairs (raw confidence c, correct z).

* raw:        p = clip(c); nothing is fitted.
* beta:       p = σ(a·ln c − b·ln(1−c) + c0), c clipped, a, b ≥ 0 (c0 is the Beta calibrator's "c" and
              in `to_dict`); mean NLL by L-BFGS-B from the identity a=b=1, c0=0.
* polynomial: p = σ(t0·c³ + t1·c² + t2·c + t3), c clipped; mean NLL by L-BFGS from the
              constant predictor t3 = logit(clip(mean z)), so it never fits worse than that.
* isotonic:   p = m(c), m the non-decreasing step fit minimising Σ(z − m(c))² (PAV,
              sklearn IsotonicRegression(out_of_bounds="clip")), applied by np.interp on
              its thresholds.

Every output is clipped to [ε, 1−ε]; NaN inputs stay NaN and are dropped from fits. With
no usable pair a calibrator behaves like raw and `to_dict` records "fallback": "raw".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

from ..probability import clip_probability, logit, sigmoid

CALIBRATORS = ("raw", "beta", "polynomial", "isotonic")

_MAXITER = 1000


def _confidences(values: Iterable[Any], name: str = "confidences") -> np.ndarray:
    c = np.asarray(values, dtype=float)
    bad = ~np.isnan(c) & ~((c >= 0) & (c <= 1))
    if bad.any():
        raise ValueError(f"{name} must lie in [0, 1] or be NaN, got {c[bad].flat[0]!r}")
    return c


def _usable_pairs(confidences: Iterable[Any], correct: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    c = _confidences(confidences).reshape(-1)
    z = np.asarray(correct, dtype=float).reshape(-1)
    if c.size != z.size:
        raise ValueError(f"confidences and correct must have the same length, got {c.size} and {z.size}")
    bad = (z != 0) & (z != 1)
    if bad.any():
        raise ValueError(f"correct must be bool or 0/1, got {z[bad][0]!r}")
    keep = ~np.isnan(c)
    return c[keep], z[keep]


@dataclass(frozen=True)
class Calibrator:
    """Base class: NaN handling and output clipping around `_transform`."""

    kind: ClassVar[str] = ""
    n_fit: int = 0
    fallback: str | None = None

    def _transform(self, c: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def predict(self, confidences: Iterable[Any]) -> np.ndarray:
        """Calibrated probabilities in [ε, 1−ε], NaN where the input is NaN."""
        c = _confidences(confidences)
        out = np.full(c.shape, np.nan)
        ok = ~np.isnan(c)
        out[ok] = c[ok] if self.fallback == "raw" else self._transform(c[ok])
        return clip_probability(out)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable parameters; `calibrator_from_dict` inverts it."""
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        return {"kind": self.kind, **d}


@dataclass(frozen=True)
class RawCalibrator(Calibrator):
    kind: ClassVar[str] = "raw"

    def _transform(self, c: np.ndarray) -> np.ndarray:
        return c


@dataclass(frozen=True)
class BetaCalibrator(Calibrator):
    kind: ClassVar[str] = "beta"
    a: float = 1.0
    b: float = 1.0
    c: float = 0.0

    def _transform(self, c: np.ndarray) -> np.ndarray:
        c = clip_probability(c)
        return sigmoid(self.a * np.log(c) - self.b * np.log1p(-c) + self.c)


@dataclass(frozen=True)
class PolynomialCalibrator(Calibrator):
    kind: ClassVar[str] = "polynomial"
    t0: float = 0.0
    t1: float = 0.0
    t2: float = 0.0
    t3: float = 0.0

    def _transform(self, c: np.ndarray) -> np.ndarray:
        return sigmoid(np.polyval([self.t0, self.t1, self.t2, self.t3], clip_probability(c)))


@dataclass(frozen=True)
class IsotonicCalibrator(Calibrator):
    kind: ClassVar[str] = "isotonic"
    x_thresholds: tuple[float, ...] = field(default_factory=tuple)
    y_thresholds: tuple[float, ...] = field(default_factory=tuple)

    def _transform(self, c: np.ndarray) -> np.ndarray:
        # sklearn's predict with out_of_bounds="clip" is this linear interpolation
        return np.interp(c, np.asarray(self.x_thresholds), np.asarray(self.y_thresholds))


_CLASSES: dict[str, type[Calibrator]] = {
    cls.kind: cls for cls in (RawCalibrator, BetaCalibrator, PolynomialCalibrator, IsotonicCalibrator)
}


def _nll_and_grad(theta: np.ndarray, X: np.ndarray, z: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean NLL of σ(Xθ) and its gradient; softplus form keeps it finite for any θ."""
    s = X @ theta
    loss = float(np.mean(np.logaddexp(0.0, s) - z * s))
    grad = X.T @ (sigmoid(s) - z) / z.size
    return loss, grad


def _fit_logistic(X: np.ndarray, z: np.ndarray, x0: np.ndarray, bounds: list | None = None) -> np.ndarray:
    result = minimize(
        _nll_and_grad,
        x0,
        args=(X, z),
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": _MAXITER},
    )
    theta = np.asarray(result.x, dtype=float)
    # a failed line search can in principle leave a worse point; the start is always valid
    if not np.all(np.isfinite(theta)) or _nll_and_grad(theta, X, z)[0] > _nll_and_grad(x0, X, z)[0]:
        return x0
    return theta


def _fit_beta(c: np.ndarray, z: np.ndarray) -> BetaCalibrator:
    c = clip_probability(c)
    X = np.column_stack([np.log(c), -np.log1p(-c), np.ones_like(c)])
    a, b, k = _fit_logistic(X, z, np.array([1.0, 1.0, 0.0]), bounds=[(0.0, None), (0.0, None), (None, None)])
    return BetaCalibrator(n_fit=int(c.size), a=float(a), b=float(b), c=float(k))


def _fit_polynomial(c: np.ndarray, z: np.ndarray) -> PolynomialCalibrator:
    c = clip_probability(c)
    X = np.column_stack([c**3, c**2, c, np.ones_like(c)])
    base = logit(z.mean())
    t0, t1, t2, t3 = _fit_logistic(X, z, np.array([0.0, 0.0, 0.0, base]))
    return PolynomialCalibrator(n_fit=int(c.size), t0=float(t0), t1=float(t1), t2=float(t2), t3=float(t3))


def _fit_isotonic(c: np.ndarray, z: np.ndarray) -> IsotonicCalibrator:
    iso = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1, increasing=True).fit(c, z)
    return IsotonicCalibrator(
        n_fit=int(c.size),
        x_thresholds=tuple(float(x) for x in iso.X_thresholds_),
        y_thresholds=tuple(float(y) for y in iso.y_thresholds_),
    )


def fit_calibrator(kind: str, confidences: Iterable[Any], correct: Iterable[Any]) -> Calibrator:
    """Fit calibrator `kind` on (confidence, correct) pairs; NaN confidences are dropped."""
    if kind not in CALIBRATORS:
        raise ValueError(f"kind must be one of {CALIBRATORS}, got {kind!r}")
    c, z = _usable_pairs(confidences, correct)
    if kind == "raw":
        return RawCalibrator(n_fit=int(c.size))
    if c.size == 0:
        return _CLASSES[kind](n_fit=0, fallback="raw")
    if kind == "beta":
        return _fit_beta(c, z)
    if kind == "polynomial":
        return _fit_polynomial(c, z)
    return _fit_isotonic(c, z)


def calibrator_from_dict(d: Mapping[str, Any]) -> Calibrator:
    """Rebuild a calibrator from `Calibrator.to_dict()` (e.g. after a JSON round trip)."""
    kind = d.get("kind")
    if kind not in _CLASSES:
        raise ValueError(f"d['kind'] must be one of {CALIBRATORS}, got {kind!r}")
    params = {k: v for k, v in d.items() if k != "kind"}
    for key in ("x_thresholds", "y_thresholds"):
        if key in params:
            params[key] = tuple(float(v) for v in params[key])
    try:
        return _CLASSES[kind](**params)
    except TypeError as err:
        raise ValueError(f"bad parameters for a {kind!r} calibrator: {sorted(params)} ({err})") from None
