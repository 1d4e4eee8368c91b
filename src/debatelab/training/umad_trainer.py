"""UMAD's training step (spec 001 §4.3, Algorithm 2), on the shared update code.

One step:
1. Draw B questions; run G paired debate threads of each with the current agents for T_train
   turns (turn 0 the first answer, then T_train − 1 debate rounds), all batched per agent.
2. (per turn, step 4) π_old's token log-probabilities of the turn's responses (one pass per
   agent, no gradient), and the reference's when the KL is on; Û = the response's mean token NLL
   under π_old at the sampling temperature.
3. Per question: the team-sum (or individual) reward R of every (thread, agent, turn), the
   epistemic-influence reward for t < T_train − 1 from the unmodified R, −β·Σ k1 in the reward
   (`kl_mode: reward`, the paper's code), group advantages over the G threads of each (agent, turn),
   times the aleatoric weight W = exp(−α_au·Ū) (`umad.umad_advantages`).
4. Turns are updated in sequence, as the paper's code does: for t = 0..T_train − 1, π_old's (and
   the reference's) log-probabilities of the turn-t responses under the agents as turn t − 1's
   update left them (the paper's code recomputes them per turn, marl/learners/ippo_learner.py), Û,
   W and the KL in the reward from those, then each agent one clipped update on its own turn-t
   responses against that π_old.

IPPO is η = α_au = 0 (plain per-agent GRPO on the team reward).

Data parallel (`gpus` > 1): every process draws the same B questions and debates its share
(every world-th); a question's G threads stay in one process, so rewards and group advantages are
local. Each agent's gradients are averaged over the processes and the loss normaliser counts every
process's tokens, so the update equals one process's on all B questions; metrics pool all processes.
"""
from __future__ import annotations

import time

import numpy as np
import pandas as pd

from .debate_rollouts import rollout_debates
from .rollouts import Rollout
from .trainer import _all_reduce, pooled
from .udpo_trainer import DebateTrainer
from .umad import umad_advantages

UMAD_METRIC_COLUMNS = [
    "step", "loss", "reward_mean", "reward_std", "accuracy", "accuracy_first", "eu_mean", "weight_mean", "kl",
    "clip_fraction", "entropy", "response_length", "debates", "sequences", "updates", "learning_rate",
    "rollout_seconds", "update_seconds", "tokens_per_second",
]


