"""UDPO's formulas (spec 000 §5): trajectory rewards, per-agent asymmetric coefficients, batch-mean
advantages and uncertainty-driven replay of questions. Pure functions over parsed answers; the
multi-agent trainer calls them.

Answers layout as in `uncertainty.measures`: `answers[t][i]` is agent i's parsed answer after
round t (t = 0 the independent answer, t = 1..T the debate rounds), None when unparseable.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np

from ..grading import answer_keys, is_correct, majority_vote
from ..metrics import cohens_d
from ..uncertainty.measures import DEFAULT_LAMBDA, debate_uncertainty, per_agent_uncertainty

#: Spec 000 §5.2 step 2: Ū_sys^(i) is undefined in the paper; "loo" (default) = L̄^(i), "mean" =
#: mean(Ū_intra^(i), Ū_inter^(i), L̄^(i)).
SYS_MODES = ("loo", "mean")
#: Spec 000 §5.2 step 3: α/β/γ_base from Cohen's d of each measure (failure vs success), or 1/3 each.
BASE_WEIGHTS = ("cohens_d", "uniform")
#: Spec 000 §5.1 ablations "w/o L_intra / L_inter / L_sys": that term's coefficient is 0 for every agent.
ABLATIONS = {"intra": "alpha", "inter": "beta", "sys": "gamma"}


@dataclass(frozen=True)
class UdpoSettings:
    """UDPO's own settings (config `training.runs.<run>.udpo`; spec 000 §5, §7 defaults)."""

    rounds: int = 5  # T: debate rounds after the independent answer
    questions_per_step: int = 32  # M: debates per update
    replay: bool = True  # §5.4: half of each batch drawn by uncertainty priority, refreshed every epoch
    ref_sync_steps: int | None = None  # θ_ref ← θ every that many steps; null: the frozen base
    kappa: float = 1.5
    lambda_base: float = 1.0
    eta_base: float = 0.01
    sys_mode: str = "loo"
    base_weights: str = "cohens_d"
    intra_lambda: float = DEFAULT_LAMBDA  # λ in U_intra = λF + (1−λ)M
    warmup_fraction: float = 0.1  # training questions held out for Algorithm B's warm-up debate
    ablate: tuple = ()  # terms whose coefficient is 0 for every agent: intra, inter, sys

    def __post_init__(self):
        object.__setattr__(self, "ablate", tuple(self.ablate))
        if self.sys_mode not in SYS_MODES or self.base_weights not in BASE_WEIGHTS:
            raise ValueError(f"udpo: sys_mode in {SYS_MODES} and base_weights in {BASE_WEIGHTS} are required")
        unknown = set(self.ablate) - set(ABLATIONS)
        if unknown:
            raise ValueError(f"udpo: ablate names {sorted(unknown)}; expected some of {sorted(ABLATIONS)}")
        if self.rounds < 1 or self.questions_per_step < 1 or not 0 < self.warmup_fraction < 1:
            raise ValueError("udpo: rounds >= 1, questions_per_step >= 1 and warmup_fraction in (0, 1) are required")


def trajectory_rewards(
    answers: Sequence[Sequence[str | None]],
    gold: str,
    task_type: str,
    *,
    lam: float = DEFAULT_LAMBDA,
    labels: list[str] | None = None,
    **uncertainty_options,
) -> dict[str, float]:
    """The four system-wide rewards of one debate (spec 000 §5.1, Eqs 1–3):

    * r_intra = 1 − (1/(N·T)) Σ_i Σ_{t=0}^{T−1} 1[a_t^(i) ≠ a_{t+1}^(i)] — the spec's correction of
      Eq 1, whose N(T−1) denominator under T transitions can go negative; in [0, 1];
    * r_inter = 1 − U_inter, r_sys = 1 − U_sys (`uncertainty.debate_uncertainty`);
    * r_task = 1[ŷ(τ) = y*], ŷ the final round's majority vote (spec 000 §3).
    """
    measures = debate_uncertainty(answers, lam=lam, task_type=task_type, **uncertainty_options)
    rounds = [answer_keys(r, task_type=task_type) for r in answers]
    n, T = len(rounds[0]), len(rounds) - 1
    flips = sum(rounds[t][i] != rounds[t + 1][i] for i in range(n) for t in range(T))
    return {
        "r_intra": 1.0 - flips / (n * T) if T else 1.0,
        "r_inter": 1.0 - measures["u_inter"],
        "r_sys": 1.0 - measures["u_sys"],
        "r_task": task_reward(answers, gold, task_type, labels=labels),
    }


def task_reward(answers: Sequence[Sequence[str | None]], gold: str, task_type: str,
                labels: list[str] | None = None) -> float:
    """r_task = 1[ŷ(τ) = y*], ŷ the final round's majority vote (spec 000 §3)."""
    final = majority_vote(list(answers[-1]), task_type=task_type)
    return float(is_correct(final, gold, task_type, labels=labels))


