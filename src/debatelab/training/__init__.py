"""The RL fine-tuning stage (TRL helpers + PEFT): one policy (DAPO, SDRL; Liu et al., arXiv:2601.22297) or every agent
of a debate (UDPO, MAPPO, RMAAC, UMAD; arXiv:2602.07186, arXiv:2603.01221). `README.md` beside this file is the map.

* `settings`: `TrainSettings` (config `training.runs.<run>`); the methods' registry is
  `methods.METHODS`;
* `core/`: what every method shares (loss, rollouts, rewards, policy and agents, the trainers'
  loop and update, checkpoints, processes, DeepSpeed, vLLM rollouts, held-out accuracy);
* `methods/`: one module per method: its settings, formulas and trainer;
* `stage`: the training job of rules `train` and `train_agents`; `multi_agent_stage`: UDPO's
  `udpo_warmup` and `udpo_coefficients`.
"""

from .settings import LoraSettings, TrainSettings

__all__ = ["LoraSettings", "TrainSettings"]
