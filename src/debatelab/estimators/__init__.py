"""Confidence estimators, shared by the zero-shot, debate and confidence stages (none of which
imports another's stage for them):

* `verbal`: verbalised self-report (spec 004 §3a);
* `seqprob`: bias-corrected sequence probability (spec 004 §3b);
* `tokens`: token-level summaries of a reply's own log-probabilities (mean, minimum), recorded
  with every generation;
* `elicit`: `elicit_confidences`, the one way every stage asks for the estimators that need extra
  calls, their registry `ELICITORS` (names `ESTIMATORS`) and `ElicitationSettings`.

A new estimator is a module here plus its entry in `ELICITORS` (one that needs calls) or a summary
in `tokens` (one read off the generation).
"""

from .elicit import ELICITORS, ESTIMATORS, AnsweredChat, Confidence, ElicitationSettings, elicit_confidences
from .seqprob import SEQPROB_TARGETS, bias_corrected_confidence
from .tokens import mean_logprob, min_logprob
from .verbal import verbal_confidence

__all__ = [
    "ELICITORS",
    "ESTIMATORS",
    "AnsweredChat",
    "Confidence",
    "ElicitationSettings",
    "elicit_confidences",
    "SEQPROB_TARGETS",
    "bias_corrected_confidence",
    "mean_logprob",
    "min_logprob",
    "verbal_confidence",
]
