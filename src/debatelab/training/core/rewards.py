"""Rewards and group advantages of RL with verifiable rewards (Liu et al., arXiv:2601.22297 §3-5), shared by the methods.

* verifiable reward: r = +1 if the parsed answer is correct (`grading.is_correct`), else −1;
* DAPO-Math's verifier (Liu et al., arXiv:2601.22297 §6.1, App. B-C; verl's `math_dapo.compute_score`, the grader DAPO and the SDRL
  paper train with): the last 300 characters of the reply, the last "Answer: ..." line in them
  ("[INVALID]" without one), Minerva's `normalize_final_answer` on it and on the ground truth, and
  correct iff the two strings are equal; no \\boxed{} fallback, no numeric or symbolic equivalence;
* DAPO's soft overlong punishment (verl): r += min(−(|o| − (L_max − L_cache)) / L_cache · factor, 0),
  0 up to L_max − L_cache tokens, −factor at L_max;
* the task reward of a debate (Tang et al., arXiv:2602.07186 §3.1; UDPO's r_task, MAPPO's and RMAAC's return): 1 when
  the final round's majority vote is right;
* group advantage (Eq. 6): Â_i = (r_i − mean(r)) / (std(r) + ε), std unbiased (torch's, as TRL and
  verl), ε = 1e-6 (verl), the same for every token of response i; over one axis of an array, so
  that UMAD takes it over the G threads of every (agent, turn) at once.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ...grading import is_correct, majority_vote


def verifiable_reward(correct: bool) -> float:
    return 1.0 if correct else -1.0


def overlong_penalty(length: int, max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """The soft overlong punishment of a response of `length` tokens (≤ 0)."""
    if buffer <= 0:
        return 0.0
    return min(-(length - (max_tokens - buffer)) / buffer * factor, 0.0)


def task_reward(
    answers: Sequence[Sequence[str | None]], gold: str, task_type: str, labels: list[str] | None = None
) -> float:
    """r_task = 1[ŷ(τ) = y*], ŷ the final round's majority vote (Tang et al., arXiv:2602.07186 §3.1)."""
    final = majority_vote(list(answers[-1]), task_type=task_type)
    return float(is_correct(final, gold, task_type, labels=labels))


def group_advantages(rewards, eps: float = 1e-6, axis: int = 0) -> np.ndarray:
    """(r − mean) / (unbiased std + ε) within the groups along `axis` (a vector: one group); 0 for
    groups of one."""
    r = np.asarray(rewards, dtype=float)
    if r.shape[axis] < 2:
        return np.zeros_like(r)
    return (r - r.mean(axis=axis, keepdims=True)) / (r.std(axis=axis, ddof=1, keepdims=True) + eps)


def all_equal(rewards) -> bool:
    """A group whose rewards are all equal carries no gradient (zero advantages)."""
    r = np.asarray(rewards, dtype=float)
    return bool(r.size == 0 or np.all(r == r[0]))


# --------------------------------------------------------------------------- DAPO-Math's verifier

DAPO_INVALID = "[INVALID]"
DAPO_TAIL_CHARS = 300  # verl scores the last 300 characters only ("the longest MATH-500 answer has 159")
_DAPO_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")
# Minerva's normalisation (Lewkowycz et al. 2022, App. D), as verl's math_dapo applies it: plain
# replacements, then unit and filler words removed, in this order.
_DAPO_REPLACEMENTS = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
_DAPO_REMOVED = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    "\\mathrm{th}",
    "^\\circ",
    "^{\\circ}",
    "\\;",
    ",\\!",
    "{,}",
    '"',
    "\\dots",
)


def dapo_normalize(answer: str) -> str:
    """Minerva's `normalize_final_answer` (verl `math_dapo`): the text after the last "=", fixed
    replacements, unit words removed, the inside of $...$, \\text{}, \\textbf{}, \\overline{} and
    \\boxed{}, "\\frac12" / "\\sqrt2" shorthand expanded, "$" dropped, commas out of integers."""
    s = answer.split("=")[-1]
    for before, after in _DAPO_REPLACEMENTS:
        s = s.replace(before, after)
    for word in _DAPO_REMOVED:
        s = s.replace(word, "")
    s = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", s)
    for macro in ("text", "textbf", "overline"):
        s = re.sub(r"(\\" + macro + r"\{)(.*?)(\})", "\\2", s)
    s = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", s)
    s = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", s)
    s = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", s)
    s = s.replace("$", "")
    if s.replace(",", "").isdigit():
        s = s.replace(",", "")
    return s.strip()


def dapo_math_verify(text: str, ground_truth: str) -> tuple[str, bool]:
    """(the normalised answer of a reply, whether it equals the normalised ground truth): verl's
    `math_dapo.compute_score` with its defaults (module docstring). An answerless reply gives
    "[INVALID]" normalised (itself), which no ground truth equals."""
    matches = _DAPO_ANSWER_LINE.findall(text[-DAPO_TAIL_CHARS:])
    prediction = dapo_normalize(matches[-1] if matches else DAPO_INVALID)
    return prediction, prediction == dapo_normalize(str(ground_truth))
