"""Rollouts: the policy's sampled replies to a step's prompts, graded and rewarded.

All rollouts of one sampling round go to the backend as one batch (the backend cuts it into its own
forward batches). They are not served from the generation cache: each step samples the current
policy afresh. Their seeds derive from (run seed, step, question, turn, sample), and the
transformers backend samples each sequence from its own seeded stream, so a rerun of a step
repeats its rollouts whatever else is in the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ... import grading
from ...data.schema import parse_meta
from ...llm import GenerationRequest, SamplingParams
from ...llm.base import Backend, stable_hash
from .rewards import DAPO_INVALID, dapo_math_verify, overlong_penalty, verifiable_reward


@dataclass
class Rollout:
    """One sampled reply and what the update needs of it."""

    question_id: str
    group: str  # the prompt it answers: the question (turn 1) or the question's debate prompt (turn 2)
    turn: int  # 1: first turn; 2: SDRL's debate turn
    sample: int
    messages: tuple  # the prompt chat
    text: str
    token_ids: list[int]
    finish_reason: str
    answer: str | None
    correct: bool
    reward: float
    advantage: float = 0.0
    weight: float = 1.0  # multiplies the sequence's whole loss (UDPO's replay importance weight)
    meta: dict = field(default_factory=dict)  # e.g. which first-turn rollouts a debate prompt showed

    @property
    def length(self) -> int:
        return len(self.token_ids)


#: A reward: (rollout's question row, reply text, parsed answer, correct, token count) -> float.
RewardFunction = Callable[[dict, str, "str | None", bool, int], float]
#: A grader: (rollout's question row, reply text) -> (parsed answer or None, correct).
Grader = Callable[[dict, str], "tuple[str | None, bool]"]

#: `reward` settings with a built-in grader and reward (any other value is "module:function").
BUILTIN_REWARDS = ("verifiable", "dapo_math")


def workflow_grade(row: dict, text: str) -> tuple[str | None, bool]:
    """The workflow's grader (`grading.extract_answer` + `grading.is_correct`), as every stage grades."""
    labels = parse_meta(row.get("meta")).get("labels")
    choices = list(row["choices"]) if row.get("choices") is not None else None
    answer = grading.extract_answer(text, row["task_type"], choices=choices, labels=labels)
    return answer, grading.is_correct(answer, str(row["answer"]), row["task_type"], labels=labels)


def dapo_math_grade(row: dict, text: str) -> tuple[str | None, bool]:
    """DAPO-Math's verifier (`rewards.dapo_math_verify`): the normalised "Answer:" line, exact match."""
    answer, correct = dapo_math_verify(text, str(row["answer"]))
    return (None if answer == DAPO_INVALID else answer), correct


def load_grader(settings) -> Grader:
    """What decides a rollout's answer and correctness (and so dynamic sampling, debate pairs and the
    ±1): DAPO-Math's verifier for `reward: dapo_math` (the run's `dapo:` / `sdrl:` block), else the
    workflow's grader."""
    return dapo_math_grade if settings.own.reward == "dapo_math" else workflow_grade


def rollout_seed(run_seed: int, step: int, question_id: str, turn: int, sample: int) -> int:
    return int(
        stable_hash({"run": run_seed, "step": step, "question": question_id, "turn": turn, "sample": sample})[:8], 16
    )


def default_reward(settings) -> RewardFunction:
    """±1 by verified correctness plus DAPO's soft overlong punishment (Liu et al., arXiv:2601.22297 §3-5)."""

    def reward(row, text, answer, correct, length):
        return verifiable_reward(correct) + overlong_penalty(
            length, settings.max_tokens, settings.overlong_buffer, settings.overlong_penalty
        )

    return reward


def load_reward(settings) -> RewardFunction:
    """The run's reward: "verifiable" or "dapo_math" (`default_reward`: ±1 by the run's grader,
    `load_grader`, plus the overlong penalty), or a custom function named "module:function"."""
    reward = settings.own.reward
    if reward in BUILTIN_REWARDS:
        return default_reward(settings)
    import importlib

    module, _, name = reward.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"training: reward {reward!r} is neither one of {BUILTIN_REWARDS} nor an importable module:function ({exc})"
        ) from exc


def sample_rollouts(
    backend: Backend,
    prompts: Sequence[tuple[dict, str, tuple]],
    *,
    n: int,
    turn: int,
    step: int,
    settings,
    reward: RewardFunction,
    progress=None,
    grader: Grader | None = None,
) -> list[list[Rollout]]:
    """`n` rollouts of every (row, group id, messages) prompt, in one backend batch; one list per prompt.
    Each is graded by `grader` (default: the run's, `load_grader(settings)`)."""
    grade = grader or load_grader(settings)
    requests = []
    for row, _group, messages in prompts:
        for j in range(n):
            seed = rollout_seed(settings.seed, step, str(row["id"]), turn, j)
            sampling = SamplingParams(
                temperature=settings.temperature, top_p=settings.top_p, max_tokens=settings.max_tokens, seed=seed
            )
            requests.append(GenerationRequest(messages=messages, sampling=sampling))
    generations = backend.generate(requests, progress=progress) if requests else []
    out = []
    for p, (row, group, messages) in enumerate(prompts):
        group_rollouts = []
        for j in range(n):
            g = generations[p * n + j][0]
            if g.token_ids is None:
                raise RuntimeError(f"backend {backend.model_id} returns no token ids: it cannot serve RL rollouts")
            answer, correct = grade(row, g.text)
            group_rollouts.append(
                Rollout(
                    question_id=str(row["id"]),
                    group=group,
                    turn=turn,
                    sample=j,
                    messages=tuple(messages),
                    text=g.text,
                    token_ids=list(g.token_ids),
                    finish_reason=g.finish_reason,
                    answer=answer,
                    correct=correct,
                    reward=float(reward(row, g.text, answer, correct, len(g.token_ids))),
                )
            )
        out.append(group_rollouts)
    return out
