"""UMAD (Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2; §3.2, §4.2 Eqs 4-5) and its IPPO preset: its settings (`UmadSettings`), its
advantages (team reward, epistemic-influence intrinsic reward, group advantages over the G paired
threads, aleatoric weighting) and its trainer (`UmadTrainer`). IPPO is UMAD with η = α_au = 0
(`umad: {eta: 0, alpha_au: 0}`: plain per-agent GRPO on the team reward).

Arrays are indexed [g, i, t]: thread g of the question's G threads, agent i of N, turn t of T_train
(t = 0 the first answer). The formulas are pure NumPy; the trainer applies them per (agent, turn) group.

The training step (`UmadTrainer`, on `core.debate_trainer`'s step; Algorithm 2):
1. Draw B questions; run G paired debate threads of each with the current agents for T_train
   turns (turn 0 the first answer, then T_train − 1 debate rounds), all batched per agent.
2. (per turn, step 4) π_old's token log-probabilities of the turn's responses (one pass per
   agent, no gradient), and the reference's when the KL is on; Û = the response's mean token NLL
   under π_old at the sampling temperature.
3. Per question: the team-sum (or individual) reward R of every (thread, agent, turn), the
   epistemic-influence reward for t < T_train − 1 from the unmodified R, −β·Σ_t KL_t in the
   reward by the run's `kl_estimator` (`kl_mode: reward`, the paper's code, with k1), group
   advantages over the G threads of each (agent, turn), times the aleatoric weight
   W = exp(−α_au·Ū) (`umad_advantages`).
4. Turns are updated in sequence, as the paper's code does: for t = 0..T_train − 1, π_old's (and
   the reference's) log-probabilities of the turn-t responses under the agents as turn t − 1's
   update left them (the paper's code recomputes them per turn, marl/learners/ippo_learner.py), Û,
   W and the KL in the reward from those, then each agent one clipped update on its own turn-t
   responses against that π_old (an update phase per turn, `UmadTrainer.before_phase`). Mini- and
   micro-batches hold whole (question, seat, turn) groups (verl counts its mini-batches in
   prompts), so an agent's first mini-batch of the turn takes π_old and the reference from the
   update's own forward, under the same weights, and completes its groups' Û, KL and advantages
   before their loss (`first_pass_values`); only the later mini-batches need the no-gradient pass.

Data parallel (`gpus` > 1): every process draws the same B questions and debates its share
(every world-th); a question's G threads stay in one process, so rewards and group advantages are
local. Each agent's gradients are averaged over the processes and the loss normaliser counts every
process's tokens, so the update equals one process's on all B questions; metrics pool all processes.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..core.debate_trainer import COMMON_METRIC_COLUMNS, DebateBatch, DebateTrainer
from ..core.distributed import all_reduce, pooled
from ..core.heldout import agent_column
from ..core.rewards import group_advantages
from ..core.rollouts import Rollout

REWARD_MODES = ("team_sum", "individual")
EU_MODES = ("sign", "linear")
KL_MODES = ("reward", "loss")


@dataclass(frozen=True)
class UmadSettings:
    """UMAD's own settings (config `training.runs.<run>.umad`; Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2; App. D.2, Table 2 defaults)."""

    threads: int = 5  # G: paired debate threads per question
    turns: int = 2  # T_train: the first answer and T_train − 1 debate rounds
    questions_per_step: int = 256
    eta: float = 0.25  # epistemic-influence reward; 0 for IPPO
    alpha_au: float = 0.25  # aleatoric weighting; 0 for IPPO
    reward_mode: str = "team_sum"
    eu_mode: str = "sign"
    kl_mode: str = "reward"  # the paper's code: −β·Σ_t KL_t in the reward (its KL_t is k1); "loss": β·KL in the loss
    kl_coef: float = 0.0  # β, the KL weight to the base model (0.001 in the paper; 0: no reference)
    advantage_eps: float = 1e-6

    def __post_init__(self):
        if self.kl_coef < 0 or self.advantage_eps < 0:
            raise ValueError("umad: kl_coef >= 0 and advantage_eps >= 0 are required")
        if self.reward_mode not in REWARD_MODES or self.eu_mode not in EU_MODES or self.kl_mode not in KL_MODES:
            raise ValueError(
                f"umad: reward_mode in {REWARD_MODES}, eu_mode in {EU_MODES}, kl_mode in {KL_MODES} required"
            )
        if self.threads < 2 or self.turns < 1 or self.questions_per_step < 1:
            raise ValueError(
                "umad: threads >= 2 (group advantages), turns >= 1 and questions_per_step >= 1 are required"
            )


