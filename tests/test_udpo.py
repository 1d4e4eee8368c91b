"""UDPO's formulas (Tang et al., arXiv:2602.07186 §4, App. A) on fixture debates, every value worked by hand in the comments."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from toy_questions import toy_rows

from debatelab.training.methods.udpo import (
    AgentCoefficients,
    agent_reward,
    base_weights,
    batch_advantages,
    calibrate_coefficients,
    replay_draw,
    replay_priority,
    reward_ranking,
    trajectory_rewards,
)

# N = 3 agents, T = 2 debate rounds; gold "4".
FIXTURE = [
    ["4", "5", "4"],  # t = 0
    ["4", "4", "4"],  # t = 1
    ["4", "4", "5"],
]  # t = 2
# nobody moves, everybody disagrees; the vote ties three ways and goes to agent 0's "4"
STUBBORN = [["4", "5", "6"]] * 3


def test_trajectory_rewards_by_hand():
    r = trajectory_rewards(FIXTURE, "4", "math")
    # flips over t = 0→1→2: agent 0 none, agent 1 5→4, agent 2 4→5: 2 of N·T = 6
    assert r["r_intra"] == pytest.approx(1 - 2 / 6)
    # C_0 = 2/3 (0≠1, 1≠2), C_1 = 0, C_2 = 2/3 → U_inter = 4/9
    assert r["r_inter"] == pytest.approx(1 - 4 / 9)
    # final 4,4,5: H̃ = H(2/3, 1/3)/log 2 = 0.918296, D = 1, L = 0 (4,5 ties go to the first agent's 4)
    entropy = -(2 / 3 * math.log(2 / 3) + 1 / 3 * math.log(1 / 3)) / math.log(2)
    assert r["r_sys"] == pytest.approx(1 - (entropy + 1 + 0) / 3)
    assert r["r_task"] == 1.0
    assert trajectory_rewards(FIXTURE, "5", "math")["r_task"] == 0.0


def test_corrected_r_intra_stays_in_the_unit_interval():
    # Eq 1 as printed (N(T−1) denominator) would give 1 − 6/3 = −1 here; the corrected form gives 0
    flipping = [["1", "1", "1"], ["2", "2", "2"], ["1", "1", "1"]]
    assert trajectory_rewards(flipping, "1", "math")["r_intra"] == 0.0


def test_r_intra_s_normaliser_is_the_declared_choice_with_its_worked_numbers():
    """udpo.yaml declares r_intra's normaliser as a [CHOICE] (Eq. 1's N(T−1) under its T transitions);
    the numbers it gives are the ones computed here: N = 5, T = 5 debate rounds after the first answers."""
    config = (Path(__file__).resolve().parents[1] / "config" / "experiments" / "udpo.yaml").read_text()
    declaration = config[config.index("# [CHOICE] r_intra") :].split("\ntraining:")[0]
    assert "5 flips give 1 − 5/25 = 0.80 here and 1 − 5/20 = 0.75 as printed" in declaration
    assert "25 flips (every agent\n# every round) give 0 here and −0.25 as printed" in declaration
    steady = [["1"] * 5] * 6  # rounds t = 0…5
    # agent i answers 1 up to round i and 2 after it: one flip each, 5 in all
    five_flips = [["1" if t <= i else "2" for i in range(5)] for t in range(6)]
    flips = sum(five_flips[t][i] != five_flips[t + 1][i] for i in range(5) for t in range(5))
    assert flips == 5
    assert trajectory_rewards(five_flips, "1", "math")["r_intra"] == pytest.approx(0.80)
    every_round = [["1" if t % 2 == 0 else "2"] * 5 for t in range(6)]
    assert trajectory_rewards(every_round, "1", "math")["r_intra"] == 0.0
    assert trajectory_rewards(steady, "1", "math")["r_intra"] == 1.0


def test_invalid_answers_count_as_disagreement_in_the_rewards():
    """[CHOICE] (issue 69, `uncertainty.measures.udpo_agree`): an invalid answer agrees with no answer,
    itself included, so a debate that agrees on nothing earns no agreement reward."""
    # N = 3 agents invalid in every round, T = 2: every one of the N·T = 6 transitions is
    # INVALID → INVALID, a flip → r_intra = 1 − 6/6 = 0; no pair agrees in any round → C_t = 1,
    # r_inter = 0; final: 3 singleton values → H̃ = ln 3/ln 3 = 1, D = 1, ŷ = INVALID and every
    # leave-one-out vote INVALID ≠ INVALID → L = 1, r_sys = 1 − 3/3 = 0; r_task = 0.
    # (With INVALID one shared value all three were 1.)
    all_invalid = trajectory_rewards([[None] * 3] * 3, "4", "math")
    assert all_invalid == {"r_intra": 0.0, "r_inter": 0.0, "r_sys": 0.0, "r_task": 0.0}
    # An agent invalid in two consecutive rounds has flipped: agents 0, 1 say 4 throughout, agent
    # 2 is invalid throughout → 2 flips (t = 0→1, 1→2) of N·T = 6 → r_intra = 1 − 2/6 = 2/3.
    invalid_seat = trajectory_rewards([["4", "4", None]] * 3, "4", "math")
    assert invalid_seat["r_intra"] == pytest.approx(2 / 3)
    # T = 1, one agent: None → None is the one flip of N·T = 1 → r_intra = 0.
    assert trajectory_rewards([[None], [None]], "4", "math")["r_intra"] == 0.0


def test_an_all_invalid_debate_earns_less_than_a_right_majority():
    """Coefficients the fitting can produce (α .48, β .58, γ .48, λ .69) and N = 3, T = 2. A right
    2-of-3 majority that never moves (4, 4, 5 in every round, gold 4): r_intra = 1 (no flips);
    C_t = 2/3 every round → r_inter = 1/3; final 4,4,5: H̃ = H(2/3, 1/3)/ln 2 = 0.636514/0.693147 =
    0.918296, D = 1, L = 0 (without agent 0 or 1 the 4,5 tie goes to the first, 4) → r_sys =
    1 − 1.918296/3 = 0.360568; r_task = 1. r = .48·1 + .58/3 + .48·0.360568 + .69·1 = .48 +
    .193333 + .173073 + .69 = 1.536406.
    All invalid (every r 0, test above): r = 0. With INVALID one shared value it was
    .48 + .58 + .48 + 0 = 1.54 > 1.536406: agreeing on nothing paid more than the right majority."""
    c = AgentCoefficients(alpha=0.48, beta=0.58, gamma=0.48, lam=0.69, eta=0.01)
    majority = agent_reward(trajectory_rewards([["4", "4", "5"]] * 3, "4", "math"), c)
    nothing = agent_reward(trajectory_rewards([[None] * 3] * 3, "4", "math"), c)
    assert majority == pytest.approx(1.536406, abs=1e-6)
    assert nothing == 0.0
    assert nothing < majority


def test_agent_reward_is_eq_4():
    c = AgentCoefficients(alpha=0.5, beta=0.25, gamma=2.0, lam=1.0, eta=0.01)
    rewards = {"r_intra": 0.2, "r_inter": 0.4, "r_sys": 0.1, "r_task": 1.0}
    assert agent_reward(rewards, c) == pytest.approx(0.1 + 0.1 + 0.2 + 1.0)


def test_reward_ranking_by_hand():
    """Two agents, one debate round, gold "1". Right and unanimous: r_intra = r_inter = r_sys = 1,
    r_task = 1. Wrong and unanimous: the same but r_task = 0. Wrong and split ("2" vs "3" both
    rounds): r_intra = 1, r_inter = 0, final H̃ = 1, D = 1, L = 1/2 (the tie goes to agent 0's
    "2"; without agent 0 the vote is "3") → r_sys = 1 − 2.5/3 = 1/6, and the vote "2" is wrong.
    With α = β = γ = λ = 1 the rewards are 4, 3, 7/6: no wrong debate reaches the right one; the
    advantages are r − 49/18, Σ² = 4.1296, the task part λ(r_task − 1/3) has Σ² = 2/3 → 0.1614.
    With λ = 0 the right and the unanimous wrong debate tie: 1 misranked pair of 2."""
    right, unanimous_wrong, split = [["1", "1"], ["1", "1"]], [["2", "2"], ["2", "2"]], [["2", "3"], ["2", "3"]]
    trajectories, golds = [right, unanimous_wrong, split], ["1", "1", "1"]
    even = AgentCoefficients(alpha=1, beta=1, gamma=1, lam=1, eta=0)
    no_task = AgentCoefficients(alpha=1, beta=1, gamma=1, lam=0, eta=0)
    with_task, without = reward_ranking(trajectories, golds, "math", [even, no_task])
    assert with_task["misranked"] == 0.0 and without["misranked"] == 0.5
    assert with_task["task_share"] == pytest.approx((2 / 3) / 4.12963, rel=1e-4)
    assert without["task_share"] == 0.0
    assert (with_task["right_debates"], with_task["wrong_debates"]) == (1, 2)
    only_wrong = reward_ranking([unanimous_wrong, split], ["1", "1"], "math", [even])[0]
    assert math.isnan(only_wrong["misranked"]) and only_wrong["task_share"] == 0.0


def test_coefficients_of_algorithm_b_by_hand():
    coefficients, profile = calibrate_coefficients([FIXTURE, STUBBORN], ["4", "4"], "math", base="uniform")
    # Per agent, mean over the two debates (λ = 0.5 in U_intra = λF + (1−λ)M):
    #   agent 0: U_intra (0 + 0)/2 = 0;     U_inter (1/3 + 1)/2 = 2/3; L̄ (0 + 1)/2 = 1/2
    #            (in STUBBORN, without agent 0 the 5,6 tie goes to 5 ≠ 4)
    #   agent 2: U_intra (1 + 0)/2 = 1/2;   U_inter (1/2 + 1)/2 = 3/4; L̄ 0
    assert profile["agents"][0] == pytest.approx({"u_intra": 0.0, "u_inter": 2 / 3, "leave_one_out": 0.5, "u_sys": 0.5})
    k, third = 1.5, 1 / 3
    assert coefficients[0].to_dict() == pytest.approx(
        {
            "alpha": third * 1,
            "beta": third * (1 + k * 2 / 3),
            "gamma": third * (1 + k * 0.5),
            "lam": 1 / (1 + k * 0.5),
            "eta": 0.01 * (1 + k * 0.5),
        }
    )
    assert coefficients[2].to_dict() == pytest.approx(
        {"alpha": third * (1 + k * 0.5), "beta": third * (1 + k * 0.75), "gamma": third, "lam": 1.0, "eta": 0.01}
    )
    # the alternative Ū_sys^(i) = mean(Ū_intra, Ū_inter, L̄): agent 0 → (0 + 2/3 + 1/2)/3 = 7/18
    mean_mode, _ = calibrate_coefficients([FIXTURE, STUBBORN], ["4", "4"], "math", base="uniform", sys_mode="mean")
    assert mean_mode[0].lam == pytest.approx(1 / (1 + k * 7 / 18))
    assert mean_mode[0].gamma == coefficients[0].gamma  # γ keeps L̄


def test_base_weights_are_normalised_cohens_d():
    correct = [False, False, True, True]
    # d_intra: means 1 vs −1, pooled sd sqrt((2 + 2)/2) = √2 → d = √2
    # d_inter: means 1 vs 0, pooled sd sqrt((0 + 2)/2) = 1 → d = 1
    # d_sys: means 1/2 vs 0, pooled sd sqrt((1/2 + 0)/2) = 1/2 → d = 1
    w = base_weights([2, 0, 0, -2], [1, 1, 1, -1], [1, 0, 0, 0], correct)
    total = math.sqrt(2) + 2
    assert w == pytest.approx({"alpha": math.sqrt(2) / total, "beta": 1 / total, "gamma": 1 / total})
    # a measure that is lower on failures (d < 0) does not separate them: fall back to 1/3 each
    assert base_weights([0, 0, 2, 2], [1, 1, 1, -1], [1, 0, 0, 0], correct) == pytest.approx(
        {"alpha": 1 / 3, "beta": 1 / 3, "gamma": 1 / 3}
    )
    # no failures at all: d is undefined
    assert base_weights([1, 0], [1, 0], [1, 0], [True, True])["alpha"] == pytest.approx(1 / 3)


def test_batch_mean_baseline_per_agent():
    rewards = np.array([[1.0, 2.0], [3.0, 2.0], [2.0, 5.0]])  # 3 debates × 2 agents
    advantages = batch_advantages(rewards)
    assert advantages[:, 0].tolist() == [-1.0, 1.0, 0.0]
    assert advantages[:, 1].tolist() == [-1.0, -1.0, 2.0]


def test_replay_priority_and_draw():
    weights = {"alpha": 0.5, "beta": 0.25, "gamma": 0.25}
    calm = {"r_intra": 1.0, "r_inter": 1.0, "r_sys": 1.0}
    assert replay_priority(calm, weights) == pytest.approx(1e-3)  # the floor: never zero
    assert replay_priority({"r_intra": 0.0, "r_inter": 0.5, "r_sys": 1.0}, weights) == pytest.approx(0.625 + 1e-3)

    priorities = np.array([1.0, 3.0])  # p = 1/4, 3/4
    rng = np.random.default_rng(0)
    counts, seen_weights = np.zeros(2), {}
    for _ in range(2000):
        index, w = replay_draw(priorities, 4, rng)
        assert len(index) == 4 and len(set(index[2:])) == 2  # two by priority, two uniform without replacement
        assert (w[2:] == 1).all()
        for i in index[:2]:
            counts[i] += 1
        if index[0] != index[1]:  # both drawn by priority: w = 1/(|B|p) over max → 1 for p = 1/4, 1/3 for 3/4
            seen_weights = dict(zip(index[:2].tolist(), w[:2].tolist()))
    assert counts[1] / counts.sum() == pytest.approx(0.75, abs=0.03)
    assert seen_weights == pytest.approx({0: 1.0, 1: 1 / 3})
    with pytest.raises(ValueError, match="positive"):
        replay_draw(np.array([1.0, 0.0]), 2, rng)


@pytest.mark.parametrize("config_name", ["udpo", "udpo_cpu"])
def test_the_preparation_jobs_read_only_the_settings_they_use(config_name):
    """Snakemake reruns a job when its params change: an update-only setting must not rerun the
    warm-up debate or the coefficients, a sampling or coefficient setting must; and what each job
    builds from its part of the settings equals what it would read of the full settings."""
    from pathlib import Path

    from debatelab.config import load_experiment
    from debatelab.training import TrainSettings
    from debatelab.training.settings import udpo_job_settings

    exp = load_experiment(Path(__file__).resolve().parents[1] / "config" / "experiments" / f"{config_name}.yaml")
    for run in exp.runs_of("udpo"):
        full = exp.train_settings(run)
        whole = TrainSettings.from_config(full)
        warmup = TrainSettings.from_config(udpo_job_settings(full, "warmup"))
        coefficients = TrainSettings.from_config(udpo_job_settings(full, "coefficients"))
        for name in (
            "seed",
            "temperature",
            "top_p",
            "max_tokens",
            "dtype",
            "rollout_batch_size",
            "finetuning",
            "rollout_backend",
            "vllm_gpu_memory_utilization",
            "vllm_max_model_len",
            "vllm_enforce_eager",
        ):
            assert getattr(warmup, name) == getattr(whole, name), name
        assert (warmup.udpo.rounds, warmup.udpo.warmup_fraction) == (whole.udpo.rounds, whole.udpo.warmup_fraction)
        for name in ("kappa", "lambda_base", "eta_base", "intra_lambda", "sys_mode", "base_weights", "ablate"):
            assert getattr(coefficients.udpo, name) == getattr(whole.udpo, name), name

        updated = {
            **full,
            "learning_rate": 0.5,
            "micro_batch_tokens": 99,
            "steps": 1000,
            "gradient_checkpointing": True,
            "udpo": {**full.get("udpo", {}), "questions_per_step": 3, "replay": False},
        }
        for job in ("warmup", "coefficients"):
            assert udpo_job_settings(updated, job) == udpo_job_settings(full, job)
        hotter = {**full, "temperature": full.get("temperature", 1.0) / 2}
        assert udpo_job_settings(hotter, "warmup") != udpo_job_settings(full, "warmup")
        steeper = {**full, "udpo": {**full.get("udpo", {}), "kappa": 3.0}}
        assert udpo_job_settings(steeper, "coefficients") != udpo_job_settings(full, "coefficients")


def test_a_priority_weight_multiplies_the_whole_sequence_loss_by_hand():
    """Tang et al., arXiv:2602.07186 App. A.4, Algorithm 1 step 5: loss = −mean[w·(ℓ_clip − η·KL)]: w weighs the KL anchor too, not only
    the advantage; the normaliser stays the token count."""
    import torch

    from debatelab.training.core.loss import policy_loss

    logprobs = torch.full((2, 2), -1.0)  # ratio 1: ℓ_clip = A on every token
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])  # 3 completion tokens
    ref = logprobs + math.log(2)  # Δ = ln 2 on every token: k3 = 2 − ln 2 − 1
    k = 1 - math.log(2)
    common = dict(ref_logprobs=ref, kl_coef=0.5, kl_estimator="k3", clip_low=0.2, clip_high=0.2)
    weighted = policy_loss(
        logprobs, logprobs, torch.tensor([1.0, -2.0]), mask, weights=torch.tensor([2.0, 0.5]), **common
    )
    # per token: sequence 0 2·(−1 + 0.5k) on 2 tokens, sequence 1 0.5·(2 + 0.5k) on 1: (−3 + 2.25k)/3
    assert float(weighted.loss) == pytest.approx(-1 + 0.75 * k)
    # the advantage alone weighted ([2, −1]) leaves the KL unweighted: (−4 + k + 1 + 0.5k)/3
    advantage_only = policy_loss(logprobs, logprobs, torch.tensor([2.0, -1.0]), mask, **common)
    assert float(advantage_only.loss) == pytest.approx(-1 + 0.5 * k)
    assert weighted.kl == pytest.approx(k)  # the reported KL is the unweighted mean
    # sequence_mean: per-sequence means −2 + k and 1 + 0.25k over 2 sequences
    per_sequence = policy_loss(
        logprobs,
        logprobs,
        torch.tensor([1.0, -2.0]),
        mask,
        weights=torch.tensor([2.0, 0.5]),
        aggregation="sequence_mean",
        **common,
    )
    assert float(per_sequence.loss) == pytest.approx((-1 + 1.25 * k) / 2)
    # unit weights are no weights
    plain = policy_loss(logprobs, logprobs, torch.tensor([1.0, -2.0]), mask, **common)
    ones = policy_loss(logprobs, logprobs, torch.tensor([1.0, -2.0]), mask, weights=torch.ones(2), **common)
    assert float(ones.loss) == float(plain.loss) == pytest.approx(1.5 * k / 3)


QUESTIONS = toy_rows(4)


def _udpo_trainer(char_model_dir, questions_per_step: int, steps: int):
    """A UDPO trainer of two agents (LoRA adapters on the tiny character model) on 4 toy questions."""
    import torch
    from conftest import toy_settings

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.udpo import UdpoTrainer

    settings = toy_settings(
        method="udpo",
        steps=steps,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=6,
        overlong_buffer=0,
        learning_rate=1e-2,
        warmup_steps=0,
        show_progress=False,
    )
    torch.manual_seed(0)
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    coefficients = {
        "alice": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01),
        "bob": AgentCoefficients(0.5, 0.2, 0.3, 0.8, 0.02),
    }
    return UdpoTrainer(
        frame_from_rows(QUESTIONS),
        policies,
        settings,
        run="udpo",
        participants=["alice", "bob"],
        rounds=1,
        coefficients=coefficients,
        base_weights={"alpha": 0.5, "beta": 0.25, "gamma": 0.25},
        questions_per_step=questions_per_step,
        replay=True,
    )


@pytest.mark.slow
def test_every_training_question_gets_a_fresh_priority_after_each_epoch(char_model_dir):
    """Tang et al., arXiv:2602.07186 App. A.3: U is recomputed for every training question after each epoch (4 questions, M = 2:
    an epoch is 2 steps), from a fresh debate of the current agents; before that the draws are uniform."""
    from debatelab.training.core.debate_rollouts import answers_by_round, rollout_debates

    trainer = _udpo_trainer(char_model_dir, questions_per_step=2, steps=2)
    assert trainer.steps_per_epoch == 2
    trainer.train_step(0)
    assert trainer.priority.tolist() == [1.0] * 4  # mid-epoch: the debated questions do not move
    trainer.train_step(1)
    priority = trainer.priority

    # the same debates again under the agents as they are now, with the refresh's seeds
    trainer.policy.train(False)
    states = rollout_debates(
        trainer.policy, QUESTIONS, ["alice", "bob"], trainer.settings, step=trainer.refresh_step(1), rounds=1
    )
    fresh = [
        replay_priority(trajectory_rewards(answers_by_round(st), "7", "math"), trainer.base_weights) for st in states
    ]
    assert priority == pytest.approx(fresh, rel=1e-12)
    assert (priority != 1.0).all() and len(set(fresh)) > 1
    assert trainer.refresh_step(1) not in range(trainer.settings.steps)  # seeds of no training step


@pytest.mark.slow
def test_priority_draws_weight_the_loss_and_leave_the_advantage_alone(char_model_dir, monkeypatch):
    """The replay importance weight w goes to each turn's loss weight (`Rollout.weight`, passed to the
    loss with the clip and KL terms), and the advantage is the plain batch-mean one."""
    import debatelab.training.core.loss as loss_module  # the update imports policy_loss from it when it runs

    trainer = _udpo_trainer(char_model_dir, questions_per_step=4, steps=1)
    trainer.state.extra["priority"] = [0.1, 0.2, 0.4, 0.8]
    _, weights = trainer._draw_step(0)
    assert (weights != 1).any()  # this seed draws two questions of different priority
    seen, passed = [], []
    update, loss = trainer.update_policy, loss_module.policy_loss

    def recording_update(sequences, *args, **kwargs):
        seen.extend(sequences)
        return update(sequences, *args, **kwargs)

    def recording_loss(logprobs, *args, weights=None, **kwargs):
        passed.append(float(weights.sum()) if weights is not None else float(logprobs.shape[0]))
        return loss(logprobs, *args, weights=weights, **kwargs)

    monkeypatch.setattr(trainer, "update_policy", recording_update)
    monkeypatch.setattr(loss_module, "policy_loss", recording_loss)
    trainer.train_step(0)
    rewards: dict[tuple[int, int], float] = {}
    for r in seen:
        m = int(r.group.split("#")[1])
        assert r.weight == pytest.approx(weights[m])
        rewards[m, r.sample] = r.reward
    for r in seen:  # Â = r − the batch mean of the seat's rewards, not times w
        m = int(r.group.split("#")[1])
        assert r.advantage == pytest.approx(r.reward - np.mean([rewards[j, r.sample] for j in range(4)]))
    assert sum(passed) == pytest.approx(sum(r.weight for r in seen))  # every sequence's w reached the loss
