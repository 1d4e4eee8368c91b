"""The base of the multi-agent trainers (UDPO, MAPPO and RMAAC, UMAD and IPPO): every agent of a
debate trained as its own LoRA adapter or, with `finetuning: full`, its own weights
(`agents.AgentPolicies`), on the shared loop and update of
`trainer.BaseTrainer`.

One step, written once (`DebateTrainer.train_step`), each part a hook a method overrides:

1. `before_step(step)`: anything due before the rollouts (UDPO: re-sync the KL references);
2. `rollout(step) -> DebateBatch`: draw the step's questions and run this process's debates with
   the current agents (`debate`: `debate_rollouts.rollout_debates` on the run's participants);
3. `rewards(batch)`, then `advantages(batch)`: the method's rewards and advantages, on the batch;
4. `group_by_agent(batch)`: each agent's turns as `Rollout`s (its own turns only, the debate
   context masked), by default every turn of every debate through `as_rollout`;
5. `update(batch)`: the update phases (`update_phases`: default one, every agent's rollouts), each
   prepared by `before_phase` and then one clipped update per agent (`update_agent`, default
   `update_policy` on the agent's view). UMAD updates turn by turn: a phase per turn, whose
   `before_phase` recomputes π_old under the agents as the previous turn left them and takes that
   turn's rewards and advantages from it;
6. every agent's learning-rate schedule one step on (`step_schedules`), `after_update(batch)`
   (UDPO: the replay priorities' refresh at an epoch's end);
7. `metrics(batch, updates)`: the method's columns, over the columns every method shares
   (`common_metrics`: loss, KL, clip fraction, entropy, lengths, counts, time, and each agent's
   first- and last-round accuracy, loss and KL, `AGENT_METRIC_COLUMNS`).

Data parallel (`data_parallel = True`): every process debates its share of the step's questions,
each agent's gradients are averaged over the processes by its DDP wrapper or engine
(`agents.AgentPolicies.distribute`), and the metrics pool every process's values.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import zero
from .checkpoint import agents_fingerprint
from .debate_rollouts import rollout_debates
from .distributed import all_reduce, pooled
from .heldout import agent_column, answer_heldout
from .rewards import overlong_penalty
from .rollouts import Rollout, workflow_grade
from .trainer import BaseTrainer

#: The columns after the method's own in every multi-agent `metrics.parquet`, as `common_metrics` fills them.
COMMON_METRIC_COLUMNS = [
    "kl",
    "clip_fraction",
    "entropy",
    "response_length",
    "debates",
    "sequences",
    "updates",
    "learning_rate",
    "rollout_seconds",
    "update_seconds",
    "tokens_per_second",
]

#: Per agent, after the held-out columns: how often the agent's own training replies were right in
#: its first (round 0) and in its last debate round, e.g. `accuracy_last_base_a`, and its loss and
#: KL, each the pooled column restricted to the agent: by default the mean of `update_policy`'s
#: `loss` and `kl` over the agent's updates of the step (`kl`: the token mean, over every epoch's
#: mini-batches, of the run's `kl_estimator` between the policy being updated and its reference; 0
#: without a KL weight), where the pooled column is the mean over every agent's updates. A method
#: that computes a pooled column otherwise computes its agents' too (UMAD's `kl`:
#: `UmadTrainer.metrics`). A seat that learns while its peer doesn't shows here, where the pooled
#: columns average them.
AGENT_ACCURACY_COLUMNS = ("accuracy_first", "accuracy_last")
AGENT_UPDATE_COLUMNS = ("loss", "kl")
AGENT_METRIC_COLUMNS = (*AGENT_ACCURACY_COLUMNS, *AGENT_UPDATE_COLUMNS)


@dataclass
class DebateBatch:
    """One step's debates in this process, and what the step derives from them. A method keeps its
    own values (rewards, advantages, ...) in a subclass."""

    step: int
    rows: list[dict]  # the questions this process debates
    states: list  # its finished debates (`debate.engine.QuestionState`), in batch order
    positions: list[int] = field(default_factory=list)  # each debate's position in the whole step's batch
    by_agent: dict[str, list[Rollout]] = field(default_factory=dict)  # each agent's turns (`group_by_agent`)
    rollout_seconds: float = 0.0
    update_seconds: float = 0.0
    extra_tokens: int = 0  # tokens generated beside the step's debates (UDPO's priority refresh)


class DebateTrainer(BaseTrainer):
    """The step of the module docstring over `agents.AgentPolicies` (seats, per-agent optimizers and
    schedules). A method that shards its questions among processes says so (`data_parallel`)."""

    data_parallel = False
    #: Callables (trainer, batch) run after every step's update, in every process: e.g. a sample of the
    #: step's replies (`replies.recording_replies`). Process-wide; empty unless a job registers one.
    step_hooks: list = []

    def __init__(
        self,
        questions: pd.DataFrame,
        policies,
        settings,
        *,
        run: str,
        participants: Sequence[str],
        system_prompts: dict | None = None,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        from ...debate.stage import participant_labels

        self.seats = [label for label, _, _ in participant_labels(participants)]
        self.seat_agent = {label: name for label, name, _ in participant_labels(participants)}
        super().__init__(
            questions,
            policies,
            settings,
            run=run,
            checkpoint_dir=checkpoint_dir,
            fingerprint=fingerprint,
            heldout=heldout,
        )
        self.participants = list(participants)
        self.system_prompts = system_prompts or {}

    def check_processes(self) -> None:
        if self.world > 1 and not self.data_parallel:
            raise NotImplementedError(f"{self.settings.method}: multi-agent training runs in one process for now")

    # -- what the training job builds it from (`stage.train_job`) --------------------------
    @classmethod
    def load_policies(cls, bases: dict[str, str], settings, *, device: str):
        """Every trained agent (`agents.AgentPolicies`), each on its base."""
        from .agents import AgentPolicies

        return AgentPolicies(bases, settings, device=device)

    @classmethod
    def job_fingerprint(cls, settings, *, bases, dataset_path, questions, system_prompts, participants, own, world):
        """`checkpoint.agents_fingerprint`; the optimizers' split only under full fine-tuning (a LoRA
        run keeps each agent's optimizer whole in every process)."""
        return agents_fingerprint(
            settings,
            bases,
            questions["id"].astype(str).tolist(),
            participants,
            {s: c.to_dict() for s, c in own.get("coefficients", {}).items()},
            system_prompts,
            zero.layout(world) if settings.finetuning == "full" else None,
        )

    @classmethod
    def job_arguments(cls, *, system_prompts: dict, participants, reward, own: dict) -> dict:
        return {"participants": participants, "system_prompts": system_prompts, **own}

    # -- the step -------------------------------------------------------------------------
    def train_step(self, step: int) -> dict:
        self.before_step(step)
        start = time.perf_counter()
        self.policy.train(False)
        batch = self.rollout(step)
        self.policy.rollouts_done()
        self.rewards(batch)
        self.advantages(batch)
        batch.by_agent = self.group_by_agent(batch)
        batch.rollout_seconds = time.perf_counter() - start

        update_start = time.perf_counter()
        updates = self.update(batch)
        batch.update_seconds = time.perf_counter() - update_start
        learning_rate = self.step_schedules()
        self.after_update(batch)
        for hook in self.step_hooks:
            hook(self, batch)
        own = self.metrics(batch, updates)
        for column in AGENT_UPDATE_COLUMNS:  # a pooled column replaced without its agents' would mix two quantities
            missing = [a for a in self.policy.agents if column in own and agent_column(column, a) not in own]
            if missing:
                raise RuntimeError(
                    f"{type(self).__name__}.metrics replaces {column!r} but not {column}_<agent> of {missing}"
                )
        return {**self.common_metrics(batch, updates, learning_rate), **own}

    def before_step(self, step: int) -> None:
        """Before the step's rollouts (default: nothing)."""

    def rollout(self, step: int) -> DebateBatch:
        """The step's debates in this process (the method draws its questions, `debate` runs them)."""
        raise NotImplementedError

    def debate(self, rows: Sequence[dict], step: int, *, rounds: int, threads: int = 1, debate=None) -> list:
        """Finished debates of `rows` (`threads` each) by the current agents on the run's protocol
        (`debate`: a protocol object to run instead, e.g. RMAAC's perturbed rounds)."""
        return rollout_debates(
            self.policy,
            rows,
            self.participants,
            self.settings,
            step=step,
            rounds=rounds,
            threads=threads,
            system_prompts=self.system_prompts,
            debate=debate,
        )

    def rewards(self, batch: DebateBatch) -> None:
        """The method's rewards of the batch's debates, kept on the batch (default: nothing)."""

    def advantages(self, batch: DebateBatch) -> None:
        """The method's advantages from the batch's rewards, kept on the batch (default: nothing)."""

    def group_by_agent(self, batch: DebateBatch) -> dict[str, list[Rollout]]:
        """Each agent's turns as rollouts: every turn of every debate in order (`as_rollout`), under the
        agent of its seat (an agent in several seats trains on all of them)."""
        by_agent: dict[str, list[Rollout]] = {}
        for k, state in enumerate(batch.states):
            for turn in state.pre + state.turns:
                agent = self.seat_agent[self.seats[turn.agent]]
                by_agent.setdefault(agent, []).append(self.as_rollout(batch, k, state, turn))
        return by_agent

    def as_rollout(self, batch: DebateBatch, k: int, state, turn) -> Rollout:
        """The batch's k-th debate's `turn` as a rollout of its agent, with the method's group, reward,
        advantage and weight (`turn_rollout`)."""
        raise NotImplementedError

    def update(self, batch: DebateBatch) -> list[dict]:
        """Every update phase in order: `before_phase`, then each agent's update on its rollouts of the
        phase (agents in the phase's order). Returns every agent update's statistics, each with its
        `agent`."""
        updates = []
        for index, phase in enumerate(self.update_phases(batch)):
            self.before_phase(batch, index, phase)
            self.policy.train(True)
            for agent, rollouts in phase.items():
                with self.policy.acting(agent) as view:
                    updates.append({**self.update_agent(batch, agent, rollouts, view), "agent": agent})
        return updates

    def update_phases(self, batch: DebateBatch) -> list[dict[str, list[Rollout]]]:
        """The update's phases, each {agent: its rollouts}: default one phase, in the run's agent order."""
        return [{agent: batch.by_agent[agent] for agent in self.policy.agents if agent in batch.by_agent}]

    def before_phase(self, batch: DebateBatch, index: int, phase: dict[str, list[Rollout]]) -> None:
        """Before a phase's updates (default: nothing)."""

    def update_agent(self, batch: DebateBatch, agent: str, rollouts: list[Rollout], view) -> dict:
        """One agent's clipped update on its rollouts, as its view (`agents.AgentView`)."""
        return self.update_policy(rollouts, batch.step, policy=view)

    def step_schedules(self) -> float:
        """Every agent's schedule one step on; the learning rate the step used."""
        learning_rate = self.policy.scheduler.get_last_lr()[0]
        for scheduler in self.policy.schedulers.values():
            scheduler.step()
        return learning_rate

    def after_update(self, batch: DebateBatch) -> None:
        """After the update and the schedules (default: nothing)."""

    def common_metrics(self, batch: DebateBatch, updates: list[dict], learning_rate: float) -> dict:
        """The columns every multi-agent method has, over every process: the mean of the agents'
        update statistics, response lengths, debates, sequences, time and tokens per second."""
        lengths = [r.length for rollouts in batch.by_agent.values() for r in rollouts]
        seconds = batch.rollout_seconds + batch.update_seconds
        return {
            **self.agent_metrics(batch, updates),
            "step": batch.step + 1,
            "loss": self.update_mean(updates, "loss"),
            "kl": self.update_mean(updates, "kl"),
            "clip_fraction": self.update_mean(updates, "clip_fraction"),
            "entropy": self.update_mean(updates, "entropy"),
            "response_length": pooled(lengths),
            "debates": int(all_reduce(len(batch.states))),
            "sequences": int(all_reduce(len(lengths))),
            "updates": sum(u["updates"] for u in updates),
            "learning_rate": learning_rate,
            "rollout_seconds": batch.rollout_seconds,
            "update_seconds": batch.update_seconds,
            "tokens_per_second": all_reduce(sum(lengths) + batch.extra_tokens) / max(seconds, 1e-9),
        }

    def agent_metrics(self, batch: DebateBatch, updates: list[dict]) -> dict:
        """`AGENT_METRIC_COLUMNS` of every agent: its replies' accuracy over every process's debates, its
        updates' mean loss and KL (`update`'s statistics carry their agent), as `common_metrics`'
        `loss` and `kl` over every agent's updates (a method's `metrics` that replaces one of those
        replaces its agents' columns too); NaN for an agent without a reply in that round or
        without an update."""
        rollouts = [r for agent_rollouts in batch.by_agent.values() for r in agent_rollouts]
        last = int(all_reduce(max((r.turn for r in rollouts), default=0), op="max"))
        out = {}
        for agent in self.policy.agents:
            own = batch.by_agent.get(agent, [])
            for column, round_ in zip(AGENT_ACCURACY_COLUMNS, (0, last)):
                out[agent_column(column, agent)] = pooled([float(r.correct) for r in own if r.turn == round_])
            own_updates = [u for u in updates if u.get("agent") == agent]
            for column in AGENT_UPDATE_COLUMNS:
                out[agent_column(column, agent)] = self.update_mean(own_updates, column)
        return out

    def columns(self) -> list[str]:
        """The method's and the held-out columns (`BaseTrainer.columns`), then each agent's
        `AGENT_METRIC_COLUMNS`."""
        per_agent = [agent_column(c, agent) for agent in self.policy.agents for c in AGENT_METRIC_COLUMNS]
        return [*super().columns(), *per_agent]

    @staticmethod
    def update_mean(updates: list[dict], key: str) -> float:
        """The mean of one statistic over the agents' updates (NaN without any)."""
        return float(np.nanmean([u[key] for u in updates])) if updates else float("nan")

    def metrics(self, batch: DebateBatch, updates: list[dict]) -> dict:
        """The method's own columns (and any common one it computes otherwise)."""
        return {}

    # -- helpers of the methods -----------------------------------------------------------
    @staticmethod
    def turn_rollout(
        state, turn, *, group: str, sample: int, reward: float = 0.0, advantage: float = 0.0, weight: float = 1.0
    ) -> Rollout:
        """A debate turn as a rollout of its agent: the turn's chat is the context, its reply the completion."""
        return Rollout(
            question_id=state.question_id,
            group=group,
            turn=turn.round,
            sample=sample,
            messages=turn.messages,
            text=turn.response,
            token_ids=list(turn.token_ids),
            finish_reason=turn.finish_reason,
            answer=turn.answer,
            correct=turn.correct,
            reward=reward,
            advantage=advantage,
            weight=weight,
        )

    def length_shaping(self, turn) -> float:
        """DAPO's soft overlong punishment of a debate turn (≤ 0) when `overlong_shaping` is set, else 0."""
        s = self.settings
        if not s.overlong_shaping:
            return 0.0
        return overlong_penalty(len(turn.token_ids), s.max_tokens, s.overlong_buffer, s.overlong_penalty)

    # -- held-out accuracy ----------------------------------------------------------------
    def heldout_agents(self) -> list[str]:
        return list(self.policy.agents)

    def heldout_correct(self, step: int) -> dict[str | None, list[bool]]:
        """Each agent alone on this process's held-out questions, with its system prompt, graded as the
        debate engine grades its turns (the workflow's grader)."""
        self.policy.train(False)
        rows = self.heldout_rows[self.rank :: self.world]
        out = {}
        for agent in self.policy.agents:
            with self.policy.acting(agent):
                backend = self.policy.backend(agent, f"{agent}@heldout{step}")
                out[agent] = answer_heldout(
                    backend, rows, self.system_prompts.get(agent), self.settings, workflow_grade
                )
        self.policy.rollouts_done()
        return out
