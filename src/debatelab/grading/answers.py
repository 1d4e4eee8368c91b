"""Answer extraction and grading for every task type.

One package decides what an agent answered and whether it is right, so every stage
(zero-shot, debate, uncertainty, RL reward, evaluation) agrees on the same parse.

Contract
- `extract_answer` returns the agent's final answer as a short string, or None when
  nothing answer-like is found. None is always graded wrong and never equals anything.
- Nothing here raises on model text: huge strings, unbalanced braces and stray unicode
  yield None or a string. An unknown `task_type` is a programming error (ValueError).

Math: extraction and equivalence are math-verify's (huggingface/Math-Verify; SDRL App. B grades
MATH500 with it), measured on its own regression cases
(`tests/test_math_verify_cases.py`: 239 of 245 labels, each other one listed with its reason).
- Extraction, in order: (1) a reply with a box: math-verify's `parse` of the boxes
  (`LatexExtractionConfig(boxed_match_priority=0)` + `ExprExtractionConfig`). Boxes next to one
  another ("\\boxed{1}, \\boxed{2}", "\\boxed{(2, 2)} and \\boxed{(6, 2)}": under 10 characters
  apart, or under 70 with ",", ";", "and" or "or" between) are one answer, the list "1,2", which
  math-verify reads as a set: it equals a gold set in any order and a gold tuple in the written
  order, never one of its elements. (2) No box: our cues, which add what math-verify lacks: the
  phrase after "The answer is"/"Answer:" (un-delimited LaTeX such as "\\sqrt{2} meters" or "2x + 1",
  where math-verify reads only the first number), then after GSM8K's "####". (3) math-verify's
  `parse` of the end of the reply ("final answer is", "answer:", $...$, \\(...\\), \\[...\\], bare
  fractions, numbers with separators, currency and percent). (4) The last number, when math-verify
  finds nothing.
- The answer is the string math-verify extracted (its normalised LaTeX, "\\frac{1}{3}", "1,2",
  "28\\%"; a number without separators, "1250.50"), so Parquet columns and votes stay strings.
- Equivalence (`is_correct`, `answers_equivalent`, and so the answer classes, votes and uncertainty
  counts of `votes`): equal canonical strings, then exact numbers (tolerance 1e-6), then
  math-verify's `verify` of the two answers each parsed as a box's content (a gold is a MATH-style
  box content; a gold or prediction that is a whole solution, with $ or a box, has its answer
  extracted first). math-verify is asymmetric (gold first); between agents both orders count.
- Bounded on adversarial text: math-verify's own timeout uses signals, which break outside the main
  thread, so it is off (`parsing_timeout=None`, `timeout_seconds=None`); instead math-verify reads
  at most ~1,000 characters (the last box, if under 400, with 300 on either side, or the reply's last 1,000: its
  regular expressions are cubic in the length and hold the GIL), tries 20 matches per priority,
  compares strings of at most 300 characters without huge powers or factorials, and runs in a
  daemon thread given 5 s.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from collections.abc import Callable
from fractions import Fraction
from typing import TypeVar

#: The task types of the common question schema (`debatelab.data.schema`); each is graded its own way.
TASK_TYPES = ("math", "multiple_choice", "yes_no", "label")

# Labels used when a label task is graded without its label set.
DEFAULT_LABELS = ("against", "support", "neutral", "hateful", "not hateful")

# Synonyms per canonical label (after lowercasing and turning punctuation into spaces).
# Elahi & Di Eugenio, arXiv:2606.13591 App. E: support/supporting/favor → support, none → neutral, yes/no → true/false.
_LABEL_SYNONYMS: dict[str, tuple[str, ...]] = {
    "support": (
        "support",
        "supports",
        "supporting",
        "supported",
        "supportive",
        "favor",
        "favour",
        "favors",
        "favours",
        "in favor",
        "in favour",
        "pro",
    ),
    "against": ("against", "oppose", "opposes", "opposed", "opposing", "opposition"),
    "neutral": ("neutral", "none", "neither", "no stance"),
    # "not hate" must not lose to "hateful": the earliest match wins, and these start earlier.
    "not hateful": ("not hateful", "non hateful", "nonhateful", "not hate", "non hate"),
    "hateful": ("hateful",),
    "true": ("true", "yes"),
    "false": ("false", "no"),
    "yes": ("yes", "true"),
    "no": ("no", "false"),
}

_YES_NO = {"yes": "yes", "true": "yes", "no": "no", "false": "no"}

_PHRASE_CHARS = 200  # how much text after "Answer:" can hold the answer
_MAX_CUES = 100  # answer cues examined per reply (keeps pathological text fast)
_MAX_MATH_VERIFY_CHARS = 300  # longer strings are not answers; sympy time grows fast
_MATH_VERIFY_SECONDS = 5.0
_MAX_BOX_CHARS = 400  # a longer box is not an answer: math-verify does not read it
_BOX_CONTEXT_CHARS = 300  # text kept on either side of the last box for math-verify
_TAIL_CHARS = 1000  # how much of a reply's end math-verify reads when there is no box
_MAX_MATCHES = 20  # math-verify matches tried per priority level
_NUMERIC_TOL = Fraction(1, 10**6)  # [CHOICE] (UDPO's paper gives no parser): float compare, tol 1e-6
_MAX_NUMBER_CHARS = 200  # keep exact rational arithmetic cheap
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DEFAULT_MC_LETTERS = _LETTERS[:10]  # A–J when the choices are unknown


# --------------------------------------------------------------------------- public API


def extract_answer(
    text: str,
    task_type: str,
    *,
    choices: list[str] | None = None,
    labels: list[str] | None = None,
) -> str | None:
    """The final answer stated in a model reply, or None if there is none.

    math → the answer expression (e.g. "18", "\\frac{1}{2}"); multiple_choice → an
    upper-case letter; yes_no → "yes"/"no"; label → an entry of `labels`.
    """
    _check_task(task_type)
    if not isinstance(text, str) or not text.strip():
        return None
    if task_type == "math":
        return _extract_math(text)
    if task_type == "multiple_choice":
        return _extract_choice(text, choices)
    if task_type == "yes_no":
        return _extract_yes_no(text)
    return _extract_label(text, list(labels) if labels else list(DEFAULT_LABELS))


def normalize_answer(answer: str | None, task_type: str) -> str | None:
    """Canonical form of an extracted answer, for votes and equality between agents.

    math: numbers become exact canonical strings ("1/2" → "0.5", "5.0" → "5",
    "1,000" → "1000", "$18" → "18", "1/3" stays "1/3"); other expressions are compacted
    LaTeX. Two math answers with different canonical strings may still be
    `answers_equivalent` (e.g. "\\sqrt{2}/2" vs "\\frac{\\sqrt{2}}{2}").
    """
    _check_task(task_type)
    if not isinstance(answer, str) or not answer.strip():
        return None
    if task_type == "math":
        return _canonical_math(answer)
    if task_type == "multiple_choice":
        return _normalize_letter(answer)
    if task_type == "yes_no":
        return _extract_yes_no(answer)
    return _normalize_label(answer)


def is_correct(prediction: str | None, gold: str, task_type: str, *, labels: list[str] | None = None) -> bool:
    """Whether an extracted prediction matches the gold answer. None is always wrong."""
    _check_task(task_type)
    if not isinstance(prediction, str) or not isinstance(gold, str):
        return False
    if task_type == "math":
        return _math_equal(_gold_math(gold), prediction)
    if task_type == "label":
        pred_key = _label_key(prediction, labels)
        return pred_key is not None and pred_key == _label_key(gold, labels)
    return answers_equivalent(prediction, gold, task_type)


def answers_equivalent(a: str | None, b: str | None, task_type: str) -> bool:
    """Whether two agents gave the same answer. None never equals anything."""
    _check_task(task_type)
    if not isinstance(a, str) or not isinstance(b, str):
        return False
    if task_type == "math":
        return _math_equal(a, b, symmetric=True)
    norm_a = normalize_answer(a, task_type)
    return norm_a is not None and norm_a == normalize_answer(b, task_type)


# A number in a self-report; a leading "-" counts only when it is not a range dash.
_CONF_NUMBER = re.compile(r"(?<![\w.])(-?)(\d+(?:\.\d+)?)(?![\w%])")
# An echo of the scale ("from 0 to 10", "1-10", "out of 10", "/10") is not a rating.
_CONF_SCALE = re.compile(r"(?i)\b[01]\s*(?:to|-|–|and)\s*10\b|(?:out\s+of|scale\s+of|/)\s*10\b")
_CONF_CUE = re.compile(r"(?i)\bconfidence\b")


def extract_confidence(text: str) -> float | None:
    """A 0–10 self-reported confidence (Elahi & Di Eugenio, arXiv:2606.13591 §3.2), unscaled; None if there is none.

    The first number in [0, 10] after a "Confidence" cue, else the first in the text:
    "Confidence: 8" → 8.0, "7/10" → 7.0, "15 ... 8" → 8.0, "eleven" → None. Decimals
    ("7.5") are accepted; negatives, percentages, numbers glued to words ("GPT4") and
    echoes of the scale ("from 0 to 10") are skipped.
    """
    if not isinstance(text, str):
        return None
    text = _CONF_SCALE.sub(" ", text)
    for cue in itertools.islice(_CONF_CUE.finditer(text), _MAX_CUES):
        value = _first_rating(text, cue.end(), cue.end() + _PHRASE_CHARS)
        if value is not None:
            return value
    return _first_rating(text, 0, len(text))


def _first_rating(text: str, start: int, stop: int) -> float | None:
    for match in _CONF_NUMBER.finditer(text, start, stop):
        sign, digits = match.groups()
        if sign or len(digits) > 6:
            continue
        value = float(digits)
        if 0.0 <= value <= 10.0:
            return value
    return None


def _check_task(task_type: str) -> None:
    if task_type not in TASK_TYPES:
        raise ValueError(f"unknown task_type {task_type!r}; expected one of {TASK_TYPES}")


# --------------------------------------------------------------------------- shared pieces

_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOX_BARE = re.compile(r"\\boxed[ \t]+([^\s${}\\]+)")  # "\boxed 5" (Hendrycks handles it)
_BRACE = re.compile(r"(?<!\\)[{}]")  # "\{" is a literal brace in LaTeX
_NON_SPACE = re.compile(r"\S")


def _brace_partners(text: str) -> dict[int, int]:
    """Map each '{' to its matching '}' in one linear pass (no quadratic rescans)."""
    partners: dict[int, int] = {}
    stack: list[int] = []
    for match in _BRACE.finditer(text):
        if match.group() == "{":
            stack.append(match.start())
        elif stack:
            partners[stack.pop()] = match.start()
    return partners


def last_boxed_span(text: str) -> tuple[int, int, int] | None:
    """(box start, content start, content end) of the last complete, non-empty \\boxed{...} /
    \\fbox{...} (braces nested, "\\{" literal) or bare "\\boxed 5"; None if there is none."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return None
    spans: list[tuple[int, int, int]] = []  # (box start, content start, content end)
    opens = list(_BOX_OPEN.finditer(text))
    if opens:
        partners = _brace_partners(text)
        for match in opens:
            brace = match.end() - 1
            if brace in partners:
                spans.append((match.start(), brace + 1, partners[brace]))
    spans.extend((m.start(), m.start(1), m.end(1)) for m in _BOX_BARE.finditer(text))
    # "\boxed{\boxed{5}}": the inner box starts later, so it comes first here.
    for span in sorted(spans, reverse=True):
        if _NON_SPACE.search(text, span[1], span[2]):
            return span
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last complete, non-empty \\boxed{...} / \\fbox{...}, stripped; None if absent."""
    span = last_boxed_span(text)
    # Slice only the winner: slicing every nested box would copy the text quadratically.
    return text[span[1] : span[2]].strip() if span else None


# "Answer: X", "The final answer is X", "**Answer**: X", "answer would be X".
_ANSWER_CUE = re.compile(
    r"(?i)\b(?:answer|stance|label|classification)\b[ \t*]*"
    r"(?:(?:is|would\s+be|should\s+be|will\s+be|must\s+be)\b[ \t:*]*|[:=][ \t*]*)"
)
_GSM_CUE = re.compile(r"####[ \t]*")


def _last_matches(cue: re.Pattern[str], text: str) -> list[re.Match[str]]:
    """The last _MAX_CUES matches: a real reply restates its answer a few times at most."""
    return list(cue.finditer(text))[-_MAX_CUES:]


def _line_from(text: str, start: int) -> tuple[str, int]:
    """Up to _PHRASE_CHARS of the line starting at `start`, and where that line ends (-1: none).

    The cap keeps many cues on one huge line linear instead of quadratic.
    """
    end = text.find("\n", start, start + _PHRASE_CHARS)
    stop = end if end >= 0 else min(len(text), start + _PHRASE_CHARS)
    return text[start:stop], end


def _phrases_after(cue: re.Pattern[str], text: str) -> list[tuple[int, str]]:
    """(position, rest of the line) after each cue; the next line when the cue ends one."""
    phrases = []
    for match in _last_matches(cue, text):
        line, end = _line_from(text, match.end())
        if not line.strip() and end >= 0:
            line, _ = _line_from(text, end + 1)
        phrases.append((match.start(), line))
    return phrases


_MATH_DELIMITED = re.compile(r"^\\[(\[]\s*(.*?)\s*\\[)\]]$", re.DOTALL)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|,\s+(?=[A-Za-z]{2})")


def _clean_phrase(phrase: str) -> str:
    """Trim markdown and the sentence that follows an answer ("18. So Janet...")."""
    phrase = phrase.strip().strip("*`").strip()
    cut = _SENTENCE_END.search(phrase)
    if cut:
        phrase = phrase[: cut.start()]
    phrase = phrase.strip().rstrip(".,;:!?").strip("*`$ \t")
    delimited = _MATH_DELIMITED.match(phrase)  # "\(\frac{1}{2}\)" → "\frac{1}{2}"
    return delimited.group(1) if delimited else phrase


# --------------------------------------------------------------------------- math

_LAST_NUMBER = re.compile(r"(?<![\w.])-?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?(?:/\d+)?")


def _extract_math(text: str) -> str | None:
    """math-verify's answer in the boxes (boxed first), then our "Answer:"/"The answer is" and "####"
    cues, then math-verify's answer in the end of the reply, then the last number (module docstring)."""
    span = last_boxed_span(text)
    if span is not None:
        found = _math_verify_extract(_box_window(text, span)) if span[2] - span[1] <= _MAX_BOX_CHARS else None
        return found or text[span[1] : span[2]].strip()
    for cue in (_ANSWER_CUE, _GSM_CUE):
        for _, phrase in reversed(_phrases_after(cue, text)):
            phrase = _clean_phrase(phrase)
            if _looks_like_math_answer(phrase):
                return _number_from_prose(phrase)
    found = _math_verify_extract(_tail_window(text))
    if found:
        return found
    last = None
    for last in _LAST_NUMBER.finditer(text):  # noqa: B007 (the loop leaves the last match behind)
        pass
    return last.group() if last else None


