"""Answer keys and the plurality vote: when two answers count as the same, and who wins a vote.

Every stage that compares or counts answers (debate protocols, uncertainty measures,
self-consistency streams, RL rewards) uses these rules, so "the same answer" and "the
majority" mean one thing everywhere.

Answer keys
  `answer_keys` maps parsed answers (`extract_answer`, None when nothing parsed) to one
  comparable key each: `INVALID` ("<none>") for None; without `task_type` the answer string
  itself; with it `normalize_answer(answer, task_type)` ("1/2", "0.50" and "\\frac{1}{2}" are all
  "0.5"), a string with no canonical form being INVALID. `merge_equivalent=True` also merges
  canonical forms that are the same answer (`AnswerClasses`, below).

The same answer (one implementation for every stage)
  `same_answer(a, b, task_type)` on two keys: equal keys, or valid math keys that the grader's
  `answers_equivalent` (exact numbers, then math-verify) proves equal, so "2^{n}-1" = "2^n-1" and
  "\\frac{\\sqrt2}{2}" = "\\frac{1}{\\sqrt2}". Other task types' keys are already their normal
  forms. `AnswerClasses` merges one question's keys into classes (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step 2b: "use
  strip_string, or math_verify, to build equivalence classes"): each distinct key joins the first
  earlier class whose representative is the same answer, so plain comparisons and Counters of
  class keys then mean "the same answer". `answer_keys(merge_equivalent=True)` (uncertainty
  measures) and every debate protocol's votes, agreement counts, unanimity and link pruning
  (`debate.engine.QuestionState.classes`) use it. math-verify is slow: it runs only on differing
  valid math keys, cached per pair.

  INVALID is one key, equal to itself here, in the debate protocols, MAPPO's consensus reward and
  UMAD's decomposition (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1: one bucket kept in the
  support): two invalid agents agree. UDPO's uncertainty measures and rewards (Tang et al.,
  arXiv:2602.07186) instead compare keys with `uncertainty.measures.udpo_agree` ([CHOICE]), under
  which an invalid answer agrees with nothing, itself included.

The vote (Tang et al., arXiv:2602.07186 §3.1, Du et al. `most_frequent`, Jiang et al., arXiv:2605.23099 §5)
  The plurality of the valid keys; INVALID never votes and a vote with no valid key has no
  winner (INVALID). Ties among the leading keys:

  * ``first_agent``: the tied key that occurs first in voter order (Du et al., UDPO);
  * ``pre_debate_count``: the tied key with more votes in `pre_keys` (the pre-debate answers),
    then the first in voter order (SVR-MAD);
  * a custom ``rank(key)``: the tied key of highest rank, then the first in voter order
    (SVR-MAD's per-agent vote prefers the agent's own answer; self-consistency prefers the
    most confident sample).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .answers import TASK_TYPES, answers_equivalent, normalize_answer

#: The single answer value that stands for every unparseable answer.
INVALID = "<none>"

#: Tie rules of the plurality vote (config `tie_break`).
TIE_BREAKS = ("first_agent", "pre_debate_count")


def answer_keys(
    answers: Sequence[str | None],
    *,
    task_type: str | None = None,
    merge_equivalent: bool = False,
) -> list[str]:
    """One comparable key per answer: INVALID for None, else the (canonical) answer.

    Keys are equal exactly when the answers count as the same answer (module docstring).
    Canonicalise everything that will be compared in one call, so that `merge_equivalent`
    builds one set of classes.
    """
    if merge_equivalent and task_type is None:
        raise ValueError("merge_equivalent needs a task_type")
    if task_type is not None and task_type not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {TASK_TYPES}")
    keys: list[str] = []
    for answer in answers:
        if answer is None:
            keys.append(INVALID)
        elif not isinstance(answer, str):
            raise TypeError(f"answers must be str or None, got {type(answer).__name__}")
        elif task_type is None:
            keys.append(answer)
        else:
            canonical = normalize_answer(answer, task_type)
            keys.append(INVALID if canonical is None else canonical)
    if merge_equivalent:
        classes = AnswerClasses(task_type)  # type: ignore[arg-type]
        keys = [classes(key) for key in keys]
    return keys


@functools.lru_cache(maxsize=1 << 16)
def _equivalent_keys(a: str, b: str, task_type: str) -> bool:
    return answers_equivalent(a, b, task_type)


def same_answer(a: str, b: str, task_type: str) -> bool:
    """Whether two answer keys (`answer_keys` with `task_type`) are the same answer: equal keys, or
    valid math keys the grader proves equivalent. INVALID is one value, equal only to itself."""
    if a == b:
        return True
    if task_type != "math" or a == INVALID or b == INVALID:
        return False
    return _equivalent_keys(*sorted((a, b)), task_type)  # symmetric, so one cache entry per pair


class AnswerClasses:
    """One question's answer keys merged by `same_answer`: `classes(key)` is the key's class, the
    first earlier key it is the same answer as (the key itself when none is). Feed every key that
    will be compared to one instance, in a fixed order, so that all comparisons share one set of
    classes."""

    def __init__(self, task_type: str, keys: Sequence[str] = ()):
        if task_type not in TASK_TYPES:
            raise ValueError(f"unknown task_type {task_type!r}; expected one of {TASK_TYPES}")
        self.task_type = task_type
        self._representatives: list[str] = []
        self._class_of: dict[str, str] = {INVALID: INVALID}
        for key in keys:
            self(key)

    def __call__(self, key: str) -> str:
        if key not in self._class_of:
            match = next((rep for rep in self._representatives if same_answer(rep, key, self.task_type)), None)
            if match is None:
                self._representatives.append(key)
            self._class_of[key] = key if match is None else match
        return self._class_of[key]


@dataclass(frozen=True)
class Vote:
    """The outcome of a plurality vote over keys."""

    key: str  # the winning key; INVALID when no key was valid
    position: int | None  # the first voter holding the winning key (None: no winner)
    tied: bool  # several keys shared the top count (before the tie rule)


def plurality(
    keys: Sequence[str],
    *,
    tie_break: str = "first_agent",
    pre_keys: Sequence[str] | None = None,
    rank: Callable[[str], Any] | None = None,
) -> Vote:
    """The Tang et al., arXiv:2602.07186 §3.1 vote over `keys`, ties settled by `tie_break` or `rank` (module docstring)."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown tie_break {tie_break!r}; expected one of {TIE_BREAKS}")
    keys = list(keys)
    counts = Counter(k for k in keys if k != INVALID)
    if not counts:
        return Vote(INVALID, None, False)
    top = max(counts.values())
    leaders = [k for k in counts if counts[k] == top]  # Counter keeps first-occurrence order
    if rank is None and tie_break == "pre_debate_count":
        pre = Counter(k for k in (pre_keys or []) if k != INVALID)
        rank = lambda k: pre.get(k, 0)  # noqa: E731
    winner = leaders[0] if rank is None else max(leaders, key=rank)  # max keeps the first among equals
    return Vote(winner, keys.index(winner), len(leaders) > 1)


def vote_answer(answers: Sequence[str | None], keys: Sequence[str], **rules) -> str | None:
    """The plurality answer as the first winning voter wrote it, or None without a valid answer."""
    vote = plurality(keys, **rules)
    return None if vote.position is None else answers[vote.position]


def majority_vote(answers: Sequence[str | None], *, task_type: str | None = None) -> str | None:
    """ŷ of Tang et al., arXiv:2602.07186 §3.1: the plurality answer with ties to the first agent, or None.

    With `task_type` answers are grouped by `normalize_answer`, and the first agent's own
    string of the winning group is returned.
    """
    return vote_answer(answers, answer_keys(answers, task_type=task_type))
