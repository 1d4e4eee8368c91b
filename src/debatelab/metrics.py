"""Metrics shared by every stage (spec 004 §9); numpy and scikit-learn only.

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
"""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np
import pandas as pd
from sklearn.metrics import f1_score, roc_auc_score

from debatelab.confidence import clip_confidence

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


def _descending_order(c: np.ndarray, seed: int | None) -> np.ndarray:
    if seed is None:
        return np.argsort(-c, kind="stable")
    perm = np.random.default_rng(seed).permutation(c.size)
    return perm[np.argsort(-c[perm], kind="stable")]


def accuracy_rejection_curve(
    confidence: Iterable[Any], correct: Iterable[Any], seed: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(coverage k/N, acc@k) for k = 1..N, items taken by descending confidence.

    Ties are broken by a stable sort after a shuffle with `seed` (None: input order).
    """
    c, z = _pair(confidence, correct)
    k = np.arange(1, c.size + 1, dtype=float)
    acc = np.cumsum(z[_descending_order(c, seed)]) / k
    return k / max(c.size, 1), acc


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


def ece(
    confidence: Iterable[Any], correct: Iterable[Any], bins: int = 10, weighting: str = "count"
) -> float:
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
    c = clip_confidence(c)
    return float(-np.mean(z * np.log(c) + (1 - z) * np.log1p(-c)))


def reliability_table(
    confidence: Iterable[Any], correct: Iterable[Any], bins: int = 10
) -> pd.DataFrame:
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