def _line_start_after(text: str, pos: int, stop: int) -> int:
    """`pos`, moved on to the next line start before `stop` if there is one: an inline $...$ never
    spans lines, so a window that starts on a line start does not start inside one."""
    newline = text.find("\n", pos, stop)
    return pos if pos == 0 or newline < 0 else newline + 1


def _box_window(text: str, span: tuple[int, int, int]) -> str:
    """The last box with the lines around it: enough for math-verify to join the boxes before it
    and see the $...$ around it, short enough that its regular expressions stay fast."""
    start = _line_start_after(text, max(0, span[0] - _BOX_CONTEXT_CHARS), span[0])
    end = min(len(text), span[2] + 1 + _BOX_CONTEXT_CHARS)
    newline = text.rfind("\n", span[2], end)
    return text[start : newline if newline >= 0 else end]


def _tail_window(text: str) -> str:
    """The end of the reply, from a line start: math-verify takes the answer nearest the end."""
    start = max(0, len(text) - _TAIL_CHARS)
    return text[_line_start_after(text, start, len(text)) :]


def _math_verify_extract(window: str) -> str | None:
    """The answer math-verify's `parse` finds in `window` (LaTeX with boxes first, then plain
    expressions and numbers), as the string it extracted; None when nothing matches."""
    mv = _math_verify()
    return _run_with_time_limit(lambda: _first_parsed_match(window, mv), _MATH_VERIFY_SECONDS, default=None)


