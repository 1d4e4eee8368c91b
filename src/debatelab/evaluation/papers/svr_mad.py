"""SVR-MAD (Jiang et al., arXiv:2605.23099 §5, Table 1; §5.1): Table 1 (NComm, Tok, Acc over the non-unanimous questions for every
baseline) and the cost–accuracy Pareto plot. A protocol's cells are on the backbone its seats' models
stand for (`llm`, `RunOutputs.backbone`), and meet that backbone's published rows only.

Claims (§9.1-3) are differences of Table 1 cells between SVR-MAD and a baseline on one (backbone,
dataset), each with a paired bootstrap interval over questions (`cell_difference`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...reporting.figures import subplots
from ..claims import Claim, Estimate, accuracy_difference, bootstrap
from ..paper_numbers import long_table
from ..run import NO_BACKBONE, RunOutputs, protocol_method
from ..stage import PaperEvaluation

# The paper's row names per protocol kind; all_to_all is Du et al.'s MAD (inside SID-ET).
METHOD_NAMES = {
    "self_consistency": "Self Consistency",
    "group_debate": "GroupDebate",
    "sid_et": "SID-ET",
    "s2_mad": "S2-MAD",
    "svr_mad": "SVR-MAD",
    "all_to_all": "MAD",
    "mad_d": "MAD-D",
    "ring": "Ring",
    "centralized": "Centralized",
}
METHOD_ORDER = ["Self Consistency", "GroupDebate", "SID-ET", "S2-MAD", "SVR-MAD"]
METRICS = ["NComm", "Tok", "Acc"]


def method_labels(outputs: RunOutputs) -> dict[str, str]:
    """Protocol -> row name: the paper's name for the first untrained protocol of each kind on each
    (backbone, dataset), the protocol's own name in brackets for any other (a second MAD, trained
    agents). A Table 1 row is one LLM on one dataset, so protocols that share no (backbone, dataset)
    share the name: SID-ET at the skip rate App. A picked per <LLM, dataset> (60 % on IMO, 70 % on
    HLE for GPT-OSS), or the DeepSeek-V3.1 protocols beside the GPT-OSS ones."""
    labels, taken = {}, set()
    for info in outputs.protocols.values():
        name = METHOD_NAMES.get(info.kind, info.kind)
        if info.trained_runs:
            name = f"{name} ({protocol_method(info, outputs.runs)})"
        llm = outputs.backbone("svr_mad", info.models)
        settings = [(llm, dataset) for dataset in info.datasets] or [(llm, None)]
        if any((*where, name) in taken for where in settings):
            name = f"{name} [{info.name}]"
        labels[info.name] = name
        taken.update((*where, name) for where in settings)
    return labels


def table1_cells(outputs: RunOutputs) -> pd.DataFrame:
    """One row per (dataset, protocol): NComm, Tok (×10³) and Acc (%) over the questions whose
    pre-debate answers are not unanimous (the paper's "valid" questions), n = those (question,
    thread) rows; `llm` = the backbone the protocol's seats stand for."""
    q = outputs.questions
    labels = method_labels(outputs)
    rows = []
    for (dataset, protocol), g in q.groupby(["dataset", "protocol"], sort=False):
        valid = g[~g["pre_unanimous"].astype(bool)]
        info = outputs.protocols.get(protocol)
        rows.append(
            {
                "dataset": outputs.paper_dataset(dataset),
                "run_dataset": dataset,
                "protocol": protocol,
                "llm": outputs.backbone("svr_mad", info.models) if info else NO_BACKBONE,
                "method": labels.get(protocol, protocol),
                "n": len(valid),
                "NComm": valid["ncomm"].mean(),
                "Tok": valid["total_tokens"].mean() / 1000,
                "Acc": 100 * valid["correct"].astype(float).mean(),
                "all_questions": len(g),
                "Acc_all": 100 * g["correct"].astype(float).mean(),
                "Tok_all": g["total_tokens"].mean() / 1000,
            }
        )
    return pd.DataFrame(rows)


