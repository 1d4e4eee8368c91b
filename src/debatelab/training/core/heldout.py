"""Held-out accuracy during training (config `training.runs.<run>.heldout`), as TRL's
`eval_strategy="steps"`: the live policy answers questions it never trains on.

- Questions: a seeded subset of `heldout_questions` of the held-out dataset (`select_questions` with
  the run's seed), the same at every evaluation.
- Answers: one zero-shot reply per question (the question prompt with the policy's system prompt; a
  multi-agent run asks each agent alone with its own), sampled at the run's temperature, top_p and
  max_tokens with a seed fixed per question (`heldout_seed`), so that two evaluations differ only by
  the weights, not by sampling noise. Graded as the rollouts are (the trainer passes its grader).
- When: before the first step (the base model, step 0), after every `heldout_every` steps and after
  the last step (`evaluates_after`).

metrics.parquet keeps one row per training step: `heldout_base_accuracy` holds the step-0 value on
the first row (NaN on the others), `heldout_accuracy` the value after that row's step (NaN on steps
without an evaluation), `heldout_questions` the number of questions (0 without a held-out set). A
multi-agent run adds `heldout_base_accuracy_<agent>` and `heldout_accuracy_<agent>` per agent; its
`heldout_accuracy` is the mean over its agents. The values live in the checkpointed metrics, so a
resumed run neither evaluates a step again nor loses one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from ... import prompts
from ...llm import GenerationRequest, SamplingParams
from ...llm.base import Backend, stable_hash

BASE, AFTER, COUNT = "heldout_base_accuracy", "heldout_accuracy", "heldout_questions"
HELDOUT_COLUMNS = [BASE, AFTER, COUNT]


def heldout_seed(run_seed: int, question_id: str) -> int:
    """The sampling seed of a held-out question: the same at every evaluation of the run."""
    return int(stable_hash({"run": run_seed, "question": question_id, "what": "heldout"})[:8], 16)


def heldout_questions(frame: pd.DataFrame, settings) -> list[dict]:
    """The run's held-out questions: a seeded subset of `heldout_questions`, in the dataset's order."""
    from ...zero_shot import select_questions

    rows = select_questions(frame, settings.heldout_questions, settings.seed).to_dict("records")
    if not rows:
        raise ValueError("training: the held-out dataset has no questions")
    return rows


def evaluates_after(steps_done: int, settings) -> bool:
    """Whether the policy is evaluated after `steps_done` steps (0: the base model)."""
    return steps_done == 0 or steps_done % settings.heldout_every == 0 or steps_done == settings.steps


def heldout_requests(rows: Sequence[dict], system_prompt: str | None, settings) -> list[GenerationRequest]:
    """One request per question: its zero-shot prompt, the run's sampling, the question's fixed seed."""
    return [
        GenerationRequest(
            messages=prompts.question_messages(row, system_prompt),
            sampling=SamplingParams(
                temperature=settings.temperature,
                top_p=settings.top_p,
                max_tokens=settings.max_tokens,
                seed=heldout_seed(settings.seed, str(row["id"])),
            ),
        )
        for row in rows
    ]


def answer_heldout(
    backend: Backend, rows: Sequence[dict], system_prompt: str | None, settings, grade: Callable[[dict, str], tuple]
) -> list[bool]:
    """Whether the backend's one reply to each question is right (`grade(row, text)`), in one batch."""
    if not rows:
        return []
    generations = backend.generate(heldout_requests(rows, system_prompt, settings))
    return [bool(grade(row, g[0].text)[1]) for row, g in zip(rows, generations)]


def agent_column(column: str, agent: str) -> str:
    """A multi-agent run's per-agent column, e.g. heldout_accuracy_alice."""
    return f"{column}_{agent}"
