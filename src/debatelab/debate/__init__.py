"""The debate stage: a batched engine, the papers' protocols, and the job that runs them."""
from .engine import Ask, Outcome, Participant, QuestionState, Turn, run_engine
from .protocols import KINDS, PROTOCOLS, make_protocol, plurality
from .schema import QUESTION_COLUMNS, TURN_COLUMNS

__all__ = [
    "Ask", "Outcome", "Participant", "QuestionState", "Turn", "run_engine", "KINDS", "PROTOCOLS", "make_protocol",
    "plurality", "QUESTION_COLUMNS", "TURN_COLUMNS",
]
