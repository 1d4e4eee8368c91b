"""The bundled micro model (`debatelab.micro`): its task, teacher, corpus and tokenizer, and the bugs
the learning test injects (the shipped build: tests/test_micro_shipped.py)."""

from __future__ import annotations

import numpy as np
import pytest

from debatelab import prompts
from debatelab.micro.task import Chain, parse_chain, parse_solution, render_steps, solve
from debatelab.micro.teacher import CAREFUL, CHECK, COPY, RESOLVE, Teacher, TeacherSettings, shown_solutions
from debatelab.prompts.debate import MASKED
from debatelab.testbed import corpus

QUESTION = "State the final answer to the following arithmetic problem: 4 - 1 - 7 + 7 ="


def rows(n: int, split: str = "train") -> list[dict]:
    from debatelab.data.registry import load_benchmark

    return load_benchmark("chain_sum_long", split, source="offline", limit=n, seed=0).to_dict("records")


def test_a_chain_is_parsed_from_the_question_and_solved_step_by_step():
    chain = parse_chain(QUESTION)
    assert chain == Chain(4, ((-1, 1), (-1, 7), (1, 7))) and chain.value == 3
    text = render_steps(solve(chain, np.random.default_rng(0), slip=0.0))
    assert text == "4 - 1 - 7 + 7 = 3 - 7 + 7 = -4 + 7 = 3. The answer is \\boxed{3}."
    assert parse_solution(text.split(".")[0]) == solve(chain, np.random.default_rng(0), slip=0.0)


def test_slips_are_one_or_two_off_and_later_steps_go_on_from_them():
    chain = parse_chain(QUESTION)
    rng = np.random.default_rng(1)
    offs = []
    for _ in range(2000):
        steps = solve(chain, rng, slip=0.3)
        for before, after in zip(steps, steps[1:]):
            assert after.total == before.result  # the next step starts where the slip left it
        offs += [s.result - (s.total + s.sign * s.term) for s in steps]
    offs = np.array(offs)
    assert set(np.unique(offs)) == {-2, -1, 0, 1, 2}
    assert abs(np.mean(offs != 0) - 0.3) < 0.02


def test_the_teacher_copies_only_solutions_it_is_shown_and_checks_more_carefully():
    chain = parse_chain(QUESTION)
    shown = render_steps(solve(chain, np.random.default_rng(5), slip=1.0))  # every step slipped
    teacher = Teacher(TeacherSettings(copy_share=1.0, resolve_share=0.0))
    reply = teacher.debate_reply(chain, f"One agent solution: ```{shown}```", np.random.default_rng(0))
    assert reply == COPY + shown
    assert shown_solutions(f"x {shown} y") == [parse_solution(shown.split(".")[0])]
    # nothing to copy: it solves again
    assert (
        not Teacher(TeacherSettings(copy_share=1.0, resolve_share=0.0))
        .debate_reply(chain, "no solutions here", np.random.default_rng(0))
        .startswith(COPY)
    )
    rng = np.random.default_rng(2)
    checked = Teacher(TeacherSettings(copy_share=0.0, resolve_share=0.0))
    resolved = Teacher(TeacherSettings(copy_share=0.0, resolve_share=1.0))
    right = lambda text: text.endswith(f"\\boxed{{{chain.value}}}.")  # noqa: E731
    check = [checked.debate_reply(chain, "", rng) for _ in range(400)]
    again = [resolved.debate_reply(chain, "", rng) for _ in range(400)]
    assert all(t.startswith(CHECK) for t in check) and all(t.startswith(RESOLVE) for t in again)
    assert np.mean([right(t) for t in check]) > np.mean([right(t) for t in again]) + 0.3


def test_first_answers_open_carefully_at_the_set_share():
    teacher = Teacher(TeacherSettings(careful_share=0.25))
    rng = np.random.default_rng(3)
    chain = parse_chain(QUESTION)
    share = np.mean([teacher.first_answer(chain, rng).startswith(CAREFUL) for _ in range(2000)])
    assert abs(share - 0.25) < 0.03


