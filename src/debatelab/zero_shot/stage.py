"""The zero-shot stage: every question × sample of one agent, with confidences, in batches through
the generation cache. Output schema: `debatelab.zero_shot.schema`."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .. import grading, prompts
from ..data import read_dataset
from ..data.schema import parse_meta
from ..estimators import (
    ESTIMATORS,
    AnsweredChat,
    ElicitationSettings,
    elicit_confidences,
    token_summaries,
)
from ..io import write_parquet_atomic
from ..llm import GenerationCache, GenerationRequest, generate_cached
from ..llm.agent import AgentSpec
from ..llm.base import Backend
from .schema import ZERO_SHOT_COLUMNS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ZeroShotSettings:
    """Config `zero_shot` (defaults match config/schema.yaml), the experiment seed and the
    dataset's `limit`; the confidence estimators' own settings are `elicitation`."""

    samples: int = 1
    seed: int = 0
    batch_size: int = 64  # samples per backend call and per cache flush: a kill loses at most one
    top_logprobs: int = 20  # k of the token entropy and max token probability (0: not recorded)
    limit: int | None = None  # questions per dataset (seeded subset); None = all
    estimators: tuple[str, ...] = ESTIMATORS
    elicitation: ElicitationSettings = ElicitationSettings()
    show_progress: bool = True

    def __post_init__(self):
        object.__setattr__(self, "estimators", tuple(self.estimators))
        if self.samples < 1 or self.batch_size < 1:
            raise ValueError(f"zero_shot samples and batch_size must be >= 1, got {self.samples} and {self.batch_size}")
        if self.top_logprobs < 0:
            raise ValueError(f"zero_shot top_logprobs must be >= 0, got {self.top_logprobs}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"a dataset's limit must be >= 1 or null, got {self.limit}")
        unknown = [e for e in self.estimators if e not in ESTIMATORS]
        if unknown:
            raise ValueError(f"zero_shot estimators: unknown {unknown}; expected some of {ESTIMATORS}")

    @classmethod
    def from_config(cls, section: dict, **overrides) -> ZeroShotSettings:
        """From the flat config section (`verbal_*` and `seqprob_target` go to `elicitation`)."""
        own = {**section, **overrides}
        elicitation = {k: own.pop(k) for k in list(own) if k in ElicitationSettings.__dataclass_fields__}
        return cls(elicitation=ElicitationSettings(**elicitation), **own)


def select_questions(df: pd.DataFrame, limit: int | None, seed: int) -> pd.DataFrame:
    """A seeded subset of `limit` questions, in the dataset's own order."""
    if limit is None or limit >= len(df):
        return df.reset_index(drop=True)
    chosen = df.sample(n=limit, random_state=seed).index
    return df.loc[sorted(chosen)].reset_index(drop=True)


def run_zero_shot(
    questions: pd.DataFrame,
    agent: AgentSpec,
    backend: Backend,
    cache: GenerationCache,
    settings: ZeroShotSettings,
    dataset_name: str,
) -> pd.DataFrame:
    """Sample every question `settings.samples` times and estimate confidences, all in batches."""
    rows = questions.to_dict("records")
    chats = [prompts.question_messages(r, agent.system_prompt) for r in rows]
    sampling = agent.sampling(seed=settings.seed, logprobs=True, top_logprobs=settings.top_logprobs)
    requests = [GenerationRequest(messages=chat, sampling=sampling, n=settings.samples) for chat in chats]
    tag = f"{dataset_name}/{agent.name}"
    generations = generate_cached(
        backend,
        requests,
        cache,
        batch_size=settings.batch_size,
        desc=f"zero-shot {tag}",
        show_progress=settings.show_progress,
    )

    records, answered = [], []
    for row, chat, gens in zip(rows, chats, generations):
        labels = parse_meta(row["meta"]).get("labels")
        choices = list(row["choices"]) if row["choices"] is not None else None
        for j, g in enumerate(gens):
            answer = grading.extract_answer(g.text, row["task_type"], choices=choices, labels=labels)
            records.append(
                {
                    "question_id": str(row["id"]),
                    "dataset": dataset_name,
                    "agent": agent.name,
                    "model": agent.model,
                    "round": 0,
                    "sample": j,
                    "task_type": row["task_type"],
                    "response": g.text,
                    "answer": answer,
                    "gold": str(row["answer"]),
                    "correct": bool(grading.is_correct(answer, str(row["answer"]), row["task_type"], labels=labels)),
                    "parse_failed": answer is None,
                    "prompt_tokens": g.prompt_tokens,
                    "completion_tokens": g.completion_tokens,
                    "cached_tokens": g.cached_tokens,
                    "finish_reason": g.finish_reason,
                    **token_summaries(g),
                }
            )
            answered.append(
                AnsweredChat(
                    chat=chat,
                    response=g.text,
                    answer=answer,
                    task_type=row["task_type"],
                    null_chat=prompts.question_messages(row, agent.system_prompt, null=True),
                )
            )

    confidences = elicit_confidences(
        answered,
        settings.estimators,
        backend,
        cache,
        settings.elicitation,
        seed=settings.seed,
        batch_size=settings.batch_size,
        tag=tag,
        show_progress=settings.show_progress,
    )
    for record, confidence in zip(records, confidences):
        record.update(confidence.as_dict())
    return pd.DataFrame(records, columns=ZERO_SHOT_COLUMNS)


def zero_shot_job(
    dataset_path: str | Path,
    out_path: str | Path,
    dataset_name: str,
    agent: AgentSpec,
    model_path: str | dict,
    settings: ZeroShotSettings,
    cache_dir: str | Path,
    backend: Backend | None = None,
    budget=None,
) -> pd.DataFrame:
    """The `zero_shot` rule: read the dataset, run the agent, write its Parquet atomically.

    `budget`: a `debatelab.cost.Budget` the cache asks before each unit (None: no cap); a unit that
    would pass it stops the job with `BudgetExceeded`, every unit before it cached."""
    from ..llm.engines import open_backends

    questions = select_questions(read_dataset(dataset_path), settings.limit, settings.seed)
    engines = []  # the engine this job built (a backend passed in is the caller's to close)
    if backend is None:  # `model_path`: a folder, or {"base", "adapter"} for an adapter-served model
        built, engines = open_backends({agent.model: (agent.backend, agent.backend_options, model_path)})
        backend = built[agent.model]
    try:
        cache = GenerationCache(cache_dir, budget=budget, model=agent.model)
        log.info("cache %s holds %d entries", cache_dir, len(cache))
        df = run_zero_shot(questions, agent, backend, cache, settings, dataset_name)
    finally:
        for engine in engines:
            engine.close()
    write_parquet_atomic(df, out_path)
    return df
