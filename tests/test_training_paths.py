"""The training paths the papers' numbers depend on (issue: paper configs are the papers):
a multi-agent run debates on the protocol its agents are evaluated on; log-probabilities are those
of the sampling policy (temperature); UMAD recomputes π_old for each turn after the previous turn's
update; UMAD's mini-batches are in verl's units. Values are worked by hand in the comments."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import toy_settings
from toy_questions import alternating_gold, toy_rows

from debatelab import prompts
from debatelab.config import ConfigError, load_experiment
from debatelab.training.core.loss import token_logprobs

ROOT = Path(__file__).resolve().parents[1]


# -- 2. the sampling temperature -------------------------------------------------------------
class _FixedLogits(torch.nn.Module):
    """Every position predicts logits [2, 1, 0] over a 3-token vocabulary."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, logits_to_keep=0):
        logits = torch.tensor([2.0, 1.0, 0.0]).expand(input_ids.shape[0], input_ids.shape[1], 3)
        return SimpleNamespace(logits=logits)


def test_token_logprobs_divide_the_logits_by_the_sampling_temperature():
    # T = 1:   NLL(token 0) = log(e² + e¹ + e⁰) − 2 = log(11.107) − 2 = 0.4076
    # T = 0.8: logits [2.5, 1.25, 0]: log(e^2.5 + e^1.25 + 1) − 2.5 = log(16.672) − 2.5 = 0.3137
    ids = torch.tensor([[1, 0]])  # one prompt token, the sampled completion token 0
    attention = torch.ones_like(ids)
    at_1, _ = token_logprobs(_FixedLogits(), ids, attention, 1)
    at_08, entropy = token_logprobs(_FixedLogits(), ids, attention, 1, temperature=0.8, with_entropy=True)
    assert -float(at_1[0, 0]) == pytest.approx(0.4076, abs=1e-4)
    assert -float(at_08[0, 0]) == pytest.approx(0.3137, abs=1e-4)
    p = np.exp([2.5, 1.25, 0.0]) / np.exp([2.5, 1.25, 0.0]).sum()  # the entropy is the T = 0.8 policy's too
    assert float(entropy[0, 0]) == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-5)


@pytest.mark.slow
def test_the_update_uses_the_runs_temperature(char_model_dir):
    """π_old of a run at T = 0.8 equals the model's log-softmax of logits / 0.8, not of the raw logits."""
    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.policy import Policy
    from debatelab.training.core.rollouts import Rollout
    from debatelab.training.core.trainer import Trainer

    settings = toy_settings(
        temperature=0.8,
        dtype="float32",
        lora={"r": 4, "alpha": 8},
        max_tokens=4,
        overlong_buffer=0,
        show_progress=False,
        prompts_per_step=1,
        mini_batch_size=1,
    )
    policy = Policy(str(char_model_dir), settings, device="cpu")
    rows = frame_from_rows(
        [
            {
                "id": "q",
                "question": "1+1?",
                "choices": None,
                "answer": "2",
                "task_type": "math",
                "meta": {"source": "toy"},
            }
        ]
    )
    trainer = Trainer(rows, policy, settings, run="t")
    rollout = Rollout(
        question_id="q",
        group="q",
        turn=1,
        sample=0,
        messages=[{"role": "user", "content": "1+1?"}],
        text="2",
        token_ids=policy.tokenizer("2", add_special_tokens=False)["input_ids"],
        finish_reason="stop",
        answer="2",
        correct=True,
        reward=1.0,
    )
    old, _, _ = trainer.logprob_pass([[rollout]])
    ids, attention, _, start, _ = trainer._tensors([rollout])
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=attention).logits[:, start - 1 : -1].float()
    expected = torch.log_softmax(logits / 0.8, -1).gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)[0]
    raw = torch.log_softmax(logits, -1).gather(-1, ids[:, start:].unsqueeze(-1)).squeeze(-1)[0]
    assert torch.allclose(old[id(rollout)], expected, atol=1e-5)
    assert not torch.allclose(old[id(rollout)], raw, atol=1e-3)


# -- 1. training debates run the evaluation protocol ------------------------------------------
def test_a_multi_agent_run_without_a_protocol_is_a_config_error(tmp_path):
    import yaml

    config = yaml.safe_load((ROOT / "config/experiments/umad_cpu.yaml").read_text())
    del config["training"]["runs"]["umad"]["protocol"]
    config["training"]["runs"]["ippo"] = {**config["training"]["runs"]["ippo"], "protocol": "umad"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"training\.runs\.umad"):
        load_experiment(path)
    config["training"]["runs"]["umad"]["protocol"] = "no_such_protocol"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"training\.runs\.umad\.protocol = 'no_such_protocol'"):
        load_experiment(path)


