"""Two optimizer steps on a fixed batch of eight sequences (one mini-batch per step), in as many
processes as the launcher starts (each takes every world-th sequence): DDP under torchrun, or
DeepSpeed ZeRO (stage 1, 2 or 3) under `accelerate launch` with a DeepSpeed config. Rank 0 saves the gradients of
the first step (DDP and one process: DeepSpeed keeps them in its partitions), the updated weights
and the number of steps this launch made. With a checkpoint folder, a checkpoint is written after the first step, and a rerun
resumes from it and makes only the second. Used by test_training."""

from __future__ import annotations

import sys

STEPS = 2


def main(model_dir: str, out: str, checkpoint_dir: str | None = None) -> None:
    import torch
    from conftest import toy_settings
    from safetensors.torch import save_file

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core import zero
    from debatelab.training.core.distributed import barrier, init_process_group
    from debatelab.training.core.policy import Policy
    from debatelab.training.core.rollouts import Rollout
    from debatelab.training.core.trainer import Trainer

    rank = init_process_group()
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    if (
        zero.deepspeed_requested()
    ):  # its shared-memory all-reduce kernel compiles for minutes on first use; Gloo does here
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    settings = toy_settings(
        mini_batch_size=8,
        micro_batch_size=2,
        micro_batch_tokens=44,  # rank 0's four sequences pack into 3 passes, rank 1's into 4 (ZeRO-3 pads to 4)
        finetuning="full",
        learning_rate=1e-2,
        max_grad_norm=0.0,
        warmup_steps=0,
        show_progress=False,
    )
    policy = Policy(model_dir, settings, device="cpu")
    questions = frame_from_rows(
        [{"id": "q", "question": "q", "choices": None, "answer": "1", "task_type": "math", "meta": {}}]
    )
    trainer = Trainer(questions, policy, settings, run="ddp", checkpoint_dir=checkpoint_dir, fingerprint="fixed")
    rollouts = [
        Rollout(
            question_id=f"q{k}",
            group=f"q{k // 4}",
            turn=1,
            sample=k,
            messages=({"role": "user", "content": f"question number {k}?"},),
            text="",
            token_ids=[10 + k, 20 + (3 * k) % 7, 30 + k][: 1 + k % 3],
            finish_reason="stop",
            answer=None,
            correct=False,
            reward=0.0,
            advantage=float((-1) ** k) * (1 + k / 8),
        )
        for k in range(8)
    ]
    if world > 1 and not zero.requested():  # DDP: accelerate's wrapper, over its CPU processes
        from accelerate.state import AcceleratorState
        from torch.nn.parallel import DistributedDataParallel

        assert isinstance(trainer.policy.wrapper, DistributedDataParallel), type(trainer.policy.wrapper)
        assert trainer.policy.wrapper.gradient_as_bucket_view  # one copy of the gradients, in DDP's buckets
        assert not trainer.policy.wrapper.broadcast_buffers  # buffers are loaded alike and never trained
        assert AcceleratorState().distributed_type.value == "MULTI_CPU", AcceleratorState().distributed_type
    if checkpoint_dir is not None:
        trainer.resume()
    made, grads = 0, {}
    while trainer.state.step < STEPS:
        made += 1
        trainer.update_policy(rollouts[rank::world], step=trainer.state.step)
        if trainer.state.step == 0:  # the first step's gradients: later ones start from weights rounded apart
            grads = {
                f"grad.{n}": p.grad.detach().clone().contiguous()
                for n, p in policy.model.named_parameters()
                if p.grad is not None
            }
        trainer.state.step += 1
        if checkpoint_dir is not None and trainer.state.step == 1:
            trainer.checkpoint()
            barrier(world)
    weights = policy.trainable_state()  # ZeRO-3: gathered from every process
    if rank == 0:
        save_file(
            {
                **{k: v.contiguous() for k, v in weights.items()},
                **grads,
                "steps_made": torch.tensor(made),
            },
            out,
        )
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
