"""Every prompt an agent sees: the question in its task type's format (`questions`), the debate
turn in each paper's template (`debate`), and their content-free twins for sequence probability."""

from .debate import (
    SELF_DEBATE_STYLES,
    TEMPLATES,
    PeerView,
    debate_turn,
    mask_last_boxed,
    self_debate_messages,
    umad_mask_answer,
)
from .questions import (
    ATTACK_SYSTEM_PROMPT,
    CONFIDENCE_PROMPT,
    FINAL_ANSWER_TEMPLATES,
    NULL_SLOT,
    SYSTEM_PROMPTS,
    USER_TEMPLATES,
    confidence_messages,
    final_answer_text,
    format_options,
    question_body,
    question_messages,
)

__all__ = [
    "SELF_DEBATE_STYLES",
    "TEMPLATES",
    "PeerView",
    "debate_turn",
    "mask_last_boxed",
    "self_debate_messages",
    "umad_mask_answer",
    "ATTACK_SYSTEM_PROMPT",
    "CONFIDENCE_PROMPT",
    "FINAL_ANSWER_TEMPLATES",
    "NULL_SLOT",
    "SYSTEM_PROMPTS",
    "USER_TEMPLATES",
    "confidence_messages",
    "final_answer_text",
    "format_options",
    "question_body",
    "question_messages",
]
