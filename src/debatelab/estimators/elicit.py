"""The one way every stage elicits confidences: `elicit_confidences` runs the asked-for estimators
for a batch of answered chats, each estimator's calls batched through the generation cache, for the
zero-shot stage (the question chat) and the debate stage (each agent's last debate turn).

`ELICITORS` is the registry of estimators (config `zero_shot.estimators`, a debate protocol's
`confidence`, `calibration.estimators`); each fills its own fields of `Confidence`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from ..llm import GenerationCache, SamplingParams
from ..llm.base import Backend, Message
from .seqprob import SEQPROB_TARGETS, sequence_probability
from .verbal import self_report

#: Estimator name -> f(items, out, backend, cache, settings, *, seed, batch_size, tag, show_progress),
#: which fills its fields of each `out[i]` (a `Confidence`) for `items[i]` (an `AnsweredChat`).
#: They run in this order; the schema's estimator enums list the same names (tests/test_registries.py).
ELICITORS: dict[str, Callable[..., None]] = {
    "verbal": self_report,
    "seqprob": sequence_probability,
}
ESTIMATORS = tuple(ELICITORS)


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
        return SamplingParams(
            temperature=self.verbal_temperature, top_p=1.0, max_tokens=self.verbal_max_tokens, seed=seed
        )


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
    for name, elicit in ELICITORS.items():
        if name in estimators:
            elicit(
                items,
                out,
                backend,
                cache,
                settings,
                seed=seed,
                batch_size=batch_size,
                tag=tag,
                show_progress=show_progress,
            )
    return out
