"""DAPO (Liu et al., arXiv:2601.22297 §5; §3-5; §6.1.1, App. A.1): the single-policy method SDRL builds on, and its trainer.

DAPO's choices, as this package makes them:
* the loss: clip-higher (asymmetric ε_low 0.2, ε_high 0.28) and the token-mean aggregation
  (`loss_aggregation: token_mean`; `sequence_mean` is GRPO's), per-token ratio, optional KL
  (`core.loss.policy_loss`); the defaults of `TrainSettings` and `DapoSettings`;
* the reward: ±1 by the run's grader plus the soft overlong punishment (`core.rollouts.default_reward`,
  `core.rewards.overlong_penalty`; `reward: dapo_math` grades with DAPO-Math's verifier);
* dynamic sampling (`mixed`): keep the prompt groups with 0 < #correct < n, drawing more prompts
  until `prompts_per_step` are kept (or `max_sampling_rounds` were drawn);
* group advantages (Eq. 6) per kept prompt (`core.rewards.group_advantages`).

One rollout step (`DapoTrainer.train_step`):
1. First turn. Draw prompts in the run's seeded question order, sample n rollouts of each (one
   backend batch per sampling round), reward them, and with dynamic sampling keep the groups with
   0 < #correct < n until `prompts_per_step` are kept (or `max_sampling_rounds` were drawn).
2. Group advantages per kept prompt.
3. `debate_turn`: nothing for DAPO; SDRL's second turn (`methods/sdrl.py`).
4. One update over the step's sequences (`core.trainer.BaseTrainer.update_policy`).

DAPO's own settings are `DapoSettings` (config `training.runs.<run>.dapo`); SDRL's block extends it.
Data parallel: every process samples its share of each round's prompts (`core/trainer.py`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

import numpy as np

from ... import prompts
from ..core.distributed import all_reduce
from ..core.rewards import group_advantages
from ..core.rollouts import BUILTIN_REWARDS, sample_rollouts
from ..core.trainer import Trainer

#: metrics.parquet's columns of DAPO and SDRL runs (SDRL's debate columns are 0 or NaN for DAPO, so
#: both write one layout).
DAPO_METRIC_COLUMNS = [
    "step",
    "loss",
    "reward_mean",
    "reward_std",
    "accuracy",
    "kl",
    "clip_fraction",
    "entropy",
    "response_length",
    "prompts_sampled",
    "groups_kept",
    "debate_groups",
    "debate_groups_kept",
    "debate_groups_all_correct",
    "debate_groups_all_wrong",
    "debate_accuracy",
    "debate_pair_accuracy",
    "sequences",
    "updates",
    "learning_rate",
    "rollout_seconds",
    "update_seconds",
    "tokens_per_second",
]


@dataclass(frozen=True)
class DapoSettings:
    """DAPO's own settings (config `training.runs.<run>.dapo`; Liu et al., arXiv:2601.22297 §3-5, §6.1.1,
    App. A.1 defaults): how a step's prompt groups are sampled and kept, the reward, the KL weight."""

    prompts_per_step: int = 256  # prompt groups kept per step (after dynamic sampling)
    rollouts_per_prompt: int = 8  # n
    dynamic_sampling: bool = True  # keep only groups with 0 < #correct < n
    sampling_batch: int | None = None  # prompts drawn per sampling round (null: prompts_per_step)
    max_sampling_rounds: int = 4  # rounds per step before training on the groups kept so far
    # "verifiable", "dapo_math" (DAPO's verifier), or "module:function", a custom
    # (row, text, answer, correct, tokens) -> float
    reward: str = "verifiable"
    kl_coef: float = 0.0  # weight of the KL to the base model (0: no reference)
    advantage_eps: float = 1e-6

    def __post_init__(self):
        name = type(self).__name__.removesuffix("Settings").lower()
        for key in ("prompts_per_step", "max_sampling_rounds"):
            if getattr(self, key) < 1:
                raise ValueError(f"training: {name}.{key} must be >= 1, got {getattr(self, key)}")
        if self.rollouts_per_prompt < 2:
            raise ValueError(
                f"training: {name}.rollouts_per_prompt must be >= 2 (group advantages), got {self.rollouts_per_prompt}"
            )
        if self.sampling_batch is not None and self.sampling_batch < 1:
            raise ValueError(f"training: {name}.sampling_batch must be >= 1 or null, got {self.sampling_batch}")
        if self.kl_coef < 0 or self.advantage_eps < 0:
            raise ValueError(f"training: {name}.kl_coef and {name}.advantage_eps must be >= 0")
        if self.reward not in BUILTIN_REWARDS and ":" not in self.reward:
            raise ValueError(
                f"training: {name}.reward = {self.reward!r} is neither one of {BUILTIN_REWARDS} nor module:function"
            )


