"""One engine for every paper's claims: a paper declares each claim as a `ClaimSpec` row and hands
the engine its contexts; the engine makes every estimate with `intervals.py`'s estimators, so the
exact-test rules, `intervals.MIN_UNITS`, the margins and (through `claims.claims_frame`) Holm's
adjustment hold for every paper by construction, and a new claim is one row.

A row names:

- ``id``: the claim's short id within its paper, e.g. "sdrl-7" (the ``claim`` column): a name that
  stays put, not a section number;
- ``source``: where the paper states the claim, as the paper numbers it (section, table, figure,
  equation), led by the paper's short name: "SDRL §6.2, Table 1" (the ``source`` column), so that a
  reader can look it up;
- ``statement`` and ``statistic`` (what ``value`` is): text, formatted with the case's ``fields``
  (``"NComm: SVR-MAD < {baseline}"``);
- ``family``: the statistic family (`FAMILIES`), which fixes the estimator and so the interval and
  its test: paired accuracy difference (exact, McNemar, where each side has one outcome per unit),
  proportion (Clopper-Pearson), mean, difference of means, correlation, Cohen's d, slope (BCa
  bootstrap, clustered where rows are not independent), or an exact identity (no sampling);
- ``expect``, ``threshold``, ``margin`` and ``margin_reason``: a ">=" / "<=" row must say why its
  margin is what it is (the paper's, or a [CHOICE] with its reason), else the row is refused;
- ``unit``: what is resampled (questions, calibration runs, steps, rows), and ``scale`` (100: a
  share as points);
- ``cases``: the paper's extraction, a function of one context (a table, a frame, a group of them)
  to the cases it measures: `Case` (a scope and its per-unit data) or `Untestable` (a scope and
  why it can't be measured in this run).

Per-unit data, one class per kind of input (`Case.data`):

- `Outcomes`: one 0/1 outcome per unit on each side (paired correctness);
- `Shares`: per unit, hits and answers on each side; one answer per unit on both sides is paired
  correctness (exact, McNemar), anything else the BCa bootstrap of ``statistic`` over units;
- `Rows`: per-row values (x, optionally y or a group flag) and the rows' clusters, for a mean,
  correlation, Cohen's d or slope;
- `Resampled`: any other statistic of resampled units (``statistic(index)``), BCa bootstrap;
- `Exact`: a value computed on every row (an identity's largest violation);
- `Missing`: no estimate (the verdict is "n/a", the row is kept).

`evaluate_claims(specs, contexts)` runs every spec on each context in turn (context-major, so the
rows of one scope sit together), passing `Untestable` contexts through as rows (their source: their
own, else that of the spec of the same id). A paper that
extracts its cases while it builds its contexts hands them over as `For(key, case)`, taken by the
spec whose `cases` is `only(key)`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..intervals import (
    Estimate,
    bootstrap,
    cohens_d,
    correlation,
    mean_estimate,
    paired_accuracy_difference,
    paired_difference,
    proportion,
    sign_flip_difference,
    slope,
)
from .claims import EXPECTATIONS, Claim

PAIRED_ACCURACY = "paired accuracy difference"
PROPORTION = "proportion"
MEAN = "mean"
DIFFERENCE = "difference of means"
CORRELATION = "correlation"
COHENS_D = "Cohen's d"
SLOPE = "slope"
EXACT = "exact identity"


# --------------------------------------------------------------------------- per-unit data


@dataclass(frozen=True)
class Outcomes:
    """One 0/1 outcome per unit for side a and side b, on the same units (a proportion: a alone)."""

    a: Sequence[bool]
    b: Sequence[bool] | None = None


@dataclass(frozen=True)
class Shares:
    """Per unit: hits and answers of side a and of side b (a unit one side didn't answer has 0
    answers there). `statistic(index)` is the difference on the units at `index` (default: the
    pooled share of a minus that of b); `exact_allowed` False where the statistic is not that plain
    difference (an average over datasets)."""

    hits_a: np.ndarray
    counts_a: np.ndarray
    hits_b: np.ndarray
    counts_b: np.ndarray
    statistic: Callable[[np.ndarray], float] | None = None
    paired: bool = True
    exact_allowed: bool = True
    scale: float = 1.0  # the pooled difference times this (100: points)
    hit: float = 1.0  # what one right answer adds to hits (100: hits already in points)
    # each unit's group (its dataset) where the statistic is the mean over groups of each group's
    # pooled difference (the tables' "avg"); None: one group
    groups: np.ndarray | None = None

    def one_outcome(self) -> bool:
        """Exactly one answer per unit on both sides: paired correctness."""
        counts_a, counts_b = np.asarray(self.counts_a), np.asarray(self.counts_b)
        return bool(self.exact_allowed and len(counts_a) and np.all(counts_a == 1) and np.all(counts_b == 1))

    def question_differences(self) -> tuple[np.ndarray, np.ndarray]:
        """(d, w): each unit's share right of a minus that of b (in shares, NaN where a side has no
        answer) and its weight in the statistic, so that Σ w·d / Σ w over the units both sides
        answered is the pooled difference (the mean over groups of each group's) when the two sides
        have as many answers on every unit: the weight is the unit's answers (halved over both
        sides), over its group's."""
        hits_a, counts_a = np.asarray(self.hits_a, float), np.asarray(self.counts_a, float)
        hits_b, counts_b = np.asarray(self.hits_b, float), np.asarray(self.counts_b, float)
        both = (counts_a > 0) & (counts_b > 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            d = np.where(both, (hits_a / counts_a - hits_b / counts_b) / self.hit, np.nan)
        w = np.where(both, (counts_a + counts_b) / 2, 0.0)
        if self.groups is not None:
            codes, _ = pd.factorize(pd.Index(np.asarray(self.groups)))
            totals = np.bincount(codes, weights=w)
            w = np.divide(w, totals[codes], out=np.zeros_like(w), where=totals[codes] > 0)
        return d, w

    def pooled_difference(self, index: np.ndarray) -> float:
        n_a, n_b = self.counts_a[index].sum(), self.counts_b[index].sum()
        if n_a == 0 or n_b == 0:
            return np.nan
        return self.scale * (self.hits_a[index].sum() / n_a - self.hits_b[index].sum() / n_b)


@dataclass(frozen=True)
class Rows:
    """Per-row values: `x` (and `y`: the second variable, or for Cohen's d the group flag, True =
    group 1), `clusters` the unit each row belongs to (None: each row its own unit)."""

    x: Sequence[float]
    y: Sequence[float] | None = None
    clusters: Sequence | None = None


@dataclass(frozen=True)
class Resampled:
    """Any statistic of resampled units: `statistic(index)` on the units at `index` (with
    `vectorized`, a 2-D array, one resample a row)."""

    statistic: Callable[[np.ndarray], Any]
    n_units: int
    paired: bool = False
    vectorized: bool = False


@dataclass(frozen=True)
class Exact:
    """A value computed on every one of `n` rows: no sampling, no interval."""

    value: float
    n: int


@dataclass(frozen=True)
class Missing:
    """Nothing to estimate on `n` units (`method`: the interval it would have had)."""

    n: int = 0
    method: str = ""


UnitData = Outcomes | Shares | Rows | Resampled | Exact | Missing


# --------------------------------------------------------------------------- rows and cases


@dataclass(frozen=True)
class Case:
    """One measured row of a spec: its scope and per-unit data; `fields` fill the spec's text,
    `detail` goes to the row, `describe` names the interval's method from the estimate (the paper's
    words for it)."""

    scope: str
    data: UnitData
    fields: Mapping[str, Any] = field(default_factory=dict)
    detail: str | Callable[[Estimate], str] = ""  # text, or made from the estimate
    describe: Callable[[Estimate], str] | None = None


@dataclass(frozen=True)
class Untestable:
    """A row the run can't measure: verdict "n/a", `reason` in its detail. As a context of
    `evaluate_claims` it carries its own id and statement and is passed through."""

    reason: str
    scope: str = ""
    fields: Mapping[str, Any] = field(default_factory=dict)
    claim: str = ""
    statement: str = ""
    source: str = ""  # as a context: where the paper states it (default: the source of the spec `claim` names)


@dataclass(frozen=True)
class For:
    """A context meant for one spec: its case (or why not) already extracted by the paper, for the
    spec whose `cases` is `only(key)`; every other spec yields nothing on it."""

    key: str
    case: Case | Untestable


def only(key: str) -> Callable[[Any], list[Case | Untestable]]:
    """A spec's `cases` that takes the `For` contexts of `key`."""
    return lambda context: [context.case] if isinstance(context, For) and context.key == key else []


@dataclass(frozen=True)
class ClaimSpec:
    """One claim of a paper as a row (module doc)."""

    id: str
    statement: str
    family: str
    cases: Callable[[Any], Iterable[Case | Untestable]]
    statistic: str = ""
    expect: str = ">"
    threshold: float = 0.0
    margin: float = 0.0
    margin_reason: str = ""
    unit: str = "questions"
    scale: float = 1.0
    source: str = ""

    def __post_init__(self):
        if not self.source:
            raise ValueError(f"{self.id}: a claim names where its paper states it (source: section, table, figure)")
        if self.family not in FAMILIES:
            raise ValueError(f"{self.id}: unknown statistic family {self.family!r}; one of {sorted(FAMILIES)}")
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"{self.id}: expect must be one of {EXPECTATIONS}, got {self.expect!r}")
        if self.expect in (">=", "<=") and not self.margin_reason:
            raise ValueError(
                f"{self.id}: a {self.expect!r} claim states its margin's reason (the paper's, or [CHOICE])"
            )
        if self.margin and self.expect in (">", "<"):
            raise ValueError(f"{self.id}: a margin belongs to '>=' / '<=' claims")


