"""How one optimizer step of one policy (or of one agent) is taken across the training processes,
apart from the loss the trainer computes (`trainer.BaseTrainer.update_policy`). `StepStrategy`
is one of:

* alone (one process): plain backward passes, clipping at `max_grad_norm`, the optimizer's step;
* DDP: the agent's `DistributedDataParallel` wrapper (accelerate's, `distributed.data_parallel`:
  a single policy's model, a fully fine-tuned agent's, or one agent's adapter) reduces the
  gradients in the backward pass of the step's last micro-batch (`no_sync` before it);
* DeepSpeed ZeRO (`zero.py`) or FSDP2 (`fsdp.py`): the engine's backward pass and step (it
  reduces, clips and zeroes), every process running as many passes (`padded`).

Which one an agent gets is `agents.AgentPolicies.distribute`'s choice. The trainer zeroes
(`begin`), runs each micro-batch inside `micro(last)`, calls `backward` on its loss (or `empty`
where this process has no sequences in a pass the others run), then `step`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import zero
from .distributed import all_reduce


@dataclass
class StepStrategy:
    model: object  # what the forward passes run through: the DDP wrapper, the DeepSpeed / FSDP engine, or the model
    optimizer: object
    trainable: list  # the parameters the optimizer changes
    world: int = 1
    engine: object = None  # the DeepSpeed or FSDP engine, if any
    ddp: bool = False  # `model` is a DistributedDataParallel wrapper
    max_grad_norm: float = 0.0

    def __post_init__(self):
        if self.world > 1 and self.engine is None and not self.ddp:
            raise RuntimeError(
                f"training: {self.world} processes but no DDP wrapper or engine reduces the gradients "
                "(agents.AgentPolicies.distribute was not called)"
            )

    @property
    def kind(self) -> str:
        if self.engine is not None:
            return "deepspeed"
        return "ddp" if self.ddp else "alone"

    def padded(self, passes: list, backward: bool = True) -> list:
        """`passes` (micro-batches) padded with empty ones to the most any process has, where the engine
        needs every process to run as many: ZeRO-3 and FSDP gather each layer's weights from all of them in
        every forward pass, and ZeRO-1/2 reduce the gradients in the backward pass of the last
        micro-batch, which must be the same one everywhere (`backward`: the passes have one). DDP and
        alone: as given (DDP reduces in each process's own last pass; one without any joins with an
        empty pass, `trainer.BaseTrainer.update_policy`)."""
        if not (zero.sharded(self.engine) or (backward and self.engine is not None)):
            return passes
        return passes + [[] for _ in range(int(all_reduce(len(passes), "max")) - len(passes))]

    def begin(self) -> None:
        """Before a step's first micro-batch: no gradients (an engine zeroes them in its own step)."""
        if self.engine is None:
            self.optimizer.zero_grad(set_to_none=True)

    def micro(self, last: bool):
        """The context of one micro-batch's passes: DeepSpeed reduces the gradients after the `last`,
        DDP too (it skips the reduction before it)."""
        if self.engine is not None:
            self.engine.set_gradient_accumulation_boundary(last)
        if self.ddp and not last:
            return self.model.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss) -> None:
        if self.engine is not None:
            self.engine.backward(loss, scale_wrt_gas=False)  # the loss carries its own normaliser
        else:
            loss.backward()

    def empty(self, zero_loss_pass) -> None:
        """This process has no sequences in a pass the others run: a zero loss keeps the reduction in
        step. An engine, and a DDP wrapper (its reduction is armed by its forward), need a real
        forward pass through `model` (`zero_loss_pass()`: one pad token, its loss times 0); alone, a
        zero sum over the weights gives every gradient."""
        if self.engine is not None or self.ddp:
            self.backward(zero_loss_pass())
        else:
            self.backward(sum(p.sum() for p in self.trainable) * 0.0)

    def step(self) -> None:
        """After the step's last micro-batch (DDP has averaged the gradients): clip, step."""
        if self.engine is not None:
            self.engine.step()
            return
        import torch

        if self.max_grad_norm:
            torch.nn.utils.clip_grad_norm_(self.trainable, self.max_grad_norm)
        self.optimizer.step()
