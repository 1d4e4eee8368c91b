"""Rewards and group advantages of RL with verifiable rewards (spec 003 §3).

* verifiable reward: r = +1 if the parsed answer is correct (`grading.is_correct`), else −1;
* DAPO's soft overlong punishment (verl): r += min(−(|o| − (L_max − L_cache)) / L_cache · factor, 0),
  0 up to L_max − L_cache tokens, −factor at L_max;
* group advantage (Eq. 6): Â_i = (r_i − mean(r)) / (std(r) + ε), std unbiased (torch's, as TRL and
  verl), ε = 1e-6 (verl), the same for every token of response i.
"""
from __future__ import annotations

import numpy as np


def verifiable_reward(correct: bool) -> float:
    return 1.0 if correct else -1.0


def overlong_penalty(length: int, max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """The soft overlong punishment of a response of `length` tokens (≤ 0)."""
    if buffer <= 0:
        return 0.0
    return min(-(length - (max_tokens - buffer)) / buffer * factor, 0.0)


def group_advantages(rewards, eps: float = 1e-6) -> np.ndarray:
    """(r − mean) / (unbiased std + ε) within one group; 0 for a group of one."""
    r = np.asarray(rewards, dtype=float)
    if r.size < 2:
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std(ddof=1) + eps)


def mixed(correct) -> bool:
    """DAPO's dynamic-sampling condition: 0 < #correct < n."""
    n_correct = int(np.sum(correct))
    return 0 < n_correct < len(correct)


def all_equal(rewards) -> bool:
    """A group whose rewards are all equal carries no gradient (SDRL drops such debate groups)."""
    r = np.asarray(rewards, dtype=float)
    return bool(r.size == 0 or np.all(r == r[0]))
