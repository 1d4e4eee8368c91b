"""UDPO (Tang et al., arXiv:2602.07186 §4, App. A): its settings (`UdpoSettings`), its formulas (trajectory rewards, per-agent
asymmetric coefficients, batch-mean advantages, uncertainty-driven replay of questions), the
warm-up split and coefficients file of App. A.2, and its trainer (`UdpoTrainer`).

Answers layout as in `uncertainty.measures`: `answers[t][i]` is agent i's parsed answer after
round t (t = 0 the independent answer, t = 1..T the debate rounds), None when unparseable. An
unparseable answer agrees with no answer, itself included, in every reward and uncertainty
([CHOICE] `uncertainty.measures.udpo_agree`: a debate of invalid answers scores the least
agreement, r_intra = r_inter = r_sys = 0, not the most).

The training step (Tang et al., arXiv:2602.07186 App. A.4, Algorithm 1; `UdpoTrainer`, on `core.debate_trainer`'s step):
1. Draw M questions: uniformly, or with `replay` half by replay priority and half uniformly (Tang
   et al., arXiv:2602.07186 §5.4; priority draws carry importance weights w, `replay_draw`).
2. Run one debate per question with the current agents (`core.debate_rollouts.rollout_debates`).
3. Trajectory rewards r_intra, r_inter, r_sys, r_task (`trajectory_rewards`), each seat's
   r^(i) with its coefficients (Eq 4), and batch-mean advantages per seat (§5.3).
4. Per agent, one update on its own turns of every round (the debate context is masked), every
   turn of a debate carrying the seat's trajectory advantage and the debate's importance weight w
   as its loss weight: w·(ℓ_clip − η·KL) (§5.5 step 5, `Rollout.weight`); the clipped ratio is per
   token against the rollout policy (`ratio_level: token`) and the KL anchor to the base model is
   weighted by the agent's η^(i) (k3).
5. With `replay`, when the step ends an epoch: the priority refresh below.

Replay priorities (Tang et al., arXiv:2602.07186 App. A.3: "recompute U per training question after each epoch"). An epoch
is ceil(len(questions) / M) steps (`steps_per_epoch`: as many debates as training questions, rounded
up to whole steps); steps are counted from 0, so the refresh follows steps e·steps_per_epoch − 1,
e = 1, 2, …, after that step's update. It re-runs one debate per training question with the current
agents (no update; one `rollout_debates` batch, seeded with step tag −e, which no training step
uses) and sets every question's priority to U(τ) = α(1 − r_intra) + β(1 − r_inter) + γ(1 − r_sys)
+ 10⁻³ with the base weights (`replay_priority`). Between refreshes the training debates do
not move the priorities. [CHOICE] Before the first refresh every priority is 1: the first epoch's
priority draws are uniform with weight 1 (the paper does not say; an unseen question pinned at the
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
`ref_sync_steps` a copy of each agent's adapter re-synced every that many steps (Tang et al., arXiv:2602.07186 §4.3).

Data parallel (`gpus` > 1): every process draws the same M questions (the replay priorities are
the same everywhere) and debates every world-th of them; the debates' rewards are gathered, so the
batch-mean baseline and the metrics are the whole batch's, and each agent's gradients are averaged
over the processes. A priority refresh likewise debates every world-th training question in each
process and gathers the rewards, so every process holds every question's priority.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ...grading import answer_keys, is_correct, majority_vote
from ...io import read_json_checked
from ...metrics import cohens_d
from ...uncertainty.measures import DEFAULT_LAMBDA, debate_uncertainty, per_agent_uncertainty, udpo_agree
from ..core.debate_rollouts import answers_by_round
from ..core.debate_trainer import COMMON_METRIC_COLUMNS, DebateBatch, DebateTrainer
from ..core.distributed import gathered
from ..core.rewards import task_reward
from ..core.rollouts import Rollout

#: Tang et al., arXiv:2602.07186 App. A.2 step 2: Ū_sys^(i) is undefined in the paper; "loo" (default) = L̄^(i), "mean" =
#: mean(Ū_intra^(i), Ū_inter^(i), L̄^(i)).
SYS_MODES = ("loo", "mean")
#: Tang et al., arXiv:2602.07186 App. A.2 step 3: α/β/γ_base from Cohen's d of each measure (failure vs success), or 1/3 each.
BASE_WEIGHTS = ("cohens_d", "uniform")
#: Tang et al., arXiv:2602.07186 §4.2 ablations "w/o L_intra / L_inter / L_sys": that term's coefficient is 0 for every agent.
ABLATIONS = {"intra": "alpha", "inter": "beta", "sys": "gamma"}


@dataclass(frozen=True)
class UdpoSettings:
    """UDPO's own settings (config `training.runs.<run>.udpo`; Tang et al., arXiv:2602.07186 §4, App. A; §5.1, App. A.1 defaults)."""

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
    warmup_fraction: float = 0.1  # training questions held out for App. A.2's warm-up debate
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
    """The four system-wide rewards of one debate (Tang et al., arXiv:2602.07186 §4.2, Eqs 1–3):

    * r_intra = 1 − (1/(N·T)) Σ_i Σ_{t=0}^{T−1} 1[a_t^(i) ≠ a_{t+1}^(i)] — our correction of
      Eq 1, whose N(T−1) denominator under T transitions can go negative; in [0, 1];
    * r_inter = 1 − U_inter, r_sys = 1 − U_sys (`uncertainty.debate_uncertainty`);
    * r_task = 1[ŷ(τ) = y*], ŷ the final round's majority vote (Tang et al., arXiv:2602.07186 §3.1).

    Answers are compared with `uncertainty.measures.udpo_agree` ([CHOICE]): an invalid answer
    agrees with nothing, so an agent invalid in rounds t and t+1 has flipped, and a debate of
    invalid answers only gets r_intra = r_inter = r_sys = 0.
    """
    measures = debate_uncertainty(answers, lam=lam, task_type=task_type, **uncertainty_options)
    n, T = len(answers[0]), len(answers) - 1
    # one set of answer classes over the whole debate, as the protocols and the measures use
    flat = answer_keys([a for r in answers for a in r], task_type=task_type, merge_equivalent=True)
    rounds = [flat[t * n : (t + 1) * n] for t in range(T + 1)]
    flips = sum(not udpo_agree(rounds[t][i], rounds[t + 1][i]) for i in range(n) for t in range(T))
    return {
        "r_intra": 1.0 - flips / (n * T) if T else 1.0,
        "r_inter": 1.0 - measures["u_inter"],
        "r_sys": 1.0 - measures["u_sys"],
        "r_task": task_reward(answers, gold, task_type, labels=labels),
    }


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
    """The coefficients with the ablated terms' weights set to 0 (Tang et al., arXiv:2602.07186 §4.2)."""
    from dataclasses import replace

    return replace(c, **{ABLATIONS[term]: 0.0 for term in ablate})


