"""The scripted solver whose replies the micro model is trained to imitate (`testbed.corpus`).

It is the base policy the trainers should improve on, written down: imperfect on purpose, with
errors a better policy can avoid on questions it has never seen.

* A first answer is hasty (no opener, each step slipping with `hasty_slip`, and a `hasty_misread` of
  the time reading one operator of the question the wrong way round), or, a `careful_share` of
  the time, careful ("Let me be careful. ", slipping with `careful_slip`), or, a `guess_share` of the
  time, a guess without working ("The answer is \\boxed{...}", off by 1 to 5, never right).
* A debate reply (any turn that shows earlier replies: every protocol's template, SDRL's self-debate)
  copies one of the solutions or answers it is shown (`copy_share`), solves again hastily
  (`resolve_share`), or checks each step carefully (the rest).
* An agent given the attack system prompt slips on purpose in one step, every time.
* A confidence turn (0-10) rates a careful or checked reply 8-9, a copy 6-7, a hasty one 5-6.

So the trainers have things to learn that carry to unseen questions: read the question as written
(a misread is a structural error, always wrong, that a small network imitates as readily as the
opener that rules it out), work the steps out rather than guess, open carefully, and in a debate
check rather than copy; and each step's result can be sharpened towards the right one.
The teacher reads what a model would read: the question's chain from the row, and the solutions
shown to it from the prompt's text (`shown_solutions`), never the protocol's internals.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..prompts.questions import ATTACK_SYSTEM_PROMPT, FINAL_ANSWER_TEMPLATES
from .task import Chain, Step, parse_solution, render_steps, solve

CAREFUL = "Let me be careful. "
RESOLVE = "Let me solve it again. "
CHECK = "Let me check each step. "
COPY = "I agree with this solution: "
ADOPT = "I agree with the other agents. "

_EXPRESSION = r"-?\d+(?: [-+] \d+)*"
_SOLUTION = re.compile(rf"{_EXPRESSION}(?: = {_EXPRESSION})+")
_BOXED = re.compile(r"\\boxed\{(-?\d+)\}")


@dataclass(frozen=True)
class TeacherSettings:
    """How often the scripted solver slips and which way it answers (`micro.recipe.MicroRecipe.teacher`)."""

    hasty_slip: float = 0.3  # probability that a hasty step's result is off by ±1 or ±2
    careful_slip: float = 0.05  # the same for a careful or checked step
    careful_share: float = 0.15  # first answers that open carefully
    guess_share: float = 0.0  # first answers that guess, off by 1 to 5, without working
    hasty_misread: float = 0.0  # hasty replies that copy the question with one operator flipped
    copy_share: float = 0.4  # debate replies that copy a shown solution or answer
    resolve_share: float = 0.4  # debate replies that solve again hastily (the rest check each step)

    def __post_init__(self):
        for key in (
            "hasty_slip",
            "careful_slip",
            "careful_share",
            "guess_share",
            "hasty_misread",
            "copy_share",
            "resolve_share",
        ):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"micro teacher: {key} must lie in [0, 1], got {getattr(self, key)}")
        if self.careful_share + self.guess_share > 1:
            raise ValueError("micro teacher: careful_share + guess_share must be at most 1")
        if self.copy_share + self.resolve_share > 1:
            raise ValueError("micro teacher: copy_share + resolve_share must be at most 1")


def shown_solutions(text: str) -> list[list[Step]]:
    """Every step-by-step solution written in `text`, in order."""
    out = []
    for match in _SOLUTION.finditer(text):
        steps = parse_solution(match.group(0))
        if steps:
            out.append(steps)
    return out


def shown_answers(text: str) -> list[str]:
    """Every boxed integer answer in `text` (answer-only peers: "The answer is \\boxed{3}")."""
    return _BOXED.findall(text)


def _attacked(steps: list[Step], rng: np.random.Generator) -> list[Step]:
    """A solution with one deliberate slip (a random step), the steps after it going on from it."""
    k = int(rng.integers(len(steps)))
    out, total = list(steps[:k]), steps[k].total
    for i, s in enumerate(steps[k:]):
        result = total + s.sign * s.term + (int(rng.choice((-2, -1, 1, 2))) if i == 0 else 0)
        out.append(Step(total, s.sign, s.term, result))
        total = result
    return out


def misread(chain: Chain, rng: np.random.Generator) -> Chain:
    """`chain` with one operator read the wrong way round ("4 - 1 + 7" read as "4 + 1 + 7")."""
    k = int(rng.integers(len(chain.rest)))
    rest = list(chain.rest)
    rest[k] = (-rest[k][0], rest[k][1])
    return Chain(chain.first, tuple(rest))


class Teacher:
    def __init__(self, settings: TeacherSettings):
        self.s = settings

    def _hasty(self, chain: Chain, rng: np.random.Generator) -> list[Step]:
        """A hasty solution: the question misread a `hasty_misread` of the time, each step slipping."""
        # no draw at 0: a recipe without misreads renders the corpus it always did
        if self.s.hasty_misread and chain.rest and rng.random() < self.s.hasty_misread:
            chain = misread(chain, rng)
        return solve(chain, rng, self.s.hasty_slip)

    def first_answer(self, chain: Chain, rng: np.random.Generator, system_prompt: str | None = None) -> str:
        if system_prompt == ATTACK_SYSTEM_PROMPT:
            return render_steps(_attacked(solve(chain, rng, 0.0), rng))
        u = rng.random()
        if u < self.s.careful_share:
            return CAREFUL + render_steps(solve(chain, rng, self.s.careful_slip))
        if u < self.s.careful_share + self.s.guess_share:
            off = int(rng.integers(1, 6)) * (1 if rng.random() < 0.5 else -1)
            return FINAL_ANSWER_TEMPLATES["math"].format(answer=chain.value + off)
        return render_steps(self._hasty(chain, rng))

    def debate_reply(
        self, chain: Chain, context: str, rng: np.random.Generator, system_prompt: str | None = None
    ) -> str:
        """A reply to a turn whose `context` (the text the earlier replies are shown in) holds the
        solutions or answers to copy."""
        if system_prompt == ATTACK_SYSTEM_PROMPT:
            return RESOLVE + render_steps(_attacked(solve(chain, rng, 0.0), rng))
        u = rng.random()
        if u < self.s.copy_share:
            shown = [("solution", s) for s in shown_solutions(context) if len(s) == len(chain.rest)]
            shown += [("answer", a) for a in shown_answers(context)] if not shown else []
            if shown:
                kind, item = shown[int(rng.integers(len(shown)))]
                if kind == "solution":
                    return COPY + render_steps(item)
                return ADOPT + FINAL_ANSWER_TEMPLATES["math"].format(answer=item)
        if u < self.s.copy_share + self.s.resolve_share:
            return RESOLVE + render_steps(self._hasty(chain, rng))
        return CHECK + render_steps(solve(chain, rng, self.s.careful_slip))

    @staticmethod
    def confidence(reply: str, rng: np.random.Generator) -> str:
        """A 0-10 self-report on `reply`."""
        if reply.startswith((CAREFUL, CHECK)):
            low = 8
        elif reply.startswith((COPY, ADOPT)):
            low = 6
        else:
            low = 5
        return str(low + int(rng.integers(2)))


def last_user_and_assistant(messages: Sequence[dict]) -> str:
    """The text a debate reply draws on: the last user turn and the last assistant turn before it
    (`du` keeps the agent's own earlier answer there; SDRL's two-turn prompt its first solution)."""
    users = [m["content"] for m in messages if m["role"] == "user"]
    assistants = [m["content"] for m in messages if m["role"] == "assistant"]
    return "\n".join([*assistants[-1:], *users[-1:]])
