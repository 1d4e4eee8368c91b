"""MAPPO and RMAAC, UDPO's actor-critic baselines (spec 000 §8), adapted to debate as the spec
sketches them; both are approximations of the original algorithms and are labelled so.

* MAPPO (Yu et al. 2022): PPO with a centralized critic. Every agent's turn in round t is an
  action taken in the debate's state before that round; the reward is shared and terminal:
  R(τ) = r_task + w_c · (1 − D(τ)), D the final round's disagreement flag (spec 000 §4, Eq 17),
  w_c = `consensus_weight` ("optimizing for consensus"). The critic V(s) is a small MLP over
  answer-agreement features of the state (`agreement_features`); with γ = 1 and one terminal
  reward, the advantage of a turn is R − V(s) (GAE with λ = 1), standardised over the batch.
* RMAAC (He et al. 2023): the same actor-critic against perturbed states. In training, each peer
  response an agent is shown is swapped with probability `peer_swap_prob` for a response with a
  wrong answer from the same debate (`PeerSwapDebate`); the reward is r_task alone.

Pure formulas here; `mappo_trainer.MappoTrainer` runs the steps.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..debate.protocols import AllToAll
from ..grading import INVALID, answer_keys
from ..llm.base import stable_hash
from ..prompts import PeerView
from ..uncertainty.measures import debate_uncertainty

METHOD_DEFAULTS = {"mappo": {"consensus_weight": 1.0, "peer_swap_prob": 0.0},
                   "rmaac": {"consensus_weight": 0.0, "peer_swap_prob": 0.2}}
FEATURES = ("first_round", "progress", "plurality_share", "entropy", "disagreement", "invalid_share",
            "own_with_plurality", "own_invalid", "distinct_share")


@dataclass(frozen=True)
class MappoSettings:
    """MAPPO's and RMAAC's own settings (config `training.runs.<run>.mappo`); null = the method's
    default (`METHOD_DEFAULTS`). UDPO's learning rate and batch (spec 000 §8) are the run's."""

    rounds: int = 5  # T: debate rounds after the independent answer
    questions_per_step: int = 32  # debates per update (UDPO's M)
    consensus_weight: float | None = None  # w_c in R = r_task + w_c (1 − D); mappo 1, rmaac 0
    peer_swap_prob: float | None = None  # RMAAC's state perturbation; mappo 0, rmaac 0.2
    critic_hidden: int = 64
    critic_learning_rate: float = 1e-3
    critic_epochs: int = 5  # full-batch critic steps per rollout step, after the advantages are taken
    normalize_advantages: bool = True

    def __post_init__(self):
        if self.rounds < 1 or self.questions_per_step < 1 or self.critic_hidden < 1 or self.critic_epochs < 0:
            raise ValueError("mappo: rounds, questions_per_step and critic_hidden >= 1, critic_epochs >= 0 are required")
        if self.peer_swap_prob is not None and not 0 <= self.peer_swap_prob <= 1:
            raise ValueError(f"mappo: peer_swap_prob must be in [0, 1], got {self.peer_swap_prob}")
        if self.critic_learning_rate <= 0 or (self.consensus_weight is not None and self.consensus_weight < 0):
            raise ValueError("mappo: critic_learning_rate > 0 and consensus_weight >= 0 are required")

    def resolved(self, method: str) -> dict:
        """consensus_weight and peer_swap_prob with the method's defaults filled in."""
        defaults = METHOD_DEFAULTS[method]
        return {k: defaults[k] if getattr(self, k) is None else getattr(self, k) for k in defaults}


def final_disagreement(answers: Sequence[Sequence[str | None]], task_type: str) -> float:
    """D(τ) = 1[the final answers are not unanimous] (spec 000 §4, Eq 17; INVALID is one value)."""
    return debate_uncertainty(answers, task_type=task_type)["disagreement"]


def shared_reward(r_task: float, disagreement: float, consensus_weight: float) -> float:
    """R(τ) = r_task + w_c · (1 − D(τ)), shared by every agent (spec 000 §8 [CHOICE])."""
    return float(r_task) + consensus_weight * (1.0 - float(disagreement))