def agent_reward(rewards: Mapping[str, float], c: AgentCoefficients) -> float:
    """r^(i)(τ) (Tang et al., arXiv:2602.07186 §4.2, Eq 4)."""
    return (
        c.alpha * rewards["r_intra"]
        + c.beta * rewards["r_inter"]
        + c.gamma * rewards["r_sys"]
        + c.lam * rewards["r_task"]
    )


def base_weights(
    u_intra: Sequence[float],
    u_inter: Sequence[float],
    u_sys: Sequence[float],
    correct: Sequence[bool],
    mode: str = "cohens_d",
) -> dict[str, float]:
    """α/β/γ_base (Tang et al., arXiv:2602.07186 App. A.2 step 3 [CHOICE]): each measure's Cohen's d (failed vs succeeded
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
    """The asymmetric coefficients (Tang et al., arXiv:2602.07186 App. A.2): per-agent coefficients from a warm-up of untrained debates.

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
    correct = [
        is_correct(majority_vote(list(t[-1]), task_type=task_type), g, task_type, labels=lab)
        for t, g, lab in zip(warmup, golds, labels)
    ]
    weights = base_weights(
        [s["u_intra"] for s in system], [s["u_inter"] for s in system], [s["u_sys"] for s in system], correct, base
    )
    coefficients, profile = [], []
    for i in range(n):
        intra = float(np.mean([p[i]["u_intra"] for p in per_agent]))
        inter = float(np.mean([p[i]["u_inter"] for p in per_agent]))
        loo = float(np.mean([p[i]["leave_one_out"] for p in per_agent]))
        sys_ = loo if sys_mode == "loo" else (intra + inter + loo) / 3
        coefficients.append(
            AgentCoefficients(
                alpha=weights["alpha"] * (1 + kappa * intra),
                beta=weights["beta"] * (1 + kappa * inter),
                gamma=weights["gamma"] * (1 + kappa * loo),
                lam=lambda_base / (1 + kappa * sys_),
                eta=eta_base * (1 + kappa * sys_),
            )
        )
        profile.append({"u_intra": intra, "u_inter": inter, "leave_one_out": loo, "u_sys": sys_})
    return coefficients, {
        "base_weights": weights,
        "agents": profile,
        "warmup_questions": len(warmup),
        "warmup_accuracy": float(np.mean(correct)),
        "kappa": kappa,
        "lambda_base": lambda_base,
        "eta_base": eta_base,
        "sys_mode": sys_mode,
        "base": base,
    }


