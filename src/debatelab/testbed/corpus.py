"""The micro model's supervised data: every prompt the workflow renders, answered by the teacher.

Nothing here writes a prompt. First answers come from `prompts.question_messages` (the zero-shot
stage's, the trainers' first turns and held-out checks); debate turns from the real debate engine
(`debate.engine.run_engine`) running every protocol kind with every template (`DEBATE_FORMATS`),
the teacher standing in for the agents; SDRL's second turn from `prompts.self_debate_messages`;
SVR-MAD's and the confidence stage's 0-10 self-reports from `prompts.confidence_messages`. So the
model is trained on the text the stages and trainers will show it, and a format added to the
engine only needs its entry here.

An example is {"format", "prompt" (chat messages), "completion" (the teacher's reply)}.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .. import prompts
from ..debate.engine import Ask, Participant, QuestionState, run_engine, to_turn
from ..debate.protocols import make_protocol
from ..llm.base import Generation, SamplingParams
from ..micro.task import Chain, parse_chain
from ..micro.teacher import Teacher, last_user_and_assistant


@dataclass(frozen=True)
class DebateFormat:
    """One protocol's debates in the corpus: `weight` is its share of the debate questions."""

    name: str
    options: dict
    seats: int
    weight: float = 1.0


#: Every debate format the corpus renders: each protocol kind, each template, peers shown whole, as
#: answers only, or with their box masked, 2-6 seats, 1-2 rounds. The formats the trainers and the
#: learning experiments render weigh most: Du's all-to-all among three (UDPO, MAPPO, RMAAC), UMAD's
#: masked pair (UMAD, IPPO).
DEBATE_FORMATS: tuple[DebateFormat, ...] = (
    DebateFormat("du_3", {"kind": "all_to_all", "template": "du", "rounds": 2}, 3, 4.0),
    DebateFormat("du_2", {"kind": "all_to_all", "template": "du", "rounds": 2}, 2),
    DebateFormat("du_4_masked", {"kind": "all_to_all", "template": "du", "rounds": 1, "mask_peer_boxed": True}, 4),
    DebateFormat("du_3_answers", {"kind": "all_to_all", "template": "du", "rounds": 1, "peer_content": "answer"}, 3),
    DebateFormat("umad", {"kind": "all_to_all", "template": "umad", "rounds": 2, "mask_peer_boxed": True}, 2, 6.0),
    DebateFormat("umad_unmasked", {"kind": "all_to_all", "template": "umad", "rounds": 1}, 2),
    DebateFormat("choi_3", {"kind": "all_to_all", "template": "choi", "rounds": 2}, 3),
    DebateFormat("choi_2", {"kind": "all_to_all", "template": "choi", "rounds": 1}, 2),
    DebateFormat("pairwise", {"kind": "all_to_all", "template": "pairwise", "rounds": 1}, 2, 2.0),
    DebateFormat("ring_4", {"kind": "ring", "template": "du", "rounds": 1}, 4),
    DebateFormat("centralized_3", {"kind": "centralized", "template": "du", "rounds": 1}, 3),
    DebateFormat("group_debate_6", {"kind": "group_debate", "template": "du", "rounds": 1, "group_size": 3}, 6),
    DebateFormat("s2_mad_4", {"kind": "s2_mad", "template": "du", "rounds": 2}, 4),
    DebateFormat("mad_d_3", {"kind": "mad_d", "template": "du", "rounds": 1}, 3),
    DebateFormat("sid_et_4", {"kind": "sid_et", "template": "du", "rounds": 1, "skip_rate": 0.3}, 4),
    DebateFormat("svr_mad_conf", {"kind": "svr_mad", "template": "du", "posterior": "conf", "prior": "uniform"}, 4),
    DebateFormat("svr_mad_pairwise", {"kind": "svr_mad", "template": "pairwise", "prior": "uniform"}, 3),
)

#: First-answer system prompts: the task's default most of the time, none, or the attack (UDPO §5.4).
FIRST_ANSWER_SYSTEMS = ((None, 0.85), ("", 0.1), (prompts.ATTACK_SYSTEM_PROMPT, 0.05))


def _system(rng: np.random.Generator) -> str | None:
    values, weights = zip(*FIRST_ANSWER_SYSTEMS)
    return values[int(rng.choice(len(values), p=np.array(weights) / sum(weights)))]


def _chain(row: dict) -> Chain:
    chain = parse_chain(row["question"])
    if chain is None:
        raise ValueError(f"micro corpus: question {row['id']!r} is not a chain of + and −: {row['question']!r}")
    return chain


def first_answers(rows: Sequence[dict], teacher: Teacher, rng: np.random.Generator) -> Iterator[dict]:
    for row in rows:
        system = _system(rng)
        messages = prompts.question_messages(row, system)
        yield {
            "format": "zero_shot",
            "answer": str(row["answer"]),
            "prompt": messages,
            "completion": teacher.first_answer(_chain(row), rng, system),
        }


