"""Token-level summaries of one reply's log-probabilities, read off the generation itself (no extra
calls): every zero-shot sample and debate turn records its mean and minimum token log-probability
(the `mean_logprob` and `min_logprob` columns; SID-ET's and SVR-MAD's min log-likelihood signal)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mean_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.mean(token_logprobs))


def min_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.min(token_logprobs))
