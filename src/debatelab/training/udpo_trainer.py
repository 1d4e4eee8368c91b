"""UDPO's training step (spec 000 §5.5, Algorithm 1), on the single-policy loop's update code.

One step:
1. Draw M questions: uniformly, or with `replay` half by replay priority and half uniformly (spec
   000 §5.4; priority draws carry importance weights w, `udpo.replay_draw`).
2. Run one debate per question with the current agents (`debate_rollouts.rollout_debates`).
3. Trajectory rewards r_intra, r_inter, r_sys, r_task (`udpo.trajectory_rewards`), each seat's
   r^(i) with its coefficients (Eq 4), and batch-mean advantages per seat (§5.3).
4. Per agent, one update on its own turns of every round (the debate context is masked), every
   turn of a debate carrying the seat's trajectory advantage and the debate's importance weight w
   as its loss weight: w·(ℓ_clip − η·KL) (§5.5 step 5, `Rollout.weight`); the clipped ratio is per
   token against the rollout policy (`ratio_level: token`) and the KL anchor to the base model is
   weighted by the agent's η^(i) (k3).
5. With `replay`, when the step ends an epoch: the priority refresh below.

Replay priorities (spec 000 §5.4: "recompute U per training question after each epoch"). An epoch
is ceil(len(questions) / M) steps (`steps_per_epoch`: as many debates as training questions, rounded
up to whole steps); steps are counted from 0, so the refresh follows steps e·steps_per_epoch − 1,
e = 1, 2, …, after that step's update. It re-runs one debate per training question with the current
agents (no update; one `rollout_debates` batch, seeded with step tag −e, which no training step
uses) and sets every question's priority to U(τ) = α(1 − r_intra) + β(1 − r_inter) + γ(1 − r_sys)
+ 10⁻³ with the base weights (`udpo.replay_priority`). Between refreshes the training debates do
not move the priorities. [CHOICE] Before the first refresh every priority is 1: the first epoch's
priority draws are uniform with weight 1 (the spec does not say; an unseen question pinned at the
largest priority over-drew the questions nobody had debated). The priorities live in the
checkpointed `state.extra`, so a resumed run draws what an uninterrupted one would. Cost: a refresh
is one more debate per training question, no update: about as many debates again as the epoch's
training steps ran (the paper's run: 6726 more debates after each 211-step epoch, roughly doubling
the rollout time). The CPU twin's run ends within its first epoch, so it never refreshes (udpo_cpu:
3 steps of 2 debates over about 20 questions); tests/configs/tiny.yaml's (2 questions, M = 2)
refreshes after each of its 2 steps, 2 more one-round debates each. The refresh's time and tokens
count in the step's `rollout_seconds` and `tokens_per_second`.

An agent sitting in several seats trains one adapter on all its seats' turns, with the mean of its
seats' η. The ratio is per token, per sequence or per trajectory (`settings.ratio_level`; a
trajectory is an agent's turns of one debate). The KL anchor is the frozen base, or with
`ref_sync_steps` a copy of each agent's adapter re-synced every that many steps (spec 000 §5.3).

Data parallel (`gpus` > 1): every process draws the same M questions (the replay priorities are
the same everywhere) and debates every world-th of them; the debates' rewards are gathered, so the
batch-mean baseline and the metrics are the whole batch's, and each agent's gradients are averaged
over the processes. A priority refresh likewise debates every world-th training question in each
process and gathers the rewards, so every process holds every question's priority.
"""
from __future__ import annotations

import logging
import time
from typing import Sequence

import numpy as np
import pandas as pd

from . import zero
from .debate_rollouts import answers_by_round, rollout_debates
from .rewards import overlong_penalty
from .rollouts import Rollout
from .trainer import Trainer, _all_reduce, pooled
from .udpo import AgentCoefficients, agent_reward, batch_advantages, replay_draw, replay_priority, trajectory_rewards

log = logging.getLogger(__name__)

