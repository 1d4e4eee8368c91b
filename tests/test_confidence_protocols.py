"""WSV, CGA, HID, Bayesian fusion and the baselines on hand-worked cases (Elahi & Di Eugenio, arXiv:2606.13591 §3.1)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from debatelab.confidence import fusion as P
from debatelab.probability import EPSILON


def _streams(pred, conf):
    """One question per row: pred/conf given as [[y10, y11], [y20, y21]] lists."""
    return np.asarray(pred, dtype=int).reshape(-1, 2, 2), np.asarray(conf, dtype=float).reshape(-1, 2, 2)


def test_fusion_of_agreeing_answers_is_the_product_rule():
    got = P.bayesian_fusion(np.array([0.8]), np.array([0.7]), np.array([True]))
    assert got[0] == pytest.approx(0.8 * 0.7 / (0.8 * 0.7 + 0.2 * 0.3))
    assert got[0] > 0.8  # agreement of two confident agents is more confident than either


def test_fusion_of_disagreeing_answers_gives_the_confident_ones_share():
    c_hi, c_lo = 0.8, 0.6
    got = P.bayesian_fusion(np.array([c_lo]), np.array([c_hi]), np.array([False]))
    assert got[0] == pytest.approx(c_hi * (1 - c_lo) / (c_hi * (1 - c_lo) + (1 - c_hi) * c_lo))
    answer, conf = P.fuse(np.array([1]), np.array([c_lo]), np.array([2]), np.array([c_hi]))
    assert answer[0] == 2 and conf[0] == pytest.approx(got[0])


def test_fusion_properties_hold_on_random_inputs():
    rng = np.random.default_rng(0)
    c1, c2 = rng.uniform(0.51, 0.99, 500), rng.uniform(0.51, 0.99, 500)
    assert np.all(P.bayesian_fusion(c1, c2, np.ones(500, bool)) > np.maximum(c1, c2))
    c1, c2 = rng.uniform(0.01, 0.99, 500), rng.uniform(0.01, 0.99, 500)
    assert np.all(P.bayesian_fusion(c1, c2, np.zeros(500, bool)) >= 0.5)


def test_fusion_tie_goes_to_the_validation_better_agent():
    for tie_agent, expected in ((0, 1), (1, 2)):
        answer, conf = P.fuse(np.array([1]), np.array([0.7]), np.array([2]), np.array([0.7]), tie_agent=tie_agent)
        assert answer[0] == expected and conf[0] == pytest.approx(0.5)


def test_cgs_switches_only_when_the_logit_gain_exceeds_tau():
    pred, conf = _streams([[[1, 2], [0, 0]]] * 2, [[[0.6, 0.8], [0.5, 0.5]]] * 2)
    gain = math.log(0.8 / 0.2) - math.log(0.6 / 0.4)  # ≈ 0.98
    assert P.cgs(pred, conf, 0, gain - 0.01)[0][0] == 2
    answer, c = P.cgs(pred, conf, 0, gain + 0.01)
    assert answer[0] == 1 and c[0] == pytest.approx(0.6)


def test_wsv_hand_worked_scores_and_softmax_supports():
    # streams in weight order (1,0) (2,0) (1,1) (2,1): labels A=0, B=1, A, B
    pred, conf = _streams([[[0, 0], [1, 1]]], [[[0.9, 0.6], [0.7, 0.8]]])
    weights = [1.0, 0.5, 2.0, 1.0]
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    s_a = 1.0 * logit(0.9) + 2.0 * logit(0.6)
    s_b = 0.5 * logit(0.7) + 1.0 * logit(0.8)
    answer, c = P.wsv(pred, conf, np.array([2]), weights, "present")
    assert answer[0] == 0
    assert c[0] == pytest.approx(math.exp(s_a) / (math.exp(s_a) + math.exp(s_b)))
    # a 4-option question: two absent labels score 0 in the softmax
    _, c_all = P.wsv(pred, conf, np.array([4]), weights, "all")
    assert c_all[0] == pytest.approx(math.exp(s_a) / (math.exp(s_a) + math.exp(s_b) + 2))


def test_wsv_unanimous_confidence_is_one_only_on_the_present_support():
    pred, conf = _streams([[[3, 3], [3, 3]]], [[[0.7, 0.7], [0.6, 0.6]]])
    _, present = P.wsv(pred, conf, np.array([2]), [1, 1, 1, 1], "present")
    _, full = P.wsv(pred, conf, np.array([2]), [1, 1, 1, 1], "all")
    assert present[0] == pytest.approx(1.0)
    s = 2 * math.log(0.7 / 0.3) + 2 * math.log(0.6 / 0.4)
    assert full[0] == pytest.approx(1 / (1 + math.exp(-s)))  # binary: σ(S)


def test_a_low_confidence_stream_counts_against_its_label():
    # Every stream says A except agent 2's debate stream (B) which is confident; agent 1's streams
    # have p < 0.5, so their logits are negative and B wins.
    pred, conf = _streams([[[0, 0], [0, 1]]], [[[0.3, 0.3], [0.3, 0.9]]])
    answer, _ = P.wsv(pred, conf, np.array([2]), [1, 1, 1, 1])
    assert answer[0] == 1


@pytest.mark.parametrize("support", ["all", "present"])
def test_wsv_never_selects_the_invalid_label(support):
    """The paper's WSV (arXiv:2606.13591 §3.1) scores "every candidate label y_k that appears among
    the four predictions", labels of 𝒴: an unparseable stream (-1) predicts none, so it neither
    wins nor enters the softmax, however large the weighted logit it would carry."""
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    # agent 1's zero-shot answer is unparseable with a confident self-report: S(-1) = 2.94 > S(A) = 1.22
    pred, conf = _streams([[[-1, 0], [0, 0]]], [[[0.95, 0.6], [0.6, 0.6]]])
    answer, c = P.wsv(pred, conf, np.array([2]), [1, 1, 1, 1], support)
    s_a = 3 * logit(0.6)
    assert answer[0] == 0
    assert c[0] == pytest.approx(1.0 if support == "present" else 1 / (1 + math.exp(-s_a)))
    # every valid label scores below 0 and the invalid one (no evidence, p = 0.5) scores 0
    pred, conf = _streams([[[0, 0], [-1, 1]]], [[[0.3, 0.2], [0.5, 0.4]]])
    answer, c = P.wsv(pred, conf, np.array([3]), [1, 1, 1, 1], support)
    s_a, s_b = logit(0.3) + logit(0.2), logit(0.4)
    assert answer[0] == 1
    others = math.exp(s_a) + (1 if support == "all" else 0)  # "all": one absent label of 3 scores 0
    assert c[0] == pytest.approx(math.exp(s_b) / (math.exp(s_b) + others))
    # no stream has a valid label: no candidate, so the system has no answer, at the lowest confidence
    pred, conf = _streams([[[-1, -1], [-1, -1]]], [[[0.9, 0.9], [0.9, 0.9]]])
    answer, c = P.wsv(pred, conf, np.array([0]), [1, 1, 1, 1], support)
    assert answer[0] == -1 and c[0] == pytest.approx(EPSILON)


@pytest.mark.parametrize("protocol", P.SEARCHED_PROTOCOLS)
def test_unanimous_streams_give_that_label_for_any_parameters(protocol):
    rng = np.random.default_rng(1)
    n = 50
    pred = np.full((n, 2, 2), 7)
    conf = rng.uniform(0.05, 0.95, (n, 2, 2))
    for _ in range(20):
        params = {p.name: rng.uniform(p.low, p.high) for p in P.SEARCH_SPACES[protocol]}
        answer, c = P.apply_method(protocol, pred, conf, np.full(n, 3), params=params)
        assert np.all(answer == 7)
        assert np.all((c > 0) & (c <= 1))


def test_cga_gates_each_agent_then_fuses():
    # agent 1 gains confidence in debate (switches to 2), agent 2 loses it (keeps 1).
    pred, conf = _streams([[[1, 2], [1, 2]]], [[[0.6, 0.9], [0.7, 0.55]]])
    answer, c = P.cga(pred, conf, 0.0, 0.0)
    assert answer[0] == 2  # 0.9 (agent 1, switched) beats 0.7 (agent 2, kept)
    assert c[0] == pytest.approx(0.9 * 0.3 / (0.9 * 0.3 + 0.1 * 0.7))


def test_hid_routes_by_agreement_and_confidence():
    delta = dict(delta1=0.6, delta2=0.6, tau1=-10.0, tau2=-10.0)  # τ = −10: CGS always switches
    # both confident and agreeing: no debate, the zero-shot answers are fused
    pred, conf = _streams([[[1, 2], [1, 2]]], [[[0.8, 0.9], [0.7, 0.9]]])
    answer, c = P.hid(pred, conf, **delta)
    assert answer[0] == 1 and c[0] == pytest.approx(P.bayesian_fusion(0.8, 0.7, True))
    # disagreeing, only agent 1 confident: agent 1 keeps 1, agent 2 takes its debate output
    pred, conf = _streams([[[1, 3], [2, 1]]], [[[0.8, 0.99], [0.55, 0.65]]])
    answer, c = P.hid(pred, conf, **delta)
    assert answer[0] == 1 and c[0] == pytest.approx(P.bayesian_fusion(0.8, 0.65, True))
    # disagreeing, both confident: both debate (CGS switches both to their debate answers)
    pred, conf = _streams([[[1, 3], [2, 3]]], [[[0.8, 0.7], [0.9, 0.75]]])
    answer, c = P.hid(pred, conf, **delta)
    assert answer[0] == 3 and c[0] == pytest.approx(P.bayesian_fusion(0.7, 0.75, True))


def test_mad_d_uses_the_debate_only_on_disagreement():
    pred, conf = _streams([[[1, 2], [1, 3]], [[1, 2], [4, 3]]], [[[0.6, 0.7], [0.6, 0.8]], [[0.6, 0.7], [0.6, 0.8]]])
    answer, c = P.mad_d(pred, conf, 0)
    assert answer.tolist() == [1, 2] and c.tolist() == [0.6, 0.7]


def test_search_space_ranges_can_be_overridden():
    space = P.search_space("hid", {"tau": [-1, 2]})
    assert [(p.name, p.low, p.high) for p in space if p.name.startswith("tau")] == [("tau_1", -1, 2), ("tau_2", -1, 2)]
    with pytest.raises(ValueError, match="unknown confidence protocol 'vote'"):
        P.search_space("vote")
