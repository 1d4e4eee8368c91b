"""The training core: the loss on hand-worked cases, rewards, dynamic sampling, SDRL's pairs and debate
groups, a learning test on the tiny model, resume after SIGKILL, and two processes = one."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import at_ratio_level, folder_weights, toy_settings
from distributed_helpers import tests_path
from toy_questions import toy_rows

from debatelab.data.schema import frame_from_rows
from debatelab.io import write_parquet_atomic
from debatelab.llm.agent import AgentSpec
from debatelab.llm.base import Backend, Generation
from debatelab.training.core.loss import policy_loss
from debatelab.training.core.rewards import all_equal, group_advantages, overlong_penalty
from debatelab.training.core.rollouts import Rollout
from debatelab.training.core.trainer import Trainer
from debatelab.training.methods.dapo import DapoTrainer, mixed
from debatelab.training.methods.sdrl import SdrlTrainer, choose_pair

REPO_ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- the loss


@pytest.mark.parametrize(
    "ratio, advantage, expected, has_gradient",
    [
        (1.5, +1.0, -1.28, False),  # clipped above at 1 + ε_high
        (1.5, -1.0, 1.5, True),
        (0.5, +1.0, -0.5, True),
        (0.5, -1.0, 0.8, False),  # clipped below at 1 − ε_low
    ],
)
def test_clipped_loss_matches_the_hand_worked_cells(ratio, advantage, expected, has_gradient):
    logp = torch.tensor([[np.log(ratio)]], requires_grad=True)
    parts = policy_loss(
        logp, torch.zeros(1, 1), torch.tensor([advantage]), torch.ones(1, 1), clip_low=0.2, clip_high=0.28
    )
    assert parts.loss.item() == pytest.approx(expected)
    parts.loss.backward()
    assert (float(logp.grad) != 0.0) == has_gradient
    assert parts.clip_fraction == (0.0 if has_gradient else 1.0)


def test_two_sequence_batch_token_and_sequence_means_by_hand():
    # sequence 1: 3 tokens, A = +1, ratios 1, 1.5, 0.5; sequence 2: 1 token (+1 padded), A = −1, ratio 1
    logp = torch.log(torch.tensor([[1.0, 1.5, 0.5], [1.0, 7.0, 7.0]]))
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    adv = torch.tensor([1.0, -1.0])
    per_token_1 = [-1.0, -1.28, -0.5]  # −min(r·A, clip(r)·A)
    per_token_2 = [1.0]
    token_mean = policy_loss(logp, torch.zeros(2, 3), adv, mask)
    assert token_mean.loss.item() == pytest.approx((sum(per_token_1) + sum(per_token_2)) / 4)
    sequence_mean = policy_loss(logp, torch.zeros(2, 3), adv, mask, aggregation="sequence_mean")
    assert sequence_mean.loss.item() == pytest.approx((np.mean(per_token_1) + np.mean(per_token_2)) / 2)
    # a micro-batch of a larger mini-batch divides by the mini-batch's token count instead
    part = policy_loss(logp, torch.zeros(2, 3), adv, mask, normaliser=10.0)
    assert part.loss.item() == pytest.approx((sum(per_token_1) + sum(per_token_2)) / 10)
    assert token_mean.clip_fraction == pytest.approx(1 / 4)


def test_at_the_first_inner_step_ratio_is_one_and_clipping_is_idle():
    logp = torch.randn(3, 5, requires_grad=True)
    adv = torch.tensor([0.7, -1.2, 0.3])
    mask = torch.ones(3, 5)
    parts = policy_loss(logp, logp.detach(), adv, mask)
    unclipped = -(adv.unsqueeze(1) * torch.ones(3, 5)).mean()
    assert parts.ratio_mean == pytest.approx(1.0) and parts.clip_fraction == 0.0
    assert parts.loss.item() == pytest.approx(float(unclipped))
    parts.loss.backward()
    # d loss / d logp_t = −A / #tokens: the plain policy gradient
    assert torch.allclose(logp.grad, -adv.unsqueeze(1).expand(3, 5) / 15)


def test_masked_tokens_get_no_gradient():
    logp = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    policy_loss(logp, logp.detach() + 0.1, torch.tensor([1.0, -2.0]), mask).loss.backward()
    assert torch.all(logp.grad[mask == 0] == 0) and torch.all(logp.grad[mask == 1] != 0)


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    delta = ref - logp  # [−0.5, 1.0]
    k3 = policy_loss(logp, logp, torch.tensor([0.0]), torch.ones(1, 2), ref_logprobs=ref, kl_coef=0.1)
    assert k3.kl == pytest.approx(float((torch.exp(delta) - delta - 1).mean()))
    assert k3.loss.item() == pytest.approx(0.1 * k3.kl)
    k1 = policy_loss(
        logp, logp, torch.tensor([0.0]), torch.ones(1, 2), ref_logprobs=ref, kl_coef=0.1, kl_estimator="k1"
    )
    assert k1.kl == pytest.approx(float((-delta).mean()))


def test_a_positive_advantage_raises_the_log_probability_of_its_tokens():
    from transformers import LlamaConfig, LlamaForCausalLM

    from debatelab.training.core.loss import token_logprobs

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
        )
    )
    ids = torch.tensor([[5, 9, 17, 23, 42], [5, 9, 3, 4, 8]])
    attention = torch.ones_like(ids)
    mask = torch.ones(2, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    before, _ = token_logprobs(model, ids, attention, 2)
    parts = policy_loss(before, before.detach(), torch.tensor([1.0, -1.0]), mask)
    parts.loss.backward()
    optimizer.step()
    with torch.no_grad():
        after, _ = token_logprobs(model, ids, attention, 2)
    assert after[0].sum() > before[0].sum()  # A > 0: more likely
    assert after[1].sum() < before[1].sum()  # A < 0: less likely


def test_logprobs_skip_the_prompt_logits_and_checkpointing_keeps_the_gradient(char_model_dir):
    """`token_logprobs` asks the model for the completion's logits only; gradient checkpointing
    (recomputing activations) changes neither the log-probabilities nor the LoRA gradient."""
    from debatelab.training.core.loss import token_logprobs
    from debatelab.training.core.policy import Policy

    ids = torch.tensor([[3, 5, 9, 17, 23, 42, 7], [0, 0, 5, 9, 3, 4, 8]])
    attention = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]])
    grads, logps = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        policy = Policy(
            char_model_dir,
            toy_settings(gradient_checkpointing=checkpointing, show_progress=False, lora={"r": 4, "alpha": 8}),
            device="cpu",
        )
        assert policy.model.is_gradient_checkpointing == checkpointing
        with torch.no_grad():  # a nonzero adapter, so its gradient depends on the activations it recomputes
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.01)
        policy.model.train()
        out, _ = token_logprobs(policy.model, ids, attention, 4)
        full = torch.log_softmax(
            policy.model(input_ids=ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0))
            .logits[:, 3:-1]
            .float(),
            -1,
        )
        torch.testing.assert_close(out, full.gather(-1, ids[:, 4:, None]).squeeze(-1))
        out.sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy.model.parameters() if p.requires_grad]))
        logps.append(out.detach())
    torch.testing.assert_close(logps[0], logps[1])
    torch.testing.assert_close(grads[0], grads[1])
    assert grads[0].abs().sum() > 0


# --------------------------------------------------------------------------- rewards and groups


def test_overlong_penalty_matches_spec_003():
    for length, expected in ((0, 0.0), (6144, 0.0), (7168, -0.5), (8192, -1.0)):
        assert overlong_penalty(length, 8192, 2048, 1.0) == pytest.approx(expected)


def test_learning_rate_schedules_by_hand(char_model_dir):
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.core.weights import learning_rate_factor

    constant = learning_rate_factor(toy_settings(warmup_steps=2, steps=6))
    assert [constant(k) for k in range(6)] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    # cosine: warm-up over steps 0-1, then 0.5 (1 + cos(pi (k - 2) / 4)) for k = 2..5
    cosine = learning_rate_factor(toy_settings(warmup_steps=2, steps=6, lr_schedule="cosine"))
    expected = [0.5, 1.0, 1.0, (1 + 2**-0.5) / 2, 0.5, (1 - 2**-0.5) / 2]
    assert [cosine(k) for k in range(6)] == pytest.approx(expected)
    assert learning_rate_factor(toy_settings(warmup_steps=0, steps=2, lr_schedule="cosine"))(0) == 1.0
    with pytest.raises(ValueError, match="lr_schedule"):
        toy_settings(lr_schedule="linear")
    # both the single policy and every agent of a multi-agent run step along it
    settings = toy_settings(
        warmup_steps=2,
        steps=6,
        lr_schedule="cosine",
        learning_rate=1e-3,
        show_progress=False,
        lora={"r": 2, "alpha": 4},
    )
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    from debatelab.training.core.policy import Policy

    policy = Policy(char_model_dir, settings, device="cpu")
    for scheduler in (policy.scheduler, *policies.schedulers.values()):
        seen = []
        for _ in range(6):
            seen.append(scheduler.get_last_lr()[0])
            scheduler.optimizer.step()
            scheduler.step()
        assert seen == pytest.approx([1e-3 * f for f in expected])


def test_group_advantages_are_zero_mean_with_unbiased_std():
    rewards = [1.0, -1.0, -1.0, 1.0, 1.0]
    adv = group_advantages(rewards)
    assert adv.mean() == pytest.approx(0.0, abs=1e-12)
    assert adv[0] == pytest.approx((1 - 0.2) / (np.std(rewards, ddof=1) + 1e-6))
    assert np.all(group_advantages([1.0, 1.0, 1.0]) == 0)


def test_dynamic_sampling_and_debate_group_tests():
    assert mixed([True, False, False]) and not mixed([True, True]) and not mixed([False, False])
    assert all_equal([-1.0, -1.0]) and not all_equal([1.0, -1.0])


def _rollout(answer, k):
    return Rollout(
        question_id="q",
        group="q",
        turn=1,
        sample=k,
        messages=(),
        text=f"answer {answer}",
        token_ids=[1],
        finish_reason="stop",
        answer=answer,
        correct=False,
        reward=-1.0,
    )


def test_freq_pairs_the_two_most_frequent_answers_in_random_order():
    group = [_rollout(a, k) for k, a in enumerate(["4", "5", "4", "7", "5", "4", None, None, None, None])]
    firsts = []
    for seed in range(400):
        a, b = choose_pair(group, "freq", np.random.default_rng(seed), "math")
        assert {a.answer, b.answer} == {"4", "5"}  # unparsable rollouts never beat two valid classes
        firsts.append(a.answer)
    assert 0.4 < firsts.count("4") / len(firsts) < 0.6  # position randomised about 50/50
    rand = {
        tuple(sorted((a.sample, b.sample)))
        for a, b in (choose_pair(group, "rand", np.random.default_rng(s), "math") for s in range(200))
    }
    assert all(i != j for i, j in rand) and len(rand) > 20


# --------------------------------------------------------------------------- the loop on a scripted backend


class ScriptedRollouts(Backend):
    """Answers "\\boxed{k}": the k-th sample of a question's first turn is right when k < right[question];
    debate replies (a prompt that shows two solutions) are all right or all wrong by question."""

    model_id = "scripted"

    def __init__(self, right: dict[str, int], debate_right: dict[str, bool]):
        self.right, self.debate_right, self.calls = right, debate_right, []

    def generate(self, requests, progress=None):
        self.calls.append(len(requests))
        out, seen = [], {}
        for r in requests:
            question = r.messages[-1]["content"]
            qid = next(q for q in self.right if f"item {q}?" in question)
            k = seen[(qid, len(r.messages))] = seen.get((qid, len(r.messages)), -1) + 1
            debate = "another agent" in question or "two solutions" in question
            ok = self.debate_right[qid] if debate else k < self.right[qid]
            text = f"\\boxed{{{1 if ok else 2}}}"
            out.append([Generation(text=text, completion_tokens=3, prompt_tokens=10, token_ids=[7, 8, 9])])
        return out

    def score(self, prompts, replies):
        raise NotImplementedError


class NoPolicy:
    """The scheduling tests' policy: never updated, so nothing to distribute."""

    model = None

    def distribute(self, world: int) -> None:
        pass


