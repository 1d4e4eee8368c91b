"""Multi-agent training parts: one LoRA adapter per agent on a shared base, and whole debates of the
current policies run by the debate engine as rollouts."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import toy_settings
from distributed_helpers import assert_each_agent_wrapped_by_ddp, assert_same_update, run_multi_agent_steps
from toy_questions import toy_rows

from debatelab.training.core.agents import AgentPolicies
from debatelab.training.core.debate_rollouts import answers_by_round, rollout_debates

SETTINGS = toy_settings(
    "udpo",
    lora={"r": 4, "alpha": 8},
    dtype="float32",
    max_tokens=6,
    overlong_buffer=0,
    learning_rate=1e-2,
    warmup_steps=0,
    show_progress=False,
)
ROWS = toy_rows(3, lambda i: str(i + 1), wording="What is {i} + 1?")


@pytest.fixture
def policies(char_model_dir):
    torch.manual_seed(0)
    return AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, SETTINGS, device="cpu")


def test_agents_on_one_base_share_it_and_an_update_touches_only_its_own_adapter(policies):
    assert len(policies.models) == 1  # one copy of the base weights
    model = policies.model_of("alice")
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    alice, bob = (
        dict((n, p.detach().clone()) for n, p in policies.adapter_parameters(a).items()) for a in ("alice", "bob")
    )
    assert alice and bob and not set(alice) & set(bob)
    ids = torch.randint(3, 60, (2, 8))
    with policies.acting("alice") as view:
        view.model.train()
        loss = view.model(input_ids=ids, labels=ids).loss
        loss.backward()
        assert all(p.grad is None for p in policies.adapter_parameters("bob").values())
        view.optimizer.step()
    after = {n: p.detach() for n, p in model.named_parameters()}
    assert any(not torch.equal(after[n], v) for n, v in alice.items())  # alice moved (her lora_A at least)
    assert all(torch.equal(after[n], v) for n, v in bob.items())  # bob did not
    assert all(torch.equal(after[n], v) for n, v in base.items())  # nor did the base


def test_the_saved_agent_is_its_adapter_merged_into_the_base(policies, tmp_path):
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        for n, p in policies.adapter_parameters("bob").items():
            if "lora_B" in n:
                p.normal_()
    ids = torch.randint(3, 60, (1, 8))
    policies.save("bob", tmp_path / "bob")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "bob", dtype=torch.float32).eval()
    with policies.acting("bob") as view, torch.no_grad():
        view.model.eval()
        expected = view.model(input_ids=ids).logits
        with view.model.disable_adapter():
            base = view.model(input_ids=ids).logits
    assert torch.allclose(saved(input_ids=ids).logits, expected, atol=1e-5)
    assert not torch.allclose(expected, base, atol=1e-3)
    assert policies.model_of("bob").active_adapter == "alice"  # `acting` put the active adapter back
    # beside it, bob's adapter alone (what `adapter: true` serves on the base's vLLM engine): the base
    # with it applied is bob again
    from peft import PeftModel

    assert json.loads((tmp_path / "bob/adapter/adapter_config.json").read_text())["r"] == policies.settings.lora.r
    plain = AutoModelForCausalLM.from_pretrained(policies.base_of["bob"], dtype=torch.float32)
    with_adapter = PeftModel.from_pretrained(plain, tmp_path / "bob/adapter").eval()
    with torch.no_grad():
        assert torch.allclose(with_adapter(input_ids=ids).logits, expected, atol=1e-5)


def test_debate_rollouts_batch_every_agent_per_engine_step_and_repeat(policies):
    calls = []
    make_backend = policies.backend

    def recording_backend(name, model_id):
        backend = make_backend(name, model_id)
        generate = backend.generate

        def generate_and_record(requests, progress=None):
            calls.append((name, policies.model_of(name).active_adapter, len(requests)))
            return generate(requests, progress)

        backend.generate = generate_and_record
        return backend

    policies.backend = recording_backend
    policies.train(False)
    states = rollout_debates(policies, ROWS, ["alice", "bob", "alice"], SETTINGS, step=0, rounds=2, threads=2)
    # 3 questions × 2 threads; seats alice, bob, alice#1: per engine step one call per agent, with
    # her adapter active: round 0, then rounds 1 and 2
    assert calls == [("alice", "alice", 12), ("bob", "bob", 6)] * 3
    assert len(states) == 6
    for state in states:
        answers = answers_by_round(state)
        assert len(answers) == 3 and all(len(r) == 3 for r in answers)
        turns = state.pre + state.turns
        assert sorted((t.round, t.agent) for t in turns) == [(r, i) for r in range(3) for i in range(3)]
        assert all(t.token_ids is not None and len(t.token_ids) == t.completion_tokens for t in turns)
    again = rollout_debates(policies, ROWS, ["alice", "bob", "alice"], SETTINGS, step=0, rounds=2, threads=2)
    texts = lambda ss: [t.response for s in ss for t in s.pre + s.turns]  # noqa: E731
    assert texts(again) == texts(states)  # seeded per (run, step, question, thread, seat, round)
    later = rollout_debates(policies, ROWS, ["alice", "bob", "alice"], SETTINGS, step=1, rounds=2, threads=2)
    assert texts(later) != texts(states)
    # the two threads of a question are different debates
    assert [t.response for t in states[0].pre] != [t.response for t in states[1].pre]


def _udpo(char_model_dir, checkpoint_dir, steps, **options):
    from dataclasses import replace

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.methods.udpo import AgentCoefficients, UdpoTrainer

    torch.manual_seed(0)
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, SETTINGS, device="cpu")
    rows = toy_rows(6)
    coefficients = {
        "alice": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01),
        "bob": AgentCoefficients(0.5, 0.2, 0.3, 0.8, 0.02),
        "alice#1": AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01),
    }
    settings = replace(SETTINGS, steps=steps, ratio_level=options.pop("ratio_level", "token"))
    trainer = UdpoTrainer(
        frame_from_rows(rows),
        policies,
        settings,
        run="udpo",
        participants=["alice", "bob", "alice"],
        rounds=2,
        coefficients=coefficients,
        questions_per_step=4,
        checkpoint_dir=checkpoint_dir,
        **options,
    )
    return trainer, trainer.train()


@pytest.mark.slow
def test_udpo_steps_train_every_agent_and_resume_to_the_same_weights(char_model_dir, tmp_path):
    trainer, metrics = _udpo(char_model_dir, tmp_path / "whole", steps=2)
    assert list(metrics["step"]) == [1, 2] and (metrics["debates"] == 4).all()
    assert (metrics["sequences"] == 4 * 3 * 3).all()  # 4 debates × 3 seats × rounds 0..2
    for column in ("r_intra", "r_inter", "r_sys", "accuracy"):
        assert metrics[column].between(0, 1).all(), column
    assert np.isfinite(metrics["loss"]).all() and (metrics["updates"] == 2).all()  # one per agent
    for agent in ("alice", "bob"):  # every agent's adapter moved (lora_B starts at zero)
        assert any(
            float(p.detach().abs().max()) > 0
            for n, p in trainer.policy.adapter_parameters(agent).items()
            if "lora_B" in n
        )
    priority = np.asarray(trainer.state.extra["priority"])
    assert (priority != 1).sum() >= 2 and (priority > 0).all()  # the epoch-end refresh set every U(τ)

    _udpo(char_model_dir, tmp_path / "split", steps=1)
    resumed, resumed_metrics = _udpo(char_model_dir, tmp_path / "split", steps=2)
    whole, split = trainer.policy.trainable_state(), resumed.policy.trainable_state()
    assert all(torch.equal(whole[k], split[k]) for k in whole)
    pd.testing.assert_frame_equal(
        metrics.drop(columns=["rollout_seconds", "update_seconds", "tokens_per_second"]),
        resumed_metrics.drop(columns=["rollout_seconds", "update_seconds", "tokens_per_second"]),
    )


def test_references_are_resynced_copies_of_each_agent(policies):
    ids = torch.randint(3, 60, (1, 8))

    def logits(view, reference=False):
        with torch.no_grad():
            if reference:
                return view.reference_logprobs(lambda m: m(input_ids=ids).logits)
            return view.model(input_ids=ids).logits

    def move(agent, seed):
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for n, p in policies.adapter_parameters(agent).items():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=generator))

    policies.train(False)
    move("alice", 1)
    with policies.acting("alice") as alice:
        with alice.model.disable_adapter():
            base = alice.model(input_ids=ids).logits.detach()
        assert torch.allclose(logits(alice, reference=True), base)  # no re-sync yet: the base
        policies.sync_references()
        synced = logits(alice)
        assert torch.allclose(logits(alice, reference=True), synced)
        move("alice", 2)
        assert not torch.allclose(logits(alice), synced, atol=1e-4)
        assert torch.allclose(logits(alice, reference=True), synced)  # the reference stays put until the next sync
        assert alice.model.active_adapter == "alice"
        assert all(p.requires_grad for p in policies.adapter_parameters("alice").values())
        assert not any(p.requires_grad for p in policies.adapter_parameters("ref_alice").values())
    state = policies.trainable_state()
    assert any(k.startswith("ref_alice/") for k in state)
    torch.manual_seed(1)
    fresh = AgentPolicies({"alice": policies.base_of["alice"], "bob": policies.base_of["bob"]}, SETTINGS, device="cpu")
    fresh.load_trainable_state(state)
    fresh.train(False)
    with fresh.acting("alice") as alice:
        assert torch.allclose(logits(alice, reference=True), synced)


@pytest.mark.slow
def test_udpo_with_trajectory_ratios_and_a_resynced_reference(char_model_dir, tmp_path):
    trainer, metrics = _udpo(char_model_dir, None, steps=2, ratio_level="trajectory", ref_sync_steps=1)
    assert np.isfinite(metrics["loss"]).all() and (metrics["updates"] == 2).all()
    assert (metrics["kl"] >= 0).all() and metrics["kl"].iloc[0] == pytest.approx(0, abs=1e-6)  # synced at step 0


@pytest.mark.slow
def test_udpo_jobs_warm_up_calibrate_train_and_write_every_agent(char_model_dir, tmp_path):
    """The three UDPO jobs the rules call: the warm-up debate on the held-out questions, App. A.2's
    coefficients as JSON, then training on the other questions and one model folder per agent."""
    import json

    from debatelab.data.schema import frame_from_rows
    from debatelab.io import write_parquet_atomic
    from debatelab.llm.agent import AgentSpec
    from debatelab.training.methods.udpo import split_warmup
    from debatelab.training.multi_agent_stage import WARMUP_COLUMNS, udpo_coefficients_job, udpo_warmup_job
    from debatelab.training.stage import train_job

    rows = toy_rows(10)
    dataset = tmp_path / "toy.parquet"
    write_parquet_atomic(frame_from_rows(rows), dataset)
    warm, train = split_warmup(frame_from_rows(rows), 0.2, seed=0)
    assert len(warm) == 2 and len(train) == 8 and not set(warm["id"]) & set(train["id"])

    from dataclasses import replace

    settings = replace(
        SETTINGS,
        method="udpo",
        steps=1,
        udpo={"rounds": 2, "questions_per_step": 3, "warmup_fraction": 0.2, "ablate": ["inter"]},
    )
    bases = {"alice": str(char_model_dir), "bob": str(char_model_dir)}
    agents = {
        "alice": AgentSpec(name="alice", model="m"),
        "bob": AgentSpec(name="bob", model="m", system_prompt="Be brief."),
    }
    common = dict(bases=bases, participants=["alice", "bob", "alice"], agents=agents, settings=settings)
    warmup = udpo_warmup_job(dataset_path=dataset, out_path=tmp_path / "warmup.parquet", **common)
    assert list(warmup.columns) == WARMUP_COLUMNS and set(warmup["question_id"]) == set(warm["id"])
    assert len(warmup) == 2 * 3 * 3  # 2 questions × 3 rounds × 3 seats
    assert list(dict.fromkeys(warmup["seat"])) == ["alice", "bob", "alice#1"]

    coefficients = udpo_coefficients_job(
        warmup_path=tmp_path / "warmup.parquet", out_path=tmp_path / "c.json", settings=settings
    )
    assert set(coefficients["seats"]) == {"alice", "bob", "alice#1"}
    assert all(c["beta"] == 0.0 for c in coefficients["seats"].values())  # w/o L_inter
    assert all(c["alpha"] > 0 and c["lam"] > 0 for c in coefficients["seats"].values())
    assert json.loads((tmp_path / "c.json").read_text())["seats"] == coefficients["seats"]
    checks = coefficients["reward_check"]  # the char model never answers "7": every debate is wrong
    assert set(checks) == {"alice", "bob", "alice#1"}
    assert all(c["right_debates"] == 0 and c["wrong_debates"] == 2 for c in checks.values())

    out_dirs = {a: str(tmp_path / "agents" / a) for a in bases}
    metrics = train_job(
        dataset_path=dataset,
        coefficients_path=tmp_path / "c.json",
        out_dirs=out_dirs,
        metrics_path=tmp_path / "metrics.parquet",
        curves_path=tmp_path / "curves.png",
        settings_path=tmp_path / "settings.json",
        checkpoint_dir=tmp_path / "checkpoint",
        run="udpo",
        **common,
    )
    assert list(metrics["step"]) == [1] and (metrics["debates"] == 3).all()
    per_agent = [f"{c}_{a}" for a in ("alice", "bob") for c in ("accuracy_first", "accuracy_last", "loss", "kl")]
    assert list(metrics.columns[-8:]) == per_agent
    assert metrics[per_agent].notna().all().all()  # both agents answered in both rounds and were updated
    assert metrics[["loss_alice", "loss_bob"]].mean(axis=1).iloc[0] == pytest.approx(metrics["loss"].iloc[0])
    per_agent = [c for c in per_agent if c.startswith("accuracy")]
    replies = {"alice": 2 * 3, "bob": 3}  # per round: her two seats' and his one in each of the 3 debates
    for column in per_agent:
        right = metrics[column].iloc[0] * replies[column.rsplit("_", 1)[1]]
        assert right == pytest.approx(round(right)) and 0 <= right <= replies[column.rsplit("_", 1)[1]]
    for agent in bases:
        assert (tmp_path / "agents" / agent / "config.json").exists()
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert json.loads((tmp_path / "settings.json").read_text())["participants"] == ["alice", "bob", "alice"]


def test_a_killed_udpo_warmup_reruns_only_the_chunk_it_was_in(char_model_dir, tmp_path, monkeypatch):
    """The warm-up debates in chunks, each on disk when it ends: a rerun after a kill debates only
    the chunk in flight and writes what an uninterrupted run writes; a chunk left by a run with
    other settings is not reused."""
    import debatelab.training.core.debate_rollouts as rollouts
    from debatelab.data.schema import frame_from_rows
    from debatelab.io import write_parquet_atomic
    from debatelab.llm.agent import AgentSpec
    from debatelab.training.multi_agent_stage import udpo_warmup_job

    dataset = tmp_path / "toy.parquet"
    write_parquet_atomic(frame_from_rows(toy_rows(10)), dataset)
    settings = replace(SETTINGS, udpo={"rounds": 1, "warmup_fraction": 0.5})
    agents = {"alice": AgentSpec(name="alice", model="m"), "bob": AgentSpec(name="bob", model="m")}
    common = dict(
        dataset_path=dataset,
        bases={"alice": str(char_model_dir), "bob": str(char_model_dir)},
        participants=["alice", "bob"],
        agents=agents,
        report_to="none",
        chunk_questions=2,
    )
    whole = udpo_warmup_job(settings=settings, out_path=tmp_path / "whole/warmup.parquet", **common)
    assert whole["question_id"].nunique() == 5  # chunks of 2, 2 and 1 questions

    calls, kill_at = [], [3]
    real = rollouts.rollout_debates

    def counted(policies, rows, *args, **options):
        calls.append([row["id"] for row in rows])
        if len(calls) == kill_at[0]:
            raise KeyboardInterrupt("killed")
        return real(policies, rows, *args, **options)

    monkeypatch.setattr(rollouts, "rollout_debates", counted)
    out = tmp_path / "run/warmup.parquet"
    with pytest.raises(KeyboardInterrupt):
        udpo_warmup_job(settings=settings, out_path=out, **common)
    assert not out.exists() and len(list((tmp_path / "run/warmup.parquet.parts").iterdir())) == 2
    calls.clear()
    resumed = udpo_warmup_job(settings=settings, out_path=out, **common)
    assert len(calls) == 1 and len(calls[0]) == 1  # the last chunk alone
    pd.testing.assert_frame_equal(resumed, whole)
    pd.testing.assert_frame_equal(pd.read_parquet(out), whole)
    assert not (tmp_path / "run/warmup.parquet.parts").exists()

    calls.clear()
    kill_at[0] = 2  # one chunk done with these settings...
    with pytest.raises(KeyboardInterrupt):
        udpo_warmup_job(settings=settings, out_path=tmp_path / "other/warmup.parquet", **common)
    calls.clear()
    kill_at[0] = 0
    hotter = replace(settings, temperature=settings.temperature + 0.5)  # ...is not a chunk of these
    udpo_warmup_job(settings=hotter, out_path=tmp_path / "other/warmup.parquet", **common)
    assert len(calls) == 3


@pytest.mark.slow
def test_two_processes_make_the_same_udpo_steps_as_one(tmp_path, char_model_dir):
    """Data parallel UDPO, two steps with replay: each of two processes debates two of a step's four
    questions; the gathered rewards give the whole batch's baseline and replay priorities (the same
    in both processes, so step 2 draws the same questions everywhere), and each agent's gradients
    are averaged, so adapters, priorities and metrics equal one process's."""
    runs = run_multi_agent_steps("udpo", char_model_dir, tmp_path)
    (one, reports1), (two, reports2) = runs[1], runs[2]
    assert_same_update(one, two, {"alice", "bob"})
    assert_each_agent_wrapped_by_ddp(two, reports2)
    priority = reports1[0]["priority"]
    assert len(priority) == 6 and len(set(priority)) > 1  # the epoch-end refresh gave every question its U(τ)
    assert reports2[0]["priority"] == reports2[1]["priority"] == pytest.approx(priority)
    m1, m2 = reports1[0]["metrics"], reports2[0]["metrics"]
    assert m1["debates"] == m2["debates"] == 4 and m1["sequences"] == m2["sequences"] == 4 * 2 * 2
    assert m1["reward_std"] > 0
    for key in (
        "reward_mean",
        "reward_std",
        "accuracy",
        "r_intra",
        "r_inter",
        "r_sys",
        "loss",
        "kl",
        "response_length",
    ):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5, abs=1e-7), key