def _first_parsed_match(text: str, mv: _MathVerify) -> str | None:
    """math-verify's `extract_target_from_pred` (huggingface/Math-Verify, parser.py) with its
    "first_match" fallback: the string of the first match that parses, else of the first match
    (math-verify then compares it as a string). Unlike its `parse`, this returns the string of the
    match that parsed, and tries at most _MAX_MATCHES matches per priority level."""
    patterns = sorted(
        ((pattern, target, priority) for regexes, target in mv.regexes for pattern, priority in regexes),
        key=lambda item: item[2],
    )
    fallback = None
    for _, group in itertools.groupby(patterns, key=lambda item: item[2]):
        matches = [(m, target) for pattern, target, _ in group for m in pattern.finditer(text)]
        # Rightmost end first, then leftmost start, as math-verify orders them.
        matches.sort(key=lambda item: (item[0].end(), -item[0].start()), reverse=True)
        for match, target in matches[:_MAX_MATCHES]:
            parsed, extracted = mv.extract_match(match, target)
            extracted = extracted.strip()
            if parsed is not None and extracted:
                if _has_percent(match) and not extracted.endswith("%"):
                    extracted += "\\%"  # the string loses the "%" its parse kept
                return extracted
            fallback = fallback or extracted or None
    return fallback


def _has_percent(match: re.Match[str]) -> bool:
    return any(value for name, value in match.groupdict().items() if name.endswith("percent"))


