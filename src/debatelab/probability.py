"""Probabilities and log-odds: the one clip, logit and sigmoid every stage uses.

Our numerics for the confidence paper (arXiv:2606.13591): a confidence is clipped to [ε, 1−ε] before any log or logit (a self-report
of 10/10 is exactly 1.0), ε = 1e-4.

* ``clip_probability(p)`` = min(max(p, ε), 1 − ε)
* ``logit(p)``            = ln p − ln(1 − p) of the clipped p (log1p keeps it exact near 1)
* ``sigmoid(x)``          = 1 / (1 + e^{−x}) (scipy's expit: finite for any x, 0 and 1 at the ends)

All three take scalars or arrays and return the same kind.

* ``topk_entropy(lp)``    = −Σ p_i log p_i − r log r of a position's top-k log-probabilities, the
  remainder r = 1 − Σ p_i counted as one outcome: a lower bound of the full entropy, exact when the
  top k cover the support (`debatelab.estimators.tokens` says how k bounds it). Every backend
  summarises its top-k with it (``topk_summaries``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import expit

#: Our numerics for the confidence paper (arXiv:2606.13591): the clip applied before any log or logit.
EPSILON = 1e-4


def clip_probability(p):
    """p clipped to [ε, 1−ε]; NaN stays NaN."""
    return np.clip(p, EPSILON, 1 - EPSILON)


def logit(p):
    """ln(p / (1 − p)) of the clipped probability."""
    p = clip_probability(np.asarray(p, dtype=float))
    out = np.log(p) - np.log1p(-p)
    return float(out) if out.ndim == 0 else out


def sigmoid(x):
    """1 / (1 + e^{−x}), the inverse of `logit` on (ε, 1−ε)."""
    out = expit(np.asarray(x, dtype=float))
    return float(out) if out.ndim == 0 else out


def topk_entropy(top_logprobs) -> np.ndarray:
    """H_k = −Σ p_i log p_i − r log r of each position from its top-k log-probabilities, last axis k
    (any order; -inf entries are tokens of probability 0); a 1-d input gives a 0-d array. The bound
    H_k ≤ H ≤ H_k + r·log(V − k): `debatelab.estimators.tokens`."""
    lp = np.asarray(top_logprobs, dtype=np.float64)
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):
        plogp = np.where(p > 0, p * lp, 0.0)
    # a float32 log-softmax can sum a hair above 1: no remainder then
    r = np.clip(1.0 - p.sum(axis=-1), 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rlogr = np.where(r > 0, r * np.log(np.where(r > 0, r, 1.0)), 0.0)
    return -plogp.sum(axis=-1) - rlogr


def topk_summaries(positions: Sequence[Sequence[float]], k: int) -> tuple[list[float], list[float]]:
    """(H_k, log max_v p) of each generated position from the log-probabilities a backend returned
    for it, of which the k largest are used: vLLM and OpenAI-compatible servers add the sampled
    token when it is outside the top k, and that (k+1)-th entry is not part of the top-k."""
    if k < 1:
        raise ValueError(f"topk_summaries: k must be >= 1, got {k}")
    entropies, max_logprobs = [], []
    for values in positions:
        top = sorted((float(v) for v in values), reverse=True)[:k]
        if not top:
            raise ValueError("topk_summaries: a position with no log-probabilities")
        entropies.append(float(topk_entropy(top)))
        max_logprobs.append(top[0])
    return entropies, max_logprobs
