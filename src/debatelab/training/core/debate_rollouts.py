"""Rollouts of a multi-agent run: whole debates of the current agent policies, run by the debate
engine (`debate.engine.run_engine`) exactly as the debate stage runs them.

Round 0: every seat answers the question prompt; rounds 1..T: the protocol's asks (all-to-all by
default, Tang et al., arXiv:2602.07186 §3.1). At every engine step the asks of all questions and threads are gathered and
sent as one batch per agent (that agent's adapter active), never one call per question. Rollouts are
never served from the generation cache; each call's seed derives from (run seed, step, question,
thread, seat, round), so a rerun of a step repeats its debates whatever the batch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ... import prompts
from ...data.schema import parse_meta
from ...debate.engine import Ask, Participant, QuestionState, run_engine, to_turn
from ...debate.protocols import make_protocol
from ...debate.stage import participant_labels
from ...llm import GenerationRequest, SamplingParams
from ...llm.base import stable_hash


def debate_seed(run_seed: int, step: int, question_id: str, thread: int, seat: str, round_: int) -> int:
    return int(
        stable_hash(
            {"run": run_seed, "step": step, "question": question_id, "thread": thread, "seat": seat, "round": round_}
        )[:8],
        16,
    )


def training_protocol_options(settings, rounds: int, protocol: dict | None = None) -> dict:
    """The protocol options of a training debate: `protocol`, else the run's, with the training's rounds."""
    options = protocol if protocol is not None else (getattr(settings, "protocol", None) or {})
    return {"kind": "all_to_all", **options, "rounds": rounds}


def rollout_debates(
    policies,
    rows: Sequence[dict],
    participants: Sequence[str],
    settings,
    *,
    step: int,
    rounds: int,
    threads: int = 1,
    system_prompts: dict[str, str | None] | None = None,
    protocol: dict | None = None,
    debate=None,
    logprobs: bool = False,
) -> list[QuestionState]:
    """One finished debate per (question, thread): `state.pre` holds round 0, `state.turns` rounds
    1..T, every turn with its token ids; `state.outcome` the final vote and answers by round.
    `protocol`: the debate's options (default: the run's `settings.protocol`, the protocol its agents
    are evaluated on, so that training and evaluation send the same prompts); `rounds` is the
    training's. `debate`: a protocol object to run instead (RMAAC's perturbed rounds). `logprobs`: every turn also gets the sampling policy's mean token log-probability
    (`Turn.mean_logprob`, raw logits: UMAD's Û = −mean_logprob)."""
    system_prompts = system_prompts or {}
    sampling = SamplingParams(temperature=settings.temperature, top_p=settings.top_p, max_tokens=settings.max_tokens)
    seats = [
        Participant(index, label, name, policies.base_of[name], system_prompts.get(name), sampling)
        for index, (label, name, _) in enumerate(participant_labels(participants))
    ]
    states = []
    for row in rows:
        meta = parse_meta(row.get("meta"))
        choices = list(row["choices"]) if row.get("choices") is not None else None
        for thread in range(threads):
            states.append(
                QuestionState(
                    row=row,
                    thread=thread,
                    participants=seats,
                    pre=[],
                    seed=settings.seed,
                    labels=meta.get("labels"),
                    choices=choices,
                )
            )

    def generate(state_asks: list[tuple[QuestionState, Ask]]):
        by_agent: dict[str, list[int]] = defaultdict(list)
        for k, (state, ask) in enumerate(state_asks):
            by_agent[state.participants[ask.agent].agent].append(k)
        out = [None] * len(state_asks)
        for agent in policies.agents:
            if agent not in by_agent:
                continue
            requests = []
            for k in by_agent[agent]:
                state, ask = state_asks[k]
                seed = debate_seed(
                    settings.seed, step, state.question_id, state.thread, state.participants[ask.agent].label, ask.round
                )
                # the debate rounds' budget of the protocol (`debate_max_tokens`), as the debate stage's
                cap = debate.options.get("debate_max_tokens") if ask.round > 0 else None
                requests.append(
                    GenerationRequest(
                        messages=list(ask.messages),
                        sampling=SamplingParams(
                            temperature=settings.temperature,
                            top_p=settings.top_p,
                            max_tokens=settings.max_tokens if cap is None else int(cap),
                            seed=seed,
                            logprobs=logprobs,
                        ),
                    )
                )
            with policies.acting(agent):
                generations = policies.backend(agent, f"{agent}@step{step}").generate(requests)
            for k, g in zip(by_agent[agent], generations):
                if g[0].token_ids is None:
                    raise RuntimeError(f"agent {agent}: the rollout backend returns no token ids")
                out[k] = g[0]
        return out

    first = [
        (state, Ask(agent=seat.index, round=0, messages=prompts.question_messages(state.row, seat.system_prompt)))
        for state in states
        for seat in seats
    ]
    for (state, ask), generation in zip(first, generate(first)):
        state.pre.append(to_turn(state, ask, generation))
    if debate is None:
        debate = make_protocol("training", training_protocol_options(settings, rounds, protocol))
    debate.prepare(states)
    run_engine(states, debate.run, generate)
    return states


def answers_by_round(state: QuestionState) -> list[list[str | None]]:
    """answers[t][i] of a finished debate (the layout of `uncertainty.measures` and `training.methods.udpo`)."""
    return [list(r) for r in state.outcome.answers_by_round]