#: Words of two or more letters that are prose, not math: not a LaTeX command, not a function
#: call, not glued to a digit ("2x"), not a known constant or function name.
_PROSE_WORD = re.compile(r"(?<![\\\w])([A-Za-z]{2,})(?![\w(])")
_MATH_WORDS = frozenset({"pi", "sqrt", "infty", "inf", "infinity", "sin", "cos", "tan", "log", "ln", "exp"})


def _prose_words(phrase: str) -> list[str]:
    return [w for w in _PROSE_WORD.findall(phrase) if w.lower() not in _MATH_WORDS]


def _number_from_prose(phrase: str) -> str:
    """Drop prose from a cue phrase: trailing units ("3500 balls", "\\sqrt{2} meters"), then a
    working step before the last "=" ("actually 350 * 10 = 3500"); if prose still remains, the last
    number. A phrase of math alone ("x = 5", "2x + 1", "2 pi") is kept as it is."""
    if not any(ch.isdigit() for ch in phrase) and "\\" not in phrase:
        return phrase
    tokens = phrase.split()
    while len(tokens) > 1 and _prose_words(tokens[-1]) == [tokens[-1].rstrip(".,;:!?")]:
        tokens.pop()
    phrase = " ".join(tokens)
    if not _prose_words(phrase):
        return phrase
    tail = phrase.rsplit("=", 1)[-1].strip()
    if tail and not _prose_words(tail):
        return tail
    numbers = list(_LAST_NUMBER.finditer(tail))
    return numbers[-1].group() if numbers else phrase