UDPO_METRIC_COLUMNS = [
    "step", "loss", "reward_mean", "reward_std", "accuracy", "r_intra", "r_inter", "r_sys", "kl", "clip_fraction",
    "entropy", "response_length", "debates", "sequences", "updates", "learning_rate", "rollout_seconds",
    "update_seconds", "tokens_per_second",
]


class _PerAgent:
    """Several agents' optimizers (or schedules) as one object, for checkpoints."""

    def __init__(self, parts: dict):
        self.parts = parts

    def state_dict(self) -> dict:
        return {name: part.state_dict() for name, part in self.parts.items()}

    def load_state_dict(self, state: dict) -> None:
        for name, part in self.parts.items():
            part.load_state_dict(state[name])

    def get_last_lr(self):
        return next(iter(self.parts.values())).get_last_lr()


class DebateTrainer(Trainer):
    """The single-policy loop over `agents.AgentPolicies`: seats, per-agent optimizers and schedules
    as one checkpointable object. A method that shards its questions among processes says so
    (`data_parallel`); each agent's gradients are then averaged over the processes by hand."""

    data_parallel = False
    wraps_model = False

    def __init__(self, questions: pd.DataFrame, policies, settings, *, run: str, participants: Sequence[str],
                 system_prompts: dict | None = None, checkpoint_dir=None, fingerprint: str | dict = "",
                 heldout: pd.DataFrame | None = None):
        from ..debate.stage import participant_labels

        self.seats = [label for label, _, _ in participant_labels(participants)]
        self.seat_agent = {label: name for label, name, _ in participant_labels(participants)}
        policies.model = next(iter(policies.models.values()))  # what the single-policy loop reads
        policies.optimizer, policies.scheduler = _PerAgent(policies.optimizers), _PerAgent(policies.schedulers)
        super().__init__(questions, policies, settings, run=run, reward=lambda *a: 0.0,
                         checkpoint_dir=checkpoint_dir, fingerprint=fingerprint, heldout=heldout)
        if self.world > 1 and not self.data_parallel:
            raise NotImplementedError(f"{settings.method}: multi-agent training runs in one process for now")
        if self.world > 1 and zero.requested():
            log.warning("%s: the DeepSpeed config is not used: a multi-agent run keeps each agent's LoRA optimizer "
                        "whole in every process and averages the gradients itself", settings.method)
        self.participants = list(participants)
        self.system_prompts = system_prompts or {}

    @staticmethod
    def turn_rollout(state, turn, *, group: str, sample: int, reward: float = 0.0, advantage: float = 0.0,
                     weight: float = 1.0) -> Rollout:
        """A debate turn as a rollout of its agent: the turn's chat is the context, its reply the completion."""
        return Rollout(question_id=state.question_id, group=group, turn=turn.round, sample=sample, messages=turn.messages,
                       text=turn.response, token_ids=list(turn.token_ids), finish_reason=turn.finish_reason,
                       answer=turn.answer, correct=turn.correct, reward=reward, advantage=advantage, weight=weight)

    def length_shaping(self, turn) -> float:
        """DAPO's soft overlong punishment of a debate turn (≤ 0) when `overlong_shaping` is set, else 0."""
        s = self.settings
        if not s.overlong_shaping:
            return 0.0
        return overlong_penalty(len(turn.token_ids), s.max_tokens, s.overlong_buffer, s.overlong_penalty)

    def heldout_agents(self) -> list[str]:
        return list(self.policy.agents)

    def heldout_correct(self, step: int) -> dict[str | None, list[bool]]:
        """Each agent alone on this process's held-out questions, with its system prompt, graded as the
        debate engine grades its turns (the workflow's grader)."""
        from .heldout import answer_heldout
        from .rollouts import workflow_grade

        self.policy.train(False)
        rows = self.heldout_rows[self.rank :: self.world]
        out = {}
        for agent in self.policy.agents:
            with self.policy.acting(agent):
                backend = self.policy.backend(agent, f"{agent}@heldout{step}")
                out[agent] = answer_heldout(backend, rows, self.system_prompts.get(agent), self.settings, workflow_grade)
        self.policy.rollouts_done()
        return out

    def _step_schedules(self) -> float:
        """Every agent's schedule one step on; the learning rate the step used."""
        learning_rate = self.policy.scheduler.get_last_lr()[0]
        for scheduler in self.policy.schedulers.values():
            scheduler.step()
        return learning_rate


