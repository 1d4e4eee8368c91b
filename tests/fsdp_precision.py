"""bfloat16 full fine-tuning under FSDP2 in the processes the launcher starts: the trained weights
are float32 masters, the forward runs in bfloat16, one Adam step at learning rate 1e-6 moves every
weight (plain bfloat16 rounds it away), and generation runs on the unsharded model in each process
alone (rank r generates 2 + 3r tokens). Rank 0 writes what it saw as JSON. Used by test_training."""

from __future__ import annotations

import json
import sys


def main(model_dir: str, out: str) -> None:
    import torch
    from conftest import toy_settings
    from distributed_helpers import one_sharded_update

    from debatelab.training.core import zero
    from debatelab.training.core.distributed import init_process_group, rank_and_world

    rank = init_process_group()
    world = rank_and_world()[1]
    settings = toy_settings(
        finetuning="full", dtype="bfloat16", learning_rate=1e-6, warmup_steps=0, show_progress=False
    )
    policy, engine, before, after, output = one_sharded_update(model_dir, settings, rank, world)
    with zero.for_generation(engine, policy.model):
        generated = policy.model.generate(torch.tensor([[5, 6]]), max_new_tokens=2 + 3 * rank, do_sample=False)
    lengths = [None] * world
    torch.distributed.all_gather_object(lengths, int(generated.shape[1]))
    if rank == 0:
        report = {
            "kind": type(engine).__name__,
            "trained_dtypes": sorted({str(v.dtype) for v in after.values()}),
            "logits_dtype": str(output.logits.dtype),
            "moved": sum(not torch.equal(before[n], after[n]) for n in before),
            "weights": len(before),
            "generated_lengths": lengths,
        }
        with open(out, "w") as f:
            json.dump(report, f)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