def test_a_guess_gives_the_answer_without_working_and_is_never_right():
    teacher = Teacher(TeacherSettings(careful_share=0.1, guess_share=0.4))
    rng = np.random.default_rng(4)
    chain = parse_chain(QUESTION)
    replies = [teacher.first_answer(chain, rng) for _ in range(2000)]
    guesses = [t for t in replies if not t.startswith(CAREFUL) and "=" not in t]
    assert abs(len(guesses) / 2000 - 0.4) < 0.03
    values = [int(t.split("boxed{")[1].split("}")[0]) for t in guesses]
    assert {abs(v - chain.value) for v in values} == {1, 2, 3, 4, 5}
    with pytest.raises(ValueError, match="guess_share"):
        TeacherSettings(careful_share=0.7, guess_share=0.4)


def test_a_hasty_reply_misreads_one_operator_at_the_set_share_and_a_careful_one_never():
    chain = parse_chain(QUESTION)
    teacher = Teacher(TeacherSettings(careful_share=0.3, hasty_slip=0.0, careful_slip=0.0, hasty_misread=0.5))
    rng = np.random.default_rng(6)
    replies = [teacher.first_answer(chain, rng) for _ in range(4000)]
    copied = {t: parse_solution(t.removeprefix(CAREFUL).split(".")[0]) for t in replies}

    def flipped(steps) -> int:  # operators read the wrong way round
        return sum(s.sign != sign for s, (sign, _) in zip(steps, chain.rest))

    careful = [t for t in replies if t.startswith(CAREFUL)]
    hasty = [t for t in replies if not t.startswith(CAREFUL)]
    assert all(copied[t][0].total == chain.first and flipped(copied[t]) == 0 for t in careful)
    assert {flipped(copied[t]) for t in hasty} == {0, 1}  # one operator at most
    assert abs(np.mean([flipped(copied[t]) for t in hasty]) - 0.5) < 0.03
    # a misread chain is solved as read: never the question's answer here (no term is 0)
    assert not any(flipped(copied[t]) and t.endswith(f"\\boxed{{{chain.value}}}.") for t in hasty)
    # solving again in a debate is hasty too; checking is careful
    again = Teacher(TeacherSettings(copy_share=0.0, resolve_share=1.0, hasty_slip=0.0, hasty_misread=1.0))
    assert all(
        flipped(parse_solution(again.debate_reply(chain, "", rng).removeprefix(RESOLVE).split(".")[0])) == 1
        for _ in range(50)
    )
    # no draw when misreads are off: a recipe without them renders the corpus it always did
    plain, off = Teacher(TeacherSettings()), Teacher(TeacherSettings(hasty_misread=0.0))
    a, b = np.random.default_rng(7), np.random.default_rng(7)
    assert [plain.first_answer(chain, a) for _ in range(50)] == [off.first_answer(chain, b) for _ in range(50)]


def test_the_corpus_holds_every_protocol_and_template_as_the_engine_renders_them():
    examples = corpus.build_corpus(
        rows(600),
        Teacher(TeacherSettings()),
        0,
        {"zero_shot": 0.2, "debate": 0.7, "self_debate": 0.05, "confidence": 0.05},
    )
    formats = {e["format"].removesuffix("_confidence") for e in examples}  # a rated turn is in its rating's
    assert {f.name for f in corpus.DEBATE_FORMATS} <= formats
    assert {"zero_shot", "sdrl_two_turn", "sdrl_one_message", "confidence"} <= formats
    from debatelab.debate.protocols import PROTOCOLS

    kinds = {f.options["kind"] for f in corpus.DEBATE_FORMATS}
    assert kinds == set(PROTOCOLS) - {"self_consistency"}  # the one kind that asks nothing
    templates = {f.options.get("template", "du") for f in corpus.DEBATE_FORMATS}
    assert templates == set(prompts.TEMPLATES)
    # the prompts are the builders' own: a umad turn is the authors' template with both replies masked
    umad = next(e for e in examples if e["format"] == "umad")
    assert umad["prompt"][-1]["content"].startswith("Given the following problem:")
    assert umad["prompt"][-1]["content"].count(MASKED) == 2
    # no example's conversation begins another's (du's earlier rounds are inside its last)
    keys = [tuple((m["role"], m["content"]) for m in corpus.conversation(e)) for e in examples]
    assert len(set(keys)) == len(keys)
    assert not any(k[: len(j)] == j for k in keys[:300] for j in keys[:300] if len(j) < len(k))


