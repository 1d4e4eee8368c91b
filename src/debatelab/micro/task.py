"""The micro model's task: a chain of one-digit additions and subtractions, solved step by step.

Questions are reasoning-gym's `chain_sum` ("State the final answer to the following arithmetic
problem: 4 - 1 - 7 ="), in the shipped build with two or three one-digit terms
(`data.offline.CHAIN_SUM_SETTINGS`, `learning_cpu`'s task: about 4,200 problems, split by question
text); four or five terms (`chain_sum_long`, 1.7 million problems) were tried first and never learnt
at this size (docs/micro.md). A solution rewrites the expression, adding up its first two numbers a step:

    4 - 1 - 7 + 7 = 3 - 7 + 7 = -4 + 7 = 3. The answer is \\boxed{3}.

so every step is one local sum and a copy of the rest, and the first expression is the question's
own text (what a small transformer learns readily: the same chain written as running totals,
"4-1=3, 3-7=-4, ...", asks it to find the next term in the question, and a 1M-parameter model
trained on it got 35 % of its steps right where the teacher gets 75 %).

`solve` writes one with slips: each step's result is off by ±1 or ±2 with a given probability, and
later steps go on from the slipped total, as a person's mistake would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..prompts.questions import FINAL_ANSWER_TEMPLATES

_EXPRESSION = re.compile(r"(-?\d+(?:\s*[-+]\s*\d+)+)\s*=\s*$")
_TERM = re.compile(r"([-+]?)\s*(\d+)")
_EXPRESSION_TERMS = re.compile(r"-?\d+(?:[-+]\d+)*")
_SIGNED = re.compile(r"([-+]?)(\d+)")


@dataclass(frozen=True)
class Chain:
    """`first` then (sign, term) pairs: 4 - 1 + 7 is Chain(4, ((-1, 1), (1, 7)))."""

    first: int
    rest: tuple[tuple[int, int], ...]

    @property
    def value(self) -> int:
        return self.first + sum(sign * term for sign, term in self.rest)


def parse_chain(question: str) -> Chain | None:
    """The chain of a question ending in "a ± b ± ... =", or None."""
    match = _EXPRESSION.search(question.strip())
    if match is None:
        return None
    terms = _TERM.findall(match.group(1))
    first_sign, first = terms[0]
    rest = tuple((-1 if sign == "-" else 1, int(term)) for sign, term in terms[1:])
    return Chain(-int(first) if first_sign == "-" else int(first), rest)


@dataclass(frozen=True)
class Step:
    total: int
    sign: int
    term: int
    result: int


def solve(chain: Chain, rng: np.random.Generator, slip: float) -> list[Step]:
    """The steps of a solution whose every result slips by ±1 or ±2 with probability `slip`."""
    steps, total = [], chain.first
    for sign, term in chain.rest:
        result = total + sign * term
        if rng.random() < slip:
            result += int(rng.choice((-2, -1, 1, 2)))
        steps.append(Step(total, sign, term, result))
        total = result
    return steps


def _term(sign: int, term: int) -> str:
    return f" {'+' if sign > 0 else '-'} {term}"


def render_steps(steps: list[Step]) -> str:
    """ "4 - 1 - 7 + 7 = 3 - 7 + 7 = -4 + 7 = 3. The answer is \\boxed{3}." """
    lines = [f"{steps[0].total}" + "".join(_term(s.sign, s.term) for s in steps)]
    for k, s in enumerate(steps):
        lines.append(f"{s.result}" + "".join(_term(t.sign, t.term) for t in steps[k + 1 :]))
    return f"{' = '.join(lines)}. {FINAL_ANSWER_TEMPLATES['math'].format(answer=steps[-1].result)}"


def parse_solution(text: str) -> list[Step] | None:
    """The steps of a solution written as `render_steps` writes it ("4 - 1 - 7 + 7 = 3 - 7 + 7 = ..."),
    or None where consecutive expressions don't follow one another (a term changed or dropped)."""
    parts = [p.replace(" ", "") for p in text.split(" = ")]
    expressions = [
        _EXPRESSION_TERMS.fullmatch(p) and [(1 if sg != "-" else -1, int(v)) for sg, v in _SIGNED.findall(p)]
        for p in parts
    ]
    if len(expressions) < 2 or not all(expressions):
        return None
    steps = []
    for before, after in zip(expressions, expressions[1:]):
        if len(after) != len(before) - 1 or after[1:] != before[2:]:
            return None
        total = before[0][0] * before[0][1]
        sign, term = before[1]
        result = after[0][0] * after[0][1]
        steps.append(Step(total, sign, term, result))
    return steps