def _looks_like_math_answer(phrase: str) -> bool:
    """Reject prose after a cue ("the answer is not obvious, so...").

    Without a digit or LaTeX only one short token ("x", "Evelyn", "infinity") counts.
    """
    if not phrase:
        return False
    if any(ch.isdigit() for ch in phrase) or "\\" in phrase:
        return True
    return len(phrase) <= 20 and len(phrase.split()) == 1


def _gold_math(gold: str) -> str:
    """Accept a GSM8K solution ("... #### 1,000") or a boxed gold as well as a bare answer."""
    if "####" in gold:
        return gold.rsplit("####", 1)[1]
    return gold


# Wrappers removed before comparing; keep only the content of text-like macros.
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_DROP = re.compile(
    r"\\left|\\right|\\displaystyle|\\[!,;: ]|\\\$|\$|\\\(|\\\)|\\\[|\\\]"
    r"|\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|°|\\%|%"
)
_SINGLE_VAR_EQ = re.compile(r"^\\?[A-Za-z]+(?:_\{?\w+\}?)?\s*=\s*(?=\S)")
_CURRENCY = re.compile(r"^(?:[€£¥₹]|USD\b|US\b|Rs\.)\s*")
# Thousands groups after a non-zero digit, as math-verify reads them ("0,111" is 0.111 to it).
_NUMBER = r"[-+]?(?:[1-9]\d{0,2}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\.\d+"
# A number with only words around it: "18 dollars", "about 9 apples", "$18.00".
_NUMBER_WITH_WORDS = re.compile(
    rf"^(?P<pre>(?:[A-Za-z]{{2,}}\s+)*)(?P<num>{_NUMBER})(?:\s*/\s*(?P<den>\d+))?"
    r"(?P<post>(?:\s+[A-Za-z]{2,})*)\s*$"
)
_FRAC = re.compile(r"^(?P<sign>[-+]?)\s*\\frac\s*\{\s*(?P<num>[-+]?\d+)\s*\}\{\s*(?P<den>[-+]?\d+)\s*\}$")
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")  # \frac12 → \frac{1}{2}
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")  # \sqrt2 → \sqrt{2}


def _strip_math_wrappers(answer: str) -> str:
    """Remove delimiters, spacing macros, units-in-\\text, degrees, percent and boxes."""
    s = answer.strip().replace("−", "-").replace("{,}", ",")
    boxed = last_boxed(s)
    if boxed is not None:
        s = boxed
    for _ in range(3):  # nested \text{\textbf{..}} unwraps in a few passes
        s = _TEXT_MACRO.sub(r" \1 ", s)
    s = _DROP.sub(" ", s)
    s = re.sub(r"\\[dt]frac", r"\\frac", s)
    s = s.strip().rstrip(".,;:!?").strip()
    s = _SINGLE_VAR_EQ.sub("", s)  # "x = 5" → "5" (as DAPO keeps the text after "=")
    return _CURRENCY.sub("", s).strip()


def _math_value(s: str) -> Fraction | None:
    """Exact value of a plain number, fraction or \\frac{a}{b} (with unit words); else None."""
    if len(s) > _MAX_NUMBER_CHARS:
        return None
    s = re.sub(r"^(\d{1,3})((?: \d{3})+)$", lambda m: m.group().replace(" ", ""), s)
    frac = _FRAC.match(_FRAC_SHORT.sub(r"\\frac{\1}{\2}", s))
    if frac:
        den = int(frac["den"])
        if den == 0:
            return None
        value = Fraction(int(frac["num"]), den)
        return -value if frac["sign"] == "-" else value
    match = _NUMBER_WITH_WORDS.match(s)
    if not match:
        return None
    value = Fraction(match["num"].replace(",", ""))
    if match["den"]:
        if int(match["den"]) == 0:
            return None
        value /= int(match["den"])
    return value