# --------------------------------------------------------------------------- the estimators


def _shares(data: Shares, unit: str) -> Estimate:
    """Paired correctness: one answer per unit on both sides, the exact conditional interval
    (McNemar); several (threads) or an average over groups, every unit answered by both sides, the
    paired sign-flip test over units on each unit's mean difference, exact at any number of
    informative units, with the clustered BCa bootstrap of the statistic for a boundary other than 0;
    sides on different units, the bootstrap (docs/evaluation.md)."""
    points = data.scale * data.hit
    if data.one_outcome():
        exact = paired_accuracy_difference(data.hits_a > 0, data.hits_b > 0)
        return exact.scaled(points) if points != 1.0 else exact
    statistic = data.statistic or data.pooled_difference
    both = bool(np.all((np.asarray(data.counts_a) > 0) & (np.asarray(data.counts_b) > 0)))
    if not (data.exact_allowed or data.groups is not None) or not both:
        # a statistic the test can't reproduce, or sides on different questions (not paired)
        return bootstrap(statistic, len(data.counts_a), unit=unit, paired=data.paired)
    d, w = data.question_differences()
    off_zero = functools.cache(
        lambda: bootstrap(statistic, len(data.counts_a), unit=unit, paired=data.paired).scaled(1 / points)
    )
    est = sign_flip_difference(d, w, off_zero=lambda bound: off_zero(), unit=unit)
    return est.scaled(points) if points != 1.0 else est


