"""What a trained model is built from, for one policy and every agent of a multi-agent run alike
(`agents.AgentPolicies`, `policy.Policy`): its dtype, its LoRA adapter's config, activation
recomputation, AdamW with the learning-rate schedule, the warning for 16-bit weights without fp32
masters, heap trimming after a CPU update, and a fresh copy of the base holding weights gathered
from the processes (what rank 0 saves under ZeRO-3 or FSDP)."""

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

    if settings.finetuning != "full" or dtype not in (torch.bfloat16, torch.float16) or zero.requested():
        return False
    log.warning(
        "full fine-tuning of %s weights with no fp32 master copy: Adam steps below the dtype's resolution "
        "(learning_rate %g) are rounded away; train in float32, or under DeepSpeed or FSDP (accelerate_config: "
        "config/accelerate/zero2_8gpu.yaml or fsdp2_8gpu.yaml, one GPU too), which keep fp32 master weights",
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