def test_model_parallelism_places_each_base_on_gpus_of_its_own():
    from debatelab.gpu_plan import training_placement

    gib = 2**30
    # UDPO's ensemble in bf16 on 8 GPUs of 80 GiB, weights at most 70 % (56 GiB) of each
    sizes = {"scout": 203 * gib, "mixtral": 87 * gib, "phi4": 27 * gib, "qwen3": 16 * gib, "gemma3n": 15 * gib}
    plan = training_placement(sizes, 8, 80 * gib, share=0.7)
    assert plan == {"scout": [0, 1, 2, 3], "mixtral": [4, 5], "phi4": [6], "qwen3": [6], "gemma3n": [7]}
    assert sum(sizes[b] for b, g in plan.items() if g == [6]) <= 56 * gib  # the shared GPU holds both
    with pytest.raises(ValueError, match=r"scout 203.0 GiB.*do not fit on 7 GPU"):
        training_placement(sizes, 7, 80 * gib, share=0.7)
    assert training_placement({"a": 1, "b": 1, "c": 1}, 2, 10, share=0.5) == {"a": [0], "b": [0], "c": [0]}
    assert training_placement({"a": 4, "b": 4}, 2, 10, share=0.5) == {"a": [0], "b": [1]}


def test_without_several_gpus_model_parallelism_keeps_every_base_on_the_one_device(char_model_dir):
    from dataclasses import replace

    policies = AgentPolicies(
        {"alice": char_model_dir, "bob": char_model_dir}, replace(SETTINGS, parallelism="model"), device="cpu"
    )
    assert policies.placement == {} and policies.view("bob").device == "cpu"
    assert toy_settings("udpo", parallelism="model").processes(8) == 1 and toy_settings("udpo").processes(8) == 8


