"""Evaluation stage: every paper's tables from this run's outputs, beside the published numbers."""

from .claims import Claim, claims_frame
from .paper_numbers import compare_with_paper, load_paper_numbers
from .papers import PAPER_TITLES, PAPERS
from .result import PaperEvaluation
from .run import ProtocolInfo, RunInfo, RunOutputs, describe_protocols, describe_runs, protocol_method, run_label
from .stage import build_paper, evaluate_paper, report_section

__all__ = [
    "Claim",
    "claims_frame",
    "compare_with_paper",
    "load_paper_numbers",
    "ProtocolInfo",
    "RunInfo",
    "RunOutputs",
    "describe_protocols",
    "describe_runs",
    "protocol_method",
    "run_label",
    "PAPER_TITLES",
    "PAPERS",
    "PaperEvaluation",
    "build_paper",
    "evaluate_paper",
    "report_section",
]