def table1_layout(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows = method (the paper's order first; per `llm` first when the run has several backbones, as
    Table 1's GPT-OSS and DeepSeek blocks), columns "<dataset> NComm|Tok|Acc", one decimal."""
    if cells.empty:
        return pd.DataFrame(columns=["method"])
    index = ["llm", "method"] if "llm" in cells and cells["llm"].nunique() > 1 else ["method"]
    wide = cells.pivot_table(index=index, columns="run_dataset", values=METRICS, aggfunc="first", dropna=False)
    wide.columns = [f"{dataset} {metric}" for metric, dataset in wide.columns]
    datasets = list(dict.fromkeys(cells["run_dataset"]))
    # (a dataset whose debates all start unanimous has empty cells: kept, not dropped)
    wide = wide.reindex(columns=[f"{d} {m}" for d in datasets for m in METRICS])

    def rank(key):
        *llm, method = key if isinstance(key, tuple) else (key,)
        return (*llm, METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)

    # only the (llm, method) pairs the run has: pivot_table's product of the index levels would add a
    # row for a method on a backbone it never ran on (a row whose cells are all empty is kept)
    present = {tuple(k) for k in cells[index].drop_duplicates().itertuples(index=False)}
    order = [k for k in sorted(wide.index, key=rank) if (k if isinstance(k, tuple) else (k,)) in present]
    return wide.loc[order].round(1).reset_index()


def pareto_front(tokens: np.ndarray, accuracy: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats on both fewer tokens and higher accuracy, by tokens."""
    order = np.lexsort((-accuracy, tokens))
    front, best = [], -np.inf
    for i in order:
        if accuracy[i] > best:
            front.append(i)
            best = accuracy[i]
    return np.array(front, dtype=int)


def plot_cost_accuracy(cells: pd.DataFrame, experiment: str):
    """Accuracy (%) against tokens per question, one panel per dataset, a marker per method in the
    legend (no text on the points, so nothing overlaps) and the Pareto front as a line; with several
    backbones, one panel per (dataset, backbone)."""
    backbones = cells["llm"] if "llm" in cells else pd.Series("", index=cells.index)
    panels = cells["run_dataset"] + (" (" + backbones + ")" if backbones.nunique() > 1 else "")
    cells = cells.assign(run_dataset=panels)
    datasets = list(dict.fromkeys(cells["run_dataset"]))
    methods = list(dict.fromkeys(cells.sort_values("Tok_all")["method"]))
    markers = "osD^vP*Xh<>p"
    fig, axes = subplots(
        1, max(1, len(datasets)), figsize=(5.2 * max(1, len(datasets)), 4.2), squeeze=False, sharey=True
    )
    for ax, dataset in zip(axes[0], datasets):
        sub = cells[cells["run_dataset"] == dataset].reset_index(drop=True)
        for i, method in enumerate(methods):
            row = sub[sub["method"] == method]
            if len(row):
                ax.scatter(
                    row["Tok_all"],
                    row["Acc_all"],
                    marker=markers[i % len(markers)],
                    s=48,
                    label=method,
                    color=f"C{i % 10}",
                )
        front = pareto_front(sub["Tok_all"].to_numpy(float), sub["Acc_all"].to_numpy(float))
        ax.plot(
            sub["Tok_all"].to_numpy()[front],
            sub["Acc_all"].to_numpy()[front],
            color="grey",
            linewidth=1,
            linestyle="--",
            label="_front",
        )
        ax.set_xlabel("tokens per question (×10³)")
        ax.set_title(f"{dataset}, n={int(sub['all_questions'].max())} question-threads", fontsize="medium")
        ax.set_ylim(-3, 103)
    axes[0][0].set_ylabel("accuracy (%)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
    fig.suptitle(f"{experiment}: cost against accuracy (all questions; dashed: Pareto front)", fontsize="large")
    fig.tight_layout()
    return fig


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


def cell_difference(totals: pd.DataFrame, dataset: str, protocol_a: str, protocol_b: str, metric: str) -> Estimate:
    """Table 1 cell of `protocol_a` minus that of `protocol_b` for `metric` on one dataset, with a
    paired bootstrap over questions: both protocols debate the same questions, so each resample
    draws question ids once and recomputes both cells (sum / rows over the drawn questions, all
    threads of a question moving together). A question valid for one protocol only counts on its
    side. Accuracy on one row per question on both sides is paired correctness: `accuracy_difference`,
    the exact interval conditional on the discordant questions (exact McNemar)."""
    part = totals[totals["dataset"] == dataset]
    a = part[part["protocol"] == protocol_a].set_index("question_id")
    b = part[part["protocol"] == protocol_b].set_index("question_id")
    ids = a.index.union(b.index, sort=False)
    a, b = a.reindex(ids, fill_value=0), b.reindex(ids, fill_value=0)
    rows_a, rows_b = a["rows"].to_numpy(float), b["rows"].to_numpy(float)
    sums_a, sums_b = a[metric].to_numpy(float), b[metric].to_numpy(float)
    if metric == "Acc" and len(ids) and (rows_a == 1).all() and (rows_b == 1).all():
        return accuracy_difference(sums_a > 0, sums_b > 0)

    def difference(index: np.ndarray) -> float:
        n_a, n_b = rows_a[index].sum(), rows_b[index].sum()
        if n_a == 0 or n_b == 0:
            return np.nan
        return sums_a[index].sum() / n_a - sums_b[index].sum() / n_b

    return bootstrap(difference, len(ids), unit="questions", paired=True)


def _claims(cells: pd.DataFrame, totals: pd.DataFrame) -> list[Claim]:
    claims = []
    backbones = cells["llm"] if "llm" in cells else pd.Series("", index=cells.index)
    for (llm, run_dataset), g in cells.groupby([backbones, "run_dataset"], sort=False):
        dataset = f"{run_dataset} ({llm})" if llm and backbones.nunique() > 1 else run_dataset
        protocol = dict(zip(g["method"], g["protocol"]))
        if "SVR-MAD" not in protocol:
            claims.append(Claim.untestable("§9.1-3", "SVR-MAD against the baselines", "no svr_mad protocol", dataset))
            continue
        if int(g.set_index("method").loc["SVR-MAD", "n"]) == 0:
            claims.append(
                Claim.untestable(
                    "§9.1-3",
                    "SVR-MAD against the baselines",
                    "no non-unanimous question (every debate starts in agreement)",
                    dataset,
                )
            )
            continue

        def measured(number, statement, statistic, first, second, metric, expect, margin=0.0):
            estimate = cell_difference(totals, run_dataset, protocol[first], protocol[second], metric)
            claims.append(Claim.measured(number, statement, dataset, statistic, estimate, expect=expect, margin=margin))

        if "MAD" in protocol:
            measured(
                "§9.1",
                "SVR-MAD sends fewer messages than all-to-all MAD",
                "NComm(SVR-MAD) − NComm(MAD)",
                "SVR-MAD",
                "MAD",
                "NComm",
                "<",
            )
        for baseline in ("SID-ET", "GroupDebate", "S2-MAD"):
            if baseline in protocol:
                measured(
                    "§9.2",
                    f"NComm: SVR-MAD < {baseline}",
                    f"NComm(SVR-MAD) − NComm({baseline})",
                    "SVR-MAD",
                    baseline,
                    "NComm",
                    "<",
                )
        if "Self Consistency" in protocol:
            measured(
                "§9.2",
                "Tokens: Self Consistency < SVR-MAD",
                "Tok(SC) − Tok(SVR-MAD), ×10³",
                "Self Consistency",
                "SVR-MAD",
                "Tok",
                "<",
            )
            measured(
                "§9.3",
                "SVR-MAD accuracy ≥ Self Consistency",
                "Acc(SVR-MAD) − Acc(SC), points",
                "SVR-MAD",
                "Self Consistency",
                "Acc",
                ">=",
                # [CHOICE] margin 0 points: the paper (SVR-MAD, arXiv:2605.23099, Table 1) reports
                # SVR-MAD above Self Consistency on every benchmark, a gain, not "no worse within δ"
                0.0,
            )
        for baseline in ("S2-MAD", "GroupDebate"):
            if baseline in protocol:
                measured(
                    "§9.2",
                    f"Tokens: SVR-MAD < {baseline}",
                    f"Tok(SVR-MAD) − Tok({baseline}), ×10³",
                    "SVR-MAD",
                    baseline,
                    "Tok",
                    "<",
                )
    return claims


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    cells = table1_cells(outputs)
    result = PaperEvaluation()
    result.tables["table1"] = table1_layout(cells)
    result.cells["table1"] = long_table(cells, ["dataset", "llm", "method"], METRICS) if not cells.empty else cells
    result.claims = (
        _claims(cells, question_totals(outputs))
        if not cells.empty
        else [Claim.untestable("§9", "SVR-MAD against the baselines", "no debate protocol in this experiment")]
    )
    if not cells.empty:
        result.figures["cost_accuracy"] = plot_cost_accuracy(cells, outputs.experiment)
    return result