@dataclass(frozen=True)
class AgentCoefficients:
    """One agent's weights in r^(i) = α r_intra + β r_inter + γ r_sys + λ r_task (Eq 4), and η, the
    weight of its KL anchor (Eq 9)."""

    alpha: float
    beta: float
    gamma: float
    lam: float
    eta: float

    def to_dict(self) -> dict:
        return asdict(self)


def ablated(c: AgentCoefficients, ablate: Sequence[str]) -> AgentCoefficients:
    """The coefficients with the ablated terms' weights set to 0 (spec 000 §5.1)."""
    from dataclasses import replace

    return replace(c, **{ABLATIONS[term]: 0.0 for term in ablate})


def agent_reward(rewards: Mapping[str, float], c: AgentCoefficients) -> float:
    """r^(i)(τ) (spec 000 §5.1, Eq 4)."""
    return c.alpha * rewards["r_intra"] + c.beta * rewards["r_inter"] + c.gamma * rewards["r_sys"] + c.lam * rewards["r_task"]


def base_weights(u_intra: Sequence[float], u_inter: Sequence[float], u_sys: Sequence[float],
                 correct: Sequence[bool], mode: str = "cohens_d") -> dict[str, float]:
    """α/β/γ_base (spec 000 §5.2 step 3 [CHOICE]): each measure's Cohen's d (failed vs succeeded
    questions of the warm-up) over their sum. Falls back to 1/3 each when a d is undefined or not
    positive (no failures or no successes, or a measure that does not separate them)."""
    if mode not in BASE_WEIGHTS:
        raise ValueError(f"udpo: base_weights must be one of {BASE_WEIGHTS}, got {mode!r}")
    uniform = {"alpha": 1 / 3, "beta": 1 / 3, "gamma": 1 / 3}
    if mode == "uniform":
        return uniform
    correct = np.asarray(correct, dtype=bool)
    ds = []
    for values in (u_intra, u_inter, u_sys):
        values = np.asarray(values, dtype=float)
        ds.append(cohens_d(values[~correct], values[correct]))
    if any(not math.isfinite(d) or d <= 0 for d in ds):
        return uniform
    total = sum(ds)
    return {"alpha": ds[0] / total, "beta": ds[1] / total, "gamma": ds[2] / total}


def calibrate_coefficients(
    warmup: Sequence[Sequence[Sequence[str | None]]],
    golds: Sequence[str],
    task_type: str,
    *,
    kappa: float = 1.5,
    lambda_base: float = 1.0,
    eta_base: float = 0.01,
    lam: float = DEFAULT_LAMBDA,
    sys_mode: str = "loo",
    base: str = "cohens_d",
    labels: Sequence[list[str] | None] | None = None,
    **uncertainty_options,
) -> tuple[list[AgentCoefficients], dict]:
    """Algorithm B (spec 000 §5.2): per-agent coefficients from a warm-up of untrained debates.

    `warmup[q]` is question q's trajectory (answers layout of the module docstring), `golds[q]` its
    gold answer. Per agent i, averaged over the warm-up: Ū_intra^(i), Ū_inter^(i), L̄^(i)
    (`uncertainty.per_agent_uncertainty`) and Ū_sys^(i) (`sys_mode`); then with κ:
    α^(i) = α_base(1 + κŪ_intra^(i)), β^(i) = β_base(1 + κŪ_inter^(i)), γ^(i) = γ_base(1 + κL̄^(i)),
    λ^(i) = λ_base/(1 + κŪ_sys^(i)), η^(i) = η_base(1 + κŪ_sys^(i)) (Eqs 10–14).
    Returns the coefficients (agent order) and the profile they came from (for the JSON file).
    """
    if sys_mode not in SYS_MODES:
        raise ValueError(f"udpo: sys_mode must be one of {SYS_MODES}, got {sys_mode!r}")
    if not warmup or len(warmup) != len(golds):
        raise ValueError(f"udpo: {len(warmup)} warm-up debates for {len(golds)} gold answers")
    labels = list(labels) if labels is not None else [None] * len(warmup)
    per_agent = [per_agent_uncertainty(t, lam=lam, task_type=task_type) for t in warmup]
    n = len(per_agent[0])
    if any(len(p) != n for p in per_agent):
        raise ValueError("udpo: every warm-up debate must have the same agents")
    system = [debate_uncertainty(t, lam=lam, task_type=task_type, **uncertainty_options) for t in warmup]
    correct = [is_correct(majority_vote(list(t[-1]), task_type=task_type), g, task_type, labels=lab)
               for t, g, lab in zip(warmup, golds, labels)]
    weights = base_weights([s["u_intra"] for s in system], [s["u_inter"] for s in system],
                           [s["u_sys"] for s in system], correct, base)
    coefficients, profile = [], []
    for i in range(n):
        intra = float(np.mean([p[i]["u_intra"] for p in per_agent]))
        inter = float(np.mean([p[i]["u_inter"] for p in per_agent]))
        loo = float(np.mean([p[i]["leave_one_out"] for p in per_agent]))
        sys_ = loo if sys_mode == "loo" else (intra + inter + loo) / 3
        coefficients.append(AgentCoefficients(
            alpha=weights["alpha"] * (1 + kappa * intra), beta=weights["beta"] * (1 + kappa * inter),
            gamma=weights["gamma"] * (1 + kappa * loo), lam=lambda_base / (1 + kappa * sys_),
            eta=eta_base * (1 + kappa * sys_)))
        profile.append({"u_intra": intra, "u_inter": inter, "leave_one_out": loo, "u_sys": sys_})
    return coefficients, {"base_weights": weights, "agents": profile, "warmup_questions": len(warmup),
                          "warmup_accuracy": float(np.mean(correct)), "kappa": kappa, "lambda_base": lambda_base,
                          "eta_base": eta_base, "sys_mode": sys_mode, "base": base}


