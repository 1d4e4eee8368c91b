"""Toy verifiable questions for the training tests: math rows whose gold the random character model
can write (`char_model_dir`), so that rollouts are sometimes right."""

from __future__ import annotations

from collections.abc import Callable


def alternating_gold(i: int) -> str:
    """0, 2, 0, 2, ...: digits the random character model often writes, so that some groups have mixed rewards."""
    return str(i % 2 * 2)


def toy_rows(
    count: int,
    gold: str | Callable[[int], str] = "7",
    wording: str = "question {i}: answer {gold}.",
    prefix: str = "q",
) -> list[dict]:
    """`count` math rows with ids `<prefix>0`, `<prefix>1`, ...: `wording` formatted with the row's
    index `i`, its `id` and its `gold` (a string, or a function of the index)."""
    rows = []
    for i in range(count):
        answer = gold(i) if callable(gold) else gold
        rows.append(
            {
                "id": f"{prefix}{i}",
                "question": wording.format(i=i, id=f"{prefix}{i}", gold=answer),
                "choices": None,
                "answer": answer,
                "task_type": "math",
                "meta": {"source": "toy"},
            }
        )
    return rows
