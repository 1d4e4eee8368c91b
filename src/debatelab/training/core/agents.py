"""The trainable agents of a multi-agent run (UDPO, MAPPO, RMAAC, UMAD): one PEFT LoRA adapter per
agent (`finetuning: lora`, the default), or every agent's own full weights (`finetuning: full`).

LoRA: agents on the same base model share one copy of its weights: one PeftModel per base, holding
one named adapter per agent (`add_adapter`); agents on different bases get a PeftModel each. PEFT's
`set_adapter(name)` makes that adapter the only active and trainable one, so a forward pass is
agent i's policy and a backward pass reaches agent i's adapter only. With every adapter disabled
the model is the frozen base: the reference policy.

Full fine-tuning (`finetuning: full`; UMAD's paper config): each agent loads its own copy of its base and trains
every weight; the reference is one frozen copy per base, loaded when first asked for (a KL term),
or each agent's re-synced copy (`sync_references`). Each agent is saved as a plain folder.

Either way each agent has its own AdamW and schedule; `model_of(agent)` is the module its forward
runs through, `trainable_parameters(agent)` what its optimizer changes.

Model parallelism (`parallelism: model`, one process seeing several GPUs): each model (a LoRA
base, or a fully fine-tuned agent) is placed on GPUs of its own, one too large for one GPU spread
evenly over several (`gpu_plan.training_placement`, transformers' `device_map="balanced"` with
`max_memory` on those GPUs); a heterogeneous ensemble (UDPO's five models) then trains in one
process, each fully fine-tuned agent on its own GPU group. Rollouts run on transformers there.

`AgentPolicies.view(agent)` is a single-policy view (model, tokenizer, optimizer, scheduler,
reference) with the interface of `policy.Policy`, so the update code serves both. The agents'
optimizers and schedules together (`AgentPolicies.optimizer`, `.scheduler`: `PerAgent`) are what a
checkpoint saves and restores, as it does one policy's.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

from ...gpu_plan import WEIGHTS_SHARE, size_from_folder, training_placement, training_state_bytes, weights_bytes
from ...llm.transformers_backend import cache_frozen_bf16_weights, cpu_decode_attention
from . import zero
from .distributed import rank_and_world
from .weights import (
    enable_gradient_checkpointing,
    lora_config,
    model_holding,
    optimizer_and_schedule,
    resolve_dtype,
    warn_low_precision_updates,
)

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
        self.engine = owner.engine_of(name)  # its DeepSpeed or FSDP engine, or None
        self.wrapper = owner.wrapper_of(name)  # its DDP wrapper, or None

    def reference_logprobs(self, compute):
        """`compute(model)` under the agent's reference: its re-synced copy when the run keeps one
        (`AgentPolicies.sync_references`), else its frozen base (LoRA: every adapter off)."""
        return self.owner.reference_logprobs(self.name, compute)


class AgentPolicies:
    def __init__(self, bases: dict[str, str | Path], settings, *, device: str):
        """`bases`: agent name -> base model folder (agents naming the same folder share it under LoRA)."""
        from transformers import AutoTokenizer

        self.settings, self.device = settings, device
        self.full = settings.finetuning == "full"
        self.agents = list(bases)
        self.base_of = {name: str(Path(path)) for name, path in bases.items()}
        # the module each agent's forward runs through: its base's PeftModel (LoRA) or its own model (full)
        self.key_of = {name: name if self.full else self.base_of[name] for name in self.agents}
        self.models, self.tokenizers = {}, {}
        self.references = {}  # full fine-tuning: base folder -> its frozen copy (loaded when first needed)
        self.synced = {}  # full fine-tuning: agent -> its re-synced reference copy (`sync_references`)
        self.placement = self._placement(device)  # model key -> its GPUs (model parallelism), else empty
        dtype = resolve_dtype(settings.dtype, device)
        for name in self.agents:
            base, key = self.base_of[name], self.key_of[name]
            if base not in self.tokenizers:
                tokenizer = AutoTokenizer.from_pretrained(base)
                if tokenizer.pad_token is None:
                    tokenizer.pad_token = tokenizer.eos_token
                self.tokenizers[base] = tokenizer
            if key in self.models:  # LoRA: another agent on a base already loaded
                self.models[key].add_adapter(name, lora_config(self.settings))
                if key not in self.placement:
                    self.models[key].to(device)
                continue
            model = self._load(base, key, dtype, on_device=False)
            enable_gradient_checkpointing(model, settings)
            model.generation_config.pad_token_id = self.tokenizers[base].pad_token_id
            if not self.full:
                from peft import get_peft_model

                model = get_peft_model(model, lora_config(self.settings), adapter_name=name)
            self.models[key] = model if key in self.placement else model.to(device)
            self._cache_frozen_weights(model)
        if self.full:
            warn_low_precision_updates(settings, dtype)
        self.optimizers, self.schedulers = {}, {}
        for name in self.agents:
            params = self.trainable_parameters(name)
            self.optimizers[name], self.schedulers[name] = optimizer_and_schedule(params.values(), settings)
        from .vllm_rollouts import resolve_rollout_backend

        if self.placement and settings.rollout_backend == "vllm":
            raise ValueError(
                "multi-agent training: parallelism 'model' rolls out on transformers; set rollout_backend "
                "to auto or transformers"
            )
        self.rollout_backend = "transformers" if self.placement else resolve_rollout_backend(settings.rollout_backend)
        self._engines = {}  # model key -> its vLLM engine, started on the first rollouts
        self.engines = {}  # agent -> its DeepSpeed or FSDP engine (`distribute`)
        self.wrappers = {}  # agent -> its DDP wrapper (`distribute`: several processes without an engine)
        self._generation = (
            zero.GenerationHold()
        )  # ZeRO-3: every agent gathered, from the first rollout to `rollouts_done`
        self.attached = {}  # "@name" -> a method's own trainable module (MAPPO's critic), checkpointed with the agents
        log.info(
            "%d agents on %d base model(s), %s, rollouts on %s: %s",
            len(self.agents),
            len(set(self.base_of.values())),
            "each its own full weights" if self.full else f"one LoRA adapter each (r={settings.lora.r})",
            self.rollout_backend,
            ", ".join(f"{a} on {Path(self.base_of[a]).name}" for a in self.agents),
        )

    def _load(self, base: str, key: str, dtype, on_device: bool = True):
        """Base folder `base` as a causal LM: on `key`'s GPUs under model parallelism, else on the device
        (`on_device`) or the CPU (the trained models: PEFT adds their adapters before they move)."""
        import torch
        from transformers import AutoModelForCausalLM

        if key not in self.placement:
            model = AutoModelForCausalLM.from_pretrained(base, dtype=dtype)
            if torch.device(self.device).type == "cpu":
                cpu_decode_attention(model)  # the rollouts' decode steps; the update's passes unchanged
            return model.to(self.device) if on_device else model
        gpus = self.placement[key]  # its layers over its own GPUs (PEFT puts each adapter beside its layer)
        capacity = torch.cuda.get_device_properties(gpus[0]).total_memory
        return AutoModelForCausalLM.from_pretrained(
            base,
            dtype=dtype,
            device_map="balanced" if len(gpus) > 1 else {"": gpus[0]},
            max_memory={g: int(capacity * 0.9) for g in gpus},
        )

    def _placement(self, device: str) -> dict[str, list[int]]:
        """Model parallelism's GPUs per model key (`gpu_plan.training_placement`: what the model holds
        in training at most `gpu_plan.WEIGHTS_SHARE` of a GPU, a large one over GPUs of its own), when
        asked for and there are several GPUs. A LoRA base holds its weights; a fully fine-tuned
        agent its weights, gradients and AdamW states (`gpu_plan.training_state_bytes`)."""
        import torch

        if self.settings.parallelism != "model" or not str(device).startswith("cuda") or torch.cuda.device_count() < 2:
            return {}
        dtype = str(resolve_dtype(self.settings.dtype, device)).removeprefix("torch.")
        sizes = {}
        for name in self.agents:
            base, key = self.base_of[name], self.key_of[name]
            if self.full:  # in the training dtype, whatever the folder stores
                sizes[key] = training_state_bytes(size_from_folder(base, dtype).weights, dtype)
            else:
                sizes[key] = weights_bytes(base)
        capacity = torch.cuda.get_device_properties(0).total_memory
        plan = training_placement(sizes, torch.cuda.device_count(), capacity, WEIGHTS_SHARE)
        log.info(
            "model parallelism over %d GPUs: %s",
            torch.cuda.device_count(),
            "; ".join(f"{Path(k).name} on cuda:{','.join(map(str, g))}" for k, g in plan.items()),
        )
        return plan

    def distribute(self, world: int) -> None:
        """How each agent's steps are taken over the `world` processes; every process calls it, in the
        same order. Under a DeepSpeed or FSDP config (`accelerate launch`; one process too): each
        agent's own engine (`zero.wrap`), its gradients and optimizer states split over the
        processes (ZeRO-3, FSDP: its weights too); for agents that own their model (full
        fine-tuning, or a single policy's adapter). Otherwise, with several processes: each agent's
        trained weights in accelerate's DDP wrapper (`distributed.data_parallel`), which averages
        their gradients; a LoRA agent's wrapper holds its adapter alone, as agents may share a base.
        Called by the trainer."""
        if zero.requested() and (self.full or len(self.agents) == 1):
            self.engines = {
                name: zero.wrap(self.model_of(name), self.optimizers[name], self.settings, world)
                for name in self.agents
            }
            return
        if zero.requested():
            log.warning(
                "%s: the DeepSpeed or FSDP config is not used: a multi-agent run keeps each agent's LoRA optimizer "
                "whole in every process, its adapter in a DDP wrapper",
                self.settings.method,
            )
        if world == 1:
            return
        from .distributed import data_parallel

        for name in self.agents:
            if self.full:
                self.wrappers[name] = data_parallel(self.model_of(name))
                continue
            with self.acting(name):  # its adapter trainable while the wrapper is built
                self.wrappers[name] = data_parallel(self.model_of(name), self.adapter_parameters(name))

    def engine_of(self, name: str):
        """Agent `name`'s DeepSpeed or FSDP engine, or None (`ref_<agent>` and attached modules: None)."""
        return self.engines.get(name)

    def wrapper_of(self, name: str):
        """Agent `name`'s DDP wrapper (`distribute`), or None."""
        return self.wrappers.get(name)

    def checkpoint_engines(self) -> dict:
        """The engines whose own checkpoints a checkpoint holds, by the folder each goes in
        (`optimizer-zero/<agent>/`)."""
        return dict(self.engines)

    def checkpoint_optimizer(self):
        """The optimizers a checkpoint saves whole: every one outside the engines (`optimizer`)."""
        return self.optimizer

    @property
    def sharded(self) -> bool:
        """Whether the agents' weights are split among the processes (ZeRO-3, FSDP)."""
        return any(zero.sharded(engine) for engine in self.engines.values())

    @property
    def optimizer(self) -> PerAgent:
        """Every agent's optimizer (and attached modules', `attach`) as one, for checkpoints; under
        DeepSpeed or FSDP the agents' are left out (each process saves its partition of them)."""
        return PerAgent({k: v for k, v in self.optimizers.items() if k not in self.engines})

    @property
    def scheduler(self) -> PerAgent:
        """Every agent's learning-rate schedule as one (`get_last_lr`: the first agent's)."""
        return PerAgent(self.schedulers)

    def model_of(self, name: str):
        return self.models[self.key_of[name]]

    def device_of(self, name: str) -> str:
        """Where agent `name`'s inputs go: its model's first device (its embeddings) under model parallelism."""
        model = self.model_of(name)
        return str(model.get_input_embeddings().weight.device) if self.placement else self.device

    def trainable_parameters(self, name: str) -> dict:
        """What agent `name`'s optimizer changes, by parameter name: its adapter, or all its weights."""
        if self.full:
            return dict(self.model_of(name).named_parameters())
        return self.adapter_parameters(name)

    def adapter_parameters(self, name: str) -> dict:
        """Agent `name`'s adapter weights by parameter name (PEFT names them `...lora_A.<name>.weight`)."""
        owner = name if name in self.base_of else name.removeprefix("ref_")  # ref_<agent> sits on the agent's base
        marker = f".{name}."
        return {n: p for n, p in self.model_of(owner).named_parameters() if marker in n and "lora_" in n}

    def reference_logprobs(self, name: str, compute):
        """`compute(model)` under agent `name`'s reference (`AgentView.reference_logprobs`)."""
        if self.full:
            if name in self.synced:
                return compute(self.synced[name])
            return compute(self._frozen_base(name))
        model, reference = self.model_of(name), f"ref_{name}"
        if reference not in model.peft_config:
            with model.disable_adapter():
                return compute(model)
        model.set_adapter(reference)
        try:
            return compute(model)
        finally:
            model.set_adapter(name)

    def _frozen_base(self, name: str):
        """Full fine-tuning: agent `name`'s base as a frozen model, one per base, loaded when first asked for."""
        base = self.base_of[name]
        if base not in self.references:
            model = self._load(base, self.key_of[name], resolve_dtype(self.settings.dtype, self.device))
            self.references[base] = model.eval().requires_grad_(False)
            self._cache_frozen_weights(self.references[base])
        return self.references[base]

    def _cache_frozen_weights(self, model) -> None:
        """With `autocast`, `model`'s frozen linear layers (a LoRA base, a frozen reference) keep a bf16
        copy of their weights between forwards (`cache_frozen_bf16_weights`: results unchanged) unless
        ZeRO-3 or FSDP may shard them."""
        if self.settings.autocast and not zero.requested():
            cache_frozen_bf16_weights(model)

    def reference_state(self) -> dict:
        """The re-synced references' weights (empty when the reference is the base), for checkpoints."""
        out = {}
        for name in self.agents:
            reference = f"ref_{name}"
            if self.full and name in self.synced:
                out.update({f"{reference}/{n}": p.detach().clone() for n, p in self.synced[name].named_parameters()})
            elif not self.full and reference in self.model_of(name).peft_config:
                out.update(
                    {f"{reference}/{n}": p.detach().clone() for n, p in self.adapter_parameters(reference).items()}
                )
        return out

    def activate(self, name: str) -> None:
        """Make `name`'s adapter the active (and only trainable) one on its base (full fine-tuning:
        every agent is its own model, always active)."""
        if self.full:
            return
        model = self.model_of(name)
        if model.active_adapter != name:
            model.set_adapter(name)

    def backend(self, name: str, model_id: str):
        """A backend that generates as agent `name` as it is now. On vLLM (`rollout_backend`): LoRA,
        one engine per base model holds the frozen base once and serves each agent's latest adapter
        (saved afresh before each of its batches); full fine-tuning, one engine per agent, its
        weights pushed in before each of its batches. On transformers: the training model itself,
        as whichever adapter is active when it runs (`with policies.acting(name): ...`)."""
        base, key = self.base_of[name], self.key_of[name]
        self._generation.hold([(self.engine_of(agent), self.model_of(agent)) for agent in self.agents])
        if self.rollout_backend == "vllm":
            if key not in self._engines:
                from .vllm_rollouts import VLLMRollouts

                dtype = str(resolve_dtype(self.settings.dtype, self.device)).removeprefix("torch.")
                sharing = sum(self.key_of[a] == key for a in self.agents)
                rank, world = rank_and_world()  # data parallel: an engine per process, on its GPU
                self._engines[key] = VLLMRollouts(
                    base, self.settings, dtype=dtype, adapters=sharing, rank=rank, world=world
                )
            if self.full:
                return self._engines[key].backend(self.view(name), model_id)
            return self._engines[key].adapter_backend(self.model_of(name), name, model_id)
        from ...llm.transformers_backend import TransformersBackend

        return TransformersBackend.from_model(
            self.model_of(name),
            self.tokenizers[base],
            model_id=model_id,
            batch_size=self.settings.rollout_batch_size,
            autocast=self.settings.autocast,
        )

    def vllm_engine(self, name: str):
        """The vLLM engine agent `name` rolls out on (one per base under LoRA, one per agent under full
        fine-tuning); None on transformers or before its first rollouts."""
        rollouts = self._engines.get(self.key_of[name])
        return rollouts.engine if rollouts is not None else None

    def rollouts_done(self) -> None:
        """A step's debates are in: ZeRO-3's gathered agents are split again, and sleeping-capable
        engines free their GPU memory for the update."""
        self._generation.release()
        for engine in self._engines.values():
            engine.pause()

    def close(self) -> None:
        self._generation.release()
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
        if self.full:
            yield self.view(name)
            return
        model = self.model_of(name)
        before = model.active_adapter
        self.activate(name)
        try:
            yield self.view(name)
        finally:
            if model.active_adapter != before:
                model.set_adapter(before)

    def sync_references(self) -> None:
        """θ_ref ← θ for every agent (UDPO's `ref_sync_steps`): LoRA, the agent's adapter copied into a
        frozen `ref_<agent>` adapter on the same base (created on the first call); full fine-tuning,
        the agent's weights copied into its frozen reference copy."""
        import copy

        import torch

        for name in self.agents:
            if self.full:
                if name not in self.synced:  # a sharded model isn't copied: a fresh one takes its weights
                    model = (
                        self._load(
                            self.base_of[name], self.key_of[name], resolve_dtype(self.settings.dtype, self.device)
                        )
                        if self.engine_of(name) is not None
                        else copy.deepcopy(self.model_of(name))
                    )
                    self.synced[name] = model.eval().requires_grad_(False)
                    self._cache_frozen_weights(self.synced[name])
                copies = dict(self.synced[name].named_parameters())
                own = zero.full_weights(self.engine_of(name), dict(self.model_of(name).named_parameters()), clone=False)
                with torch.no_grad():
                    for n, p in own.items():
                        copies[n].copy_(p)
                continue
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

    def trainable_state(self, for_checkpoint: bool = False) -> dict:
        """Every agent's trained weights (and its re-synced reference, if any), and attached modules.
        `for_checkpoint`: without the weights of agents with an engine (DeepSpeed, FSDP), whose own
        checkpoint holds them."""
        own = {}
        for name in self.agents:  # ZeRO-3, FSDP: gathered from every process (each must take part)
            if for_checkpoint and self.engine_of(name) is not None:
                continue
            whole = zero.full_weights(self.engine_of(name), self.trainable_parameters(name))
            own.update({f"{name}/{n}": value for n, value in whole.items()})
        attached = {
            f"{key}/{n}": p.detach().clone() for key, m in self.attached.items() for n, p in m.state_dict().items()
        }
        return {**own, **self.reference_state(), **attached}

    def load_trainable_state(self, state: dict) -> None:
        if any(k.startswith("ref_") for k in state):
            self.sync_references()  # creates the references; their weights come next
        targets = {name: self.trainable_parameters(name) for name in self.agents}
        for name in self.agents:
            reference = f"ref_{name}"
            if self.full and name in self.synced:
                targets[reference] = dict(self.synced[name].named_parameters())
            elif not self.full:
                targets[reference] = self.adapter_parameters(reference)
        for name, params in targets.items():  # ZeRO-3, FSDP: by every process
            present = {n: p for n, p in params.items() if f"{name}/{n}" in state}
            zero.load_weights(self.engine_of(name), present, {n: state[f"{name}/{n}"] for n in present})
        for key, module in self.attached.items():
            module.load_state_dict({n: state[f"{key}/{n}"].to("cpu") for n in module.state_dict()})

    def save(self, name: str, out_dir: str | Path, adapter: bool = True) -> None:
        """Agent `name` as a plain Hugging Face folder, written atomically by rank 0: full
        fine-tuning, its own weights; LoRA, its adapter merged into a copy of its base (or, for a base
        spread over GPUs, too large to copy, merged in place, saved, then unmerged), with the adapter
        alone beside it (`adapter`). Every process calls it: ZeRO-3 and FSDP gather the weights from
        all of them into a fresh copy of the base on rank 0 (`weights.model_holding`)."""
        import copy

        from ...models import save_model_folder

        tokenizer = self.tokenizers[self.base_of[name]]
        engine = self.engine_of(name)
        sharded = zero.sharded(engine)
        state = zero.full_weights(engine, self.trainable_parameters(name)) if sharded else None
        if rank_and_world()[0] != 0:
            return
        if sharded:  # split among the processes (a single policy's LoRA adapter is PEFT's `default`)
            model = model_holding(
                self.base_of[name], self.settings, state, resolve_dtype(self.settings.dtype, self.device)
            )
            save_model_folder(model if self.full else model.merge_and_unload(), tokenizer, out_dir)
            return
        if self.full:
            save_model_folder(self.model_of(name), tokenizer, out_dir)
            return
        if self.key_of[name] in self.placement:
            self.save_in_place(name, out_dir)
        else:
            model = copy.deepcopy(self.model_of(name))
            model.set_adapter(name)
            save_model_folder(model.merge_and_unload(adapter_names=[name]), tokenizer, out_dir)
        if adapter:
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