def _format_number(value: Fraction) -> str:
    """Integers without ".0", terminating decimals exactly ("0.125"), else "p/q"."""
    if value.denominator == 1:
        return str(value.numerator)
    den, twos, fives = value.denominator, 0, 0
    while den % 2 == 0:
        den, twos = den // 2, twos + 1
    while den % 5 == 0:
        den, fives = den // 5, fives + 1
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    places = max(twos, fives)
    scaled = abs(value.numerator) * 10**places // value.denominator
    digits = str(scaled).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def _canonical_math(answer: str) -> str | None:
    s = _strip_math_wrappers(answer)
    if not s:
        return None
    value = _math_value(s)
    if value is not None:
        return _format_number(value)
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", _SQRT_SHORT.sub(r"\\sqrt{\1}", s))
    compact = re.sub(r"\s+", "", s)
    # "32, 349" is a list to math-verify; compacted it would read as the number 32349.
    return (re.sub(r"\s+", " ", s) if _math_value(compact) is not None else compact) or None


def _math_equal(gold: str, pred: str, *, symmetric: bool = False) -> bool:
    """Canonical strings, then exact numbers (tol 1e-6), then guarded math-verify `verify`.

    math-verify is asymmetric (gold first); between two agents try both orders. A percentage
    differs from its number as a string but not to math-verify (50% = 0.5 = 50), so it goes on.
    """
    gold, pred = _answer_in(gold), _answer_in(pred)
    canon_gold, canon_pred = _canonical_math(gold), _canonical_math(pred)
    if canon_gold is None or canon_pred is None:
        return False
    if canon_gold == canon_pred:
        return True
    value_gold = _math_value(canon_gold)
    value_pred = _math_value(canon_pred)
    if value_gold is not None and value_pred is not None:
        if abs(value_gold - value_pred) <= _NUMERIC_TOL:
            return True
        if "%" not in gold and "%" not in pred:
            return False
    return _math_verify_equal(gold, pred) or (symmetric and _math_verify_equal(pred, gold))


def _answer_in(text: str) -> str:
    """The answer math-verify reads in a whole reply or solution ($...$, \\(...\\), \\[...\\], a box),
    as `extract_answer` finds it; any other string is an answer already."""
    if any(delimiter in text for delimiter in _MATH_DELIMITERS):
        return _extract_math(text) or text
    return text


# A string with one of these is a whole reply, not an answer (`_answer_in`).
_MATH_DELIMITERS = ("$", "\\(", "\\[", "\\boxed", "\\fbox")


# Huge powers and factorials make sympy compute enormous integers (minutes, gigabytes).
_RISKY = re.compile(
    r"(?:\^|\*\*)\s*\{?\s*[-+(]*\s*\d{3,}"  # 2^{1000}
    r"|\d{3,}\s*!"  # 1000!
    r"|\^\s*\{[^{}]*\^|\^\s*\w+\s*\^"  # 10^{10^{10}}, 2^2^2
    r"|\*\*\s*\(?[\w\s]*\*\*"  # 2**2**2
)


def _math_verify_equal(gold: str, pred: str) -> bool:
    if not gold.strip() or not pred.strip():
        return False
    if max(len(gold), len(pred)) > _MAX_MATH_VERIFY_CHARS:
        return False
    if _RISKY.search(gold) or _RISKY.search(pred):
        return False
    mv = _math_verify()

    def check() -> bool:
        parsed_gold, parsed_pred = _math_verify_parse(gold), _math_verify_parse(pred)
        if not parsed_gold or not parsed_pred:
            return False
        return bool(mv.verify(list(parsed_gold), list(parsed_pred), timeout_seconds=None))

    return _run_with_time_limit(check, _MATH_VERIFY_SECONDS, default=False)


@functools.lru_cache(maxsize=1 << 14)
def _math_verify_parse(answer: str) -> tuple[object, ...]:
    """math-verify's `parse` of an answer, read as the content of a box, as a MATH gold is
    ("\\sqrt{2}", "(1, 2)", "1, 2"). Cached: one gold is compared with many replies, one answer
    with its peers."""
    mv = _math_verify()
    return tuple(mv.parse("\\boxed{" + answer + "}", mv.config, parsing_timeout=None))


class _MathVerify:
    """math-verify's pieces, imported once: the first import (sympy) takes seconds, so it happens
    in the caller's thread, not inside a time limit."""

    def __init__(self) -> None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
        from math_verify.parser import extract_match, get_extraction_regexes

        # Boxed first, as math-verify's own tests grade replies (tests/test_all.py, compare_strings).
        self.config = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())
        self.regexes = get_extraction_regexes(self.config)
        self.parse, self.verify, self.extract_match = parse, verify, extract_match


@functools.cache
def _math_verify() -> _MathVerify:
    return _MathVerify()


_T = TypeVar("_T")


