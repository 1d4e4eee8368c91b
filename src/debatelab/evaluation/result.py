"""What one paper's builder (`evaluation/papers/<paper>.py`'s `evaluate`) returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from .claims import Claim


@dataclass
class PaperEvaluation:
    """What one paper's builder returns."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # name -> paper layout
    cells: dict[str, pd.DataFrame] = field(default_factory=dict)  # name -> long run cells (see paper_numbers)
    claims: list[Claim] = field(default_factory=list)
    figures: dict = field(default_factory=dict)  # name -> matplotlib figure
