"""The debate job end to end on a fake backend: outputs, cache reuse, resume, threads, confidences."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from debatelab.data.schema import frame_from_rows
from debatelab.debate.schema import QUESTION_COLUMNS, TURN_COLUMNS
from debatelab.debate.stage import DebateSettings, debate_job
from debatelab.io import write_parquet_atomic
from debatelab.llm.base import Backend, Generation, ScoredText, stable_hash
from debatelab.zero_shot import ZERO_SHOT_COLUMNS

N_QUESTIONS = 4


class CountingBackend(Backend):
    """Answers a number derived from (messages, seed); counts generations; can die mid-job."""

    model_id = "counting"

    def __init__(self, die_after: int | None = None):
        self.generated = 0
        self.scored = 0
        self.scored_replies: list[str] = []
        self.die_after = die_after

    def generate(self, requests, progress=None):
        out = []
        for r in requests:
            if self.die_after is not None and self.generated >= self.die_after:
                raise KeyboardInterrupt("killed mid-batch")
            self.generated += 1
            last = r.messages[-1]["content"]
            if "Confidence:" in last:
                text = "8"
            else:
                text = f"The answer is \\boxed{{{int(stable_hash([r.messages, r.sampling.seed])[:4], 16) % 3}}}"
            out.append([Generation(text=text, completion_tokens=6, prompt_tokens=40, token_logprobs=[-0.2] * 6)])
        return out

    def score(self, prompts, replies):
        self.scored += len(prompts)
        self.scored_replies += list(replies)
        return [ScoredText(token_logprobs=[-0.3, -0.1], prompt_tokens=len(p) * 10) for p, r in zip(prompts, replies)]


@pytest.fixture
def workspace(tmp_path):
    rows = [
        {
            "id": f"q{k}",
            "question": f"What is {k} mod 3?",
            "choices": None,
            "answer": str(k % 3),
            "task_type": "math",
            "meta": {"source": "test"},
        }
        for k in range(N_QUESTIONS)
    ]
    dataset = tmp_path / "data.parquet"
    write_parquet_atomic(frame_from_rows(rows), dataset)
    zero_shot = {}
    for agent, offset in (("alice", 0), ("bob", 1)):
        records = []
        for k in range(N_QUESTIONS):
            for sample in range(4):
                answer = str((k + offset + sample) % 3)
                records.append(
                    {c: np.nan for c in ZERO_SHOT_COLUMNS}
                    | {
                        "question_id": f"q{k}",
                        "dataset": "toy",
                        "agent": agent,
                        "model": "m",
                        "round": 0,
                        "sample": sample,
                        "task_type": "math",
                        "response": f"\\boxed{{{answer}}}",
                        "answer": answer,
                        "gold": str(k % 3),
                        "correct": answer == str(k % 3),
                        "parse_failed": False,
                        "prompt_tokens": 30,
                        "completion_tokens": 10,
                        "finish_reason": "stop",
                        "min_logprob": -0.1 * (k + 1),
                        "mean_logprob": -0.05,
                        "verbal_parsed": 0,
                        "extra_tokens": 0,
                    }
                )
        path = tmp_path / f"{agent}.parquet"
        write_parquet_atomic(pd.DataFrame(records, columns=ZERO_SHOT_COLUMNS), path)
        zero_shot[agent] = str(path)
    return tmp_path, dataset, zero_shot


AGENTS = {
    "alice": {"model": "m", "temperature": 0.7, "max_tokens": 32},
    "bob": {"model": "m", "temperature": 1.0, "max_tokens": 32},
}


def run_job(workspace, name, options, participants=("alice", "bob"), backend=None, cache="cache", **settings):
    root, dataset, zero_shot = workspace
    backend = backend or CountingBackend()
    out = root / "out" / name
    turns, questions = debate_job(
        dataset_path=dataset,
        zero_shot_paths=zero_shot,
        turns_path=out / "turns.parquet",
        questions_path=out / "questions.parquet",
        dataset_name="toy",
        protocol_name=name,
        protocol_options=options,
        participants=list(participants),
        agents=AGENTS,
        model_paths={"m": "unused"},
        cache_dirs={"m": str(root / cache)},
        settings=DebateSettings.from_config(
            {"seed": 3, "batch_size": 5, "verbal_samples": 2, "show_progress": False, **settings}
        ),
        backends={"m": backend},
    )
    return backend, turns, questions, out


def test_outputs_follow_the_documented_schema(workspace):
    _, turns, questions, out = run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2})
    assert list(pq.read_schema(out / "turns.parquet").names) == TURN_COLUMNS
    assert list(pq.read_schema(out / "questions.parquet").names) == QUESTION_COLUMNS
    assert len(questions) == N_QUESTIONS
    assert questions["n_options"].isna().all()  # open-ended math has no answer set
    # one row per (question, round, agent): round 0 copied from the zero-shot stage, then 2 rounds
    assert len(turns) == N_QUESTIONS * 3 * 2
    assert set(turns.loc[turns["round"] == 0, "zero_shot_sample"]) == {0}
    debate = turns[turns["round"] > 0]
    assert all(list(s) == ["bob"] for s in debate.loc[debate["agent"] == "alice", "sources"])
    q = questions.iloc[0]
    assert q["ncomm"] == 4 and q["debate_calls"] == 4
    assert q["total_tokens"] == 2 * 40 + 4 * 46
    answers = json.loads(q["answers_by_round"])
    assert len(answers) == 3 and all(len(r) == 2 for r in answers)
    # correctness is graded against the gold answer
    assert (
        debate["correct"] == (debate["answer"] == debate["question_id"].str[1:].astype(int).mod(3).astype(str))
    ).all()


def test_identical_requests_of_another_protocol_come_from_the_cache(workspace):
    first, *_ = run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2})
    assert first.generated == N_QUESTIONS * 2 * 2
    ring, _, ring_questions, _ = run_job(workspace, "ring", {"kind": "ring", "rounds": 2})
    assert ring.generated == 0  # with two agents a ring is all-to-all: every request is cached
    _, _, mad_questions, _ = run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2})
    assert list(ring_questions["final_answer"]) == list(mad_questions["final_answer"])


def test_a_killed_job_resumes_without_redoing_finished_generations(workspace):
    dying = CountingBackend(die_after=7)
    with pytest.raises(KeyboardInterrupt):
        run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2}, backend=dying)
    assert dying.generated == 7
    resumed, _, questions, _ = run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2})
    # batches of 5: the first finished batch survived the kill, the one in flight did not
    assert resumed.generated == N_QUESTIONS * 4 - 5
    fresh, _, fresh_questions, _ = run_job(workspace, "mad", {"kind": "all_to_all", "rounds": 2}, cache="other")
    assert list(questions["final_answer"]) == list(fresh_questions["final_answer"])


def test_threads_and_copies_start_from_distinct_zero_shot_samples(workspace):
    _, turns, questions, _ = run_job(
        workspace, "k2", {"kind": "all_to_all", "rounds": 1, "threads": 2}, participants=("alice", "bob", "alice")
    )
    pre = turns[(turns["round"] == 0) & (turns["question_id"] == "q0")]
    samples = {(r.thread, r.agent): r.zero_shot_sample for r in pre.itertuples()}
    assert samples == {
        (0, "alice"): 0,
        (0, "bob"): 0,
        (0, "alice#1"): 2,
        (1, "alice"): 1,
        (1, "bob"): 1,
        (1, "alice#1"): 3,
    }
    assert sorted(questions["thread"].unique()) == [0, 1] and len(questions) == 2 * N_QUESTIONS


def test_too_few_zero_shot_samples_is_a_clear_error(workspace):
    with pytest.raises(ValueError, match=r"alice.parquet: needs 6 zero-shot samples .* holds 4"):
        run_job(workspace, "k3", {"kind": "all_to_all", "threads": 3}, participants=("alice", "alice"))


def test_confidences_are_elicited_on_every_agents_last_debate_turn(workspace):
    backend, turns, questions, _ = run_job(
        workspace, "mad_d", {"kind": "mad_d", "rounds": 1, "template": "pairwise", "confidence": ["verbal", "seqprob"]}
    )
    debated = turns[turns["round"] == 1]
    assert len(debated) == 2 * int((~questions["pre_unanimous"]).sum()) > 0
    assert np.allclose(debated["conf_verbal"], 0.8)  # "8" from both self-report samples
    assert debated["conf_seqprob"].notna().all() and (debated["confidence_tokens"] > 0).all()
    assert turns.loc[turns["round"] == 0, "conf_verbal"].isna().all()
    # the content prompt of every turn, and the content-free prompts, which turns may share (scored once)
    assert len(debated) < backend.scored <= 2 * len(debated)
    # confidence calls are accounted apart from the debate's own tokens
    assert (questions["confidence_tokens"] > 0).sum() == int((~questions["pre_unanimous"]).sum())


def test_adversarial_agents_debate_under_the_attack_system_prompt(workspace):
    from debatelab import prompts
    from debatelab.data import read_dataset
    from debatelab.debate.stage import build_states, read_zero_shot
    from debatelab.llm.agent import AgentSpec

    root, dataset, zero_shot = workspace
    specs = {
        "alice": AgentSpec.from_config("alice", AGENTS["alice"]),
        "bob": AgentSpec.from_config("bob", {**AGENTS["bob"], "adversarial": True}),
    }
    states = build_states(
        read_dataset(dataset),
        {a: read_zero_shot(p) for a, p in zero_shot.items()},
        ["alice", "bob"],
        specs,
        threads=1,
        seed=0,
    )
    alice, bob = states[0].pre
    assert bob.messages[0] == {"role": "system", "content": prompts.ATTACK_SYSTEM_PROMPT}
    assert alice.messages[0]["content"] != prompts.ATTACK_SYSTEM_PROMPT


@pytest.mark.parametrize("target", ["answer", "response"])
def test_debate_confidence_scores_what_seqprob_target_names(workspace, target):
    """The zero-shot stage's `seqprob_target` also holds for the debate's last turns (it used to be
    dropped there, so the debate always scored the answer)."""
    backend, turns, *_ = run_job(
        workspace,
        "pair",
        {"kind": "all_to_all", "rounds": 1, "confidence": ["seqprob"]},
        cache=f"cache-{target}",
        seqprob_target=target,
    )
    last = turns[turns["round"] == 1]
    expected = (
        list(last["response"]) if target == "response" else [f"The answer is \\boxed{{{a}}}." for a in last["answer"]]
    )
    # each reply is scored under its chat and under the content-free chat (distinct pairs once)
    assert set(backend.scored_replies) == set(expected)
    assert last["conf_seqprob"].notna().all()


class BudgetRecordingBackend(CountingBackend):
    """CountingBackend that keeps every request's reply budget."""

    def __init__(self):
        super().__init__()
        self.budgets: list[int] = []

    def generate(self, requests, progress=None):
        self.budgets += [r.sampling.max_tokens for r in requests]
        return super().generate(requests, progress)


def test_debate_max_tokens_is_the_reply_budget_of_the_debate_rounds(workspace):
    """Round 0 is the agents' zero-shot samples (their own max_tokens, 32 here); the protocol's
    `debate_max_tokens` is the budget of every debate call, and without it the agent's own."""
    capped = BudgetRecordingBackend()
    _, turns, *_ = run_job(
        workspace, "capped", {"kind": "all_to_all", "rounds": 2, "debate_max_tokens": 7}, backend=capped
    )
    assert capped.budgets and set(capped.budgets) == {7}
    assert (turns["round"] > 0).sum() == len(capped.budgets)
    plain = BudgetRecordingBackend()
    run_job(workspace, "plain", {"kind": "all_to_all", "rounds": 2}, backend=plain, cache="other")
    assert set(plain.budgets) == {32}
