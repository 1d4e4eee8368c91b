"""Confidence protocols of the confidence paper (Elahi & Di Eugenio, arXiv:2606.13591 §3.1): one answer and one system confidence
from a two-agent debate's four calibrated streams, and the baselines they are compared with.

Every function works on whole arrays of questions at once, because the protocol search evaluates
them hundreds of times per study. The inputs are

- ``pred``: int array (N, 2, 2), ``pred[n, i, s]`` = label code of agent i on stream s
  (s = 0 zero-shot, s = 1 after one debate round); -1 = unparseable (never correct);
- ``conf``: float array (N, 2, 2), the calibrated confidences p_{i,s} in (0, 1);
- ``n_labels``: int array (N,), the size of the label space (0 = open-ended, e.g. math).

and every method returns ``(answer codes (N,), system confidences (N,))``. `METHODS` is the one
dispatch table: the baselines ``zero_shot``, ``mad``, ``mad_d`` (one agent's output) and the
searched protocols ``wsv``, ``cga``, ``hid`` (parameters θ); `apply_method` runs any of them.

Bayesian fusion and CGS work in logit space (`debatelab.probability`: clipped to [ε, 1−ε] first).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..probability import EPSILON, logit, sigmoid


def bayesian_fusion(c1, c2, agree) -> np.ndarray:
    """Fused confidence of two answers under conditional independence.

    Agreeing: c1c2 / (c1c2 + (1−c1)(1−c2)) = σ(logit c1 + logit c2).
    Disagreeing: the more confident one's share c_hi(1−c_lo) / (c_hi(1−c_lo) + (1−c_hi)c_lo)
    = σ(|logit c1 − logit c2|) ≥ 0.5. Which answer wins is `fuse`'s business.
    """
    l1, l2 = logit(c1), logit(c2)
    return np.where(np.asarray(agree, dtype=bool), sigmoid(l1 + l2), sigmoid(np.abs(l1 - l2)))


def fuse(y1, c1, y2, c2, tie_agent: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Fuse two (answer, confidence) pairs; on disagreement the more confident answer wins,
    an exact confidence tie goes to ``tie_agent`` (the validation-better agent)."""
    y1, y2 = np.asarray(y1), np.asarray(y2)
    c1, c2 = np.asarray(c1, dtype=float), np.asarray(c2, dtype=float)
    agree = y1 == y2
    first_wins = (c1 > c2) | ((c1 == c2) & (tie_agent == 0))
    answer = np.where(agree | first_wins, y1, y2)
    return answer, bayesian_fusion(c1, c2, agree)


