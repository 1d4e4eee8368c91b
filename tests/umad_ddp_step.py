"""One UMAD step of two agents (LoRA adapters on the tiny character model) on two questions, in as
many processes as torchrun starts (each debates every world-th question). Rank 0 saves both
adapters, their last gradients (averaged over the processes) and the step's metrics. Used by
test_umad."""
from __future__ import annotations

import json
import sys


def main(model_dir: str, out: str) -> None:
    import torch
    from safetensors.torch import save_file

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.agents import AgentPolicies
    from debatelab.training.launch import init_process_group
    from debatelab.training.settings import TrainSettings
    from debatelab.training.umad_trainer import UmadTrainer

    rank = init_process_group()
    settings = TrainSettings(method="umad", steps=1, lora={"r": 4, "alpha": 8}, dtype="float32", max_tokens=10,
                             overlong_buffer=0, learning_rate=1e-2, warmup_steps=0, mini_batch_size=64,
                             micro_batch_size=4, show_progress=False,
                             umad={"threads": 3, "turns": 2, "questions_per_step": 2})
    torch.manual_seed(0)
    policies = AgentPolicies({"solver": model_dir, "critic": model_dir}, settings, device="cpu")
    # golds the random character model often writes, so that some groups have mixed rewards
    rows = [{"id": f"q{i}", "question": f"question {i}: answer {i % 2 * 2}.", "choices": None, "answer": str(i % 2 * 2),
             "task_type": "math", "meta": {"source": "toy"}} for i in range(4)]
    trainer = UmadTrainer(frame_from_rows(rows), policies, settings, run="umad", participants=["solver", "critic"])
    metrics = trainer.train_step(0)
    if rank == 0:
        grads = {f"grad.{agent}/{n}": p.grad.detach().clone() for agent in policies.agents
                 for n, p in policies.adapter_parameters(agent).items() if p.grad is not None}
        save_file({**{k: v.contiguous() for k, v in policies.trainable_state().items()}, **grads}, out)
        with open(out + ".json", "w") as f:
            json.dump(metrics, f)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