def turn_rewards(correct: np.ndarray, mode: str = "team_sum") -> np.ndarray:
    """R_{i,t} (step 3): `team_sum` gives every agent the number of correct agents of its thread at
    turn t (§4.1, the paper's code); `individual` its own correctness (Algorithm 2's R_corr)."""
    correct = np.asarray(correct, dtype=float)
    if mode == "team_sum":
        return np.repeat(correct.sum(axis=1, keepdims=True), correct.shape[1], axis=1)
    if mode == "individual":
        return correct
    raise ValueError(f"umad: reward_mode must be one of {REWARD_MODES}, got {mode!r}")


def epistemic_rewards(rewards: np.ndarray, eta: float = 0.25, mode: str = "sign") -> np.ndarray:
    """r^eu_{i,t} (step 4, Eq 5) for t < T − 1, from the unmodified rewards R: the mean change of
    agent i's peers' reward from turn t to t + 1 on the same thread, Δ = mean_{j≠i}(R_j,t+1 − R_j,t);
    `linear`: η·Δ (Eq 5, = η/(N−1)·Σ_j); `sign`: η·sign(Δ) (the paper's code). 0 at the last turn
    and for a single agent."""
    if mode not in EU_MODES:
        raise ValueError(f"umad: eu_mode must be one of {EU_MODES}, got {mode!r}")
    rewards = np.asarray(rewards, dtype=float)
    G, N, T = rewards.shape
    out = np.zeros_like(rewards)
    if N < 2 or T < 2:
        return out
    change = rewards[:, :, 1:] - rewards[:, :, :-1]  # [g, j, t]: R_j,t+1 − R_j,t
    peers = (change.sum(axis=1, keepdims=True) - change) / (N - 1)  # mean over j ≠ i
    out[:, :, :-1] = eta * (np.sign(peers) if mode == "sign" else peers)
    return out


def aleatoric_weights(nll: np.ndarray, alpha_au: float = 0.25, eps: float = 1e-8) -> np.ndarray:
    """W = exp(−α_au·Ū), Ū the response's mean token NLL under the rollout policy standardised over
    the G threads of its (agent, turn) with the population std (step 6, Eq 4): a response more
    confident than its group's mean (Ū < 0) gets W > 1."""
    nll = np.asarray(nll, dtype=float)
    standardised = (nll - nll.mean(axis=0)) / (nll.std(axis=0) + eps)
    return np.exp(-alpha_au * standardised)


