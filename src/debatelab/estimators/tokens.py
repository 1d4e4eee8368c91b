"""Token-level summaries of one reply, read off the generation itself (no extra calls).

Every zero-shot sample and debate turn records the mean and minimum log-probability of its sampled
tokens (`mean_logprob`, `min_logprob`: SID-ET's and SVR-MAD's min log-likelihood signal) and, from
the backend's top-k log-probabilities of every generated position (config `zero_shot.top_logprobs`,
`debate.top_logprobs`: k), three uncertainty summaries (DebUnc, lm-polygraph):

* `mean_token_entropy` = (1/T) Σ_t H_k(t), nats. lm-polygraph's MeanTokenEntropy is the same mean
  of the full distribution's entropy H(t) = −Σ_v p(v|y<t) log p(v|y<t).
* `max_token_prob` = (1/T) Σ_t max_v p(v|y<t): the max-softmax probability averaged over the
  reply's tokens (the top-1 of the top-k is the true maximum, so no k bias).
* `perplexity` = exp(−(1/T) Σ_t log p(y_t|y<t)) of the sampled tokens y_t (needs no top-k).
  lm-polygraph's `Perplexity` estimator is its log, −mean log p(y_t); we store the perplexity.

All log-probabilities are raw: the log-softmax of the model's logits, before temperature or top-p
(as vLLM's `logprobs_mode="raw_logprobs"`), on every backend.

How k bounds the entropy. A backend reports only the k most likely tokens of a position, p_1..p_k;
the rest of the vocabulary (V − k tokens) holds the remainder r = 1 − Σ p_i. `topk_entropy` counts
the remainder as one extra outcome:

    H_k = −Σ_{i≤k} p_i log p_i − r log r.

Splitting that outcome into the V − k tokens it stands for can only add entropy, at most
r·log(V − k) (when they share r equally), so

    H_k ≤ H ≤ H_k + r·log(V − k),

and H_k = H when the top k cover the support (k = V, or r = 0). H_k grows with k. Every backend
applies this same formula to its top-k (the transformers backend too, though it has the full
vocabulary), so backends agree; compare entropies only between runs of the same k. The formula
lives in `debatelab.probability` (`topk_entropy`, `topk_summaries`), since the backends
(`debatelab.llm`) can't import this package, which imports them; it is re-exported here.

Confidences in (0, 1] for the confidence stage (`TOKEN_ESTIMATORS`, calibration `estimators`):
`entropy` → exp(−mean_token_entropy), `maxprob` → max_token_prob, `perplexity` → 1/perplexity
(= exp(mean_logprob), the geometric-mean token probability).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ..probability import topk_entropy, topk_summaries  # noqa: F401 (the backends' math, re-exported here)


def mean_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.mean(token_logprobs))


def min_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.min(token_logprobs))


# --------------------------------------------------------------------------- one reply


def mean_token_entropy(token_entropies: Sequence[float] | None) -> float:
    """Mean over the reply's tokens of H_k (nats); NaN without per-token entropies."""
    if not token_entropies:
        return float("nan")
    return float(np.mean(token_entropies))


def max_token_probability(token_max_logprobs: Sequence[float] | None) -> float:
    """Mean over the reply's tokens of max_v p(v | prefix); NaN without them."""
    if not token_max_logprobs:
        return float("nan")
    return float(np.mean(np.exp(np.asarray(token_max_logprobs, dtype=np.float64))))


def perplexity(token_logprobs: Sequence[float] | None) -> float:
    """exp(−mean log p(y_t)) of the sampled tokens; NaN without log-probabilities."""
    if not token_logprobs:
        return float("nan")
    return float(math.exp(-float(np.mean(token_logprobs))))


def token_summaries(generation) -> dict[str, float]:
    """The token-level columns of one generation (a `debatelab.llm.Generation`), NaN where it lacks them."""
    return {
        "mean_logprob": mean_logprob(generation.token_logprobs),
        "min_logprob": min_logprob(generation.token_logprobs),
        "mean_token_entropy": mean_token_entropy(generation.token_entropies),
        "max_token_prob": max_token_probability(generation.token_max_logprobs),
        "perplexity": perplexity(generation.token_logprobs),
    }


# --------------------------------------------------------------------------- as confidences


def _inverse(value: float) -> float:
    return 1.0 / value if value > 0 else float("nan")


#: Estimator name -> (the recorded column it reads, its map to a confidence in (0, 1]). These need no
#: calls: they are read off the answer's own generation. The confidence stage's `conf_{name}` columns.
TOKEN_ESTIMATORS: dict[str, tuple[str, Callable[[float], float]]] = {
    "entropy": ("mean_token_entropy", lambda h: math.exp(-h)),
    "maxprob": ("max_token_prob", lambda p: p),
    "perplexity": ("perplexity", _inverse),
}

#: The recorded token-level columns of the zero-shot and debate outputs, in schema order.
TOKEN_COLUMNS = ("mean_logprob", "min_logprob", "mean_token_entropy", "max_token_prob", "perplexity")


def token_confidence(estimator: str, value: float) -> float:
    """The confidence of `estimator` (a key of TOKEN_ESTIMATORS) from its recorded column's value; NaN stays NaN."""
    if estimator not in TOKEN_ESTIMATORS:
        raise ValueError(f"unknown token estimator {estimator!r}; expected one of {tuple(TOKEN_ESTIMATORS)}")
    if value is None or not math.isfinite(float(value)):
        return float("nan")
    return float(TOKEN_ESTIMATORS[estimator][1](float(value)))