def test_paper_runs_train_on_the_protocol_their_agents_are_evaluated_on():
    umad = load_experiment(ROOT / "config/experiments/umad.yaml")
    options = umad.train_settings("umad")["protocol"]
    assert (
        options["template"] == "umad" and options["mask_peer_boxed"] is True
    )  # Qiao et al., arXiv:2603.01221 §2.1, App. D.3, App. F
    assert "participants" not in options and "rounds" not in options and "threads" not in options
    for run in umad.multi_agent_runs():
        assert umad.train_settings(run)["protocol"]["template"] == "umad", run
    udpo = load_experiment(ROOT / "config/experiments/udpo.yaml")
    for run in udpo.multi_agent_runs():
        assert udpo.train_settings(run)["protocol"]["template"] == "du", (
            run
        )  # Tang et al., arXiv:2602.07186 §5.4, App. C.3.1: Du et al.


@pytest.mark.slow
def test_a_training_rollout_sends_the_messages_the_evaluation_debate_sends(char_model_dir):
    """One question, seat 1, round 1 of umad_cpu's UMAD run: the training rollout's chat equals the
    one the debate stage builds (same protocol options from the config, same round-0 answers)."""
    import pandas as pd

    from debatelab.data.schema import frame_from_rows
    from debatelab.debate.protocols import make_protocol
    from debatelab.debate.stage import build_states
    from debatelab.llm.agent import AgentSpec
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.core.debate_rollouts import rollout_debates

    experiment = load_experiment(ROOT / "config/experiments/umad_cpu.yaml")
    run_settings = experiment.train_settings("umad")
    settings = toy_settings(
        method="umad",
        protocol=run_settings["protocol"],
        dtype="float32",
        max_tokens=12,
        overlong_buffer=0,
        lora={"r": 4, "alpha": 8},
        show_progress=False,
        seed=3,
    )
    participants = experiment.training_runs["umad"]["participants"]
    row = {
        "id": "q0",
        "question": "What is 6 + 1? \\boxed{}",
        "choices": None,
        "answer": "7",
        "task_type": "math",
        "meta": {"source": "toy"},
    }
    torch.manual_seed(0)
    policies = AgentPolicies({a: char_model_dir for a in participants}, settings, device="cpu")
    state = rollout_debates(
        policies,
        [row],
        participants,
        settings,
        step=0,
        rounds=1,
        system_prompts={a: experiment.agents[a]["system_prompt"] for a in participants},
    )[0]
    policies.close()
    training_round1 = {t.agent: list(t.messages) for t in state.turns if t.round == 1}

    # the evaluation: the debate stage's states from these round-0 answers, the protocol of the config
    zero_shot = {}
    for turn in state.pre:
        agent = participants[turn.agent]
        zero_shot[agent] = pd.DataFrame(
            [
                {
                    "question_id": "q0",
                    "agent": agent,
                    "sample": 0,
                    "response": turn.response,
                    "answer": turn.answer,
                    "correct": turn.correct,
                    "prompt_tokens": 1,
                    "completion_tokens": 1,
                    "finish_reason": "stop",
                    "min_logprob": None,
                    "mean_logprob": None,
                    "conf_verbal": None,
                    "conf_seqprob": None,
                }
            ]
        )
    agents = {a: AgentSpec.from_config(a, experiment.agent_settings(a)) for a in participants}
    states = build_states(frame_from_rows([row]), zero_shot, participants, agents, threads=1, seed=0)
    protocol = make_protocol("umad", experiment.protocol_options("umad"))
    protocol.prepare(states)
    asks = next(protocol.run(states[0]))
    evaluation_round1 = {ask.agent: list(ask.messages) for ask in asks if ask.round == 1}
    assert set(training_round1) == set(evaluation_round1) == {0, 1}
    for seat in (0, 1):
        assert training_round1[seat] == evaluation_round1[seat], seat
    # ... and it is the UMAD authors' prompt (tests/test_debate_protocols.py quotes their code): one user
    # turn, the same for both seats, the replies labelled and masked (every one), in agent order
    replies = {t.agent: t.response for t in state.pre}
    responses = "\n".join(prompts.umad_mask_answer(f"agent {k} response is: {replies[k]}") for k in (0, 1))
    expected = (
        f"Given the following problem: {row['question']} \n We have two answers: \n {responses} \n "
        "Please carefully review these answers and recognize which one is right. If one or all of them are right, "
        "please summarize the reasoning process of right ones and give the final answer. If both of them are wrong, "
        "please correct their mistakes and provide a novel and complete solution to the problem and give the final "
        "answer. Let's think step by step and output the final answer within \\boxed{}."
    )
    for seat in (0, 1):
        assert training_round1[seat][-1] == {"role": "user", "content": expected}, seat