@pytest.mark.slow
def test_agents_on_different_bases_train_separate_models(char_model_dir, tmp_path):
    """Heterogeneous agents (Tang et al., arXiv:2602.07186 §4.3: separate models): each base is its own PeftModel with its
    agent's adapter; a UDPO step moves both adapters and leaves both bases' weights as they were."""
    from conftest import build_char_model

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.methods.udpo import AgentCoefficients, UdpoTrainer

    other = build_char_model(tmp_path / "other-base", seed=1)
    torch.manual_seed(0)
    policies = AgentPolicies({"alice": char_model_dir, "bob": other}, SETTINGS, device="cpu")
    assert len(policies.models) == 2 and policies.model_of("alice") is not policies.model_of("bob")
    frozen = {
        agent: {n: p.detach().clone() for n, p in policies.model_of(agent).named_parameters() if "lora_" not in n}
        for agent in ("alice", "bob")
    }
    assert not torch.equal(*(next(iter(f.values())) for f in frozen.values()))  # two different bases
    rows = toy_rows(4)
    coefficients = {a: AgentCoefficients(0.3, 0.3, 0.3, 1.0, 0.01) for a in ("alice", "bob")}
    trainer = UdpoTrainer(
        frame_from_rows(rows),
        policies,
        replace(SETTINGS, steps=1),
        run="udpo",
        participants=["alice", "bob"],
        rounds=1,
        coefficients=coefficients,
        # all 4 questions: the first 2 debates end with both answers invalid and, since an invalid
        # answer agrees with nothing (issue 69, `uncertainty.measures.udpo_agree`), both earn
        # r = 0, so a 2-debate batch had zero advantages and moved no adapter (with INVALID one
        # shared value their r_intra differed, 0 and 1/2); debates 3 and 4 earn r_sys = 1/6
        questions_per_step=4,
        replay=False,
    )
    metrics = trainer.train()
    assert (metrics["updates"] == 2).all()
    for agent in ("alice", "bob"):
        model = policies.model_of(agent)
        assert list(model.peft_config) == [agent]  # only its own adapter on its base
        assert any(
            float(p.detach().abs().max()) > 0 for n, p in policies.adapter_parameters(agent).items() if "lora_B" in n
        )
        assert model.peft_config[agent].base_model_name_or_path == str(policies.base_of[agent])
        params = dict(model.named_parameters())
        assert all(torch.equal(params[n], w) for n, w in frozen[agent].items())


