"""What an agent answered, whether it is right, and which answers count as the same.

One package decides, so every stage (zero-shot, debate, uncertainty, calibration, RL reward,
evaluation) agrees on the same parse and the same vote:

* `answers`: `extract_answer`, `normalize_answer`, `is_correct`, `answers_equivalent`,
  `extract_confidence` (a 0-10 self-report) per task type;
* `votes`: `answer_keys` (INVALID for unparseable answers), `same_answer` / `AnswerClasses` (when two
  answers are the same answer), the plurality vote and its tie rules.
"""

from .answers import (
    DEFAULT_LABELS,
    TASK_TYPES,
    answers_equivalent,
    extract_answer,
    extract_confidence,
    is_correct,
    last_boxed,
    last_boxed_span,
    normalize_answer,
)
from .votes import (
    INVALID,
    TIE_BREAKS,
    AnswerClasses,
    Vote,
    answer_keys,
    majority_vote,
    plurality,
    same_answer,
    vote_answer,
)

__all__ = [
    "DEFAULT_LABELS",
    "TASK_TYPES",
    "answers_equivalent",
    "extract_answer",
    "extract_confidence",
    "is_correct",
    "last_boxed",
    "last_boxed_span",
    "normalize_answer",
    "INVALID",
    "TIE_BREAKS",
    "AnswerClasses",
    "Vote",
    "answer_keys",
    "majority_vote",
    "plurality",
    "same_answer",
    "vote_answer",
]