# -- 3. UMAD: π_old per turn ------------------------------------------------------------------
@pytest.mark.slow
def test_umad_recomputes_pi_old_for_each_turn_after_the_previous_turns_update(char_model_dir):
    """Turn 1's π_old is the agents after turn 0's update (the paper's code, ippo_learner.py), so
    every ratio of turn 1's update starts at 1: the stored old log-probabilities equal the live
    policy's at the moment turn 1's update begins, and differ from the rollout policy's."""
    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.umad import UmadTrainer

    settings = toy_settings(
        method="umad",
        steps=1,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=10,
        overlong_buffer=0,
        learning_rate=5e-2,
        warmup_steps=0,
        mini_batch_size=64,
        micro_batch_size=16,
        show_progress=False,
        temperature=0.8,
        umad={"threads": 3, "turns": 2, "questions_per_step": 2},
    )
    torch.manual_seed(0)
    policies = AgentPolicies({"solver": char_model_dir, "critic": char_model_dir}, settings, device="cpu")
    rows = toy_rows(4, alternating_gold)
    trainer = UmadTrainer(frame_from_rows(rows), policies, settings, run="umad", participants=["solver", "critic"])
    seen = []
    original = trainer.update_policy

    def spy(
        rollouts, step, policy=None, kl_coef=None, precomputed=None, first_pass=None, reference=None, first_plan=None
    ):
        turn = rollouts[0].turn
        old = dict(precomputed[0])  # the later mini-batches' π_old; the first's comes from its own forward
        live, _, _ = trainer.logprob_pass(trainer.micro_batches(rollouts, policy), policy)

        def first(micro, old_logps, ref_logps):
            old.update({id(r): old_logps[k, : r.length] for k, r in enumerate(micro)})
            return first_pass(micro, old_logps, ref_logps)

        out = original(
            rollouts,
            step,
            policy=policy,
            kl_coef=kl_coef,
            precomputed=precomputed,
            first_pass=first if first_pass else None,
            reference=reference,
            first_plan=first_plan,
        )
        seen.append((turn, max(float((old[id(r)] - live[id(r)]).abs().max()) for r in rollouts if r.length)))
        return out

    trainer.update_policy = spy
    trainer.train_step(0)
    assert [t for t, _ in seen] == [0, 0, 1, 1]  # each turn, each agent
    assert all(gap < 1e-5 for _, gap in seen), seen  # π_old is the live policy at each turn's start
    policies.close()


# -- 4. UMAD mini-batches in verl's units -----------------------------------------------------
def test_umad_paper_runs_take_the_papers_optimizer_steps_per_training_step():
    """verl counts ppo_mini_batch_size in prompts: 16 prompts × n responses. UMAD (Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2):
    256 questions × G = 5 threads per (agent, turn), mini-batch 16 questions -> 16 optimizer steps;
    the Single-GRPO pair (Qiao et al., arXiv:2603.01221 §3.2, §4.2): 1,024 prompts × 5, mini-batch 256 prompts -> 4 steps."""
    umad = load_experiment(ROOT / "config/experiments/umad.yaml")
    for run in ("umad", "ippo", "intrinsic_only", "nll_only", "umad_homo", "ippo_homo"):
        s = umad.train_settings(run)
        responses = s["umad"]["questions_per_step"] * s["umad"]["threads"]  # one agent's one turn
        assert responses / s["mini_batch_size"] == 256 / 16, run
    for run in ("grpo_a0", "grpo_a1"):
        s = umad.train_settings(run)
        assert s["dapo"]["prompts_per_step"] * s["dapo"]["rollouts_per_prompt"] / s["mini_batch_size"] == 1024 / 256, (
            run
        )
    for name in ("aime24", "aime25"):  # App. D.2: AIME replies 4,096 tokens, prompts 9,216
        settings = umad.agent_settings("qwen25_3b", name)
        assert settings["max_tokens"] == 4096 and settings["backend_options"]["max_model_len"] >= 9216 + 4096
    assert umad.agent_settings("qwen25_3b", "math500")["max_tokens"] == 2048