def _questions(n):
    rows = toy_rows(n, "1", wording="What is item {id}?")
    return frame_from_rows(rows)


def test_dynamic_sampling_keeps_exactly_the_mixed_groups_and_tops_up():
    right = {"q0": 0, "q1": 2, "q2": 4, "q3": 1, "q4": 3, "q5": 0}  # of 4 samples: q1, q3, q4 are mixed
    settings = toy_settings(
        prompts_per_step=2, rollouts_per_prompt=4, sampling_batch=3, max_sampling_rounds=3, show_progress=False
    )
    trainer = DapoTrainer(_questions(6), NoPolicy(), settings, run="t")
    order = [trainer.rows[i]["id"] for i in trainer._order(0)]
    backend = ScriptedRollouts(right, dict.fromkeys(right, True))
    _, kept, sampled = trainer.first_turn(backend, step=0)
    mixed_in_order = [q for q in order if 0 < right[q] < 4]
    assert [row["id"] for row, _ in kept] == mixed_in_order[:2]
    assert sampled in (3, 6) and len(backend.calls) == sampled // 3  # one backend batch per round
    for _, group in kept:
        assert np.mean([r.advantage for r in group]) == pytest.approx(0.0, abs=1e-9)


def test_sdrl_drops_debate_groups_whose_rewards_are_all_equal():
    right = {"q0": 2, "q1": 2, "q2": 2, "q3": 2}
    settings = toy_settings(
        method="sdrl",
        prompts_per_step=4,
        rollouts_per_prompt=4,
        debate_prompts_per_step=4,
        debate_rollouts=3,
        show_progress=False,
    )
    trainer = SdrlTrainer(_questions(4), NoPolicy(), settings, run="t")
    backend = ScriptedRollouts(right, {"q0": True, "q1": False, "q2": True, "q3": False})
    _, kept, _ = trainer.first_turn(backend, step=0)
    debate_prompts, debate_kept, debate_all, counts = trainer.debate_turn(backend, 0, kept)
    assert debate_prompts == 4 and len(debate_all) == 12
    assert debate_kept == []  # every debate group is all right or all wrong: no gradient, dropped
    # claim sdrl-4 needs why: q0 and q2's debates are all right, q1 and q3's all wrong
    assert (counts["debate_groups_all_correct"], counts["debate_groups_all_wrong"]) == (2, 2)


