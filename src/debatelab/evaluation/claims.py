"""Checkable claims: the direction of each claim a spec lists as testable on CPU, measured on this
run. A claim that the run can't test (its protocols or runs are not in the config, or too few
questions) is a row with `holds` empty and the reason in `detail`, never left out.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

CLAIM_COLUMNS = ["claim", "statement", "scope", "statistic", "value", "holds", "n", "detail"]


@dataclass(frozen=True)
class Claim:
    claim: str  # the spec's number, e.g. "§11.1"
    statement: str
    scope: str = ""  # dataset / protocol / run the row measures
    statistic: str = ""  # what `value` is
    value: float = float("nan")
    holds: bool | None = None  # None: not testable here
    n: int = 0  # questions, trajectories or steps behind the value
    detail: str = ""

    @classmethod
    def untestable(cls, claim: str, statement: str, reason: str, scope: str = "") -> "Claim":
        return cls(claim, statement, scope=scope, detail=reason)


def claims_frame(claims: list[Claim]) -> pd.DataFrame:
    frame = pd.DataFrame([asdict(c) for c in claims], columns=CLAIM_COLUMNS)
    # yes / no / n/a reads better than True / False / empty in a CSV and the report
    frame["holds"] = [("n/a" if h is None else "yes" if h else "no") for h in frame["holds"]]
    return frame


def finite(value: float) -> bool:
    return value is not None and bool(np.isfinite(value))
