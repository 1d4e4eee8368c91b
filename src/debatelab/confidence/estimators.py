"""Raw confidence estimators (spec 004 §3) and the one way every stage elicits them.

* verbalised self-report (§3a): after its answer, the agent is asked for a 0-10 rating k times
  at a low temperature; conf_verbal = mean of the parsed ratings / 10 (0.5 if none parsed);
* bias-corrected sequence probability (§3b, Zhao et al. 2021): C = log P(ŷ|x) − log P(ŷ|x_null),
  each log-probability length-normalised (mean per token), x_null the content-free twin of the
  prompt; conf_seqprob = σ(C). ŷ is the rendered final answer ("The answer is (B).",
  `seqprob_target: answer`) or the whole reply (`seqprob_target: response`).

`elicit_confidences` runs both for a batch of answered chats, through the generation cache, for
the zero-shot stage (the question chat) and the debate stage (each agent's last debate turn).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .. import grading, prompts
from ..llm import GenerationCache, GenerationRequest, SamplingParams, generate_cached, score_cached
from ..llm.base import Backend, Message
from ..probability import sigmoid

ESTIMATORS = ("verbal", "seqprob")
SEQPROB_TARGETS = ("answer", "response")


def verbal_confidence(ratings: Sequence[float | None], fallback: float = 0.5) -> tuple[float, int]:
    """Mean of the parseable 0-10 self-reports, scaled to [0, 1].

    Returns (confidence, number of parsed ratings); with none parsed the confidence is
    `fallback` (spec 004 §3a) and the count 0 lets reports say how often that happened.
    """
    parsed = [float(r) for r in ratings if r is not None and not math.isnan(r)]
    if not parsed:
        return fallback, 0
    return float(np.mean(parsed)) / 10.0, len(parsed)


def mean_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.mean(token_logprobs))


def min_logprob(token_logprobs: Sequence[float] | None) -> float:
    if not token_logprobs:
        return float("nan")
    return float(np.min(token_logprobs))


def bias_corrected_confidence(logp_content: float, logp_null: float) -> tuple[float, float]:
    """C = log P(ŷ|x) − log P(ŷ|x_null) (length-normalised), mapped to [0, 1] by σ(C).

    Returns (C, σ(C)); σ is monotone, so rankings by C and by confidence agree.
    """
    if math.isnan(logp_content) or math.isnan(logp_null):
        return float("nan"), float("nan")
    c = logp_content - logp_null
    return c, sigmoid(c)


@dataclass(frozen=True)
class ElicitationSettings:
    """How confidences are asked for: config `zero_shot.verbal_*` and `zero_shot.seqprob_target`
    (defaults match config/schema.yaml), shared by the zero-shot and debate stages."""

    verbal_samples: int = 3
    verbal_temperature: float = 0.3
    verbal_max_tokens: int = 8
    seqprob_target: str = "answer"  # "answer": score the rendered final answer; "response": the whole reply

    def __post_init__(self):
        if self.verbal_samples < 1 or self.verbal_max_tokens < 1:
            raise ValueError(
                f"verbal_samples and verbal_max_tokens must be >= 1, got {self.verbal_samples} and {self.verbal_max_tokens}"
            )
        if self.verbal_temperature < 0:
            raise ValueError(f"verbal_temperature must be >= 0, got {self.verbal_temperature}")
        if self.seqprob_target not in SEQPROB_TARGETS:
            raise ValueError(f"seqprob_target must be one of {SEQPROB_TARGETS}, got {self.seqprob_target!r}")

    def verbal_sampling(self, seed: int) -> SamplingParams:
        return SamplingParams(temperature=self.verbal_temperature, top_p=1.0, max_tokens=self.verbal_max_tokens, seed=seed)


@dataclass(frozen=True)
class AnsweredChat:
    """A reply to rate: the chat it answered, the reply, its parsed answer, and the chat's
    content-free twin (every content slot "N/A") for the sequence-probability correction."""

    chat: Sequence[Message]
    response: str
    answer: str | None
    task_type: str
    null_chat: Sequence[Message]


@dataclass
class Confidence:
    """The elicited confidences of one reply; estimators not asked for stay NaN."""

    conf_verbal: float = float("nan")
    verbal_parsed: int = 0
    conf_seqprob: float = float("nan")
    seqprob_logp: float = float("nan")
    seqprob_logp_null: float = float("nan")
    seqprob_c: float = float("nan")
    extra_tokens: int = 0  # prompt + completion tokens spent on these estimates

    def as_dict(self) -> dict:
        return asdict(self)


def elicit_confidences(
    items: Sequence[AnsweredChat],
    estimators: Sequence[str],
    backend: Backend,
    cache: GenerationCache,
    settings: ElicitationSettings,
    *,
    seed: int,
    batch_size: int,
    tag: str,
    show_progress: bool = True,
) -> list[Confidence]:
    """The `estimators` of every item, each estimator's calls batched through the cache."""
    unknown = [e for e in estimators if e not in ESTIMATORS]
    if unknown:
        raise ValueError(f"unknown confidence estimators {unknown}; expected some of {ESTIMATORS}")
    out = [Confidence() for _ in items]
    if "verbal" in estimators:
        _self_report(items, out, backend, cache, settings, seed, batch_size, tag, show_progress)
    if "seqprob" in estimators:
        _sequence_probability(items, out, backend, cache, settings, batch_size, tag, show_progress)
    return out


def _self_report(items, out, backend, cache, settings, seed, batch_size, tag, show_progress) -> None:
    sampling = settings.verbal_sampling(seed)
    requests = [
        GenerationRequest(messages=prompts.confidence_messages(item.chat, item.response), sampling=sampling,
                          n=settings.verbal_samples)
        for item in items
    ]
    generations = generate_cached(backend, requests, cache, batch_size=batch_size, desc=f"self-report {tag}",
                                  show_progress=show_progress)
    for confidence, gens in zip(out, generations):
        confidence.conf_verbal, confidence.verbal_parsed = verbal_confidence([grading.extract_confidence(g.text) for g in gens])
        confidence.extra_tokens += sum(g.prompt_tokens + g.completion_tokens for g in gens)


def _sequence_probability(items, out, backend, cache, settings, batch_size, tag, show_progress) -> None:
    targets = []
    for item in items:
        if settings.seqprob_target == "response":
            targets.append(item.response)
        elif item.answer is not None:
            targets.append(prompts.final_answer_text(item.task_type, item.answer))
        else:
            targets.append(None)  # nothing parsed: no answer to score
    todo = [i for i, t in enumerate(targets) if t]
    content = [items[i].chat for i in todo]
    null = [items[i].null_chat for i in todo]
    replies = [targets[i] for i in todo]
    scored = score_cached(backend, content + null, replies + replies, cache, batch_size=batch_size,
                          desc=f"seq-prob {tag}", show_progress=show_progress)
    n = len(todo)
    for k, i in enumerate(todo):
        with_x, without_x = scored[k], scored[n + k]
        confidence = out[i]
        confidence.seqprob_logp, confidence.seqprob_logp_null = with_x.mean_logprob, without_x.mean_logprob
        confidence.seqprob_c, confidence.conf_seqprob = bias_corrected_confidence(with_x.mean_logprob, without_x.mean_logprob)
        confidence.extra_tokens += with_x.prompt_tokens + without_x.prompt_tokens + 2 * len(with_x.token_logprobs)