def _gathered(local: list, rank: int, world: int) -> list:
    """Every process's `local` items (process r's j-th item is the batch's item r + j·world), in the
    batch's order."""
    if world == 1:
        return list(local)
    import torch.distributed as dist

    parts: list = [None] * world
    dist.all_gather_object(parts, list(local))
    out = [None] * sum(len(part) for part in parts)
    for r, part in enumerate(parts):
        out[r::world] = part
    return out


class UdpoTrainer(DebateTrainer):
    metric_columns = UDPO_METRIC_COLUMNS
    data_parallel = True

    def __init__(self, questions: pd.DataFrame, policies, settings, *, run: str, participants: Sequence[str],
                 rounds: int, coefficients: dict[str, AgentCoefficients], base_weights: dict[str, float] | None = None,
                 replay: bool = True, questions_per_step: int = 32, ref_sync_steps: int | None = None,
                 system_prompts: dict | None = None, checkpoint_dir=None, fingerprint: str | dict = "",
                 heldout: pd.DataFrame | None = None):
        super().__init__(questions, policies, settings, run=run, participants=participants, system_prompts=system_prompts,
                         checkpoint_dir=checkpoint_dir, fingerprint=fingerprint, heldout=heldout)
        missing = [seat for seat in self.seats if seat not in coefficients]
        if missing:
            raise ValueError(f"udpo: no coefficients for seat(s) {missing}")
        self.rounds = rounds
        self.coefficients, self.replay, self.questions_per_step = coefficients, replay, questions_per_step
        self.base_weights = base_weights or {"alpha": 1 / 3, "beta": 1 / 3, "gamma": 1 / 3}
        self.ref_sync_steps = ref_sync_steps
        if questions_per_step % self.world:
            raise ValueError(f"udpo: questions_per_step = {questions_per_step} must divide among {self.world} processes")

    @property
    def priority(self) -> np.ndarray:
        """Replay priority per training question (kept in the checkpointed state): 1 each (uniform)
        until the first refresh, then U(τ) of the latest refresh's debate (module docstring)."""
        if "priority" not in self.state.extra:
            self.state.extra["priority"] = [1.0] * len(self.rows)
        return np.asarray(self.state.extra["priority"], dtype=float)

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one epoch over the training questions: ceil(questions / M)."""
        return -(-len(self.rows) // self.questions_per_step)

    @staticmethod
    def refresh_step(epoch: int) -> int:
        """The step tag of the refresh after epoch `epoch` (1, 2, …) in its debates' seeds: negative,
        so that no training step's debates share them."""
        return -epoch

    def _trajectory_rewards(self, states) -> list[dict]:
        """Every process's debates' trajectory rewards, in the batch's order."""
        return _gathered([trajectory_rewards(answers_by_round(st), str(st.row["answer"]), st.task_type,
                                             labels=st.labels) for st in states], self.rank, self.world)

    def refresh_priorities(self, epoch: int) -> int:
        """Every training question's priority U(τ) from one fresh debate of it under the current agents
        (no update); this process debates every world-th question. Returns the tokens it generated."""
        self.policy.train(False)
        rows = self.rows[self.rank :: self.world]
        states = rollout_debates(self.policy, rows, self.participants, self.settings, step=self.refresh_step(epoch),
                                 rounds=self.rounds, system_prompts=self.system_prompts)
        self.policy.rollouts_done()
        self.state.extra["priority"] = [replay_priority(r, self.base_weights) for r in self._trajectory_rewards(states)]
        return sum(len(turn.token_ids) for st in states for turn in st.pre + st.turns)

    def _draw_step(self, step: int) -> tuple[list[int], np.ndarray]:
        m = self.questions_per_step
        if not self.replay:
            ids = {str(r["id"]): k for k, r in enumerate(self.rows)}
            return [ids[str(r["id"])] for r in self._draw(m)], np.ones(m)
        rng = np.random.default_rng([self.settings.seed, step, 7])
        index, weights = replay_draw(self.priority, m, rng)
        return index.tolist(), weights

    def train_step(self, step: int) -> dict:
        s = self.settings
        if self.ref_sync_steps and step % self.ref_sync_steps == 0:
            self.policy.sync_references()  # θ_ref ← θ (step 0: the reference is the starting adapters)
        start = time.perf_counter()
        self.policy.train(False)
        index, weights = self._draw_step(step)
        mine = list(range(self.rank, len(index), self.world))  # this process's debates (batch positions)
        rows = [self.rows[index[m]] for m in mine]
        states = rollout_debates(self.policy, rows, self.participants, s, step=step, rounds=self.rounds,
                                 system_prompts=self.system_prompts)
        self.policy.rollouts_done()
        rewards = self._trajectory_rewards(states)
        seat_rewards = np.array([[agent_reward(r, self.coefficients[seat]) for seat in self.seats] for r in rewards])
        if s.overlong_shaping:  # a seat's trajectory reward gains the mean punishment of its turns
            seat_rewards = seat_rewards + np.array(_gathered(
                [[np.mean([self.length_shaping(t) for t in st.pre + st.turns if t.agent == i])
                  for i in range(len(self.seats))] for st in states], self.rank, self.world))
        advantages = batch_advantages(seat_rewards)  # the whole batch's baseline
        by_agent: dict[str, list[Rollout]] = {}  # group = the agent's trajectory in debate m
        for m, st in zip(mine, states):
            for turn in st.pre + st.turns:
                seat = self.seats[turn.agent]
                by_agent.setdefault(self.seat_agent[seat], []).append(self.turn_rollout(
                    st, turn, group=f"{st.question_id}#{m}", sample=turn.agent,
                    reward=float(seat_rewards[m, turn.agent]), advantage=float(advantages[m, turn.agent]),
                    weight=float(weights[m])))
        rollout_seconds = time.perf_counter() - start

        self.policy.train(True)
        update_start = time.perf_counter()
        updates = []
        for agent in self.policy.agents:
            if agent not in by_agent:
                continue
            eta = float(np.mean([self.coefficients[seat].eta for seat in self.seats if self.seat_agent[seat] == agent]))
            with self.policy.acting(agent) as view:
                updates.append(self._update(by_agent[agent], step, policy=view, kl_coef=eta))
        update_seconds = time.perf_counter() - update_start
        learning_rate = self._step_schedules()
        lengths = [len(r.token_ids) for rs in by_agent.values() for r in rs]
        refreshed = 0
        if self.replay and (step + 1) % self.steps_per_epoch == 0:
            refresh_start = time.perf_counter()
            refreshed = self.refresh_priorities((step + 1) // self.steps_per_epoch)
            rollout_seconds += time.perf_counter() - refresh_start
        generated = _all_reduce(sum(lengths) + refreshed)
        mean = lambda key: float(np.nanmean([x[key] for x in updates])) if updates else float("nan")  # noqa: E731
        return {
            "step": step + 1, "loss": mean("loss"),
            "reward_mean": float(seat_rewards.mean()),
            "reward_std": float(seat_rewards.std()), "accuracy": float(np.mean([r["r_task"] for r in rewards])),
            "r_intra": float(np.mean([r["r_intra"] for r in rewards])),
            "r_inter": float(np.mean([r["r_inter"] for r in rewards])),
            "r_sys": float(np.mean([r["r_sys"] for r in rewards])), "kl": mean("kl"),
            "clip_fraction": mean("clip_fraction"), "entropy": mean("entropy"),
            "response_length": pooled(lengths), "debates": len(rewards), "sequences": int(_all_reduce(len(lengths))),
            "updates": sum(u["updates"] for u in updates), "learning_rate": learning_rate,
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "tokens_per_second": generated / max(rollout_seconds + update_seconds, 1e-9),
        }

    def _describe(self, metrics: dict) -> str:
        return (f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, r_intra "
                f"{metrics['r_intra']:.3f}, r_inter {metrics['r_inter']:.3f}, r_sys {metrics['r_sys']:.3f}")
