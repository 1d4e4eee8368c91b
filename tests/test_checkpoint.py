"""Training checkpoints under faults (issue 29): a checkpoint cut short is set aside and the run
resumes from the one before it, or from the start; a checkpoint of other settings is discarded with
a log line naming what changed; raising `steps` of a finished run resumes from its last checkpoint."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from conftest import folder_weights, toy_settings
from test_training import TOY, _job, _toy_dataset

from debatelab.training.core.checkpoint import TrainState, load_checkpoint, save_checkpoint
from debatelab.training.core.policy import Policy

PARTS = {"settings": {"learning_rate": 0.001, "steps_per_epoch": 4}, "data": ["q1", "q2"], "model": "abc"}


@pytest.fixture
def policy(char_model_dir):
    return Policy(
        char_model_dir, toy_settings(lora={"r": 4, "alpha": 8}, learning_rate=1e-3, warmup_steps=0), device="cpu"
    )


def _nudge(policy, amount: float) -> dict:
    """Change the trainable weights (as an update would); returns them."""
    with torch.no_grad():
        for p in policy.model.parameters():
            if p.requires_grad:
                p.add_(amount)
    return policy.trainable_state()


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_cut_short_is_set_aside_and_the_one_before_it_resumed(policy, tmp_path, caplog):
    at_step = {}
    for step in (1, 2):
        at_step[step] = _nudge(policy, 0.01)
        save_checkpoint(
            tmp_path, policy, TrainState(step=step, metrics=[{"step": s} for s in range(1, step + 1)]), PARTS
        )
    assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-00001", "step-00002"]  # the newest two are kept
    weights = tmp_path / "step-00002/trainable.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # a full disk
    _nudge(policy, 0.5)
    with caplog.at_level("WARNING"):
        state = load_checkpoint(tmp_path, policy, PARTS)
    assert state.step == 1 and [m["step"] for m in state.metrics] == [1]
    assert _same(policy.trainable_state(), at_step[1])
    assert "checkpoint" in caplog.text and "step-00002 does not load" in caplog.text
    assert (tmp_path / "corrupt-step-00002").is_dir() and not (tmp_path / "step-00002").exists()
    # the run goes on from step 1: its next checkpoint is kept beside step 1's, and resumed next time
    save_checkpoint(tmp_path, policy, TrainState(step=2), PARTS)
    assert load_checkpoint(tmp_path, policy, PARTS).step == 2


def test_with_every_checkpoint_broken_the_run_starts_afresh_and_the_policy_is_untouched(policy, tmp_path, caplog):
    for step in (1, 2):
        _nudge(policy, 0.01)
        save_checkpoint(tmp_path, policy, TrainState(step=step), "hash")
    (tmp_path / "step-00002/state.json").write_text('{"step": 2, "fingerp')  # cut mid-write
    (tmp_path / "step-00001/optimizer.pt").write_bytes(b"")
    before = _nudge(policy, 0.5)
    with caplog.at_level("WARNING"):
        assert load_checkpoint(tmp_path, policy, "hash") is None
    assert _same(policy.trainable_state(), before)  # nothing half-restored
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["corrupt-step-00001", "corrupt-step-00002"]
    assert caplog.text.count("does not load") == 2


def test_a_kill_mid_save_costs_no_steps_and_leaves_no_folder_behind(policy, tmp_path):
    """A kill after step 2's rename but before `latest` was rewritten left `latest` at step 1, and
    the resume went back to step 1 (redoing a step's rollouts): the newest step is resumed. A kill
    inside a save left its unfinished `.step-*` folder (weights and optimizer) for good: the next
    save removes it, as it removes a killed save's ZeRO partitions."""
    at_step = {}
    for step in (1, 2):
        at_step[step] = _nudge(policy, 0.01)
        save_checkpoint(tmp_path, policy, TrainState(step=step), PARTS)
    (tmp_path / "latest").write_text("step-00001")
    _nudge(policy, 0.5)
    assert load_checkpoint(tmp_path, policy, PARTS).step == 2 and _same(policy.trainable_state(), at_step[2])
    for leftover in (".step-00003.k1ll3d", ".zero-step-00003"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "trainable.safetensors").write_bytes(b"\0" * 1024)
    save_checkpoint(tmp_path, policy, TrainState(step=3), PARTS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00002", "step-00003"]


def test_partitions_of_another_world_size_set_the_checkpoint_aside_before_anything_is_restored(
    policy, tmp_path, monkeypatch, caplog
):
    """A DeepSpeed checkpoint whose files are not those of this run's processes (a killed save of 4
    processes mixed into a save of 2) used to load its weights and then stop the run in the optimizer's
    restore. It is set aside before anything is restored; so is one of the partitions an earlier
    debatelab wrote (`rank-R.pt`), naming why."""
    for step, layout in ((1, "four processes"), (2, "earlier")):
        save_checkpoint(tmp_path, policy, TrainState(step=step), PARTS)
        engine = tmp_path / f"step-{step:05d}/optimizer-zero"
        (engine / "pytorch_model").mkdir(parents=True)
        if layout == "earlier":
            (engine / "rank-0.pt").write_bytes(b"")
            (engine / "rank-1.pt").write_bytes(b"")
            continue
        (engine / "pytorch_model/mp_rank_00_model_states.pt").write_bytes(b"")
        for rank in range(4):
            (engine / f"pytorch_model/zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
            (engine / f"random_states_{rank}.pkl").write_bytes(b"")
    # a ZeRO-2 engine, to the loader
    monkeypatch.setattr(policy, "checkpoint_engines", lambda: {"": SimpleNamespace(zero_optimization_stage=lambda: 2)})
    before = _nudge(policy, 0.5)
    with caplog.at_level("WARNING"):
        assert load_checkpoint(tmp_path, policy, PARTS, rank=0, world=2) is None
    assert _same(policy.trainable_state(), before)
    assert "written by an earlier debatelab" in caplog.text and (tmp_path / "corrupt-step-00002").is_dir()
    assert "is not one of 2 processes (it holds ranks [0, 1, 2, 3])" in caplog.text
    assert (tmp_path / "corrupt-step-00001").is_dir()


def test_an_fsdp_checkpoint_without_the_weights_shards_is_set_aside_before_anything_is_restored(
    policy, tmp_path, monkeypatch, caplog
):
    """An FSDP checkpoint as an earlier debatelab wrote it (the optimizer's shards alone, beside whole
    weights) is set aside by name before anything is restored: the engine now reads its weights from
    its own shards."""
    from debatelab.training.core.fsdp import FsdpEngine

    save_checkpoint(tmp_path, policy, TrainState(step=1), PARTS)
    engine = tmp_path / "step-00001/optimizer-zero"
    engine.mkdir()
    (engine / ".metadata").write_bytes(b"")
    monkeypatch.setattr(policy, "checkpoint_engines", lambda: {"": object.__new__(FsdpEngine)})
    before = _nudge(policy, 0.5)
    with caplog.at_level("WARNING"):
        assert load_checkpoint(tmp_path, policy, PARTS, rank=0, world=2) is None
    assert _same(policy.trainable_state(), before)
    assert "lacks pytorch_model_fsdp_0/.metadata, optimizer_0/.metadata" in caplog.text
    assert (tmp_path / "corrupt-step-00001").is_dir()


def test_a_checkpoint_of_other_settings_is_discarded_naming_what_changed(policy, tmp_path, caplog):
    save_checkpoint(tmp_path, policy, TrainState(step=3), PARTS)
    changed = {**PARTS, "settings": {**PARTS["settings"], "learning_rate": 0.002}, "data": ["q1", "q3"]}
    with caplog.at_level("WARNING"):
        assert load_checkpoint(tmp_path, policy, changed) is None
    assert "learning_rate 0.001 -> 0.002, the training questions" in caplog.text and "starting afresh" in caplog.text
    # set aside, so the new run's own checkpoints are neither mixed with them nor pruned in their favour
    assert (tmp_path / "stale-step-00003").is_dir() and not (tmp_path / "latest").exists()
    save_checkpoint(tmp_path, policy, TrainState(step=1), changed)
    assert load_checkpoint(tmp_path, policy, changed).step == 1
    assert (
        json.loads((tmp_path / "step-00001/state.json").read_text())["fingerprint_parts"]["settings"]
        == changed["settings"]
    )


@pytest.mark.slow
def test_raising_steps_of_a_finished_run_resumes_from_its_last_checkpoint(tmp_path, char_model_dir, caplog):
    """Two steps, then the same run with steps: 3 continues from step 2 and ends with the weights of
    an uninterrupted three-step run; a changed learning rate instead starts afresh and says why."""
    from debatelab.training.stage import train_job

    dataset = _toy_dataset(tmp_path / "toy.parquet")
    small = {
        "dynamic_sampling": False,
        "prompts_per_step": 2,
        "rollouts_per_prompt": 3,
        "sampling_batch": 2,
        "mini_batch_size": 6,
        "micro_batch_size": 6,
    }
    settings = lambda **kw: toy_settings(**{**TOY, **small, **kw})  # noqa: E731
    train_job(**_job(tmp_path, char_model_dir, dataset, settings(steps=3), "uninterrupted"))
    train_job(**_job(tmp_path, char_model_dir, dataset, settings(steps=2), "raised"))
    with caplog.at_level("INFO", logger="debatelab.training.core.checkpoint"):
        metrics = train_job(**_job(tmp_path, char_model_dir, dataset, settings(steps=3), "raised"))
    assert "resuming from" in caplog.text and "(step 2)" in caplog.text
    assert metrics["step"].tolist() == [1, 2, 3]
    first, second = folder_weights(tmp_path / "uninterrupted/model"), folder_weights(tmp_path / "raised/model")
    assert first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)

    caplog.clear()
    with caplog.at_level("INFO", logger="debatelab.training.core.checkpoint"):
        train_job(**_job(tmp_path, char_model_dir, dataset, settings(steps=4, learning_rate=1e-3), "raised"))
    assert "learning_rate 0.003 -> 0.001" in caplog.text and "resuming from" not in caplog.text


class _RunsCode:
    """A pickle that runs code when loaded (what a planted optimizer.pt could hold)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("planted", ["optimizer.pt", "rng.pt"])
def test_a_checkpoint_that_would_run_code_is_never_unpickled_but_set_aside(policy, tmp_path, planted, caplog):
    checkpoints, marker = tmp_path / "ckpt", tmp_path / "ran"
    save_checkpoint(checkpoints, policy, TrainState(step=1), "hash")
    torch.save(
        {"optimizer": _RunsCode(marker), "scheduler": {}, "python": _RunsCode(marker)},
        checkpoints / "step-00001" / planted,
    )
    with caplog.at_level("WARNING"):
        assert load_checkpoint(checkpoints, policy, "hash") is None
    assert not marker.exists()  # weights_only: the planted object was never built
    assert (checkpoints / "corrupt-step-00001").is_dir() and "does not load" in caplog.text


def test_a_checkpoint_restores_numpy_and_python_random_state_under_weights_only(policy, tmp_path):
    import random

    import numpy as np

    save_checkpoint(tmp_path, policy, TrainState(step=1), "hash")
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(1)  # move every generator on
    assert load_checkpoint(tmp_path, policy, "hash").step == 1
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
