"""Grade 10,000 adversarial replies under every task type and print exceptions and time per reply.

The grader's contract (`debatelab.grading.answers`): nothing raises on model text, every answer is None
or a string, and grading stays bounded in time. This draws replies from fragments that stress the
parsers (unbalanced boxes, LaTeX, cues, separators, unicode, huge runs), grades each one as every task
type, and compares each with a gold answer, as `tests/test_grading.py` does on a few hundred.

    python benchmarks/grading_fuzz.py                 # 10,000 replies, seed 0
    python benchmarks/grading_fuzz.py --replies 500 --seed 1
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import traceback

from debatelab.grading import TASK_TYPES, answers_equivalent, extract_answer, extract_confidence, is_correct

FRAGMENTS = [
    "\\boxed{", "\\boxed ", "\\fbox{", "{", "}", "\\{", "\\}", "$", "$$", "\\(", "\\)", "\\[", "\\]", "\\",
    "\\frac", "\\dfrac", "\\sqrt", "\\text{", "\\left(", "\\right)", "\\pi", "\\infty", "\\cup", "^{", "_",
    "Answer:", "The answer is", "final answer is", "answer is (", "####", "(B)", "**", "A ", "I ", "option ",
    "1,000", "1 000", "0.5", "-", "1/2", "!", "=", "%", "\\%", "x", "k = ", "meters", "(1, 2)", "[0,1)",
    "yes", "no", "support", "none", "Confidence:", "10", "15", "7", "\n", " ", "é", "😀", "\x00",
]  # fmt: skip
GOLDS = ["5", "\\frac{1}{3}", "(1, 2)", "\\sqrt{2}", "[0, 1)", "28\\%", "1,2", "x + 1"]
CHOICES = ["London", "Paris", "Rome", "Berlin"]
STANCE = ["against", "support", "neutral"]


def random_reply(rng: random.Random) -> str:
    """One reply: mostly fragment soup, sometimes random characters, sometimes a huge repeated run."""
    kind = rng.random()
    if kind < 0.7:
        return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 80)))
    if kind < 0.95:
        return "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 300)))
    return rng.choice(FRAGMENTS) * rng.randint(1_000, 20_000)


def grade_everything(text: str, gold: str) -> None:
    """Every public grading call on `text`; raises AssertionError where the contract breaks."""
    for task in TASK_TYPES:
        for kwargs in ({}, {"choices": CHOICES, "labels": STANCE}):
            answer = extract_answer(text, task, **kwargs)
            assert answer is None or isinstance(answer, str), (task, answer)
        assert is_correct(text, gold, task) in (True, False)
        assert answers_equivalent(text, gold, task) == answers_equivalent(gold, text, task)
    confidence = extract_confidence(text)
    assert confidence is None or 0.0 <= confidence <= 10.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replies", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    extract_answer("\\boxed{\\frac{1}{2}}", "math")  # import math-verify (sympy) outside the timing
    seconds, failures = [], []
    for index in range(args.replies):
        text, gold = random_reply(rng), rng.choice(GOLDS)
        start = time.perf_counter()
        try:
            grade_everything(text, gold)
        except Exception:  # noqa: BLE001 (counted and shown: that is the benchmark's point)
            failures.append((index, text[:120], traceback.format_exc(limit=3)))
        seconds.append(time.perf_counter() - start)
    seconds.sort()
    print(f"replies: {args.replies} (seed {args.seed}); exceptions or broken contracts: {len(failures)}")
    print(
        f"seconds per reply (all task types): median {statistics.median(seconds):.4f}, "
        f"99th percentile {seconds[int(0.99 * (len(seconds) - 1))]:.4f}, worst {seconds[-1]:.3f}, "
        f"total {sum(seconds):.1f}"
    )
    for index, head, trace in failures[:5]:
        print(f"\nreply {index}: {head!r}\n{trace}")


if __name__ == "__main__":
    main()