def umad_advantages(
    correct: np.ndarray,
    nll: np.ndarray,
    *,
    eta: float = 0.25,
    alpha_au: float = 0.25,
    reward_mode: str = "team_sum",
    eu_mode: str = "sign",
    eps: float = 1e-6,
    penalty: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """A^au_{i,t} = W·A for every response of one question's G threads (steps 3-6), with the parts:
    R (base), r_eu, R_total = R + r_eu (− `penalty`, e.g. β·KL in the reward), A (group advantage of
    R_total), W. The EU reward comes from the unmodified R. IPPO is η = 0, α_au = 0."""
    correct = np.asarray(correct, dtype=float)
    if correct.ndim != 3 or np.shape(nll) != correct.shape:
        raise ValueError(
            f"umad: correct and nll must both be [threads, agents, turns], got {correct.shape} and {np.shape(nll)}"
        )
    base = turn_rewards(correct, reward_mode)
    eu = epistemic_rewards(base, eta, eu_mode) if eta else np.zeros_like(base)
    total = base + eu - (0.0 if penalty is None else np.asarray(penalty, dtype=float))
    advantage = group_advantages(total, eps, axis=0)  # over the G threads of each (agent, turn)
    weight = aleatoric_weights(nll, alpha_au) if alpha_au else np.ones_like(advantage)
    return {
        "reward": base,
        "eu": eu,
        "total": total,
        "advantage": advantage,
        "weight": weight,
        "advantage_au": weight * advantage,
    }


def mean_nll(token_logprobs) -> float:
    """Û = −(1/|y|) Σ_j log π(y_j | ·) of one response (NaN for an empty one)."""
    values = np.asarray(token_logprobs, dtype=float)
    return float(-values.mean()) if values.size else float("nan")


# --------------------------------------------------------------------------- the trainer

UMAD_METRIC_COLUMNS = [
    "step",
    "loss",
    "reward_mean",
    "reward_std",
    "accuracy",
    "accuracy_first",
    "eu_mean",
    "weight_mean",
    *COMMON_METRIC_COLUMNS,
]


@dataclass
class UmadBatch(DebateBatch):
    cell: dict = field(default_factory=dict)  # (q, g, i, t) -> the rollout of question q's thread g, seat i, turn t
    correct: np.ndarray | None = None  # [q, g, i, t]
    nll: np.ndarray | None = None  # Û under each turn's π_old, [q, g, i, t]
    penalty: np.ndarray | None = None  # subtracted from R_total: length shaping, β·Σ_t KL_t (kl_mode reward)
    parts: list = field(default_factory=list)  # per question: `umad_advantages`' parts, filled turn by turn
    passes: dict = field(default_factory=dict)  # the current turn's π_old (and reference) pass per agent
    first: dict = field(default_factory=dict)  # agent -> ids of its turn's first mini-batch (π_old from the update)
    plans: dict = field(default_factory=dict)  # agent -> its turn's first-epoch plan (`_plan`), made once for both uses
    where: dict = field(default_factory=dict)  # id(rollout) -> its (q, g, i, t)
    kl: np.ndarray | None = None  # each response's mean k1 under its turn's π_old to the reference, [q, g, i, t]


class UmadTrainer(DebateTrainer):
    metric_columns = UMAD_METRIC_COLUMNS
    data_parallel = True
    # A (question, seat, turn) group's advantages need all its threads' π_old: mini- and micro-batches
    # hold whole groups (as verl's mini-batches count prompts), so the first mini-batch's own forward
    # is π_old there and its no-gradient pass is skipped (`before_phase`, `first_pass_values`).
    whole_groups = True

    def __init__(
        self,
        questions: pd.DataFrame,
        policies,
        settings,
        *,
        run: str,
        participants,
        umad=None,
        system_prompts: dict | None = None,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        super().__init__(
            questions,
            policies,
            settings,
            run=run,
            participants=participants,
            system_prompts=system_prompts,
            checkpoint_dir=checkpoint_dir,
            fingerprint=fingerprint,
            heldout=heldout,
        )
        self.umad = umad if umad is not None else settings.umad
        if self.umad.questions_per_step % self.world:
            raise ValueError(
                f"umad: questions_per_step = {self.umad.questions_per_step} must divide among {self.world} processes"
            )

    def describe(self, metrics: dict) -> str:
        return (
            f"team reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy_first']:.3f} -> "
            f"{metrics['accuracy']:.3f}, EU {metrics['eu_mean']:+.3f}, W {metrics['weight_mean']:.3f}"
        )

    # -- the step's hooks (core.debate_trainer) ---------------------------------------------
    def rollout(self, step: int) -> UmadBatch:
        u = self.umad
        rows = self.draw(u.questions_per_step)[self.rank :: self.world]
        return UmadBatch(step=step, rows=rows, states=self.debate(rows, step, rounds=u.turns - 1, threads=u.threads))

    def group_by_agent(self, batch: UmadBatch) -> dict[str, list[Rollout]]:
        """Each agent's rollouts in (question, thread, seat, turn) order; `batch.cell` indexes them."""
        G = self.umad.threads
        for k, state in enumerate(batch.states):  # states are question-major, threads inner
            q, g = divmod(k, G)
            for turn in state.pre + state.turns:
                i, t = turn.agent, turn.round
                batch.cell[(q, g, i, t)] = self.turn_rollout(
                    state, turn, group=f"{state.question_id}#{self.seats[i]}#t{t}", sample=g
                )
                batch.where[id(batch.cell[(q, g, i, t)])] = (q, g, i, t)
        by_agent: dict[str, list[Rollout]] = {}
        for q, g, i, t in sorted(batch.cell):
            by_agent.setdefault(self.seat_agent[self.seats[i]], []).append(batch.cell[(q, g, i, t)])
        return by_agent

    def update_phases(self, batch: UmadBatch) -> list[dict[str, list[Rollout]]]:
        """One phase per turn, in sequence: each agent's turn-t responses."""
        u = self.umad
        batch.correct = np.zeros((len(batch.rows), u.threads, len(self.seats), u.turns))
        for (q, g, i, t), r in batch.cell.items():
            batch.correct[(q, g, i, t)] = r.correct
        batch.nll, batch.penalty = np.zeros_like(batch.correct), np.zeros_like(batch.correct)
        batch.kl = np.full_like(batch.correct, np.nan)  # NaN: not taken (no reference, or an empty response)
        batch.parts = [None] * len(batch.rows)
        return [
            {agent: [r for r in rollouts if r.turn == t] for agent, rollouts in batch.by_agent.items()}
            for t in range(u.turns)
        ]

    def before_phase(self, batch: UmadBatch, index: int, phase: dict[str, list[Rollout]]) -> None:
        """Turn t = `index`: π_old under the agents as turn t − 1's update left them (as the paper's
        code recomputes it, marl/learners/ippo_learner.py), then the turn's rewards and advantages.
        The sequences of an agent's first mini-batch get theirs from the update's own forward
        (`first_pass_values`: the same weights, before the first optimizer step), the others here."""
        self.policy.train(False)
        batch.passes, batch.first, batch.plans = {}, {}, {}
        for agent, rollouts in phase.items():
            with self.policy.acting(agent) as view:
                rest = rollouts
                if self.reuse_policy_logprobs:
                    batch.plans[agent] = self._plan(rollouts, batch.step, 0, view)  # the update's too
                    first = batch.plans[agent][0] if batch.plans[agent] else []
                    # every process alike: the update's collectives (ZeRO-3, FSDP) follow the choice
                    if not all_reduce(float(not self._whole_in_passes(rollouts, first)), "max"):
                        ids = {id(r) for micro in first for r in micro}
                        rest = [r for r in rollouts if id(r) not in ids]
                        batch.first[agent] = ids
                batch.passes[agent] = self.logprob_pass(
                    self.micro_batches(rest, view), view, with_reference=bool(self.umad.kl_coef)
                )
        old = {k: v for agent in batch.passes for k, v in batch.passes[agent][0].items()}
        ref = {k: v for agent in batch.passes for k, v in batch.passes[agent][1].items()}
        for (q, g, i, turn), r in batch.cell.items():
            if turn == index:
                batch.penalty[q, g, i, turn] = -self.length_shaping(r)  # subtracted from R_total: a punishment
                if id(r) in old:
                    self.turn_rewards(batch, (q, g, i, turn), old[id(r)], ref.get(id(r)))
        for q in range(len(batch.rows)):  # the first mini-batches' groups again when their π_old is known
            self.turn_advantages(batch, q, index)

    @staticmethod
    def _whole_in_passes(rollouts, passes) -> bool:
        """Whether every group in `passes` is there whole, in one pass (a group larger than a pass is
        split by `_plan`: its π_old then comes from the no-gradient pass)."""
        sizes = Counter(r.group for r in rollouts)
        return all(sizes[group] == n for micro in passes for group, n in Counter(r.group for r in micro).items())

    def turn_rewards(self, batch: UmadBatch, cell: tuple, logps, ref_logps) -> None:
        """Û of one turn-t response under π_old, and what its R_total loses beside the length shaping:
        with `kl_mode: reward`, β times the response's summed per-token KL to the reference, by the
        run's `kl_estimator` (k1 in the paper's code: verl's `kl_penalty: kl`)."""
        r = batch.cell[cell]
        batch.nll[cell] = -float(logps.mean()) if len(logps) else 0.0
        if self.umad.kl_coef:
            batch.kl[cell] = float((logps - ref_logps).mean()) if r.length else float("nan")
            if self.umad.kl_mode == "reward":
                from ..core.loss import kl_per_token  # torch: not on the config's import path

                kl = kl_per_token(logps, ref_logps, self.settings.kl_estimator)
                batch.penalty[cell] += self.umad.kl_coef * float(kl.sum())  # β·Σ_t KL_t

    def turn_advantages(self, batch: UmadBatch, q: int, t: int) -> None:
        """Question q's advantages of turn t (groups are per (agent, turn): other turns untouched; a
        group whose π_old is not known yet is computed again when it is)."""
        u = self.umad
        parts = umad_advantages(
            batch.correct[q],
            batch.nll[q],
            eta=u.eta,
            alpha_au=u.alpha_au,
            reward_mode=u.reward_mode,
            eu_mode=u.eu_mode,
            eps=self.umad.advantage_eps,
            penalty=batch.penalty[q],
        )
        for g, i in np.ndindex(u.threads, len(self.seats)):
            r = batch.cell[(q, g, i, t)]
            r.reward, r.advantage = float(parts["total"][g, i, t]), float(parts["advantage_au"][g, i, t])
        if batch.parts[q] is None:
            batch.parts[q] = {key: np.array(value) for key, value in parts.items()}
        else:
            for key, value in parts.items():
                batch.parts[q][key][..., t] = value[..., t]

    def first_pass_values(self, batch: UmadBatch, micro, old_logps, ref_logps) -> None:
        """The update's first forward of an agent's turn-t micro-batch (whole groups) is π_old there:
        its responses' Û and KL, then their questions' advantages, before the loss."""
        touched = set()
        for k, r in enumerate(micro):
            cell = batch.where[id(r)]
            self.turn_rewards(
                batch,
                cell,
                old_logps[k, : r.length].float(),
                None if ref_logps is None else ref_logps[k, : r.length].float(),
            )
            touched.add((cell[0], cell[3]))
        for q, t in sorted(touched):
            self.turn_advantages(batch, q, t)

    def update_agent(self, batch: UmadBatch, agent: str, rollouts: list[Rollout], view) -> dict:
        """The agent's update on its turn-t responses against the turn's π_old (the KL in the loss only
        with `kl_mode: loss`)."""
        kl_in_loss = self.umad.kl_coef if self.umad.kl_mode == "loss" else 0.0
        return self.update_policy(
            rollouts,
            batch.step,
            policy=view,
            kl_coef=kl_in_loss,
            precomputed=batch.passes[agent],
            first_pass=functools.partial(self.first_pass_values, batch) if agent in batch.first else None,
            reference=bool(self.umad.kl_coef),
            first_plan=batch.plans.get(agent),
        )

    def metrics(self, batch: UmadBatch, updates: list[dict]) -> dict:
        """UMAD's columns. With a KL weight (`kl_coef` > 0, either `kl_mode`) the pooled `kl` and each
        agent's `kl_<agent>` are one quantity, replacing the updates' mean: the mean over the step's
        responses (every process's, every turn's, each response counted once, an empty one left
        out) of the response's mean token k1, log π_old − log π_ref of its sampled tokens at the
        sampling temperature, whatever the run's `kl_estimator`; π_old is the response's turn's
        (the agent as the previous turn's update left it), π_ref the base. `kl_<agent>` is that mean
        over the agent's responses (all its seats'), so `kl` is the agents' `kl_<agent>` weighted by
        their numbers of responses. (The updates' own KL statistic is 0 under `kl_mode: reward`,
        whose loss has no KL term, and is not logged.) Without a KL weight there is no reference:
        `kl` and `kl_<agent>` stay the updates' means (0), as `loss` and `loss_<agent>` always are."""
        shape = (self.umad.threads, len(self.seats), self.umad.turns)
        stack = lambda key: np.stack([p[key] for p in batch.parts]) if batch.parts else np.zeros((0, *shape))  # noqa: E731
        reward_mean, reward_std = pooled(stack("reward"), std=True)
        out = {
            "reward_mean": reward_mean,
            "reward_std": reward_std,
            "accuracy": pooled(batch.correct[..., -1]),
            "accuracy_first": pooled(batch.correct[..., 0]),
            "eu_mean": pooled(stack("eu")),
            "weight_mean": pooled(stack("weight")),
        }
        if self.umad.kl_coef:  # every response's KL to the reference, pooled (else the updates' mean)
            taken = lambda kl: kl[~np.isnan(kl)]  # noqa: E731
            out["kl"] = pooled(taken(batch.kl))
            for agent in self.policy.agents:  # every process alike: `pooled` is a collective
                seats = [i for i, seat in enumerate(self.seats) if self.seat_agent[seat] == agent]
                out[agent_column("kl", agent)] = pooled(taken(batch.kl[:, :, seats]))
        return out
