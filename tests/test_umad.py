"""UMAD's advantages (Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2, Eqs 4-5) on a fixture, values worked by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from distributed_helpers import assert_each_agent_wrapped_by_ddp, assert_same_update, run_multi_agent_steps
from toy_questions import alternating_gold, toy_rows

from debatelab.training.core.rewards import group_advantages
from debatelab.training.methods.umad import (
    aleatoric_weights,
    epistemic_rewards,
    mean_nll,
    turn_rewards,
    umad_advantages,
)

# [thread g, agent i, turn t]: G = 2 threads, N = 2 agents, T_train = 2 turns
CORRECT = np.array(
    [
        [[0, 1], [0, 1]],  # thread 0: both wrong, then both right
        [[1, 1], [1, 0]],
    ]
)  # thread 1: both right, then agent 1 turns wrong


def test_team_sum_and_individual_rewards():
    team = turn_rewards(CORRECT)
    assert team[0].tolist() == [[0, 2], [0, 2]] and team[1].tolist() == [[2, 1], [2, 1]]
    assert turn_rewards(CORRECT, "individual").tolist() == CORRECT.tolist()


def test_epistemic_reward_sign_and_linear_by_hand():
    eta = 0.25
    # team sum: a peer's change is the team's: thread 0 +2, thread 1 −1; nothing at the last turn
    team = turn_rewards(CORRECT)
    assert epistemic_rewards(team, eta, "sign")[:, :, 0].tolist() == [[eta, eta], [-eta, -eta]]
    assert epistemic_rewards(team, eta, "linear")[:, :, 0].tolist() == [[2 * eta, 2 * eta], [-eta, -eta]]
    assert (epistemic_rewards(team, eta)[:, :, 1] == 0).all()
    # individual: agent 0's peer (agent 1) goes 0→1 on thread 0 (+η) and 1→0 on thread 1 (−η);
    # agent 1's peer (agent 0) goes 0→1 (+η) and stays right (0)
    own = turn_rewards(CORRECT, "individual")
    assert epistemic_rewards(own, eta, "sign")[:, :, 0].tolist() == [[eta, eta], [-eta, 0.0]]
    # with N = 3 the linear form is η/(N−1)·Σ_{j≠i} Δ_j: peers' changes +1 and 0 → η/2
    three = np.array([[[0, 0], [0, 1], [1, 1]]], dtype=float)
    assert epistemic_rewards(three, eta, "linear")[0, 0, 0] == pytest.approx(eta / 2)
    assert epistemic_rewards(three, eta, "sign")[0, 0, 0] == pytest.approx(eta)


def test_group_advantage_over_threads_uses_the_unbiased_std():
    # two threads a, b: mean (a+b)/2, unbiased std |a−b|/√2 → ±1/√2
    adv = group_advantages(np.array([[3.0], [1.0]]), eps=0.0)
    assert adv[:, 0].tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])
    values = np.array([[1.0], [2.0], [6.0]])  # mean 3, unbiased std sqrt((4 + 1 + 9)/2) = sqrt(7)
    assert group_advantages(values, eps=0.0)[:, 0].tolist() == pytest.approx(
        [-2 / math.sqrt(7), -1 / math.sqrt(7), 3 / math.sqrt(7)]
    )
    assert (group_advantages(np.array([[1.0, 2.0]])) == 0).all()  # one thread: no group


def test_aleatoric_weight_is_above_one_exactly_below_the_group_mean_nll():
    # NLL 0.5 and 1.5: mean 1, population std 0.5 → Ū = −1, +1 → W = e^{0.25}, e^{−0.25}
    w = aleatoric_weights(np.array([[0.5], [1.5]]), alpha_au=0.25)
    assert w[:, 0].tolist() == pytest.approx([math.exp(0.25), math.exp(-0.25)])
    rng = np.random.default_rng(0)
    nll = rng.gamma(2.0, 0.5, size=(5, 3, 2))
    w = aleatoric_weights(nll)
    below = nll < nll.mean(axis=0)
    assert (w[below] > 1).all() and (w[~below] <= 1).all()


def test_umad_advantages_and_ippo():
    nll = np.array([[[0.5, 1.0], [0.8, 1.0]], [[1.5, 3.0], [0.8, 1.0]]])
    parts = umad_advantages(CORRECT, nll)
    # R_total at (agent 0, turn 0): thread 0: 0 + 0.25, thread 1: 2 − 0.25 → A = ∓1/√2 (up to ε)
    assert parts["total"][:, 0, 0].tolist() == [0.25, 1.75]
    assert parts["advantage"][:, 0, 0] == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], abs=1e-5)
    # agent 0, turn 0 NLLs 0.5 and 1.5 → W = e^{0.25}, e^{−0.25}; agent 1's equal NLLs → W = 1
    assert parts["weight"][:, 0, 0] == pytest.approx([math.exp(0.25), math.exp(-0.25)])
    assert parts["weight"][:, 1, 0] == pytest.approx([1.0, 1.0])
    assert parts["advantage_au"] == pytest.approx(parts["weight"] * parts["advantage"])
    # IPPO (η = 0, α_au = 0): plain per-agent GRPO advantages of the team reward
    ippo = umad_advantages(CORRECT, nll, eta=0.0, alpha_au=0.0)
    assert ippo["advantage_au"] == pytest.approx(group_advantages(turn_rewards(CORRECT)))
    with pytest.raises(ValueError, match="threads, agents, turns"):
        umad_advantages(CORRECT, nll[0])


def test_mean_nll():
    assert mean_nll([-0.5, -1.5]) == 1.0 and math.isnan(mean_nll([]))


@pytest.mark.parametrize("kl_mode", ["reward", "loss"])
def test_the_kl_in_the_reward_is_summed_by_the_run_s_kl_estimator(kl_mode):
    """`kl_mode: reward` subtracts β·Σ_t KL_t from a response's R_total, each KL_t by the run's
    `kl_estimator` (k1 = log π − log π_ref, k3 = r − log r − 1); `kl_mode: loss` leaves the reward alone."""
    from types import SimpleNamespace

    import torch
    from conftest import toy_settings

    from debatelab.training.methods.umad import UmadTrainer

    logps, ref = torch.tensor([-1.0, -2.0, -0.5]), torch.tensor([-1.5, -1.0, -0.5])
    by_hand = {"k1": 0.5 - 1.0 + 0.0, "k3": (math.exp(-0.5) + 0.5 - 1) + (math.exp(1.0) - 1.0 - 1) + 0.0}
    penalties = {}
    for estimator in ("k1", "k3"):
        settings = toy_settings("umad", kl_estimator=estimator, umad={"kl_coef": 0.1, "kl_mode": kl_mode})
        trainer = SimpleNamespace(umad=settings.umad, settings=settings)
        cell = (0, 0, 0, 0)
        batch = SimpleNamespace(
            cell={cell: SimpleNamespace(length=3)},
            nll=np.zeros((1, 1, 1, 1)),
            penalty=np.zeros((1, 1, 1, 1)),
            kl=np.full((1, 1, 1, 1), np.nan),
        )
        UmadTrainer.turn_rewards(trainer, batch, cell, logps, ref)
        assert batch.nll[cell] == pytest.approx(3.5 / 3) and batch.kl[cell] == pytest.approx(-0.5 / 3)
        penalties[estimator] = batch.penalty[cell]
    if kl_mode == "reward":
        assert penalties == {k: pytest.approx(0.1 * v) for k, v in by_hand.items()}
    else:
        assert penalties == {"k1": 0.0, "k3": 0.0}


def _umad(char_model_dir, checkpoint_dir, steps, seed=0, **umad):
    trainer = _umad_trainer(char_model_dir, checkpoint_dir, steps, seed=seed, **umad)
    return trainer, trainer.train()


def _umad_trainer(
    char_model_dir, checkpoint_dir, steps, mini_batch_size=64, micro_batch_size=16, finetuning="lora", seed=0, **umad
):
    import torch
    from conftest import adapter_keys, toy_settings

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.umad import UmadTrainer

    settings = toy_settings(
        method="umad",
        steps=steps,
        seed=seed,
        finetuning=finetuning,
        **adapter_keys(finetuning),
        dtype="float32",
        max_tokens=10,
        overlong_buffer=0,
        learning_rate=1e-2,
        warmup_steps=0,
        kl_coef=0.001,
        kl_estimator="k1",
        mini_batch_size=mini_batch_size,
        micro_batch_size=micro_batch_size,
        show_progress=False,
        umad={"threads": 3, "turns": 2, "questions_per_step": 2, **umad},
    )
    torch.manual_seed(0)
    policies = AgentPolicies({"solver": char_model_dir, "critic": char_model_dir}, settings, device="cpu")
    rows = toy_rows(5, alternating_gold)
    trainer = UmadTrainer(
        frame_from_rows(rows),
        policies,
        settings,
        run="umad",
        participants=["solver", "critic"],
        checkpoint_dir=checkpoint_dir,
    )
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("finetuning", ["lora", "full"])
@pytest.mark.parametrize("kl_mode", ["reward", "loss"])
def test_each_agent_s_kl_and_loss_are_the_pooled_columns_restricted_to_the_agent(char_model_dir, finetuning, kl_mode):
    """With a KL weight (β = 0.001, k1, as the pilot of issue 69) the pooled `kl` is every response's
    mean k1 under its turn's π_old to the base (`UmadTrainer.metrics`); each `kl_<agent>` is the
    same mean over the agent's responses, not the updates' KL statistic, which `kl_mode: reward`'s
    loss never has (it was 0 at every step). So every `kl_<agent>` is finite and not 0 (turn 1's
    π_old is turn 0's update: a k1 mean can be of either sign), and their mean weighted by the
    agents' numbers of responses is the pooled `kl`; `loss_<agent>` averages to `loss` likewise
    (every agent has one update per turn). Mini-batches of one (question, seat, turn) group: an
    agent's second mini-batch of a turn runs after its first's optimizer step, so under `kl_mode:
    loss` the updates' KL (of the policy being updated) is not the π_old KL either."""
    trainer = _umad_trainer(char_model_dir, None, steps=1, mini_batch_size=3, finetuning=finetuning, kl_mode=kl_mode)
    assert trainer.umad.kl_coef == 0.001 and trainer.settings.kl_estimator == "k1"
    assert trainer.policy.full == (finetuning == "full")
    batches = []
    metrics_of = trainer.metrics
    trainer.metrics = lambda batch, updates: batches.append(batch) or metrics_of(batch, updates)
    m = trainer.train_step(0)
    (batch,) = batches
    agents = ("solver", "critic")
    kl = {a: m[f"kl_{a}"] for a in agents}
    assert all(np.isfinite(v) and v != 0 for v in kl.values()), kl
    responses = {a: sum(r.length > 0 for r in batch.by_agent[a]) for a in agents}  # an empty one has no KL
    assert responses == {a: 2 * 3 * 2 for a in agents}  # questions × threads × turns, no empty reply here
    weighted = sum(responses[a] * kl[a] for a in agents) / sum(responses.values())
    assert weighted == pytest.approx(m["kl"], rel=1e-6, abs=1e-9) and np.isfinite(m["kl"]) and m["kl"] != 0
    assert np.nanmean(batch.kl[..., 0]) == pytest.approx(0, abs=1e-6)  # turn 0: π_old is still the base
    assert all(np.isfinite(m[f"loss_{a}"]) for a in agents)
    assert np.mean([m[f"loss_{a}"] for a in agents]) == pytest.approx(m["loss"], rel=1e-6, abs=1e-9)


@pytest.mark.slow
def test_umad_steps_update_turn_by_turn_and_resume_to_the_same_weights(char_model_dir, tmp_path):
    import torch

    # Seed 3: under math-verify's grading (issue 70) seed 0's second step has no right answer (every
    # reward equal); at seed 3 both steps have some.
    trainer, metrics = _umad(char_model_dir, tmp_path / "whole", steps=2, seed=3)
    assert list(metrics["step"]) == [1, 2] and (metrics["debates"] == 2 * 3).all()
    assert (metrics["sequences"] == 2 * 3 * 2 * 2).all()  # questions × threads × agents × turns
    assert (metrics["updates"] == 2 * 2).all()  # turns in sequence × agents, one mini-batch each
    assert np.isfinite(metrics["loss"]).all() and (metrics["weight_mean"] > 0).all()
    assert (metrics["reward_std"] > 0).all() and (metrics["accuracy_first"] > 0).any()  # some rewards to learn from
    # each agent's own accuracy (its replies only): both answer equally often, so their mean is the pooled value
    for pooled_column, prefix in {"accuracy_first": "accuracy_first", "accuracy": "accuracy_last"}.items():
        per_agent = metrics[[f"{prefix}_{agent}" for agent in ("solver", "critic")]].mean(axis=1)
        np.testing.assert_allclose(per_agent, metrics[pooled_column])
    for agent in ("solver", "critic"):
        assert any(
            float(p.detach().abs().max()) > 0
            for n, p in trainer.policy.adapter_parameters(agent).items()
            if "lora_B" in n
        )
    _umad(char_model_dir, tmp_path / "split", steps=1, seed=3)
    resumed, resumed_metrics = _umad(char_model_dir, tmp_path / "split", steps=2, seed=3)
    whole, split = trainer.policy.trainable_state(), resumed.policy.trainable_state()
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    timing = ["rollout_seconds", "update_seconds", "tokens_per_second"]
    pd.testing.assert_frame_equal(metrics.drop(columns=timing), resumed_metrics.drop(columns=timing))


@pytest.mark.slow
@pytest.mark.parametrize("mini_batch, micro_batch", [(64, 16), (3, 16), (64, 2)])
def test_pi_old_from_the_updates_first_forward_gives_the_same_step(char_model_dir, mini_batch, micro_batch):
    """The first mini-batch of each agent's turn takes π_old (and the reference) from the update's own
    forward instead of a no-gradient pass: its Û, KL penalty and advantages, then the step's
    adapters and metrics, equal those of the separate pass within float32 rounding, with fewer
    tokens through the model. Mini-batch 64 holds a whole turn (no pass left); 3 holds one group of
    3 threads, so the second group still comes from the pass (in a forward of its own: fewer tokens,
    not fewer calls). Micro-batches of 2 can't hold a group of 3: the groups are split to keep the
    size, and π_old comes from the pass as before (the same step exactly)."""
    import torch

    runs = {}
    for reuse in (False, True):
        trainer = _umad_trainer(char_model_dir, None, steps=1, mini_batch_size=mini_batch, micro_batch_size=micro_batch)
        trainer.reuse_policy_logprobs = reuse
        tokens, passes = [], []  # every forward's input tokens (the rollouts' and the update's); the update's passes
        hooks = [
            m.register_forward_pre_hook(
                lambda _, args, kwargs: tokens.append(kwargs["input_ids"].numel()), with_kwargs=True
            )
            for m in trainer.policy.models.values()
        ]
        plan = trainer._plan

        def recorded(*a, _plan=plan, **k):
            out = _plan(*a, **k)
            passes.extend(micro for minibatch in out for micro in minibatch)
            return out

        trainer._plan = recorded
        metrics = trainer.train_step(0)
        for hook in hooks:
            hook.remove()
        runs[reuse] = (metrics, trainer.policy.trainable_state(), sum(tokens))
        assert passes and max(len(m) for m in passes) <= micro_batch
    (m0, w0, f0), (m1, w1, f1) = runs[False], runs[True]
    assert m0["updates"] == m1["updates"] == (2 * 2 if mini_batch == 64 else 2 * 2 * 2)  # agents × turns (× groups)
    if micro_batch < 3:  # no group whole in a pass: nothing reused, the same step
        assert f1 == f0 and all(torch.equal(w1[k], w0[k]) for k in w0)
        return
    assert f1 < f0  # the first mini-batches' π_old tokens are not run again
    for key in ("reward_mean", "reward_std", "eu_mean", "weight_mean", "kl", "loss", "entropy"):
        assert m1[key] == pytest.approx(m0[key], rel=1e-4, abs=1e-6), key
    assert m1["clip_fraction"] == m0["clip_fraction"]
    moved = 0
    for k in w0:
        torch.testing.assert_close(w1[k], w0[k], rtol=1e-4, atol=1e-6)
        moved += "lora_B" in k and bool(w0[k].abs().max() > 0)
    assert moved  # the step changed the adapters: the comparison can fail


def test_the_update_scores_every_debate_turn_as_the_rollout_sampled_it(char_model_dir):
    """π_old of every turn of both agents, computed by the update's pass from the turn's messages and
    token ids, equals the log-probabilities the rollout sampled it with (temperature 1): the update
    trains the policy that acted, on the prompt it saw, also on turn 1, whose prompt carries the
    peer's reply. Each agent's adapter is perturbed differently first, so a pass under the wrong
    agent's adapter, or on another prompt, would differ."""
    import torch

    from debatelab.training.core.debate_rollouts import rollout_debates

    trainer = _umad_trainer(char_model_dir, None, steps=1)
    policies = trainer.policy
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for agent in policies.agents:
            for name, p in policies.adapter_parameters(agent).items():
                if "lora_B" in name:
                    p.copy_(torch.randn(p.shape, generator=generator) * 0.5)
    states = rollout_debates(
        policies, trainer.draw(2), trainer.participants, trainer.settings, step=0, rounds=1, threads=2, logprobs=True
    )
    compared = {}
    for state in states:
        for turn in state.pre + state.turns:
            agent = trainer.seat_agent[trainer.seats[turn.agent]]
            rollout = trainer.turn_rollout(state, turn, group="g", sample=0)
            if not rollout.length:
                continue
            with policies.acting(agent) as view:
                old, _, _ = trainer.logprob_pass([[rollout]], view)
            assert float(old[id(rollout)].mean()) == pytest.approx(turn.mean_logprob, abs=1e-4), (agent, turn.round)
            compared[agent, turn.round] = compared.get((agent, turn.round), 0) + 1
    assert set(compared) == {(a, t) for a in ("solver", "critic") for t in (0, 1)}
    # the other agent's adapter scores the same reply differently: the comparison can fail
    state = states[0]
    turn = state.pre[0]
    rollout = trainer.turn_rollout(state, turn, group="g", sample=0)
    other = next(a for a in policies.agents if a != trainer.seat_agent[trainer.seats[turn.agent]])
    with policies.acting(other) as view:
        old, _, _ = trainer.logprob_pass([[rollout]], view)
    assert abs(float(old[id(rollout)].mean()) - turn.mean_logprob) > 1e-2


@pytest.mark.slow
def test_ippo_has_no_intrinsic_reward_and_unit_weights(char_model_dir):
    _, metrics = _umad(char_model_dir, None, steps=1, eta=0.0, alpha_au=0.0)
    assert (metrics["eu_mean"] == 0).all() and (metrics["weight_mean"] == 1).all()


@pytest.mark.slow
def test_the_epistemic_reward_changes_the_update_relative_to_ippo_on_the_same_rollouts(char_model_dir):
    """One step with η = 0.25 and one with η = 0 (α_au the same): the same debates (same seeds, same
    starting adapters), the same aleatoric weights, but an EU reward in the first turn's advantages,
    so the agents' adapters end up elsewhere."""
    import torch

    with_eu, metrics = _umad(char_model_dir, None, steps=1)
    ippo, ippo_metrics = _umad(char_model_dir, None, steps=1, eta=0.0)
    same = ["accuracy", "accuracy_first", "weight_mean", "response_length", "sequences"]
    pd.testing.assert_frame_equal(metrics[same], ippo_metrics[same])
    assert (metrics["eu_mean"] != 0).all() and (ippo_metrics["eu_mean"] == 0).all()
    a, b = with_eu.policy.trainable_state(), ippo.policy.trainable_state()
    for agent in ("solver", "critic"):
        moved = [not torch.allclose(a[k], b[k]) for k in a if k.startswith(f"{agent}/") and "lora_B" in k]
        assert any(moved), agent


@pytest.mark.slow
def test_two_processes_make_the_same_umad_step_as_one_on_all_questions(tmp_path, char_model_dir):
    """Data parallel UMAD: each of two processes debates one of the step's two questions (its G
    threads whole); the rewards and group advantages are the question's own, every agent's gradients
    are averaged over the processes and the loss normaliser counts both, so the step's gradients,
    adapters and metrics equal one process's on both questions."""
    runs = run_multi_agent_steps("umad", char_model_dir, tmp_path)
    (one, reports1), (two, reports2) = runs[1], runs[2]
    assert_same_update(one, two, {"solver", "critic"})
    assert_each_agent_wrapped_by_ddp(two, reports2)
    m1, m2 = reports1[0]["metrics"], reports2[0]["metrics"]
    assert reports2[1]["metrics"] == m2 | {
        k: reports2[1]["metrics"][k] for k in ("rollout_seconds", "update_seconds", "tokens_per_second")
    }
    assert m1["debates"] == m2["debates"] == 2 * 3 and m1["sequences"] == m2["sequences"] == 2 * 3 * 2 * 2
    assert m1["reward_std"] > 0  # mixed rewards: something to learn from
    for key in (
        "reward_mean",
        "reward_std",
        "accuracy",
        "accuracy_first",
        "eu_mean",
        "weight_mean",
        "loss",
        "response_length",
        *(f"{c}_{a}" for c in ("accuracy_first", "accuracy_last", "loss", "kl") for a in ("solver", "critic")),
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-7), key


def test_a_multi_agent_job_travels_to_its_processes_as_json(tmp_path):
    """What `launch_or_train` hands each process of a multi-agent job comes back equal."""
    from conftest import toy_settings

    from debatelab.llm.agent import AgentSpec
    from debatelab.training.core.launch import read_job_spec, write_job_spec

    settings = toy_settings(method="umad", lora={"r": 4, "alpha": 8}, umad={"threads": 3, "questions_per_step": 4})
    agents = {
        "solver": AgentSpec(name="solver", model="m", system_prompt="solve"),
        "critic": AgentSpec(name="critic", model="m"),
    }
    job = dict(
        dataset_path="d.parquet",
        bases={"solver": "m", "critic": "m"},
        participants=["solver", "critic"],
        agents=agents,
        out_dirs={"solver": "o/solver", "critic": "o/critic"},
        metrics_path="m.parquet",
        curves_path="c.png",
        settings_path="s.json",
        checkpoint_dir="ck",
        run="umad",
        settings=settings,
        coefficients_path=None,
        limit=4,
    )
    write_job_spec(tmp_path / "job.json", **job)
    back = read_job_spec(tmp_path / "job.json")
    assert back == job and back["settings"].umad.threads == 3
