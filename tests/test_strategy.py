"""The step strategy apart from the loss (training.core.strategy): which kind a trainer picks, and
what one process's zeroing, empty pass, clipping and step do."""

from __future__ import annotations

import pytest
import torch
from conftest import toy_settings

from debatelab.training.core.strategy import StepStrategy
from debatelab.training.core.trainer import BaseTrainer
from debatelab.training.core.weights import optimizer_and_schedule


def _alone(max_grad_norm=0.0):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer, _ = optimizer_and_schedule(model.parameters(), toy_settings(learning_rate=0.1, warmup_steps=0))
    return model, StepStrategy(
        model=model, optimizer=optimizer, trainable=list(model.parameters()), max_grad_norm=max_grad_norm
    )


def test_alone_a_step_zeroes_then_clips_the_summed_gradients_and_steps():
    model, strategy = _alone(max_grad_norm=0.5)
    assert strategy.kind == "alone" and strategy.padded([[1], [2]]) == [[1], [2]]
    x = torch.ones(2, 4)
    for p in model.parameters():
        p.grad = torch.full_like(p, 7.0)  # left over from before: `begin` clears it
    strategy.begin()
    assert all(p.grad is None for p in model.parameters())
    before = [p.detach().clone() for p in model.parameters()]
    for k in range(2):
        with strategy.micro(last=k == 1):
            strategy.backward(model(x).sum() * 10)
    strategy.empty(lambda: (_ for _ in ()).throw(AssertionError("no forward pass alone")))
    norm = torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    assert norm > 0.5  # two micro-batches summed, the empty pass added nothing
    strategy.step()
    assert torch.linalg.vector_norm(torch.cat([p.grad.reshape(-1) for p in model.parameters()])) <= 0.5 + 1e-6
    assert all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_a_trainer_steps_each_policy_through_its_own_engine_or_ddp_wrapper():
    """The strategy follows what `distribute` gave the policy (a single policy or an agent's view
    alike): its engine, else its DDP wrapper, else the model alone; several processes with neither
    are refused rather than left unreduced."""

    class View:
        def __init__(self):
            self.model = torch.nn.Linear(2, 2)
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
            self.engine = self.wrapper = None

    trainer = BaseTrainer.__new__(BaseTrainer)
    trainer.policy, trainer.settings, trainer.world = View(), toy_settings(max_grad_norm=1.0), 1
    alone = trainer.strategy_for()
    assert alone.kind == "alone" and alone.model is trainer.policy.model and alone.max_grad_norm == 1.0
    trainer.world = 2
    with pytest.raises(RuntimeError, match="no DDP wrapper or engine"):
        trainer.strategy_for()
    view = View()
    view.wrapper = wrapper = object()
    ddp = trainer.strategy_for(view)
    assert ddp.kind == "ddp" and ddp.model is wrapper and ddp.optimizer is view.optimizer
    view.engine = engine = object()
    assert trainer.strategy_for(view).kind == "deepspeed" and trainer.strategy_for(view).model is engine


def test_a_ddp_pass_without_sequences_runs_through_the_wrapper():
    """DDP arms its reduction in the wrapper's forward: a process with nothing in a pass the others
    run must still go through it (the zero-loss pass), not a bare backward over the weights."""
    model = torch.nn.Linear(2, 2)
    strategy = StepStrategy(model=model, optimizer=None, trainable=list(model.parameters()), world=2, ddp=True)
    calls = []
    strategy.empty(lambda: calls.append(1) or model(torch.ones(1, 2)).sum() * 0.0)
    assert calls == [1] and all(torch.equal(p.grad, torch.zeros_like(p)) for p in model.parameters())


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"FSDP_VERSION": "1"}, "fsdp_version 1"),
        ({"FSDP_VERSION": "2", "FSDP_OFFLOAD_PARAMS": "true"}, "fsdp_offload_params"),
        ({"FSDP_VERSION": "2", "FSDP_CPU_RAM_EFFICIENT_LOADING": "true"}, "fsdp_cpu_ram_efficient_loading"),
        ({"FSDP_VERSION": "2", "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT"}, "fsdp_state_dict_type FULL_STATE_DICT"),
    ],
)
def test_an_fsdp_config_this_engine_does_not_run_is_refused_naming_its_setting(monkeypatch, env, refused):
    """What `accelerate launch` exports from an FSDP config (FSDP_*) is read back through accelerate's
    plugin: FSDP1, parameter offload, rank-0-only loading and whole-model checkpoints are refused by
    name, before any model is wrapped."""
    from debatelab.training.core import fsdp, zero

    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert fsdp.requested() and zero.requested() and not zero.deepspeed_requested()
    assert zero.layout(2) == "fsdp2 x 2" and zero.layout(1) == "fsdp2 x 1"  # one process runs the engine too
    with pytest.raises(ValueError, match=refused):
        fsdp.plugin()