def agreement_features(previous: Sequence[str | None] | None, own: int, round_: int, rounds: int,
                       task_type: str) -> list[float]:
    """The critic's input for agent `own`'s round-`round_` turn (`FEATURES`): the agreement of the
    answers every agent holds before that round (`previous`; None before round 0) and where agent
    `own` stands in it. Shares are over the N agents; the entropy is normalised by log N."""
    progress = round_ / rounds if rounds else 0.0
    if previous is None:
        return [1.0, progress, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    keys = answer_keys(list(previous), task_type=task_type)
    n = len(keys)
    counts = Counter(keys)
    top, top_count = counts.most_common(1)[0]
    p = np.array(list(counts.values()), dtype=float) / n
    entropy = float(-(p * np.log(p)).sum() / np.log(n)) if n > 1 else 0.0
    return [0.0, progress, top_count / n, entropy, float(len(counts) > 1), counts.get(INVALID, 0) / n,
            float(keys[own] == top), float(keys[own] == INVALID), len(counts) / n]


def build_critic(hidden: int, seed: int):
    """V(s): a two-hidden-layer tanh MLP over `FEATURES`, seeded apart from the policy's random state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(len(FEATURES), hidden), torch.nn.Tanh(),
                                   torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))


def critic_advantages(returns: np.ndarray, values: np.ndarray, normalize: bool = True, eps: float = 1e-8) -> np.ndarray:
    """A = R − V(s) per turn (terminal reward, γ = λ = 1), standardised over the batch when `normalize`
    (MAPPO's advantage normalisation)."""
    advantages = np.asarray(returns, dtype=float) - np.asarray(values, dtype=float)
    if normalize and advantages.size > 1:
        advantages = (advantages - advantages.mean()) / (advantages.std() + eps)
    return advantages


def fit_critic(critic, optimizer, features: np.ndarray, returns: np.ndarray, epochs: int) -> float:
    """`epochs` full-batch Adam steps on the mean squared error of V(s) against R; the loss before them."""
    import torch

    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(returns, dtype=torch.float32)
    with torch.no_grad():
        before = float(torch.nn.functional.mse_loss(critic(x).squeeze(-1), y))
    for _ in range(epochs):
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(critic(x).squeeze(-1), y).backward()
        optimizer.step()
    return before


class PeerSwapDebate(AllToAll):
    """All-to-all rounds in which each peer response shown to an agent is, with probability `p`,
    swapped for a response with a wrong (parsed, incorrect) answer from the same debate: another
    peer's of this round if there is one, else any earlier wrong turn of the debate not by the
    receiver (RMAAC's adversarial state perturbation, spec 000 §8 [CHOICE]). With no wrong turn in
    the debate yet, the peer is shown as it is. Each draw is seeded by (seed, step, question,
    thread, receiver, peer, round). `swaps` and `offered` count what happened."""

    kind = "all_to_all"

    def __init__(self, options: dict, *, p: float, step: int):
        super().__init__("training", options)
        self.p, self.step = p, step
        self.swaps = self.offered = 0

    def peer_views(self, q, i, t, current, full, answer_only):
        views = super().peer_views(q, i, t, current, full, answer_only)
        if not self.p:
            return views
        out = []
        for view in views:
            j = view.index
            rng = np.random.default_rng(int(stable_hash({"seed": q.seed, "step": self.step, "question": q.question_id,
                                                         "thread": q.thread, "to": i, "peer": j, "round": t})[:12], 16))
            self.offered += 1
            if rng.random() < self.p:
                wrong = [c for k, c in enumerate(current) if k not in (i, j) and c.valid and not c.correct]
                wrong = wrong or [c for c in [*q.pre, *q.turns] if c.agent != i and c.valid and not c.correct]
                if wrong:
                    pick = wrong[int(rng.integers(len(wrong)))]
                    view = PeerView(j, pick.response, pick.answer, view.full)
                    self.swaps += 1
            out.append(view)
        return out
