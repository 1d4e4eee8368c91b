"""Probabilities and log-odds: the one clip, logit and sigmoid every stage uses.

Spec 004 numerics: a confidence is clipped to [ε, 1−ε] before any log or logit (a self-report
of 10/10 is exactly 1.0), ε = 1e-4.

* ``clip_probability(p)`` = min(max(p, ε), 1 − ε)
* ``logit(p)``            = ln p − ln(1 − p) of the clipped p (log1p keeps it exact near 1)
* ``sigmoid(x)``          = 1 / (1 + e^{−x}) (scipy's expit: finite for any x, 0 and 1 at the ends)

All three take scalars or arrays and return the same kind.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

#: Spec 004 numerics: the clip applied before any log or logit.
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
