"""The confidence paper's method (Elahi & Di Eugenio, arXiv:2606.13591), in DAG order (the raw confidences it calibrates
come from `debatelab.estimators`, elicited by the zero-shot and debate stages):

* `streams`: a pair of agents' four (agent, stream) answers and confidences, the val/test split;
* `calibrators`: raw, beta, polynomial and isotonic calibrators fitted on validation;
* `fusion`: the protocols WSV, CGA, HID and the baselines, one dispatch table (`METHODS`);
* `search`: the Optuna TPE search of a protocol's parameters;
* `stage`: the rule jobs (streams → fit_calibrators → search_protocol → apply_protocol) and
  `CalibrationSettings`.
"""

from .calibrators import CALIBRATORS, calibrator_from_dict, fit_calibrator
from .fusion import BASELINES, METHODS, SEARCH_SPACES, apply_method
from .search import SearchSettings, tpe_search

__all__ = [
    "CALIBRATORS",
    "calibrator_from_dict",
    "fit_calibrator",
    "BASELINES",
    "METHODS",
    "SEARCH_SPACES",
    "apply_method",
    "SearchSettings",
    "tpe_search",
]
