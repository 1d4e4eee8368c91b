"""Full fine-tuning of every agent of a multi-agent run (`finetuning: full`): each agent its own
weights and optimizer, its own frozen reference, saved as a plain folder; steps that resume to
the same weights and that two processes make as one does."""

from __future__ import annotations

from dataclasses import replace

import distributed_helpers
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import folder_weights, toy_settings
from distributed_helpers import assert_each_agent_wrapped_by_ddp, assert_same_update, run_multi_agent_steps

from debatelab.training.core.agents import AgentPolicies

SETTINGS = toy_settings(
    "udpo",
    finetuning="full",
    dtype="float32",
    max_tokens=6,
    overlong_buffer=0,
    learning_rate=1e-3,
    warmup_steps=0,
    show_progress=False,
)


@pytest.fixture
def policies(char_model_dir):
    torch.manual_seed(0)
    return AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, SETTINGS, device="cpu")


def _weights(policies, agent):
    return {n: p.detach().clone() for n, p in policies.trainable_parameters(agent).items()}


def test_each_agent_holds_its_own_weights_and_an_update_moves_only_them(policies):
    assert len(policies.models) == 2 and policies.model_of("alice") is not policies.model_of("bob")
    alice, bob = _weights(policies, "alice"), _weights(policies, "bob")
    assert set(alice) == set(bob) and all(torch.equal(alice[n], bob[n]) for n in alice)  # the same base
    assert all(p.requires_grad for p in policies.trainable_parameters("alice").values())
    ids = torch.randint(3, 60, (2, 8))
    with policies.acting("alice") as view:
        view.model.train()
        view.model(input_ids=ids, labels=ids).loss.backward()
        assert all(p.grad is None for p in policies.trainable_parameters("bob").values())
        view.optimizer.step()
    after_alice, after_bob = _weights(policies, "alice"), _weights(policies, "bob")
    assert sum(not torch.equal(after_alice[n], alice[n]) for n in alice) > len(alice) // 2  # every weight trains
    assert all(torch.equal(after_bob[n], bob[n]) for n in bob)


def test_the_reference_is_the_frozen_base_until_resynced_and_checkpoints_carry_it(policies):
    ids = torch.randint(3, 60, (1, 8))
    base = {n: p.detach().clone() for n, p in policies.model_of("alice").named_parameters()}

    def logits(view, reference=False):
        with torch.no_grad():
            if reference:
                return view.reference_logprobs(lambda m: m(input_ids=ids).logits)
            return view.model(input_ids=ids).logits

    def move(agent, seed):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in policies.trainable_parameters(agent).values():
                p.add_(0.05 * torch.randn(p.shape, generator=generator))

    policies.train(False)
    with policies.acting("alice") as alice:
        untrained = logits(alice)
        move("alice", 1)
        assert not torch.allclose(logits(alice), untrained, atol=1e-4)
        assert torch.allclose(logits(alice, reference=True), untrained)  # no re-sync yet: the base
        policies.sync_references()
        synced = logits(alice)
        move("alice", 2)
        assert torch.allclose(logits(alice, reference=True), synced)  # stays put until the next sync
        assert not any(p.requires_grad for p in policies.synced["alice"].parameters())
    # the frozen base is one copy per base, untouched by the agents' updates
    frozen = dict(policies.references[policies.base_of["alice"]].named_parameters())
    assert all(torch.equal(frozen[n], v) for n, v in base.items())
    state = policies.trainable_state()
    assert any(k.startswith("ref_alice/") for k in state) and any(k.startswith("bob/") for k in state)
    torch.manual_seed(1)
    fresh = AgentPolicies({"alice": policies.base_of["alice"], "bob": policies.base_of["bob"]}, SETTINGS, device="cpu")
    fresh.load_trainable_state(state)
    fresh.train(False)
    with fresh.acting("alice") as alice:
        assert torch.allclose(logits(alice, reference=True), synced)
        assert torch.allclose(logits(alice), policies.model_of("alice")(input_ids=ids).logits.detach())


def test_the_saved_agent_is_a_plain_folder_of_its_own_weights(policies, tmp_path):
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        for p in policies.trainable_parameters("bob").values():
            p.mul_(1.01)
    policies.save("bob", tmp_path / "bob")
    assert not (tmp_path / "bob/adapter").exists()  # nothing to serve as an adapter
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "bob", dtype=torch.float32)
    own = dict(saved.named_parameters())
    assert all(torch.equal(own[n], p) for n, p in _weights(policies, "bob").items())
    alice = _weights(policies, "alice")
    assert any(not torch.equal(own[n], alice[n]) for n in alice)


def _udpo_full(char_model_dir, checkpoint_dir, steps):
    from toy_questions import toy_rows

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.methods.udpo import AgentCoefficients, UdpoTrainer

    torch.manual_seed(0)
    settings = replace(SETTINGS, steps=steps)
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    coefficients = {
        "alice": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01),
        "bob": AgentCoefficients(0.5, 0.2, 0.3, 0.8, 0.02),
    }
    trainer = UdpoTrainer(
        frame_from_rows(toy_rows(6)),
        policies,
        settings,
        run="udpo",
        participants=["alice", "bob"],
        rounds=1,
        coefficients=coefficients,
        questions_per_step=4,
        checkpoint_dir=checkpoint_dir,
        ref_sync_steps=1,
    )
    return trainer, trainer.train()


