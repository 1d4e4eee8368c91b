"""One optimizer step on a fixed batch of eight sequences, in as many processes as torchrun starts
(each takes every world-th sequence); rank 0 saves the gradients the step applied (averaged over
processes) and the updated weights. Used by test_training."""
from __future__ import annotations

import sys


def main(model_dir: str, out: str) -> None:
    import torch
    from safetensors.torch import save_file

    from debatelab.data.schema import frame_from_rows
    from debatelab.training import TrainSettings
    from debatelab.training.launch import init_process_group
    from debatelab.training.policy import Policy
    from debatelab.training.rollouts import Rollout
    from debatelab.training.trainer import Trainer

    rank = init_process_group()
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    settings = TrainSettings(mini_batch_size=8, micro_batch_size=2, finetuning="full", learning_rate=1e-2,
                             max_grad_norm=0.0, warmup_steps=0, show_progress=False)
    policy = Policy(model_dir, settings, device="cpu")
    questions = frame_from_rows([{"id": "q", "question": "q", "choices": None, "answer": "1", "task_type": "math",
                                  "meta": {}}])
    trainer = Trainer(questions, policy, settings, run="ddp")
    rollouts = [Rollout(question_id=f"q{k}", group=f"q{k // 4}", turn=1, sample=k,
                        messages=({"role": "user", "content": f"question number {k}?"},), text="",
                        token_ids=[10 + k, 20 + (3 * k) % 7, 30 + k][: 1 + k % 3], finish_reason="stop", answer=None,
                        correct=False, reward=0.0, advantage=float((-1) ** k) * (1 + k / 8))
                for k in range(8)]
    trainer._update(rollouts[rank::world], step=0)
    if rank == 0:
        grads = {f"grad.{n}": p.grad.detach().contiguous() for n, p in policy.model.named_parameters() if p.grad is not None}
        save_file({**{k: v.contiguous() for k, v in policy.trainable_state().items()}, **grads}, out)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
