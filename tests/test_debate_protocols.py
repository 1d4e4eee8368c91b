"""Protocol and engine logic against a scripted fake model (the only place a fake model runs)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from debatelab import prompts
from debatelab.debate.engine import Participant, QuestionState, Turn, accounting, run_engine
from debatelab.debate.protocols import make_protocol
from debatelab.grading import answer_keys, vote_answer
from debatelab.llm.base import Generation, SamplingParams

MATH_ROW = {"id": "q", "question": "What is 1+1?", "choices": None, "answer": "2", "task_type": "math", "meta": "{}"}


def state(answers, *, qid="q", min_ll=None, seed=0, gold="2"):
    """A question whose pre-debate answers are `answers` (None: unparseable)."""
    row = {**MATH_ROW, "id": qid, "answer": gold}
    n = len(answers)
    parts = [Participant(i, f"a{i}", "a", "m", None, SamplingParams()) for i in range(n)]
    pre = []
    for i, a in enumerate(answers):
        text = f"I think \\boxed{{{a}}}" if a is not None else "no idea"
        pre.append(
            Turn(
                agent=i,
                round=0,
                response=text,
                answer=a,
                key=answer_keys([a], task_type="math")[0],
                correct=a == gold,
                messages=({"role": "user", "content": "What is 1+1?"},),
                prompt_tokens=10,
                completion_tokens=5,
                min_logprob=(min_ll[i] if min_ll else -1.0),
            )
        )
    return QuestionState(row=row, thread=0, participants=parts, pre=pre, seed=seed)


class Scripted:
    """A fake model: `policy(state, ask) -> answer`; records every batch it receives."""

    def __init__(self, policy):
        self.policy = policy
        self.batches: list[list] = []

    def __call__(self, state_asks):
        self.batches.append(state_asks)
        out = []
        for st, ask in state_asks:
            answer = self.policy(st, ask)
            text = f"So the answer is \\boxed{{{answer}}}" if answer is not None else "hmm"
            out.append(Generation(text=text, completion_tokens=7, prompt_tokens=100, token_logprobs=[-0.5, -0.1]))
        return out


def keep_own(st, ask):
    return st.pre[ask.agent].answer


def adopt_first_source(st, ask):
    return st.pre[ask.sources[0]].answer if ask.sources else st.pre[ask.agent].answer


def run(kind, states, policy=keep_own, **options):
    protocol = make_protocol(kind, {"kind": kind, **options})
    protocol.prepare(states)
    fake = Scripted(policy)
    steps = run_engine(states, protocol.run, fake)
    return fake, steps


# --------------------------------------------------------------------------- votes


def test_plurality_ties_go_to_first_agent_or_to_pre_debate_count():
    answers = ["3", "2", "3", "2", None]
    keys = answer_keys(answers, task_type="math")
    assert vote_answer(answers, keys) == "3"  # first agent in order among tied 3 and 2
    pre = answer_keys(["2", "2", "3", "1", "1"], task_type="math")
    assert vote_answer(answers, keys, tie_break="pre_debate_count", pre_keys=pre) == "2"
    assert vote_answer([None, None], [answer_keys([None])[0]] * 2) is None  # invalid answers never vote


def test_svr_fallback_votes_post_debate_answers_and_breaks_ties_in_agent_order():
    # 1,1,3,3 with S=1, C=2: B = S(k+m) = 4. Every receiver adopts its challenger's answer, so no
    # one is accepted. Receivers in turn: 0 (challenged by 2), 1 (by 2), 2 (by 0), 3 (by 0).
    st = state(["1", "1", "3", "3"])
    fake, _ = run("svr_mad", [st], policy=adopt_first_source, challenges=1, accept_after=2)
    pairs = [(ask.sources[0], ask.agent) for b in fake.batches for _, ask in b]
    assert pairs == [(2, 0), (2, 1), (0, 2), (0, 3)]
    # votes 3,3,1,1: a 2-2 tie, pre-debate counts tie too (2 each) → the first agent's vote
    assert st.outcome.ended_by == "fallback" and st.outcome.final_answer == "3"
    assert st.outcome.answers_by_round[-1] == ["3", "3", "1", "1"]


# --------------------------------------------------------------------------- engine


def test_engine_batches_every_question_of_a_step_together_and_never_regenerates_round_0():
    states = [state(["2", "3", "4"], qid=f"q{k}") for k in range(5)]
    fake, steps = run("all_to_all", states, rounds=3)
    assert steps == 3  # one engine step per round, not per question
    assert [len(b) for b in fake.batches] == [15, 15, 15]  # 5 questions × 3 agents per step
    assert all(ask.round >= 1 for batch in fake.batches for _, ask in batch)


def test_all_to_all_counts_n_times_n_minus_one_transfers_per_round_and_all_tokens():
    st = state(["2", "3", "4", "5"])
    run("all_to_all", [st], rounds=2)
    acc = accounting(st)
    assert acc["ncomm"] == acc["ncomm_full"] == 2 * 4 * 3
    assert acc["debate_calls"] == 8
    assert acc["pre_debate_tokens"] == 4 * 15
    assert acc["total_tokens"] == 4 * 15 + 8 * 107


def test_du_template_continues_each_agents_own_conversation():
    st = state(["2", "3"])
    fake, _ = run("all_to_all", [st], rounds=2)
    second_round = [ask for _, ask in fake.batches[1]]
    msgs = second_round[0].messages
    roles = [m["role"] for m in msgs]
    assert roles == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[1]["content"] == st.pre[0].response  # own pre-debate answer stays in context
    assert "\\boxed{3}" in msgs[2]["content"]  # the peer's round-0 response


def test_early_stop_after_round_one_on_enough_agreement():
    agree = state(["2", "2", "2", "2", "2", "3"], qid="agree")
    split = state(["2", "2", "3", "3", "4", "5"], qid="split")
    run("all_to_all", [agree, split], rounds=2, early_stop_agree=5)
    assert agree.outcome.ended_by == "consensus" and agree.outcome.rounds_used == 1
    assert split.outcome.ended_by == "rounds" and split.outcome.rounds_used == 2
    assert accounting(agree)["ncomm"] == 30 and accounting(split)["ncomm"] == 60


# --------------------------------------------------------------------------- topologies


def test_ring_and_centralized_neighbours():
    ring = state(["2", "3", "4", "5", "6"])
    fake, _ = run("ring", [ring], rounds=1)
    sources = {ask.agent: set(ask.sources) for _, ask in fake.batches[0]}
    assert sources == {0: {4, 1}, 1: {0, 2}, 2: {1, 3}, 3: {2, 4}, 4: {3, 0}}
    hub = state(["3", "2", "2", "2"])
    fake, _ = run("centralized", [hub], rounds=1, final="hub")
    sources = {ask.agent: set(ask.sources) for _, ask in fake.batches[0]}
    assert sources == {0: {1, 2, 3}, 1: {0}, 2: {0}, 3: {0}}
    assert hub.outcome.final_answer == "3"  # the hub's answer, although 2 has the plurality


def test_group_debate_full_inside_groups_answers_across_seeded_groups():
    a = state(["2", "3", "4", "5", "6", "7"], seed=1)
    b = state(["2", "3", "4", "5", "6", "7"], seed=1)
    fa, _ = run("group_debate", [a], rounds=1, group_size=3)
    fb, _ = run("group_debate", [b], rounds=1, group_size=3)
    asks = sorted((ask for _, ask in fa.batches[0]), key=lambda x: x.agent)
    assert [x.sources for x in asks] == [
        x.sources for x in sorted((k for _, k in fb.batches[0]), key=lambda x: x.agent)
    ]
    for ask in asks:
        assert len(ask.sources) == 2 and len(ask.answer_sources) == 3
        group = {ask.agent, *ask.sources}
        assert not group & set(ask.answer_sources)
        peer_text = ask.messages[-1]["content"]
        assert peer_text.count("One agent solution") == 2 and "other groups" in peer_text
    assert accounting(a)["ncomm_full"] == 12 and accounting(a)["ncomm_answers"] == 18


def test_group_debate_can_count_one_answer_list_per_group_pair():
    # 6 agents in 2 groups of 3, 2 rounds (no consensus stop): 12 full + 2 group-pair lists per round.
    st = state(["2", "3", "4", "5", "6", "7"], seed=1)
    run("group_debate", [st], rounds=2, group_size=3, cross_group_ncomm="group_pair")
    assert st.outcome.rounds_used == 2
    stats = accounting(st)
    assert stats["ncomm_full"] == 24 and stats["ncomm_answers"] == 4 and stats["ncomm"] == 28
    # three groups of 2: 3·2 ordered group pairs per round
    st3 = state(["2", "3", "4", "5", "6", "7"], seed=1)
    run("group_debate", [st3], rounds=1, group_size=2, cross_group_ncomm="group_pair")
    assert accounting(st3)["ncomm_answers"] == 6 and accounting(st3)["ncomm_full"] == 6


def test_s2_mad_sends_only_between_disagreeing_agents():
    answers = ["2", "2", "3", "3", "3", "4"]
    st = state(answers)
    fake, _ = run("s2_mad", [st], rounds=1)
    for _, ask in fake.batches[0]:
        assert all(answers[j] != answers[ask.agent] for j in ask.sources)
    clusters = Counter(answers).values()
    assert accounting(st)["ncomm"] == 36 - sum(c * c for c in clusters)


def test_s2_mad_agent_without_disagreeing_peer_makes_no_call():
    st = state(["2", "2", "2", "3"])
    fake, _ = run("s2_mad", [st], policy=lambda s, a: "2", rounds=2)
    # round 1: everyone has a disagreeing peer; afterwards all say 2, so round 2 sends nothing
    assert len(fake.batches) == 1 and st.outcome.ended_by == "consensus"
    assert json.loads(json.dumps(st.outcome.answers_by_round))[-1] == ["2", "2", "2", "2"]


def test_mad_d_skips_agreeing_questions():
    agree, split = state(["2", "2"], qid="agree"), state(["2", "3"], qid="split")
    fake, _ = run("mad_d", [agree, split], rounds=1, template="pairwise")
    assert {st.question_id for b in fake.batches for st, _ in b} == {"split"}
    assert agree.outcome.ended_by == "unanimous" and accounting(agree)["debate_calls"] == 0
    assert accounting(split)["ncomm"] == 2


def test_sid_et_skips_the_most_confident_share_and_counts_one_pre_call():
    states = [state(["2", "3", "4"], qid=f"q{k}", min_ll=[-k, 0.0, 0.0]) for k in range(4)]
    fake, _ = run("sid_et", states, rounds=1, skip_rate=0.5)
    skipped = {s.question_id for s in states if s.outcome.ended_by == "skip"}
    assert skipped == {"q0", "q1"}  # the highest min log-likelihood of agent 0
    for s in states:
        acc = accounting(s)
        if s.question_id in skipped:
            assert acc["ncomm"] == 0 and acc["pre_debate_tokens"] == 15 and s.outcome.final_answer == "2"
        else:
            assert acc["ncomm"] == 6 and acc["pre_debate_tokens"] == 45


def test_sid_et_drops_unanimous_questions_first_and_skips_a_share_of_the_contested_rest():
    # The paper's worked case: 10 questions, the 4 unanimous ones have agent 0's highest min-LL.
    # Skip rate 0.6 applies to the 6 contested ones: round(0.6 · 6) = 4 skip (the 4 highest of
    # them, q4..q7), 2 are debated. Ranking all 10 would skip the 4 unanimous ones and only q4, q5.
    states = [state(["2", "2", "2"], qid=f"q{k}", min_ll=[0.0, -9, -9]) for k in range(4)]
    states += [state(["2", "3", "4"], qid=f"q{k}", min_ll=[-k, 0.0, 0.0]) for k in range(4, 10)]
    fake, _ = run("sid_et", states, rounds=1, skip_rate=0.6)  # skip_if_unanimous left at its default (off)
    ended = {s.question_id: s.outcome.ended_by for s in states}
    assert ended == {
        **{f"q{k}": "unanimous" for k in range(4)},
        **{f"q{k}": "skip" for k in range(4, 8)},
        "q8": "rounds",
        "q9": "rounds",
    }
    assert {st.question_id for b in fake.batches for st, _ in b} == {"q8", "q9"}
    assert all(accounting(s)["ncomm"] == 0 for s in states[:8])
    assert [accounting(s)["ncomm"] for s in states[8:]] == [6, 6]


def test_unanimity_uses_math_equivalence_for_sid_et_and_pre_unanimous():
    from debatelab.debate.stage import result_frames

    same = state(["\\frac{\\sqrt2}{2}", "\\frac{1}{\\sqrt2}", "\\frac{\\sqrt2}{2}"], qid="same", min_ll=[0.0, 0, 0])
    split = [state(["2", "3", "4"], qid=f"s{k}", min_ll=[-k, 0.0, 0.0]) for k in range(1, 3)]
    protocol = make_protocol("sid", {"kind": "sid_et", "rounds": 1, "skip_rate": 0.5})
    protocol.prepare([same, *split])
    run_engine([same, *split], protocol.run, Scripted(keep_own))
    # the equivalent answers are one answer: no debate, and not counted towards the skip rate
    assert same.outcome.ended_by == "unanimous" and accounting(same)["ncomm"] == 0
    assert [s.outcome.ended_by for s in split] == ["skip", "rounds"]
    _, questions = result_frames([same, *split], "d", protocol)
    assert questions["pre_unanimous"].tolist() == [True, False, False]


# --------------------------------------------------------------------------- SVR-MAD


@pytest.mark.parametrize(
    "answers", [["2", "3", "3", "4", "2", "5"], ["2", "2", "2", "2", "2", "7"], ["1", "2", "3", "4", "5", "6"]]
)
@pytest.mark.parametrize("S", [1, 2, 3])
def test_svr_mad_never_exceeds_its_budget(answers, S):
    st = state(answers)
    # Every receiver abandons its answer: nobody is ever accepted, the budget is the only stop.
    run("svr_mad", [st], policy=adopt_first_source, challenges=S, accept_after=2)
    clusters = Counter(answers)
    budget = S * (len(clusters) + max(clusters.values()))
    assert st.outcome.ended_by == "fallback"
    assert 0 < accounting(st)["ncomm"] <= budget


@pytest.mark.parametrize("S, C", [(2, 2), (2, 3), (3, 3), (1, 2)])
def test_svr_mad_stops_on_acceptance_after_c_retained_challenges(S, C):
    st = state(["2", "3", "3", "4", "2", "5"], min_ll=[-0.1, -2, -2, -2, -3, -3])
    fake, _ = run("svr_mad", [st], policy=keep_own, challenges=S, accept_after=C)
    assert st.outcome.ended_by == "acceptance" and st.outcome.final_answer == "2"
    assert accounting(st)["ncomm"] == C  # checked after every challenge: not one more
    asks = [ask for b in fake.batches for _, ask in b]
    assert {ask.agent for ask in asks} == {0}  # the highest prior is the receiver
    assert all(st.pre[ask.sources[0]].key != st.pre[0].key for ask in asks)  # challengers disagree


def test_svr_mad_repeats_draw_fresh_samples_and_unanimous_questions_cost_nothing():
    st = state(["2", "2", "2", "2", "2", "3"], min_ll=[-3, -3, -3, -3, -3, -0.1])
    fake, _ = run("svr_mad", [st], policy=keep_own, challenges=2, accept_after=3)
    asks = [ask for b in fake.batches for _, ask in b]
    # agent 5 is alone against five: challengers 0 and 1 are re-used as fresh samples
    assert all(ask.agent == 5 for ask in asks) and len(asks) == 3
    assert sorted(ask.sample for ask in asks) == [0, 0, 1]
    unanimous = state(["2"] * 6)
    fake, _ = run("svr_mad", [unanimous])
    assert fake.batches == [] and unanimous.outcome.ended_by == "unanimous"


def test_svr_mad_invalid_answers_are_never_receivers_or_challengers():
    st = state([None, "2", "3", None], min_ll=[0.0, -1, -2, 0.0])
    fake, _ = run("svr_mad", [st], policy=adopt_first_source, challenges=2, accept_after=2)
    for _, ask in (p for b in fake.batches for p in b):
        assert ask.agent in (1, 2) and set(ask.sources) <= {1, 2}


# --------------------------------------------------------------------------- templates


def test_templates_mask_boxed_answers_and_umad_gives_everyone_the_same_prompt():
    assert prompts.mask_last_boxed("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "a \\boxed{1} then <answer> end"
    a, b = state(["2", "3"]), state(["2", "3"])
    fa, _ = run("all_to_all", [a], rounds=1, template="umad", mask_peer_boxed=False)
    first, second = (ask.messages[-1]["content"] for _, ask in fa.batches[0])
    assert first == second and "agent 0 response is" in first and "agent 1 response is" in first
    assert "\\boxed{2}" in first and "\\boxed{3}" in first  # unmasked: both boxes stay
    fb, _ = run("all_to_all", [b], rounds=1, template="choi", mask_peer_boxed=True)
    text = fb.batches[0][0][1].messages[-1]["content"]
    assert "<answer>" in text and "\\boxed{2}" in text  # the peer's box is masked, the agent's own is not


# The UMAD authors' code (qiaodan-cuhk/UMAD, marl/runners/multi_turn_traj_grpo.py), the lines the
# `umad` template follows:
#   rollout_traj_grpo:
#     responses_text = [f"agent {agent_idx} response is: {t}" for t in texts]
#     texts = [agent_batchs['agent_0'].non_tensor_batch['prompt'][i][0]['content'] ...]
#     original_prompts = [self.remove_template(t) for t in texts]
#     new_prompts = self.merge_prompt_response(original_prompts, all_agent_responses_text, template=None, turn_idx=turn_idx)
#     new_prompt_messages = [[{"role": "user", "content": p}] for p in new_prompts]
#   merge_prompt_response:
#     instruction_following = 'Let\'s think step by step and output the final answer within \\boxed{}.'
#     template = "Given the following problem: {original_prompt} \\n We have two answers: \\n {responses} \\n
#       Please carefully review these answers and recognize which one is right. If one or all of them are right,
#       please summarize the reasoning process of right ones and give the final answer. If both of them are wrong,
#       please correct their mistakes and provide a novel and complete solution to the problem and give the final
#       answer. {instruction_following}"
#     cleaned_response = self.clean_response_for_next_turn(response, dataset_type=...("dataset_type", "math"))
#     responses_text = "\\n".join(clean_responses.values())        # (ego_id is None)
#   _replace_boxed_with_answer (clean_response_for_next_turn, "math"):
#     idx = string.rfind("\\boxed") ... boxed_content = string[idx : right_brace_idx + 1]
#     return string.replace(boxed_content, "<answer>")
UMAD_AUTHORS_INSTRUCTION = (
    "Please carefully review these answers and recognize which one is right. If one or all of them are right, "
    "please summarize the reasoning process of right ones and give the final answer. If both of them are wrong, "
    "please correct their mistakes and provide a novel and complete solution to the problem and give the final answer."
)


def test_umad_mask_is_the_authors_replace_boxed_with_answer():
    """`_replace_boxed_with_answer`: the last \\boxed (else \\fbox) with its brace-matched argument,
    every copy of that text replaced (`str.replace`); a bare "\\boxed 5" runs to the next "$"; an
    unclosed box stays."""
    mask = prompts.umad_mask_answer
    assert mask("so \\boxed{3} then \\boxed{\\frac{1}{2}} end") == "so \\boxed{3} then <answer> end"
    assert mask("first \\boxed{2}, again \\boxed{2}") == "first <answer>, again <answer>"  # str.replace: both
    assert mask("it is $\\boxed 5$.") == "it is $<answer>$."
    assert mask("an \\fbox{7} here") == "an <answer> here"
    assert mask("cut off \\boxed{\\frac{1}{") == "cut off \\boxed{\\frac{1}{"
    assert mask("no box") == "no box"


def test_umad_template_is_the_authors_merge_prompt_response():
    """Round 1 of a two-agent `template: umad` debate sends both agents the one user turn the
    authors' `merge_prompt_response` builds (lines quoted above): the question without its
    instruction, then each agent's previous reply labelled "agent k response is: ", its last box
    masked (the agent's own too), joined by a newline, then their closing sentence."""
    st = state(["2", "3"])
    parts = [Participant(i, f"a{i}", "a", "m", "", SamplingParams()) for i in range(2)]
    st = QuestionState(row=st.row, thread=0, participants=parts, pre=st.pre, seed=0)
    st.pre[0].response = "1+1 = 2, so the answer is $\\boxed{2}$."
    st.pre[1].response = "I get \\boxed{3} at first, but recheck: \\boxed{\\frac{4}{2}}"
    fake, _ = run("all_to_all", [st], rounds=1, template="umad", mask_peer_boxed=True)
    responses = (
        "agent 0 response is: 1+1 = 2, so the answer is $<answer>$."
        + "\n"
        + "agent 1 response is: I get \\boxed{3} at first, but recheck: <answer>"
    )
    expected = (
        "Given the following problem: What is 1+1? \n We have two answers: \n "
        + responses
        + " \n "
        + UMAD_AUTHORS_INSTRUCTION
        + " Let's think step by step and output the final answer within \\boxed{}."
    )
    asks = [ask for _, ask in fake.batches[0]]
    assert [ask.agent for ask in asks] == [0, 1]
    for ask in asks:  # no system prompt of ours (""): the authors' [{"role": "user", "content": p}]
        assert list(ask.messages) == [{"role": "user", "content": expected}], ask.agent
    with pytest.raises(ValueError, match="two"):
        run("all_to_all", [state(["2", "3", "4"])], rounds=1, template="umad")


def test_null_messages_blank_every_content_slot():
    st = state(["17", "23"])
    fake, _ = run("all_to_all", [st], rounds=1, template="pairwise")
    ask = fake.batches[0][0][1]
    null_text = " ".join(m["content"] for m in ask.null_messages)
    assert "N/A" in null_text and "17" not in null_text and "23" not in null_text and "1+1" not in null_text


@pytest.mark.parametrize(
    "task_type, choices, labels, expected",
    [
        ("multiple_choice", ["x", "y", "z", "w", "v"], None, 5),
        ("yes_no", None, None, 2),
        ("label", None, ["against", "support", "neutral"], 3),
        ("math", None, None, None),
    ],
)
def test_n_options_is_the_answer_set_size(task_type, choices, labels, expected):
    s = state(["2", "2"])
    s.row = {**s.row, "task_type": task_type}
    s.choices, s.labels = choices, labels
    assert s.n_options == expected


SQRT2_HALF, ONE_OVER_SQRT2 = "\\frac{\\sqrt2}{2}", "\\frac{1}{\\sqrt2}"  # the same number, different strings


def test_svr_mad_counts_an_equivalent_restatement_as_keeping_the_answer():
    # Agents 0 and 2 hold the same answer written two ways; agents 1 and 3 say 3. Receiver 0 (highest
    # prior) restates its answer as 1/sqrt2 in every debate: SVR +1 each time, so C = 2 accepts it.
    # By string it would be a change of mind (SVR -1) and agent 2 a disagreeing challenger.
    st = state([SQRT2_HALF, "3", ONE_OVER_SQRT2, "3"], min_ll=[-0.1, -2, -1, -3], gold="x")
    restate = lambda s, ask: ONE_OVER_SQRT2 if ask.agent == 0 else keep_own(s, ask)  # noqa: E731
    fake, _ = run("svr_mad", [st], policy=restate, challenges=2, accept_after=2)
    asks = [ask for b in fake.batches for _, ask in b]
    assert [(ask.sources[0], ask.agent) for ask in asks] == [(1, 0), (3, 0)]  # only the "3" agents challenge
    assert st.outcome.ended_by == "acceptance" and st.outcome.final_answer == SQRT2_HALF
    assert accounting(st)["ncomm"] == 2


def test_svr_mad_clusters_and_fallback_votes_by_equivalence():
    # Equivalent strings are one cluster: a question whose answers only differ in form is unanimous.
    same = state([SQRT2_HALF, ONE_OVER_SQRT2, SQRT2_HALF])
    fake, _ = run("svr_mad", [same])
    assert fake.batches == [] and same.outcome.ended_by == "unanimous"
    # Everyone keeps its answer and C = 10 is never reached: the fallback votes the pre-debate
    # answers. By equivalence sqrt2/2 has 3 votes against 2 for 3; by string it would be a 2-2 tie
    # of 3 and sqrt2/2 that the first agent's 3 wins.
    st = state(["3", "3", SQRT2_HALF, ONE_OVER_SQRT2, SQRT2_HALF])
    run("svr_mad", [st], policy=keep_own, challenges=1, accept_after=10)
    assert st.outcome.ended_by == "fallback" and st.outcome.final_answer == SQRT2_HALF


# --------------------------------------------------------------------------- one equivalence for every protocol

# The same answer written two ways: canonical keys differ, the grader's math equivalence merges them.
POW, POW_BARE = "2^{n}-1", "2^n-1"
BASELINES = [
    ("all_to_all", {}),
    ("group_debate", {"group_size": 3}),
    ("sid_et", {"skip_rate": 0.0}),  # every contested question debates
    ("s2_mad", {}),
]


def scripted(answers_by_agent):
    return lambda s, ask: answers_by_agent[ask.agent]


def test_every_protocol_compares_answers_through_the_one_grading_implementation():
    from debatelab.grading import AnswerClasses

    st = state([POW, POW_BARE, "3", SQRT2_HALF, ONE_OVER_SQRT2])
    assert isinstance(st.classes, AnswerClasses)
    keys = [t.key for t in st.pre]
    assert keys[0] != keys[1] and keys[3] != keys[4]  # canonical keys alone would split them
    assert [st.classes(k) for k in keys] == answer_keys(
        [t.answer for t in st.pre], task_type="math", merge_equivalent=True
    )
    assert st.classes(keys[1]) == st.classes(keys[0]) and st.classes(keys[4]) == st.classes(keys[3])


def test_self_consistency_votes_by_answer_class():
    # Pre-debate 3, 3, 2^{n}-1, 2^n-1, 2^{n}-1: by string 3 and 2^{n}-1 tie at 2 and the first agent's
    # 3 wins; by class 2^{n}-1 has 3 votes (the protocol's answer and the stage's pre_majority).
    from debatelab.debate.stage import result_frames

    st = state(["3", "3", POW, POW_BARE, POW])
    protocol = make_protocol("sc", {"kind": "self_consistency"})
    protocol.prepare([st])
    run_engine([st], protocol.run, Scripted(keep_own))
    assert st.outcome.final_answer == POW
    _, questions = result_frames([st], "d", protocol)
    assert questions["pre_majority"].tolist() == [POW]


@pytest.mark.parametrize("kind, options", BASELINES)
def test_baselines_final_vote_counts_equivalent_forms_as_one_answer(kind, options):
    # After the debate: 3, 3, 2^{n}-1, 2^n-1, 2^{n}-1, 7. By string 3 and 2^{n}-1 tie at 2 and the
    # first agent's 3 wins; by class 2^{n}-1 has 3 votes.
    st = state(["1", "2", "3", "4", "5", "6"])
    run(kind, [st], policy=scripted(["3", "3", POW, POW_BARE, POW, "7"]), rounds=1, **options)
    assert st.outcome.ended_by == "rounds" and st.outcome.final_answer == POW


@pytest.mark.parametrize("kind, options", BASELINES)
def test_baselines_early_stop_counts_equivalent_forms_as_agreeing(kind, options):
    # "≥ 5 agree" after round 1: five agents hold 2^{n}-1 in two spellings, one says 3. By string the
    # largest agreement is 3 and the debate goes on to round 2.
    st = state(["1", "2", "3", "4", "5", "6"])
    policy = scripted([POW, POW_BARE, POW, POW_BARE, POW, "3"])
    run(kind, [st], policy=policy, rounds=2, early_stop_agree=5, **options)
    assert st.outcome.ended_by == "consensus" and st.outcome.rounds_used == 1
    assert st.outcome.final_answer == POW


def test_s2_mad_prunes_links_between_equivalent_forms():
    # Agents 0 and 1 hold one answer written two ways, 2 and 3 hold 3: every agent hears only the two
    # agents of the other answer (8 links; by string agents 0 and 1 would hear each other too: 10).
    st = state([POW, POW_BARE, "3", "3"])
    fake, _ = run("s2_mad", [st], rounds=1)
    sources = {ask.agent: set(ask.sources) for _, ask in fake.batches[0]}
    assert sources == {0: {2, 3}, 1: {2, 3}, 2: {0, 1}, 3: {0, 1}}
    assert accounting(st)["ncomm"] == 8
    # once everyone holds the answer in either form, nobody has a differing peer: no call in round 2
    agree = state([POW, "3", "3"])
    fake, _ = run("s2_mad", [agree], policy=scripted([POW_BARE, POW, POW_BARE]), rounds=2)
    assert len(fake.batches) == 1 and agree.outcome.ended_by == "consensus"
    # and a question whose pre-debate answers differ only in form never debates
    same = state([POW, POW_BARE, POW])
    fake, _ = run("s2_mad", [same], rounds=2)
    assert fake.batches == [] and same.outcome.final_answer == POW