def batch_advantages(rewards: np.ndarray) -> np.ndarray:
    """Â^(i)(τ_m) = r^(i)(τ_m) − b^(i), b^(i) the mean over the batch's M debates (Tang et al., arXiv:2602.07186 §4.3;
    no std scaling). `rewards` is (M debates, N agents)."""
    rewards = np.asarray(rewards, dtype=float)
    return rewards - rewards.mean(axis=0, keepdims=True)


def replay_priority(rewards: Mapping[str, float], weights: Mapping[str, float], floor: float = 1e-3) -> float:
    """U(τ) = α(1 − r_intra) + β(1 − r_inter) + γ(1 − r_sys) with the base weights (Eq 15), plus a
    floor so that no question's priority is zero (Tang et al., arXiv:2602.07186 App. A.3 [CHOICE])."""
    return (
        weights["alpha"] * (1 - rewards["r_intra"])
        + weights["beta"] * (1 - rewards["r_inter"])
        + weights["gamma"] * (1 - rewards["r_sys"])
        + floor
    )


def replay_draw(
    priorities: np.ndarray, size: int, rng: np.random.Generator, *, exponent: float = 1.0, priority_share: float = 0.5
) -> tuple[np.ndarray, np.ndarray]:
    """Question indices for one batch (Tang et al., arXiv:2602.07186 App. A.3 [CHOICE]) and their loss weights: a
    `priority_share` of the batch drawn with p ∝ U^exponent (with replacement), the rest uniformly
    without replacement. Priority draws get importance weights w = 1/(|B|·p) over max w; uniform
    draws weigh 1."""
    priorities = np.asarray(priorities, dtype=float)
    if priorities.ndim != 1 or len(priorities) == 0 or (priorities <= 0).any():
        raise ValueError("udpo replay: priorities must be a non-empty vector of positive numbers")
    n_priority = int(round(size * priority_share))
    p = priorities**exponent
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
    rewards = [
        trajectory_rewards(t, g, task_type, lam=lam, labels=lab) for t, g, lab in zip(trajectories, golds, labels)
    ]
    task = np.array([r["r_task"] for r in rewards])
    seat_rewards = np.array([[agent_reward(r, c) for c in coefficients] for r in rewards])  # (M debates, N seats)
    advantages = batch_advantages(seat_rewards)  # what the trainer takes from them
    task_parts = batch_advantages(np.outer(task, [c.lam for c in coefficients]))
    out = []
    for i in range(len(coefficients)):
        seat, advantage, task_part = seat_rewards[:, i], advantages[:, i], task_parts[:, i]
        right, wrong = seat[task == 1], seat[task == 0]
        misranked = float((wrong[:, None] >= right[None, :]).mean()) if len(right) and len(wrong) else float("nan")
        total = float((advantage**2).sum())
        out.append(
            {
                "misranked": misranked,
                "task_share": float((task_part**2).sum()) / total if total else float("nan"),
                "right_debates": int(len(right)),
                "wrong_debates": int(len(wrong)),
            }
        )
    return out


# --------------------------------------------------------------------------- App. A.2's files


