"""What a vLLM engine is handed under a sharded engine, in the processes the launcher starts (ZeRO-3
or FSDP2, from the accelerate config): after one update, inside `zero.for_generation`, the LoRA
adapter that `vllm_rollouts.save_served_adapter` writes and the full weights that
`vllm_rollouts.pushed_weights` yields are the whole trained weights (`zero.full_weights`, taken
outside the hold), in every process. Rank 0 writes each process's findings as JSON. Used by
test_training."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def findings(model_dir: str, finetuning: str, folder: Path, rank: int, world: int) -> dict:
    import torch
    from accelerate.state import AcceleratorState
    from conftest import adapter_keys, toy_settings
    from distributed_helpers import one_sharded_update
    from safetensors.torch import load_file
    from transformers.integrations import is_deepspeed_zero3_enabled

    from debatelab.training.core import zero
    from debatelab.training.core.vllm_rollouts import pushed_weights, save_served_adapter

    settings = toy_settings(
        finetuning=finetuning,
        learning_rate=1e-2,
        warmup_steps=0,
        show_progress=False,
        **adapter_keys(finetuning),
    )
    torch.manual_seed(0)
    policy, engine, before, whole, _ = one_sharded_update(model_dir, settings, rank, world)
    with zero.for_generation(engine, policy.model):
        if finetuning == "lora":
            served = save_served_adapter(policy.model, None, folder / f"rank{rank}")
            # PEFT's file names the weights without the adapter's name
            saved = load_file(served / "adapter_model.safetensors")
            handed = {n: saved.get(n.replace(".default.", ".")) for n in whole}
        else:
            pushed = {n: t.clone() for n, t in pushed_weights(policy.model)}
            handed = {n: pushed.get(n) for n in whole}
    missing = sorted(n for n, v in handed.items() if v is None)
    shapes = all(v is not None and v.shape == whole[n].shape for n, v in handed.items())
    return {
        "weights": len(whole),
        "missing": missing,
        "same_shapes": shapes,
        "max_difference": max(
            (float((v.float() - whole[n].float()).abs().max()) for n, v in handed.items() if v is not None and shapes),
            default=float("nan"),
        ),
        "moved": sum(not torch.equal(before[n], whole[n]) for n in whole),
        "kind": type(engine).__name__,
        # who built the engine: accelerate's state over every process (a DeepSpeed engine comes from
        # `Accelerator.prepare`), and whether transformers was left partitioning later loads (ZeRO-3 init)
        "accelerate": [
            str(AcceleratorState._shared_state.get("distributed_type", "none")),
            AcceleratorState._shared_state.get("num_processes"),
        ],
        "loads_partitioned": is_deepspeed_zero3_enabled(),
    }


def main(model_dir: str, out: str) -> None:
    import torch

    from debatelab.training.core.distributed import init_process_group, rank_and_world

    rank = init_process_group()
    world = rank_and_world()[1]
    report = {}
    for finetuning in ("lora", "full"):
        mine = findings(model_dir, finetuning, Path(out).parent / finetuning, rank, world)
        every = [None] * world
        torch.distributed.all_gather_object(every, mine)
        report[finetuning] = every
    if rank == 0:
        Path(out).write_text(json.dumps(report))
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
