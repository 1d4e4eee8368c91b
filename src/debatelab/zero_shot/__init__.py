"""The zero-shot stage: pre-debate answers of every agent, with confidences (`stage`), and its
output schema (`schema`)."""

from .schema import ZERO_SHOT_COLUMNS
from .stage import ZeroShotSettings, run_zero_shot, select_questions, zero_shot_job

__all__ = ["ZERO_SHOT_COLUMNS", "ZeroShotSettings", "run_zero_shot", "select_questions", "zero_shot_job"]