def test_an_agent_saved_in_place_equals_its_merged_copy(policies, tmp_path):
    """Model parallelism saves a base too large to copy by merging in place: the same folder as the
    copy-and-merge path, and the live adapters afterwards as before."""
    from safetensors.torch import load_file

    with torch.no_grad():
        for p in policies.adapter_parameters("bob").values():
            p.normal_(0, 0.05)  # lora_B starts at zero: give the merge something to add
    before = {n: p.detach().clone() for n, p in policies.model_of("bob").named_parameters()}
    active = policies.model_of("bob").active_adapter
    policies.save("bob", tmp_path / "copy")
    policies.save_in_place("bob", tmp_path / "in_place")
    copied, in_place = (
        load_file(tmp_path / "copy/model.safetensors"),
        load_file(tmp_path / "in_place/model.safetensors"),
    )
    assert copied.keys() == in_place.keys() and not any("lora_" in k or "base_layer" in k for k in in_place)
    assert all(torch.allclose(copied[k], in_place[k], atol=1e-6) for k in copied)
    after = dict(policies.model_of("bob").named_parameters())
    assert all(torch.allclose(after[n], w, atol=1e-6) for n, w in before.items())  # unmerged again
    assert policies.model_of("bob").active_adapter == active


def test_each_agent_s_first_and_last_round_accuracy_loss_and_kl_by_hand():
    """`DebateTrainer.agent_metrics`: the share of an agent's own replies that were right in round 0
    and in the debate's last round, whichever seats it holds, and the mean loss and KL of its updates;
    NaN for an agent without replies or updates."""
    from types import SimpleNamespace

    from debatelab.training.core.debate_trainer import DebateBatch, DebateTrainer
    from debatelab.training.core.rollouts import Rollout

    def reply(turn, correct):
        return Rollout("q", "g", turn, 0, (), "", [1], "stop", None, correct, 0.0)

    batch = DebateBatch(step=0, rows=[], states=[])
    batch.by_agent = {
        "alice": [reply(0, True), reply(0, False), reply(1, False), reply(2, True), reply(2, True)],
        "bob": [reply(0, False), reply(1, True), reply(2, True), reply(2, False), reply(2, False), reply(2, False)],
    }
    updates = [  # UMAD's two turn phases: alice updated twice, bob once
        {"agent": "alice", "loss": 1.0, "kl": 0.1},
        {"agent": "bob", "loss": -1.0, "kl": 0.0},
        {"agent": "alice", "loss": 3.0, "kl": 0.3},
    ]
    trainer = SimpleNamespace(
        policy=SimpleNamespace(agents=["alice", "bob", "carol"]), update_mean=DebateTrainer.update_mean
    )
    out = DebateTrainer.agent_metrics(trainer, batch, updates)
    assert out["accuracy_first_alice"] == 0.5 and out["accuracy_last_alice"] == 1.0  # round 1 is not the last
    assert out["accuracy_first_bob"] == 0.0 and out["accuracy_last_bob"] == 0.25
    assert out["loss_alice"] == 2.0 and out["kl_alice"] == pytest.approx(0.2)
    assert out["loss_bob"] == -1.0 and out["kl_bob"] == 0.0
    assert all(np.isnan(out[f"{c}_carol"]) for c in ("accuracy_first", "accuracy_last", "loss", "kl"))
    assert len(out) == 12


