"""The trainable agents of a multi-agent run (UDPO, MAPPO, RMAAC, UMAD): one PEFT LoRA adapter per agent.

Agents on the same base model share one copy of its weights: one PeftModel per base, holding one
named adapter per agent (`add_adapter`); agents on different bases get a PeftModel each. PEFT's
`set_adapter(name)` makes that adapter the only active and trainable one, so a forward pass is
agent i's policy and a backward pass reaches agent i's adapter only. Each agent has its own AdamW
and schedule. With every adapter disabled the model is the frozen base: the reference policy.

Model parallelism (`parallelism: model`, one process seeing several GPUs): each base model is
placed on GPUs of its own, a base too large for one GPU spread evenly over several
(`gpu_plan.training_placement`, transformers' `device_map="balanced"` with `max_memory` on those
GPUs); a heterogeneous ensemble (UDPO's five models) then trains in one process. Rollouts run on
transformers there.

`AgentPolicies.view(agent)` is a single-policy view (model, tokenizer, optimizer, scheduler,
reference) with the interface of `policy.Policy`, so the update code serves both. The agents'
optimizers and schedules together (`AgentPolicies.optimizer`, `.scheduler`: `PerAgent`) are what a
checkpoint saves and restores, as it does one policy's.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from ...gpu_plan import WEIGHTS_SHARE, training_placement, weights_bytes
from .distributed import rank_and_world
from .policy import enable_gradient_checkpointing, optimizer_and_schedule, resolve_dtype

log = logging.getLogger(__name__)


class PerAgent:
    """Several agents' optimizers (or schedules) as one object, for checkpoints."""

    def __init__(self, parts: dict):
        self.parts = parts

    def state_dict(self) -> dict:
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, state: dict) -> None:
        for name, part in self.parts.items():
            part.load_state_dict(state[name])

    def get_last_lr(self):
        return next(iter(self.parts.values())).get_last_lr()


class AgentView:
    """Agent `name` of an `AgentPolicies`: activating it is the caller's job (`AgentPolicies.activate`)."""

    def __init__(self, owner: AgentPolicies, name: str):
        self.owner, self.name = owner, name
        self.model = owner.model_of(name)
        self.tokenizer = owner.tokenizers[owner.base_of[name]]
        self.optimizer, self.scheduler = owner.optimizers[name], owner.schedulers[name]
        self.device, self.settings = owner.device_of(name), owner.settings

    def reference_logprobs(self, compute):
        """`compute(model)` under the agent's reference: its `ref_<agent>` copy when the run re-syncs
        one (`AgentPolicies.sync_references`), else the frozen base (every adapter off)."""
        reference = f"ref_{self.name}"
        if reference not in self.model.peft_config:
            with self.model.disable_adapter():
                return compute(self.model)
        self.model.set_adapter(reference)
        try:
            return compute(self.model)
        finally:
            self.model.set_adapter(self.name)


