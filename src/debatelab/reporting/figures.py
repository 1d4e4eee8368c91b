"""The figure convention: a plot function builds and returns a matplotlib figure; the caller saves
it with `debatelab.io.save_figure_atomic` (the one writer: temporary file, rename, close)."""

from __future__ import annotations

#: The report shows a figure scaled to its pane (about 700 px), often half the saved width: text
#: larger than matplotlib's 10 pt default stays legible there.
REPORT_STYLE = {
    "font.size": 13,
    "axes.titlesize": 13,
    "axes.labelsize": 13,
    "xtick.labelsize": 12,
    "ytick.labelsize": 12,
    "legend.fontsize": 11,
    "figure.titlesize": 14,
}


def subplots(*args, **kwargs):
    """`matplotlib.pyplot.subplots` on the headless Agg backend (jobs have no display), with the
    report's font sizes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # set, not a context: labels, ticks and legends are made after this returns
    matplotlib.rcParams.update(REPORT_STYLE)
    return plt.subplots(*args, **kwargs)