def mixed(correct) -> bool:
    """DAPO's dynamic-sampling condition: 0 < #correct < n."""
    n_correct = int(np.sum(correct))
    return 0 < n_correct < len(correct)


class DapoTrainer(Trainer):
    metric_columns = DAPO_METRIC_COLUMNS

    def train_step(self, step: int) -> dict:
        start = time.perf_counter()
        self.policy.model.eval()
        backend = self.policy.backend(model_id=f"policy:{self.run_name}@step{step}")
        first, kept, sampled = self.first_turn(backend, step)
        sequences = [r for _, group in kept for r in group]
        debate_groups, debate_kept, debate_rollouts, debate_counts = self.debate_turn(backend, step, kept)
        sequences += [r for group in debate_kept for r in group]
        self.policy.rollouts_done()
        rollout_seconds = time.perf_counter() - start
        generated = sum(r.length for group in first for r in group) + sum(r.length for r in debate_rollouts)

        self.policy.model.train()
        update_start = time.perf_counter()
        update = self.update_policy(sequences, step)
        update_seconds = time.perf_counter() - update_start
        learning_rate = self.policy.scheduler.get_last_lr()[0]
        with warnings.catch_warnings():  # a step whose groups were all filtered made no optimizer step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()`")
            self.policy.scheduler.step()

        rewards = np.array([r.reward for group in first for r in group])
        correct = np.array([r.correct for group in first for r in group])
        return {
            "step": step + 1,
            "loss": update["loss"],
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "reward_std": float(rewards.std()) if rewards.size else float("nan"),
            "accuracy": float(correct.mean()) if correct.size else float("nan"),
            "kl": update["kl"],
            "clip_fraction": update["clip_fraction"],
            "entropy": update["entropy"],
            "response_length": float(np.mean([r.length for group in first for r in group])) if first else float("nan"),
            "prompts_sampled": sampled,
            "groups_kept": len(kept),
            "debate_groups": debate_groups,
            "debate_groups_kept": len(debate_kept),
            "debate_groups_all_correct": debate_counts.get("debate_groups_all_correct", 0),
            "debate_groups_all_wrong": debate_counts.get("debate_groups_all_wrong", 0),
            "debate_pair_accuracy": debate_counts.get("debate_pair_accuracy", float("nan")),
            "debate_accuracy": float(np.mean([r.correct for r in debate_rollouts]))
            if debate_rollouts
            else float("nan"),
            "sequences": len(sequences),
            "updates": update["updates"],
            "learning_rate": learning_rate,
            "rollout_seconds": rollout_seconds,
            "update_seconds": update_seconds,
            "tokens_per_second": generated / max(rollout_seconds + update_seconds, 1e-9),
        }

    # -- rollouts -------------------------------------------------------------------------
    def question_prompt(self, row: dict) -> tuple[dict, str, list]:
        return row, str(row["id"]), prompts.question_messages(row, self.system_prompt)

    def first_turn(self, backend, step: int):
        """(every first-turn group sampled, the kept (row, group) pairs, prompts sampled) of this process."""
        s = self.settings
        d = s.own  # DapoSettings (SDRL's extends it)
        quota = d.prompts_per_step // self.world
        draw = d.sampling_batch or d.prompts_per_step
        sampled_groups, kept, sampled = [], [], 0
        for _ in range(d.max_sampling_rounds if d.dynamic_sampling else 1):
            rows = self.draw(draw)[self.rank :: self.world]
            groups = sample_rollouts(
                backend,
                [self.question_prompt(r) for r in rows],
                n=d.rollouts_per_prompt,
                turn=1,
                step=step,
                settings=s,
                reward=self.reward,
            )
            sampled += len(rows)
            sampled_groups += groups
            for row, group in zip(rows, groups):
                if not d.dynamic_sampling or mixed([r.correct for r in group]):
                    kept.append((row, group))
            if not d.dynamic_sampling or all_reduce(min(len(kept), quota)) >= d.prompts_per_step:
                break
        kept = kept[:quota]
        for _, group in kept:
            for r, a in zip(group, group_advantages([r.reward for r in group], d.advantage_eps)):
                r.advantage = float(a)
        return sampled_groups, kept, sampled

    def debate_turn(self, backend, step: int, kept):
        """A second turn on the kept groups: (debate prompts, kept debate groups, every debate rollout,
        counts); DAPO has none (SDRL's: `methods/sdrl.py`)."""
        return 0, [], [], {}

    def describe(self, metrics: dict) -> str:
        return (
            f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, {metrics['groups_kept']} of "
            f"{metrics['prompts_sampled']} groups kept, {metrics['debate_groups_kept']} debate groups kept"
        )
