"""The uncertainty stage's plot: accuracy of the least uncertain questions, one line per measure."""

from __future__ import annotations

import pandas as pd

from .figures import subplots


def plot_selective_prediction(curves: pd.DataFrame, title: str):
    """Accuracy against kept fraction, one line per measure (columns measure, fraction, accuracy)."""
    fig, ax = subplots(figsize=(6, 4))
    for measure, curve in curves.groupby("measure", sort=False):
        curve = curve.sort_values("fraction", kind="stable")
        ax.plot(curve["fraction"], curve["accuracy"], marker="o", markersize=3, label=measure)
    ax.set_xlabel("fraction of questions kept (least uncertain first)")
    ax.set_ylabel("accuracy of kept questions")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize="small")
    fig.tight_layout()
    return fig
