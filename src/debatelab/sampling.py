"""The zero-shot sampling stage: every question × sample of one agent, with confidences.

Output schema (`results/{experiment}/zero_shot/{dataset}/{agent}.parquet`), one row per
(question, sample):

=================  ========  ==========================================================
column             type      meaning
=================  ========  ==========================================================
question_id        str       the dataset row's `id`
dataset            str       dataset name in the config
agent              str       agent name in the config
model              str       model name the agent runs
round              int       always 0: the pre-debate answer every protocol starts from
sample             int       sample index (0 .. samples-1)
task_type          str       math / multiple_choice / yes_no / label
response           str       the full reply
answer             str|null  parsed answer (null: nothing parseable, graded wrong)
gold               str       reference answer
correct            bool      answer matches gold
parse_failed       bool      answer is null
prompt_tokens      int       prompt length of the answer call
completion_tokens  int       reply length
finish_reason      str       stop / length
mean_logprob       float     mean token log-probability of the reply
min_logprob        float     minimum token log-probability of the reply (SID-ET, SVR-MAD prior)
conf_verbal        float     self-report, mean of k 0-10 ratings / 10 (0.5 if none parsed)
verbal_parsed      int       how many of the k ratings parsed
conf_seqprob       float     σ(C), C = log P(ŷ|x) − log P(ŷ|x_null), length-normalised
seqprob_logp       float     log P(ŷ|x), mean per token
seqprob_logp_null  float     log P(ŷ|x_null), mean per token
seqprob_c          float     C
extra_tokens       int       prompt + completion tokens spent on confidence estimation
=================  ========  ==========================================================

Estimators that are switched off leave their columns null.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import grading, prompts
from .confidence import bias_corrected_confidence, mean_logprob, min_logprob, verbal_confidence
from .data import read_dataset
from .data.schema import parse_meta
from .io import write_parquet_atomic
from .llm import GenerationCache, GenerationRequest, SamplingParams, generate_cached, score_cached
from .llm.base import Backend

log = logging.getLogger(__name__)

ZERO_SHOT_COLUMNS = [
    "question_id", "dataset", "agent", "model", "round", "sample", "task_type", "response", "answer", "gold",
    "correct", "parse_failed", "prompt_tokens", "completion_tokens", "finish_reason", "mean_logprob",
    "min_logprob", "conf_verbal", "verbal_parsed", "conf_seqprob", "seqprob_logp", "seqprob_logp_null",
    "seqprob_c", "extra_tokens",
]


@dataclass
class AgentSpec:
    """One agent of an experiment: a model, a backend and its sampling settings."""

    name: str
    model: str
    backend: str = "transformers"
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    system_prompt: str | None = None
    backend_options: dict = field(default_factory=dict)

    @classmethod
    def from_config(cls, name: str, cfg: dict, attack_prompt: str | None = None) -> "AgentSpec":
        """`attack_prompt`: the dataset's AutoTransform rewrite for an adversarial agent (None: the fixed one)."""
        known = {k: cfg[k] for k in ("model", "backend", "temperature", "top_p", "max_tokens", "system_prompt") if k in cfg}
        if cfg.get("adversarial"):
            known["system_prompt"] = attack_prompt or prompts.ATTACK_SYSTEM_PROMPT
        return cls(name=name, backend_options=dict(cfg.get("backend_options") or {}), **known)


