"""The debate stage: a batched engine (`engine`), the papers' protocols (`protocols`), the job that
runs one protocol on one dataset (`stage`) and its output schema (`schema`)."""

from .engine import Ask, Outcome, Participant, QuestionState, Turn, run_engine
from .protocols import PROTOCOLS, make_protocol
from .schema import QUESTION_COLUMNS, TURN_COLUMNS

__all__ = [
    "Ask",
    "Outcome",
    "Participant",
    "QuestionState",
    "Turn",
    "run_engine",
    "PROTOCOLS",
    "make_protocol",
    "QUESTION_COLUMNS",
    "TURN_COLUMNS",
]
