"""MAPPO and RMAAC, UDPO's actor-critic baselines (Tang et al., arXiv:2602.07186 §5.1 Baselines), adapted to debate as
we sketch them (the paper names them only); both are approximations of the original algorithms and are labelled so.

* MAPPO (Yu et al. 2022): PPO with a centralized critic. Every agent's turn in round t is an
  action taken in the debate's state before that round; the reward is shared and terminal:
  R(τ) = r_task + w_c · (1 − D(τ)), D the final round's disagreement flag (Tang et al., arXiv:2602.07186 §2, App. D, Eq 17),
  w_c = `consensus_weight` ("optimizing for consensus"). The critic V(s) is a small MLP over
  answer-agreement features of the state (`agreement_features`); with γ = 1 and one terminal
  reward, the advantage of a turn is R − V(s) (GAE with λ = 1), standardised over the batch.
* RMAAC (He et al. 2023): the same actor-critic against perturbed states. In training, each peer
  response an agent is shown is swapped with probability `peer_swap_prob` for a response with a
  wrong answer from the same debate (`PeerSwapDebate`); the reward is r_task alone.

Both are one trainer (`MappoTrainer`) with a preset each: the defaults of `consensus_weight` and
`peer_swap_prob` (`methods.METHODS[...].preset`, filled in by `MappoSettings.resolved`).

The training step (`MappoTrainer`, on `core.debate_trainer`'s step):
1. Draw M questions uniformly (the run's seeded order) and run one debate of each with the current
   agents, T rounds all-to-all; RMAAC swaps shown peer responses for wrong ones (`PeerSwapDebate`).
2. The shared return R(τ) of each debate, and for every turn (seat i, round t) the critic's input:
   the answers held before round t and seat i's place in them.
3. Advantages R − V(s) from the critic as it was before this step, standardised over the batch;
   then the critic fits R (`critic_epochs` full-batch steps on the whole batch's turns).
4. Per agent, one clipped update on its own turns (the debate context masked), each with its own
   advantage, KL as the block's `kl_coef` (0 by default: PPO).

Data parallel (`gpus` > 1): every process draws the same M questions and debates every world-th;
the answers and returns of all debates are gathered, so every process takes the same advantages
and fits the same critic (on the CPU, deterministic), and each agent's gradients are averaged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ...debate.protocols import AllToAll
from ...grading import INVALID, answer_keys
from ...llm.base import stable_hash
from ...prompts import PeerView
from ..core.debate_rollouts import answers_by_round, training_protocol_options
from ..core.debate_trainer import COMMON_METRIC_COLUMNS, DebateBatch, DebateTrainer
from ..core.distributed import all_reduce, gathered
from ..core.rewards import task_reward
from ..core.rollouts import Rollout

FEATURES = (
    "first_round",
    "progress",
    "plurality_share",
    "entropy",
    "disagreement",
    "invalid_share",
    "own_with_plurality",
    "own_invalid",
    "distinct_share",
)


@dataclass(frozen=True)
class MappoSettings:
    """MAPPO's and RMAAC's own settings (config `training.runs.<run>.mappo`); null = the method's
    default (its preset in `methods.METHODS`). UDPO's learning rate and batch (Tang et al., arXiv:2602.07186 §5.1 Baselines) are the run's."""

    rounds: int = 5  # T: debate rounds after the independent answer
    questions_per_step: int = 32  # debates per update (UDPO's M)
    consensus_weight: float | None = None  # w_c in R = r_task + w_c (1 − D); mappo 1, rmaac 0
    peer_swap_prob: float | None = None  # RMAAC's state perturbation; mappo 0, rmaac 0.2
    critic_hidden: int = 64
    critic_learning_rate: float = 1e-3
    critic_epochs: int = 5  # full-batch critic steps per rollout step, after the advantages are taken
    normalize_advantages: bool = True
    kl_coef: float = 0.0  # weight of the KL to the base model (PPO: 0; 0: no reference)

    def __post_init__(self):
        if self.kl_coef < 0:
            raise ValueError(f"mappo: kl_coef must be >= 0, got {self.kl_coef}")
        if self.rounds < 1 or self.questions_per_step < 1 or self.critic_hidden < 1 or self.critic_epochs < 0:
            raise ValueError(
                "mappo: rounds, questions_per_step and critic_hidden >= 1, critic_epochs >= 0 are required"
            )
        if self.peer_swap_prob is not None and not 0 <= self.peer_swap_prob <= 1:
            raise ValueError(f"mappo: peer_swap_prob must be in [0, 1], got {self.peer_swap_prob}")
        if self.critic_learning_rate <= 0 or (self.consensus_weight is not None and self.consensus_weight < 0):
            raise ValueError("mappo: critic_learning_rate > 0 and consensus_weight >= 0 are required")

    def resolved(self, method: str) -> dict:
        """consensus_weight and peer_swap_prob with the method's defaults filled in."""
        from . import training_method  # the registry imports this module

        defaults = training_method(method).preset
        return {k: defaults[k] if getattr(self, k) is None else getattr(self, k) for k in defaults}