def test_a_training_debate_caps_its_rounds_at_the_protocols_debate_max_tokens():
    """Round 0 samples at the run's max_tokens, the rounds after it at the protocol's
    `debate_max_tokens` (the debate stage's budgets for the same protocol)."""
    from contextlib import nullcontext

    from debatelab.llm.base import Generation

    budgets: dict[int, set] = {}

    class Backend:
        def generate(self, requests, progress=None):
            for r in requests:
                round_ = 0 if len(r.messages) and "agent" not in r.messages[-1]["content"] else 1
                budgets.setdefault(round_, set()).add(r.sampling.max_tokens)
            return [
                [Generation(text="\\boxed{2}", completion_tokens=1, prompt_tokens=3, token_ids=[5])] for _ in requests
            ]

    class Policies:
        agents = ["alice", "bob"]
        base_of = {"alice": "m", "bob": "m"}

        def acting(self, agent):
            return nullcontext()

        def backend(self, agent, label):
            return Backend()

    protocol = {"kind": "all_to_all", "template": "umad", "debate_max_tokens": 4}
    rollout_debates(Policies(), ROWS[:1], ["alice", "bob"], SETTINGS, step=0, rounds=1, protocol=protocol)
    assert budgets == {0: {SETTINGS.max_tokens}, 1: {4}}
