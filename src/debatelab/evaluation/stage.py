"""Evaluation stage: each paper's tables rebuilt from this run's outputs, next to the published
numbers, with the direction of every checkable claim.

Outputs of `evaluate_paper` (results/{experiment}/tables/{paper}/):

- ``<table>.csv``: a paper table in the paper's layout (rows and columns as printed; cells in
  the paper's units), built from this run;
- ``<table>_vs_paper.csv``: one row per published cell of that table (`config/paper_numbers/`):
  the cell's keys, paper_value, run_value (empty where this run has no such cell), run_low and
  run_high (its 95 % interval where the paper's builder gives one: `paper_numbers.cell_intervals`),
  paper_in_interval (whether the paper's value lies in it), difference (run − paper), run_dataset
  (the run's dataset standing in for the paper's), n, paper_where;
- ``claims.csv``: one row per checkable claim of the paper: claim (its short id in the paper),
  source (where the paper states it: section, table, figure, equation), statement, scope, statistic,
  value, its 95 % interval (low, high), expect (what the claim says of value), margin (of a ">=" /
  "<=" claim), verdict (holds / fails / inconclusive / n/a / n/a (too few), `evaluation.claims`),
  p (the test the interval inverts, at the claim's boundary), p_holm and verdict_holm (after
  Holm's adjustment over the paper's claims), n, interval (how it was made), detail;
- ``<figure>.png``: the paper's plots;
- ``<name>.html`` beside every CSV: the same table rendered for the report (a CSV can only be
  downloaded from a Snakemake report, an HTML file opens in it);
- with `report_to` (`debatelab.tracking`), every one of those tables also goes to the trackers, as
  Markdown text in TensorBoard (``tensorboard/``), a table in W&B, trackio and MLflow.

A run on a small model won't match the numbers; the claims rows are what a CPU run can check.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ..io import save_figure_atomic, write_text_atomic
from ..tracking import open_tracker
from .claims import claims_frame, verdict_counts
from .paper_numbers import PAPER_NUMBERS_DIR, compare_with_paper, load_paper_numbers
from .papers import PAPER_TITLES, PAPERS
from .result import PaperEvaluation
from .run import RunOutputs

log = logging.getLogger(__name__)


HTML_STYLE = """<style>
body { font-family: system-ui, sans-serif; font-size: 13px; margin: 12px; }
table { border-collapse: collapse; width: 100%; } th, td { border: 1px solid #ccc; padding: 2px 6px; }
th { background: #f0f0f0; text-align: center; } td { vertical-align: top; text-align: left; }
td.number { text-align: right; white-space: nowrap; }
.subline { color: #666; font-size: 11px; margin-top: 2px; white-space: normal; }  /* wraps in a number cell too */
td.holds { background: #dff0d8; } td.fails { background: #f2dede; } td.inconclusive { background: #f5f5f5; }
</style>"""


def claims_view(claims: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The claims page as a reader scans it: claim, statement, verdict, value, its 95 % interval
    [low, high], n and the expectation as columns; where the paper states the claim (`source`) as a
    small line under its id, and scope, statistic, how the interval was made (`interval` in the CSV)
    and the detail as one under the statement, so the table fits the report's pane."""

    def bounds(low, high) -> str:
        return "" if pd.isna(low) or pd.isna(high) else f"[{low:.4g}, {high:.4g}]"

    def expectation(expect, margin) -> str:
        return f"{expect}, margin {margin:g}" if isinstance(margin, (int, float)) and np.isfinite(margin) else expect

    def tests(row) -> str:
        """p at the boundary and, where Holm's adjustment over the paper's claims changes the verdict, that."""
        p, p_holm, holm = row.get("p", np.nan), row.get("p_holm", np.nan), row.get("verdict_holm", "")
        if not isinstance(p, (int, float)) or not np.isfinite(p):
            return ""
        text = f"p = {p:.3g}, Holm p = {p_holm:.3g}" if np.isfinite(p_holm) else f"p = {p:.3g}"
        return f"{text}: {holm}" if holm and holm != row["verdict"] else text

    view = claims.assign(**{"95 % interval": [bounds(lo, hi) for lo, hi in zip(claims["low"], claims["high"])]})
    if "margin" in claims:
        view["expect"] = [expectation(e, m) for e, m in zip(claims["expect"], claims["margin"])]
    view = view[["claim", "statement", "verdict", "value", "95 % interval", "n", "expect"]]
    parts = claims[["scope", "statistic", "interval", "detail"]].fillna("").astype(str).to_numpy()
    held = [tests(row) for _, row in claims.iterrows()]
    sources = claims["source"].fillna("").astype(str).tolist() if "source" in claims else [""] * len(claims)
    return view, {
        "claim": sources,
        "statement": [" · ".join(p for p in [*row, h] if p) for row, h in zip(parts, held)],
    }


def vs_paper_view(vs: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """The vs-paper page's table: the run value's interval and whether the paper's value lies in it
    as small print under the run value (three columns more would widen the page past its pane), and
    paper_where left out when one table's rows all share it (the page's note names it)."""
    drop = ["run_low", "run_high", "paper_in_interval"]
    if vs["paper_where"].nunique() <= 1:
        drop.append("paper_where")
    under = []
    for low, high, inside in zip(vs["run_low"], vs["run_high"], vs["paper_in_interval"]):
        if pd.isna(low) or pd.isna(high):
            under.append("")
        else:
            where = "" if inside is None or pd.isna(inside) else (" holds paper" if inside else " excludes paper")
            under.append(f"95 % [{low:.4g}, {high:.4g}]{where}")
    return vs.drop(columns=drop), {"run_value": under}


def html_table(frame: pd.DataFrame, heading: str, note: str = "", sublines: dict[str, list[str]] | None = None) -> str:
    """A self-contained HTML page with the table that fits the report's pane: text wraps and is left
    aligned, numbers (4 significant digits) are right aligned, empty cells blank, a verdict column is
    coloured by verdict. `sublines[column][i]` is small print under row i's cell of that column."""
    from html import escape

    sublines = sublines or {}

    def cell(value, column: str, i: int) -> str:
        under = sublines.get(column, [""] * (i + 1))[i]
        under = f"<div class='subline'>{escape(under)}</div>" if under else ""
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return f"<td>{under}</td>"
        if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            text = f"{value:.4g}" if isinstance(value, (float, np.floating)) else str(value)
            return f"<td class='number'>{escape(text)}{under}</td>"
        text = str(value)
        verdict = f" class='{text}'" if column == "verdict" and text in ("holds", "fails", "inconclusive") else ""
        return f"<td{verdict}>{escape(text)}{under}</td>"

    header = _header_rows([str(c) for c in frame.columns])
    rows = "".join(
        "<tr>" + "".join(cell(v, str(c), i) for c, v in zip(frame.columns, row)) + "</tr>"
        for i, row in enumerate(frame.itertuples(index=False, name=None))
    )
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{escape(heading)}</title>{HTML_STYLE}</head>"
        f"<body><h3>{escape(heading)}</h3><p>{escape(note)}</p>"
        f"<table class='table'><thead>{header}</thead><tbody>{rows}</tbody></table></body></html>"
    )


def _header_rows(columns: list[str]) -> str:
    """The table head. Runs of columns named "<group> <name>" ("asdiv Maj", "asdiv Debate", ...) get
    the group once above them, as the papers lay out their tables, so the page stays narrow; every
    underscore is a break opportunity, so long names wrap instead of widening the table."""
    from html import escape

    def label(text: str) -> str:
        return escape(text).replace("_", "_<wbr>")

    groups = [c.rsplit(" ", 1) if " " in c else [None, c] for c in columns]
    runs: list[list[int]] = []
    for i, (group, _) in enumerate(groups):
        if runs and group is not None and groups[runs[-1][0]][0] == group:
            runs[-1].append(i)
        else:
            runs.append([i])
    if all(len(run) == 1 for run in runs):
        return "<tr>" + "".join(f"<th>{label(c)}</th>" for c in columns) + "</tr>"
    top, bottom = [], []
    for run in runs:
        if len(run) == 1:
            top.append(f"<th rowspan='2'>{label(columns[run[0]])}</th>")
        else:
            top.append(f"<th colspan='{len(run)}'>{label(groups[run[0]][0])}</th>")
            bottom += [f"<th>{label(groups[i][1])}</th>" for i in run]
    return f"<tr>{''.join(top)}</tr><tr>{''.join(bottom)}</tr>"


def report_section(name: str) -> str:
    """The report subsection of one file of tables/<paper>/ (its name without the suffix)."""
    if name == "claims":
        return "Checkable claims"
    return "Beside the published numbers" if name.endswith("_vs_paper") else "Tables and plots"


def build_paper(paper: str, outputs: RunOutputs) -> PaperEvaluation:
    if paper not in PAPERS:
        raise ValueError(f"evaluation: unknown paper {paper!r}; expected one of {list(PAPERS)}")
    return PAPERS[paper].evaluate(outputs)


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

    def write(frame: pd.DataFrame, name: str, heading: str, note: str = "", view=None) -> None:
        """`view`: the HTML page's (frame, sublines) where it differs from the CSV's frame."""
        written[f"{paper}/{name}"] = frame
        write_text_atomic(frame.to_csv(index=False, float_format="%.4g"), out_dir / f"{name}.csv")
        shown, sublines = view or (frame, None)
        write_text_atomic(html_table(shown, f"{heading} ({title})", note, sublines), out_dir / f"{name}.html")

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
        judged = vs["paper_in_interval"].dropna()
        write(
            vs,
            f"{name}_vs_paper",
            f"{name} beside the paper",
            f"{published['where'].iloc[0]}: {filled} of {len(vs)} published cells have a value in this run "
            "(run_dataset: this run's dataset standing in for the paper's)"
            + (
                f"; {int(judged.astype(bool).sum())} of the {len(judged)} with a 95 % interval (small print) "
                "hold the paper's value within it."
                if len(judged)
                else "."
            ),
            view=vs_paper_view(vs),
        )
        log.info("%s %s: %d of %d published cells have a run value", paper, name, filled, len(vs))
    claims = claims_frame(result.claims)
    write(
        claims,
        "claims",
        "checkable claims",
        f"{verdict_counts(claims)}. Each verdict reads the 95 % interval [low, high] of the statistic against "
        "what the claim expects; directions only: a small model on CPU won't match the published magnitudes.",
        view=claims_view(claims),
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
