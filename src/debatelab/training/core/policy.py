"""The policy a single-policy method trains (DAPO, SDRL): a Hugging Face causal LM with a PEFT LoRA
adapter (default) or all its weights trainable, its optimizer and learning-rate schedule, a backend
over the live weights for rollouts, and the plain model folder it is saved as.

It is the one-agent case of a multi-agent run's `agents.AgentPolicies`: the same loading, adapter,
optimizer, reference, rollout engines, sharded weights and saving, for one agent named `AGENT`,
PEFT's default adapter name, so its parameters (and its checkpoints) are named as a plain PEFT
model's; its DeepSpeed / FSDP engine or DDP wrapper is the agent's (`AgentPolicies.distribute`).
`Policy` adds the single-policy interface the trainers and checkpoints use: `model`, `tokenizer`,
`optimizer`, `scheduler`, `engine` and `wrapper` of that agent, its weights by their own names, and
a checkpoint's layout of one policy (its engine's checkpoint in `optimizer-zero/` itself)."""

from __future__ import annotations

from pathlib import Path

from .agents import AgentPolicies

#: The one agent of a single policy: PEFT's default adapter name.
AGENT = "default"


class Policy(AgentPolicies):
    def __init__(self, model_path: str | Path, settings, *, device: str):
        super().__init__({AGENT: model_path}, settings, device=device)
        self.model_path = str(model_path)

    @property
    def model(self):
        return self.model_of(AGENT)

    @property
    def tokenizer(self):
        return self.tokenizers[self.base_of[AGENT]]

    @property
    def optimizer(self):
        return self.optimizers[AGENT]

    @property
    def scheduler(self):
        return self.schedulers[AGENT]

    @property
    def engine(self):
        """Its DeepSpeed or FSDP engine, or None."""
        return self.engine_of(AGENT)

    @property
    def wrapper(self):
        """Its DDP wrapper, or None."""
        return self.wrapper_of(AGENT)

    def checkpoint_engines(self) -> dict:
        """Its engine's partitions go in `optimizer-zero/` itself (the folder named "")."""
        return {"": self.engine} if self.engine is not None else {}

    def checkpoint_optimizer(self):
        """Its optimizer, saved whole unless an engine holds it in partitions."""
        return None if self.engine is not None else self.optimizer

    def trainable_state(self, for_checkpoint: bool = False) -> dict:
        """The weights the optimizer changes (the adapter, or every weight) by parameter name. Under
        ZeRO-3 or FSDP every process must call it (gathered from all of them). `for_checkpoint`: none
        under DeepSpeed or FSDP, whose engine's own checkpoint holds them."""
        prefix = f"{AGENT}/"
        return {k.removeprefix(prefix): v for k, v in super().trainable_state(for_checkpoint).items()}

    def load_trainable_state(self, state: dict) -> None:
        """Checkpointed weights back into the policy (split among the processes: by every process)."""
        params = self.trainable_parameters(AGENT)
        missing = [n for n in state if n not in params]
        if missing:
            raise ValueError(f"checkpoint names parameters the policy lacks: {missing[:3]}")
        super().load_trainable_state({f"{AGENT}/{n}": v for n, v in state.items()})

    def backend(self, model_id: str):  # noqa: D401 - one agent: no name to give
        """A backend that generates with the live weights (`AgentPolicies.backend` of the one agent)."""
        return super().backend(AGENT, model_id)

    def reference_logprobs(self, compute):
        """`compute(model)` under the reference policy: the base without the adapter, or a frozen copy."""
        return super().reference_logprobs(AGENT, compute)

    def save(self, out_dir: str | Path) -> None:
        """The trained policy as a plain Hugging Face folder (LoRA merged into the base)."""
        super().save(AGENT, out_dir, adapter=False)
