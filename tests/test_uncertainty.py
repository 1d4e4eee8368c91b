"""debatelab.uncertainty: UDPO debate uncertainty (Tang et al., arXiv:2602.07186 §2, App. D) and the UMAD
epistemic/aleatoric decomposition (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1; §3.2, §4.2).

Every expected number is worked out by hand from the papers' formulas in the comment next
to it (ln = natural log), never copied from the code's output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from debatelab.grading import INVALID, answer_keys, majority_vote
from debatelab.uncertainty import (
    UDPO_KEYS,
    answer_distribution,
    debate_uncertainty,
    decompose,
    decompose_samples,
    per_agent_uncertainty,
)

A, B, C = "A", "B", "C"

# A 4-to-1 trajectory (N = 5 agents, T = 2 debate rounds after the zero-shot round 0).
SPLIT_4_1 = [
    [A, A, B, B, C],  # t = 0
    [A, A, A, B, C],  # t = 1
    [A, A, A, A, B],  # t = 2 = T: final 4-to-1 split
]

# H(0.8, 0.2) in nats = −0.8 ln 0.8 − 0.2 ln 0.2 = 0.8·0.223144 + 0.2·1.609438
#                     = 0.178515 + 0.321888 = 0.500402
H_08_02 = 0.500402


def approx(x: float, tol: float = 1e-5):
    return pytest.approx(x, abs=tol)


# --------------------------------------------------------------------------- UDPO, Tang et al., arXiv:2602.07186 §2, App. D


def test_four_to_one_split_known_values():
    u = debate_uncertainty(SPLIT_4_1)
    assert set(u) == set(UDPO_KEYS)
    # Normalised entropy, observed K = 2 distinct final answers (spec default):
    # H̃ = 0.500402 / ln 2 = 0.500402 / 0.693147 = 0.721928 → 0.722.
    assert u["entropy"] == approx(0.721928)
    assert round(u["entropy"], 3) == 0.722
    # Disagreement: max p = 0.8 < 1 → D = 1.
    assert u["disagreement"] == 1.0
    # Leave-one-out: ŷ = A (4 votes). Dropping an A leaves A,A,A,B → A; dropping the B
    # leaves A,A,A,A → A. No agent changes ŷ → L = 0.
    assert u["leave_one_out"] == 0.0
    # U_sys (Eq 19) uses only the final round: (H̃ + D + L)/3 = (0.721928 + 1 + 0)/3
    # = 1.721928/3 = 0.573976 → 0.574. Rounds 0 and 1 do not enter U_sys at all; they
    # only feed u_intra / u_inter below.
    assert u["u_sys"] == approx(0.573976)
    assert round(u["u_sys"], 3) == 0.574

    # Flip rate F: only the 1→2 transition (T−1 = 1), denominator N(T−1) = 5.
    # Agents: A→A 0, A→A 0, A→A 0, B→A 1, C→B 1 → F = 2/5 = 0.4.
    assert u["flip_rate"] == approx(0.4)
    # Belief revision M (round 0 vs round 2): A/A 0, A/A 0, B/A 1, B/A 1, C/B 1 → 3/5.
    assert u["belief_revision"] == approx(0.6)
    # U_intra = 0.5·0.4 + 0.5·0.6 = 0.5 (λ = 0.5 default).
    assert u["u_intra"] == approx(0.5)
    # C_t over the 10 agent pairs: t=0 A,A,B,B,C has 2 agreeing pairs → 8/10 = 0.8;
    # t=1 A,A,A,B,C has C(3,2) = 3 agreeing → 7/10 = 0.7; t=2 A,A,A,A,B has C(4,2) = 6
    # agreeing → 4/10 = 0.4. U_inter = (0.8 + 0.7 + 0.4)/3 = 1.9/3 = 0.633333.
    assert u["u_inter"] == approx(0.633333)


def test_unanimity_gives_zero_everywhere():
    u = debate_uncertainty([[A] * 5] * 4)
    # Nobody ever changes (F = M = 0), every pair agrees (C_t = 0), final p(A) = 1:
    # H̃ = 0 (K = 1), D = 0, L = 0 (every leave-one-out vote is still A) → all 0.
    assert u == {key: 0.0 for key in UDPO_KEYS}
    for normaliser, extra in (("n_agents", {}), ("n_options", {"n_options": 4})):
        assert debate_uncertainty([[A] * 5] * 4, entropy_normaliser=normaliser, **extra) == u


def test_entropy_normalisers():
    # Same final 4-to-1 split, H = 0.500402 nats.
    # n_agents: K = N = 5 → 0.500402 / ln 5 = 0.500402 / 1.609438 = 0.310918.
    u = debate_uncertainty(SPLIT_4_1, entropy_normaliser="n_agents")
    assert u["entropy"] == approx(0.310918)
    # u_sys = (0.310918 + 1 + 0)/3 = 0.436973.
    assert u["u_sys"] == approx(0.436973)
    # n_options = 4 (e.g. four MC choices): 0.500402 / ln 4 = 0.500402 / 1.386294 = 0.360964.
    u = debate_uncertainty(SPLIT_4_1, entropy_normaliser="n_options", n_options=4)
    assert u["entropy"] == approx(0.360964)
    # n_options smaller than the observed support: K = max(1, 2) = 2 → back to 0.721928.
    u = debate_uncertainty(SPLIT_4_1, entropy_normaliser="n_options", n_options=1)
    assert u["entropy"] == approx(0.721928)
    with pytest.raises(ValueError):
        debate_uncertainty(SPLIT_4_1, entropy_normaliser="n_options")
    with pytest.raises(ValueError):
        debate_uncertainty(SPLIT_4_1, entropy_normaliser="all_rounds")


def test_lambda_weights_flip_rate_and_belief_revision():
    # F = 0.4, M = 0.6 (see the 4-to-1 test).
    assert debate_uncertainty(SPLIT_4_1, lam=1.0)["u_intra"] == approx(0.4)  # = F
    assert debate_uncertainty(SPLIT_4_1, lam=0.0)["u_intra"] == approx(0.6)  # = M
    # λ = 0.25: 0.25·0.4 + 0.75·0.6 = 0.1 + 0.45 = 0.55.
    assert debate_uncertainty(SPLIT_4_1, lam=0.25)["u_intra"] == approx(0.55)
    with pytest.raises(ValueError):
        debate_uncertainty(SPLIT_4_1, lam=1.5)


def test_flip_rate_excludes_zero_to_one_transition():
    # Agent 1 changes only between t=0 and t=1 (B→A), then stays. T = 3.
    u = debate_uncertainty([[B, A], [A, A], [A, A], [A, A]])
    # F counts t=1→2 and t=2→3 only: 0 flips / (N(T−1) = 2·2 = 4) = 0.
    assert u["flip_rate"] == 0.0
    # M: agent 1 B vs A → 1, agent 2 → 0; M = 1/2.
    assert u["belief_revision"] == approx(0.5)
    # Flip-flopping agent: A,B,A,B over t=0..3 → transitions 1→2 (B→A) and 2→3 (A→B)
    # are flips: 2 / (1·2) = 1. M: A vs B → 1.
    u = debate_uncertainty([[A], [B], [A], [B]])
    assert u["flip_rate"] == approx(1.0)
    assert u["belief_revision"] == approx(1.0)


def test_short_trajectories():
    # T = 0 (zero-shot only): no transitions (F = 0 by our convention), M = 0 (a_0 = a_T);
    # U_inter = C_0: A,A,B has 1 agreeing pair of 3 → 2/3.
    u = debate_uncertainty([[A, A, B]])
    assert u["flip_rate"] == 0.0 and u["belief_revision"] == 0.0 and u["u_intra"] == 0.0
    assert u["u_inter"] == approx(2 / 3)
    # T = 1: F undefined in the paper (N(T−1) = 0) → 0; M: agent 3 B→A → 1/3.
    u = debate_uncertainty([[A, A, B], [A, A, A]])
    assert u["flip_rate"] == 0.0
    assert u["belief_revision"] == approx(1 / 3)
    # U_intra = 0.5·0 + 0.5·(1/3) = 1/6; U_inter = (2/3 + 0)/2 = 1/3.
    assert u["u_intra"] == approx(1 / 6)
    assert u["u_inter"] == approx(1 / 3)


def test_single_agent_has_no_pairs_and_no_leave_one_out():
    # N = 1: no pairs (C_t = 0), one final value (H̃ = 0, D = 0), no vote left after
    # removing the agent (L = 0 by convention). M: A vs B → 1.
    u = debate_uncertainty([[A], [B]])
    assert u["u_inter"] == 0.0 and u["u_sys"] == 0.0
    assert u["belief_revision"] == 1.0


def test_leave_one_out_tie_rule_uses_agent_order():
    # Final A,A,A,B,B: ŷ = A. Dropping an A (agents 1–3) leaves a 2–2 tie between A and
    # B; the first-in-order rule picks the tied answer seen first. Dropping agent 1
    # leaves A,A,B,B → A; same for agents 2, 3. Dropping a B leaves A,A,A,B → A. L = 0.
    u = debate_uncertainty([[A, A, A, B, B]])
    assert u["leave_one_out"] == 0.0
    # H(0.6, 0.4) = 0.6·0.510826 + 0.4·0.916291 = 0.306495 + 0.366516 = 0.673012 nats;
    # / ln 2 = 0.970951. u_sys = (0.970951 + 1 + 0)/3 = 1.970951/3 = 0.656984.
    assert u["entropy"] == approx(0.970951)
    assert u["u_sys"] == approx(0.656984)
    # Variant "a tie counts as a change": the three A-removals tie → L = 3/5.
    assert debate_uncertainty([[A, A, A, B, B]], loo_tie="change")["leave_one_out"] == approx(0.6)
    # Order matters: final B,B,A,A,A has ŷ = A (3 votes), but dropping any A leaves
    # B,B,A,A → tie → B comes first → changed. 3 of 5 agents → L = 0.6.
    assert debate_uncertainty([[B, B, A, A, A]])["leave_one_out"] == approx(0.6)
    # A 2–2–1 final A,A,B,B,C: ŷ = A (tie, A first). Drop agent 1 or 2 → A,B,B,C → B
    # (changed); drop 3 or 4 → A wins 2–1 (same); drop 5 → A,A,B,B tie → A (same).
    # L = 2/5; with ties as changes, the 5th removal also counts → 3/5.
    assert debate_uncertainty([[A, A, B, B, C]])["leave_one_out"] == approx(0.4)
    assert debate_uncertainty([[A, A, B, B, C]], loo_tie="change")["leave_one_out"] == approx(0.6)


def test_invalid_answers_disagree_with_everything_but_do_not_vote():
    # [CHOICE] (issue 69, `udpo_agree`): an invalid answer agrees with no answer, itself
    # included. Final A,A,A,None,None: each None is a value of its own → p = (0.6, 0.2, 0.2),
    # observed K = 3: H = 0.6 ln(5/3) + 2·0.2 ln 5 = 0.6·0.510826 + 0.4·1.609438 = 0.306495 +
    # 0.643775 = 0.950270 nats; / ln 3 (1.098612) = 0.864974 (was 0.970951 with INVALID one
    # value, K = 2). D = 1. ŷ = A; dropping any agent leaves ≥ 2 A's and invalid answers don't
    # vote, so ŷ stays A → L = 0. u_sys = (0.864974 + 1 + 0)/3 = 0.621658.
    u = debate_uncertainty([[A, A, A, None, None]])
    assert u["entropy"] == approx(0.864974)
    assert u["disagreement"] == 1.0
    assert u["leave_one_out"] == 0.0
    assert u["u_sys"] == approx(0.621658)
    # The two invalid agents disagree: the agreeing pairs of A,A,A,None,None are the C(3,2) = 3
    # pairs of A's, of 10 → C_0 = 7/10 (was 6/10 when the two invalid agents agreed).
    assert u["u_inter"] == approx(0.7)
    # Invalid votes never win: A,None,None,None,None → ŷ = A; dropping agent 1 leaves no
    # valid vote → INVALID ≠ A (1 change); dropping an invalid agent keeps A. L = 1/5.
    assert debate_uncertainty([[A, None, None, None, None]])["leave_one_out"] == approx(0.2)
    # Flips: A → None is a change, and so is None → None. Agent 1: A,A,None (1 flip at 1→2),
    # agent 2: None,None,None (1 flip at 1→2) → F = 2/(2·1) = 1 (was 0.5); M: A vs None 1,
    # None vs None 1 → M = 1 (was 0.5).
    u = debate_uncertainty([[A, None], [A, None], [None, None]])
    assert u["flip_rate"] == approx(1.0)
    assert u["belief_revision"] == approx(1.0)


def test_all_invalid_debate_has_the_least_agreement():
    # N = 3 agents invalid in every round, T = 2. With INVALID one shared value this scored
    # every measure 0 (perfect agreement); now no two answers agree:
    # F: the one debate transition 1→2 flips for every agent → 3/(3·1) = 1; M: None at t = 0 vs
    # None at t = 2 differ for every agent → 1; U_intra = 0.5·1 + 0.5·1 = 1.
    # C_t: none of the 3 pairs agree in any round → 1 each, U_inter = 1.
    # Final p = (1/3, 1/3, 1/3) over three singleton values, K = 3 → H̃ = ln 3/ln 3 = 1; D = 1;
    # ŷ = INVALID (no valid vote) and each ŷ^{−i} = INVALID ≠ INVALID → L = 3/3 = 1; U_sys = 1.
    u = debate_uncertainty([[None] * 3] * 3)
    assert u == {key: approx(1.0) for key in UDPO_KEYS}
    # N invalid answers have maximal entropy under every normaliser: n_agents K = 3 → 1;
    # n_options = 2 < 3 values → K = max(2, 3) = 3 → 1.
    assert debate_uncertainty([[None] * 3], entropy_normaliser="n_agents")["entropy"] == approx(1.0)
    assert debate_uncertainty([[None] * 3], entropy_normaliser="n_options", n_options=2)["entropy"] == approx(1.0)
    # Per agent: flip 1/(T−1) = 1, revision 1, U_intra 1, both peers disagree in all 3 rounds
    # → U_inter 1, and leaving the agent out changes the (INVALID) vote → 1.
    assert (
        per_agent_uncertainty([[None] * 3] * 3)
        == [{"u_intra": 1.0, "u_inter": 1.0, "flip_rate": 1.0, "belief_revision": 1.0, "leave_one_out": 1.0}] * 3
    )
    # One agent invalid throughout: D = 1 (an invalid answer agrees with nothing, itself
    # included), H̃ = 0 (K = 1), L = 0 (N = 1) → U_sys = 1/3; F = 1, M = 1.
    one = debate_uncertainty([[None]] * 3)
    assert one["disagreement"] == 1.0 and one["u_sys"] == approx(1 / 3)
    assert one["flip_rate"] == 1.0 and one["belief_revision"] == 1.0


def test_invalid_agent_flips_and_disagrees_with_a_valid_pair():
    # Agents 1, 2 say A in every round, agent 3 is invalid in every round (N = 3, T = 2).
    u = debate_uncertainty([[A, A, None]] * 3)
    # Agent 3's None → None at 1→2 is a flip: F = 1/(3·1) = 1/3 (was 0); M: agent 3's None at
    # t = 0 vs t = 2 → 1/3 (was 0); U_intra = 0.5/3 + 0.5/3 = 1/3.
    assert u["flip_rate"] == approx(1 / 3)
    assert u["belief_revision"] == approx(1 / 3)
    assert u["u_intra"] == approx(1 / 3)
    # Final A,A,None disagrees: D = 1; p = (2/3, 1/3), K = 2: H = (2/3) ln(3/2) + (1/3) ln 3 =
    # 0.270310 + 0.366204 = 0.636514 nats; / ln 2 = 0.918296. ŷ = A with or without any one
    # agent → L = 0. U_sys = (0.918296 + 1 + 0)/3 = 0.639432. C_t: 1 agreeing pair of 3 → 2/3.
    assert u["disagreement"] == 1.0
    assert u["entropy"] == approx(0.918296)
    assert u["leave_one_out"] == 0.0
    assert u["u_sys"] == approx(0.639432)
    assert u["u_inter"] == approx(2 / 3)
    per = per_agent_uncertainty([[A, A, None]] * 3)
    assert [p["flip_rate"] for p in per] == [0.0, 0.0, 1.0]
    assert [p["belief_revision"] for p in per] == [0.0, 0.0, 1.0]
    # Two invalid and one valid answer: no pair agrees (C_0 = 1, was 2/3 with the invalid pair
    # agreeing) and the three values are singletons → H̃ = ln 3/ln 3 = 1 (was 0.918296); D = 1;
    # ŷ = A, dropping agent 1 leaves no valid vote (INVALID ≠ A) → L = 1/3.
    # U_sys = (1 + 1 + 1/3)/3 = 7/9.
    u = debate_uncertainty([[A, None, None]])
    assert u["u_inter"] == approx(1.0)
    assert u["entropy"] == approx(1.0)
    assert u["disagreement"] == 1.0
    assert u["leave_one_out"] == approx(1 / 3)
    assert u["u_sys"] == approx(7 / 9)


def test_task_type_groups_equivalent_answers():
    final = ["1/2", "0.5", "0.50", "\\frac{1}{2}", "3"]
    # Raw strings: 5 distinct answers, p = 1/5 each, K = 5 → H̃ = ln 5 / ln 5 = 1; D = 1.
    # Vote: five-way tie → "1/2" (agent 1). Dropping agent 1 → tie won by "0.5" (changed);
    # dropping any other agent keeps "1/2" first → L = 1/5. u_sys = (1 + 1 + 0.2)/3 = 0.733333.
    raw = debate_uncertainty([final])
    assert raw["entropy"] == approx(1.0)
    assert raw["leave_one_out"] == approx(0.2)
    assert raw["u_sys"] == approx(0.733333)
    # Grouped by normalize_answer: four answers are "0.5", one is "3" → a 4-to-1 split:
    # H̃ = 0.721928, D = 1, L = 0, u_sys = 0.573976 (as in the first test).
    grouped = debate_uncertainty([final], task_type="math")
    assert grouped["entropy"] == approx(0.721928)
    assert grouped["leave_one_out"] == 0.0
    assert grouped["u_sys"] == approx(0.573976)
    # Multiple choice: "b", "(B)" and "B" are one answer; so C_0 = 0 and nobody flips.
    mc = debate_uncertainty([["b", "(B)", "B"], ["B", "B", "b"]], task_type="multiple_choice")
    assert mc == {key: 0.0 for key in UDPO_KEYS}
    # A string with no canonical form ("foo" is no choice letter) counts as invalid:
    assert answer_keys(["foo", None, "c"], task_type="multiple_choice") == [INVALID, INVALID, "C"]


def test_merge_equivalent_classes():
    # "0.3333333" and "1/3" have different canonical strings but are answers_equivalent
    # (|diff| ≈ 3.3e-8 ≤ 1e-6): one answer to the protocols, so the measures merge them by default
    # (UMAD App. C.1); merge_equivalent=False keeps them apart.
    final = ["1/3", "0.3333333", "1/3", "2"]
    # Without merging: p = (2/4, 1/4, 1/4), K = 3: H = 0.5 ln 2 + 2·0.25 ln 4 = 0.346574 +
    # 0.693147 = 1.039721 nats; / ln 3 (1.098612) = 0.946395.
    assert debate_uncertainty([final], task_type="math", merge_equivalent=False)["entropy"] == approx(0.946395)
    # Merged: p = (3/4, 1/4), K = 2: H = 0.75·0.287682 + 0.25·1.386294 = 0.215762 +
    # 0.346574 = 0.562335 nats; / ln 2 = 0.811278.
    assert debate_uncertainty([final], task_type="math")["entropy"] == approx(0.811278)
    with pytest.raises(ValueError):
        answer_keys(final, merge_equivalent=True)  # needs a task_type


def test_majority_vote():
    assert majority_vote([B, A, A, B]) == B  # 2–2 tie → first in agent order
    assert majority_vote([None, None, A]) == A  # invalid answers don't vote
    assert majority_vote([None, None]) is None  # all invalid → invalid
    # Grouped: "0.5" and "1/2" form one group of 2 > "3"; the first original string wins.
    assert majority_vote(["3", "0.5", "1/2"], task_type="math") == "0.5"


def test_per_agent_uncertainty_matches_hand_values_and_system_means():
    per = per_agent_uncertainty(SPLIT_4_1)
    # F^(i) (1→2 only, /(T−1) = 1): 0, 0, 0, 1 (B→A), 1 (C→B).
    assert [p["flip_rate"] for p in per] == [0.0, 0.0, 0.0, 1.0, 1.0]
    # M^(i): 0, 0, 1 (B→A), 1 (B→A), 1 (C→B).
    assert [p["belief_revision"] for p in per] == [0.0, 0.0, 1.0, 1.0, 1.0]
    # u_intra^(i) = 0.5F + 0.5M: 0, 0, 0.5, 1, 1.
    assert [p["u_intra"] for p in per] == [approx(v) for v in (0.0, 0.0, 0.5, 1.0, 1.0)]
    # u_inter^(i): share of the 4 peers that disagree, averaged over 3 rounds.
    # agent 1: t0 3/4 (B,B,C), t1 2/4 (B,C), t2 1/4 (B) → (0.75+0.5+0.25)/3 = 0.5
    # agent 2: same = 0.5; agent 3: t0 3/4 (A,A,C), t1 2/4, t2 1/4 → 0.5
    # agent 4: t0 3/4 (A,A,C), t1 4/4, t2 1/4 → 2/3; agent 5: always 4/4 → 1.
    assert [p["u_inter"] for p in per] == [approx(v) for v in (0.5, 0.5, 0.5, 2 / 3, 1.0)]
    assert [p["leave_one_out"] for p in per] == [0.0] * 5
    # Means equal the system values: u_intra (0+0+0.5+1+1)/5 = 0.5; u_inter
    # (0.5+0.5+0.5+0.666667+1)/5 = 0.633333.
    system = debate_uncertainty(SPLIT_4_1)
    for key in ("u_intra", "u_inter", "flip_rate", "belief_revision", "leave_one_out"):
        assert np.mean([p[key] for p in per]) == approx(system[key])


def test_input_validation():
    with pytest.raises(ValueError):
        debate_uncertainty([])
    with pytest.raises(ValueError):
        debate_uncertainty([[A, B], [A]])  # agents differ between rounds
    with pytest.raises(TypeError):
        debate_uncertainty(["AB"])  # a round must not be a string
    with pytest.raises(TypeError):
        debate_uncertainty([[A, 3]])  # answers are str or None
    with pytest.raises(ValueError):
        debate_uncertainty([[A]], task_type="essay")
    with pytest.raises(ValueError):
        debate_uncertainty([[A]], loo_tie="random")


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.lists(
            st.lists(st.sampled_from([A, B, C, None]), min_size=n, max_size=n),
            min_size=1,
            max_size=5,
        )
    ),
    st.sampled_from(["observed", "n_agents"]),
)
def test_udpo_measures_lie_in_unit_interval(answers, normaliser):
    u = debate_uncertainty(answers, entropy_normaliser=normaliser)
    for key in UDPO_KEYS:
        assert 0.0 <= u[key] <= 1.0 + 1e-12, key
    # D = 0 exactly when the final round is unanimous on a valid answer, and then H̃ = 0 and
    # L = 0; an invalid final answer agrees with nothing, so then D = 1.
    final = answers[-1]
    if len(set(final)) == 1 and final[0] is not None:
        assert u["disagreement"] == u["entropy"] == u["leave_one_out"] == 0.0
    else:
        assert u["disagreement"] == 1.0


# --------------------------------------------------------------------------- UMAD, Qiao et al., arXiv:2603.01221


def test_answer_distribution_invalid_bucket():
    samples = [A, A, None, B]
    # Default keeps invalid samples in one "<none>" bucket: A 2/4, <none> 1/4, B 1/4.
    assert answer_distribution(samples) == {A: 0.5, INVALID: 0.25, B: 0.25}
    # Dropped: K = 3 valid samples → A 2/3, B 1/3.
    dropped = answer_distribution(samples, include_invalid=False)
    assert dropped == {A: approx(2 / 3), B: approx(1 / 3)}
    assert answer_distribution([None, None], include_invalid=False) == {}
    # Grouped: "1/2" and "0.5" are one answer "0.5": 2/4; "2" 1/4; <none> 1/4.
    grouped = answer_distribution(["1/2", "0.5", None, "2"], task_type="math")
    assert grouped == {"0.5": 0.5, INVALID: 0.25, "2": 0.25}


def test_decompose_known_values():
    ln2 = math.log(2)  # 0.693147
    # One-hot agents on different answers: p̄ = (0.5, 0.5) → TU = ln 2; AU = 0; EU = ln 2.
    d = decompose([{A: 1.0}, {B: 1.0}])
    assert d["total"] == approx(ln2) and d["aleatoric"] == 0.0 and d["epistemic"] == approx(ln2)
    # Identical uniform agents: TU = ln 2 = AU, EU = 0.
    d = decompose(np.array([[0.5, 0.5], [0.5, 0.5]]))
    assert d["epistemic"] == 0.0 and d["aleatoric"] == approx(ln2) and d["total"] == approx(ln2)
    # p1 = (1, 0), p2 = (0.5, 0.5): p̄ = (0.75, 0.25),
    # TU = 0.75·0.287682 + 0.25·1.386294 = 0.215762 + 0.346574 = 0.562335;
    # AU = (0 + 0.693147)/2 = 0.346574; EU = 0.562335 − 0.346574 = 0.215762.
    d = decompose([{A: 1.0}, {A: 0.5, B: 0.5}])
    assert d["total"] == approx(0.562335)
    assert d["aleatoric"] == approx(0.346574)
    assert d["epistemic"] == approx(0.215762)
    with pytest.raises(ValueError):
        decompose([{A: 0.7}])  # does not sum to 1
    with pytest.raises(ValueError):
        decompose(np.array([[1.5, -0.5]]))  # negative probability


def test_decompose_samples_uses_common_support():
    # Agent 0: A,A,B,B → (0.5, 0.5); agent 1: A,A,A,A → (1, 0) on the common support
    # {A, B} (B never produced by agent 1 gets 0). Same numbers as above:
    # TU = 0.562335, AU = 0.346574, EU = 0.215762.
    d = decompose_samples([[A, A, B, B], [A, A, A, A]])
    assert d["total"] == approx(0.562335)
    assert d["aleatoric"] == approx(0.346574)
    assert d["epistemic"] == approx(0.215762)
    # Grouping across agents: agent 0 says "1/2" twice, agent 1 "0.5" twice → one answer,
    # both one-hot on it → all three are 0.
    d = decompose_samples([["1/2", "1/2"], ["0.5", "0.50"]], task_type="math")
    assert d == {"total": 0.0, "epistemic": 0.0, "aleatoric": 0.0}
    # Invalid bucket kept: agent 0 A,None → (0.5, 0.5); agent 1 None,None → (0, 1) on
    # {A, <none>}: p̄ = (0.25, 0.75) → TU = 0.562335, AU = (ln 2 + 0)/2 = 0.346574.
    d = decompose_samples([[A, None], [None, None]])
    assert d["total"] == approx(0.562335) and d["aleatoric"] == approx(0.346574)
    with pytest.raises(ValueError):
        decompose_samples([[A, None], [None, None]], include_invalid=False)


def _entropy(p: np.ndarray) -> float:
    return float(-sum(x * math.log(x) for x in p if x > 0))


distribution_matrices = st.integers(1, 6).flatmap(
    lambda n_agents: st.integers(1, 6).flatmap(
        lambda n_answers: st.lists(
            st.lists(st.floats(0.0, 1.0), min_size=n_answers, max_size=n_answers).filter(lambda row: sum(row) > 1e-3),
            min_size=n_agents,
            max_size=n_agents,
        )
    )
)


@settings(max_examples=200, deadline=None)
@given(distribution_matrices)
def test_decompose_identity_and_bounds(rows):
    matrix = np.array([np.array(r) / sum(r) for r in rows])
    d = decompose(matrix)
    # Proposition 3.2: TU = EU + AU, exactly as returned.
    assert d["total"] == d["epistemic"] + d["aleatoric"]
    # JSD ≥ 0 and ≤ ln N (nats); AU ≥ 0.
    assert d["epistemic"] >= 0.0
    assert d["epistemic"] <= math.log(len(rows)) + 1e-9
    assert d["aleatoric"] >= 0.0
    # Against an independent computation of H(p̄) and mean H(p_i).
    assert d["total"] == pytest.approx(_entropy(matrix.mean(axis=0)), abs=1e-9)
    assert d["aleatoric"] == pytest.approx(np.mean([_entropy(r) for r in matrix]), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6).filter(lambda r: sum(r) > 1e-3),
    st.integers(1, 6),
)
def test_decompose_agreeing_agents_have_zero_jsd(row, n_agents):
    p = np.array(row) / sum(row)
    d = decompose(np.tile(p, (n_agents, 1)))
    # All agents share p: p̄ = p, so JSD = H(p) − H(p) = 0 and TU = AU = H(p).
    assert d["epistemic"] == 0.0
    assert d["total"] == d["aleatoric"] == pytest.approx(_entropy(p), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 6).flatmap(lambda k: st.lists(st.integers(0, k - 1), min_size=1, max_size=6).map(lambda ix: (k, ix)))
)
def test_decompose_one_hot_agents_have_zero_aleatoric(case):
    k, picks = case
    matrix = np.eye(k)[picks]
    d = decompose(matrix)
    # Each agent is certain (H = 0), so AU = 0 and TU = EU = H(p̄), where p̄ is the share
    # of agents on each answer.
    assert d["aleatoric"] == 0.0
    shares = np.bincount(picks, minlength=k) / len(picks)
    assert d["epistemic"] == pytest.approx(_entropy(shares), abs=1e-9)
    assert d["total"] == d["epistemic"]