@dataclass
class ZeroShotSettings:
    samples: int = 1
    seed: int = 0
    batch_size: int = 64  # samples per backend call and per cache flush: a kill loses at most one
    limit: int | None = None  # questions per dataset (seeded subset); None = all
    estimators: tuple[str, ...] = ("verbal", "seqprob")
    verbal_samples: int = 3
    verbal_temperature: float = 0.3
    verbal_max_tokens: int = 8
    seqprob_target: str = "answer"  # "answer": score the rendered final answer; "response": the whole reply
    show_progress: bool = True


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
    sampling = SamplingParams(
        temperature=agent.temperature, top_p=agent.top_p, max_tokens=agent.max_tokens, seed=settings.seed, logprobs=True
    )
    requests = [GenerationRequest(messages=chat, sampling=sampling, n=settings.samples) for chat in chats]
    tag = f"{dataset_name}/{agent.name}"
    generations = generate_cached(
        backend, requests, cache, batch_size=settings.batch_size, desc=f"zero-shot {tag}", show_progress=settings.show_progress
    )

    records = []
    for row, chat, gens in zip(rows, chats, generations):
        labels = parse_meta(row["meta"]).get("labels")
        choices = list(row["choices"]) if row["choices"] is not None else None
        for j, g in enumerate(gens):
            answer = grading.extract_answer(g.text, row["task_type"], choices=choices, labels=labels)
            records.append(
                {
                    "question_id": str(row["id"]), "dataset": dataset_name, "agent": agent.name, "model": agent.model,
                    "round": 0, "sample": j, "task_type": row["task_type"], "response": g.text, "answer": answer,
                    "gold": str(row["answer"]),
                    "correct": bool(grading.is_correct(answer, str(row["answer"]), row["task_type"], labels=labels)),
                    "parse_failed": answer is None, "prompt_tokens": g.prompt_tokens,
                    "completion_tokens": g.completion_tokens, "finish_reason": g.finish_reason,
                    "mean_logprob": mean_logprob(g.token_logprobs), "min_logprob": min_logprob(g.token_logprobs),
                    "conf_verbal": np.nan, "verbal_parsed": 0, "conf_seqprob": np.nan, "seqprob_logp": np.nan,
                    "seqprob_logp_null": np.nan, "seqprob_c": np.nan, "extra_tokens": 0,
                    "_chat": chat, "_row": row,
                }
            )

    if "verbal" in settings.estimators:
        _add_verbal(records, backend, cache, settings, agent, tag)
    if "seqprob" in settings.estimators:
        _add_seqprob(records, backend, cache, settings, agent, tag)

    out = pd.DataFrame([{k: v for k, v in r.items() if not k.startswith("_")} for r in records], columns=ZERO_SHOT_COLUMNS)
    return out


def _add_verbal(records, backend, cache, settings, agent, tag) -> None:
    sampling = SamplingParams(
        temperature=settings.verbal_temperature, top_p=1.0, max_tokens=settings.verbal_max_tokens, seed=settings.seed
    )
    requests = [
        GenerationRequest(messages=prompts.confidence_messages(r["_chat"], r["response"]), sampling=sampling, n=settings.verbal_samples)
        for r in records
    ]
    generations = generate_cached(
        backend, requests, cache, batch_size=settings.batch_size, desc=f"self-report {tag}", show_progress=settings.show_progress
    )
    for r, gens in zip(records, generations):
        ratings = [grading.extract_confidence(g.text) for g in gens]
        r["conf_verbal"], r["verbal_parsed"] = verbal_confidence(ratings)
        r["extra_tokens"] += sum(g.prompt_tokens + g.completion_tokens for g in gens)


def _add_seqprob(records, backend, cache, settings, agent, tag) -> None:
    targets = []
    for r in records:
        if settings.seqprob_target == "response":
            targets.append(r["response"])
        elif r["answer"] is not None:
            targets.append(prompts.final_answer_text(r["task_type"], r["answer"]))
        else:
            targets.append(None)  # nothing parsed: no answer to score
    todo = [i for i, t in enumerate(targets) if t]
    content = [records[i]["_chat"] for i in todo]
    # A record may bring its own content-free chat (debate turns); else rebuild the question's.
    null = [
        records[i].get("_null_chat") or prompts.question_messages(records[i]["_row"], agent.system_prompt, null=True)
        for i in todo
    ]
    replies = [targets[i] for i in todo]
    scored = score_cached(
        backend, content + null, replies + replies, cache, batch_size=settings.batch_size,
        desc=f"seq-prob {tag}", show_progress=settings.show_progress,
    )
    n = len(todo)
    for k, i in enumerate(todo):
        with_x, without_x = scored[k], scored[n + k]
        r = records[i]
        r["seqprob_logp"], r["seqprob_logp_null"] = with_x.mean_logprob, without_x.mean_logprob
        r["seqprob_c"], r["conf_seqprob"] = bias_corrected_confidence(with_x.mean_logprob, without_x.mean_logprob)
        r["extra_tokens"] += with_x.prompt_tokens + without_x.prompt_tokens + 2 * len(with_x.token_logprobs)


def zero_shot_job(
    dataset_path: str | Path,
    out_path: str | Path,
    dataset_name: str,
    agent: AgentSpec,
    model_path: str,
    settings: ZeroShotSettings,
    cache_dir: str | Path,
    backend: Backend | None = None,
) -> pd.DataFrame:
    """The `zero_shot` rule: read the dataset, run the agent, write its Parquet atomically."""
    from .llm import make_backend

    questions = select_questions(read_dataset(dataset_path), settings.limit, settings.seed)
    own_backend = backend is None
    if own_backend:
        backend = make_backend(agent.backend, model_path, **agent.backend_options)
    try:
        cache = GenerationCache(cache_dir)
        log.info("cache %s holds %d entries", cache_dir, len(cache))
        df = run_zero_shot(questions, agent, backend, cache, settings, dataset_name)
    finally:
        if own_backend:
            backend.close()
    write_parquet_atomic(df, out_path)
    return df