def test_the_tokenizer_makes_each_number_one_token_and_renders_the_chat_template():
    from debatelab.micro.tokenizer import EOS, fit_tokenizer

    solution = render_steps(solve(parse_chain(QUESTION), np.random.default_rng(0), 0.0))
    tokenizer = fit_tokenizer([QUESTION, solution] * 20, 400)
    text = "-42 + 7 = -35. The answer is \\boxed{-35}."
    pieces = [tokenizer.decode([i]) for i in tokenizer(text)["input_ids"]]
    assert "42" in pieces and "35" in pieces and "4" not in pieces  # a number is one token, not its digits
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": solution}]
    rendered = tokenizer.apply_chat_template(
        messages, tokenize=True, return_assistant_tokens_mask=True, return_dict=True
    )
    reply = [t for t, m in zip(rendered["input_ids"], rendered["assistant_masks"]) if m]
    assert tokenizer.decode(reply) == solution + EOS  # the supervised loss sees the reply and its end only


def test_the_injected_bugs_change_what_the_trainers_compute_and_are_undone_on_exit():
    """`learning.sabotaged`: the broken trainers the learning test must catch."""
    import torch

    from debatelab.debate import protocols
    from debatelab.testbed.learning import sabotaged
    from debatelab.training.core import loss

    logprobs = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    old, mask, advantages = logprobs.detach() - 0.1, torch.ones(2, 2), torch.tensor([1.0, -0.5])
    before = loss.policy_loss(logprobs, old, advantages, mask).loss
    with sabotaged("flipped_advantages"):
        flipped = loss.policy_loss(logprobs, old, advantages, mask).loss
    assert float(flipped) == float(loss.policy_loss(logprobs, old, -advantages, mask).loss) != float(before)
    assert float(loss.policy_loss(logprobs, old, advantages, mask).loss) == float(before)  # restored

    turn = type("Turn", (), {})
    current = {0: turn(), 1: turn()}
    current[0].response, current[0].answer = "my steps", "1"
    current[1].response, current[1].answer = "the peer's steps", "2"
    original = protocols.RoundDebate.peer_views
    with sabotaged("no_peers"):
        views = protocols.RoundDebate.peer_views(None, None, 0, 1, current, [1], [])
        assert [(v.response, v.answer) for v in views] == [("", None)]
        row = rows(1)[0]
        shown = prompts.self_debate_messages(row, None, "FIRST-REPLY", "SECOND-REPLY")
        assert "FIRST-REPLY" in str(shown) and "SECOND-REPLY" not in str(shown)
    assert protocols.RoundDebate.peer_views is original


def test_a_recipe_refuses_a_question_pool_below_one():
    from debatelab.micro.recipe import MicroRecipe

    with pytest.raises(ValueError, match="question_pool"):
        MicroRecipe(question_pool=0)
    assert MicroRecipe(question_pool=None).question_pool is None


def test_a_reply_s_reading_of_the_question_is_named():
    from debatelab.testbed.evaluate import reading

    assert reading("4 - 1 - 7 + 7 = 3 - 7 + 7 = -4 + 7 = 3. The answer is \\boxed{3}.", QUESTION) == "read"
    assert (
        reading(CAREFUL + "4 - 1 + 7 + 7 = 3 + 7 + 7 = 10 + 7 = 17. The answer is \\boxed{17}.", QUESTION) == "misread"
    )
    assert reading("4 - 17 + 7 = -13 + 7 = -6. The answer is \\boxed{-6}.", QUESTION) == "miscopied"
    assert reading("5 - 1 - 7 + 7 = 4 - 7 + 7 = -3 + 7 = 4. The answer is \\boxed{4}.", QUESTION) == "miscopied"
    assert reading("The answer is \\boxed{3}.", QUESTION) == "unparsed"
    assert reading("4 - 1 - 7 + 7 = 3", "no chain here") == "unparsed"
