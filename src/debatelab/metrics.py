"""Metrics and statistics shared by every stage; numpy, scipy and scikit-learn only.

Confidence metrics (Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5):

`correct` is z_n ∈ {0, 1} (bool or 0/1), `confidence` is c_n ∈ [0, 1], N items:

* accuracy     = (1/N) Σ z_n
* weighted_f1  = Σ_y (support_y/N) · F1_y  (sklearn, None/NaN predictions → "invalid")
* AUARC        = (1/N) Σ_{k=1..N} acc@k, acc@k = accuracy of the k most confident items
* AUROC        = P(c_correct > c_wrong) + ½·P(tie)  (sklearn roc_auc_score)
* ECE          = Σ_b (n_b/N)·|acc_b − conf_b| ("count", Guo et al.) or mean_b |acc_b − conf_b| ("uniform")
* Brier        = (1/N) Σ (c_n − z_n)²
* NLL          = −(1/N) Σ [z_n ln c̃_n + (1−z_n) ln(1−c̃_n)], c̃ = clip(c, ε, 1−ε)

Every scalar metric of empty input is NaN, never an exception; inputs of different
lengths, confidences outside [0, 1] (NaN included) and correctness other than 0/1 raise
ValueError. ECE bins are [i/B, (i+1)/B), the last one closed so that 1.0 falls in it.

One ranking serves both selective curves: `accuracy_rejection_curve` (acc@k of the k most
confident items) and `selective_prediction` (accuracy of the least uncertain fraction, Tang et al., arXiv:2602.07186
§3.2, Figure 4) sort by the same `ranked_order`.

Statistics relating a per-question measure to correctness (Tang et al., arXiv:2602.07186 §3, §5, App. B) and comparing methods:
`welch_t` (failed vs correct, Welch [CHOICE]), `cohens_d` (the UDPO trainer's coefficients),
`failure_diagnostics` (Welch's t, and Cohen's d and the point-biserial r with their clustered 95 %
intervals from `intervals`, per measure), and `paired_t_greater` (one-sided paired t-test
over runs, Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5). A statistic that is undefined for the data at hand (too few values,
zero variance, a constant input) is NaN, never an exception, so a run where every question is
correct still reports.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score, roc_auc_score

from .intervals import cohens_d as cohens_d_estimate
from .intervals import correlation
from .probability import clip_probability

ECE_WEIGHTINGS = ("count", "uniform")
INVALID_LABEL = "invalid"

_NAN = float("nan")


def _check_same_length(**arrays: Any) -> int:
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"inputs must have the same length, got {lengths}")
    return next(iter(lengths.values()))


def _correct_array(correct: Iterable[Any]) -> np.ndarray:
    z = np.asarray(correct, dtype=float).reshape(-1)
    bad = (z != 0) & (z != 1)
    if bad.any():
        raise ValueError(f"correct must be bool or 0/1, got {z[bad][0]!r}")
    return z


def _confidence_array(confidence: Iterable[Any]) -> np.ndarray:
    c = np.asarray(confidence, dtype=float).reshape(-1)
    bad = ~((c >= 0) & (c <= 1))  # NaN is bad too
    if bad.any():
        raise ValueError(f"confidence must lie in [0, 1], got {c[bad][0]!r}")
    return c


def _pair(confidence: Iterable[Any], correct: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    c, z = _confidence_array(confidence), _correct_array(correct)
    _check_same_length(confidence=c, correct=z)
    return c, z


def _check_bins(bins: int) -> int:
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1:
        raise ValueError(f"bins must be a positive integer, got {bins!r}")
    return int(bins)


def _bin_index(c: np.ndarray, bins: int) -> np.ndarray:
    return np.minimum((c * bins).astype(np.int64), bins - 1)


def accuracy(correct: Iterable[Any]) -> float:
    """Fraction of correct items."""
    z = _correct_array(correct)
    return float(z.mean()) if z.size else _NAN


def _is_missing(label: Any) -> bool:
    if label is None or label is pd.NA:
        return True
    return isinstance(label, (float, np.floating)) and math.isnan(label)


def weighted_f1(gold: Iterable[Any], pred: Iterable[Any]) -> float:
    """Support-weighted F1 over the gold and predicted labels, compared as strings."""
    gold, pred = list(gold), list(pred)
    if _check_same_length(gold=gold, pred=pred) == 0:
        return _NAN
    y = [str(g) for g in gold]
    yhat = [INVALID_LABEL if _is_missing(p) else str(p) for p in pred]
    return float(f1_score(y, yhat, average="weighted", zero_division=0))


def ranked_order(scores: np.ndarray, seed: int | None) -> np.ndarray:
    """Item indices by descending score (NaN last). Ties keep input order (`seed` None) or the
    order of a shuffle with `seed`, so equal scores don't favour the items listed first."""
    scores = np.asarray(scores, dtype=float)
    if seed is None:
        return np.argsort(-scores, kind="stable")
    perm = np.random.default_rng(seed).permutation(scores.size)
    return perm[np.argsort(-scores[perm], kind="stable")]


