"""SVR-MAD's claims (Jiang et al., arXiv:2605.23099 §5.1, Table 1) as `claim_engine.ClaimSpec` rows
(`SPECS`, ids svr-1 to svr-5): differences of Table 1 cells between SVR-MAD and a baseline on one
(backbone, dataset), paired over questions (`cell_shares`; the tables are `svr_mad`'s)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import pandas as pd

from ...intervals import Estimate
from ..claim_engine import DIFFERENCE, PAIRED_ACCURACY, Case, ClaimSpec, Shares, Untestable, evaluate_claims
from ..claims import Claim
from ..run import RunOutputs

# The paper's row names per protocol kind; all_to_all is Du et al.'s MAD (inside SID-ET).
from .svr_mad import METRICS


def question_totals(outputs: RunOutputs) -> pd.DataFrame:
    """Per (dataset, protocol, question_id) over the valid (non-unanimous) rows: how many there are
    (`rows`: one per thread) and their sums of NComm, Tok (×10³) and Acc (points). A Table 1 cell is
    sum / rows over all questions, so a claim can resample questions and recompute the cells."""
    q = outputs.questions
    columns = ["dataset", "protocol", "question_id", "rows", *METRICS]
    if q.empty:
        return pd.DataFrame(columns=columns)
    valid = q[~q["pre_unanimous"].astype(bool)]
    per_row = pd.DataFrame(
        {
            "dataset": valid["dataset"],
            "protocol": valid["protocol"],
            "question_id": valid["question_id"],
            "rows": 1,
            "NComm": valid["ncomm"].astype(float),
            "Tok": valid["total_tokens"].astype(float) / 1000,
            "Acc": 100 * valid["correct"].astype(float),
        }
    )
    return per_row.groupby(["dataset", "protocol", "question_id"], sort=False)[["rows", *METRICS]].sum().reset_index()


def cell_shares(totals: pd.DataFrame, dataset: str, protocol_a: str, protocol_b: str, metric: str) -> Shares:
    """Per question of either protocol on one dataset: the sums of `metric` (Acc in points) and the
    rows (threads) of each side, 0 where a question was valid for one protocol only (it counts on
    its side). A Table 1 cell is sum / rows over the questions, so both cells are recomputed on the
    questions a resample draws (all threads of a question together, paired)."""
    part = totals[totals["dataset"] == dataset]
    a = part[part["protocol"] == protocol_a].set_index("question_id")
    b = part[part["protocol"] == protocol_b].set_index("question_id")
    ids = a.index.union(b.index, sort=False)
    a, b = a.reindex(ids, fill_value=0), b.reindex(ids, fill_value=0)
    return Shares(
        a[metric].to_numpy(float),
        a["rows"].to_numpy(float),
        b[metric].to_numpy(float),
        b["rows"].to_numpy(float),
        hit=100,
    )


def _mcnemar_named(estimate: Estimate) -> str:
    """The exact interval's method with its McNemar p (`claims.accuracy_difference`'s words)."""
    return (
        f"{estimate.method}; McNemar exact p = {estimate.p:.3g}"
        if estimate.method.startswith("exact")
        else estimate.method
    )


@dataclass(frozen=True)
class Block:
    """One (backbone, dataset) block of Table 1: the claims' context."""

    scope: str
    run_dataset: str
    protocol: dict  # row name -> protocol
    totals: pd.DataFrame


def _versus(first: str, second: str, metric: str, fields: dict | None = None):
    """Cases of `first`'s cell minus `second`'s for `metric` where both rows are in the block; a
    "{baseline}" in either name is each baseline of `fields["baselines"]` in turn."""

    def cases(block: Block):
        for baseline in (fields or {}).get("baselines", [None]):
            a, b = (name.format(baseline=baseline) for name in (first, second))
            if a in block.protocol and b in block.protocol:
                data = cell_shares(block.totals, block.run_dataset, block.protocol[a], block.protocol[b], metric)
                yield Case(block.scope, data, {"baseline": baseline}, describe=_mcnemar_named)

    return cases


