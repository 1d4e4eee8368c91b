"""The debate engine: runs per-question protocols together, in batches, with one accounting.

A protocol is a generator per question (see `protocols`). It yields a list of `Ask`s (which
agent, which messages, which peers' outputs are in the context) and receives the parsed
`Turn`s in the same order; its return value is an `Outcome`. The engine advances every
question of the job in lock step: each step gathers the pending asks of all questions,
sends them to the backends as one batch per model (through the generation cache), and
routes the replies back. Questions that have finished simply yield nothing more, so
adaptive protocols batch across questions too. No protocol sees a backend.

Accounting lives here, not in protocols: every peer in an ask's `sources` is one full
NComm edge, every peer in `answer_sources` one answer-only edge, and every call's prompt and
completion tokens count towards its question, plus the pre-debate calls the outcome used.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .. import grading
from ..data.schema import answer_set_size
from ..estimators.tokens import token_summaries
from ..grading import INVALID, AnswerClasses, answer_keys
from ..llm.base import Generation, GenerationRequest, SamplingParams, stable_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Participant:
    """One seat at the debate: an agent and the zero-shot sample it starts from."""

    index: int
    label: str  # agent name, "name#k" for the k-th extra copy of the same agent
    agent: str
    model: str
    system_prompt: str | None
    sampling: SamplingParams  # temperature / top_p / max_tokens of the agent (seed filled per call)


@dataclass
class Turn:
    """One agent output: a pre-debate answer (round 0) or a debate call's parsed reply."""

    agent: int
    round: int
    response: str
    answer: str | None
    key: str  # canonical answer, INVALID when unparseable; the same answer = the same `QuestionState.classes`
    correct: bool
    messages: tuple[dict, ...] = ()
    null_messages: tuple[dict, ...] | None = None
    sources: tuple[int, ...] = ()
    answer_sources: tuple[int, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of prompt_tokens, served from the API's prompt cache
    finish_reason: str = "stop"
    min_logprob: float = float("nan")
    mean_logprob: float = float("nan")
    mean_token_entropy: float = float("nan")
    max_token_prob: float = float("nan")
    perplexity: float = float("nan")
    conf_verbal: float = float("nan")
    conf_seqprob: float = float("nan")
    confidence_tokens: int = 0
    zero_shot_sample: int = -1
    rating: float | None = None  # a parsed 0-10 self-report (confidence asks only)
    token_ids: tuple[int, ...] | None = None  # the reply's tokens when the backend reports them (training)

    @property
    def valid(self) -> bool:
        return self.key != INVALID

    @property
    def conversation(self) -> list[dict]:
        """This call's chat with the reply appended: the next `du` round continues from it."""
        return [*self.messages, {"role": "assistant", "content": self.response}]


@dataclass(frozen=True)
class Ask:
    """A protocol's request for one generation."""

    agent: int
    round: int
    messages: Sequence[dict]
    null_messages: Sequence[dict] | None = None
    sources: tuple[int, ...] = ()  # peers whose full output is in the context (NComm edges)
    answer_sources: tuple[int, ...] = ()  # peers whose answer only is in the context
    sample: int = 0  # > 0 draws a fresh sample for an otherwise identical request (repeats)
    purpose: str = "answer"  # "answer" or "confidence" (a 0-10 self-report on the last reply)


@dataclass
class Outcome:
    final_answer: str | None
    ended_by: str
    rounds_used: int
    answers_by_round: list[list[str | None]]
    stopped_early: bool = False
    pre_used: tuple[int, ...] | None = None  # participants whose pre-debate calls count (None: all)
    # Answer-only transfers when a protocol counts them otherwise than one per (sender, receiver)
    # pair (group_debate's `cross_group_ncomm: group_pair`); None: the turns' answer_sources.
    ncomm_answers: int | None = None


@dataclass
class QuestionState:
    """Everything a protocol may read about one question of one thread."""

    row: dict
    thread: int
    participants: list[Participant]
    pre: list[Turn]
    seed: int
    labels: list[str] | None = None
    choices: list[str] | None = None
    turns: list[Turn] = field(default_factory=list)  # debate calls, in order
    confidence_turns: list[Turn] = field(default_factory=list)
    outcome: Outcome | None = None

    @property
    def question_id(self) -> str:
        return str(self.row["id"])

    @property
    def task_type(self) -> str:
        return self.row["task_type"]

    @property
    def n(self) -> int:
        return len(self.participants)

    @functools.cached_property
    def classes(self) -> AnswerClasses:
        """The question's answer classes (`grading.AnswerClasses`): `classes(turn.key)` is equal for
        two turns exactly when they are the same answer. Every protocol compares answers through it;
        seeded with the pre-debate keys in agent order, so the classes do not depend on the order in
        which a protocol asks."""
        return AnswerClasses(self.task_type, [t.key for t in self.pre])

    @property
    def n_options(self) -> int | None:
        """Size of the answer set (the `n_options` entropy normaliser); None for open-ended math."""
        return answer_set_size(self.task_type, self.choices, self.labels)

    def rng(self, purpose: str) -> np.random.Generator:
        """Random choices seeded by (experiment seed, question, thread, purpose): any subset reruns identically."""
        digest = stable_hash(
            {"seed": self.seed, "question": self.question_id, "thread": self.thread, "purpose": purpose}
        )
        return np.random.default_rng(int(digest[:16], 16))

    def parse(self, text: str) -> tuple[str | None, str, bool]:
        answer = grading.extract_answer(text, self.task_type, choices=self.choices, labels=self.labels)
        key = answer_keys([answer], task_type=self.task_type)[0]
        correct = bool(grading.is_correct(answer, str(self.row["answer"]), self.task_type, labels=self.labels))
        return answer, key, correct

    def is_correct(self, answer: str | None) -> bool:
        return bool(grading.is_correct(answer, str(self.row["answer"]), self.task_type, labels=self.labels))


ProtocolRun = Generator[list[Ask], list[Turn], Outcome]
#: Sends asks to the models: (state, ask) pairs in, one Generation each out, same order.
Generate = Callable[[list[tuple[QuestionState, Ask]]], list[Generation]]


def run_engine(
    states: Sequence[QuestionState], start: Callable[[QuestionState], ProtocolRun], generate: Generate
) -> int:
    """Advance every question's protocol to its end; returns the number of engine steps."""
    running: dict[int, tuple[ProtocolRun, list[Ask]]] = {}
    for qi, state in enumerate(states):
        gen = start(state)
        _advance(state, gen, None, running, qi)
    steps = 0
    while running:
        steps += 1
        batch = [(qi, ask) for qi, (_, asks) in running.items() for ask in asks]
        generations = generate([(states[qi], ask) for qi, ask in batch])
        replies: dict[int, list[Turn]] = defaultdict(list)
        for (qi, ask), generation in zip(batch, generations):
            turn = to_turn(states[qi], ask, generation)
            if ask.purpose == "confidence":
                states[qi].confidence_turns.append(turn)
            else:
                states[qi].turns.append(turn)
            replies[qi].append(turn)
        for qi in list(running):
            gen, _ = running.pop(qi)
            _advance(states[qi], gen, replies[qi], running, qi)
    return steps


def _advance(state, gen, reply, running, qi) -> None:
    try:
        asks = gen.send(reply) if reply is not None else next(gen)
        while not asks:  # a protocol may yield an empty step; give it nothing back at once
            asks = gen.send([])
        running[qi] = (gen, list(asks))
    except StopIteration as stop:
        if not isinstance(stop.value, Outcome):
            raise TypeError(
                f"protocol for question {state.question_id} returned {stop.value!r}, not an Outcome"
            ) from None
        state.outcome = stop.value


def to_turn(state: QuestionState, ask: Ask, g: Generation) -> Turn:
    """An ask's reply as a Turn: parsed, graded, with its token counts (and token ids when reported)."""
    if ask.purpose == "confidence":
        answer, key, correct = None, INVALID, False
        rating = grading.extract_confidence(g.text)
    else:
        answer, key, correct = state.parse(g.text)
        rating = None
    return Turn(
        agent=ask.agent,
        round=ask.round,
        response=g.text,
        answer=answer,
        key=key,
        correct=correct,
        messages=tuple(ask.messages),
        null_messages=tuple(ask.null_messages) if ask.null_messages else None,
        sources=tuple(ask.sources),
        answer_sources=tuple(ask.answer_sources),
        prompt_tokens=g.prompt_tokens,
        completion_tokens=g.completion_tokens,
        cached_tokens=g.cached_tokens,
        finish_reason=g.finish_reason,
        **token_summaries(g),
        rating=rating,
        token_ids=tuple(g.token_ids) if g.token_ids is not None else None,
    )


def call_seed(seed: int, participant: Participant, sample: int, purpose: str) -> int:
    """The sampling seed of a debate call: copies of one agent and repeats draw different samples."""
    return int(stable_hash({"seed": seed, "agent": participant.label, "sample": sample, "purpose": purpose})[:8], 16)


def request_for(
    state: QuestionState, ask: Ask, *, confidence_sampling: SamplingParams | None = None, top_logprobs: int = 0
) -> GenerationRequest:
    """An ask's request; an answer asks for its tokens' log-probabilities (and the top `top_logprobs` of each position)."""
    participant = state.participants[ask.agent]
    answer = ask.purpose == "answer"
    base = participant.sampling if answer else (confidence_sampling or participant.sampling)
    sampling = replace(
        base,
        seed=call_seed(state.seed, participant, ask.sample, ask.purpose),
        logprobs=answer,
        top_logprobs=top_logprobs if answer else 0,
    )
    return GenerationRequest(messages=list(ask.messages), sampling=sampling, n=1)


def accounting(state: QuestionState) -> dict:
    """NComm and token totals of one finished question (Jiang et al., arXiv:2605.23099 §5, App. A; §5, Table 1)."""
    outcome = state.outcome
    used = range(state.n) if outcome.pre_used is None else outcome.pre_used
    pre_tokens = sum(state.pre[i].prompt_tokens + state.pre[i].completion_tokens for i in used)
    prompt = sum(t.prompt_tokens for t in state.turns)
    completion = sum(t.completion_tokens for t in state.turns)
    ncomm_full = sum(len(t.sources) for t in state.turns)
    ncomm_answers = sum(len(t.answer_sources) for t in state.turns)
    if outcome.ncomm_answers is not None:
        ncomm_answers = outcome.ncomm_answers
    confidence = sum(t.prompt_tokens + t.completion_tokens for t in state.confidence_turns)
    confidence += sum(t.confidence_tokens for t in state.turns)
    return {
        "ncomm": ncomm_full + ncomm_answers,
        "ncomm_full": ncomm_full,
        "ncomm_answers": ncomm_answers,
        "debate_calls": len(state.turns),
        "debate_prompt_tokens": prompt,
        "debate_completion_tokens": completion,
        "pre_debate_tokens": pre_tokens,
        "total_tokens": pre_tokens + prompt + completion,
        "confidence_tokens": confidence,
    }
