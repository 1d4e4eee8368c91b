"""The size of every claim statistic: how often the engine's verdict rejects (holds or fails) when
the claim's boundary is the truth, measured by drawing data sets under that null at the sizes the
shipped configs produce (`benchmarks/claims_size.py` prints the table, docs/evaluation.md keeps it,
tests/test_claim_size.py runs a small version).

Each family draws per-unit data as the papers' extraction hands it to the engine and runs it
through `claim_engine.estimate` and `claims.verdict`, so what is measured is what a claims file
reports. `size` is the number of informative units for paired accuracy (questions whose two sides
differ, of max(100, size) questions: UMAD's and SDRL's configs run 100-200 questions with a handful
that differ) and the number of units (questions, rows, steps) for the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..intervals import Estimate, proportion
from .claim_engine import (
    COHENS_D,
    CORRELATION,
    DIFFERENCE,
    MEAN,
    PAIRED_ACCURACY,
    PROPORTION,
    SLOPE,
    ClaimSpec,
    Outcomes,
    Rows,
    Shares,
    UnitData,
    estimate,
)
from .claims import TOO_FEW, verdict

SIZES = (4, 6, 10, 30, 200)  # informative units the shipped configs give, few to many
QUESTIONS = 100  # questions of a paired accuracy data set (more where `size` is larger)


def _paired_shares(rng: np.random.Generator, informative: int, threads: int, agree: bool) -> Shares:
    """`informative` of max(QUESTIONS, informative) questions whose sides differ, the rest alike (all
    threads right on both sides, or all wrong). Under the null the sides are exchangeable within a
    question: an informative question's hits on each side are drawn alike and redrawn until they
    differ; with `agree` a side's threads agree (all right or all wrong), else each thread is right
    with the question's own chance, uniform on (0.1, 0.9)."""
    n = max(QUESTIONS, informative)
    hits = np.repeat(threads * rng.integers(0, 2, n).astype(float)[:, None], 2, axis=1)
    for i in range(informative):
        chance = rng.uniform(0.1, 0.9)
        while hits[i, 0] == hits[i, 1]:
            hits[i] = threads * rng.integers(0, 2, 2) if agree else rng.binomial(threads, chance, 2)
    counts = np.full(n, float(threads))
    return Shares(hits[:, 0], counts, hits[:, 1], counts, scale=100)


@dataclass(frozen=True)
class Family:
    """A statistic family under a true null: `draw(rng, size)` gives the engine's per-unit data and
    the boundary that is the truth."""

    name: str
    family: str
    draw: Callable[[np.random.Generator, int], tuple[UnitData, float]]

    def spec(self) -> ClaimSpec:
        return ClaimSpec("size-1", self.name, self.family, lambda context: [], source="claim_size (a null)")


def _threads(threads: int, agree: bool) -> Callable[[np.random.Generator, int], tuple[UnitData, float]]:
    return lambda rng, size: (_paired_shares(rng, size, threads, agree), 0.0)


def _cohens_d(rng: np.random.Generator, size: int) -> tuple[UnitData, float]:
    """Failures (30 %) and successes from one normal: d = 0."""
    return Rows(rng.normal(size=size), rng.random(size) < 0.3), 0.0


FAMILIES = (
    Family("paired accuracy, 1 thread", PAIRED_ACCURACY, _threads(1, True)),
    Family("paired accuracy, 2 threads that agree", PAIRED_ACCURACY, _threads(2, True)),
    Family("paired accuracy, 2 independent threads", PAIRED_ACCURACY, _threads(2, False)),
    Family("paired accuracy, 5 threads that agree", PAIRED_ACCURACY, _threads(5, True)),
    Family("paired accuracy, 5 independent threads", PAIRED_ACCURACY, _threads(5, False)),
    # a per-question mean of a skewed quantity (tokens, entropies): exponential, mean 1
    Family("mean (exponential)", MEAN, lambda rng, size: (Rows(rng.exponential(size=size)), 1.0)),
    # a paired difference of per-question means of two exchangeable arms
    Family(
        "difference of means (paired)",
        DIFFERENCE,
        lambda rng, size: (Rows(rng.exponential(size=size), rng.exponential(size=size)), 0.0),
    ),
    Family("Cohen's d (30 % in group 1)", COHENS_D, _cohens_d),
    # point-biserial: correctness (0/1) against an independent skewed measure
    Family(
        "Pearson r (0/1 vs exponential)",
        CORRELATION,
        lambda rng, size: (Rows(rng.integers(0, 2, size).astype(float), rng.exponential(size=size)), 0.0),
    ),
    Family(
        "slope over steps", SLOPE, lambda rng, size: (Rows(np.arange(size, dtype=float), rng.normal(size=size)), 0.0)
    ),
    Family("share (p = 0.3)", PROPORTION, lambda rng, size: (Outcomes(rng.random(size) < 0.3), 0.3)),
)


@dataclass(frozen=True)
class Size:
    """How often `family` rejected its true null in `draws` data sets of `size` units."""

    family: str
    size: int
    draws: int
    rejected: int
    too_few: int  # draws the engine gave "n/a (too few)"

    @property
    def rate(self) -> Estimate:
        """The rejection rate with its Monte Carlo (Clopper-Pearson) interval."""
        return proportion(self.rejected, self.draws)

    def row(self) -> str:
        if self.too_few == self.draws:
            return f"{self.family} | {self.size} | {TOO_FEW} | {self.draws}"
        rate = self.rate
        return f"{self.family} | {self.size} | {100 * rate.value:.1f} % [{100 * rate.low:.1f}, {100 * rate.high:.1f}] | {self.draws}"


def rejection_rate(family: Family, size: int, draws: int, seed: int = 0) -> Size:
    """Draw `draws` data sets of `size` units under `family`'s null and count the verdicts that
    reject it (holds or fails at its true boundary, two-sided: expect ">")."""
    rng = np.random.default_rng([seed, size, sum(map(ord, family.name))])
    spec = family.spec()
    rejected = too_few = 0
    for _ in range(draws):
        data, truth = family.draw(rng, size)
        decided = verdict(estimate(spec, data), ">", truth)
        rejected += decided in ("holds", "fails")
        too_few += decided == TOO_FEW
    return Size(family.name, size, draws, rejected, too_few)
