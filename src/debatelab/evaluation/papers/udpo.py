"""UDPO (Tang et al., arXiv:2602.07186 §3, §5, App. B): Tables 1-7 and Fig. 5, from the uncertainty stage's per-trajectory
measures of every all-to-all protocol; the claims (udpo-1 to udpo-11) are `udpo_claims`.

Which protocol fills which cell follows from the config: N = its participants, T = its rounds,
m = its adversarial seats, the method = "MAD" for untrained agents, else the label of the
training run behind them ("UDPO", "UDPO w/o intra", ...). Accuracies are in %, U's in [0, 1].
Table 5 has a cell per T; every other table and Fig. 5 take a method's debate at the paper's main
T = 5 where it also debated at Table 5's T = 3 / 10 (`MAIN_ROUNDS`).
A protocol whose seats all stand for one paper backbone (`paper_backbone`, `RunOutputs.backbone`) is a
homogeneous ensemble (App. C.1): it fills Table 4 (N = 5, no adversarial seat; `model` = that
backbone) and, on Qwen-3-8B, Table 7 (one adversarial seat, and the drop from the same method's
natural debate); the heterogeneous tables (1, 2, 3, 5, Fig. 5) leave it out. A stand-in for the
heterogeneous ensemble (udpo_cpu's SmolLM2 agents) names no backbone.

The collapse rate (%, not in the paper's tables) [CHOICE]: of the debates in which some honest
(not adversarial) agent answered correctly in round 0, the share that ended on a wrong answer. The paper defines debate
collapse as the group's final decision "compromised on erroneous reasoning" but never counts it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...intervals import correlation, paired_accuracy_difference, paired_difference
from ...reporting.figures import subplots
from ..paper_numbers import agreed_outcomes, bound_columns, cell_intervals, long_table
from ..result import PaperEvaluation
from ..run import NO_BACKBONE, ProtocolInfo, RunOutputs, protocol_method

MEASURES = ["u_intra", "u_inter", "u_sys"]
U_SYS_BINS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0 + 1e-9]
BIN_LABELS = ["[0,.2)", "[.2,.4)", "[.4,.6)", "[.6,.8)", "[.8,1]"]
PAPER_ORDER = [
    "UDPO",
    "RMAAC",
    "MAPPO",
    "MAD",
]  # Table 1's accuracy order, best first (Tang et al., arXiv:2602.07186 §5.2, Table 1)
ABLATION_NAMES = {
    "UDPO": "Full",
    "UDPO w/o intra": "w/o intra",
    "UDPO w/o inter": "w/o inter",
    "UDPO w/o sys": "w/o sys",
}
TABLE7_BACKBONE = "Qwen-3-8B"  # Table 7 "Performance under attack (Qwen)": five Qwen-3 agents, one malicious


def trajectories(outputs: RunOutputs) -> pd.DataFrame:
    """The uncertainty stage's rows of every all-to-all protocol, with N, T, m and the method."""
    frame = outputs.uncertainty
    infos = {p.name: p for p in outputs.protocols_where(kind="all_to_all")}
    frame = frame[frame["protocol"].isin(list(infos))].copy()
    frame["n_agents"] = frame["protocol"].map(lambda p: infos[p].n_agents)
    frame["rounds"] = frame["protocol"].map(lambda p: infos[p].rounds)
    frame["m"] = frame["protocol"].map(lambda p: infos[p].adversarial)
    frame["method"] = frame["protocol"].map(lambda p: protocol_method(infos[p], outputs.runs, base="MAD"))
    backbones = {p: outputs.backbone("udpo", info.models) for p, info in infos.items()}
    # one paper backbone in every seat: a homogeneous ensemble (Table 4 / 7), else NO_BACKBONE
    frame["backbone"] = frame["protocol"].map(
        lambda p: backbones[p] if backbones[p] != NO_BACKBONE and " + " not in backbones[p] else NO_BACKBONE
    )
    frame["correct"] = frame["correct"].astype(bool)
    turns = outputs.turns
    if turns.empty:
        frame["had_correct"] = np.nan
    else:
        frame = frame.merge(round0_correct(turns, infos), on=TRAJECTORY_KEYS, how="left")
    frame["collapsed"] = frame["had_correct"].astype(float) * (~frame["correct"]).astype(float)  # NaN without turns
    frame["run_dataset"] = frame["dataset"]
    frame["dataset"] = frame["dataset"].map(outputs.paper_dataset)
    return frame