def test_sdrl_logs_the_accuracy_of_the_pairs_it_shows():
    # without dynamic sampling every group is kept: q0's 4 first answers are all right, q1's all wrong,
    # so q0's pair is 2 of 2 right and q1's 0 of 2: the pairs' accuracy is 2 / 4
    settings = toy_settings(
        method="sdrl",
        prompts_per_step=2,
        rollouts_per_prompt=4,
        debate_prompts_per_step=2,
        debate_rollouts=2,
        dynamic_sampling=False,
        show_progress=False,
    )
    trainer = SdrlTrainer(_questions(2), NoPolicy(), settings, run="t")
    backend = ScriptedRollouts({"q0": 4, "q1": 0}, {"q0": True, "q1": True})
    _, kept, _ = trainer.first_turn(backend, step=0)
    _, _, _, counts = trainer.debate_turn(backend, 0, kept)
    assert counts["debate_pair_accuracy"] == pytest.approx(0.5)
    assert (counts["debate_groups_all_correct"], counts["debate_groups_all_wrong"]) == (2, 0)


class LongDebateReplies(ScriptedRollouts):
    """ScriptedRollouts whose debate replies have `debate_lengths[k]` tokens (the k-th reply of a debate prompt)."""

    def __init__(self, right, debate_right, debate_lengths):
        super().__init__(right, debate_right)
        self.debate_lengths = debate_lengths

    def generate(self, requests, progress=None):
        out, debate_seen = super().generate(requests, progress), {}
        for r, gens in zip(requests, out):
            if "another agent" in r.messages[-1]["content"]:  # the two-turn debate prompt
                k = debate_seen[r.messages[-1]["content"]] = debate_seen.get(r.messages[-1]["content"], -1) + 1
                gens[0] = Generation(
                    text=gens[0].text,
                    completion_tokens=self.debate_lengths[k],
                    prompt_tokens=10,
                    token_ids=[7] * self.debate_lengths[k],
                )
        return out


def test_sdrl_drops_an_all_correct_debate_group_even_when_one_reply_is_overlong():
    # max_tokens 8, buffer 4: the overlong penalty is 0 up to 4 tokens and −(8 − 4)/4 = −1 at 8 tokens.
    # q0's debate replies are all right, of 3, 3 and 8 tokens: rewards 1, 1, 1 − 1 = 0. Not all equal,
    # but all correct: the paper drops the group (Liu et al., arXiv:2601.22297 §5). q1's are all wrong: −1, −1, −2, dropped.
    right = {"q0": 2, "q1": 2}
    settings = toy_settings(
        method="sdrl",
        prompts_per_step=2,
        rollouts_per_prompt=4,
        debate_prompts_per_step=2,
        debate_rollouts=3,
        max_tokens=8,
        overlong_buffer=4,
        show_progress=False,
    )
    trainer = SdrlTrainer(_questions(2), NoPolicy(), settings, run="t")
    backend = LongDebateReplies(right, {"q0": True, "q1": False}, debate_lengths=[3, 3, 8])
    _, kept, _ = trainer.first_turn(backend, step=0)
    debate_prompts, debate_kept, debate_all, counts = trainer.debate_turn(backend, 0, kept)
    assert debate_prompts == 2 and len(debate_all) == 6
    assert (counts["debate_groups_all_correct"], counts["debate_groups_all_wrong"]) == (1, 1)
    by_question = {
        r.question_id: sorted(x.reward for x in debate_all if x.question_id == r.question_id) for r in debate_all
    }
    assert by_question == {"q0": [0.0, 1.0, 1.0], "q1": [-2.0, -1.0, -1.0]}
    assert debate_kept == []


def test_sdrl_keeps_a_debate_group_with_right_and_wrong_replies():
    class HalfRight(ScriptedRollouts):
        def generate(self, requests, progress=None):
            out = super().generate(requests, progress)
            for k, (r, gens) in enumerate(zip(requests, out)):
                if "another agent" in r.messages[-1]["content"] and k % 2:  # every other debate reply is wrong
                    gens[0] = Generation(text="\\boxed{2}", completion_tokens=3, prompt_tokens=10, token_ids=[7, 8, 9])
            return out

    settings = toy_settings(
        method="sdrl",
        prompts_per_step=1,
        rollouts_per_prompt=4,
        debate_prompts_per_step=1,
        debate_rollouts=4,
        show_progress=False,
    )
    trainer = SdrlTrainer(_questions(1), NoPolicy(), settings, run="t")
    backend = HalfRight({"q0": 2}, {"q0": True})
    _, kept, _ = trainer.first_turn(backend, step=0)
    _, debate_kept, _, counts = trainer.debate_turn(backend, 0, kept)
    assert counts["debate_groups_all_correct"] == counts["debate_groups_all_wrong"] == 0
    assert len(debate_kept) == 1 and sorted(r.correct for r in debate_kept[0]) == [False, False, True, True]
    assert sum(r.advantage for r in debate_kept[0]) == pytest.approx(0.0, abs=1e-9)


# --------------------------------------------------------------------------- DAPO-Math's prompt and verifier


@pytest.mark.parametrize(
    "reply, gold, answer, correct",
    [
        ("So the sum is 34.\nAnswer: 34", "34", "34", True),
        ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}", "\\frac{1}{2}", True),
        ("Answer: 1,000 dollars", "1000", "1000", True),  # unit word dropped, comma out of the integer
        ("Answer: x = 5", "5", "5", True),  # the text after the last "="
        ("Answer: 3\nAnswer: \\frac12", "\\frac{1}{2}", "\\frac{1}{2}", True),  # the last line; \\frac12 expanded
        ("Answer: 0.5", "\\frac{1}{2}", "0.5", False),  # exact match only: no numeric equivalence
        ("The answer is \\boxed{34}.", "34", "[INVALID]", False),  # no "Answer:" line, no \\boxed{} fallback
        ("Answer: 34\n" + "x" * 300, "34", "[INVALID]", False),  # only the last 300 characters are read
    ],
)
def test_dapo_math_verifier_by_hand(reply, gold, answer, correct):
    from debatelab.training.core.rewards import dapo_math_verify

    assert dapo_math_verify(reply, gold) == (answer, correct)


