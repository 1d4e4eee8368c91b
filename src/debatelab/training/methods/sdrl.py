"""SDRL (Liu et al., arXiv:2601.22297 §5; §3-5): DAPO (`methods/dapo.py`) plus a second turn in which the policy debates two
of a prompt's own rollouts; both turns' sequences are updated together.

The second turn (`SdrlTrainer.debate_turn`, step 3 of a DAPO step): a seeded random
`debate_prompts_per_step` of the kept prompts get a debate prompt built from two of their own
rollouts (`pair_mode`, `debate_template`), n_d second-turn rollouts each (`debate_rollouts`);
groups whose rollouts are all correct or all wrong are dropped; advantages within each debate
group. Its settings are `SdrlSettings` (config `training.runs.<run>.sdrl`: DAPO's keys and these).

The debate pairs (`choose_pair`, Liu et al., arXiv:2601.22297 §5 step 3): which two of a prompt's own rollouts its debate prompt shows.

* ``rand``: two distinct rollouts drawn uniformly;
* ``freq``: one rollout of the most frequent answer and one of the second most frequent, each drawn
  at random within its answer class, in random order (probability 1/2 each way, against position
  bias). Answers are compared by their `grading.answer_keys` (canonical forms); unparsable
  rollouts form one class that is used only when fewer than two valid classes exist. Ties in
  frequency go to the class seen first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import prompts
from ...grading import INVALID, answer_keys
from ...llm.base import stable_hash
from ..core.rewards import group_advantages
from ..core.rollouts import Rollout, sample_rollouts
from .dapo import DapoSettings, DapoTrainer, mixed

PAIR_MODES = ("rand", "freq")
DEBATE_TEMPLATES = ("two_turn", "one_message")


@dataclass(frozen=True)
class SdrlSettings(DapoSettings):
    """SDRL's own settings (config `training.runs.<run>.sdrl`): DAPO's, and its second turn's (Liu et al.,
    arXiv:2601.22297 §5 steps 3-4; §6.1.1, App. A.1 defaults)."""

    debate_prompts_per_step: int = 128  # M_d: kept prompts that get a debate prompt
    debate_rollouts: int = 4  # n_d: second-turn rollouts per debate prompt
    pair_mode: str = "rand"  # two random rollouts, or one of each of the two most frequent answers
    debate_template: str = "two_turn"  # the first solution as the model's own turn, or both in one message

    def __post_init__(self):
        super().__post_init__()
        if self.pair_mode not in PAIR_MODES or self.debate_template not in DEBATE_TEMPLATES:
            raise ValueError(
                f"training: sdrl.pair_mode must be one of {PAIR_MODES} and sdrl.debate_template one of "
                f"{DEBATE_TEMPLATES}, got {self.pair_mode!r}, {self.debate_template!r}"
            )
        if self.debate_prompts_per_step < 0 or self.debate_rollouts < 1:
            raise ValueError("training: sdrl.debate_prompts_per_step >= 0 and sdrl.debate_rollouts >= 1 are required")


def choose_pair(
    group: Sequence[Rollout], mode: str, rng: np.random.Generator, task_type: str
) -> tuple[Rollout, Rollout]:
    """The two rollouts of a debate prompt (module docstring)."""
    if len(group) < 2:
        raise ValueError(
            f"a debate pair needs two rollouts, the group of {group[0].question_id if group else '?'} has {len(group)}"
        )
    if mode == "rand":
        i, j = rng.choice(len(group), size=2, replace=False)
        return group[int(i)], group[int(j)]
    if mode != "freq":
        raise ValueError(f"unknown pair_mode {mode!r}; expected rand or freq")
    keys = answer_keys([r.answer for r in group], task_type=task_type, merge_equivalent=True)
    counts = Counter(keys)
    classes = [k for k, _ in counts.most_common() if k != INVALID]  # most_common keeps first-seen order on ties
    if len(classes) < 2 and INVALID in counts:
        classes.append(INVALID)
    if len(classes) < 2:  # one answer class only: the pair is two of its rollouts
        i, j = rng.choice(len(group), size=2, replace=False)
        return group[int(i)], group[int(j)]
    picked = []
    for key in classes[:2]:
        members = [k for k, key_k in enumerate(keys) if key_k == key]
        picked.append(group[members[int(rng.integers(len(members)))]])
    if rng.random() < 0.5:
        picked.reverse()
    return picked[0], picked[1]


class SdrlTrainer(DapoTrainer):
    """DAPO's step with SDRL's second turn."""

    def debate_turn(self, backend, step: int, kept):
        """SDRL's second turn: (debate prompts, kept debate groups, every debate rollout) of this process."""
        s, d = self.settings, self.settings.own
        if not kept or not d.debate_prompts_per_step:
            return 0, [], [], {}
        rng = np.random.default_rng(
            int(stable_hash({"run": s.seed, "step": step, "rank": self.rank, "what": "debate"})[:8], 16)
        )
        count = min(max(d.debate_prompts_per_step // self.world, 1), len(kept))
        chosen = sorted(rng.choice(len(kept), size=count, replace=False).tolist())
        prompts_, pair_correct = [], []
        for index in chosen:
            row, group = kept[index]
            first, second = choose_pair(group, d.pair_mode, rng, row["task_type"])
            pair_correct += [first.correct, second.correct]
            messages = prompts.self_debate_messages(row, self.system_prompt, first.text, second.text, d.debate_template)
            prompts_.append((row, f"{row['id']}#debate", messages))
        groups = sample_rollouts(
            backend, prompts_, n=d.debate_rollouts, turn=2, step=step, settings=s, reward=self.reward
        )
        kept_groups, all_correct, all_wrong = [], 0, 0
        for group in groups:
            # All correct or all wrong: dropped, decided on correctness as the paper's filter (Liu et al., arXiv:2601.22297
            # §2), not on rewards, which the overlong penalty makes unequal; SDRL does not resample.
            if not mixed([r.correct for r in group]):
                all_correct += all(r.correct for r in group)
                all_wrong += not any(r.correct for r in group)
                continue
            for r, a in zip(group, group_advantages([r.reward for r in group], d.advantage_eps)):
                r.advantage = float(a)
            kept_groups.append(group)
        # what claims sdrl-3 and sdrl-4 read (evaluation.papers.sdrl_claims): the pair's own accuracy (the two
        # first-turn answers shown) and why groups were dropped
        counts = {
            "debate_groups_all_correct": all_correct,
            "debate_groups_all_wrong": all_wrong,
            "debate_pair_accuracy": float(np.mean(pair_correct)) if pair_correct else float("nan"),
        }
        return len(prompts_), kept_groups, [r for group in groups for r in group], counts