def _run_with_time_limit(fn: Callable[[], _T], seconds: float, default: _T) -> _T:
    """Run fn in a daemon thread; give up after `seconds` (works in any thread).

    Python cannot kill a thread, so a runaway computation keeps running in the
    background, but the caller moves on and the process can still exit.
    """
    result: list[_T] = []

    def target() -> None:
        try:
            result.append(fn())
        except Exception:  # math-verify/sympy failures mean "not shown equal"
            pass

    worker = threading.Thread(target=target, name="math-verify", daemon=True)
    worker.start()
    worker.join(seconds)
    return result[0] if result else default


# --------------------------------------------------------------------------- multiple choice

# After a cue: "B", "(B)", "**B**", "\boxed{B}", "\text{B}", "option B".
_MC_AFTER_CUE = re.compile(
    r"(?i:(?:option|choice)\b)?[ \t*:\[$]*"
    r"(?:\\(?:boxed|text|textbf|mathrm)\s*\{\s*)?(?P<open>\()?(?P<letter>[A-Za-z])"
    r"(?![A-Za-z0-9'])(?P<close>\))?(?P<after>[ \t]+[a-z])?"
)
_MC_CUE = re.compile(
    r"(?i)\banswer\b[ \t*]*"
    r"(?:(?:is|would\s+be|should\s+be|will\s+be|must\s+be)\b[ \t:*]*|[:=\-–—][ \t*]*)?"
)
_MC_IS_CORRECT = re.compile(r"\(?\b([A-Z])\)?\s+is\s+(?:the\s+)?(?:correct|right|best)\b")
_MC_STANDALONE = (
    re.compile(r"[(\[]([A-Z])[)\]]"),  # (B) [B]
    re.compile(r"\*\*\s*\(?([A-Z])\)?[.:)]?\s*\*\*"),  # **B** **(B)**
    re.compile(r"(?m)^[ \t>*#\-]*\(?([A-Z])(?:[.:)]|[ \t]*$)"),  # "B", "B)", "B. Paris" lines
    # "option B" is only a weak signal ("Option A is wrong"), so not an explicit answer.
    re.compile(r"(?i:\b(?:option|choice)(?:\s+is)?)[ \t:]*\(?([A-Z])(?![A-Za-z0-9])"),
)
_SHORT_LETTER = re.compile(
    r"^[\s*$(\[]*(?:\\(?:text|textbf|mathrm)\s*\{\s*)?\(?([A-Za-z])\)?\s*\}?"
    r"(?:[\s.:)\]*$]|$)"
)


def _valid_letters(choices: list[str] | None) -> str:
    return _LETTERS[: min(len(choices), 26)] if choices else _DEFAULT_MC_LETTERS


def _extract_choice(text: str, choices: list[str] | None) -> str | None:
    """Boxed, then the last explicit "answer is X", then a standalone letter ("(B)", "**B**",
    a line "B)"), then a lone capital in a sentence, then the choice text.

    The article "A" ("A man walks") and the pronoun "I" are never answers on their own.
    """
    letters = _valid_letters(choices)
    boxed = last_boxed(text)
    if boxed is not None:
        letter = _short_letter(boxed, letters) or _choice_text(boxed, choices, first=True)
        if letter:
            return letter
    explicit = _explicit_letter(text, letters, choices)
    if explicit:
        return explicit
    standalone = [
        (m.start(), m.group(1)) for pattern in _MC_STANDALONE for m in pattern.finditer(text) if m.group(1) in letters
    ]
    if standalone:
        return max(standalone)[1]
    return _bare_letter(text, letters) or _choice_text(text, choices)


# Last resort: a capital letter standing alone in a sentence ("I think it's B.").
_BARE_LETTER = re.compile(r"(?<![\w'\-.\\])([A-Z])(?![\w'\-])(?P<word>\s+[a-z])?")


def _bare_letter(text: str, letters: str) -> str | None:
    """The last lone capital letter; "A"/"I" only when no word follows (article, pronoun)."""
    found = None
    for match in _BARE_LETTER.finditer(text):
        letter = match.group(1)
        if letter in letters and not (letter in "AI" and match["word"]):
            found = letter
    return found


def _short_letter(s: str, letters: str) -> str | None:
    match = _SHORT_LETTER.match(s)
    if match and match.group(1).upper() in letters:
        return match.group(1).upper()
    return None


def _explicit_letter(text: str, letters: str, choices: list[str] | None) -> str | None:
    """The last explicitly stated answer: a letter after a cue, or choice text after "answer"."""
    found: list[tuple[int, str]] = []
    for cue in _last_matches(_MC_CUE, text):
        letter = _letter_after_cue(text, cue.end(), letters)
        if letter is None and choices:
            phrase, _ = _line_from(text, cue.end())
            letter = _choice_text(phrase, choices, first=True) if phrase.strip() else None
        if letter:
            found.append((cue.start(), letter))
    found.extend((m.start(), m.group(1)) for m in _MC_IS_CORRECT.finditer(text) if m.group(1) in letters)
    return max(found)[1] if found else None