def cgs(pred: np.ndarray, conf: np.ndarray, agent: int, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """Confidence-gated switching: take the post-debate answer only when its logit confidence rose
    by more than τ over the zero-shot one."""
    switch = logit(conf[:, agent, 1]) - logit(conf[:, agent, 0]) > tau
    return (
        np.where(switch, pred[:, agent, 1], pred[:, agent, 0]),
        np.where(switch, conf[:, agent, 1], conf[:, agent, 0]),
    )


def wsv(pred, conf, n_labels, weights, softmax_support: str = "all") -> tuple[np.ndarray, np.ndarray]:
    """Weighted stream voting: S_k = Σ_{(i,s): ŷ_{i,s}=k} w_{i,s} logit(p_{i,s}); ŷ = argmax over
    present labels; ĉ = softmax(S)[ŷ].

    ``softmax_support="present"`` normalises over the present labels only (a unanimous question
    gets ĉ = 1); ``"all"`` adds every absent label of the label space with score 0 (an
    open-ended task counts one absent "other" answer). Weights are ordered
    (w_{1,0}, w_{2,0}, w_{1,1}, w_{2,1}).

    An unparseable stream (-1) is no candidate: the paper (arXiv:2606.13591 §3.1) scores "every
    candidate label y_k that appears among the four predictions", labels of 𝒴, so such a stream
    casts no vote, whatever its weighted logit, and is not in the softmax. [CHOICE] When no stream
    has a valid label there is no candidate: the answer is -1 (never correct) at confidence ε
    (`probability.EPSILON`), the system saying it has no answer rather than a softmax over nothing.
    """
    if softmax_support not in ("all", "present"):
        raise ValueError(f"wsv softmax_support must be 'all' or 'present', got {softmax_support!r}")
    labels = pred[:, [0, 1, 0, 1], [0, 0, 1, 1]]  # (N, 4) in weight order
    scores = np.asarray(weights, dtype=float)[None, :] * logit(conf[:, [0, 1, 0, 1], [0, 0, 1, 1]])
    same = labels[:, :, None] == labels[:, None, :]  # (N, 4, 4)
    label_score = (same * scores[:, None, :]).sum(-1)  # S of each stream's label
    # the first stream carrying each valid label: count each candidate once, the invalid one never
    first = ~np.tril(same, k=-1).any(-1) & (labels >= 0)
    any_valid = first.any(1)
    best = np.argmax(np.where(first, label_score, -np.inf), axis=1)
    rows = np.arange(len(labels))
    answer = np.where(any_valid, labels[rows, best], -1)
    top = np.where(any_valid, label_score[rows, best], 0.0)
    # log-sum-exp over the present candidates, stabilised by the winning score
    denominator = np.where(first, np.exp(label_score - top[:, None]), 0.0).sum(1)
    if softmax_support == "all":
        n_labels = np.asarray(n_labels)
        absent = np.where(n_labels > 0, np.maximum(n_labels - first.sum(1), 0), 1)
        denominator = denominator + absent * np.exp(-top)
    confidence = np.where(any_valid, 1.0 / np.where(any_valid, denominator, 1.0), EPSILON)
    return answer, confidence


def cga(pred, conf, tau1: float, tau2: float, tie_agent: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Confidence gating with aggregation: CGS per agent, then Bayesian fusion."""
    y1, c1 = cgs(pred, conf, 0, tau1)
    y2, c2 = cgs(pred, conf, 1, tau2)
    return fuse(y1, c1, y2, c2, tie_agent)


def hid(pred, conf, delta1: float, delta2: float, tau1: float, tau2: float, tie_agent: int = 0):
    """Human-inspired debate (two agents).

    Both confident and agreeing: fuse the zero-shot answers (no debate). Disagreeing with exactly
    one confident agent H: H keeps its zero-shot answer, the other applies CGS to its debate output
    (which saw H's reasoning), then fuse. Otherwise (our default for the unassigned "agree,
    one confident" case too): both apply CGS, then fuse.
    """
    confident = np.stack([conf[:, 0, 0] > delta1, conf[:, 1, 0] > delta2], axis=1)
    agree = pred[:, 0, 0] == pred[:, 1, 0]
    y1, c1 = cgs(pred, conf, 0, tau1)
    y2, c2 = cgs(pred, conf, 1, tau2)
    only_first = ~agree & confident[:, 0] & ~confident[:, 1]
    only_second = ~agree & confident[:, 1] & ~confident[:, 0]
    y1 = np.where(only_first, pred[:, 0, 0], y1)
    c1 = np.where(only_first, conf[:, 0, 0], c1)
    y2 = np.where(only_second, pred[:, 1, 0], y2)
    c2 = np.where(only_second, conf[:, 1, 0], c2)
    no_debate = agree & confident[:, 0] & confident[:, 1]
    y1 = np.where(no_debate, pred[:, 0, 0], y1)
    c1 = np.where(no_debate, conf[:, 0, 0], c1)
    y2 = np.where(no_debate, pred[:, 1, 0], y2)
    c2 = np.where(no_debate, conf[:, 1, 0], c2)
    return fuse(y1, c1, y2, c2, tie_agent)


def single_agent(pred, conf, agent: int, stream: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero-shot (stream 0) or MAD (stream 1) output of one agent."""
    return pred[:, agent, stream], conf[:, agent, stream]


def mad_d(pred, conf, agent: int) -> tuple[np.ndarray, np.ndarray]:
    """MAD-D: the debate output only where the zero-shot answers disagree."""
    debated = pred[:, 0, 0] != pred[:, 1, 0]
    return (
        np.where(debated, pred[:, agent, 1], pred[:, agent, 0]),
        np.where(debated, conf[:, agent, 1], conf[:, agent, 0]),
    )


@dataclass(frozen=True)
class Parameter:
    name: str
    low: float
    high: float
    neutral: float


#: Search spaces and neutral θ0 (Elahi & Di Eugenio, arXiv:2606.13591 §3.1; §3.4): w ∈ [0, 3] (θ0 = 1), τ ∈ [−3, 3] logits (θ0 = 0),
#: δ ∈ [0.05, 0.95] (θ0 = 0.5).
SEARCH_SPACES: dict[str, tuple[Parameter, ...]] = {
    "wsv": tuple(Parameter(f"w_{i}_{s}", 0.0, 3.0, 1.0) for s in (0, 1) for i in (1, 2)),
    "cga": (Parameter("tau_1", -3.0, 3.0, 0.0), Parameter("tau_2", -3.0, 3.0, 0.0)),
    "hid": (
        Parameter("delta_1", 0.05, 0.95, 0.5),
        Parameter("delta_2", 0.05, 0.95, 0.5),
        Parameter("tau_1", -3.0, 3.0, 0.0),
        Parameter("tau_2", -3.0, 3.0, 0.0),
    ),
}

SEARCHED_PROTOCOLS = tuple(SEARCH_SPACES)


def search_space(protocol: str, ranges: dict | None = None) -> tuple[Parameter, ...]:
    """The protocol's parameters; ``ranges`` ({"w": [lo, hi], "tau": ..., "delta": ...}) overrides bounds."""
    if protocol not in SEARCH_SPACES:
        raise ValueError(f"unknown confidence protocol {protocol!r} (known: {list(SEARCH_SPACES)})")
    ranges = ranges or {}
    space = []
    for p in SEARCH_SPACES[protocol]:
        low, high = ranges.get(p.name.split("_")[0], (p.low, p.high))
        space.append(Parameter(p.name, float(low), float(high), p.neutral))
    return tuple(space)


BASELINES = ("zero_shot", "mad", "mad_d")

#: Every method by name: f(pred, conf, n_labels, params, agent, tie_agent, wsv_softmax_support).
#: Baselines report one agent (`agent`); protocols take their θ (`params`, names as in `SEARCH_SPACES`)
#: and break exact confidence ties towards `tie_agent` (the validation-better one).
METHODS: dict[str, Callable] = {
    "zero_shot": lambda pred, conf, n_labels, params, agent, tie_agent, support: single_agent(pred, conf, agent, 0),
    "mad": lambda pred, conf, n_labels, params, agent, tie_agent, support: single_agent(pred, conf, agent, 1),
    "mad_d": lambda pred, conf, n_labels, params, agent, tie_agent, support: mad_d(pred, conf, agent),
    "wsv": lambda pred, conf, n_labels, params, agent, tie_agent, support: wsv(
        pred, conf, n_labels, [params[p.name] for p in SEARCH_SPACES["wsv"]], support
    ),
    "cga": lambda pred, conf, n_labels, params, agent, tie_agent, support: cga(
        pred, conf, params["tau_1"], params["tau_2"], tie_agent
    ),
    "hid": lambda pred, conf, n_labels, params, agent, tie_agent, support: hid(
        pred, conf, params["delta_1"], params["delta_2"], params["tau_1"], params["tau_2"], tie_agent
    ),
}


def apply_method(
    method: str,
    pred,
    conf,
    n_labels,
    *,
    params: dict | None = None,
    agent: int = 0,
    tie_agent: int = 0,
    wsv_softmax_support: str = "all",
) -> tuple[np.ndarray, np.ndarray]:
    """Answers and system confidences of a baseline (of `agent`) or a protocol (with θ = `params`)."""
    if method not in METHODS:
        raise ValueError(f"unknown confidence method {method!r} (known: {list(METHODS)})")
    if method in SEARCH_SPACES and params is None:
        raise ValueError(f"confidence protocol {method!r} needs its parameters")
    return METHODS[method](pred, conf, n_labels, params, agent, tie_agent, wsv_softmax_support)
