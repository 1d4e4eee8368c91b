"""The policy being trained: a Hugging Face causal LM with a PEFT LoRA adapter (default) or all its
weights trainable, its optimizer and learning-rate schedule, a backend over the live weights for
rollouts, and the plain model folder it is saved as."""

from __future__ import annotations

import logging
from pathlib import Path

from . import zero

log = logging.getLogger(__name__)


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    return getattr(torch, dtype)


def learning_rate_factor(settings):
    """The multiplier of `learning_rate` at rollout step k (the schedule steps once per rollout step):
    a linear warm-up over `warmup_steps`, starting at 1/warmup so that step 0 already learns, then
    constant (`lr_schedule: constant`, Liu et al., arXiv:2601.22297 §6.1.1, App. A.1) or a cosine decay to 0 at step `steps`
    (`lr_schedule: cosine`, UDPO App. A.1)."""
    import math

    warmup, steps, cosine = settings.warmup_steps, settings.steps, settings.lr_schedule == "cosine"

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if not cosine:
            return 1.0
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def optimizer_and_schedule(params, settings):
    """The optimizer of trainable `params` (AdamW at `learning_rate`, `weight_decay`) and its
    learning-rate schedule (`learning_rate_factor`, stepped once per rollout step): one policy's, or
    one agent's in a multi-agent run (`agents.AgentPolicies`)."""
    import torch

    optimizer = torch.optim.AdamW(params, lr=settings.learning_rate, weight_decay=settings.weight_decay)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, learning_rate_factor(settings))


def release_host_memory(device) -> None:
    """Give the heap's freed pages back to the system (glibc `malloc_trim`) after a CPU update. A
    backward pass frees gigabytes of activations in pieces of every size; glibc keeps them, and
    passes of other shapes (each agent's turns, each round's prompt length) then add fresh pages:
    the job's resident memory grew by the size of one pass per agent. No-op off glibc or on a GPU."""
    if str(device).startswith("cuda"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def enable_gradient_checkpointing(model, settings) -> None:
    """Activations recomputed in the backward pass (`gradient_checkpointing`); non-reentrant, so a
    LoRA model whose inputs need no gradient still gets one. Rollouts run in eval mode, with the cache."""
    if getattr(settings, "gradient_checkpointing", False):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def warn_low_precision_updates(settings, dtype) -> bool:
    """Full fine-tuning of 16-bit weights with no fp32 master copy loses every Adam step smaller than
    half the dtype's spacing (bfloat16: about 0.4 % of the weight): at learning rate 1e-6 nearly all
    of them. DeepSpeed ZeRO and FSDP keep fp32 master weights (`zero.py`, `fsdp.py`); LoRA adapters train in fp32."""
    import torch

    sharded = (
        zero.requested()
        and torch.distributed.is_available()
        and torch.distributed.is_initialized()
        and torch.distributed.get_world_size() > 1
    )
    if settings.finetuning != "full" or dtype not in (torch.bfloat16, torch.float16) or sharded:
        return False
    log.warning(
        "full fine-tuning of %s weights with no fp32 master copy: Adam steps below the dtype's resolution "
        "(learning_rate %g) are rounded away; train in float32, or with several GPUs under DeepSpeed "
        "(accelerate_config: config/accelerate/zero2_8gpu.yaml), which keeps fp32 master weights",
        str(dtype).removeprefix("torch."),
        settings.learning_rate,
    )
    return True


def lora_config(settings):
    """A fresh PEFT `LoraConfig` of the run's `lora` settings (PEFT writes the base's path into the one it is given)."""
    from peft import LoraConfig

    lora = settings.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.target_modules,
        task_type="CAUSAL_LM",
    )


