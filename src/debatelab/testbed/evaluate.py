"""The micro model's accuracy per format, on validation questions it never saw in training.

Each format's prompts are rendered as the corpus renders them (`testbed.corpus`), the teacher writing
the earlier replies a debate turn shows; the model answers through the workflow's transformers
backend at temperature 1 (the teacher's own distribution), and its reply is graded by the workflow's
grader. Reported per format: right / n with the exact (Clopper-Pearson) 95 % interval, the teacher's
own accuracy on the same prompts, replies cut at the budget, and how the replies open (careful,
hasty, copying, ...): what the trainers start from.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from ..micro.recipe import MICRO_RECIPE, MicroRecipe
from ..micro.task import parse_chain, parse_solution
from ..micro.teacher import ADOPT, CAREFUL, CHECK, COPY, RESOLVE, Teacher
from ..prompts.questions import FINAL_ANSWER_TEMPLATES

#: Formats measured: the first answer and one debate turn of each template and training format.
EVALUATED_FORMATS = ("zero_shot", "du_3", "umad", "choi_2", "pairwise", "group_debate_6", "sdrl_two_turn")
#: Replies are cut here: the learning experiments' budget.
MAX_TOKENS = 64


def opening(text: str) -> str:
    """How a reply opens: careful, check, resolve, copy, adopt, guess (the answer without working),
    hasty (straight into the steps), other."""
    for name, opener in (
        ("careful", CAREFUL),
        ("check", CHECK),
        ("resolve", RESOLVE),
        ("copy", COPY),
        ("adopt", ADOPT),
        ("guess", FINAL_ANSWER_TEMPLATES["math"].split("{")[0]),
    ):
        if text.startswith(opener.strip()):
            return name
    return "hasty" if text[:1].isdigit() or text[:1] == "-" else "other"


def reading(text: str, question: str) -> str:
    """How a reply copied the question's chain: read (as written), misread (the terms, one or more
    operators the wrong way round: the teacher's hasty error), miscopied (terms changed or dropped),
    unparsed (no step-by-step solution: a guess, a copy of an answer, a cut reply)."""
    chain = parse_chain(question)
    for opener in (CAREFUL, CHECK, RESOLVE, COPY):
        text = text.removeprefix(opener)
    steps = parse_solution(text.split(". The")[0]) if chain is not None else None
    if not steps:
        return "unparsed"
    if steps[0].total != chain.first or [s.term for s in steps] != [t for _, t in chain.rest]:
        return "miscopied"
    return "read" if [s.sign for s in steps] == [sign for sign, _ in chain.rest] else "misread"


def reply_kinds(replies: list[str], questions: list[str], rights: list[bool]) -> dict[str, str]:
    """{"opening/reading": "right/n"} over the replies (`opening`, `reading`): what a policy does."""
    n, right = Counter(), Counter()
    for text, question, ok in zip(replies, questions, rights):
        key = f"{opening(text)}/{reading(text, question)}"
        n[key] += 1
        right[key] += int(ok)
    return {key: f"{right[key]}/{n[key]}" for key in sorted(n)}


def format_prompts(rows: list[dict], teacher: Teacher, seed: int) -> dict[str, list[dict]]:
    """Examples (prompt, gold answer, the teacher's own reply) of every evaluated format; each
    format draws on its own questions."""
    from . import corpus

    rng = np.random.default_rng(seed)
    chunks = np.array_split(np.arange(len(rows)), len(EVALUATED_FORMATS))
    by_name = {f.name: f for f in corpus.DEBATE_FORMATS}
    out = {}
    for name, chunk in zip(EVALUATED_FORMATS, chunks):
        part = [rows[i] for i in chunk]
        if name == "zero_shot":
            out[name] = [e for e in corpus.first_answers(part, teacher, rng)]
        elif name == "sdrl_two_turn":
            out[name] = [e for e in corpus.self_debates(part, teacher, rng, styles=("two_turn",))]
        else:
            f = by_name[name]
            examples = corpus.debates(part, teacher, rng, f.name, {**f.options, "rounds": 1}, f.seats, seed=seed)
            out[name] = [e for e in examples if e["answer"] is not None]
    return out


def format_accuracy(
    model_dir: str | Path,
    *,
    questions: int = 200,
    seed: int = 0,
    temperature: float = 1.0,
    backend=None,
    recipe: MicroRecipe = MICRO_RECIPE,
) -> dict:
    """{format: {n, right, accuracy, low, high, teacher, cut, openings, right_by_opening}} on `questions` validation
    questions a format (zero-shot prompts with the attack system prompt left out: agents are honest) of
    the `recipe`'s benchmark; the earlier turns a debate shows are written by the recipe's teacher,
    whose own accuracy is reported beside the model's."""
    from ..data.registry import load_benchmark
    from ..grading import extract_answer, is_correct
    from ..intervals import proportion
    from ..llm import GenerationRequest, SamplingParams
    from ..llm.transformers_backend import TransformersBackend
    from ..prompts import ATTACK_SYSTEM_PROMPT

    frame = load_benchmark(
        recipe.benchmark,
        "validation",
        source="offline",
        limit=questions * len(EVALUATED_FORMATS),
        seed=seed,
    )
    teacher = Teacher(recipe.teacher)
    sets = format_prompts(frame.to_dict("records"), teacher, seed)
    backend = backend or TransformersBackend(model_dir, device="cpu", batch_size=64)
    out = {}
    for name, examples in sets.items():
        examples = [e for e in examples if all(m["content"] != ATTACK_SYSTEM_PROMPT for m in e["prompt"])][:questions]
        requests = [
            GenerationRequest(
                messages=e["prompt"],
                sampling=SamplingParams(temperature=temperature, max_tokens=MAX_TOKENS, seed=seed + i),
            )
            for i, e in enumerate(examples)
        ]
        generations = [g[0] for g in backend.generate(requests)]
        rights = [
            is_correct(extract_answer(g.text, "math"), e["answer"], "math") for g, e in zip(generations, examples)
        ]
        right = sum(rights)
        by_opening = Counter()
        for g, ok in zip(generations, rights):
            by_opening[opening(g.text)] += int(ok)
        taught = sum(is_correct(extract_answer(e["completion"], "math"), e["answer"], "math") for e in examples)
        estimate = proportion(right, len(examples))
        out[name] = {
            "n": len(examples),
            "right": int(right),
            "accuracy": round(estimate.value, 4),
            "low": round(estimate.low, 4),
            "high": round(estimate.high, 4),
            "teacher": round(taught / max(len(examples), 1), 4),
            "cut": sum(g.finish_reason == "length" for g in generations),
            "openings": dict(Counter(opening(g.text) for g in generations).most_common()),
            "right_by_opening": dict(by_opening),
        }
    return out