def confidence_turns(rows: Sequence[dict], teacher: Teacher, rng: np.random.Generator) -> Iterator[dict]:
    for row in rows:
        question = prompts.question_messages(row)
        reply = teacher.first_answer(_chain(row), rng)
        yield {
            "format": "confidence",
            "answer": None,
            "prompt": prompts.confidence_messages(question, reply),
            "completion": teacher.confidence(reply, rng),
        }


def self_debates(
    rows: Sequence[dict], teacher: Teacher, rng: np.random.Generator, styles: Sequence[str] = prompts.SELF_DEBATE_STYLES
) -> Iterator[dict]:
    """SDRL's second turn in its templates (`prompts.SELF_DEBATE_STYLES`), in turn."""
    for k, row in enumerate(rows):
        chain = _chain(row)
        first, second = teacher.first_answer(chain, rng), teacher.first_answer(chain, rng)
        style = styles[k % len(styles)]
        messages = prompts.self_debate_messages(row, None, first, second, style)
        yield {
            "format": f"sdrl_{style}",
            "answer": str(row["answer"]),
            "prompt": messages,
            "completion": teacher.debate_reply(chain, last_user_and_assistant(messages), rng),
        }


def debates(
    rows: Sequence[dict],
    teacher: Teacher,
    rng: np.random.Generator,
    name: str,
    options: dict,
    seats: int,
    seed: int = 0,
) -> list[dict]:
    """Every call of one protocol's debates on `rows`, the teacher answering, as examples."""
    sampling = SamplingParams(temperature=1.0, max_tokens=64)
    systems = [_system(rng) for _ in range(seats)]
    participants = [Participant(i, f"seat{i}", f"seat{i}", "teacher", systems[i], sampling) for i in range(seats)]
    states = []
    for row in rows:
        state = QuestionState(row=row, thread=0, participants=participants, pre=[], seed=seed)
        chain = _chain(row)
        for seat in participants:
            messages = prompts.question_messages(row, seat.system_prompt)
            ask = Ask(agent=seat.index, round=0, messages=messages)
            text = teacher.first_answer(chain, rng, seat.system_prompt)
            state.pre.append(to_turn(state, ask, Generation(text=text, completion_tokens=0, prompt_tokens=0)))
        states.append(state)
    examples: list[dict] = []

    def generate(state_asks):
        out = []
        for state, ask in state_asks:
            system = state.participants[ask.agent].system_prompt
            if ask.purpose == "confidence":
                reply = ask.messages[-2]["content"]
                text = teacher.confidence(reply, rng)
            else:
                text = teacher.debate_reply(_chain(state.row), last_user_and_assistant(ask.messages), rng, system)
            answer = ask.purpose == "answer"
            examples.append(
                {
                    "format": name if answer else f"{name}_confidence",
                    "answer": str(state.row["answer"]) if answer else None,
                    "prompt": [dict(m) for m in ask.messages],
                    "completion": text,
                }
            )
            out.append(Generation(text=text, completion_tokens=0, prompt_tokens=0))
        return out

    protocol = make_protocol(name, options)
    protocol.prepare(states)
    run_engine(states, protocol.run, generate)
    return examples


def build_corpus(rows: Sequence[dict], teacher: Teacher, seed: int, shares: dict[str, float]) -> list[dict]:
    """Examples from `rows` (each question used once): `shares` splits them between "zero_shot",
    "debate" (among `DEBATE_FORMATS` by weight), "self_debate" and "confidence". An example whose
    whole conversation begins another's (a `du` agent's earlier rounds) is left out: the longer one
    holds its replies."""
    rng = np.random.default_rng(seed)
    rows = list(rows)
    parts = _split(rows, shares)
    examples = list(first_answers(parts.get("zero_shot", []), teacher, rng))
    examples += list(self_debates(parts.get("self_debate", []), teacher, rng))
    examples += list(confidence_turns(parts.get("confidence", []), teacher, rng))
    debate_rows = _split(parts.get("debate", []), {f.name: f.weight for f in DEBATE_FORMATS})
    for f in DEBATE_FORMATS:
        examples += debates(debate_rows[f.name], teacher, rng, f.name, f.options, f.seats, seed=seed)
    examples = drop_prefixes(examples)
    order = rng.permutation(len(examples))
    return [examples[i] for i in order]


def _split(rows: list, shares: dict[str, float]) -> dict[str, list]:
    total = sum(shares.values())
    out, start = {}, 0
    for key, share in shares.items():
        count = int(round(len(rows) * share / total))
        out[key] = rows[start : start + count]
        start += count
    return out


def conversation(example: dict) -> list[dict]:
    """The example's prompt with its reply as the last assistant turn."""
    return [*example["prompt"], {"role": "assistant", "content": example["completion"]}]


def drop_prefixes(examples: list[dict]) -> list[dict]:
    """The examples whose conversation is not the beginning of another's, each conversation once
    (SVR-MAD's repeated challenges can ask the same twice)."""

    def key(messages):
        return tuple((m["role"], m["content"]) for m in messages)

    prefixes = set()
    for e in examples:
        messages = conversation(e)
        for k in range(1, len(messages)):
            prefixes.add(key(messages[:k]))
    seen, out = set(), []
    for e in examples:
        k = key(conversation(e))
        if k not in prefixes and k not in seen:
            seen.add(k)
            out.append(e)
    return out
