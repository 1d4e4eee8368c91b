"""Debate uncertainty from parsed answers alone (no model calls).

Two families, one per spec:

* **UDPO** (Tang et al., arXiv:2602.07186 §2, App. D, paper Eqs 16–19 / App. D): per-question uncertainty of one
  debate trajectory from every agent's parsed answer after every round —
  `debate_uncertainty` (system-wide) and `per_agent_uncertainty` (the per-agent forms
  of Tang et al., arXiv:2602.07186 App. A.2 used to calibrate the asymmetric coefficients).
* **UMAD** (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 / §5, Proposition 3.2): with K sampled answers per agent and
  round, total uncertainty H(p̄) splits exactly into a generalised Jensen–Shannon
  divergence (system epistemic, Sys-EU) and the mean agent entropy (system aleatoric,
  Sys-AU) — `answer_distribution`, `decompose`, `decompose_samples`.

Answers
  Inputs are already-parsed answer strings (`grading.extract_answer`), None when no answer
  could be parsed. They are compared by their `grading.answer_keys` (with `task_type`,
  canonical forms: "1/2" = "0.5"), merged into the classes the debate protocols vote with
  (`grading.AnswerClasses`: "2^{n}-1" and "2^n-1" are one answer; UMAD App. C.1 "merge semantically
  equivalent terms"; `merge_equivalent=False` keeps the canonical keys apart), and every
  unparseable answer has the key `INVALID`.

Invalid answers
  * UDPO [CHOICE] (`udpo_agree`): an invalid answer agrees with no answer, not even another
    invalid one or its own agent's invalid answer of the round before. Two invalid agents
    disagree, INVALID → INVALID is a flip, each invalid final answer is a value of its own in
    the entropy (N invalid answers: maximal entropy), any invalid final answer makes D = 1, and a
    leave-one-out vote that stays INVALID (no valid vote before or after) is a change. The paper
    is silent on invalid answers; counting them as one shared value gave a debate in which no
    agent ever produced an answer r_intra = r_inter = r_sys = 1, a reward a policy could earn by
    agreeing on nothing. The majority vote is unchanged: `grading.plurality` (Tang et al.,
    arXiv:2602.07186 §3.1), in which invalid answers do not vote and a vote with no valid
    answer is INVALID.
  * UMAD keeps every invalid sample in one bucket `INVALID` in the support (Qiao et al.,
    arXiv:2603.01221 App. C.1, Algorithm 1 step 2b); `answer_distribution` can drop invalid
    samples instead (`include_invalid=False`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from ..grading import INVALID, answer_keys, plurality

#: Tang et al., arXiv:2602.07186 §2, App. D config `entropy_norm`: K in H̃ = H / log K.
ENTROPY_NORMALISERS = ("observed", "n_agents", "n_options")
#: Tang et al., arXiv:2602.07186 §2, App. D leave-one-out tie rule: first-in-agent-order (default) or "a tie is a change".
LOO_TIE_RULES = ("first", "change")

#: Tang et al., arXiv:2602.07186 §2, App. D [CHOICE]: λ in U_intra = λF + (1−λ)M is not given by the paper → 0.5.
DEFAULT_LAMBDA = 0.5
#: Tang et al., arXiv:2602.07186 §2, App. D [CHOICE]: K = number of distinct final answers.
DEFAULT_ENTROPY_NORMALISER = "observed"


def udpo_agree(a: str, b: str) -> bool:
    """Whether two answer keys agree in UDPO's measures: equal and valid.

    [CHOICE] An invalid answer (`INVALID`) agrees with no answer, itself included:
    another agent's INVALID, and its own agent's INVALID of the round before. Tang et al.,
    arXiv:2602.07186 (§2, §4.2 Eqs 1–3, App. D) say nothing about unparseable answers; counting
    them as one shared value scores a debate in which every agent is always invalid
    r_intra = r_inter = r_sys = 1 (perfect agreement), as high as a unanimous debate and above a
    right 2-of-3 majority, a reward a policy can earn by agreeing on nothing. Every UDPO
    agreement measure (flips, belief revision, pairwise conflict, entropy, disagreement,
    leave-one-out, and `training.methods.udpo.trajectory_rewards`) compares answers with this.
    """
    return a == b and a != INVALID


def _class_sizes(keys: Sequence[str]) -> list[int]:
    """Sizes of the classes of agreeing answers under `udpo_agree`: one per valid answer value,
    and one of size 1 for each invalid answer."""
    counts = Counter(k for k in keys if k != INVALID)
    return list(counts.values()) + [1] * (len(keys) - sum(counts.values()))


# JSD below this many nats is floating-point noise (identical agents give ~1e-17).
_JSD_FLOOR = 1e-12
_SUM_TOLERANCE = 1e-6

UDPO_KEYS = (
    "u_intra",
    "u_inter",
    "u_sys",
    "flip_rate",
    "belief_revision",
    "entropy",
    "disagreement",
    "leave_one_out",
)


# --------------------------------------------------------------------------- UDPO (Tang et al., arXiv:2602.07186)


def _trajectory_keys(
    answers: Sequence[Sequence[str | None]],
    task_type: str | None,
    merge_equivalent: bool,
) -> list[list[str]]:
    if isinstance(answers, (str, bytes)) or len(answers) == 0:
        raise ValueError("answers must be a non-empty sequence of rounds")
    rounds = []
    for t, round_answers in enumerate(answers):
        if isinstance(round_answers, (str, bytes)):
            raise TypeError(f"round {t} is a string; expected a sequence of agent answers")
        rounds.append(list(round_answers))
    n_agents = len(rounds[0])
    if n_agents == 0:
        raise ValueError("a round needs at least one agent")
    for t, round_answers in enumerate(rounds):
        if len(round_answers) != n_agents:
            raise ValueError(f"round {t} has {len(round_answers)} agents, round 0 has {n_agents}")
    flat = answer_keys(
        [a for r in rounds for a in r], task_type=task_type, merge_equivalent=merge_equivalent and task_type is not None
    )
    return [flat[t * n_agents : (t + 1) * n_agents] for t in range(len(rounds))]


def _pairwise_conflict(keys: Sequence[str]) -> float:
    """C_t = 2/(N(N−1)) Σ_{i<j} 1[a_i ≠ a_j] = 1 − Σ_y c_y(c_y−1)/(N(N−1)); 0 if N < 2.

    c_y = number of agents whose answer is y (each agreeing pair is counted by its class); an
    invalid answer is a class of its own (`udpo_agree`), so it agrees with no other agent.
    """
    n = len(keys)
    if n < 2:
        return 0.0
    same = sum(c * (c - 1) for c in _class_sizes(keys))
    return 1.0 - same / (n * (n - 1))


def _normalised_entropy(keys: Sequence[str], normaliser: str, n_options: int | None) -> float:
    """H̃ over the answer values of `keys`, each invalid answer a value of its own (`udpo_agree`)."""
    counts = _class_sizes(keys)
    n = len(keys)
    if normaliser == "observed":
        k = len(counts)
    elif normaliser == "n_agents":
        k = n
    else:
        k = max(int(n_options), len(counts))  # type: ignore[arg-type]
    if k <= 1:
        return 0.0
    h = -sum((c / n) * math.log(c / n) for c in counts)
    return max(0.0, h / math.log(k))


def _leave_one_out(keys: Sequence[str], tie_rule: str) -> list[float]:
    """1[ŷ(τ) ≠ ŷ(τ^{−i})] per agent i (Tang et al., arXiv:2602.07186 §2, App. D Eq 18); with the "change" rule a
    tied leave-one-out vote counts as a change. The votes are compared with `udpo_agree`: a vote
    with no valid answer (INVALID) before and after leaving agent i out is a change. One agent: no
    vote left to compare → 0."""
    if len(keys) < 2:
        return [0.0] * len(keys)
    full = plurality(keys).key
    changed = []
    for i in range(len(keys)):
        vote = plurality([k for j, k in enumerate(keys) if j != i])
        changed.append(float(not udpo_agree(vote.key, full) or (vote.tied and tie_rule == "change")))
    return changed


def _check_options(lam: float, entropy_normaliser: str, n_options: int | None, loo_tie: str) -> None:
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must lie in [0, 1], got {lam}")
    if entropy_normaliser not in ENTROPY_NORMALISERS:
        raise ValueError(f"unknown entropy_normaliser {entropy_normaliser!r}; expected one of {ENTROPY_NORMALISERS}")
    if entropy_normaliser == "n_options" and (n_options is None or n_options < 1):
        raise ValueError("entropy_normaliser='n_options' needs n_options >= 1")
    if loo_tie not in LOO_TIE_RULES:
        raise ValueError(f"unknown loo_tie {loo_tie!r}; expected one of {LOO_TIE_RULES}")


def debate_uncertainty(
    answers: Sequence[Sequence[str | None]],
    *,
    entropy_normaliser: str = DEFAULT_ENTROPY_NORMALISER,
    lam: float = DEFAULT_LAMBDA,
    task_type: str | None = None,
    n_options: int | None = None,
    loo_tie: str = "first",
    merge_equivalent: bool = True,
) -> dict[str, float]:
    """UDPO uncertainty of one debate trajectory (Tang et al., arXiv:2602.07186 §2, App. D; paper §3, App. D).

    `answers[t][i]` is agent i's parsed answer after round t: t = 0 is the independent
    (zero-shot) answer, t = 1..T the debate rounds, so T = len(answers) − 1; every round
    lists the same N agents in the same order. None = invalid. a_t^(i) below is the answer's
    key after grouping, and a = b means `udpo_agree(a, b)`: an invalid answer equals no answer,
    itself included ([CHOICE], module docstring).

    Keys (all in [0, 1]):

    * ``flip_rate`` F = 1/(N(T−1)) Σ_i Σ_{t=1}^{T−1} 1[a_t^(i) ≠ a_{t+1}^(i)]
      (Tang et al., arXiv:2602.07186 §2, App. D, paper Eq. for F(q)): transitions between debate rounds only, 0→1
      excluded. [our choice] With T < 2 there is no such transition and F = 0.
    * ``belief_revision`` M = (1/N) Σ_i 1[a_0^(i) ≠ a_T^(i)] (Tang et al., arXiv:2602.07186 §2, App. D). T = 0 → 0.
    * ``u_intra`` = λF + (1−λ)M (Tang et al., arXiv:2602.07186 §2, App. D), λ = `lam`, default 0.5 [CHOICE].
    * ``u_inter`` = 1/(T+1) Σ_{t=0}^{T} C_t, C_t = 2/(N(N−1)) Σ_{i<j} 1[a_t^(i) ≠ a_t^(j)]
      (Tang et al., arXiv:2602.07186 §2, App. D); C_t = 0 when N = 1.
    * ``entropy`` H̃ = −(1/log K) Σ_y p(y) log p(y) over the **final round** only,
      p(y) = (1/N) Σ_i 1[a_T^(i) = y] (Tang et al., arXiv:2602.07186 §2, App. D, Eq 16, App. D rather than §2's "all
      rounds"), each invalid final answer a value y of its own with p(y) = 1/N. K by
      `entropy_normaliser`: "observed" (default [CHOICE]) = number of distinct final answers
      (each invalid answer one); "n_agents" = N; "n_options" = max(`n_options`, distinct final
      answers) — [our choice] the max keeps H̃ ≤ 1 when invalid or out-of-set answers add
      values. H̃ = 0 when K ≤ 1.
    * ``disagreement`` D = 1[max_y p(y) < 1] (Tang et al., arXiv:2602.07186 §2, App. D, Eq 17), binary, read as "not
      every final answer agrees with every other": D = 1 whenever a final answer is invalid
      (an invalid answer agrees with nothing, itself included, so also with N = 1).
    * ``leave_one_out`` L = (1/N) Σ_i 1[ŷ(τ) ≠ ŷ(τ^{−i})] (Tang et al., arXiv:2602.07186 §2, App. D, Eq 18), ŷ the
      Tang et al., arXiv:2602.07186 §3.1 majority vote of the final round (`grading.plurality`: INVALID does not
      vote, ties → first in agent order, no valid vote → INVALID; INVALID ≠ INVALID, so a
      vote that has no valid answer with and without agent i is a change). `loo_tie="first"`
      (default) applies the same tie rule to the N−1 remaining votes; `"change"` (the
      other reading) counts a tied leave-one-out vote as a change. N = 1 → 0.
    * ``u_sys`` = (H̃ + D + L)/3 (Tang et al., arXiv:2602.07186 §2, App. D, Eq 19). It uses the final round only.

    Example (Tang et al., arXiv:2602.07186 §3.2, §5): final round A,A,A,A,B (N = 5, observed K = 2):
    H̃ = 0.722, D = 1, L = 0, u_sys = 0.574.

    `task_type` groups answers with `grading.normalize_answer` first ("1/2" = "0.5");
    `merge_equivalent=False` compares canonical keys without merging equivalent classes.
    """
    _check_options(lam, entropy_normaliser, n_options, loo_tie)
    rounds = _trajectory_keys(answers, task_type, merge_equivalent)
    n = len(rounds[0])
    T = len(rounds) - 1
    first, final = rounds[0], rounds[-1]

    flips = sum(not udpo_agree(rounds[t][i], rounds[t + 1][i]) for i in range(n) for t in range(1, T))
    flip_rate = flips / (n * (T - 1)) if T >= 2 else 0.0
    belief_revision = sum(not udpo_agree(first[i], final[i]) for i in range(n)) / n
    u_intra = lam * flip_rate + (1.0 - lam) * belief_revision

    u_inter = sum(_pairwise_conflict(r) for r in rounds) / (T + 1)

    entropy = _normalised_entropy(final, entropy_normaliser, n_options)
    disagreement = float(len(set(final)) > 1 or INVALID in final)
    leave_one_out = sum(_leave_one_out(final, loo_tie)) / n
    u_sys = (entropy + disagreement + leave_one_out) / 3.0

    return {
        "u_intra": float(u_intra),
        "u_inter": float(u_inter),
        "u_sys": float(u_sys),
        "flip_rate": float(flip_rate),
        "belief_revision": float(belief_revision),
        "entropy": float(entropy),
        "disagreement": disagreement,
        "leave_one_out": float(leave_one_out),
    }


def per_agent_uncertainty(
    answers: Sequence[Sequence[str | None]],
    *,
    lam: float = DEFAULT_LAMBDA,
    task_type: str | None = None,
    loo_tie: str = "first",
    merge_equivalent: bool = True,
) -> list[dict[str, float]]:
    """Per-agent parts of one trajectory, for warm-up calibration (Tang et al., arXiv:2602.07186 App. A.2 step 2).

    One dict per agent i (same answers layout, grouping and `udpo_agree` rule as
    `debate_uncertainty`: an invalid answer differs from every answer, itself included):

    * ``flip_rate`` F^(i) = 1/(T−1) Σ_{t=1}^{T−1} 1[a_t^(i) ≠ a_{t+1}^(i)] (0 if T < 2)
    * ``belief_revision`` M^(i) = 1[a_0^(i) ≠ a_T^(i)]
    * ``u_intra`` = λF^(i) + (1−λ)M^(i)
    * ``u_inter`` = 1/(T+1) Σ_t (1/(N−1)) Σ_{j≠i} 1[a_t^(i) ≠ a_t^(j)] (0 if N = 1)
    * ``leave_one_out`` 1[ŷ(τ) ≠ ŷ(τ^{−i})] (paper A.2's L^(i) before averaging)

    The means over agents of flip_rate, belief_revision, u_intra, u_inter and
    leave_one_out equal the system values of `debate_uncertainty`. Ū_sys^(i) is left to
    the calibration stage (Tang et al., arXiv:2602.07186 App. A.2: undefined in the paper, default L̄^(i)).
    """
    _check_options(lam, DEFAULT_ENTROPY_NORMALISER, None, loo_tie)
    rounds = _trajectory_keys(answers, task_type, merge_equivalent)
    n = len(rounds[0])
    T = len(rounds) - 1
    loo = _leave_one_out(rounds[-1], loo_tie)
    out = []
    for i in range(n):
        flip = sum(not udpo_agree(rounds[t][i], rounds[t + 1][i]) for t in range(1, T)) / (T - 1) if T >= 2 else 0.0
        revision = float(not udpo_agree(rounds[0][i], rounds[-1][i]))
        if n > 1:
            inter = sum(sum(not udpo_agree(r[i], r[j]) for j in range(n) if j != i) / (n - 1) for r in rounds) / (T + 1)
        else:
            inter = 0.0
        out.append(
            {
                "u_intra": float(lam * flip + (1.0 - lam) * revision),
                "u_inter": float(inter),
                "flip_rate": float(flip),
                "belief_revision": revision,
                "leave_one_out": loo[i],
            }
        )
    return out


# --------------------------------------------------------------------------- UMAD (Qiao et al., arXiv:2603.01221)


def answer_distribution(
    samples: Sequence[str | None],
    *,
    task_type: str | None = None,
    include_invalid: bool = True,
    merge_equivalent: bool = True,
) -> dict[str, float]:
    """p̂(y) = count(y)/K over one agent's K sampled answers (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step 2d).

    Answers are grouped as in `answer_keys`. Invalid samples (None, or no canonical form)
    go to one bucket `INVALID` ("<none>") that stays in the support (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step
    2b, the default). With `include_invalid=False` they are dropped and the distribution
    is over the valid samples only (K = number of valid samples); if none is valid the
    result is {}. Keys appear in first-sample order.

    For several agents of one round prefer `decompose_samples`, which canonicalises all
    agents' samples together (needed for `merge_equivalent` classes to agree).
    """
    keys = answer_keys(samples, task_type=task_type, merge_equivalent=merge_equivalent and task_type is not None)
    if not include_invalid:
        keys = [k for k in keys if k != INVALID]
    if not keys:
        return {}
    return {key: count / len(keys) for key, count in Counter(keys).items()}


def _entropy_nats(p: np.ndarray) -> np.ndarray:
    """Shannon entropy −Σ p log p in nats along the last axis, with 0 log 0 = 0."""
    safe = np.where(p > 0, p, 1.0)
    return -np.sum(p * np.log(safe), axis=-1)


def _as_matrix(distributions: Sequence[Mapping[str, float]] | np.ndarray) -> np.ndarray:
    if isinstance(distributions, np.ndarray):
        matrix = np.asarray(distributions, dtype=float)
        if matrix.ndim != 2:
            raise ValueError("an array of distributions must be 2-D (agents × answers)")
    else:
        dists = list(distributions)
        if dists and all(isinstance(d, Mapping) for d in dists):
            support: dict[str, None] = {}
            for d in dists:
                support.update(dict.fromkeys(d))
            matrix = np.array([[float(d.get(y, 0.0)) for y in support] for d in dists], dtype=float).reshape(
                len(dists), len(support)
            )
        else:
            matrix = np.asarray(dists, dtype=float)
            if matrix.ndim != 2:
                raise ValueError("distributions must be mappings or an agents × answers array")
    if matrix.shape[0] == 0:
        raise ValueError("need at least one agent distribution")
    if not np.all(np.isfinite(matrix)) or np.any(matrix < 0):
        raise ValueError("probabilities must be finite and non-negative")
    sums = matrix.sum(axis=1)
    if np.any(np.abs(sums - 1.0) > _SUM_TOLERANCE):
        raise ValueError(f"each agent's distribution must sum to 1, got sums {sums.tolist()}")
    return matrix / sums[:, None]


def decompose(distributions: Sequence[Mapping[str, float]] | np.ndarray) -> dict[str, float]:
    """Total = epistemic + aleatoric for N agents' answer distributions (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step
    2e, §5 Proposition 3.2), in **nats** (natural log; Qiao et al., arXiv:2603.01221 §3.2, §4.2: JSD ≤ log N).

    `distributions`: one distribution per agent, either mappings answer → probability
    (the common support is the union of their keys; a missing answer has probability 0,
    Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step 2c–d) or an agents × answers array. Each must sum to 1 (±1e-6;
    it is then renormalised). Agents are weighted equally (π_i = 1/N).

    * ``aleatoric`` Sys-AU = (1/N) Σ_i H(p_i)
    * ``epistemic`` Sys-EU = JSD(p_1..p_N) = H(p̄) − (1/N) Σ_i H(p_i), p̄ = (1/N) Σ_i p_i;
      values below 1e-12 nats (rounding noise, e.g. identical agents) are set to 0, so
      it is ≥ 0 and exactly 0 when all agents agree.
    * ``total`` TU = H(p̄), returned as epistemic + aleatoric so that the identity holds
      exactly in floating point (it differs from the directly computed H(p̄) by < 1e-12).
    """
    matrix = _as_matrix(distributions)
    aleatoric = float(np.mean(_entropy_nats(matrix)))
    mixture = float(_entropy_nats(matrix.mean(axis=0)))
    epistemic = mixture - aleatoric
    if epistemic < _JSD_FLOOR:
        epistemic = 0.0
    aleatoric = max(aleatoric, 0.0)
    return {"total": epistemic + aleatoric, "epistemic": epistemic, "aleatoric": aleatoric}


def decompose_samples(
    samples: Sequence[Sequence[str | None]],
    *,
    task_type: str | None = None,
    include_invalid: bool = True,
    merge_equivalent: bool = True,
) -> dict[str, float]:
    """TU / Sys-EU / Sys-AU of one debate round from K sampled answers per agent
    (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1).

    `samples[i]` holds agent i's sampled answers at this round (None = no answer). All
    agents' answers are canonicalised together, each agent's `answer_distribution` is
    built over the common support of the round, and `decompose` splits it. An agent
    whose samples are all dropped (`include_invalid=False`) makes this raise ValueError.
    Call once per round for the per-round curves of Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step 4.
    """
    if isinstance(samples, (str, bytes)) or len(samples) == 0:
        raise ValueError("samples must be a non-empty sequence of per-agent sample lists")
    per_agent = [list(s) for s in samples]
    flat = answer_keys(
        [a for s in per_agent for a in s],
        task_type=task_type,
        merge_equivalent=merge_equivalent and task_type is not None,
    )
    dists = []
    start = 0
    for i, s in enumerate(per_agent):
        keys = flat[start : start + len(s)]
        start += len(s)
        # Keys are already canonical: count them as plain strings (None for INVALID).
        dist = answer_distribution([None if k == INVALID else k for k in keys], include_invalid=include_invalid)
        if not dist:
            raise ValueError(f"agent {i} has no usable samples")
        dists.append(dist)
    return decompose(dists)
