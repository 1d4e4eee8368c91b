"""The papers the evaluate stage rebuilds, one registry (`PAPERS`): each with its report title and its
builder (`evaluate` of its module here); its published numbers are `config/paper_numbers/<paper>.yaml`.
The schema's paper enums list the same names (tests/test_registries.py checks all three)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import confidence, sdrl, svr_mad, udpo, umad


@dataclass(frozen=True)
class Paper:
    title: str  # the report's; short: the report's menu widens to the longest breadcrumb
    evaluate: Callable  # RunOutputs -> result.PaperEvaluation


PAPERS: dict[str, Paper] = {
    "udpo": Paper("UDPO: uncertainty against debate collapse (arXiv:2602.07186)", udpo.evaluate),
    "umad": Paper("UMAD: epistemic gain, aleatoric cost (arXiv:2603.01221)", umad.evaluate),
    "svr_mad": Paper("SVR-MAD: posterior-guided sparse debate (arXiv:2605.23099)", svr_mad.evaluate),
    "sdrl": Paper("SDRL: self-debate reinforcement learning (arXiv:2601.22297)", sdrl.evaluate),
    "confidence": Paper("Calibrated confidence protocols (arXiv:2606.13591)", confidence.evaluate),
}
#: {paper: its report title}
PAPER_TITLES = {name: paper.title for name, paper in PAPERS.items()}
