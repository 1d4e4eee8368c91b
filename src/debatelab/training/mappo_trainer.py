"""MAPPO's and RMAAC's training step (spec 000 §8; formulas in `mappo`), on the shared update code.

One step:
1. Draw M questions uniformly (the run's seeded order) and run one debate of each with the current
   agents, T rounds all-to-all; RMAAC swaps shown peer responses for wrong ones (`PeerSwapDebate`).
2. The shared return R(τ) of each debate, and for every turn (seat i, round t) the critic's input:
   the answers held before round t and seat i's place in them.
3. Advantages R − V(s) from the critic as it was before this step, standardised over the batch;
   then the critic fits R (`critic_epochs` full-batch steps on the whole batch's turns).
4. Per agent, one clipped update on its own turns (the debate context masked), each with its own
   advantage, KL as the run's `kl_coef` (0 by default: PPO).

Data parallel (`gpus` > 1): every process draws the same M questions and debates every world-th;
the answers and returns of all debates are gathered, so every process takes the same advantages
and fits the same critic (on the CPU, deterministic), and each agent's gradients are averaged.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import pandas as pd

from .debate_rollouts import answers_by_round, rollout_debates, training_protocol_options
from .mappo import (MappoSettings, PeerSwapDebate, agreement_features, build_critic, critic_advantages,
                    final_disagreement, fit_critic, shared_reward)
from .rollouts import Rollout
from .trainer import _all_reduce, pooled
from .udpo import task_reward
from .udpo_trainer import DebateTrainer, _gathered

MAPPO_METRIC_COLUMNS = [
    "step", "loss", "reward_mean", "reward_std", "accuracy", "consensus", "value_mean", "value_loss",
    "peer_swaps", "kl", "clip_fraction", "entropy", "response_length", "debates", "sequences", "updates",
    "learning_rate", "rollout_seconds", "update_seconds", "tokens_per_second",
]


class MappoTrainer(DebateTrainer):
    metric_columns = MAPPO_METRIC_COLUMNS
    data_parallel = True

    def __init__(self, questions: pd.DataFrame, policies, settings, *, run: str, participants: Sequence[str],
                 mappo: MappoSettings | None = None, system_prompts: dict | None = None, checkpoint_dir=None,
                 fingerprint: str | dict = "", heldout: pd.DataFrame | None = None):
        import torch

        self.mappo = mappo if mappo is not None else settings.mappo
        self.critic = build_critic(self.mappo.critic_hidden, settings.seed)
        policies.attach("critic", self.critic, torch.optim.Adam(self.critic.parameters(),
                                                                lr=self.mappo.critic_learning_rate))
        super().__init__(questions, policies, settings, run=run, participants=participants, system_prompts=system_prompts,
                         checkpoint_dir=checkpoint_dir, fingerprint=fingerprint, heldout=heldout)
        self.critic_optimizer = policies.optimizers["@critic"]
        resolved = self.mappo.resolved(settings.method)
        self.consensus_weight, self.swap_prob = resolved["consensus_weight"], resolved["peer_swap_prob"]
        if self.mappo.questions_per_step % self.world:
            raise ValueError(f"{settings.method}: questions_per_step = {self.mappo.questions_per_step} must divide among "
                             f"{self.world} processes")

    def _describe(self, metrics: dict) -> str:
        return (f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, consensus "
                f"{metrics['consensus']:.3f}, value loss {metrics['value_loss']:.4f}")

    def critic_inputs(self, answers: list, task_type: str) -> np.ndarray:
        """One row per (seat, round) of a debate, seat-major: `agreement_features` before that round."""
        rounds = len(answers) - 1
        return np.array([agreement_features(answers[t - 1] if t else None, i, t, rounds, task_type)
                         for i in range(len(answers[0])) for t in range(rounds + 1)], dtype=np.float32)

    def train_step(self, step: int) -> dict:
        import torch

        s, m_settings = self.settings, self.mappo
        start = time.perf_counter()
        self.policy.train(False)
        rows = self._draw(m_settings.questions_per_step)
        mine = list(range(self.rank, len(rows), self.world))
        options = {k: v for k, v in training_protocol_options(s, m_settings.rounds).items() if k != "kind"}
        debate = PeerSwapDebate(options, p=self.swap_prob, step=step)
        states = rollout_debates(self.policy, [rows[m] for m in mine], self.participants, s, step=step,
                                 rounds=m_settings.rounds, system_prompts=self.system_prompts, debate=debate)
        self.policy.rollouts_done()
        local = []
        for st in states:
            answers = answers_by_round(st)
            r_task = task_reward(answers, str(st.row["answer"]), st.task_type, labels=st.labels)
            disagreement = final_disagreement(answers, st.task_type)
            shaping = np.zeros(len(answers[0]) * len(answers), dtype=np.float32)  # critic_inputs' order
            for turn in st.pre + st.turns:
                shaping[turn.agent * len(answers) + turn.round] = self.length_shaping(turn)
            local.append({"answers": answers, "task_type": st.task_type, "r_task": r_task, "consensus": 1 - disagreement,
                          "reward": shared_reward(r_task, disagreement, self.consensus_weight), "shaping": shaping})
        debates = _gathered(local, self.rank, self.world)  # the whole batch, in batch order
        inputs = [self.critic_inputs(d["answers"], d["task_type"]) for d in debates]
        features = np.concatenate(inputs)
        returns = np.concatenate([np.full(len(x), d["reward"], dtype=np.float32) + d["shaping"]
                                  for x, d in zip(inputs, debates)])
        with torch.no_grad():
            values = self.critic(torch.as_tensor(features)).squeeze(-1).numpy()
        advantages = critic_advantages(returns, values, m_settings.normalize_advantages)
        value_loss = fit_critic(self.critic, self.critic_optimizer, features, returns, m_settings.critic_epochs)
        offsets = np.cumsum([0, *[len(x) for x in inputs]])
        by_agent: dict[str, list[Rollout]] = {}
        for m, st in zip(mine, states):
            for turn in st.pre + st.turns:
                seat = self.seats[turn.agent]
                row = offsets[m] + turn.agent * len(debates[m]["answers"]) + turn.round  # critic_inputs' order
                by_agent.setdefault(self.seat_agent[seat], []).append(self.turn_rollout(
                    st, turn, group=f"{st.question_id}#{m}#{turn.agent}#{turn.round}", sample=turn.agent,
                    reward=float(returns[row]), advantage=float(advantages[row])))
        rollout_seconds = time.perf_counter() - start

        self.policy.train(True)
        update_start = time.perf_counter()
        updates = []
        for agent in self.policy.agents:
            if agent in by_agent:
                with self.policy.acting(agent) as view:
                    updates.append(self._update(by_agent[agent], step, policy=view))
        update_seconds = time.perf_counter() - update_start
        learning_rate = self._step_schedules()
        lengths = [len(r.token_ids) for rs in by_agent.values() for r in rs]
        generated = _all_reduce(sum(lengths))
        rewards = np.array([d["reward"] for d in debates])
        mean = lambda key: float(np.nanmean([x[key] for x in updates])) if updates else float("nan")  # noqa: E731
        offered = _all_reduce(debate.offered)
        return {
            "step": step + 1, "loss": mean("loss"), "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()), "accuracy": float(np.mean([d["r_task"] for d in debates])),
            "consensus": float(np.mean([d["consensus"] for d in debates])), "value_mean": float(values.mean()),
            "value_loss": value_loss, "peer_swaps": _all_reduce(debate.swaps) / offered if offered else 0.0,
            "kl": mean("kl"), "clip_fraction": mean("clip_fraction"), "entropy": mean("entropy"),
            "response_length": pooled(lengths), "debates": len(debates), "sequences": int(_all_reduce(len(lengths))),
            "updates": sum(u["updates"] for u in updates), "learning_rate": learning_rate,
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "tokens_per_second": generated / max(rollout_seconds + update_seconds, 1e-9),
        }
