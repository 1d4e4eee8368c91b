"""The uncertainty stage: UDPO's debate-collapse measures and UMAD's epistemic/aleatoric
decomposition (`measures`), and the job that computes them for a debate with diagnostics (`stage`)."""

from .measures import (
    UDPO_KEYS,
    answer_distribution,
    debate_uncertainty,
    decompose,
    decompose_samples,
    per_agent_uncertainty,
)
from .stage import UncertaintySettings, uncertainty_job

__all__ = [
    "UDPO_KEYS",
    "answer_distribution",
    "debate_uncertainty",
    "decompose",
    "decompose_samples",
    "per_agent_uncertainty",
    "UncertaintySettings",
    "uncertainty_job",
]