@pytest.mark.slow
def test_full_fine_tuning_udpo_steps_resume_to_the_same_weights(char_model_dir, tmp_path):
    """Two UDPO steps of two fully fine-tuned agents with a re-synced reference, uninterrupted and
    killed after one step then resumed: the same weights (references included) and metrics."""
    trainer, metrics = _udpo_full(char_model_dir, tmp_path / "whole", steps=2)
    assert np.isfinite(metrics["loss"]).all() and (metrics["updates"] == 2).all()
    start = AgentPolicies({"a": char_model_dir}, SETTINGS, device="cpu").trainable_parameters("a")
    for agent in ("alice", "bob"):  # every agent's full weights moved
        moved = _weights(trainer.policy, agent)
        assert sum(not torch.equal(moved[n], start[n]) for n in moved) > len(moved) // 2, agent
    _udpo_full(char_model_dir, tmp_path / "split", steps=1)
    resumed, resumed_metrics = _udpo_full(char_model_dir, tmp_path / "split", steps=2)
    whole, split = trainer.policy.trainable_state(), resumed.policy.trainable_state()
    assert set(whole) == set(split) and any(k.startswith("ref_") for k in whole)
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    timing = ["rollout_seconds", "update_seconds", "tokens_per_second"]
    pd.testing.assert_frame_equal(metrics.drop(columns=timing), resumed_metrics.drop(columns=timing))


@pytest.fixture(scope="module")
def umad_full_one_process(tmp_path_factory, char_model_dir):
    """`multi_agent_ddp_step`'s UMAD step with two fully fine-tuned agents in one process: what each
    two-process run below must equal."""
    return run_multi_agent_steps(
        "umad", char_model_dir, tmp_path_factory.mktemp("umad-one"), finetuning="full", counts=(1,)
    )[1]


@pytest.mark.slow
def test_two_processes_make_the_same_full_fine_tuning_umad_step_as_one(tmp_path, char_model_dir, umad_full_one_process):
    """UMAD, two fully fine-tuned agents: each of two Gloo processes debates half the step's
    questions; each agent's gradients are averaged over them, so its weights equal one process's."""
    (one, reports1) = umad_full_one_process
    (two, reports2) = run_multi_agent_steps("umad", char_model_dir, tmp_path, finetuning="full", counts=(2,))[2]
    assert_same_update(one, two, {"solver", "critic"})
    assert_each_agent_wrapped_by_ddp(two, reports2)
    assert sum(k.startswith("solver/") for k in one) > 10  # every weight, not an adapter
    m1, m2 = reports1[0]["metrics"], reports2[0]["metrics"]
    for key in ("reward_mean", "reward_std", "accuracy", "response_length"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-6), key
    # the loss sums terms of either sign (advantages centred per group) to ~5e-4: an absolute tolerance
    # at the floating-point sum order's scale (the weights agree to 1e-4 above)
    assert m2["loss"] == pytest.approx(m1["loss"], abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["zero2", "zero3", "fsdp2"])
def test_two_sharded_processes_make_the_same_full_fine_tuning_umad_step_as_one(
    tmp_path, char_model_dir, umad_full_one_process, config
):
    """UMAD, two fully fine-tuned agents, each its own engine over two processes (`accelerate launch`
    with the shipped config): DeepSpeed ZeRO-2 splits each agent's gradients and Adam states, ZeRO-3
    its weights too, and so does FSDP2 (the debates run on the agents gathered whole in each
    process). The agents' weights equal one process's on all the questions."""
    from workflow_helpers import REPO_ROOT

    from debatelab.training.core.launch import is_sharding_config

    path = REPO_ROOT / f"config/accelerate/{config}_8gpu.yaml"
    assert is_sharding_config(path)
    (one, reports1) = umad_full_one_process
    runs = run_multi_agent_steps(
        "umad", char_model_dir, tmp_path, finetuning="full", accelerate_config=path, counts=(2,)
    )
    (two, reports2) = runs[2]
    weights = [k for k in one if not k.startswith("grad.")]
    assert sum(k.startswith("solver/") for k in weights) > 10 and set(weights) == set(two)
    start = dict(AgentPolicies({"a": char_model_dir}, SETTINGS, device="cpu").trainable_parameters("a"))
    assert max(float((one[k] - start[k.split("/", 1)[1]]).abs().max()) for k in weights) > 1e-4  # it trained
    assert max(float((one[k] - two[k]).abs().max()) for k in weights) < 1e-4
    m1, m2 = reports1[0]["metrics"], reports2[0]["metrics"]
    for key in ("reward_mean", "reward_std", "accuracy", "response_length"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-6), key


