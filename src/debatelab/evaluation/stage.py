"""Evaluation stage: each paper's tables rebuilt from this run's outputs, next to the published
numbers, with the direction of every checkable claim.

Outputs of `evaluate_paper` (results/{experiment}/tables/{paper}/):

- ``<table>.csv``: a paper table in the paper's layout (rows and columns as printed; cells in
  the paper's units), built from this run;
- ``<table>_vs_paper.csv``: one row per published cell of that table (`config/paper_numbers/`):
  the cell's keys, paper_value, run_value (empty where this run has no such cell), difference
  (run − paper), run_dataset (the run's dataset standing in for the paper's), n, paper_where;
- ``claims.csv``: one row per checkable claim of the spec: claim, statement, scope, statistic,
  value, its 95 % interval (low, high), expect (what the claim says of value), verdict (holds /
  fails / inconclusive / n/a, `evaluation.claims`), n, interval (how it was made), detail;
- ``<figure>.png``: the paper's plots;
- ``<name>.html`` beside every CSV: the same table rendered for the report (a CSV can only be
  downloaded from a Snakemake report, an HTML file opens in it);
- with `report_to` (`debatelab.tracking`), every one of those tables also goes to the trackers, as
  Markdown text in TensorBoard (``tensorboard/``), a table in W&B, trackio and MLflow.

A run on a small model won't match the numbers; the claims rows are what a CPU run can check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..config import PAPER_TITLES, PAPERS
from ..io import save_figure_atomic, write_text_atomic
from ..tracking import open_tracker
from .claims import Claim, claims_frame, verdict_counts
from .paper_numbers import PAPER_NUMBERS_DIR, compare_with_paper, load_paper_numbers
from .run import RunOutputs

log = logging.getLogger(__name__)


@dataclass
class PaperEvaluation:
    """What one paper's builder returns."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # name -> paper layout
    cells: dict[str, pd.DataFrame] = field(default_factory=dict)  # name -> long run cells (see paper_numbers)
    claims: list[Claim] = field(default_factory=list)
    figures: dict = field(default_factory=dict)  # name -> matplotlib figure


def _builder(paper: str) -> Callable[[RunOutputs], PaperEvaluation]:
    import importlib

    return importlib.import_module(f"{__package__}.papers.{paper}").evaluate


HTML_STYLE = """<style>
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 12px; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
th { background: #f0f0f0; } td:first-child, th:first-child { text-align: left; } caption { text-align: left; }
</style>"""


def html_table(frame: pd.DataFrame, heading: str, note: str = "") -> str:
    """A self-contained HTML page with the table (numbers to 4 significant digits, empty cells blank)."""
    from html import escape

    body = frame.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0, classes="table")
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(heading)}</title>{HTML_STYLE}</head>"
        f"<body><h3>{escape(heading)}</h3><p>{escape(note)}</p>{body}</body></html>"
    )


def report_section(name: str) -> str:
    """The report subsection of one file of tables/<paper>/ (its name without the suffix)."""
    if name == "claims":
        return "Checkable claims"
    return "Beside the published numbers" if name.endswith("_vs_paper") else "Tables and plots"


def build_paper(paper: str, outputs: RunOutputs) -> PaperEvaluation:
    if paper not in PAPERS:
        raise ValueError(f"evaluation: unknown paper {paper!r}; expected one of {list(PAPERS)}")
    return _builder(paper)(outputs)


def evaluate_paper(
    paper: str,
    outputs: RunOutputs,
    out_dir: str | Path,
    numbers_dir: str | Path = PAPER_NUMBERS_DIR,
    report_to: str | list[str] | None = None,
) -> PaperEvaluation:
    """Build one paper's tables, comparisons, claims and figures and write them to `out_dir`; every
    table also goes to the trackers `report_to` names (None: none), run `evaluate-<paper>`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = build_paper(paper, outputs)
    title = f"{PAPER_TITLES[paper]}, run {outputs.experiment}"

    written: dict[str, pd.DataFrame] = {}

    def write(frame: pd.DataFrame, name: str, heading: str, note: str = "") -> None:
        written[f"{paper}/{name}"] = frame
        write_text_atomic(frame.to_csv(index=False, float_format="%.4g"), out_dir / f"{name}.csv")
        write_text_atomic(html_table(frame, f"{heading} ({title})", note), out_dir / f"{name}.html")

    published_tables = load_paper_numbers(paper, numbers_dir)
    for name, table in result.tables.items():
        where = published_tables[name]["where"].iloc[0] if name in published_tables else ""
        write(table, name, name, f"The paper's {where}, rebuilt from this run." if where else "Built from this run.")
    for name, published in published_tables.items():
        cells = result.cells.get(name)
        if cells is None:
            cells = pd.DataFrame(columns=[c for c in published.columns if c != "where"] + ["n", "run_dataset"])
        vs = compare_with_paper(cells, published)
        filled = int(vs["run_value"].notna().sum())
        write(
            vs,
            f"{name}_vs_paper",
            f"{name} beside the paper",
            f"{published['where'].iloc[0]}: {filled} of {len(vs)} published cells have a value in this run "
            "(run_dataset: this run's dataset standing in for the paper's).",
        )
        log.info("%s %s: %d of %d published cells have a run value", paper, name, filled, len(vs))
    claims = claims_frame(result.claims)
    write(
        claims,
        "claims",
        "checkable claims",
        f"{verdict_counts(claims)}. Each verdict reads the 95 % interval [low, high] of the statistic against "
        "what the claim expects; directions only: a small model on CPU won't match the published magnitudes.",
    )
    log.info("%s claims: %s", paper, claims["verdict"].value_counts().to_dict())
    for name, fig in result.figures.items():
        save_figure_atomic(fig, out_dir / f"{name}.png")
    with open_tracker(
        report_to,
        out_dir / "tensorboard",
        project=outputs.experiment,
        name=f"evaluate-{paper}",
        tags=[outputs.experiment, "evaluate", paper],
        config={"paper": paper, "experiment": outputs.experiment},
    ) as tracker:
        tracker.log_tables(written)
    return result
