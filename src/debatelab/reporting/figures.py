"""The figure convention: a plot function builds and returns a matplotlib figure; the caller saves
it with `debatelab.io.save_figure_atomic` (the one writer: temporary file, rename, close)."""

from __future__ import annotations


def subplots(*args, **kwargs):
    """`matplotlib.pyplot.subplots` on the headless Agg backend (jobs have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)
