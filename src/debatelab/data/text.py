"""Small text helpers the source normalisers share: GSM8K answers, lettered options, numbers
(boxed answers come from `debatelab.grading.last_boxed`, the one parser of them)."""
from __future__ import annotations

import re


def gsm8k_final_answer(solution: str) -> str | None:
    """The GSM8K gold answer: the text after the last ``####``, commas removed."""
    if "####" not in solution:
        return None
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    return answer or None


_OPTION_START = re.compile(r"(?:^|\n)[ \t]*([A-Z])[.)][ \t]+")


def split_lettered_options(text: str) -> tuple[str, list[str]] | None:
    """Split ``"stem\\nA. x\\nB. y"`` into ``("stem", ["x", "y"])``.

    Options must start on their own line with consecutive letters from A; an
    option's following lines that start no new option stay part of it. Returns
    None when no option list starting at "A" is found.
    """
    starts = list(_OPTION_START.finditer(text))
    # the option list is the last run A, B, C, ... in the text
    first = None
    for i, m in enumerate(starts):
        if m.group(1) == "A":
            run = starts[i:]
            if all(r.group(1) == chr(ord("A") + k) for k, r in enumerate(run)):
                first = i
                break
    if first is None:
        return None
    run = starts[first:]
    stem = text[: run[0].start()].strip()
    options = []
    for k, m in enumerate(run):
        end = run[k + 1].start() if k + 1 < len(run) else len(text)
        options.append(text[m.end() : end].strip())
    if len(options) < 2 or any(not o for o in options):
        return None
    return stem, options


_LEADING_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:/\d+)?)(?:\s+[A-Za-z][A-Za-z .'\-]*)?\s*$")


def number_with_unit(text: str) -> str | None:
    """``"9 apples"`` -> ``"9"``; ``"2.5 cups of flour"`` -> ``"2.5"``; ``"-1/3"`` -> ``"-1/3"``.

    Anything else (times "3:30", lists "8; 40", ordinals "6th", names) -> None:
    those have no single numeric gold answer.
    """
    m = _LEADING_NUMBER.match(text)
    return m.group(1) if m else None


def number_text(value) -> str:
    """A gold number as text: ints as ints (``27.0`` -> ``"27"``), everything else via ``str``."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()