def split_warmup(questions: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(warm-up, training) questions: a seeded `fraction` (at least one question) held out."""
    if len(questions) < 2:
        raise ValueError(f"udpo: {len(questions)} training question(s); the warm-up and the training need one each")
    order = np.random.default_rng([seed, 1000]).permutation(len(questions))
    k = min(max(1, math.ceil(fraction * len(questions))), len(questions) - 1)
    return questions.iloc[np.sort(order[:k])], questions.iloc[np.sort(order[k:])]


def read_coefficients(path) -> tuple[dict[str, AgentCoefficients], dict[str, float]]:
    """(coefficients per seat, base weights) of `udpo_coefficients_job`'s file."""
    data = read_json_checked(path)
    try:
        return ({seat: AgentCoefficients(**c) for seat, c in data["seats"].items()}, data["profile"]["base_weights"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a UDPO coefficients file ({exc})") from exc


# --------------------------------------------------------------------------- the trainer

UDPO_METRIC_COLUMNS = [
    "step",
    "loss",
    "reward_mean",
    "reward_std",
    "accuracy",
    "r_intra",
    "r_inter",
    "r_sys",
    *COMMON_METRIC_COLUMNS,
]


@dataclass
class UdpoBatch(DebateBatch):
    weights: np.ndarray | None = None  # the replay importance weight of each debate of the step's batch
    rewards: list[dict] = field(default_factory=list)  # every process's debates' trajectory rewards, batch order
    seat_rewards: np.ndarray | None = None  # (M debates, N seats): r^(i) (plus the length shaping)
    seat_advantages: np.ndarray | None = None  # (M, N): batch-mean advantages


class UdpoTrainer(DebateTrainer):
    metric_columns = UDPO_METRIC_COLUMNS
    data_parallel = True

    def __init__(
        self,
        questions: pd.DataFrame,
        policies,
        settings,
        *,
        run: str,
        participants: Sequence[str],
        coefficients: dict[str, AgentCoefficients],
        base_weights: dict[str, float] | None = None,
        rounds: int | None = None,
        replay: bool | None = None,
        questions_per_step: int | None = None,
        ref_sync_steps: int | None = None,
        system_prompts: dict | None = None,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        """`rounds`, `replay`, `questions_per_step`: the run's `udpo` settings unless given;
        `ref_sync_steps` likewise when it is None there too."""
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
        missing = [seat for seat in self.seats if seat not in coefficients]
        if missing:
            raise ValueError(f"udpo: no coefficients for seat(s) {missing}")
        u = settings.udpo
        questions_per_step = u.questions_per_step if questions_per_step is None else questions_per_step
        self.rounds = u.rounds if rounds is None else rounds
        self.coefficients, self.questions_per_step = coefficients, questions_per_step
        self.replay = u.replay if replay is None else replay
        self.base_weights = base_weights or {"alpha": 1 / 3, "beta": 1 / 3, "gamma": 1 / 3}
        self.ref_sync_steps = u.ref_sync_steps if ref_sync_steps is None else ref_sync_steps
        if questions_per_step % self.world:
            raise ValueError(
                f"udpo: questions_per_step = {questions_per_step} must divide among {self.world} processes"
            )

    @classmethod
    def prepare_job(cls, questions: pd.DataFrame, settings, *, coefficients_path=None) -> tuple[pd.DataFrame, dict]:
        """The training questions (the warm-up's held out) and the coefficients of App. A.2."""
        _, training = split_warmup(questions, settings.udpo.warmup_fraction, settings.seed)
        coefficients, base_weights = read_coefficients(coefficients_path)
        return training, {"coefficients": coefficients, "base_weights": base_weights}

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
        return gathered(
            [
                trajectory_rewards(answers_by_round(st), str(st.row["answer"]), st.task_type, labels=st.labels)
                for st in states
            ],
            self.rank,
            self.world,
        )

    def refresh_priorities(self, epoch: int) -> int:
        """Every training question's priority U(τ) from one fresh debate of it under the current agents
        (no update); this process debates every world-th question. Returns the tokens it generated."""
        self.policy.train(False)
        rows = self.rows[self.rank :: self.world]
        states = self.debate(rows, self.refresh_step(epoch), rounds=self.rounds)
        self.policy.rollouts_done()
        self.state.extra["priority"] = [replay_priority(r, self.base_weights) for r in self._trajectory_rewards(states)]
        return sum(len(turn.token_ids) for st in states for turn in st.pre + st.turns)

    def _draw_step(self, step: int) -> tuple[list[int], np.ndarray]:
        m = self.questions_per_step
        if not self.replay:
            ids = {str(r["id"]): k for k, r in enumerate(self.rows)}
            return [ids[str(r["id"])] for r in self.draw(m)], np.ones(m)
        rng = np.random.default_rng([self.settings.seed, step, 7])
        index, weights = replay_draw(self.priority, m, rng)
        return index.tolist(), weights

    # -- the step's hooks (core.debate_trainer) ---------------------------------------------
    def before_step(self, step: int) -> None:
        if self.ref_sync_steps and step % self.ref_sync_steps == 0:
            self.policy.sync_references()  # θ_ref ← θ (step 0: the reference is the starting adapters)

    def rollout(self, step: int) -> UdpoBatch:
        index, weights = self._draw_step(step)
        mine = list(range(self.rank, len(index), self.world))  # this process's debates (batch positions)
        rows = [self.rows[index[m]] for m in mine]
        return UdpoBatch(
            step=step, rows=rows, states=self.debate(rows, step, rounds=self.rounds), positions=mine, weights=weights
        )

    def rewards(self, batch: UdpoBatch) -> None:
        batch.rewards = self._trajectory_rewards(batch.states)
        seat_rewards = np.array(
            [[agent_reward(r, self.coefficients[seat]) for seat in self.seats] for r in batch.rewards]
        )
        if self.settings.overlong_shaping:  # a seat's trajectory reward gains the mean punishment of its turns
            seat_rewards = seat_rewards + np.array(
                gathered(
                    [
                        [
                            np.mean([self.length_shaping(t) for t in st.pre + st.turns if t.agent == i])
                            for i in range(len(self.seats))
                        ]
                        for st in batch.states
                    ],
                    self.rank,
                    self.world,
                )
            )
        batch.seat_rewards = seat_rewards

    def advantages(self, batch: UdpoBatch) -> None:
        batch.seat_advantages = batch_advantages(batch.seat_rewards)  # the whole batch's baseline

    def as_rollout(self, batch: UdpoBatch, k: int, state, turn) -> Rollout:
        m = batch.positions[k]  # group = the agent's trajectory in debate m
        return self.turn_rollout(
            state,
            turn,
            group=f"{state.question_id}#{m}",
            sample=turn.agent,
            reward=float(batch.seat_rewards[m, turn.agent]),
            advantage=float(batch.seat_advantages[m, turn.agent]),
            weight=float(batch.weights[m]),
        )

    def update_agent(self, batch: UdpoBatch, agent: str, rollouts: list[Rollout], view) -> dict:
        """The clipped update with the KL anchor weighted by the agent's η (the mean over its seats)."""
        eta = float(np.mean([self.coefficients[seat].eta for seat in self.seats if self.seat_agent[seat] == agent]))
        return self.update_policy(rollouts, batch.step, policy=view, kl_coef=eta)

    def after_update(self, batch: UdpoBatch) -> None:
        step = batch.step
        if self.replay and (step + 1) % self.steps_per_epoch == 0:
            refresh_start = time.perf_counter()
            batch.extra_tokens = self.refresh_priorities((step + 1) // self.steps_per_epoch)
            batch.rollout_seconds += time.perf_counter() - refresh_start

    def metrics(self, batch: UdpoBatch, updates: list[dict]) -> dict:
        rewards = batch.rewards
        return {
            "reward_mean": float(batch.seat_rewards.mean()),
            "reward_std": float(batch.seat_rewards.std()),
            "accuracy": float(np.mean([r["r_task"] for r in rewards])),
            "r_intra": float(np.mean([r["r_intra"] for r in rewards])),
            "r_inter": float(np.mean([r["r_inter"] for r in rewards])),
            "r_sys": float(np.mean([r["r_sys"] for r in rewards])),
        }

    def describe(self, metrics: dict) -> str:
        return (
            f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, r_intra "
            f"{metrics['r_intra']:.3f}, r_inter {metrics['r_inter']:.3f}, r_sys {metrics['r_sys']:.3f}"
        )