def batch_advantages(rewards: np.ndarray) -> np.ndarray:
    """Â^(i)(τ_m) = r^(i)(τ_m) − b^(i), b^(i) the mean over the batch's M debates (spec 000 §5.3;
    no std scaling). `rewards` is (M debates, N agents)."""
    rewards = np.asarray(rewards, dtype=float)
    return rewards - rewards.mean(axis=0, keepdims=True)


def replay_priority(rewards: Mapping[str, float], weights: Mapping[str, float], floor: float = 1e-3) -> float:
    """U(τ) = α(1 − r_intra) + β(1 − r_inter) + γ(1 − r_sys) with the base weights (Eq 15), plus a
    floor so that no question's priority is zero (spec 000 §5.4 [CHOICE])."""
    return (weights["alpha"] * (1 - rewards["r_intra"]) + weights["beta"] * (1 - rewards["r_inter"])
            + weights["gamma"] * (1 - rewards["r_sys"]) + floor)


def replay_draw(priorities: np.ndarray, size: int, rng: np.random.Generator, *, exponent: float = 1.0,
                priority_share: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Question indices for one batch (spec 000 §5.4 [CHOICE]) and their loss weights: a
    `priority_share` of the batch drawn with p ∝ U^exponent (with replacement), the rest uniformly
    without replacement. Priority draws get importance weights w = 1/(|B|·p) over max w; uniform
    draws weigh 1."""
    priorities = np.asarray(priorities, dtype=float)
    if priorities.ndim != 1 or len(priorities) == 0 or (priorities <= 0).any():
        raise ValueError("udpo replay: priorities must be a non-empty vector of positive numbers")
    n_priority = int(round(size * priority_share))
    p = priorities ** exponent
    p = p / p.sum()
    by_priority = rng.choice(len(p), size=n_priority, replace=True, p=p) if n_priority else np.empty(0, int)
    uniform = rng.choice(len(p), size=min(size - n_priority, len(p)), replace=False)
    weights = 1.0 / (size * p[by_priority]) if n_priority else np.empty(0)
    if weights.size:
        weights = weights / weights.max()
    return np.concatenate([by_priority, uniform]), np.concatenate([weights, np.ones(len(uniform))])


def reward_ranking(
    trajectories: Sequence[Sequence[Sequence[str | None]]],
    golds: Sequence[str],
    task_type: str,
    coefficients: Sequence[AgentCoefficients],
    *,
    lam: float = DEFAULT_LAMBDA,
    labels: Sequence[list[str] | None] | None = None,
) -> list[dict[str, float]]:
    """Does each seat's reward r^(i) (Eq 4) prefer right debates? Per seat, on debates of the
    untrained agents (the warm-up): `misranked`, the share of (wrong, right) debate pairs whose
    wrong debate earns at least the right one's reward (NaN without both kinds), and
    `task_share`, the task term's part of the batch-mean advantages' sum of squares,
    Σ(λ(r_task − mean))² / Σ(r − mean)². With a weak base model the consensus terms, which a
    unanimous wrong debate earns as fully as a right one, can outweigh λ·r_task: training then
    rewards agreement more than correctness."""
    labels = list(labels) if labels is not None else [None] * len(trajectories)
    rewards = [trajectory_rewards(t, g, task_type, lam=lam, labels=lab) for t, g, lab in zip(trajectories, golds, labels)]
    task = np.array([r["r_task"] for r in rewards])
    seat_rewards = np.array([[agent_reward(r, c) for c in coefficients] for r in rewards])  # (M debates, N seats)
    advantages = batch_advantages(seat_rewards)  # what the trainer takes from them
    task_parts = batch_advantages(np.outer(task, [c.lam for c in coefficients]))
    out = []
    for i in range(len(coefficients)):
        seat, advantage, task_part = seat_rewards[:, i], advantages[:, i], task_parts[:, i]
        right, wrong = seat[task == 1], seat[task == 0]
        misranked = float((wrong[:, None] >= right[None, :]).mean()) if len(right) and len(wrong) else float("nan")
        total = float((advantage ** 2).sum())
        out.append({"misranked": misranked, "task_share": float((task_part ** 2).sum()) / total if total else float("nan"),
                    "right_debates": int(len(right)), "wrong_debates": int(len(wrong))})
    return out
