"""UMAD's advantages (spec 001 §4.3 steps 3-6, §5 Eqs 4-5): team reward, epistemic-influence
intrinsic reward, group advantages over the G paired threads, aleatoric weighting.

Arrays are indexed [g, i, t]: thread g of the question's G threads, agent i of N, turn t of T_train
(t = 0 the first answer). Pure NumPy; the multi-agent trainer applies them per (agent, turn) group.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

REWARD_MODES = ("team_sum", "individual")
EU_MODES = ("sign", "linear")
KL_MODES = ("reward", "loss")


@dataclass(frozen=True)
class UmadSettings:
    """UMAD's own settings (config `training.runs.<run>.umad`; spec 001 §4.3, §6 defaults). The KL
    weight β is the run's `kl_coef` (0.001 in the paper)."""

    threads: int = 5  # G: paired debate threads per question
    turns: int = 2  # T_train: the first answer and T_train − 1 debate rounds
    questions_per_step: int = 256
    eta: float = 0.25  # epistemic-influence reward; 0 for IPPO
    alpha_au: float = 0.25  # aleatoric weighting; 0 for IPPO
    reward_mode: str = "team_sum"
    eu_mode: str = "sign"
    kl_mode: str = "reward"  # the paper's code: −β·Σ_t k1 in the reward; "loss": β·KL in the loss

    def __post_init__(self):
        if self.reward_mode not in REWARD_MODES or self.eu_mode not in EU_MODES or self.kl_mode not in KL_MODES:
            raise ValueError(f"umad: reward_mode in {REWARD_MODES}, eu_mode in {EU_MODES}, kl_mode in {KL_MODES} required")
        if self.threads < 2 or self.turns < 1 or self.questions_per_step < 1:
            raise ValueError("umad: threads >= 2 (group advantages), turns >= 1 and questions_per_step >= 1 are required")


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


def group_advantages(values: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """A = (R − mean_G)/(std_G + ε) over the G threads (axis 0) of each (agent, turn), unbiased std
    as verl's GRPO (step 5); 0 when G = 1."""
    values = np.asarray(values, dtype=float)
    if values.shape[0] < 2:
        return np.zeros_like(values)
    return (values - values.mean(axis=0)) / (values.std(axis=0, ddof=1) + eps)


def aleatoric_weights(nll: np.ndarray, alpha_au: float = 0.25, eps: float = 1e-8) -> np.ndarray:
    """W = exp(−α_au·Ū), Ū the response's mean token NLL under the rollout policy standardised over
    the G threads of its (agent, turn) with the population std (step 6, Eq 4): a response more
    confident than its group's mean (Ū < 0) gets W > 1."""
    nll = np.asarray(nll, dtype=float)
    standardised = (nll - nll.mean(axis=0)) / (nll.std(axis=0) + eps)
    return np.exp(-alpha_au * standardised)


def umad_advantages(correct: np.ndarray, nll: np.ndarray, *, eta: float = 0.25, alpha_au: float = 0.25,
                    reward_mode: str = "team_sum", eu_mode: str = "sign", eps: float = 1e-6,
                    penalty: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A^au_{i,t} = W·A for every response of one question's G threads (steps 3-6), with the parts:
    R (base), r_eu, R_total = R + r_eu (− `penalty`, e.g. β·KL in the reward), A (group advantage of
    R_total), W. The EU reward comes from the unmodified R. IPPO is η = 0, α_au = 0."""
    correct = np.asarray(correct, dtype=float)
    if correct.ndim != 3 or np.shape(nll) != correct.shape:
        raise ValueError(f"umad: correct and nll must both be [threads, agents, turns], got {correct.shape} and {np.shape(nll)}")
    base = turn_rewards(correct, reward_mode)
    eu = epistemic_rewards(base, eta, eu_mode) if eta else np.zeros_like(base)
    total = base + eu - (0.0 if penalty is None else np.asarray(penalty, dtype=float))
    advantage = group_advantages(total, eps)
    weight = aleatoric_weights(nll, alpha_au) if alpha_au else np.ones_like(advantage)
    return {"reward": base, "eu": eu, "total": total, "advantage": advantage, "weight": weight,
            "advantage_au": weight * advantage}


def mean_nll(token_logprobs) -> float:
    """Û = −(1/|y|) Σ_j log π(y_j | ·) of one response (NaN for an empty one)."""
    values = np.asarray(token_logprobs, dtype=float)
    return float(-values.mean()) if values.size else float("nan")