def test_reward_dapo_math_grades_rollouts_with_dapos_verifier():
    from debatelab.training.core.rollouts import load_reward, sample_rollouts

    class AnswerLines(Backend):
        model_id = "answer-lines"

        def generate(self, requests, progress=None):
            texts = ["Answer: 1", "\\boxed{1}", "Answer: 1.0", "Answer: 2"]
            return [
                [Generation(text=texts[k % 4], completion_tokens=3, prompt_tokens=5, token_ids=[1, 2, 3])]
                for k, _ in enumerate(requests)
            ]

        def score(self, prompts, replies):
            raise NotImplementedError

    row = {"id": "q0", "question": "What is 1?", "choices": None, "answer": "1", "task_type": "math", "meta": {}}
    prompt = [(row, "q0", [{"role": "user", "content": "What is 1?"}])]
    graded = {}
    for reward in ("verifiable", "dapo_math"):
        settings = toy_settings(reward=reward, max_tokens=8, overlong_buffer=0)
        group = sample_rollouts(
            AnswerLines(), prompt, n=4, turn=1, step=0, settings=settings, reward=load_reward(settings)
        )[0]
        graded[reward] = [(r.answer, r.correct, r.reward) for r in group]
    # the workflow's grader reads \\boxed{} and compares numbers; DAPO's wants an "Answer:" line, exact
    assert [c for _, c, _ in graded["verifiable"]] == [True, True, True, False]
    assert graded["dapo_math"] == [("1", True, 1.0), (None, False, -1.0), ("1.0", False, -1.0), ("2", False, -1.0)]


# --------------------------------------------------------------------------- the real tiny model


def _toy_dataset(path: Path, n: int = 24) -> Path:
    """A toy verifiable task: every question asks for the number 7 (graded by `grading.is_correct`)."""
    rows = toy_rows(n, wording="question {i}: answer with the number {gold}.")
    write_parquet_atomic(frame_from_rows(rows), path)
    return path


def starts_with_a_vowel(row, text, answer, correct, length):
    """A custom reward (settings.reward = "test_training:starts_with_a_vowel")."""
    return 1.0 if text[:1].lower() in "aeiou" else -1.0


TOY = dict(
    prompts_per_step=4,
    rollouts_per_prompt=6,
    sampling_batch=8,
    max_sampling_rounds=3,
    max_tokens=8,
    overlong_buffer=0,
    learning_rate=3e-3,
    warmup_steps=0,
    mini_batch_size=24,
    micro_batch_size=24,
    finetuning="full",
    show_progress=False,
)


def _job(tmp_path, model_dir, dataset, settings, name="run"):
    out = tmp_path / name
    return dict(
        dataset_path=str(dataset),
        bases={"toy": str(model_dir)},
        agents={"toy": AgentSpec(name="toy", model="tiny")},
        out_dirs={"toy": str(out / "model")},
        metrics_path=str(out / "metrics.parquet"),
        curves_path=str(out / "curves.png"),
        settings_path=str(out / "settings.json"),
        checkpoint_dir=str(out / "checkpoint"),
        run=name,
        settings=settings,
    )


@pytest.mark.slow
def test_the_tiny_model_learns_a_toy_verifiable_task(tmp_path, char_model_dir):
    """DAPO (dynamic sampling, verifiable ±1 reward) on "answer with the number 7": the random
    character-level model is right about 3% of the time at first and learns to answer 7."""
    from debatelab.training.stage import train_job

    metrics = train_job(
        **_job(tmp_path, char_model_dir, _toy_dataset(tmp_path / "toy.parquet"), toy_settings(steps=20, **TOY))
    )
    early, late = metrics["accuracy"].head(5).mean(), metrics["accuracy"].tail(5).mean()
    assert late > early + 0.1, metrics[["step", "accuracy", "groups_kept"]].to_string()
    assert metrics["reward_mean"].tail(5).mean() > metrics["reward_mean"].head(5).mean()
    assert (metrics["groups_kept"] <= 4).all() and (metrics["prompts_sampled"] >= 8).all()
    assert (tmp_path / "run/model/config.json").exists() and (tmp_path / "run/curves.png").stat().st_size > 1000
    assert json.loads((tmp_path / "run/settings.json").read_text())["settings"]["steps"] == 20