def _resampled(data: Resampled, unit: str) -> Estimate:
    return bootstrap(data.statistic, data.n_units, unit=unit, vectorized=data.vectorized, paired=data.paired)


def _cohens_d_rows(d: Rows) -> Estimate:
    values, first = np.asarray(d.x, dtype=float), np.asarray(d.y, dtype=bool)
    if d.clusters is None:
        return cohens_d(values[first], values[~first])
    clusters = np.asarray(list(d.clusters), dtype=object)
    return cohens_d(values[first], values[~first], clusters_1=clusters[first], clusters_0=clusters[~first])


def _shares_bootstrap(data: Shares, unit: str) -> Estimate:
    return bootstrap(data.statistic or data.pooled_difference, len(data.counts_a), unit=unit, paired=data.paired)


# family -> {per-unit data class -> estimator(data, unit)}: which interval (and test) each family's data gets
FAMILIES: dict[str, dict[type, Callable[[Any, str], Estimate]]] = {
    PAIRED_ACCURACY: {Outcomes: lambda d, unit: paired_accuracy_difference(d.a, d.b), Shares: _shares},
    PROPORTION: {Outcomes: lambda d, unit: proportion(int(np.sum(np.asarray(d.a, dtype=bool))), len(d.a))},
    MEAN: {Rows: lambda d, unit: mean_estimate(d.x, clusters=d.clusters, unit=unit), Resampled: _resampled},
    DIFFERENCE: {
        Rows: lambda d, unit: paired_difference(d.x, d.y, clusters=d.clusters, unit=unit),
        Shares: _shares_bootstrap,
        Resampled: _resampled,
    },
    CORRELATION: {Rows: lambda d, unit: correlation(d.x, d.y, clusters=d.clusters), Resampled: _resampled},
    COHENS_D: {Rows: lambda d, unit: _cohens_d_rows(d), Resampled: _resampled},
    SLOPE: {Rows: lambda d, unit: slope(d.x, d.y, unit=unit, clusters=d.clusters), Resampled: _resampled},
    EXACT: {Exact: lambda d, unit: Estimate.exact(d.value, d.n)},
}