@pytest.mark.slow
def test_one_process_under_fsdp2_gives_each_agent_its_engine_and_the_plain_step(
    tmp_path, char_model_dir, umad_full_one_process
):
    """One process under the FSDP2 config (`gpus: 1`): each fully fine-tuned agent still gets its own
    engine (float32 masters; not the config ignored), over a group of one, and the step equals the
    plain process's within float tolerance."""
    from workflow_helpers import REPO_ROOT

    (one, _) = umad_full_one_process
    path = REPO_ROOT / "config/accelerate/fsdp2_8gpu.yaml"
    (alone, reports) = run_multi_agent_steps(
        "umad", char_model_dir, tmp_path, finetuning="full", accelerate_config=path, counts=(1,)
    )[1]
    assert reports[0]["engines"] == {"solver": "FsdpEngine", "critic": "FsdpEngine"}
    weights = [k for k in one if not k.startswith("grad.")]
    assert sum(k.startswith("solver/") for k in weights) > 10 and set(weights) <= set(alone)
    assert max(float((one[k] - alone[k]).abs().max()) for k in weights) < 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("config", ["zero3", "fsdp2"])
def test_a_sharded_multi_agent_job_checkpoints_resumes_and_saves_each_agent(
    tmp_path, char_model_dir, monkeypatch, config
):
    """The train_agents job of UMAD with two fully fine-tuned agents under ZeRO-3 or FSDP2 in two
    processes, started as the rule starts it: each agent's engine goes into the checkpoint in a
    folder of its own (ZeRO-3: DeepSpeed's checkpoint, with the agent's weights); stopped after step 1 and rerun, it resumes and saves
    exactly the agents of the uninterrupted run, each a plain folder of its gathered weights."""
    from safetensors.torch import load_file
    from toy_questions import alternating_gold, toy_rows
    from workflow_helpers import REPO_ROOT

    from debatelab.data.schema import frame_from_rows
    from debatelab.io import write_parquet_atomic
    from debatelab.llm.agent import AgentSpec
    from debatelab.training.core.launch import launch_or_train

    monkeypatch.setenv("PYTHONPATH", distributed_helpers.tests_path())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("DEBATELAB_TESTS_NO_DS_SHM", "1")  # tests/sitecustomize.py: Gloo, no kernel to compile
    dataset = tmp_path / "toy.parquet"
    write_parquet_atomic(frame_from_rows(toy_rows(4, alternating_gold)), dataset)
    settings = toy_settings(
        "umad",
        finetuning="full",
        dtype="float32",
        max_tokens=8,
        overlong_buffer=0,
        learning_rate=1e-3,
        warmup_steps=0,
        mini_batch_size=8,
        micro_batch_size=4,
        show_progress=False,
        umad={"threads": 2, "turns": 2, "questions_per_step": 2, "kl_coef": 0.001},
    )
    bases = {"solver": str(char_model_dir), "critic": str(char_model_dir)}
    agents = {name: AgentSpec(name=name, model="m") for name in bases}

    def job(name, steps):
        out = tmp_path / name
        return launch_or_train(
            processes=2,
            accelerate_config=str(REPO_ROOT / f"config/accelerate/{config}_8gpu.yaml"),
            dataset_path=str(dataset),
            bases=bases,
            participants=["solver", "critic"],
            agents=agents,
            out_dirs={a: str(out / "agents" / a) for a in bases},
            metrics_path=str(out / "metrics.parquet"),
            curves_path=str(out / "curves.png"),
            settings_path=str(out / "settings.json"),
            checkpoint_dir=str(out / "checkpoint"),
            run="umad",
            settings=replace(settings, steps=steps),
            report_to=[],
        )

    whole = job("whole", 2)
    job("split", 1)
    assert sorted(p.name for p in (tmp_path / "split/checkpoint/step-00001/optimizer-zero").iterdir()) == [
        "critic",
        "solver",
    ]
    solver = tmp_path / "split/checkpoint/step-00001/optimizer-zero/solver"
    # the engine's own checkpoint, the agent's weights with its optimizer (none in the weights file)
    if config == "fsdp2":
        assert sorted(p.name for p in solver.iterdir()) == ["optimizer_0", "pytorch_model_fsdp_0"]
    else:
        assert sorted(p.name for p in (solver / "pytorch_model").iterdir()) == [
            f"zero_pp_rank_{r}_mp_rank_00_{kind}_states.pt" for r in (0, 1) for kind in ("model", "optim")
        ]
    saved = load_file(tmp_path / "split/checkpoint/step-00001/trainable.safetensors")
    assert not [k for k in saved if k.startswith(("solver/", "critic/"))]
    resumed = job("split", 2)
    assert len(whole) == len(resumed) == 2 and np.isfinite(whole["loss"]).all()
    timing = ["rollout_seconds", "update_seconds", "tokens_per_second"]
    pd.testing.assert_frame_equal(whole.drop(columns=timing), resumed.drop(columns=timing))
    start = folder_weights(char_model_dir)
    for agent in bases:
        uninterrupted, split = (folder_weights(tmp_path / run / "agents" / agent) for run in ("whole", "split"))
        assert uninterrupted.keys() == start.keys()
        assert max(float((uninterrupted[k] - start[k]).abs().max()) for k in start) > 1e-4, agent  # it trained
        assert all(torch.equal(uninterrupted[k], split[k]) for k in start), agent
