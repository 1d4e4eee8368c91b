"""Confidence estimators, shared by the zero-shot, debate and confidence stages (none of which
imports another's stage for them):

* `verbal`: verbalised self-report (Elahi & Di Eugenio, arXiv:2606.13591 §3.2);
* `seqprob`: bias-corrected sequence probability (Elahi & Di Eugenio, arXiv:2606.13591 §3.2);
* `tokens`: token-level summaries of a reply's own log-probabilities (mean, minimum), recorded
  with every generation;
* `tokens` also: the token-level uncertainty of a reply (mean token entropy, max token probability,
  perplexity) from its top-k log-probabilities, and `TOKEN_ESTIMATORS`, those as confidences;
* `elicit`: `elicit_confidences`, the one way every stage asks for the estimators that need extra
  calls, their registry `ELICITORS` (names `ESTIMATORS`: what `zero_shot.estimators` and a debate
  protocol's `confidence` list) and `ElicitationSettings`.

`CONFIDENCE_ESTIMATORS` = `ESTIMATORS` + `TOKEN_ESTIMATORS`: what the confidence stage calibrates
(`calibration.estimators`). A new estimator is a module here plus its entry in `ELICITORS` (one that
needs calls) or in `TOKEN_ESTIMATORS` (one read off the generation).
"""

from .elicit import ELICITORS, ESTIMATORS, AnsweredChat, Confidence, ElicitationSettings, elicit_confidences
from .seqprob import SEQPROB_TARGETS, bias_corrected_confidence
from .tokens import (
    TOKEN_COLUMNS,
    TOKEN_ESTIMATORS,
    mean_logprob,
    mean_token_entropy,
    min_logprob,
    token_confidence,
    token_summaries,
)
from .verbal import verbal_confidence

#: every confidence the confidence stage can calibrate: the elicited ones, then the token-level ones
CONFIDENCE_ESTIMATORS = ESTIMATORS + tuple(TOKEN_ESTIMATORS)

__all__ = [
    "CONFIDENCE_ESTIMATORS",
    "ELICITORS",
    "ESTIMATORS",
    "AnsweredChat",
    "Confidence",
    "ElicitationSettings",
    "elicit_confidences",
    "SEQPROB_TARGETS",
    "bias_corrected_confidence",
    "TOKEN_COLUMNS",
    "TOKEN_ESTIMATORS",
    "mean_logprob",
    "mean_token_entropy",
    "min_logprob",
    "token_confidence",
    "token_summaries",
    "verbal_confidence",
]
