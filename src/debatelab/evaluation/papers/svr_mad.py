"""SVR-MAD (Jiang et al., arXiv:2605.23099 §5, Table 1; §5.1): Table 1 (NComm, Tok, Acc over the non-unanimous questions for every
baseline) and the cost–accuracy Pareto plot. A protocol's cells are on the backbone its seats' models
stand for (`llm`, `RunOutputs.backbone`), and meet that backbone's published rows only.

The claims (svr-1 to svr-5) are `svr_mad_claims`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...reporting.figures import subplots
from ..claims import Claim
from ..paper_numbers import cell_intervals, long_table
from ..result import PaperEvaluation
from ..run import NO_BACKBONE, RunOutputs, protocol_method

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
#: beside Tok when a model has a price (`RunOutputs.priced`): mean dollars per question (the paper has no
#: published dollars, so the comparison with its numbers keeps METRICS)
USD = "USD"
#: Table 1's metrics with a 95 % interval over the valid questions (`paper_numbers.cell_intervals`):
#: cell column -> (question row column, scale). The counts get the BCa bootstrap of the mean, a
#: question's threads drawn together (a count of 0 on every question, Self Consistency's NComm, gets
#: its point); Acc is a share: exact where each question's threads agree, else BCa
CELL_INTERVALS = {"NComm": ("ncomm", 1.0), "Tok": ("total_tokens", 1 / 1000), "Acc": ("correct", 100.0)}


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
    thread) rows; `llm` = the backbone the protocol's seats stand for. When a model has a price, USD
    (mean dollars per valid question, the calls of `total_tokens`: `RunOutputs.question_costs`) and
    USD_all (over all questions).

    Each of NComm, Tok and Acc carries its 95 % interval over the same valid rows
    (`<metric>_low` / `<metric>_high`), the question the unit (`CELL_INTERVALS`): NComm and Tok the
    BCa bootstrap of the mean, Acc Clopper-Pearson where each question's threads agree, else BCa;
    a bootstrap gives none under `intervals.MIN_UNITS` valid questions, and there is none without
    a valid question. The
    all-question columns (Acc_all, Tok_all, USD_all: the Pareto plot's) and USD carry none: no
    table compares them with the paper."""
    q = outputs.questions
    if outputs.priced:
        keys = ["dataset", "protocol", "question_id", "thread"]
        q = q.merge(outputs.question_costs, on=keys, how="left", validate="one_to_one")
    labels = method_labels(outputs)
    valid_rows = q[~q["pre_unanimous"].astype(bool)]
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
                **({USD: valid["cost_usd"].mean(), "USD_all": g["cost_usd"].mean()} if outputs.priced else {}),
            }
        )
    columns = ["dataset", "run_dataset", "protocol", "llm", "method", "n", *METRICS, "all_questions", "Acc_all"]
    columns += ["Tok_all", *([USD, "USD_all"] if outputs.priced else [])]
    cells = pd.DataFrame(rows, columns=columns)
    keys = ["dataset", "protocol"]
    bounds = cell_intervals(valid_rows, keys, CELL_INTERVALS, shares=["Acc"])
    # a (dataset, protocol) whose questions all start unanimous has no valid row: NaN bounds
    bounds = bounds.rename(columns={"dataset": "run_dataset"})
    return cells.merge(bounds, on=["run_dataset", "protocol"], how="left")