def accuracy_rejection_curve(
    confidence: Iterable[Any], correct: Iterable[Any], seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(coverage k/N, acc@k) for k = 1..N, items taken by descending confidence.

    Ties are broken by a stable sort after a shuffle with `seed` (None: input order).
    """
    c, z = _pair(confidence, correct)
    k = np.arange(1, c.size + 1, dtype=float)
    acc = np.cumsum(z[ranked_order(c, seed)]) / k
    return k / max(c.size, 1), acc


SELECTIVE_COLUMNS = ["fraction", "kept", "accuracy"]

# ceil(0.3 · 10) is 4 in floating point (0.3 · 10 = 3.0000000000000004); the slack fixes that.
_CEIL_SLACK = 1e-9


def selective_prediction(
    uncertainty: Sequence[float], correct: Sequence[bool], fractions: Sequence[float]
) -> pd.DataFrame:
    """Accuracy of the least uncertain questions (Tang et al., arXiv:2602.07186 §3, §5, App. B, Fig 4/8): (fraction, kept, accuracy).

    Questions are ranked by uncertainty ascending (`ranked_order` of −uncertainty: ties keep
    input order, NaN last); each fraction f keeps the lowest ceil(f·n) (at least 1). Fraction
    1.0 gives the overall accuracy.
    """
    u, ok = np.asarray(uncertainty, dtype=float), np.asarray(correct, dtype=float)
    if len(u) != len(ok):
        raise ValueError(f"uncertainty and correct differ in length ({len(u)} vs {len(ok)})")
    if len(u) == 0:
        raise ValueError("selective prediction needs at least one question")
    bad = [f for f in fractions if not 0.0 < f <= 1.0]
    if bad:
        raise ValueError(f"fractions must lie in (0, 1], got {bad}")
    accuracy_at = np.cumsum(ok[ranked_order(-u, seed=None)]) / np.arange(1, len(u) + 1)
    rows = []
    for fraction in fractions:
        kept = max(1, math.ceil(fraction * len(u) - _CEIL_SLACK))
        rows.append({"fraction": float(fraction), "kept": kept, "accuracy": float(accuracy_at[kept - 1])})
    return pd.DataFrame(rows, columns=SELECTIVE_COLUMNS)


def auarc(confidence: Iterable[Any], correct: Iterable[Any], seed: int | None = 0) -> float:
    """Area under the accuracy-rejection curve, (1/N) Σ_k acc@k."""
    _, acc = accuracy_rejection_curve(confidence, correct, seed)
    return float(acc.mean()) if acc.size else _NAN


def auroc(confidence: Iterable[Any], correct: Iterable[Any]) -> float:
    """ROC AUC of confidence for separating correct from wrong; NaN with one class."""
    c, z = _pair(confidence, correct)
    if np.unique(z).size < 2:
        return _NAN
    return float(roc_auc_score(z, c))


def _bin_sums(c: np.ndarray, z: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    idx = _bin_index(c, bins)
    count = np.bincount(idx, minlength=bins)
    return count, np.bincount(idx, weights=c, minlength=bins), np.bincount(idx, weights=z, minlength=bins)


def ece(confidence: Iterable[Any], correct: Iterable[Any], bins: int = 10, weighting: str = "count") -> float:
    """Expected calibration error over `bins` equal-width bins on [0, 1]."""
    bins = _check_bins(bins)
    if weighting not in ECE_WEIGHTINGS:
        raise ValueError(f"weighting must be one of {ECE_WEIGHTINGS}, got {weighting!r}")
    c, z = _pair(confidence, correct)
    if c.size == 0:
        return _NAN
    count, sum_c, sum_z = _bin_sums(c, z, bins)
    if weighting == "count":
        # Σ n_b/N |acc_b − conf_b| = Σ |Σz − Σc| / N
        return float(np.abs(sum_z - sum_c).sum() / c.size)
    full = count > 0
    return float(np.mean(np.abs(sum_z[full] - sum_c[full]) / count[full]))


def brier(confidence: Iterable[Any], correct: Iterable[Any]) -> float:
    """Mean squared error of the confidence against 0/1 correctness."""
    c, z = _pair(confidence, correct)
    return float(np.mean((c - z) ** 2)) if c.size else _NAN


def nll(confidence: Iterable[Any], correct: Iterable[Any]) -> float:
    """Mean binary cross-entropy, confidence clipped to [ε, 1−ε] first."""
    c, z = _pair(confidence, correct)
    if c.size == 0:
        return _NAN
    c = clip_probability(c)
    return float(-np.mean(z * np.log(c) + (1 - z) * np.log1p(-c)))


def reliability_table(confidence: Iterable[Any], correct: Iterable[Any], bins: int = 10) -> pd.DataFrame:
    """One row per bin: bin_lower, bin_upper, count, mean_confidence, accuracy (NaN if empty)."""
    bins = _check_bins(bins)
    c, z = _pair(confidence, correct)
    count, sum_c, sum_z = _bin_sums(c, z, bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_c = np.where(count > 0, sum_c / count, np.nan)
        acc = np.where(count > 0, sum_z / count, np.nan)
    edges = np.arange(bins + 1) / bins
    return pd.DataFrame(
        {
            "bin_lower": edges[:-1],
            "bin_upper": edges[1:],
            "count": count.astype(np.int64),
            "mean_confidence": mean_c,
            "accuracy": acc,
        }
    )


def summarize(
    gold: Iterable[Any],
    pred: Iterable[Any],
    correct: Iterable[Any],
    confidence: Iterable[Any],
    *,
    bins: int = 10,
    weighting: str = "count",
    seed: int | None = 0,
) -> dict[str, float | int]:
    """All metrics of one (answers, confidences) set: accuracy, f1, auarc, auroc, ece, brier, nll, n."""
    gold, pred = list(gold), list(pred)
    c, z = _pair(confidence, correct)
    n = _check_same_length(gold=gold, pred=pred, correct=z)
    return {
        "accuracy": accuracy(z),
        "f1": weighted_f1(gold, pred),
        "auarc": auarc(c, z, seed=seed),
        "auroc": auroc(c, z),
        "ece": ece(c, z, bins=bins, weighting=weighting),
        "brier": brier(c, z),
        "nll": nll(c, z),
        "n": n,
    }


# --------------------------------------------------------------------------- statistics

FAILURE_DIAGNOSTIC_COLUMNS = [
    "measure",
    "n_failed",
    "n_correct",
    "n_units",
    "unit",
    "mean_failed",
    "mean_correct",
    "welch_t",
    "welch_p",
    "cohens_d",
    "cohens_d_low",
    "cohens_d_high",
    "cohens_d_p",
    "pearson_r",
    "pearson_r_low",
    "pearson_r_high",
    "pearson_p",
]


def welch_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(t, p) of the two-sided Welch t-test of mean(a) vs mean(b); NaN when a group has < 2
    values or both groups have zero variance."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    # Both variances 0: scipy gives ±inf or NaN; the test is degenerate either way.
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return _NAN, _NAN
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # e.g. precision-loss warnings on near-equal values
        result = stats.ttest_ind(a, b, equal_var=False)
    return float(result.statistic), float(result.pvalue)


def cohens_d(failed: Sequence[float], succeeded: Sequence[float]) -> float:
    """(μ_fail − μ_succ)/s_pooled, s_pooled = sqrt(((n1−1)s1² + (n2−1)s2²)/(n1+n2−2)) with
    sample variances (Tang et al., arXiv:2602.07186 §3, §5, App. B). NaN when a group is empty, n1 + n2 ≤ 2, or s_pooled = 0."""
    failed, succeeded = np.asarray(failed, dtype=float), np.asarray(succeeded, dtype=float)
    n1, n2 = len(failed), len(succeeded)
    if n1 == 0 or n2 == 0 or n1 + n2 <= 2:
        return _NAN
    # (n−1)s² is the sum of squared deviations, which is also defined for n = 1.
    squares = np.sum((failed - failed.mean()) ** 2) + np.sum((succeeded - succeeded.mean()) ** 2)
    pooled = math.sqrt(squares / (n1 + n2 - 2))
    if pooled == 0.0:
        return _NAN
    return float((failed.mean() - succeeded.mean()) / pooled)


def paired_t_greater(a: Sequence[float], b: Sequence[float]) -> float:
    """p-value of the one-sided paired t-test "a > b" over runs (runs paired by position; Elahi & Di
    Eugenio, arXiv:2606.13591 §4.1, §5), or NaN where the test is undefined: fewer than 2 pairs, a
    non-finite value, or differences without variance. A constant non-zero difference gives t = ±inf
    (scipy: p = 0 or NaN), which measures no noise at all, so it is untestable rather than
    significant; all-zero differences are "not greater" (1)."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = a - b
    if len(diff) < 2 or not np.isfinite(diff).all():
        return _NAN
    if np.allclose(diff, diff[0], rtol=1e-9, atol=1e-12):
        return 1.0 if np.allclose(diff, 0.0, atol=1e-12) else _NAN
    return float(stats.ttest_rel(a, b, alternative="greater").pvalue)


def failure_diagnostics(
    frame: pd.DataFrame, measures: Sequence[str], correct_col: str = "correct", cluster_col: str | None = None
) -> pd.DataFrame:
    """One row per measure (columns `FAILURE_DIAGNOSTIC_COLUMNS`): failed-vs-correct means, Welch
    t, Cohen's d and the point-biserial r. Rows whose measure is NaN are left out of that measure.

    d and r, and their 95 % BCa bootstrap interval and the p of the test it inverts, are one estimate
    each (`intervals.cohens_d`, `intervals.correlation`; the value NaN where a group is empty, n1 + n2
    ≤ 2 or a variable is constant): over rows, or with `cluster_col` over its
    values (a question's threads drawn together), `n_units` of them. `pearson_p` is that test's p,
    not Pearson's own, which takes the rows as independent; `welch_p` is Welch's, which does too
    (exact for one row per unit)."""
    missing = [c for c in [correct_col, *measures, *([cluster_col] if cluster_col else [])] if c not in frame.columns]
    if missing:
        raise KeyError(f"failure_diagnostics: missing column(s) {missing}")
    rows = []
    for measure in measures:
        sub = frame[np.isfinite(frame[measure].astype(float))]
        values = sub[measure].to_numpy(dtype=float)
        correct = sub[correct_col].to_numpy(dtype=bool)
        clusters = sub[cluster_col].to_numpy() if cluster_col else None
        failed, succeeded = values[~correct], values[correct]
        t, p = welch_t(failed, succeeded)
        d = cohens_d_estimate(
            failed,
            succeeded,
            clusters_1=None if clusters is None else clusters[~correct],
            clusters_0=None if clusters is None else clusters[correct],
        )
        r_estimate = correlation(values, correct.astype(float), clusters=clusters)
        rows.append(
            {
                "measure": measure,
                "n_failed": len(failed),
                "n_correct": len(succeeded),
                "n_units": len(values) if clusters is None else len(set(clusters)),
                "unit": "rows" if clusters is None else cluster_col,
                "mean_failed": float(failed.mean()) if len(failed) else _NAN,
                "mean_correct": float(succeeded.mean()) if len(succeeded) else _NAN,
                "welch_t": t,
                "welch_p": p,
                "cohens_d": d.value,
                "cohens_d_low": d.low,
                "cohens_d_high": d.high,
                "cohens_d_p": d.p,
                "pearson_r": r_estimate.value,
                "pearson_r_low": r_estimate.low,
                "pearson_r_high": r_estimate.high,
                "pearson_p": r_estimate.p,
            }
        )
    return pd.DataFrame(rows, columns=FAILURE_DIAGNOSTIC_COLUMNS)
