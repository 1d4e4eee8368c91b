"""SDRL's debate pairs (spec 003 §2 step 3): which two of a prompt's own rollouts its debate prompt shows.

* ``rand``: two distinct rollouts drawn uniformly;
* ``freq``: one rollout of the most frequent answer and one of the second most frequent, each drawn
  at random within its answer class, in random order (probability 1/2 each way, against position
  bias). Answers are compared by their `grading.answer_keys` (canonical forms); unparsable
  rollouts form one class that is used only when fewer than two valid classes exist. Ties in
  frequency go to the class seen first.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from ..grading import INVALID, answer_keys
from .rollouts import Rollout


def choose_pair(group: Sequence[Rollout], mode: str, rng: np.random.Generator, task_type: str) -> tuple[Rollout, Rollout]:
    """The two rollouts of a debate prompt (module docstring)."""
    if len(group) < 2:
        raise ValueError(f"a debate pair needs two rollouts, the group of {group[0].question_id if group else '?'} has {len(group)}")
    if mode == "rand":
        i, j = rng.choice(len(group), size=2, replace=False)
        return group[int(i)], group[int(j)]
    if mode != "freq":
        raise ValueError(f"unknown pair_mode {mode!r}; expected rand or freq")
    keys = answer_keys([r.answer for r in group], task_type=task_type)
    counts = Counter(keys)
    classes = [k for k, _ in counts.most_common() if k != INVALID]  # most_common keeps first-seen order on ties
    if len(classes) < 2 and INVALID in counts:
        classes.append(INVALID)
    if len(classes) < 2:  # one answer class only: the pair is two of its rollouts
        i, j = rng.choice(len(group), size=2, replace=False)
        return group[int(i)], group[int(j)]
    picked = []
    for key in classes[:2]:
        members = [k for k, key_k in enumerate(keys) if key_k == key]
        picked.append(group[members[int(rng.integers(len(members)))]])
    if rng.random() < 0.5:
        picked.reverse()
    return picked[0], picked[1]