@pytest.mark.slow
def test_a_killed_training_job_resumes_to_the_same_weights(tmp_path, char_model_dir):
    """SIGKILL the job after its second checkpoint, rerun it: it continues from step 2 and ends with
    exactly the weights of an uninterrupted run (CPU)."""
    from debatelab.training.core.launch import write_job_spec

    dataset = _toy_dataset(tmp_path / "toy.parquet")
    settings = toy_settings(
        method="sdrl",
        steps=5,
        debate_prompts_per_step=2,
        debate_rollouts=3,
        lora={"r": 4, "alpha": 8},
        reward="test_training:starts_with_a_vowel",
        **{
            **TOY,
            "finetuning": "lora",
            "dynamic_sampling": False,
            "prompts_per_step": 2,
            "rollouts_per_prompt": 3,
            "mini_batch_size": 6,
            "micro_batch_size": 3,
        },
    )
    env = {**os.environ, "PYTHONPATH": tests_path()}  # the reward is this module's
    # both runs in fresh processes: an earlier test may have set this process's torch threads, and
    # another thread count sums floats in another order
    whole = tmp_path / "uninterrupted.json"
    write_job_spec(whole, **_job(tmp_path, char_model_dir, dataset, settings, "uninterrupted"))
    done = subprocess.run(
        [sys.executable, "-m", "debatelab.training.core.launch", str(whole)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    job = _job(tmp_path, char_model_dir, dataset, settings, "killed")
    spec = tmp_path / "job.json"
    write_job_spec(spec, **job)
    cmd = [sys.executable, "-m", "debatelab.training.core.launch", str(spec)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    latest = tmp_path / "killed/checkpoint/latest"
    deadline = time.monotonic() + 300
    while not (latest.exists() and latest.read_text() == "step-00002"):
        assert proc.poll() is None and time.monotonic() < deadline, "the job ended before its second checkpoint"
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed/model").exists()
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resuming from" in rerun.stderr and "(step 2)" in rerun.stderr
    first, second = folder_weights(tmp_path / "uninterrupted/model"), folder_weights(tmp_path / "killed/model")
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.fixture(scope="module")
def distributed_updates(tmp_path_factory, char_model_dir) -> dict[str, Path]:
    """`ddp_update`'s two steps in one process, two DDP processes (torchrun, Gloo), and two processes
    under DeepSpeed ZeRO-1, ZeRO-2, ZeRO-3 and FSDP2 (`accelerate launch` with
    config/accelerate/zero1_8gpu.yaml, zero2_8gpu.yaml, zero3_8gpu.yaml, fsdp2_8gpu.yaml, as the train
    rule starts them), which checkpoint after step 1; then each but ZeRO-1 again, resuming from it."""
    from debatelab.training.core.launch import is_sharding_config

    zero_config = REPO_ROOT / "config/accelerate/zero2_8gpu.yaml"
    zero1_config = REPO_ROOT / "config/accelerate/zero1_8gpu.yaml"
    zero3_config = REPO_ROOT / "config/accelerate/zero3_8gpu.yaml"
    fsdp_config = REPO_ROOT / "config/accelerate/fsdp2_8gpu.yaml"
    assert is_sharding_config(zero_config) and is_sharding_config(fsdp_config)
    assert not is_sharding_config(REPO_ROOT / "config/accelerate/ddp_8gpu.yaml")
    folder = tmp_path_factory.mktemp("distributed")
    env = {**os.environ, "PYTHONPATH": tests_path(), "OMP_NUM_THREADS": "1"}
    torchrun = [sys.executable, "-m", "torch.distributed.run"]

    def accelerate_with(config: Path) -> list[str]:
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config), "--num_machines", "1"]

    accelerate, accelerate1 = accelerate_with(zero_config), accelerate_with(zero1_config)
    accelerate3, accelerate_fsdp = accelerate_with(zero3_config), accelerate_with(fsdp_config)
    runs = {
        "one": torchrun + ["--nproc_per_node", "1", "--master_port", "29501"],
        "ddp": torchrun + ["--nproc_per_node", "2", "--master_port", "29502"],
        "zero": accelerate + ["--num_processes", "2", "--main_process_port", "29503"],
        "zero_resumed": accelerate + ["--num_processes", "2", "--main_process_port", "29504"],
        "zero1": accelerate1 + ["--num_processes", "2", "--main_process_port", "29509"],
        "zero3": accelerate3 + ["--num_processes", "2", "--main_process_port", "29505"],
        "zero3_resumed": accelerate3 + ["--num_processes", "2", "--main_process_port", "29506"],
        "fsdp": accelerate_fsdp + ["--num_processes", "2", "--main_process_port", "29507"],
        "fsdp_resumed": accelerate_fsdp + ["--num_processes", "2", "--main_process_port", "29508"],
    }
    outs = {}
    for name, launcher in runs.items():
        outs[name] = folder / f"{name}.safetensors"
        sharded = name.startswith(("zero", "fsdp"))
        checkpoint = [str(folder / f"{name.removesuffix('_resumed')}-checkpoint")] if sharded else []
        proc = subprocess.run(
            launcher + ["-m", "ddp_update", str(char_model_dir), str(outs[name]), *checkpoint],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"{name}: {proc.stderr[-3000:]}"
    outs["checkpoint"] = folder / "zero-checkpoint"
    outs["checkpoint3"] = folder / "zero3-checkpoint"
    outs["checkpoint_fsdp"] = folder / "fsdp-checkpoint"
    return outs


@pytest.mark.slow
def test_two_processes_make_the_same_update_as_one_on_the_whole_batch(distributed_updates):
    """Data parallel, DDP or DeepSpeed ZeRO-1 (optimizer states split between the processes), ZeRO-2
    (and the gradients) or ZeRO-3 or FSDP2 (the weights too): each of two processes updates on half the
    mini-batch; the loss normaliser is the whole mini-batch's token count and the gradients are
    averaged, so each step equals one process's on all eight sequences. A token budget packs rank
    0's sequences into 3 passes and rank 1's into 4, so under ZeRO-3 and FSDP rank 0 joins the
    fourth with an empty pass."""
    from safetensors.torch import load_file

    names = ("one", "ddp", "zero1", "zero", "zero3", "fsdp")
    one, ddp, zero1, zero, zero3, fsdp = (load_file(distributed_updates[k]) for k in names)
    grads = [k for k in one if k.startswith("grad.")]
    assert len(grads) > 5 and any(float(one[k].abs().max()) > 1e-4 for k in grads), "no gradient reached the weights"
    for key in grads:  # the same gradient, up to the order of floating-point sums
        assert torch.allclose(one[key], ddp[key], rtol=1e-4, atol=1e-7), key
    weights = [k for k in one if not k.startswith("grad.")]
    assert (
        set(weights)
        == {k for k in zero1 if not k.startswith("grad.")}
        == {k for k in zero if not k.startswith("grad.")}
        == {k for k in zero3 if not k.startswith("grad.")}
        == {k for k in fsdp if not k.startswith("grad.")}
    )
    # Adam's steps are about lr·m/√v: weights agree except where a gradient is ~0
    for other in (ddp, zero1, zero, zero3, fsdp):
        for key in weights:
            assert torch.isclose(one[key], other[key], atol=1e-6).float().mean() > 0.99, key
    for other in (zero1, zero, zero3, fsdp):  # lr is 1e-2: every weight moved by ~2e-2
        assert max(float((one[k] - other[k]).abs().max()) for k in weights) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero", "zero3", "fsdp"])
def test_a_sharded_run_resumes_from_its_engines_checkpoint(distributed_updates, stage, tmp_path):
    """The ZeRO or FSDP run's checkpoint after step 1 holds the engine's own checkpoint, its weights
    and each process's optimizer partition (DeepSpeed's files by accelerate's `save_state`, FSDP's
    shards as `save_state` writes them), so the checkpoint's weights file holds none; the tools of
    each (DeepSpeed's `zero_to_fp32`, accelerate's `merge_fsdp_weights`) read from them the same
    step-1 weights. The rerun restores them (Adam's moments and the fp32 master weights) and makes
    only step 2, ending with exactly the weights of the uninterrupted run."""
    from accelerate.utils import merge_fsdp_weights
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from safetensors.torch import load_file

    checkpoint = distributed_updates[{"zero": "checkpoint", "zero3": "checkpoint3", "fsdp": "checkpoint_fsdp"}[stage]]
    assert (checkpoint / "latest").read_text() == "step-00001"
    engine = checkpoint / "step-00001/optimizer-zero"
    weights = load_file(checkpoint / "step-00001/trainable.safetensors")
    assert not weights  # they are in the engine's checkpoint
    zero2 = distributed_updates["checkpoint"] / "step-00001/optimizer-zero"
    zero2_step1 = get_fp32_state_dict_from_zero_checkpoint(zero2, tag="pytorch_model")
    if stage == "fsdp":  # as accelerate's save_state saves FSDP: each process's shards, which merge-weights joins
        shards = [".metadata", "__0_0.distcp", "__1_0.distcp"]
        assert sorted(p.name for p in engine.iterdir()) == ["optimizer_0", "pytorch_model_fsdp_0"]
        assert all(
            sorted(p.name for p in (engine / d).iterdir()) == shards for d in ("optimizer_0", "pytorch_model_fsdp_0")
        )
        merge_fsdp_weights(engine / "pytorch_model_fsdp_0", tmp_path / "merged")
        step1 = load_file(tmp_path / "merged/model.safetensors")
    else:
        states = ["mp_rank_00_model_states.pt"]
        if stage == "zero3":
            states = [f"zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in (0, 1)]
        states += [f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in (0, 1)]
        assert sorted(p.name for p in (engine / "pytorch_model").iterdir()) == sorted(states)
        assert (engine / "latest").read_text() == "pytorch_model"
        assert {"random_states_0.pkl", "random_states_1.pkl", "zero_to_fp32.py"} <= {p.name for p in engine.iterdir()}
        step1 = get_fp32_state_dict_from_zero_checkpoint(engine, tag="pytorch_model")  # DeepSpeed's own tool
    # the weights of step 1, the same under ZeRO-2, ZeRO-3 and FSDP2
    assert len(step1) > 5 and step1.keys() == zero2_step1.keys()
    assert max(float((step1[k] - zero2_step1[k]).abs().max()) for k in step1) < 1e-4
    assert not list(checkpoint.glob(".zero-step-*"))
    uninterrupted, resumed = load_file(distributed_updates[stage]), load_file(distributed_updates[f"{stage}_resumed"])
    assert int(uninterrupted["steps_made"]) == 2 and int(resumed["steps_made"]) == 1
    weights = [k for k in uninterrupted if k != "steps_made"]
    assert len(weights) > 5 and resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(uninterrupted[k], resumed[k]) for k in weights)


@pytest.mark.slow
def test_fsdp_keeps_float32_masters_of_bfloat16_weights_and_generates_alone(tmp_path, char_model_dir):
    """Full fine-tuning of bfloat16 weights under FSDP2 in two processes: the trained weights are
    float32 masters gathered in bfloat16 for the forward, so one Adam step at learning rate 1e-6
    moves every weight (in plain bfloat16 it rounds to nothing: `warn_low_precision_updates`); for
    generation each process runs the unsharded model alone, to a length of its own."""
    out = tmp_path / "precision.json"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    cmd += [str(REPO_ROOT / "config/accelerate/fsdp2_8gpu.yaml"), "--num_machines", "1", "--num_processes", "2"]
    # a port of its own (29509 is the ZeRO-1 launch's in `distributed_updates`)
    cmd += ["--main_process_port", "29510", "-m", "fsdp_precision", str(char_model_dir), str(out)]
    env = {**os.environ, "PYTHONPATH": tests_path(), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["kind"] == "FsdpEngine" and report["trained_dtypes"] == ["torch.float32"]
    assert report["logits_dtype"] == "torch.bfloat16"
    assert report["moved"] == report["weights"] > 5
    assert report["generated_lengths"] == [4, 7]


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "port"), [("zero3", 29513), ("fsdp2", 29514)])
def test_what_vllm_is_handed_under_a_sharded_engine_is_the_whole_trained_model(
    tmp_path, char_model_dir, strategy, port
):
    """ZeRO-3 and FSDP2 over 2 processes, one update each: inside the generation hold, the LoRA adapter
    saved for vLLM and the full weights pushed into it (`vllm_rollouts`) are every trained weight
    whole, equal to the gathered ones, in both processes (the engine itself: test_training_vllm). The
    DeepSpeed engine is accelerate's (`Accelerator.prepare` over both processes), and neither engine
    leaves transformers partitioning the models loaded after it (the base rank 0 saves into)."""
    out = tmp_path / "sync.json"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file"]
    cmd += [str(REPO_ROOT / f"config/accelerate/{strategy}_8gpu.yaml"), "--num_machines", "1", "--num_processes", "2"]
    cmd += ["--main_process_port", str(port), "-m", "sharded_sync", str(char_model_dir), str(out)]
    env = {**os.environ, "PYTHONPATH": tests_path(), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    for finetuning in ("lora", "full"):
        for seen in report[finetuning]:
            assert seen["kind"] == ("FsdpEngine" if strategy == "fsdp2" else "DeepSpeedEngine"), seen
            if strategy == "zero3":  # built by accelerate's Accelerator.prepare, over both processes
                assert seen["accelerate"] == ["DistributedType.DEEPSPEED", 2], seen
            assert not seen["loads_partitioned"], seen  # a later from_pretrained loads whole weights
            assert seen["missing"] == [] and seen["same_shapes"], (finetuning, seen)
            assert seen["max_difference"] == 0.0, (finetuning, seen)
            assert seen["moved"] > 0, (finetuning, seen)  # the update changed what is handed over


def test_sdrl_debate_prompt_shows_both_solutions_as_context_only(char_model_dir):
    from debatelab import prompts
    from debatelab.training.core.policy import Policy

    row = {"id": "q", "question": "what is 3 + 4?", "choices": None, "answer": "7", "task_type": "math", "meta": "{}"}
    two_turn = prompts.self_debate_messages(row, None, "first: 12", "second: 34", "two_turn")
    assert [m["role"] for m in two_turn] == ["system", "user", "assistant", "user"]
    assert two_turn[2]["content"] == "first: 12" and "second: 34" in two_turn[3]["content"]
    one = prompts.self_debate_messages(row, None, "first: 12", "second: 34", "one_message")
    assert [m["role"] for m in one] == ["system", "user"] and "Response 2:\nsecond: 34" in one[1]["content"]
    settings = toy_settings(finetuning="full", show_progress=False)
    trainer = Trainer(_questions(1), Policy(char_model_dir, settings, device="cpu"), settings, run="t")
    reply = Rollout(
        question_id="q",
        group="q#debate",
        turn=2,
        sample=0,
        messages=tuple(two_turn),
        text="7",
        token_ids=[40, 41, 5],
        finish_reason="stop",
        answer="7",
        correct=True,
        reward=1.0,
        advantage=1.0,
    )
    ids, attention, mask, start, _ = trainer._tensors([reply])
    assert mask.sum() == 3 and ids[0, start:].tolist() == [40, 41, 5]  # only the reply is trained on
    prompt = trainer.policy.tokenizer.decode(ids[0, :start])
    assert "first: 12" in prompt and "second: 34" in prompt


def test_sequence_and_trajectory_ratios_by_hand():
    """ratio_level "sequence": exp of the mean token log-ratio of a sequence; "trajectory": exp of the
    sum over the sequences of a group (UDPO's trajectory ratio)."""
    diff = torch.log(torch.tensor([[1.5, 1.5], [2.0, 1.0]]))  # ℓ − ℓ_old
    logp = diff.clone().requires_grad_(True)
    mask = torch.ones(2, 2)
    # sequence: ratios 1.5 and sqrt(2); A = +1 clips 1.5 to 1.28; A = −1 keeps −sqrt(2) (the min)
    parts = policy_loss(
        logp, torch.zeros(2, 2), torch.tensor([1.0, -1.0]), mask, ratio_level="sequence", aggregation="sequence_mean"
    )
    assert parts.loss.item() == pytest.approx((-1.28 + math.sqrt(2)) / 2)
    # trajectory: one-token sequences 1.2 and 1.1 in one group: ratio 1.32 for both, clipped at A = +1
    one = torch.log(torch.tensor([[1.2], [1.1]])).requires_grad_(True)
    grouped = policy_loss(
        one,
        torch.zeros(2, 1),
        torch.tensor([1.0, 1.0]),
        torch.ones(2, 1),
        ratio_level="trajectory",
        groups=torch.tensor([0, 0]),
    )
    assert grouped.loss.item() == pytest.approx(-1.28) and grouped.clip_fraction == 1.0
    apart = policy_loss(
        one,
        torch.zeros(2, 1),
        torch.tensor([1.0, 1.0]),
        torch.ones(2, 1),
        ratio_level="trajectory",
        groups=torch.tensor([0, 1]),
    )
    assert apart.loss.item() == pytest.approx(-(1.2 + 1.1) / 2)  # each its own group: the token ratios
    # at ratio 1 every one of the 6 tokens' losses is −ρ with ρ = exp(Σ of all 6 log-ratios): the
    # token mean is −ρ, whose gradient is −1 for each token (a token-level ratio would give −1/6)
    same = torch.zeros(2, 3, requires_grad=True)
    policy_loss(
        same,
        torch.zeros(2, 3),
        torch.tensor([1.0, 1.0]),
        torch.ones(2, 3),
        ratio_level="trajectory",
        groups=torch.tensor([0, 0]),
    ).loss.backward()
    assert torch.allclose(same.grad, torch.full((2, 3), -1.0))


def test_trajectory_plan_keeps_each_group_in_one_micro_batch():
    # no tokenizer here, so no prompt keys: the shared-prompt grouping is the token-budget test's (below)
    settings = at_ratio_level(toy_settings(mini_batch_size=6, micro_batch_size=4, shared_prompts=False), "trajectory")
    trainer = Trainer(_questions(2), NoPolicy(), settings, run="t")
    sequences = [
        Rollout(
            question_id="q",
            group=f"g{g}",
            turn=1,
            sample=k,
            messages=(),
            text="",
            token_ids=[1],
            finish_reason="stop",
            answer=None,
            correct=False,
            reward=0.0,
        )
        for g, size in enumerate([3, 2, 1, 3, 5])
        for k in range(size)
    ]
    plan = trainer._plan(sequences, step=0, epoch=0)
    micro_batches = [m for mb in plan for m in mb]
    assert sorted(id(r) for m in micro_batches for r in m) == sorted(id(r) for r in sequences)
    for micro in micro_batches:
        for group in {r.group for r in micro}:  # a group in a micro-batch is all of it
            assert sum(r.group == group for r in micro) == sum(r.group == group for r in sequences)
        assert len(micro) <= 4 or len({r.group for r in micro}) == 1  # only a 5-group exceeds the size


def _varied_rollouts(group_sizes, prompt_lengths):
    out = []
    for g, (size, length) in enumerate(zip(group_sizes, prompt_lengths)):
        for k in range(size):
            out.append(
                Rollout(
                    question_id=f"q{g}",
                    group=f"g{g}",
                    turn=1,
                    sample=k,
                    messages=({"role": "user", "content": "ab " * length},),
                    text="",
                    token_ids=[5 + (g + k) % 7] * (3 + 2 * k),
                    finish_reason="stop",
                    answer=None,
                    correct=False,
                    reward=0.0,
                    advantage=(-1.0) ** (g + k) * (1 + k / 4),
                )
            )
    return out


@pytest.mark.parametrize("ratio_level", ["token", "trajectory"])
def test_a_token_budget_bounds_every_pass_and_leaves_the_update_unchanged(char_model_dir, ratio_level):
    """`micro_batch_tokens`: no pass holds more tokens than the budget (real ones: passes are packed by
    default; but a sequence or, per trajectory, a group too large for it, alone), every sequence is in
    exactly one pass, and the adapter after the update is the one of plain `micro_batch_size` passes."""
    from debatelab.training.core.policy import Policy

    rollouts = _varied_rollouts([3, 2, 1, 3, 2, 4], [2, 30, 5, 12, 60, 8])
    adapters, passes = [], []
    for budget in (None, 160):
        torch.manual_seed(0)
        settings = toy_settings(
            mini_batch_size=8,
            micro_batch_size=4,
            micro_batch_tokens=budget,
            learning_rate=1e-2,
            warmup_steps=0,
            show_progress=False,
            lora={"r": 4, "alpha": 8},
        )
        settings = at_ratio_level(settings, ratio_level)
        policy = Policy(char_model_dir, settings, device="cpu")
        trainer = Trainer(_questions(2), policy, settings, run="t")
        plan = trainer._plan(rollouts, step=0, epoch=0, policy=policy)
        micro = [m for mb in plan for m in mb]
        assert sorted(id(r) for m in micro for r in m) == sorted(id(r) for r in rollouts)
        assert all(len(m) <= 4 or len({r.group for r in m}) == 1 for m in micro)
        if budget is not None:
            widths, keys = trainer._widths(rollouts, policy), trainer._prompt_keys(rollouts, policy)
            for m in micro:  # a prompt its sequences share sits in the pass once (`shared_prompts`)
                real = sum({keys[id(r)]: widths[id(r)][0] for r in m}.values()) + sum(widths[id(r)][1] for r in m)
                single = len(m) == 1 or (ratio_level == "trajectory" and len({r.group for r in m}) == 1)
                assert real <= budget or single
        if ratio_level == "trajectory":
            for m in micro:
                for group in {r.group for r in m}:
                    assert sum(r.group == group for r in m) == sum(r.group == group for r in rollouts)
        passes.append(len(micro))
        policy.model.train()
        trainer.update_policy(rollouts, step=0)
        adapters.append(torch.cat([p.detach().flatten() for p in policy.model.parameters() if p.requires_grad]))
    assert passes[1] > passes[0]  # the budget did split the long prompts apart
    assert not torch.equal(adapters[0], torch.zeros_like(adapters[0]))
    torch.testing.assert_close(adapters[0], adapters[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ratio_level", ["token", "trajectory"])
def test_an_on_policy_update_takes_pi_old_from_its_own_forward_and_updates_alike(char_model_dir, ratio_level):
    """One mini-batch of one epoch: π_old is the update's own forward, detached, so the π_old pass
    is skipped (one forward fewer per micro-batch); the adapter, the KL to the reference and the
    entropy are those of the separate pass."""
    from debatelab.training.core.policy import Policy

    rollouts = _varied_rollouts([3, 2, 1, 3], [2, 30, 5, 12])
    adapters, metrics, forwards = [], [], []
    for reuse in (False, True):
        torch.manual_seed(0)
        settings = toy_settings(
            mini_batch_size=16,
            micro_batch_size=4,
            learning_rate=1e-2,
            warmup_steps=0,
            kl_coef=0.5,
            show_progress=False,
            lora={"r": 4, "alpha": 8},
        )
        settings = at_ratio_level(settings, ratio_level)
        policy = Policy(char_model_dir, settings, device="cpu")
        trainer = Trainer(_questions(2), policy, settings, run="t")
        trainer.reuse_policy_logprobs = reuse
        policy.model.train()
        calls = []
        hook = policy.model.base_model.model.register_forward_hook(lambda *a: calls.append(1))
        for step in range(2):  # the second step's reference differs from its policy: the KL is not 0
            out = trainer.update_policy(rollouts, step=step)
        hook.remove()
        forwards.append(len(calls))
        metrics.append(out)
        adapters.append(torch.cat([p.detach().flatten() for p in policy.model.parameters() if p.requires_grad]))
    passes = len([m for mb in trainer._plan(rollouts, 0, 0, policy) for m in mb])
    assert forwards[0] - forwards[1] == 2 * passes  # no π_old pass in either step
    assert metrics[1]["updates"] == 1 and metrics[1]["kl"] > 0
    for key in ("loss", "kl", "entropy", "clip_fraction"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-7), key
    torch.testing.assert_close(adapters[0], adapters[1], rtol=1e-5, atol=1e-6)


def test_release_host_memory_returns_freed_pages():
    """A backward's activations freed in pieces stay resident under glibc until `malloc_trim`."""
    from debatelab.training.core.weights import release_host_memory

    def resident_mib():
        return int(Path("/proc/self/status").read_text().split("VmRSS:")[1].split()[0]) / 1024

    keep = []
    pieces = [torch.ones(4096 * (1 + k % 7)) for k in range(20000)]  # 16-112 KiB each, under mmap's threshold
    keep = pieces[::50]  # a few survivors pin the heap's top, as live tensors do
    del pieces
    before = resident_mib()
    release_host_memory("cpu")
    after = resident_mib()
    assert keep and before - after > 200


def test_full_fine_tuning_of_bfloat16_weights_warns_that_small_steps_are_lost(caplog):
    """A step of 1e-6 on a bfloat16 weight of 0.02 rounds away (the reason for the warning); the
    warning names the fix, and LoRA or float32 runs get none."""
    from debatelab.training.core.weights import warn_low_precision_updates

    weight = torch.tensor(0.02, dtype=torch.bfloat16)
    assert weight - 1e-6 == weight and torch.tensor(0.02) - 1e-6 != torch.tensor(0.02)
    with caplog.at_level("WARNING", logger="debatelab.training.core.weights"):
        assert warn_low_precision_updates(toy_settings(finetuning="full"), torch.bfloat16)
    assert "zero2_8gpu.yaml" in caplog.text and "learning_rate 1e-06" in caplog.text
    assert not warn_low_precision_updates(toy_settings(finetuning="lora"), torch.bfloat16)
    assert not warn_low_precision_updates(toy_settings(finetuning="full"), torch.float32)


@pytest.mark.slow
def test_a_zero3_job_rolls_out_on_gathered_weights_resumes_and_saves_them(tmp_path, char_model_dir, monkeypatch):
    """A DAPO job with full fine-tuning in two processes under DeepSpeed ZeRO-3 (each holding half of
    every weight), started as the train rule starts it: its rollouts run on the weights gathered
    whole in each process, and its saved model (gathered, written by rank 0) equals that of the same
    job under ZeRO-2 (whole weights in every process) within float tolerance; so does the job under
    FSDP2. Stopped after step 1 and rerun, the ZeRO-3 job and the FSDP2 job each resume from their
    checkpoint (the optimizer's shards of both processes) and save exactly the weights of their
    uninterrupted run. With one process (`gpus: 1`) the ZeRO-3 config is launched too, not ignored:
    the job's checkpoint holds the engine's partition, its weights ZeRO-2's."""
    from debatelab.training.core.launch import launch_or_train

    monkeypatch.setenv("PYTHONPATH", tests_path())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("DEBATELAB_TESTS_NO_DS_SHM", "1")  # tests/sitecustomize.py: Gloo, no kernel to compile
    dataset = _toy_dataset(tmp_path / "toy.parquet")
    settings = toy_settings(
        steps=2,
        **{
            **TOY,
            "dynamic_sampling": False,
            "prompts_per_step": 2,
            "rollouts_per_prompt": 4,
            "mini_batch_size": 8,
            "micro_batch_size": 2,
            "micro_batch_tokens": 30,
            "checkpoint_every": 1,
            "reward": "test_training:starts_with_a_vowel",  # mixed groups: a gradient every step
        },
    )
    runs, first_checkpoints = {}, {}
    for name, config, steps, processes in (
        ("zero3", "zero3", 2, 2),
        ("zero2", "zero2", 2, 2),
        ("fsdp2", "fsdp2", 2, 2),
        ("split", "zero3", 1, 2),
        ("split", "zero3", 2, 2),
        ("split_fsdp2", "fsdp2", 1, 2),
        ("split_fsdp2", "fsdp2", 2, 2),
        ("alone", "zero3", 2, 1),
    ):
        job = _job(tmp_path, char_model_dir, dataset, replace(settings, steps=steps), name=name)
        metrics = launch_or_train(
            processes=processes, accelerate_config=str(REPO_ROOT / f"config/accelerate/{config}_8gpu.yaml"), **job
        )
        runs[name] = (metrics, folder_weights(Path(job["out_dirs"]["toy"])))
        if steps == 1:
            first_checkpoints[name] = (tmp_path / name / "checkpoint/step-00001").stat().st_mtime_ns
    # the reruns resumed from step 1's checkpoint: none wrote it again or set it aside
    for name, written in first_checkpoints.items():
        assert (tmp_path / name / "checkpoint/step-00001").stat().st_mtime_ns == written, name
        assert not list((tmp_path / name / "checkpoint").glob("stale-step-*")), name
    (zero3, weights3), (zero2, weights2), (split, split_weights) = runs["zero3"], runs["zero2"], runs["split"]
    fsdp, fsdp_weights = runs["fsdp2"]
    assert len(zero3) == 2 and np.isfinite(zero3["loss"]).all() and (zero3["reward_std"] > 0).all()
    assert json.loads((tmp_path / "zero3/settings.json").read_text())["processes"] == 2
    start = folder_weights(Path(char_model_dir))
    assert weights3.keys() == weights2.keys() == start.keys()
    assert max(float((weights3[k] - start[k]).abs().max()) for k in start) > 1e-3  # it trained
    assert max(float((weights3[k] - weights2[k]).abs().max()) for k in start) < 1e-4
    assert max(float((fsdp_weights[k] - weights2[k]).abs().max()) for k in start) < 1e-4
    for sharded in (zero3, fsdp):  # the same rollouts: gathered weights generate as whole ones
        pd.testing.assert_frame_equal(sharded[["reward_mean", "accuracy"]], zero2[["reward_mean", "accuracy"]])
    assert all(torch.equal(split_weights[k], weights3[k]) for k in start)
    split_fsdp, split_fsdp_weights = runs["split_fsdp2"]
    assert len(split_fsdp) == 2 and all(torch.equal(split_fsdp_weights[k], fsdp_weights[k]) for k in start)
    shards = sorted(p.name for p in (tmp_path / "split_fsdp2/checkpoint/step-00001/optimizer-zero").iterdir())
    assert shards == ["optimizer_0", "pytorch_model_fsdp_0"]
    alone, alone_weights = runs["alone"]
    alone_engine = tmp_path / "alone/checkpoint/step-00002/optimizer-zero/pytorch_model"
    assert sorted(p.name for p in alone_engine.iterdir()) == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
    ]
    assert max(float((alone_weights[k] - weights2[k]).abs().max()) for k in start) < 1e-4
    assert len(split) == 2 and (tmp_path / "split/checkpoint/latest").read_text() == "step-00002"