def table1_layout(cells: pd.DataFrame) -> pd.DataFrame:
    """Rows = method (the paper's order first; per `llm` first when the run has several backbones, as
    Table 1's GPT-OSS and DeepSeek blocks), columns "<dataset> NComm|Tok|Acc", one decimal; with
    prices (a `USD` cell column) "<dataset> NComm|Tok|USD|Acc", dollars to 4 significant digits."""
    if cells.empty:
        return pd.DataFrame(columns=["method"])
    metrics = ["NComm", "Tok", USD, "Acc"] if USD in cells else METRICS
    index = ["llm", "method"] if "llm" in cells and cells["llm"].nunique() > 1 else ["method"]
    wide = cells.pivot_table(index=index, columns="run_dataset", values=metrics, aggfunc="first", dropna=False)
    wide.columns = [f"{dataset} {metric}" for metric, dataset in wide.columns]
    datasets = list(dict.fromkeys(cells["run_dataset"]))
    # (a dataset whose debates all start unanimous has empty cells: kept, not dropped)
    wide = wide.reindex(columns=[f"{d} {m}" for d in datasets for m in metrics])

    def rank(key):
        *llm, method = key if isinstance(key, tuple) else (key,)
        return (*llm, METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER), method)

    # only the (llm, method) pairs the run has: pivot_table's product of the index levels would add a
    # row for a method on a backbone it never ran on (a row whose cells are all empty is kept)
    present = {tuple(k) for k in cells[index].drop_duplicates().itertuples(index=False)}
    order = [k for k in sorted(wide.index, key=rank) if (k if isinstance(k, tuple) else (k,)) in present]
    rounded = wide.loc[order].round(1)
    for column in [c for c in wide.columns if c.endswith(f" {USD}")]:  # dollars per question: cents matter
        rounded[column] = wide.loc[order, column].map(lambda v: float(f"{v:.4g}"))
    return rounded.reset_index()


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
    """Accuracy (%) against tokens per question, or dollars per question when the cells have them
    (a model has a price), one panel per dataset, a marker per method in the legend (no text on the
    points, so nothing overlaps) and the Pareto front as a line; with several backbones, one panel
    per (dataset, backbone)."""
    priced = "USD_all" in cells
    cost, cost_label = ("USD_all", "dollars per question") if priced else ("Tok_all", "tokens per question (×10³)")
    backbones = cells["llm"] if "llm" in cells else pd.Series("", index=cells.index)
    panels = cells["run_dataset"] + (" (" + backbones + ")" if backbones.nunique() > 1 else "")
    cells = cells.assign(run_dataset=panels)
    datasets = list(dict.fromkeys(cells["run_dataset"]))
    methods = list(dict.fromkeys(cells.sort_values(cost, kind="stable")["method"]))
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
                    row[cost],
                    row["Acc_all"],
                    marker=markers[i % len(markers)],
                    s=48,
                    label=method,
                    color=f"C{i % 10}",
                )
        front = pareto_front(sub[cost].to_numpy(float), sub["Acc_all"].to_numpy(float))
        ax.plot(
            sub[cost].to_numpy()[front],
            sub["Acc_all"].to_numpy()[front],
            color="grey",
            linewidth=1,
            linestyle="--",
            label="_front",
        )
        ax.set_xlabel(cost_label)
        ax.set_title(f"{dataset}, n={int(sub['all_questions'].max())} question-threads", fontsize="medium")
        ax.set_ylim(-3, 103)
    axes[0][0].set_ylabel("accuracy (%)")
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize="small", frameon=False)
    fig.suptitle(f"{experiment}: cost against accuracy (all questions; dashed: Pareto front)", fontsize="large")
    fig.tight_layout()
    return fig


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    from .svr_mad_claims import ALL, ALL_SOURCE, paper_claims  # imports this module's tables: here, not at the top

    cells = table1_cells(outputs)
    result = PaperEvaluation()
    result.tables["table1"] = table1_layout(cells)
    result.cells["table1"] = long_table(cells, ["dataset", "llm", "method"], METRICS)
    result.claims = (
        paper_claims(cells, outputs)
        if not cells.empty
        else [
            Claim.untestable(
                ALL, "SVR-MAD against the baselines", "no debate protocol in this experiment", source=ALL_SOURCE
            )
        ]
    )
    if not cells.empty:
        result.figures["cost_accuracy"] = plot_cost_accuracy(cells, outputs.experiment)
    return result
