"""The `debate` rule: one protocol on one dataset, from the zero-shot stage's answers.

Reads the dataset and each participant's zero-shot Parquet, runs the protocol on every
question (and thread) through the engine, elicits confidences on the last debate turns when
asked, and writes `turns.parquet` and `questions.parquet` (schemas in `debate.schema`).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from .. import prompts
from ..data import read_dataset
from ..data.schema import parse_meta
from ..estimators import AnsweredChat, ElicitationSettings, elicit_confidences
from ..grading import answer_keys, vote_answer
from ..io import read_parquet_checked, write_parquet_atomic
from ..llm import GenerationCache, generate_cached
from ..llm.agent import AgentSpec
from ..llm.base import Backend
from .engine import Participant, QuestionState, Turn, accounting, request_for, run_engine
from .protocols import Protocol, make_protocol, unanimous
from .schema import QUESTION_COLUMNS, TURN_COLUMNS

log = logging.getLogger(__name__)

_ZERO_SHOT_NEEDED = [
    "question_id",
    "agent",
    "sample",
    "response",
    "answer",
    "correct",
    "prompt_tokens",
    "completion_tokens",
    "finish_reason",
    "min_logprob",
    "mean_logprob",
    "conf_verbal",
    "conf_seqprob",
]
#: read when there (zero-shot outputs from before token entropies were recorded lack them: NaN)
_ZERO_SHOT_OPTIONAL = ["mean_token_entropy", "max_token_prob", "perplexity"]


@dataclass(frozen=True)
class DebateSettings:
    """Config `debate.batch_size` (default matches config/schema.yaml), the experiment seed, and how
    confidences are elicited on the last debate turns (config `zero_shot.verbal_*`, `seqprob_target`)."""

    seed: int = 0
    batch_size: int = 64  # generations per backend call and per cache flush
    top_logprobs: int = 20  # k of the answer turns' token entropy and max token probability (0: not recorded)
    elicitation: ElicitationSettings = ElicitationSettings()
    show_progress: bool = True

    def __post_init__(self):
        if self.batch_size < 1:
            raise ValueError(f"debate batch_size must be >= 1, got {self.batch_size}")
        if self.top_logprobs < 0:
            raise ValueError(f"debate top_logprobs must be >= 0, got {self.top_logprobs}")

    @classmethod
    def from_config(cls, settings: dict) -> DebateSettings:
        """From flat settings: seed, batch_size and the elicitation keys (`verbal_*`, `seqprob_target`)."""
        own = dict(settings)
        elicitation = {k: own.pop(k) for k in list(own) if k in ElicitationSettings.__dataclass_fields__}
        return cls(elicitation=ElicitationSettings(**elicitation), **own)


def participant_labels(names: Sequence[str]) -> list[tuple[str, str, int]]:
    """(label, agent, copy index) per seat: the k-th repeat of an agent is "agent#k"."""
    seen: Counter = Counter()
    out = []
    for name in names:
        copy = seen[name]
        seen[name] += 1
        out.append((name if copy == 0 else f"{name}#{copy}", name, copy))
    return out


def build_states(
    questions: pd.DataFrame,
    zero_shot: dict[str, pd.DataFrame],
    participants: Sequence[str],
    agents: dict[str, AgentSpec],
    *,
    threads: int,
    seed: int,
    zero_shot_files: dict[str, str] | None = None,
    max_tokens: int | None = None,
) -> list[QuestionState]:
    """One state per (question, thread); thread k of copy c starts from zero-shot sample c·threads + k.
    `max_tokens`: the reply budget of the debate calls (the protocol's `debate_max_tokens`; None: each
    agent's own, which its zero-shot samples, round 0, were drawn with)."""
    seats = []
    for index, (label, name, copy) in enumerate(participant_labels(participants)):
        if name not in agents:
            raise ValueError(f"participant {name!r} is not an agent (known: {sorted(agents)})")
        spec = agents[name]
        sampling = spec.sampling()  # the seed is filled per call
        if max_tokens is not None:
            sampling = replace(sampling, max_tokens=int(max_tokens))
        seats.append((Participant(index, label, name, spec.model, spec.system_prompt, sampling), copy))
    lookup: dict[str, dict[tuple[str, int], dict]] = {}
    for name in {p.agent for p, _ in seats}:
        frame = zero_shot[name]
        lookup[name] = {(str(r["question_id"]), int(r["sample"])): r for r in frame.to_dict("records")}
        have = int(frame["sample"].max()) + 1 if len(frame) else 0
        need = max(copy * threads + threads for p, copy in seats if p.agent == name)
        if need > have:
            where = (zero_shot_files or {}).get(name, f"zero-shot output of {name}")
            raise ValueError(
                f"{where}: needs {need} zero-shot samples per question ({threads} thread(s) × "
                f"{need // threads} copies of {name!r}) but holds {have}; raise zero_shot.samples or agents.{name}.samples"
            )
    common = set.intersection(*({q for q, _ in lookup[name]} for name in lookup))
    rows = [r for r in questions.to_dict("records") if str(r["id"]) in common]
    if len(rows) < len(questions):
        log.info("%d of %d dataset questions have zero-shot answers from every participant", len(rows), len(questions))
    states = []
    for row in rows:
        meta = parse_meta(row.get("meta"))
        choices = list(row["choices"]) if row.get("choices") is not None else None
        for thread in range(threads):
            pre = []
            for participant, copy in seats:
                sample = copy * threads + thread
                z = lookup[participant.agent][(str(row["id"]), sample)]
                answer = z["answer"] if isinstance(z["answer"], str) else None
                pre.append(
                    Turn(
                        agent=participant.index,
                        round=0,
                        response=z["response"],
                        answer=answer,
                        key=answer_keys([answer], task_type=row["task_type"])[0],
                        correct=bool(z["correct"]),
                        messages=tuple(prompts.question_messages(row, participant.system_prompt)),
                        prompt_tokens=int(z["prompt_tokens"]),
                        completion_tokens=int(z["completion_tokens"]),
                        cached_tokens=_tokens(z.get("cached_tokens")),  # 0 in files from before it existed
                        finish_reason=z["finish_reason"],
                        min_logprob=_float(z["min_logprob"]),
                        mean_logprob=_float(z["mean_logprob"]),
                        **{c: _float(z.get(c)) for c in _ZERO_SHOT_OPTIONAL},
                        conf_verbal=_float(z["conf_verbal"]),
                        conf_seqprob=_float(z["conf_seqprob"]),
                        zero_shot_sample=sample,
                    )
                )
            states.append(
                QuestionState(
                    row=row,
                    thread=thread,
                    participants=[p for p, _ in seats],
                    pre=pre,
                    seed=seed,
                    labels=meta.get("labels"),
                    choices=choices,
                )
            )
    return states


def _float(value) -> float:
    return float("nan") if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _tokens(value) -> int:
    value = _float(value)
    return 0 if math.isnan(value) else int(value)


class ModelPool:
    """Backends and generation caches by model name: each model is loaded once per job."""

    def __init__(self, backends: dict[str, Backend], caches: dict[str, GenerationCache]):
        self.backends, self.caches = backends, caches

    def generate(self, state_asks, settings: DebateSettings, desc: str):
        # SVR-MAD's conf posterior asks for a self-report mid-debate, sampled like the elicited ones.
        confidence_sampling = settings.elicitation.verbal_sampling(seed=0)
        by_model: dict[str, list[int]] = defaultdict(list)
        for k, (state, ask) in enumerate(state_asks):
            by_model[state.participants[ask.agent].model].append(k)
        out = [None] * len(state_asks)
        for model, positions in by_model.items():
            requests = [
                request_for(*state_asks[k], confidence_sampling=confidence_sampling, top_logprobs=settings.top_logprobs)
                for k in positions
            ]
            gens = generate_cached(
                self.backends[model],
                requests,
                self.caches[model],
                batch_size=settings.batch_size,
                desc=f"{desc} [{model}]",
                show_progress=settings.show_progress,
            )
            for k, g in zip(positions, gens):
                out[k] = g[0]
        return out


def run_protocol(protocol: Protocol, states: list[QuestionState], pool: ModelPool, settings: DebateSettings) -> int:
    """Run one protocol over all states, then elicit the confidences it asks for."""
    protocol.prepare(states)
    step = [0]

    def generate(state_asks):
        step[0] += 1
        return pool.generate(state_asks, settings, desc=f"{protocol.name} step {step[0]}")

    steps = run_engine(states, protocol.run, generate)
    estimators = tuple(protocol.options.get("confidence") or ())
    if estimators:
        _elicit_confidence(states, estimators, pool, settings, protocol.name)
    return steps


def _elicit_confidence(states, estimators, pool: ModelPool, settings: DebateSettings, name: str) -> None:
    """Self-report and sequence probability on every agent's last debate turn (confidence paper stream 1)."""
    turns_by_model: dict[str, list[Turn]] = defaultdict(list)
    items_by_model: dict[str, list[AnsweredChat]] = defaultdict(list)
    for state in states:
        last: dict[int, Turn] = {}
        for turn in state.turns:
            last[turn.agent] = turn
        for turn in last.values():
            model = state.participants[turn.agent].model
            turns_by_model[model].append(turn)
            items_by_model[model].append(
                AnsweredChat(
                    chat=list(turn.messages),
                    response=turn.response,
                    answer=turn.answer,
                    task_type=state.task_type,
                    null_chat=list(turn.null_messages or []),
                )
            )
    for model, items in items_by_model.items():
        confidences = elicit_confidences(
            items,
            estimators,
            pool.backends[model],
            pool.caches[model],
            settings.elicitation,
            seed=settings.seed,
            batch_size=settings.batch_size,
            tag=f"{name} last turns",
            show_progress=settings.show_progress,
        )
        for turn, confidence in zip(turns_by_model[model], confidences):
            turn.conf_verbal, turn.conf_seqprob = confidence.conf_verbal, confidence.conf_seqprob
            turn.confidence_tokens = confidence.extra_tokens


def result_frames(states: list[QuestionState], dataset: str, protocol: Protocol) -> tuple[pd.DataFrame, pd.DataFrame]:
    turn_rows, question_rows = [], []
    for state in states:
        labels = [p.label for p in state.participants]
        base = {"question_id": state.question_id, "dataset": dataset, "protocol": protocol.name, "thread": state.thread}
        calls: Counter = Counter()
        for turn in [*state.pre, *state.turns]:
            p = state.participants[turn.agent]
            call = calls[(turn.round, turn.agent)]
            calls[(turn.round, turn.agent)] += 1
            turn_rows.append(
                {
                    **base,
                    "round": turn.round,
                    "agent": p.label,
                    "agent_index": p.index,
                    "agent_config": p.agent,
                    "model": p.model,
                    "call": call,
                    "zero_shot_sample": turn.zero_shot_sample,
                    "sources": [labels[j] for j in turn.sources],
                    "answer_sources": [labels[j] for j in turn.answer_sources],
                    "response": turn.response,
                    "answer": turn.answer,
                    "correct": turn.correct,
                    "parse_failed": turn.answer is None,
                    "prompt_tokens": turn.prompt_tokens,
                    "completion_tokens": turn.completion_tokens,
                    "cached_tokens": turn.cached_tokens,
                    "finish_reason": turn.finish_reason,
                    "min_logprob": turn.min_logprob,
                    "mean_logprob": turn.mean_logprob,
                    "mean_token_entropy": turn.mean_token_entropy,
                    "max_token_prob": turn.max_token_prob,
                    "perplexity": turn.perplexity,
                    "conf_verbal": turn.conf_verbal if turn.round > 0 else float("nan"),
                    "conf_seqprob": turn.conf_seqprob if turn.round > 0 else float("nan"),
                    "confidence_tokens": turn.confidence_tokens,
                }
            )
        outcome = state.outcome
        pre_keys = [state.classes(t.key) for t in state.pre]  # the protocols' answer classes
        pre_majority = vote_answer([t.answer for t in state.pre], pre_keys)
        question_rows.append(
            {
                **base,
                "kind": protocol.kind,
                "task_type": state.task_type,
                "gold": str(state.row["answer"]),
                "n_agents": state.n,
                "participants": json.dumps(labels),
                "final_answer": outcome.final_answer,
                "correct": state.is_correct(outcome.final_answer),
                "parse_failed": outcome.final_answer is None,
                "rounds_used": outcome.rounds_used,
                "stopped_early": outcome.stopped_early,
                "ended_by": outcome.ended_by,
                **accounting(state),
                "pre_majority": pre_majority,
                "pre_correct": state.is_correct(pre_majority),
                "pre_unanimous": unanimous(state, state.pre),
                "pre_n_correct": sum(t.correct for t in state.pre),
                "answers_by_round": json.dumps(outcome.answers_by_round),
                "n_options": state.n_options,
            }
        )
    turns = pd.DataFrame(turn_rows, columns=TURN_COLUMNS)
    questions = pd.DataFrame(question_rows, columns=QUESTION_COLUMNS).astype({"n_options": "Int64"})
    return turns, questions


def read_zero_shot(path: str | Path) -> pd.DataFrame:
    return read_parquet_checked(path, _ZERO_SHOT_NEEDED)


def debate_job(
    *,
    dataset_path: str | Path,
    zero_shot_paths: dict[str, str],
    turns_path: str | Path,
    questions_path: str | Path,
    dataset_name: str,
    protocol_name: str,
    protocol_options: dict,
    participants: Sequence[str],
    agents: dict[str, dict],
    model_paths: dict[str, str],
    cache_dirs: dict[str, str],
    settings: DebateSettings,
    backends: dict[str, Backend] | None = None,
    attack_prompt: str | None = None,
    budget=None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The `debate` rule: run one protocol on one dataset and write both Parquet files atomically.

    `attack_prompt`: the dataset's AutoTransform rewrite for adversarial agents (None: the fixed prompt).
    `budget`: a `debatelab.cost.Budget` every model's cache asks before each unit (None: no cap).
    """
    from ..llm.engines import open_backends

    protocol = make_protocol(protocol_name, protocol_options)
    specs = {name: AgentSpec.from_config(name, cfg, attack_prompt) for name, cfg in agents.items()}
    zero_shot = {name: read_zero_shot(path) for name, path in zero_shot_paths.items()}
    states = build_states(
        read_dataset(dataset_path),
        zero_shot,
        participants,
        specs,
        threads=protocol.options["threads"],
        seed=settings.seed,
        zero_shot_files=zero_shot_paths,
        max_tokens=protocol.options["debate_max_tokens"],
    )
    models = sorted({specs[name].model for name in set(participants)})
    backends = dict(backends or {})
    engines: list = []  # the engines this job built (those passed in are the caller's to close)
    try:
        if protocol.kind != "self_consistency":
            serving = {model: next(specs[n] for n in participants if specs[n].model == model) for model in models}
            # one engine per model (per base for adapter-served ones), each on its GPUs when there are several
            built, engines = open_backends(
                {m: (a.backend, a.backend_options, model_paths[m]) for m, a in serving.items() if m not in backends}
            )
            backends.update(built)
        caches = {
            model: GenerationCache(cache_dirs[model], budget=budget, model=model)
            for model in models
            if model in cache_dirs
        }
        steps = run_protocol(protocol, states, ModelPool(backends, caches), settings)
    finally:
        for engine in engines:
            engine.close()
    turns, questions = result_frames(states, dataset_name, protocol)
    log.info(
        "%s/%s: %d questions × threads in %d engine steps, %d debate calls",
        dataset_name,
        protocol_name,
        len(questions),
        steps,
        int(questions["debate_calls"].sum()) if len(questions) else 0,
    )
    write_parquet_atomic(turns, turns_path)
    write_parquet_atomic(questions, questions_path)
    return turns, questions