def _letter_after_cue(text: str, pos: int, letters: str) -> str | None:
    match = _MC_AFTER_CUE.match(text, pos)
    if not match:
        return None
    letter = match["letter"]
    wrapped = bool(match["open"] or match["close"])
    if not wrapped and match["after"] and (letter.islower() or letter == "I"):
        return None  # a word, not a choice: "the answer is a bit tricky", "answer I gave"
    return letter.upper() if letter.upper() in letters else None


def _choice_text(text: str, choices: list[str] | None, *, first: bool = False) -> str | None:
    """Letter of the choice whose text appears last (or first), case-insensitive.

    In a whole reply the last mention is the final answer ("not London, it's Paris");
    right after "the answer is" the first one is ("Paris, not London"). On the same
    spot the longer choice wins ("New York City" over "New York").
    """
    if not choices:
        return None
    lowered = text.lower()
    best: tuple[int, int, str] | None = None
    for index, choice in enumerate(choices[:26]):
        needle = str(choice).strip().rstrip(".").strip().lower()
        if not needle:
            continue
        pattern = re.compile(r"(?<!\w)" + re.escape(needle) + r"(?!\w)")
        hit = pattern.search(lowered) if first else None
        if not first:
            for hit in pattern.finditer(lowered):  # noqa: B007 (the loop leaves the last match behind)
                pass
        if hit is None:
            continue
        # Rank by position (earliest or latest), then by length.
        rank = (-hit.start() if first else hit.end(), len(needle))
        if best is None or rank > best[:2]:
            best = (*rank, _LETTERS[index])
    return best[2] if best else None


def _normalize_letter(answer: str) -> str | None:
    return _short_letter(answer, _LETTERS) or _extract_choice(answer, None)


# --------------------------------------------------------------------------- yes / no

_WORD = re.compile(r"[a-z]+")


def _first_yes_no(text: str) -> str | None:
    """First yes/no/true/false token after lowercasing (punctuation never joins tokens)."""
    for match in _WORD.finditer(text.lower()):
        if match.group() in _YES_NO:
            return _YES_NO[match.group()]
    return None


def _extract_yes_no(text: str) -> str | None:
    """Boxed, then the last explicit "answer: X", then the first yes/no token (our [CHOICE] for the confidence paper, arXiv:2606.13591, which gives no parser)."""
    boxed = last_boxed(text)
    if boxed is not None and (answer := _first_yes_no(boxed)):
        return answer
    for _, phrase in reversed(_phrases_after(_ANSWER_CUE, text)):
        if answer := _first_yes_no(phrase):
            return answer
    return _first_yes_no(text)


# --------------------------------------------------------------------------- labels


def _label_words(text: str) -> str:
    """Lowercase, punctuation → spaces, padded so phrases match on word boundaries."""
    return " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "


def _label_phrases(labels: list[str]) -> list[tuple[str, str]]:
    """(padded phrase, label as given) for each label and its synonyms."""
    phrases = []
    for label in labels:
        key = _label_words(str(label)).strip()
        if not key:
            continue
        for phrase in (key, *_LABEL_SYNONYMS.get(key, ())):
            phrases.append((f" {phrase} ", label))
    return phrases


def _first_label(text: str, labels: list[str]) -> str | None:
    """The label whose phrase occurs first; the longest phrase wins at the same spot."""
    words = _label_words(text)
    best: tuple[int, int, str] | None = None
    for phrase, label in _label_phrases(labels):
        at = words.find(phrase)
        if at >= 0 and (best is None or (at, -len(phrase)) < best[:2]):
            best = (at, -len(phrase), label)
    return best[2] if best else None


def _extract_label(text: str, labels: list[str]) -> str | None:
    """Boxed, then the last explicit "answer/stance/label: X", then the first label token."""
    boxed = last_boxed(text)
    if boxed is not None and (label := _first_label(boxed, labels)):
        return label
    for _, phrase in reversed(_phrases_after(_ANSWER_CUE, text)):
        if label := _first_label(phrase, labels):
            return label
    return _first_label(text, labels)


def _normalize_label(answer: str) -> str | None:
    """Lowercase label, synonyms mapped: "Favor" → "support", "non-hateful" → "not hateful"."""
    key = _label_words(answer).strip()
    if not key:
        return None
    for canonical in DEFAULT_LABELS:
        if key in _LABEL_SYNONYMS[canonical]:
            return canonical
    return key


def _label_key(answer: str, labels: list[str] | None) -> str | None:
    """Canonical lowercase key of a label answer, resolved against `labels` when given."""
    if labels:
        label = _first_label(answer, list(labels))
        if label is not None:
            return _label_words(str(label)).strip()
    return _normalize_label(answer)