class UmadTrainer(DebateTrainer):
    metric_columns = UMAD_METRIC_COLUMNS
    data_parallel = True

    def __init__(self, questions: pd.DataFrame, policies, settings, *, run: str, participants, umad=None,
                 system_prompts: dict | None = None, checkpoint_dir=None, fingerprint: str | dict = "",
                 heldout: pd.DataFrame | None = None):
        super().__init__(questions, policies, settings, run=run, participants=participants, system_prompts=system_prompts,
                         checkpoint_dir=checkpoint_dir, fingerprint=fingerprint, heldout=heldout)
        self.umad = umad if umad is not None else settings.umad
        if self.umad.questions_per_step % self.world:
            raise ValueError(f"umad: questions_per_step = {self.umad.questions_per_step} must divide among {self.world} processes")

    def _describe(self, metrics: dict) -> str:
        return (f"team reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy_first']:.3f} -> "
                f"{metrics['accuracy']:.3f}, EU {metrics['eu_mean']:+.3f}, W {metrics['weight_mean']:.3f}")

    def train_step(self, step: int) -> dict:
        s, u = self.settings, self.umad
        start = time.perf_counter()
        self.policy.train(False)
        rows = self._draw(u.questions_per_step)[self.rank :: self.world]
        states = rollout_debates(self.policy, rows, self.participants, s, step=step, rounds=u.turns - 1,
                                 threads=u.threads, system_prompts=self.system_prompts)
        self.policy.rollouts_done()
        G, N, T = u.threads, len(self.seats), u.turns
        # cell[(q, g, i, t)]: question q's thread g (states are question-major, threads inner), seat i, turn t
        by_agent: dict[str, list[Rollout]] = {}
        cell: dict[tuple, Rollout] = {}
        for k, state in enumerate(states):
            q, g = divmod(k, G)
            for turn in state.pre + state.turns:
                i, t = turn.agent, turn.round
                r = self.turn_rollout(state, turn, group=f"{state.question_id}#{self.seats[i]}#t{t}", sample=g)
                cell[(q, g, i, t)] = r
        for q, g, i, t in sorted(cell):  # each agent's rollouts in (question, thread, seat, turn) order
            by_agent.setdefault(self.seat_agent[self.seats[i]], []).append(cell[(q, g, i, t)])
        rollout_seconds = time.perf_counter() - start

        update_start = time.perf_counter()
        with_reference = bool(s.kl_coef)
        shape = (G, N, T)
        correct = np.zeros((len(rows), *shape))
        for (q, g, i, t), r in cell.items():
            correct[(q, g, i, t)] = r.correct
        nll, penalty = np.zeros_like(correct), np.zeros_like(correct)
        parts_all = [None] * len(rows)
        updates, kl_values = [], []
        kl_in_loss = s.kl_coef if u.kl_mode == "loss" else 0.0
        for t in range(T):  # turns in sequence; each agent on its own turn-t responses
            # π_old of turn t: the policy after turn t − 1's update, as the paper's code recomputes it
            # (marl/learners/ippo_learner.py); Û, W and the KL in the reward come from it.
            passes = {}
            self.policy.train(False)
            for agent, rollouts in by_agent.items():
                turn_rollouts = [r for r in rollouts if r.turn == t]
                with self.policy.acting(agent) as view:
                    passes[agent] = self.logprob_pass(self.micro_batches(turn_rollouts, view), view,
                                                      with_reference=with_reference)
            old = {k: v for agent in passes for k, v in passes[agent][0].items()}
            ref = {k: v for agent in passes for k, v in passes[agent][1].items()}
            for (q, g, i, turn), r in cell.items():
                if turn != t:
                    continue
                logps = old[id(r)]
                nll[q, g, i, t] = -float(logps.mean()) if len(logps) else 0.0
                penalty[q, g, i, t] = -self.length_shaping(r)  # subtracted from R_total: a punishment
                if with_reference:
                    kl_values.append(float((logps - ref[id(r)]).mean()) if r.length else float("nan"))
                    if u.kl_mode == "reward":
                        penalty[q, g, i, t] += s.kl_coef * float((logps - ref[id(r)]).sum())  # β·Σ k1
            for q in range(len(rows)):  # advantages of turn t (groups are per (agent, turn): other turns untouched)
                parts = umad_advantages(correct[q], nll[q], eta=u.eta, alpha_au=u.alpha_au, reward_mode=u.reward_mode,
                                        eu_mode=u.eu_mode, eps=s.advantage_eps, penalty=penalty[q])
                for (g, i) in np.ndindex(G, N):
                    r = cell[(q, g, i, t)]
                    r.reward, r.advantage = float(parts["total"][g, i, t]), float(parts["advantage_au"][g, i, t])
                if parts_all[q] is None:
                    parts_all[q] = {key: np.array(value) for key, value in parts.items()}
                else:
                    for key, value in parts.items():
                        parts_all[q][key][..., t] = value[..., t]
            self.policy.train(True)
            for agent, rollouts in by_agent.items():
                turn_rollouts = [r for r in rollouts if r.turn == t]
                with self.policy.acting(agent) as view:
                    updates.append(self._update(turn_rollouts, step, policy=view, kl_coef=kl_in_loss,
                                                precomputed=passes[agent]))
        update_seconds = time.perf_counter() - update_start
        learning_rate = self._step_schedules()

        stack = lambda key: np.stack([p[key] for p in parts_all]) if parts_all else np.zeros((0, *shape))  # noqa: E731
        everything = [r for rs in by_agent.values() for r in rs]
        mean = lambda key: float(np.nanmean([x[key] for x in updates])) if updates else float("nan")  # noqa: E731
        kl_values = [v for v in kl_values if v == v]
        reward_mean, reward_std = pooled(stack("reward"), std=True)
        lengths = [r.length for r in everything]
        return {
            "step": step + 1, "loss": mean("loss"),
            "reward_mean": reward_mean, "reward_std": reward_std, "accuracy": pooled(correct[..., -1]),
            "accuracy_first": pooled(correct[..., 0]), "eu_mean": pooled(stack("eu")),
            "weight_mean": pooled(stack("weight")),
            "kl": pooled(kl_values) if with_reference else mean("kl"), "clip_fraction": mean("clip_fraction"),
            "entropy": mean("entropy"), "response_length": pooled(lengths),
            "debates": int(_all_reduce(len(states))), "sequences": int(_all_reduce(len(everything))),
            "updates": sum(x["updates"] for x in updates), "learning_rate": learning_rate,
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "tokens_per_second": _all_reduce(sum(lengths)) / max(rollout_seconds + update_seconds, 1e-9),
        }
