"""Verbalised self-report (Elahi & Di Eugenio, arXiv:2606.13591 §3.2): after its answer, the agent is asked for a 0-10 rating
k times at a low temperature; conf_verbal = mean of the parsed ratings / 10 (0.5 if none parsed)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .. import grading, prompts
from ..llm import GenerationRequest, generate_cached


def verbal_confidence(ratings: Sequence[float | None], fallback: float = 0.5) -> tuple[float, int]:
    """Mean of the parseable 0-10 self-reports, scaled to [0, 1].

    Returns (confidence, number of parsed ratings); with none parsed the confidence is
    `fallback` (Elahi & Di Eugenio, arXiv:2606.13591 §3.2) and the count 0 lets reports say how often that happened.
    """
    parsed = [float(r) for r in ratings if r is not None and not math.isnan(r)]
    if not parsed:
        return fallback, 0
    return float(np.mean(parsed)) / 10.0, len(parsed)


def self_report(items, out, backend, cache, settings, *, seed, batch_size, tag, show_progress) -> None:
    """Fill `conf_verbal`, `verbal_parsed` and `extra_tokens` of each `out[i]` for `items[i]`."""
    sampling = settings.verbal_sampling(seed)
    requests = [
        GenerationRequest(
            messages=prompts.confidence_messages(item.chat, item.response), sampling=sampling, n=settings.verbal_samples
        )
        for item in items
    ]
    generations = generate_cached(
        backend, requests, cache, batch_size=batch_size, desc=f"self-report {tag}", show_progress=show_progress
    )
    for confidence, gens in zip(out, generations):
        confidence.conf_verbal, confidence.verbal_parsed = verbal_confidence(
            [grading.extract_confidence(g.text) for g in gens]
        )
        confidence.extra_tokens += sum(g.prompt_tokens + g.completion_tokens for g in gens)