class Policy:
    def __init__(self, model_path: str | Path, settings, *, device: str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.settings, self.device, self.model_path = settings, device, str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=resolve_dtype(settings.dtype, device))
        model.generation_config.pad_token_id = self.tokenizer.pad_token_id
        enable_gradient_checkpointing(model, settings)
        if settings.finetuning == "lora":
            from peft import get_peft_model

            model = get_peft_model(model, lora_config(settings))
        self.model = model.to(device)
        self.engine = None  # the DeepSpeed or FSDP engine over `model`, when the trainer wraps it (`zero.wrap`)
        self._generation = zero.GenerationHold()  # ZeRO-3: gathered from the first rollout to `rollouts_done`
        self.reference = None
        if settings.kl_weight and settings.finetuning == "full":  # LoRA's reference is the base without the adapter
            self.reference = AutoModelForCausalLM.from_pretrained(
                model_path, dtype=resolve_dtype(settings.dtype, device)
            )
            self.reference.to(device).eval().requires_grad_(False)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        warn_low_precision_updates(settings, resolve_dtype(settings.dtype, device))
        self.optimizer, self.scheduler = optimizer_and_schedule(trainable, settings)
        from .vllm_rollouts import resolve_rollout_backend

        self.rollout_backend = resolve_rollout_backend(settings.rollout_backend)
        self._vllm = None  # started on the first rollouts
        log.info(
            "policy %s: %s fine-tuning, %d of %d parameters trainable, %s on %s, rollouts on %s",
            model_path,
            settings.finetuning,
            sum(p.numel() for p in trainable),
            sum(p.numel() for p in self.model.parameters()),
            resolve_dtype(settings.dtype, device),
            device,
            self.rollout_backend,
        )

    def trainable_state(self) -> dict:
        """The weights the optimizer changes (the adapter, or every weight), for checkpoints. Under
        ZeRO-3 or FSDP every process must call it (the weights are gathered from all of them)."""
        trainable = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        return zero.full_weights(self.engine, trainable)

    def load_trainable_state(self, state: dict) -> None:
        """Checkpointed weights back into the policy (split among the processes: by every process)."""
        params = dict(self.model.named_parameters())
        missing = [n for n in state if n not in params]
        if missing:
            raise ValueError(f"checkpoint names parameters the policy lacks: {missing[:3]}")
        zero.load_weights(self.engine, {n: params[n] for n in state}, state)

    def backend(self, model_id: str):
        """A backend that generates with the live weights (rollouts): a colocated vLLM engine kept in
        step with them (`vllm_rollouts`), or transformers on the training model itself. Under ZeRO-3
        the weights are gathered whole in every process until `rollouts_done` (`zero.for_generation`)."""
        self._generation.hold([(self.engine, self.model)])
        if self.rollout_backend == "vllm":
            if self._vllm is None:
                import torch.distributed as dist

                from .vllm_rollouts import VLLMRollouts

                distributed = dist.is_available() and dist.is_initialized()
                self._vllm = VLLMRollouts(
                    self.model_path,
                    self.settings,
                    dtype=str(resolve_dtype(self.settings.dtype, self.device)).removeprefix("torch."),
                    rank=dist.get_rank() if distributed else 0,
                    world=dist.get_world_size() if distributed else 1,
                )
            return self._vllm.backend(self, model_id)
        from ...llm.transformers_backend import TransformersBackend

        return TransformersBackend.from_model(
            self.model, self.tokenizer, model_id=model_id, batch_size=self.settings.rollout_batch_size
        )

    def rollouts_done(self) -> None:
        """The step's rollouts are in: ZeRO-3's gathered weights are split again, and a
        sleeping-capable engine frees its memory for the update."""
        self._generation.release()
        if self._vllm is not None:
            self._vllm.pause()

    def close(self) -> None:
        self._generation.release()
        if self._vllm is not None:
            self._vllm.close()
            self._vllm = None

    def reference_logprobs(self, compute):
        """`compute(model)` under the reference policy: the base without the adapter, or a frozen copy."""
        if self.reference is not None:
            return compute(self.reference)
        with self.model.disable_adapter():
            return compute(self.model)

    def save(self, out_dir: str | Path) -> None:
        """The trained policy as a plain Hugging Face folder (LoRA merged into the base), written
        atomically by rank 0; every process calls it (under ZeRO-3 the weights are gathered from all,
        then loaded into a fresh copy of the base on rank 0)."""
        import copy

        from ...models import save_model_folder
        from .distributed import rank_and_world

        sharded = zero.sharded(self.engine)
        state = self.trainable_state() if sharded else None
        if rank_and_world()[0] != 0:
            return
        if sharded:
            model = model_holding(
                self.model_path, self.settings, state, resolve_dtype(self.settings.dtype, self.device)
            )
        else:
            model = copy.deepcopy(self.model) if self.settings.finetuning == "lora" else self.model
        if self.settings.finetuning == "lora":
            model = model.merge_and_unload()
        save_model_folder(model, self.tokenizer, out_dir)


def model_holding(model_path: str | Path, settings, state: dict, dtype):
    """A fresh copy of the base at `model_path` in `dtype`, on the CPU (with a fresh adapter under
    LoRA), holding `state`, the trained weights by parameter name: what rank 0 saves when the live
    model is split among the processes (ZeRO-3)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    if settings.finetuning == "lora":
        from peft import get_peft_model

        model = get_peft_model(model, lora_config(settings))
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in state.items():
            params[name].copy_(value.to(params[name].device))
    return model
