"""Statistics that relate a per-question measure (uncertainty, confidence) to correctness.

Spec 000 §9: failure-vs-success two-sample t-test (Welch [spec CHOICE]) with Cohen's d,
the point-biserial correlation with 0/1 correctness, and selective prediction (keep the
least uncertain questions, report their accuracy). Every statistic that is undefined for
the data at hand (a group with too few values, zero variance, a constant input) is NaN,
never an exception, so a run where every question is correct still reports.

`failure_diagnostics` returns one row per measure:

===========  =====  ==============================================================
column       type   meaning
===========  =====  ==============================================================
measure      str    column of the input frame
n_failed     int    rows with correct = False (and a finite measure)
n_correct    int    rows with correct = True (and a finite measure)
mean_failed  float  mean measure of the failed rows
mean_correct float  mean measure of the correct rows
welch_t      float  Welch t statistic, failed minus correct
welch_p      float  its two-sided p-value
cohens_d     float  (μ_fail − μ_succ) / s_pooled
pearson_r    float  point-biserial r of the measure with correctness (1 = correct)
pearson_p    float  its two-sided p-value
===========  =====  ==============================================================

`selective_prediction` returns (fraction, kept, accuracy) per kept fraction.
"""
from __future__ import annotations

import math
import os
import warnings
from typing import Sequence

import numpy as np
import pandas as pd

from .io import save_figure_atomic

NAN = float("nan")

FAILURE_DIAGNOSTIC_COLUMNS = [
    "measure", "n_failed", "n_correct", "mean_failed", "mean_correct",
    "welch_t", "welch_p", "cohens_d", "pearson_r", "pearson_p",
]
SELECTIVE_COLUMNS = ["fraction", "kept", "accuracy"]

# ceil(0.3 · 10) is 4 in floating point (0.3 · 10 = 3.0000000000000004); the slack fixes that.
_CEIL_SLACK = 1e-9


def _floats(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=float)


def welch_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, p) of the two-sided Welch t-test of mean(a) vs mean(b); NaN when a group has < 2
    values or both groups have zero variance."""
    from scipy import stats

    a, b = _floats(a), _floats(b)
    # Both variances 0: scipy gives ±inf or NaN; the test is degenerate either way.
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return NAN, NAN
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # e.g. precision-loss warnings on near-equal values
        result = stats.ttest_ind(a, b, equal_var=False)
    return float(result.statistic), float(result.pvalue)


def cohens_d(failed: Sequence[float], succeeded: Sequence[float]) -> float:
    """(μ_fail − μ_succ)/s_pooled, s_pooled = sqrt(((n1−1)s1² + (n2−1)s2²)/(n1+n2−2)) with
    sample variances (spec 000 §9). NaN when a group is empty, n1 + n2 ≤ 2, or s_pooled = 0."""
    failed, succeeded = _floats(failed), _floats(succeeded)
    n1, n2 = len(failed), len(succeeded)
    if n1 == 0 or n2 == 0 or n1 + n2 <= 2:
        return NAN
    # (n−1)s² is the sum of squared deviations, which is also defined for n = 1.
    squares = np.sum((failed - failed.mean()) ** 2) + np.sum((succeeded - succeeded.mean()) ** 2)
    pooled = math.sqrt(squares / (n1 + n2 - 2))
    if pooled == 0.0:
        return NAN
    return float((failed.mean() - succeeded.mean()) / pooled)


def point_biserial(values: Sequence[float], correct: Sequence[bool]) -> tuple[float, float]:
    """(r, p): Pearson r of a measure with 0/1 correctness; NaN when either is constant or
    there are fewer than 2 values."""
    from scipy import stats

    x, y = _floats(values), _floats(correct)
    if len(x) != len(y):
        raise ValueError(f"values and correct differ in length ({len(x)} vs {len(y)})")
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return NAN, NAN
    result = stats.pearsonr(x, y)
    return float(result.statistic), float(result.pvalue)


def selective_prediction(
    uncertainty: Sequence[float], correct: Sequence[bool], fractions: Sequence[float]
) -> pd.DataFrame:
    """Accuracy of the least uncertain questions (spec 000 §9, Fig 4/8).

    Questions are sorted by uncertainty ascending (stable: ties keep input order; NaN
    last); for each fraction f the lowest ceil(f·n) questions (at least 1) are kept.
    Fraction 1.0 gives the overall accuracy.
    """
    u, ok = _floats(uncertainty), _floats(correct)
    if len(u) != len(ok):
        raise ValueError(f"uncertainty and correct differ in length ({len(u)} vs {len(ok)})")
    if len(u) == 0:
        raise ValueError("selective prediction needs at least one question")
    bad = [f for f in fractions if not 0.0 < f <= 1.0]
    if bad:
        raise ValueError(f"fractions must lie in (0, 1], got {bad}")
    ranked = ok[np.argsort(u, kind="stable")]
    rows = []
    for fraction in fractions:
        kept = max(1, math.ceil(fraction * len(u) - _CEIL_SLACK))
        rows.append({"fraction": float(fraction), "kept": kept, "accuracy": float(ranked[:kept].mean())})
    return pd.DataFrame(rows, columns=SELECTIVE_COLUMNS)


def failure_diagnostics(
    frame: pd.DataFrame, measures: Sequence[str], correct_col: str = "correct"
) -> pd.DataFrame:
    """One row per measure: failed-vs-correct means, Welch t, Cohen's d, point-biserial r
    (columns in the module docstring). Rows whose measure is NaN are left out of that
    measure's statistics."""
    missing = [c for c in [correct_col, *measures] if c not in frame.columns]
    if missing:
        raise KeyError(f"failure_diagnostics: missing column(s) {missing}")
    rows = []
    for measure in measures:
        sub = frame[np.isfinite(frame[measure].astype(float))]
        values = sub[measure].to_numpy(dtype=float)
        correct = sub[correct_col].to_numpy(dtype=bool)
        failed, succeeded = values[~correct], values[correct]
        t, p = welch_t(failed, succeeded)
        r, r_p = point_biserial(values, correct)
        rows.append({
            "measure": measure,
            "n_failed": len(failed),
            "n_correct": len(succeeded),
            "mean_failed": float(failed.mean()) if len(failed) else NAN,
            "mean_correct": float(succeeded.mean()) if len(succeeded) else NAN,
            "welch_t": t,
            "welch_p": p,
            "cohens_d": cohens_d(failed, succeeded),
            "pearson_r": r,
            "pearson_p": r_p,
        })
    return pd.DataFrame(rows, columns=FAILURE_DIAGNOSTIC_COLUMNS)


def plot_selective_prediction(curves: pd.DataFrame, path: str | os.PathLike, title: str) -> None:
    """Accuracy against kept fraction, one line per measure (columns measure, fraction,
    accuracy); written atomically (temporary file in the same folder, then rename)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for measure, curve in curves.groupby("measure", sort=False):
        curve = curve.sort_values("fraction")
        ax.plot(curve["fraction"], curve["accuracy"], marker="o", markersize=3, label=measure)
    ax.set_xlabel("fraction of questions kept (least uncertain first)")
    ax.set_ylabel("accuracy of kept questions")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path)
