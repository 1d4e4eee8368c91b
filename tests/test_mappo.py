"""MAPPO and RMAAC, UDPO's actor-critic baselines (Tang et al., arXiv:2602.07186 §5.1 Baselines): the shared reward, the critic's
features and advantages by hand, RMAAC's peer swaps, and whole training steps with resume."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import toy_settings
from distributed_helpers import assert_each_agent_wrapped_by_ddp, assert_same_update, run_multi_agent_steps
from toy_questions import toy_rows

from debatelab.debate.engine import Participant, QuestionState, Turn
from debatelab.llm import SamplingParams
from debatelab.training.methods.mappo import (
    FEATURES,
    MappoSettings,
    PeerSwapDebate,
    agreement_features,
    build_critic,
    critic_advantages,
    final_disagreement,
    fit_critic,
    shared_reward,
)

SETTINGS = toy_settings(
    "mappo",
    lora={"r": 4, "alpha": 8},
    dtype="float32",
    max_tokens=6,
    overlong_buffer=0,
    learning_rate=1e-2,
    warmup_steps=0,
    show_progress=False,
)


def test_shared_reward_is_the_task_plus_weighted_consensus():
    split, unanimous = [["7", "7", "3"], ["7", "3", "3"]], [["7", "3", "3"], ["7", "7", "7"]]
    assert final_disagreement(split, "math") == 1.0 and final_disagreement(unanimous, "math") == 0.0
    assert shared_reward(1.0, final_disagreement(unanimous, "math"), 1.0) == 2.0  # MAPPO: r_task + (1 − D)
    assert shared_reward(0.0, final_disagreement(unanimous, "math"), 1.0) == 1.0  # wrong but unanimous
    assert shared_reward(1.0, final_disagreement(split, "math"), 1.0) == 1.0
    assert shared_reward(1.0, 0.0, 0.0) == 1.0  # RMAAC: r_task alone
    assert MappoSettings().resolved("mappo") == {"consensus_weight": 1.0, "peer_swap_prob": 0.0}
    assert MappoSettings().resolved("rmaac") == {"consensus_weight": 0.0, "peer_swap_prob": 0.2}
    assert MappoSettings(peer_swap_prob=0.5).resolved("mappo")["peer_swap_prob"] == 0.5
    with pytest.raises(ValueError, match="peer_swap_prob"):
        MappoSettings(peer_swap_prob=1.5)


def test_agreement_features_by_hand():
    assert len(FEATURES) == 9
    assert agreement_features(None, 0, 0, 2, "math") == [1.0, 0.0, 0, 0, 0, 0, 0, 0, 0]  # before round 0
    # before round 1 of 2: answers 7, 7, 3 (agent 2 holds the minority answer); one unparseable case below
    f = dict(zip(FEATURES, agreement_features(["7", "7", "3"], 2, 1, 2, "math")))
    entropy = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)) / math.log(3)
    assert f == pytest.approx(
        {
            "first_round": 0.0,
            "progress": 0.5,
            "plurality_share": 2 / 3,
            "entropy": entropy,
            "disagreement": 1.0,
            "invalid_share": 0.0,
            "own_with_plurality": 0.0,
            "own_invalid": 0.0,
            "distinct_share": 2 / 3,
        }
    )
    g = dict(zip(FEATURES, agreement_features(["7", None, "7.0"], 1, 2, 2, "math")))  # "7.0" is the answer 7
    assert g["plurality_share"] == pytest.approx(2 / 3) and g["invalid_share"] == pytest.approx(1 / 3)
    assert g["own_invalid"] == 1.0 and g["own_with_plurality"] == 0.0 and g["progress"] == 1.0


def test_critic_advantages_and_fit_by_hand():
    returns, values = np.array([2.0, 1.0, 0.0, 1.0]), np.array([1.0, 1.0, 1.0, 0.0])
    raw = critic_advantages(returns, values, normalize=False)
    assert raw.tolist() == [1.0, 0.0, -1.0, 1.0]
    normed = critic_advantages(returns, values)
    assert normed == pytest.approx((raw - 0.25) / (np.std(raw) + 1e-8))
    # the critic learns to tell a unanimous state (return 2) from a split one (return 0)
    critic = build_critic(16, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(critic.parameters(), build_critic(16, seed=0).parameters()))
    features = np.array(
        [agreement_features(["7", "7", "7"], 0, 1, 2, "math"), agreement_features(["7", "3", "5"], 0, 1, 2, "math")]
        * 4,
        dtype=np.float32,
    )
    targets = np.array([2.0, 0.0] * 4, dtype=np.float32)
    optimizer = torch.optim.Adam(critic.parameters(), lr=1e-2)
    first = fit_critic(critic, optimizer, features, targets, epochs=200)
    last = fit_critic(critic, optimizer, features, targets, epochs=0)
    assert first > 0.5 and last < 0.01 * first


def _state(answers: list[str], correct: list[bool]) -> tuple[QuestionState, list[Turn]]:
    sampling = SamplingParams(temperature=1.0, top_p=1.0, max_tokens=8)
    seats = [Participant(i, f"a{i}", f"a{i}", "m", None, sampling) for i in range(len(answers))]
    row = {"id": "q0", "question": "What is 3 + 4?", "choices": None, "answer": "7", "task_type": "math", "meta": None}
    q = QuestionState(row=row, thread=0, participants=seats, pre=[], seed=0)
    turns = [
        Turn(agent=i, round=0, response=f"agent {i} says \\boxed{{{a}}}", answer=a, key=a, correct=c)
        for i, (a, c) in enumerate(zip(answers, correct))
    ]
    q.pre = list(turns)
    return q, turns


def test_rmaac_swaps_shown_peers_for_wrong_answers_of_the_same_debate():
    q, current = _state(["7", "7", "3", "7"], [True, True, False, True])
    always = PeerSwapDebate({"rounds": 1}, p=1.0, step=0)
    views = always.peer_views(q, 0, 1, current, [1, 2, 3], [])
    assert [v.index for v in views] == [1, 2, 3]
    assert all(v.answer == "3" and "\\boxed{3}" in v.response for v in views)  # the only wrong answer, agent 2's
    assert always.offered == 3 and always.swaps == 3  # peer 2: no other wrong reply this round, so its round-0 one
    never = PeerSwapDebate({"rounds": 1}, p=0.0, step=0)
    assert [v.response for v in never.peer_views(q, 0, 1, current, [1, 2, 3], [])] == [t.response for t in current[1:]]
    # a debate with no wrong turn cannot be perturbed; the receiver's own wrong turn is never shown to it
    q2, right = _state(["7", "7"], [True, True])
    assert PeerSwapDebate({"rounds": 1}, p=1.0, step=0).peer_views(q2, 0, 1, right, [1], [])[0].answer == "7"
    q3, mine = _state(["3", "7"], [False, True])
    assert PeerSwapDebate({"rounds": 1}, p=1.0, step=0).peer_views(q3, 0, 1, mine, [1], [])[0].answer == "7"
    # seeded: a fifth of the views on a larger debate, the same draws on a rerun, others on another step
    q4, many = _state(["3"] + ["7"] * 9, [False] + [True] * 9)
    counts = []
    for step in (0, 0, 1):
        debate = PeerSwapDebate({"rounds": 1}, p=0.2, step=step)
        counts.append(
            tuple(
                v.answer
                for i in range(1, 10)
                for v in debate.peer_views(q4, i, 1, many, [j for j in range(10) if j != i], [])
            )
        )
    assert counts[0] == counts[1] and counts[0] != counts[2]
    swapped = sum(a == "3" for a in counts[0]) - 9  # each receiver also sees agent 0's own wrong answer
    assert 5 <= swapped <= 30  # about 0.2 × 72 peers that are right


def _mappo(char_model_dir, checkpoint_dir, steps, method="mappo", **mappo):
    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.mappo import MappoTrainer

    torch.manual_seed(0)
    settings = replace(SETTINGS, method=method, steps=steps, mappo={"rounds": 2, "questions_per_step": 4, **mappo})
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    rows = toy_rows(6)
    trainer = MappoTrainer(
        frame_from_rows(rows),
        policies,
        settings,
        run=method,
        participants=["alice", "bob", "alice"],
        checkpoint_dir=checkpoint_dir,
    )
    return trainer, trainer.train()


@pytest.mark.slow
def test_mappo_steps_train_every_agent_and_the_critic_and_resume_to_the_same_weights(char_model_dir, tmp_path):
    trainer, metrics = _mappo(char_model_dir, tmp_path / "whole", steps=2)
    assert list(metrics["step"]) == [1, 2] and (metrics["debates"] == 4).all()
    assert (metrics["sequences"] == 4 * 3 * 3).all()  # 4 debates × 3 seats × rounds 0..2
    assert (metrics["peer_swaps"] == 0).all() and np.isfinite(metrics["value_loss"]).all()
    assert ((metrics["reward_mean"] - metrics["accuracy"] - metrics["consensus"]).abs() < 1e-9).all()
    assert np.isfinite(metrics["loss"]).all() and (metrics["updates"] == 2).all()
    for agent in ("alice", "bob"):
        assert any(
            float(p.detach().abs().max()) > 0
            for n, p in trainer.policy.adapter_parameters(agent).items()
            if "lora_B" in n
        )
    fresh = build_critic(64, seed=0)
    assert not all(torch.equal(a, b) for a, b in zip(trainer.critic.parameters(), fresh.parameters()))

    _mappo(char_model_dir, tmp_path / "split", steps=1)
    resumed, resumed_metrics = _mappo(char_model_dir, tmp_path / "split", steps=2)
    whole, split = trainer.policy.trainable_state(), resumed.policy.trainable_state()
    assert any(k.startswith("@critic/") for k in whole) and whole.keys() == split.keys()
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    timing = ["rollout_seconds", "update_seconds", "tokens_per_second"]
    pd.testing.assert_frame_equal(metrics.drop(columns=timing), resumed_metrics.drop(columns=timing))


@pytest.mark.slow
def test_rmaac_trains_on_perturbed_debates_with_the_task_reward(char_model_dir, tmp_path):
    trainer, metrics = _mappo(char_model_dir, None, steps=1, method="rmaac", peer_swap_prob=1.0)
    assert (metrics["reward_mean"] == metrics["accuracy"]).all()  # r_task alone
    # every shown peer is swapped when the debate has a parsed wrong reply to swap in (the random
    # model's are mostly unparseable, so some debates have none)
    assert 0 < metrics["peer_swaps"].iloc[0] <= 1
    assert np.isfinite(metrics["loss"]).all() and (metrics["updates"] == 2).all()


@pytest.mark.slow
def test_two_processes_make_the_same_rmaac_steps_as_one(tmp_path, char_model_dir):
    """Data parallel RMAAC, two steps: each process debates half of a step's questions (with its own
    seeded peer swaps); the gathered answers and returns give every process the same advantages and
    the same critic fit, and each agent's gradients are averaged, so adapters, critic and metrics
    equal one process's."""
    runs = run_multi_agent_steps("rmaac", char_model_dir, tmp_path)
    (one, reports1), (two, reports2) = runs[1], runs[2]
    assert_same_update(one, two, {"alice", "bob"})
    assert_each_agent_wrapped_by_ddp(two, reports2)
    assert any(k.startswith("@critic/") for k in one)
    m1, m2 = reports1[0]["metrics"], reports2[0]["metrics"]
    assert m1["debates"] == m2["debates"] == 4 and m1["sequences"] == m2["sequences"] == 4 * 3 * 2
    for key in (
        "reward_mean",
        "accuracy",
        "consensus",
        "value_mean",
        "value_loss",
        "peer_swaps",
        "loss",
        "response_length",
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-7), key
