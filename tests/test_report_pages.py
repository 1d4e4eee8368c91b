"""The report's pages read at a glance: the front page's settings are a list (one item per dataset,
model, agent, protocol and run), the evaluation's HTML tables fit the report's pane (text wraps,
grouped headers, the claims page leads with claim, verdict, value and interval)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from docutils.core import publish_parts
from jinja2 import Environment

from debatelab.config import validate_config
from debatelab.evaluation.claims import CLAIM_COLUMNS
from debatelab.evaluation.stage import claims_view, html_table

REPO = Path(__file__).resolve().parents[1]


class _Cells(HTMLParser):
    """Every <li>, <th> and <td> as (tag, attributes, text), nested tags' text included."""

    def __init__(self):
        super().__init__()
        self.cells, self._open = [], []

    def handle_starttag(self, tag, attrs):
        if tag in ("li", "th", "td"):
            self._open.append([tag, dict(attrs), ""])

    def handle_endtag(self, tag):
        if tag in ("li", "th", "td") and self._open:
            self.cells.append(tuple(self._open.pop()))

    def handle_data(self, data):
        for cell in self._open:
            cell[2] += data


def _cells(html: str, tag: str) -> list[tuple[str, dict, str]]:
    parser = _Cells()
    parser.feed(html)
    return [c for c in parser.cells if c[0] == tag]


@pytest.mark.parametrize("config_file", ["config/config.yaml", "tests/configs/tiny.yaml"])
def test_front_page_settings_are_one_list_item_each(config_file):
    """Rendered as Snakemake renders it (Jinja with trim_blocks and lstrip_blocks, then docutils):
    a tag that ends a line must not join the items into one run-on line."""
    config = validate_config(yaml.safe_load((REPO / config_file).read_text()))

    class Snakemake:
        pass

    Snakemake.config = config
    env = Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string((REPO / "report/workflow.rst").read_text()).render(snakemake=Snakemake)
    html = publish_parts(text, writer="html")["html_body"]
    items = [re.sub(r"\s+", " ", t).strip() for _, _, t in _cells(html, "li")]
    for block in ("datasets", "models", "agents"):
        for name in config[block]:
            # exactly one item starts with the name, and it names nothing else of its block
            own = [t for t in items if t.startswith(f"{name}:")]
            assert len(own) == 1, (block, name, items)
            others = [o for o in config[block] if o != name and not o.startswith(name) and not name.startswith(o)]
            assert not any(f"{o}:" in own[0] for o in others), (block, name, own[0])
    for name in config["debate"]["protocols"]:
        assert sum(t.startswith(f"{name}:") for t in items) == 1, name
    assert sum(t.startswith("zero-shot samples per question:") for t in items) == 1
    assert not re.search(r"\b1 (rounds|steps)\b", " ".join(items))


def test_html_table_aligns_numbers_and_colours_verdicts():
    frame = pd.DataFrame(
        {"claim": ["§1", "§2"], "verdict": ["holds", "inconclusive"], "value": [0.123456, np.nan], "n": [40, 3]}
    )
    html = html_table(frame, "claims <run>", "a note", sublines={"claim": ["scope · stat", ""]})
    cells = _cells(html, "td")
    by_text = {text: attrs.get("class") for _, attrs, text in cells}
    assert by_text["0.1235"] == "number" and by_text["40"] == "number"  # 4 significant digits, right aligned
    assert by_text["holds"] == "holds" and by_text["inconclusive"] == "inconclusive"
    assert "§1scope · stat" in by_text and by_text["§2"] is None  # the subline sits in its row's cell only
    assert "<td></td>" in html  # NaN is a blank cell
    assert "claims &lt;run&gt;" in html  # text is escaped


def test_the_vs_paper_page_puts_the_run_interval_under_the_run_value():
    from debatelab.evaluation.stage import vs_paper_view

    vs = pd.DataFrame(
        {
            "dataset": ["gsm8k", "gsm8k", "hle"],
            "paper_value": [51.2, 84.6, 20.0],
            "run_value": [46.666666, 75.0, np.nan],
            "run_low": [31.2, 19.41, np.nan],
            "run_high": [62.6, 99.37, np.nan],
            "paper_in_interval": [True, False, None],
            "difference": [-4.53, -9.6, np.nan],
            "run_dataset": ["gsm_symbolic", "gsm_symbolic", None],
            "n": [30, 4, np.nan],
            "paper_where": "Table 1",
        }
    )
    shown, sublines = vs_paper_view(vs)
    assert "run_low" not in shown and "paper_in_interval" not in shown and "paper_where" not in shown
    assert sublines["run_value"] == ["95 % [31.2, 62.6] holds paper", "95 % [19.41, 99.37] excludes paper", ""]
    by_text = {text: attrs.get("class") for _, attrs, text in _cells(html_table(shown, "t", sublines=sublines), "td")}
    assert by_text["46.6795 % [31.2, 62.6] holds paper"] == "number"  # 4 digits, then the small print


def test_grouped_columns_get_one_header_above_them():
    frame = pd.DataFrame(
        [[1, 0.5, 0.6, 0.1, 0.4, 0.5, 0.1]],
        columns=["n_agents", "asdiv Maj", "asdiv Debate", "asdiv Δ", "gsm8k Maj", "gsm8k Debate", "gsm8k Δ"],
    )
    heads = _cells(html_table(frame, "t"), "th")
    assert [(t, a.get("colspan")) for _, a, t in heads if a.get("colspan")] == [("asdiv", "3"), ("gsm8k", "3")]
    assert [t for _, a, t in heads if not a] == ["Maj", "Debate", "Δ", "Maj", "Debate", "Δ"]
    assert [t for _, a, t in heads if a.get("rowspan")] == ["n_agents"]
    # no group: one header row, names kept whole
    plain = _cells(html_table(frame[["n_agents"]].assign(paper_value=1.0), "t"), "th")
    assert [t for _, _, t in plain] == ["n_agents", "paper_value"]


def test_claims_page_leads_with_verdict_value_and_interval():
    names = ["claim", "statement", "scope", "statistic", "value", "low", "high", "expect", "verdict", "n"]
    names += ["interval", "detail", "margin", "p", "p_holm", "verdict_holm", "source"]
    claims = pd.DataFrame(
        [
            ["x-1", "x rises", "mad", "mean Δx", 0.2, 0.05, 0.35, ">= 0", "holds", 50, "paired bootstrap", ""]
            + [0.5, 0.01, 0.06, "inconclusive (Holm)", "X §4.3, Table 3"],
            ["x-2", "y falls", "", "", np.nan, np.nan, np.nan, "", "n/a", 0, "", "needs a trained pair"]
            + [np.nan, np.nan, np.nan, "n/a", "X App. B, Figure 7"],
        ],
        columns=names,
    )[CLAIM_COLUMNS]
    view, sublines = claims_view(claims)
    assert list(view.columns)[:5] == ["claim", "statement", "verdict", "value", "95 % interval"]
    assert view["95 % interval"].tolist() == ["[0.05, 0.35]", ""]
    assert view["expect"].tolist() == [">= 0, margin 0.5", ""]
    assert sublines["statement"] == [
        "mad · mean Δx · paired bootstrap · p = 0.01, Holm p = 0.06: inconclusive (Holm)",
        "needs a trained pair",
    ]
    assert sublines["claim"] == ["X §4.3, Table 3", "X App. B, Figure 7"]  # where the paper states it
    assert len(view.columns) <= 7  # the rest rides under the statement: the table fits the pane
