"""The confidence paper's method (spec 004), in DAG order:

* `estimators`: raw confidences (self-report, bias-corrected sequence probability) and
  `elicit_confidences`, which the zero-shot and debate stages call;
* `streams`: a pair of agents' four (agent, stream) answers and confidences, the val/test split;
* `calibrators`: raw, beta, polynomial and isotonic calibrators fitted on validation;
* `fusion`: the protocols WSV, CGA, HID and the baselines, one dispatch table (`METHODS`);
* `search`: the Optuna TPE search of a protocol's parameters;
* `stage`: the rule jobs (streams → fit_calibrators → search_protocol → apply_protocol) and
  `CalibrationSettings`.
"""
from .calibrators import CALIBRATORS, calibrator_from_dict, fit_calibrator
from .estimators import ESTIMATORS, AnsweredChat, Confidence, ElicitationSettings, elicit_confidences
from .fusion import BASELINES, METHODS, SEARCH_SPACES, apply_method
from .search import SearchSettings, tpe_search

__all__ = [
    "CALIBRATORS", "calibrator_from_dict", "fit_calibrator", "ESTIMATORS", "AnsweredChat", "Confidence",
    "ElicitationSettings", "elicit_confidences", "BASELINES", "METHODS", "SEARCH_SPACES", "apply_method",
    "SearchSettings", "tpe_search",
]
