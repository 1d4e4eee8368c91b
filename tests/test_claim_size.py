"""The size of the paired accuracy claims (issue 71): under a true null, with several threads per
question and few informative questions, the verdict rejects at most 5 % plus its Monte Carlo error.
The clustered BCa bootstrap it replaces rejected 16 % with 4 informative questions of 100 × 5
threads. A small version of `benchmarks/claims_size.py` (whose table is in docs/evaluation.md): a few
hundred draws at the sizes where the bootstrap was worst."""

from __future__ import annotations

import pytest

from debatelab.evaluation.claim_size import FAMILIES, rejection_rate

DRAWS = 200
BY_NAME = {family.name: family for family in FAMILIES}


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("paired accuracy, 5 threads that agree", 4),
        ("paired accuracy, 5 threads that agree", 6),
        ("paired accuracy, 2 threads that agree", 6),
        ("paired accuracy, 5 independent threads", 10),
        ("paired accuracy, 1 thread", 10),
    ],
)
def test_paired_accuracy_rejects_a_true_null_at_most_five_percent(name, size):
    result = rejection_rate(BY_NAME[name], size, DRAWS)
    # the rate's Clopper-Pearson interval must reach down to 5 %: above it, the test is too liberal
    assert result.rate.low <= 0.05, result.row()
    assert result.too_few == 0


def test_four_informative_questions_never_reject():
    """Exactly: 4 informative questions give 16 sign patterns, so p ≥ 2/16 whatever the threads."""
    assert rejection_rate(BY_NAME["paired accuracy, 5 independent threads"], 4, 50).rejected == 0