ALL = "svr-1..5"  # a block none of the claims can be tested on
ALL_SOURCE = "SVR-MAD §5.1, Table 1"

# differences of Table 1 cells on one (backbone, dataset), paired over questions
SPECS = [
    ClaimSpec(
        "svr-1",
        "SVR-MAD sends fewer messages than all-to-all MAD",
        DIFFERENCE,
        _versus("SVR-MAD", "MAD", "NComm"),
        "NComm(SVR-MAD) − NComm(MAD)",
        "<",
        source="SVR-MAD §2 (all-to-all MAD), §4 (Algorithm 1)",
    ),
    ClaimSpec(
        "svr-2",
        "NComm: SVR-MAD < {baseline}",
        DIFFERENCE,
        _versus("SVR-MAD", "{baseline}", "NComm", {"baselines": ["SID-ET", "GroupDebate", "S2-MAD"]}),
        "NComm(SVR-MAD) − NComm({baseline})",
        "<",
        source="SVR-MAD §5.1, Table 1 (NComm)",
    ),
    ClaimSpec(
        "svr-3",
        "Tokens: Self Consistency < SVR-MAD",
        DIFFERENCE,
        _versus("Self Consistency", "SVR-MAD", "Tok"),
        "Tok(SC) − Tok(SVR-MAD), ×10³",
        "<",
        source="SVR-MAD §5, Table 1 (Tok; Self Consistency, the no-debate reference)",
    ),
    ClaimSpec(
        "svr-4",
        "SVR-MAD accuracy ≥ Self Consistency",
        PAIRED_ACCURACY,
        _versus("SVR-MAD", "Self Consistency", "Acc"),
        "Acc(SVR-MAD) − Acc(SC), points",
        ">=",
        margin=0.0,
        margin_reason="[CHOICE] margin 0 points: the paper (SVR-MAD, arXiv:2605.23099, Table 1) reports "
        "SVR-MAD above Self Consistency on every benchmark, a gain, not 'no worse within δ'",
        source="SVR-MAD §5.1, Table 1 (Acc)",
    ),
    ClaimSpec(
        "svr-5",
        "Tokens: SVR-MAD < {baseline}",
        DIFFERENCE,
        _versus("SVR-MAD", "{baseline}", "Tok", {"baselines": ["S2-MAD", "GroupDebate"]}),
        "Tok(SVR-MAD) − Tok({baseline}), ×10³",
        "<",
        source="SVR-MAD §5.1, Table 1 (Tok)",
    ),
]


def blocks(cells: pd.DataFrame, totals: pd.DataFrame) -> list[Block | Untestable]:
    """The claims' contexts: each (backbone, dataset) block of Table 1, or why it can't be tested."""
    out = []
    backbones = cells["llm"] if "llm" in cells else pd.Series("", index=cells.index)
    for (llm, run_dataset), g in cells.groupby([backbones, "run_dataset"], sort=False):
        dataset = f"{run_dataset} ({llm})" if llm and backbones.nunique() > 1 else run_dataset
        protocol = dict(zip(g["method"], g["protocol"]))
        untestable = partial(
            Untestable, scope=dataset, claim=ALL, statement="SVR-MAD against the baselines", source=ALL_SOURCE
        )
        if "SVR-MAD" not in protocol:
            out.append(untestable("no svr_mad protocol"))
        elif int(g.set_index("method").loc["SVR-MAD", "n"]) == 0:
            out.append(untestable("no non-unanimous question (every debate starts in agreement)"))
        else:
            out.append(Block(dataset, run_dataset, protocol, totals))
    return out


def paper_claims(cells: pd.DataFrame, outputs: RunOutputs) -> list[Claim]:
    return evaluate_claims(SPECS, blocks(cells, question_totals(outputs)))
