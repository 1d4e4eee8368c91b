"""The RL fine-tuning stage (TRL + PEFT): DAPO and SDRL on one policy (spec 003).

* `settings`: `TrainSettings` (config `training.runs.<run>`);
* `loss`: the clipped policy loss on completion tokens, log-probabilities via TRL's helpers;
* `rewards`: verifiable reward, overlong punishment, group advantages, the dynamic-sampling test;
* `rollouts`: seeded, batched rollouts of the live policy through a backend, graded;
* `sdrl`: SDRL's debate pairs;
* `policy`: the model with its LoRA adapter, optimizer and schedule;
* `trainer`: the loop; `checkpoint`: resume; `stage`: the rule's job; `launch`: `accelerate launch` entry.
"""
from .settings import LoraSettings, TrainSettings

__all__ = ["LoraSettings", "TrainSettings"]