def estimate(spec: ClaimSpec, data: UnitData) -> Estimate:
    """The estimate of `data` by `spec`'s family, in the spec's scale."""
    if isinstance(data, Missing):
        return Estimate.missing(data.n, data.method)
    estimators = FAMILIES[spec.family]
    if type(data) not in estimators:
        raise TypeError(f"{spec.id}: a {spec.family} claim takes {[c.__name__ for c in estimators]}, not {data!r}")
    result = estimators[type(data)](data, spec.unit)
    return result.scaled(spec.scale) if spec.scale != 1.0 else result


def _text(spec: ClaimSpec, template: str, fields: Mapping[str, Any]) -> str:
    try:
        return template.format(**fields)
    except KeyError as missing:
        raise ValueError(f"{spec.id}: {template!r} needs the case's field {missing}; it has {dict(fields)}") from None


def measure(spec: ClaimSpec, case: Case | Untestable) -> Claim:
    """One row of the claims file."""
    statement = _text(spec, spec.statement, case.fields)
    if isinstance(case, Untestable):
        return Claim.untestable(spec.id, statement, case.reason, case.scope, spec.source)
    result = estimate(spec, case.data)
    if case.describe is not None:
        result = result.described(case.describe(result))
    return Claim.measured(
        spec.id,
        statement,
        case.scope,
        _text(spec, spec.statistic, case.fields),
        result,
        spec.expect,
        spec.threshold,
        case.detail(result) if callable(case.detail) else case.detail,
        spec.margin,
        spec.source,
    )


def evaluate_claims(specs: Sequence[ClaimSpec], contexts: Iterable[Any]) -> list[Claim]:
    """Every spec on each context in turn; an `Untestable` context is a row of its own, its source its
    own or that of the spec with its id."""
    sources = {spec.id: spec.source for spec in reversed(specs)}  # the first spec of an id
    claims = []
    for context in contexts:
        if isinstance(context, Untestable):
            source = context.source or sources.get(context.claim, "")
            if not source:
                raise ValueError(f"{context.claim}: an untestable row names where its paper states it (source)")
            claims.append(Claim.untestable(context.claim, context.statement, context.reason, context.scope, source))
            continue
        for spec in specs:
            claims.extend(measure(spec, case) for case in spec.cases(context))
    return claims