def final_disagreement(answers: Sequence[Sequence[str | None]], task_type: str) -> float:
    """D(τ) = 1[the final answers are not unanimous] (Tang et al., arXiv:2602.07186 §2, App. D, Eq 17; INVALID is one value).

    MAPPO's paper baseline keeps INVALID as one shared value (all-invalid final answers are
    unanimous), unlike UDPO's measures (`uncertainty.measures.udpo_agree`), so D is computed here."""
    return float(len(set(answer_keys(list(answers[-1]), task_type=task_type, merge_equivalent=True))) > 1)


def shared_reward(r_task: float, disagreement: float, consensus_weight: float) -> float:
    """R(τ) = r_task + w_c · (1 − D(τ)), shared by every agent (Tang et al., arXiv:2602.07186 §5.1 Baselines [CHOICE])."""
    return float(r_task) + consensus_weight * (1.0 - float(disagreement))


def agreement_features(
    previous: Sequence[str | None] | None, own: int, round_: int, rounds: int, task_type: str
) -> list[float]:
    """The critic's input for agent `own`'s round-`round_` turn (`FEATURES`): the agreement of the
    answers every agent holds before that round (`previous`; None before round 0) and where agent
    `own` stands in it. Shares are over the N agents; the entropy is normalised by log N."""
    progress = round_ / rounds if rounds else 0.0
    if previous is None:
        return [1.0, progress, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    keys = answer_keys(list(previous), task_type=task_type, merge_equivalent=True)
    n = len(keys)
    counts = Counter(keys)
    top, top_count = counts.most_common(1)[0]
    p = np.array(list(counts.values()), dtype=float) / n
    entropy = float(-(p * np.log(p)).sum() / np.log(n)) if n > 1 else 0.0
    return [
        0.0,
        progress,
        top_count / n,
        entropy,
        float(len(counts) > 1),
        counts.get(INVALID, 0) / n,
        float(keys[own] == top),
        float(keys[own] == INVALID),
        len(counts) / n,
    ]


def build_critic(hidden: int, seed: int):
    """V(s): a two-hidden-layer tanh MLP over `FEATURES`, seeded apart from the policy's random state."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.nn.Sequential(
            torch.nn.Linear(len(FEATURES), hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.Tanh(),
            torch.nn.Linear(hidden, 1),
        )


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
    receiver (RMAAC's adversarial state perturbation, Tang et al., arXiv:2602.07186 §5.1 Baselines [CHOICE]). With no wrong turn in
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
            rng = np.random.default_rng(
                int(
                    stable_hash(
                        {
                            "seed": q.seed,
                            "step": self.step,
                            "question": q.question_id,
                            "thread": q.thread,
                            "to": i,
                            "peer": j,
                            "round": t,
                        }
                    )[:12],
                    16,
                )
            )
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


# --------------------------------------------------------------------------- the trainer

MAPPO_METRIC_COLUMNS = [
    "step",
    "loss",
    "reward_mean",
    "reward_std",
    "accuracy",
    "consensus",
    "value_mean",
    "value_loss",
    "peer_swaps",
    *COMMON_METRIC_COLUMNS,
]


@dataclass
class MappoBatch(DebateBatch):
    debate: PeerSwapDebate | None = None  # the step's protocol (its swap counts)
    debates: list[dict] = field(default_factory=list)  # every process's debates' answers and rewards, batch order
    inputs: list[np.ndarray] = field(default_factory=list)  # each debate's critic inputs (`critic_inputs`)
    returns: np.ndarray | None = None  # each turn's return, the rows of `inputs` concatenated
    offsets: np.ndarray | None = None  # where each debate's rows start in `returns`
    values: np.ndarray | None = None  # V(s) of each turn before this step's critic fit
    turn_advantages: np.ndarray | None = None
    value_loss: float = float("nan")


class MappoTrainer(DebateTrainer):
    metric_columns = MAPPO_METRIC_COLUMNS
    data_parallel = True

    def __init__(
        self,
        questions: pd.DataFrame,
        policies,
        settings,
        *,
        run: str,
        participants: Sequence[str],
        mappo: MappoSettings | None = None,
        system_prompts: dict | None = None,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        import torch

        self.mappo = mappo if mappo is not None else settings.mappo
        self.critic = build_critic(self.mappo.critic_hidden, settings.seed)
        policies.attach(
            "critic", self.critic, torch.optim.Adam(self.critic.parameters(), lr=self.mappo.critic_learning_rate)
        )
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
        self.critic_optimizer = policies.optimizers["@critic"]
        resolved = self.mappo.resolved(settings.method)
        self.consensus_weight, self.swap_prob = resolved["consensus_weight"], resolved["peer_swap_prob"]
        if self.mappo.questions_per_step % self.world:
            raise ValueError(
                f"{settings.method}: questions_per_step = {self.mappo.questions_per_step} must divide among "
                f"{self.world} processes"
            )

    def describe(self, metrics: dict) -> str:
        return (
            f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, consensus "
            f"{metrics['consensus']:.3f}, value loss {metrics['value_loss']:.4f}"
        )

    def critic_inputs(self, answers: list, task_type: str) -> np.ndarray:
        """One row per (seat, round) of a debate, seat-major: `agreement_features` before that round."""
        rounds = len(answers) - 1
        return np.array(
            [
                agreement_features(answers[t - 1] if t else None, i, t, rounds, task_type)
                for i in range(len(answers[0]))
                for t in range(rounds + 1)
            ],
            dtype=np.float32,
        )

    # -- the step's hooks (core.debate_trainer) ---------------------------------------------
    def rollout(self, step: int) -> MappoBatch:
        m_settings = self.mappo
        rows = self.draw(m_settings.questions_per_step)
        mine = list(range(self.rank, len(rows), self.world))
        options = {k: v for k, v in training_protocol_options(self.settings, m_settings.rounds).items() if k != "kind"}
        debate = PeerSwapDebate(options, p=self.swap_prob, step=step)
        states = self.debate([rows[m] for m in mine], step, rounds=m_settings.rounds, debate=debate)
        return MappoBatch(step=step, rows=[rows[m] for m in mine], states=states, positions=mine, debate=debate)

    def rewards(self, batch: MappoBatch) -> None:
        """The shared return of each debate (plus each turn's length shaping), and the critic's inputs."""
        local = []
        for st in batch.states:
            answers = answers_by_round(st)
            r_task = task_reward(answers, str(st.row["answer"]), st.task_type, labels=st.labels)
            disagreement = final_disagreement(answers, st.task_type)
            shaping = np.zeros(len(answers[0]) * len(answers), dtype=np.float32)  # critic_inputs' order
            for turn in st.pre + st.turns:
                shaping[turn.agent * len(answers) + turn.round] = self.length_shaping(turn)
            local.append(
                {
                    "answers": answers,
                    "task_type": st.task_type,
                    "r_task": r_task,
                    "consensus": 1 - disagreement,
                    "reward": shared_reward(r_task, disagreement, self.consensus_weight),
                    "shaping": shaping,
                }
            )
        batch.debates = gathered(local, self.rank, self.world)  # the whole batch, in batch order
        batch.inputs = [self.critic_inputs(d["answers"], d["task_type"]) for d in batch.debates]
        batch.returns = np.concatenate(
            [np.full(len(x), d["reward"], dtype=np.float32) + d["shaping"] for x, d in zip(batch.inputs, batch.debates)]
        )
        batch.offsets = np.cumsum([0, *[len(x) for x in batch.inputs]])

    def advantages(self, batch: MappoBatch) -> None:
        """R − V(s) from the critic as it was, standardised; then the critic fits the returns."""
        import torch

        features = np.concatenate(batch.inputs)
        with torch.no_grad():
            batch.values = self.critic(torch.as_tensor(features)).squeeze(-1).numpy()
        batch.turn_advantages = critic_advantages(batch.returns, batch.values, self.mappo.normalize_advantages)
        batch.value_loss = fit_critic(
            self.critic, self.critic_optimizer, features, batch.returns, self.mappo.critic_epochs
        )

    def as_rollout(self, batch: MappoBatch, k: int, state, turn) -> Rollout:
        m = batch.positions[k]
        row = batch.offsets[m] + turn.agent * len(batch.debates[m]["answers"]) + turn.round  # critic_inputs' order
        return self.turn_rollout(
            state,
            turn,
            group=f"{state.question_id}#{m}#{turn.agent}#{turn.round}",
            sample=turn.agent,
            reward=float(batch.returns[row]),
            advantage=float(batch.turn_advantages[row]),
        )

    def metrics(self, batch: MappoBatch, updates: list[dict]) -> dict:
        rewards = np.array([d["reward"] for d in batch.debates])
        offered = all_reduce(batch.debate.offered)
        return {
            "reward_mean": float(rewards.mean()),
            "reward_std": float(rewards.std()),
            "accuracy": float(np.mean([d["r_task"] for d in batch.debates])),
            "consensus": float(np.mean([d["consensus"] for d in batch.debates])),
            "value_mean": float(batch.values.mean()),
            "value_loss": batch.value_loss,
            "peer_swaps": all_reduce(batch.debate.swaps) / offered if offered else 0.0,
        }