class AgentPolicies:
    def __init__(self, bases: dict[str, str | Path], settings, *, device: str):
        """`bases`: agent name -> base model folder (agents naming the same folder share it)."""
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if settings.finetuning != "lora":
            raise ValueError(
                "multi-agent training: finetuning must be 'lora' (one adapter per agent on a shared "
                "base); full fine-tuning of N agents would hold N copies of the model"
            )
        self.settings, self.device = settings, device
        self.agents = list(bases)
        self.base_of = {name: str(Path(path)) for name, path in bases.items()}
        lora = settings.lora

        def config():  # a fresh one per adapter: PEFT writes the base's path into the config it is given
            return LoraConfig(
                r=lora.r,
                lora_alpha=lora.alpha,
                lora_dropout=lora.dropout,
                target_modules=lora.target_modules,
                task_type="CAUSAL_LM",
            )

        self.models, self.tokenizers = {}, {}
        self.placement = self._placement(device)  # base folder -> its GPUs (model parallelism), else empty
        for name in self.agents:
            base = self.base_of[name]
            if base not in self.models:
                tokenizer = AutoTokenizer.from_pretrained(base)
                if tokenizer.pad_token is None:
                    tokenizer.pad_token = tokenizer.eos_token
                dtype = resolve_dtype(settings.dtype, device)
                if base in self.placement:  # its layers over its own GPUs (PEFT puts each adapter beside its layer)
                    gpus = self.placement[base]
                    capacity = torch.cuda.get_device_properties(gpus[0]).total_memory
                    model = AutoModelForCausalLM.from_pretrained(
                        base,
                        dtype=dtype,
                        device_map="balanced" if len(gpus) > 1 else {"": gpus[0]},
                        max_memory={g: int(capacity * 0.9) for g in gpus},
                    )
                else:
                    model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
                enable_gradient_checkpointing(model, settings)
                model.generation_config.pad_token_id = tokenizer.pad_token_id
                model = get_peft_model(model, config(), adapter_name=name)
                self.models[base] = model if base in self.placement else model.to(device)
                self.tokenizers[base] = tokenizer
            else:
                self.models[base].add_adapter(name, config())
                if base not in self.placement:
                    self.models[base].to(device)
        self.optimizers, self.schedulers = {}, {}
        for name in self.agents:
            params = self.adapter_parameters(name)
            self.optimizers[name], self.schedulers[name] = optimizer_and_schedule(params.values(), settings)
        from .vllm_rollouts import resolve_rollout_backend

        if self.placement and settings.rollout_backend == "vllm":
            raise ValueError(
                "multi-agent training: parallelism 'model' rolls out on transformers; set rollout_backend "
                "to auto or transformers"
            )
        self.rollout_backend = "transformers" if self.placement else resolve_rollout_backend(settings.rollout_backend)
        self._engines = {}  # base folder -> its vLLM engine, started on the first rollouts
        self.attached = {}  # "@name" -> a method's own trainable module (MAPPO's critic), checkpointed with the agents
        log.info(
            "%d agents on %d base model(s), one LoRA adapter each (r=%d), rollouts on %s: %s",
            len(self.agents),
            len(self.models),
            lora.r,
            self.rollout_backend,
            ", ".join(f"{a} on {Path(self.base_of[a]).name}" for a in self.agents),
        )

    def _placement(self, device: str) -> dict[str, list[int]]:
        """Model parallelism's GPUs per base (`gpu_plan.training_placement`: the weights at most
        `gpu_plan.WEIGHTS_SHARE` of a GPU, a large base over GPUs of its own), when asked for and there
        are several GPUs."""
        import torch

        if self.settings.parallelism != "model" or not str(device).startswith("cuda") or torch.cuda.device_count() < 2:
            return {}
        bases = list(dict.fromkeys(self.base_of.values()))
        capacity = torch.cuda.get_device_properties(0).total_memory
        plan = training_placement(
            {b: weights_bytes(b) for b in bases}, torch.cuda.device_count(), capacity, WEIGHTS_SHARE
        )
        log.info(
            "model parallelism over %d GPUs: %s",
            torch.cuda.device_count(),
            "; ".join(f"{Path(b).name} on cuda:{','.join(map(str, g))}" for b, g in plan.items()),
        )
        return plan

    @property
    def optimizer(self) -> PerAgent:
        """Every agent's optimizer (and attached modules', `attach`) as one, for checkpoints."""
        return PerAgent(self.optimizers)

    @property
    def scheduler(self) -> PerAgent:
        """Every agent's learning-rate schedule as one (`get_last_lr`: the first agent's)."""
        return PerAgent(self.schedulers)

    def model_of(self, name: str):
        return self.models[self.base_of[name]]

    def device_of(self, name: str) -> str:
        """Where agent `name`'s inputs go: its base's first device (its embeddings) under model parallelism."""
        model = self.model_of(name)
        return str(model.get_input_embeddings().weight.device) if self.placement else self.device

    def adapter_parameters(self, name: str) -> dict:
        """Agent `name`'s adapter weights by parameter name (PEFT names them `...lora_A.<name>.weight`)."""
        owner = name if name in self.base_of else name.removeprefix("ref_")  # ref_<agent> sits on the agent's base
        marker = f".{name}."
        return {n: p for n, p in self.model_of(owner).named_parameters() if marker in n and "lora_" in n}

    def reference_state(self) -> dict:
        """The re-synced references' weights (empty when the reference is the base), for checkpoints."""
        out = {}
        for name in self.agents:
            reference = f"ref_{name}"
            if reference in self.model_of(name).peft_config:
                out.update(
                    {f"{reference}/{n}": p.detach().clone() for n, p in self.adapter_parameters(reference).items()}
                )
        return out

    def activate(self, name: str) -> None:
        """Make `name`'s adapter the active (and only trainable) one on its base."""
        model = self.model_of(name)
        if model.active_adapter != name:
            model.set_adapter(name)

    def backend(self, name: str, model_id: str):
        """A backend that generates as agent `name` as its adapter is now. On vLLM (`rollout_backend`):
        one engine per base model holds the frozen base once and serves each agent's latest adapter
        (saved afresh before each of its batches). On transformers: the shared training model, as
        whichever adapter is active when it runs (`with policies.acting(name): ...`)."""
        base = self.base_of[name]
        if self.rollout_backend == "vllm":
            if base not in self._engines:
                from .vllm_rollouts import VLLMRollouts

                dtype = str(resolve_dtype(self.settings.dtype, self.device)).removeprefix("torch.")
                sharing = sum(self.base_of[a] == base for a in self.agents)
                rank, world = rank_and_world()  # data parallel: an engine per process, on its GPU
                self._engines[base] = VLLMRollouts(
                    base, self.settings, dtype=dtype, adapters=sharing, rank=rank, world=world
                )
            return self._engines[base].adapter_backend(self.model_of(name), name, model_id)
        from ...llm.transformers_backend import TransformersBackend

        return TransformersBackend.from_model(
            self.model_of(name), self.tokenizers[base], model_id=model_id, batch_size=self.settings.rollout_batch_size
        )

    def rollouts_done(self) -> None:
        """A step's debates are in: sleeping-capable engines free their GPU memory for the update."""
        for engine in self._engines.values():
            engine.pause()

    def close(self) -> None:
        for engine in self._engines.values():
            engine.close()
        self._engines = {}

    def train(self, mode: bool = True) -> None:
        for model in self.models.values():
            model.train(mode)

    def view(self, name: str) -> AgentView:
        return AgentView(self, name)

    @contextlib.contextmanager
    def acting(self, name: str):
        """`with policies.acting(agent):` run the model as that agent, then leave the active adapter as it was."""
        model = self.model_of(name)
        before = model.active_adapter
        self.activate(name)
        try:
            yield self.view(name)
        finally:
            if model.active_adapter != before:
                model.set_adapter(before)

    def sync_references(self) -> None:
        """θ_ref ← θ for every agent (UDPO's `ref_sync_steps`): the agent's adapter copied into a
        frozen `ref_<agent>` adapter on the same base (created on the first call)."""
        import torch

        for name in self.agents:
            model, reference = self.model_of(name), f"ref_{name}"
            if reference not in model.peft_config:
                model.add_adapter(reference, model.peft_config[name])
            active = model.active_adapter
            params = dict(model.named_parameters())
            with torch.no_grad():
                for n, p in self.adapter_parameters(name).items():
                    params[n.replace(f".{name}.", f".{reference}.")].copy_(p)
            model.set_adapter(active)  # set_adapter leaves only the active adapter trainable

    # -- checkpoints and outputs ----------------------------------------------------------
    def attach(self, name: str, module, optimizer) -> None:
        """A method's own trainable module (MAPPO's critic) and its optimizer, saved and restored with the
        agents' checkpoints as `@name`. Call it before the trainer is built."""
        key = f"@{name}"
        self.attached[key] = module
        self.optimizers[key] = optimizer

    def trainable_state(self) -> dict:
        """Every agent's adapter (and its re-synced reference, if any), and attached modules, for checkpoints."""
        own = {
            f"{name}/{n}": p.detach().clone() for name in self.agents for n, p in self.adapter_parameters(name).items()
        }
        attached = {
            f"{key}/{n}": p.detach().clone() for key, m in self.attached.items() for n, p in m.state_dict().items()
        }
        return {**own, **self.reference_state(), **attached}

    def load_trainable_state(self, state: dict) -> None:
        import torch

        if any(k.startswith("ref_") for k in state):
            self.sync_references()  # creates the reference adapters; their weights come next
        for name in [*self.agents, *(f"ref_{a}" for a in self.agents)]:
            params = self.adapter_parameters(name)
            with torch.no_grad():
                for n, p in params.items():
                    if f"{name}/{n}" in state:
                        p.copy_(state[f"{name}/{n}"])
        for key, module in self.attached.items():
            module.load_state_dict({n: state[f"{key}/{n}"].to("cpu") for n in module.state_dict()})

    def save(self, name: str, out_dir: str | Path) -> None:
        """Agent `name` as a plain Hugging Face folder: its adapter merged into a copy of its base, or
        for a base spread over GPUs (too large to copy) merged in place, saved, then unmerged."""
        import copy

        from ...models import save_model_folder

        if self.base_of[name] in self.placement:
            self.save_in_place(name, out_dir)
        else:
            model = copy.deepcopy(self.model_of(name))
            model.set_adapter(name)
            save_model_folder(
                model.merge_and_unload(adapter_names=[name]), self.tokenizers[self.base_of[name]], out_dir
            )
        self.save_adapter(name, out_dir)

    def save_adapter(self, name: str, out_dir: str | Path) -> None:
        """Agent `name`'s LoRA adapter alone, in PEFT's format, as `<out_dir>/adapter/`: a model with
        `adapter: true` is served from it on its base model's vLLM engine (one base for all agents)."""
        import shutil
        import tempfile

        from ...models import publish_folder

        out_dir = Path(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=".adapter.", dir=out_dir.parent))
        try:
            self.model_of(name).save_pretrained(tmp, selected_adapters=[name])
            folder = tmp if (tmp / "adapter_config.json").exists() else tmp / name  # PEFT: a named adapter's subfolder
            _sort_target_modules(folder / "adapter_config.json")
            publish_folder(folder, out_dir / "adapter")  # readable by the group, swapped in whole
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def save_in_place(self, name: str, out_dir: str | Path) -> None:
        """`save` without a copy of the base: the agent's adapter is merged into the base weights, the
        base's own parameter names are written, and the merge is undone."""
        from ...models import save_model_folder

        model = self.model_of(name)
        active = model.active_adapter
        model.set_adapter(name)
        model.merge_adapter()
        try:
            base = model.get_base_model()
            state = {k.replace(".base_layer.", "."): v for k, v in base.state_dict().items() if "lora_" not in k}
            save_model_folder(base, self.tokenizers[self.base_of[name]], out_dir, state_dict=state)
        finally:
            model.unmerge_adapter()
            model.set_adapter(active)


def _sort_target_modules(config_path: Path) -> None:
    """PEFT writes `target_modules` from a set, in the process's hash order: sorted, two runs of the
    same training write the same file (resumed and uninterrupted runs compare equal)."""
    import json

    config = json.loads(config_path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