TRAJECTORY_KEYS = ["protocol", "dataset", "question_id", "thread"]


def round0_correct(turns: pd.DataFrame, protocols: dict[str, ProtocolInfo]) -> pd.DataFrame:
    """Per debate thread: whether any honest agent's round-0 answer was correct (`had_correct`)."""
    first = turns[(turns["round"] == 0) & turns["protocol"].isin(list(protocols))]
    adversarial = [
        bool(protocols[p].adversarial_seats and protocols[p].adversarial_seats[int(i)])
        for p, i in zip(first["protocol"], first["agent_index"])
    ]
    first = first[~np.asarray(adversarial, dtype=bool)]
    had = (
        first["correct"].astype("boolean").fillna(False).astype(bool).groupby([first[k] for k in TRAJECTORY_KEYS]).any()
    )
    return had.rename("had_correct").reset_index().astype({"had_correct": float})


#: the cells' metrics with a 95 % interval (`paper_numbers.cell_intervals`): over questions, a
#: question's threads drawn together; accuracy in %, a share (exact where each question's threads agree)
CELL_INTERVALS = {"accuracy": ("correct", 100.0), **{m: (m, 1.0) for m in MEASURES}}


def _cell_means(frame: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    bounds = bound_columns(CELL_INTERVALS)
    if frame.empty:
        return pd.DataFrame(columns=[*keys, "run_dataset", "protocol", "accuracy", *MEASURES, "collapse", "n", *bounds])
    cell_keys = [*keys, "run_dataset", "protocol"]
    grouped = frame.groupby(cell_keys, sort=False)
    cells = grouped[MEASURES].mean()
    cells["accuracy"] = 100 * grouped["correct"].mean()
    # sum(min_count=1): NaN, not 0, where no thread had its turns; 0 / 0 (nobody right at first) is NaN
    had = grouped["had_correct"].sum(min_count=1)
    cells["collapse"] = 100 * grouped["collapsed"].sum(min_count=1) / had.where(had > 0)
    cells["n"] = grouped.size()
    return cells.reset_index().merge(
        cell_intervals(frame, cell_keys, CELL_INTERVALS, shares=["accuracy"]), on=cell_keys, how="left"
    )


#: The paper's main number of debate rounds: "The main experiments use T = 5" (App. C.2); only
#: Table 5 varies T, so every other table and Fig. 5 take each cell's debate at T = 5.
MAIN_ROUNDS = 5


def _main_rounds_first(rounds: pd.Series) -> pd.Series:
    """A sort score: T = 5 above every other T, then more rounds above fewer (a twin's stand-in T)."""
    return (rounds == MAIN_ROUNDS).astype(int) * (rounds.max() + 1) + rounds


def _one_protocol_per_cell(cells: pd.DataFrame, keys: list[str], protocols: dict[str, ProtocolInfo]) -> pd.DataFrame:
    """Where several protocols fill one cell, the one at the paper's main T = 5 (the T = 3 / 10
    debates of Table 5 fill no other table), else the one with the most rounds (a CPU twin's T)."""
    if cells.empty:
        return cells
    rounds = cells["protocol"].map(lambda p: protocols[p].rounds)
    return (
        cells.assign(_r=_main_rounds_first(rounds))
        .sort_values("_r", ascending=False, kind="stable")
        .drop_duplicates([*keys, "run_dataset"])
        .drop(columns="_r")
    )


def at_main_rounds(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of each (dataset, N, m, method)'s debates at T = 5 where it has one, else at its
    most rounds: what `_one_protocol_per_cell` picks, for Fig. 5's per-question comparison."""
    if frame.empty:
        return frame
    score = _main_rounds_first(frame["rounds"])
    best = score.groupby([frame[k] for k in ("run_dataset", "n_agents", "m", "method")]).transform("max")
    return frame[score == best]


def natural(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["m"] == 0]


def heterogeneous(frame: pd.DataFrame) -> pd.DataFrame:
    """The protocols of Tables 1, 2, 3, 5 and Fig. 5 (the heterogeneous ensemble), not homogeneous ones."""
    return frame[frame["backbone"] == NO_BACKBONE]


def standard_mad(frame: pd.DataFrame) -> pd.DataFrame:
    """Untrained, unattacked debates: the measures' own claims (udpo-1 to udpo-4) are about these."""
    return frame[(frame["m"] == 0) & (frame["method"] == "MAD")]


# --------------------------------------------------------------------------- tables


def table1(frame: pd.DataFrame, protocols) -> pd.DataFrame:
    keys = ["dataset", "n_agents", "method"]
    return _one_protocol_per_cell(_cell_means(natural(frame), keys), keys, protocols)


def table2(t1: pd.DataFrame) -> pd.DataFrame:
    ablations = t1[t1["method"].isin(list(ABLATION_NAMES))].copy()
    ablations["method"] = ablations["method"].map(ABLATION_NAMES)
    return ablations


def table3(frame: pd.DataFrame, protocols) -> pd.DataFrame:
    """Accuracy by compromised agents m at the N of the attacked protocols (m = 0: the same N unattacked)."""
    attacked_n = set(frame.loc[frame["m"] > 0, "n_agents"])
    keys = ["dataset", "n_agents", "m", "method"]
    return _one_protocol_per_cell(_cell_means(frame[frame["n_agents"].isin(attacked_n)], keys), keys, protocols)


def table4(frame: pd.DataFrame, protocols) -> pd.DataFrame:
    """Homogeneous ensembles of N = 5 (App. C.1), unattacked: accuracy and U's per (dataset, backbone, method)."""
    homogeneous = natural(frame[(frame["backbone"] != NO_BACKBONE) & (frame["n_agents"] == 5)])
    keys = ["dataset", "model", "method"]
    cells = _cell_means(homogeneous.assign(model=homogeneous["backbone"]), keys)
    return _one_protocol_per_cell(cells, keys, protocols)


def table7(frame: pd.DataFrame, protocols) -> pd.DataFrame:
    """Five Qwen-3 agents, one malicious (App. C.3): accuracy per (dataset, method) and the drop (points)
    from the same method's unattacked debate on the same dataset, on the questions both debated, with
    its paired 95 % interval (`drop_low`, `drop_high`; NaN without an unattacked debate)."""
    qwen = frame[(frame["backbone"] == TABLE7_BACKBONE) & (frame["n_agents"] == 5) & (frame["m"] <= 1)]
    keys = ["dataset", "m", "method"]
    cells = _one_protocol_per_cell(_cell_means(qwen, keys), keys, protocols)
    attacked, unattacked = cells[cells["m"] == 1], cells[cells["m"] == 0]
    reference = unattacked.set_index(["run_dataset", "method"])
    drops = []
    for row in attacked.itertuples():
        if (row.run_dataset, row.method) not in reference.index:
            drops.append((np.nan, np.nan, np.nan))
            continue
        unattacked_protocol = reference.loc[(row.run_dataset, row.method), "protocol"]
        est = _drop_estimate(qwen[qwen["run_dataset"] == row.run_dataset], row.protocol, unattacked_protocol)
        drops.append((est.value, est.low, est.high))
    drop = pd.DataFrame(drops, columns=["drop", "drop_low", "drop_high"], index=attacked.index)
    return pd.concat([attacked, drop], axis=1).drop(columns="m").reset_index(drop=True)


def _drop_estimate(frame: pd.DataFrame, attacked: str, unattacked: str):
    """Accuracy under attack − without (points) on the questions both protocols debated, paired by
    question: exact (McNemar's interval) where both are counts of questions (one thread each, or
    threads that agree on every question), else the BCa bootstrap of the per-question difference of
    thread means."""
    per_question = {
        name: frame[frame["protocol"] == name].groupby("question_id")["correct"].mean()
        for name in (attacked, unattacked)
    }
    both = pd.concat({"mean_a": per_question[attacked], "mean_u": per_question[unattacked]}, axis=1, join="inner")
    if agreed_outcomes(both, both.index) is not None:  # per-question means: 0/1 where threads agree
        est = paired_accuracy_difference(both["mean_a"].astype(bool), both["mean_u"].astype(bool))
    else:
        est = paired_difference(both["mean_a"], both["mean_u"])
    return est.scaled(100)


TABLE5_KEYS = ["dataset", "n_agents", "rounds", "method"]


def table5(frame: pd.DataFrame) -> pd.DataFrame:
    """Table 5 (App. C.2): every method's unattacked debates by N and T (MAD, UDPO, MAPPO and RMAAC at
    T = 3 / 5 / 10 in udpo.yaml), each (N, T, method) from its own protocol."""
    return _cell_means(natural(frame), TABLE5_KEYS).drop_duplicates([*TABLE5_KEYS, "run_dataset"])


def table5_cells(t5: pd.DataFrame) -> pd.DataFrame:
    """Table 5's cells beside the paper's: accuracy and the mean U_intra, U_inter, U_sys of each."""
    return long_table(t5, TABLE5_KEYS, ["accuracy", *MEASURES])


def table6(frame: pd.DataFrame) -> pd.DataFrame:
    """Pearson r of each U with correctness per dataset, natural (untrained, unattacked) and under
    attack, with its 95 % interval and p: the BCa bootstrap over questions, a question's trajectories
    drawn together (`intervals.correlation`; Pearson's own p would take them as independent). `n`:
    trajectories, `questions`: the units resampled."""
    rows = []
    conditions = {"natural": standard_mad(frame), "attack": frame[frame["m"] > 0]}
    for condition, part in conditions.items():
        for (dataset, run_dataset), g in part.groupby(["dataset", "run_dataset"], sort=False):
            for measure in MEASURES:
                est = correlation(g[measure].to_numpy(float), g["correct"].to_numpy(float), clusters=g["question_id"])
                rows.append(
                    {
                        "dataset": dataset,
                        "run_dataset": run_dataset,
                        "condition": condition,
                        "measure": measure,
                        "r": est.value,
                        "low": est.low,
                        "high": est.high,
                        "p": est.p,
                        "n": len(g),
                        "questions": est.n,
                    }
                )
    return pd.DataFrame(rows, columns=TABLE6_COLUMNS)


TABLE6_COLUMNS = ["dataset", "run_dataset", "condition", "measure", "r", "low", "high", "p", "n", "questions"]


def fig5(frame: pd.DataFrame) -> pd.DataFrame:
    """Δacc (points) of each method over standard MAD at the same N, per bin of MAD's U_sys
    (per question, averaged over threads), pooled over datasets as the paper averages them; each
    method's debates at T = 5 where it has them (`at_main_rounds`), not Table 5's other T's."""
    rows = []
    nat = at_main_rounds(natural(frame))
    for n_agents, g in nat.groupby("n_agents"):
        mad = g[g["method"] == "MAD"]
        if mad.empty:
            continue
        # the MAD protocol with the most rounds is the reference
        ref_protocol = mad.sort_values("rounds", ascending=False, kind="stable")["protocol"].iloc[0]
        ref = (
            mad[mad["protocol"] == ref_protocol]
            .groupby(["run_dataset", "question_id"])
            .agg(u_sys=("u_sys", "mean"), acc=("correct", "mean"))
        )
        for method, part in g[g["method"] != "MAD"].groupby("method"):
            acc = part.groupby(["run_dataset", "question_id"])["correct"].mean().rename("method_acc")
            joined = ref.join(acc, how="inner")
            joined["bin"] = pd.cut(joined["u_sys"], U_SYS_BINS, labels=BIN_LABELS, right=False)
            for label, b in joined.groupby("bin", observed=False):
                rows.append(
                    {
                        "n_agents": n_agents,
                        "method": method,
                        "bin": label,
                        "delta_acc": 100 * (b["method_acc"] - b["acc"]).mean() if len(b) else np.nan,
                        "n": len(b),
                        "run_dataset": "all",
                    }
                )
    return pd.DataFrame(rows, columns=["n_agents", "method", "bin", "delta_acc", "n", "run_dataset"])


def plot_fig5(bins: pd.DataFrame, experiment: str):
    fig, ax = subplots(figsize=(6.5, 3.8))
    # one bar series per (method, N): a method trained at several N has one bin row per N
    series = list(dict.fromkeys(zip(bins["method"], bins["n_agents"])))
    methods = [f"{method} (N={int(n)})" for method, n in series]
    width = 0.8 / max(1, len(methods))
    x = np.arange(len(BIN_LABELS))
    for i, ((method, n_agents), label) in enumerate(zip(series, methods)):
        part = bins[(bins["method"] == method) & (bins["n_agents"] == n_agents)].set_index("bin").reindex(BIN_LABELS)
        ax.bar(x + i * width, part["delta_acc"].fillna(0), width, label=label)
    ax.set_xticks(x + width * (len(methods) - 1) / 2, BIN_LABELS)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("U_sys of standard MAD (bin)")
    ax.set_ylabel("Δ accuracy over MAD (points)")
    n = int(bins.groupby("method")["n"].sum().max()) if len(bins) else 0
    ax.set_title(f"{experiment}: accuracy gain by difficulty (Fig. 5), n={n} questions", fontsize="medium")
    if methods:
        ax.legend(fontsize="small")
    fig.tight_layout()
    return fig


def _layout(cells: pd.DataFrame, index: list[str], columns: list[str]) -> pd.DataFrame:
    out = cells[[*index, "run_dataset", *columns, "n"]].copy()
    out[columns] = out[columns].astype(float).round(3)
    return out.sort_values(index, kind="stable").reset_index(drop=True)


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    from .udpo_claims import paper_claims  # imports this module's tables: here, not at the top

    everything = trajectories(outputs)
    frame = heterogeneous(everything)
    protocols = outputs.protocols
    result = PaperEvaluation()
    metrics_cols = ["accuracy", *MEASURES]
    shown = [*metrics_cols, "collapse"]  # the collapse rate is shown, but the paper has no cell for it
    t1 = table1(frame, protocols)
    t2 = table2(t1)
    t3 = table3(frame, protocols)
    t4 = table4(everything, protocols)
    t5 = table5(frame)
    t6 = table6(everything)
    t7 = table7(everything, protocols)
    bins = fig5(frame)
    result.tables["table1"] = _layout(t1, ["dataset", "n_agents", "method"], shown)
    result.tables["table2"] = _layout(t2, ["dataset", "n_agents", "method"], shown)
    result.tables["table3"] = _layout(t3, ["dataset", "n_agents", "m", "method"], ["accuracy", "u_sys", "collapse"])
    result.tables["table4"] = _layout(t4, ["dataset", "model", "method"], shown)
    result.tables["table5"] = _layout(t5, ["dataset", "n_agents", "method", "rounds"], shown)
    result.tables["table7"] = _layout(t7, ["dataset", "method"], ["accuracy", "drop", "u_sys", "collapse"])
    result.tables["table6"] = t6.round(3)
    result.tables["fig5"] = bins.round(2)
    result.cells["table1"] = long_table(t1, ["dataset", "n_agents", "method"], metrics_cols)
    result.cells["table2"] = long_table(t2, ["dataset", "n_agents", "method"], metrics_cols)
    result.cells["table3"] = long_table(t3, ["dataset", "n_agents", "m", "method"], ["accuracy"])
    result.cells["table4"] = long_table(t4, ["dataset", "model", "method"], metrics_cols)
    result.cells["table5"] = table5_cells(t5)
    result.cells["table7"] = long_table(t7, ["dataset", "method"], ["accuracy", "drop"])
    result.cells["table6"] = t6.rename(columns={"r": "value"}).assign(metric="r")[
        ["dataset", "condition", "measure", "metric", "value", "low", "high", "n", "run_dataset"]
    ]
    result.cells["fig5"] = bins.assign(metric="delta_acc").rename(columns={"delta_acc": "value"})
    # the claims hold for any ensemble: an attacked homogeneous one (Table 7's) tests udpo-5 to udpo-7 too
    result.claims = paper_claims(everything, table3(everything, protocols), outputs)
    result.figures["fig5_delta_by_usys"] = plot_fig5(bins, outputs.experiment)
    return result
