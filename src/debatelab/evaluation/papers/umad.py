"""UMAD (Qiao et al., arXiv:2603.01221 §2.1, App. D.3, App. F; §5.2, Table 1; §3, §5): Table 1 (each agent's own accuracy A0 / A1 at turns T = 1, 2, 5),
the Table 3 ablations, Sys-EU / Sys-AU per round, the answer-flip transitions of App. D.4, and
the claims umad-1 to umad-14 (`umad_claims`).

Turns: the paper's T counts generation turns including the initial answer (Table 1: T = 1 is the
zero-shot answer, T = 2 follows one debate round, T = 5 four), so turn T is the debate stage's
round T − 1, round 0 being the pre-debate answers. A protocol with R rounds fills the turns of
{1, 2, 5} up to R + 1; the CPU twin's 2-round debates have T = 1, 2 only.

Repeats: the paper's ± is over evaluation seeds. Here the seeds are a protocol's debate threads:
thread k starts from zero-shot sample k of each agent and debates on its own, so a cell is the mean
± sample std (ddof 1) over threads of the thread's accuracy over the questions; a one-thread run
has no std. Avg averages the datasets within each thread first, then over threads, which is how
the paper's Avg gets its own ±.

Intervals (95 %), over questions, a question's threads drawn together (`paper_numbers.
cell_intervals`): a seat's accuracy (`<seat>_low`, `<seat>_high`, which reach the vs-paper rows) and
the flip shares are shares: Clopper-Pearson's exact interval where each question's threads agree (one
thread, or threads alike), else the BCa bootstrap of the share over (question, thread) answers; the
Sys-U means the BCa bootstrap over questions. A bootstrap over fewer than `intervals.MIN_UNITS`
questions: NaN. An Avg over several datasets is the unweighted mean of per-dataset accuracies, which
a bootstrap of the pooled share would not centre (it weights datasets by their size): its interval is
the BCa bootstrap over (dataset, question) units of that very average (`average_accuracy_intervals`,
as SDRL's Avg). An Avg over one dataset is that dataset's cell, interval included.

There is no aggregation (no vote): an agent's answer in a round is its own, from its last call of
that round; an agent that made no call keeps its previous answer.

Which protocol fills which row: all-to-all protocols with exactly two seats. Setting = homo when
both seats are the same agent, else hetero. Method = "Zero-Shot" for untrained agents, else the
label of the training run behind them (UMAD, IPPO, Intrinsic-only, NLL-only; single-agent DAPO
runs on the seats are the paper's "Single-GRPO Pair"). A later protocol with the same setting and
method (umad_unmasked, umad_uq) gets its own row, "<method> [<protocol>]". Accuracies are in %,
entropies in nats.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...intervals import bootstrap
from ...reporting.figures import subplots
from ..claims import finite
from ..paper_numbers import bound_columns, cell_intervals, dataset_average_statistic, joined_datasets, long_table
from ..result import PaperEvaluation
from ..run import SEAT_KEYS, ProtocolInfo, RunOutputs, protocol_method, seat_rounds

TURNS = (1, 2, 5)
SEATS = ("A0", "A1")
PAPER_DATASET_ORDER = ("gsm8k", "math500", "amc23", "aime24", "aime25")
AVG = "avg"
SETTING_ORDER = ("homo", "hetero")
ZERO_SHOT = "Zero-Shot"
SINGLE_GRPO_PAIR = "Single-GRPO Pair"
TABLE1_METHODS = (ZERO_SHOT, "IPPO", "UMAD")
ABLATION_METHODS = ("UMAD", "Intrinsic-only", "NLL-only", SINGLE_GRPO_PAIR, "IPPO")
TRANSITIONS = ("C2C", "C2W", "W2C", "W2W")
FLIP_SHARES = (*TRANSITIONS, "flip_ratio", "answer_changed")
NO_ANSWER = "<none>"  # an unparseable answer: one answer of its own, as the uncertainty stage buckets it
CELL_KEYS = ["setting", "method", "dataset", "turn"]
AVG_RESAMPLED = "(dataset, question) units, each one's threads drawn together"
STATE_KEYS = SEAT_KEYS
#: a seat's accuracy (%) interval over questions (`paper_numbers.cell_intervals`), a share
SEAT_ACCURACY = {"accuracy": ("correct", 100.0)}
SYS_MEASURES = {"TU": "total", "Sys-EU": "epistemic", "Sys-AU": "aleatoric"}  # column of the uncertainty rounds


# --------------------------------------------------------------------------- which protocol is which row


def pair_protocols(outputs: RunOutputs) -> dict[str, ProtocolInfo]:
    """The paper's debates: two agents, each seeing the other (fully connected, no aggregation)."""
    return {p.name: p for p in outputs.protocols_where(kind="all_to_all", n_agents=2)}


def paper_method(info: ProtocolInfo, outputs: RunOutputs) -> str:
    """The paper's method name; agents that were each trained alone with GRPO/DAPO are its Single-GRPO Pair."""
    runs = [outputs.runs.get(r) for r in info.trained_runs]
    if runs and all(run is not None and run.method == "dapo" for run in runs):
        return SINGLE_GRPO_PAIR
    return protocol_method(info, outputs.runs, base=ZERO_SHOT)


def row_labels(outputs: RunOutputs) -> dict[str, tuple[str, str]]:
    """Protocol -> (setting, method); the first protocol in config order keeps the bare method name."""
    labels, taken = {}, set()
    for info in pair_protocols(outputs).values():
        setting = "homo" if info.homogeneous else "hetero"
        method = paper_method(info, outputs)
        if (setting, method) in taken:
            method = f"{method} [{info.name}]"
        taken.add((setting, method))
        labels[info.name] = (setting, method)
    return labels


# --------------------------------------------------------------------------- each agent's answer per round


def agent_states(outputs: RunOutputs) -> pd.DataFrame:
    """One row per (protocol, dataset, question, thread, seat, round ≤ the protocol's rounds):
    the seat's own answer after that round and whether it is correct (0/1), carried forward
    over rounds in which the seat made no call."""
    pairs = pair_protocols(outputs)
    columns = [*STATE_KEYS, "round", "correct", "answer"]
    turns = outputs.turns
    turns = turns[turns["protocol"].isin(list(pairs))]
    if turns.empty:
        return pd.DataFrame(columns=columns)
    turns = turns.assign(
        correct=turns["correct"].astype(float),
        answer=turns["answer"].astype(object).where(turns["answer"].notna(), NO_ANSWER),
    )
    states = seat_rounds(turns, ["correct", "answer"], {p: info.rounds for p, info in pairs.items()})
    states = states.dropna(subset=["correct"])
    return states.sort_values([*STATE_KEYS, "round"], kind="stable").reset_index(drop=True)[columns]


def thread_accuracy(states: pd.DataFrame, outputs: RunOutputs) -> pd.DataFrame:
    """Accuracy (%) of each seat in each thread at each turn of TURNS, over the questions."""
    columns = ["protocol", "run_dataset", "dataset", "turn", "thread", "agent_index", "accuracy", "n"]
    parts = []
    for turn in TURNS:
        at = states[states["round"] == turn - 1]
        if at.empty:
            continue
        g = at.groupby(["protocol", "dataset", "thread", "agent_index"], sort=False)["correct"].agg(["mean", "size"])
        parts.append(g.reset_index().assign(turn=turn))
    if not parts:
        return pd.DataFrame(columns=columns)
    frame = pd.concat(parts, ignore_index=True).rename(columns={"dataset": "run_dataset", "size": "n"})
    frame["accuracy"] = 100 * frame["mean"]
    frame["dataset"] = frame["run_dataset"].map(outputs.paper_dataset)
    # one run dataset per paper dataset and protocol: a second stand-in would fill the same cell
    first = frame.drop_duplicates(["protocol", "dataset"])[["protocol", "dataset", "run_dataset"]]
    frame = frame.merge(first, on=["protocol", "dataset", "run_dataset"])
    return frame[columns]


def _over_threads(per_thread: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean and sample std over threads of the per-thread accuracies, one row per cell and seat."""
    g = per_thread.groupby([*keys, "agent_index"], sort=False)
    return g.agg(
        mean=("accuracy", "mean"), std=("accuracy", "std"), threads=("thread", "nunique"), n=("n", "sum")
    ).reset_index()


def seat_accuracy_intervals(states: pd.DataFrame, per_thread: pd.DataFrame) -> pd.DataFrame:
    """The 95 % interval (%) of each seat's accuracy per (protocol, run dataset, turn) of `per_thread`:
    over the questions, a question's threads drawn together (the BCa bootstrap of the share over its
    (question, thread) answers), Clopper-Pearson's exact interval where each question's threads agree;
    a bootstrap gives none under `intervals.MIN_UNITS` questions. The share pooled over threads equals the cell's mean over threads
    when every thread answers every question, as a protocol's threads do. Columns: protocol,
    run_dataset, turn, agent_index, low, high."""
    keys = ["protocol", "run_dataset", "turn", "agent_index"]
    if per_thread.empty:
        return pd.DataFrame(columns=[*keys, "low", "high"])
    rows = pd.concat([states[states["round"] == turn - 1].assign(turn=turn) for turn in TURNS], ignore_index=True)
    rows = rows.rename(columns={"dataset": "run_dataset"})
    # only the run datasets a cell shows (a second stand-in for one paper dataset is left out)
    rows = rows.merge(per_thread[["protocol", "run_dataset", "turn"]].drop_duplicates(), on=keys[:3])
    bounds = cell_intervals(rows, keys, SEAT_ACCURACY, shares=list(SEAT_ACCURACY))
    return bounds.rename(columns={"accuracy_low": "low", "accuracy_high": "high"})


def average_accuracy_intervals(states: pd.DataFrame, per_thread: pd.DataFrame) -> pd.DataFrame:
    """The 95 % interval (%) of each seat's Avg over several datasets per (protocol, turn): the BCa
    bootstrap over (dataset, question) units, a question's threads drawn together, of the printed
    Avg itself (`paper_numbers.dataset_average_statistic`: each dataset's accuracy, then their
    unweighted mean, then the mean over threads), so it is centred on the cell. None under
    `intervals.MIN_UNITS` units. Columns: protocol, run_dataset ("a+b", as the Avg rows name it),
    turn, agent_index, low, high."""
    columns = ["protocol", "run_dataset", "turn", "agent_index", "low", "high"]
    rows = []
    for (protocol, turn, seat), cell in per_thread.groupby(["protocol", "turn", "agent_index"], sort=False):
        datasets = set(cell["run_dataset"])
        if len(datasets) < 2:
            continue  # an Avg over one dataset is that dataset's cell, interval included
        answers = states[
            (states["protocol"] == protocol)
            & (states["round"] == turn - 1)
            & (states["agent_index"] == seat)
            & states["dataset"].isin(datasets)
        ]
        statistic, n_units = dataset_average_statistic(answers, ["correct"], "thread")
        estimate = bootstrap(lambda index: statistic(index)[:, 0], n_units, unit=AVG_RESAMPLED, vectorized=True)
        estimate = estimate.scaled(100)
        rows.append((protocol, joined_datasets(datasets), turn, seat, estimate.low, estimate.high))
    return pd.DataFrame(rows, columns=columns)


def table1_cells(outputs: RunOutputs, states: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (setting, method, dataset incl. "avg", turn): A0, A1 (mean %), A0_std, A1_std,
    A0_low, A0_high, A1_low, A1_high (the 95 % interval of `seat_accuracy_intervals`, for an Avg over
    several datasets `average_accuracy_intervals`), n = (question, thread) pairs per seat,
    threads, protocol, run_dataset."""
    columns = [
        "setting",
        "method",
        "protocol",
        "dataset",
        "run_dataset",
        "turn",
        *SEATS,
        *[f"{s}_std" for s in SEATS],
        *bound_columns(SEATS),
        "threads",
        "n",
    ]
    states = agent_states(outputs) if states is None else states
    per_thread = thread_accuracy(states, outputs)
    if per_thread.empty:
        return pd.DataFrame(columns=columns)
    by_dataset = _over_threads(per_thread, ["protocol", "run_dataset", "dataset", "turn"])
    # Avg: unweighted mean of the datasets within each thread, then mean ± std over threads
    avg_thread = (
        per_thread.groupby(["protocol", "turn", "thread", "agent_index"], sort=False)
        .agg(
            accuracy=("accuracy", "mean"),
            n=("n", "sum"),
            run_dataset=("run_dataset", joined_datasets),
        )
        .reset_index()
    )
    avg = _over_threads(avg_thread, ["protocol", "run_dataset", "turn"]).assign(dataset=AVG)
    stats = pd.concat([by_dataset, avg], ignore_index=True)
    # an Avg over one dataset has that dataset's run_dataset, so its interval; over several, "a+b",
    # the bootstrap of the Avg itself
    interval_keys = ["protocol", "run_dataset", "turn", "agent_index"]
    bounds = seat_accuracy_intervals(states, per_thread)
    averages = average_accuracy_intervals(states, per_thread)
    if not averages.empty:  # (concatenating an empty frame is deprecated in pandas)
        bounds = pd.concat([bounds, averages], ignore_index=True)
    stats = stats.merge(bounds, on=interval_keys, how="left")
    wide = stats.set_index(["protocol", "run_dataset", "dataset", "turn", "agent_index"])[
        ["mean", "std", "low", "high", "threads", "n"]
    ].unstack("agent_index")
    cells = pd.DataFrame(index=wide.index)
    for i, seat in enumerate(SEATS):
        for stat, column in (("mean", seat), ("std", f"{seat}_std"), ("low", f"{seat}_low"), ("high", f"{seat}_high")):
            cells[column] = wide[(stat, i)] if (stat, i) in wide else np.nan
    cells["threads"] = wide["threads"].max(axis=1)
    cells["n"] = wide["n"].max(axis=1)
    cells = cells.reset_index()
    labels = row_labels(outputs)
    cells["setting"] = cells["protocol"].map(lambda p: labels[p][0])
    cells["method"] = cells["protocol"].map(lambda p: labels[p][1])
    order = {p: i for i, p in enumerate(labels)}
    cells = cells.sort_values(
        ["protocol", "turn"], key=lambda s: s.map(order) if s.name == "protocol" else s, kind="stable"
    )
    return cells.astype({"threads": int, "n": int, "turn": int})[columns].reset_index(drop=True)


def _mean_std(mean: float, std: float) -> str:
    if not finite(mean):
        return ""
    return f"{mean:.1f} ± {std:.1f}" if finite(std) else f"{mean:.1f}"


def _rank(value, order) -> tuple:
    return (order.index(value), "") if value in order else (len(order), str(value))


def paper_layout(cells: pd.DataFrame, method_order, by_method_first: bool = False) -> pd.DataFrame:
    """Rows (setting, method, turn), columns "<dataset> A0", "<dataset> A1" per dataset in the
    paper's order, then "Avg A0", "Avg A1"; cells "mean ± std" (%)."""
    if cells.empty:
        return pd.DataFrame(columns=["setting", "method", "turn"])
    datasets = [d for d in dict.fromkeys(cells["dataset"]) if d != AVG]
    datasets = sorted(datasets, key=lambda d: _rank(d, PAPER_DATASET_ORDER)) + [AVG]
    rows = []
    for (setting, method, turn), g in cells.groupby(["setting", "method", "turn"], sort=False):
        row = {"setting": setting, "method": method, "turn": int(turn)}
        by = g.set_index("dataset")
        for dataset in datasets:
            name = "Avg" if dataset == AVG else dataset
            for seat in SEATS:
                row[f"{name} {seat}"] = (
                    _mean_std(by.loc[dataset, seat], by.loc[dataset, f"{seat}_std"]) if dataset in by.index else ""
                )
        row["protocol"] = g["protocol"].iloc[0]
        row["threads"] = int(g["threads"].max())
        rows.append(row)
    table = pd.DataFrame(rows)

    def sort_key(r):
        setting, method = _rank(r["setting"], SETTING_ORDER), _rank(r["method"], method_order)
        return (setting, method, r["turn"]) if by_method_first else (setting, r["turn"], method)

    return table.iloc[sorted(range(len(table)), key=lambda i: sort_key(table.iloc[i]))].reset_index(drop=True)


# --------------------------------------------------------------------------- uncertainty per round


def sys_uncertainty(outputs: RunOutputs) -> pd.DataFrame:
    """Mean TU, Sys-EU, Sys-AU (nats) over questions, per (protocol, dataset, round), each with its
    95 % interval (`<measure>_low`, `<measure>_high`): the BCa bootstrap over questions (a question's
    rows drawn together); NaN under `intervals.MIN_UNITS` questions."""
    columns = [
        "setting",
        "method",
        "protocol",
        "dataset",
        "run_dataset",
        "round",
        "turn",
        "TU",
        "Sys-EU",
        "Sys-AU",
        "k_threads",
        "n",
        *bound_columns(SYS_MEASURES),
    ]
    labels = row_labels(outputs)
    rounds = outputs.uncertainty_rounds
    rounds = rounds[rounds["protocol"].isin(list(labels))]
    if rounds.empty:
        return pd.DataFrame(columns=columns)
    g = (
        rounds.groupby(["protocol", "dataset", "round"], sort=False)
        .agg(
            **{name: (column, "mean") for name, column in SYS_MEASURES.items()},
            k_threads=("k_threads", "max"),
            n=("question_id", "nunique"),
        )
        .reset_index()
    )
    measures = {name: (column, 1.0) for name, column in SYS_MEASURES.items()}
    bounds = cell_intervals(rounds, ["protocol", "dataset", "round"], measures)  # means, no shares
    g = g.merge(bounds, on=["protocol", "dataset", "round"], how="left")
    g = g.rename(columns={"dataset": "run_dataset"})
    g["dataset"] = g["run_dataset"].map(outputs.paper_dataset)
    g["turn"] = g["round"] + 1
    g["setting"] = g["protocol"].map(lambda p: labels[p][0])
    g["method"] = g["protocol"].map(lambda p: labels[p][1])
    order = {p: i for i, p in enumerate(labels)}
    g = g.sort_values(["protocol", "run_dataset", "round"], key=lambda s: s.map(order) if s.name == "protocol" else s)
    return g[columns].reset_index(drop=True)


def plot_sys_uncertainty(outputs: RunOutputs):
    """Sys-EU and Sys-AU against the debate round, one line per protocol (questions of all datasets pooled)."""
    labels = row_labels(outputs)
    rounds = outputs.uncertainty_rounds
    rounds = rounds[rounds["protocol"].isin(list(labels))]
    fig, axes = subplots(1, 2, figsize=(10, 3.8), squeeze=False)
    for ax, (column, name) in zip(axes[0], [("epistemic", "Sys-EU"), ("aleatoric", "Sys-AU")]):
        for i, protocol in enumerate(labels):
            part = rounds[rounds["protocol"] == protocol]
            if part.empty:
                continue
            curve = part.groupby("round")[column].mean()
            setting, method = labels[protocol]
            k = int(part["k_threads"].max())
            ax.plot(
                curve.index,
                curve.to_numpy(),
                marker="o",
                color=f"C{i % 10}",
                label=f"{protocol} ({setting}, {method}, K={k})",
            )
        ax.set_xlabel("debate round (0 = initial answers, turn T = round + 1)")
        ax.set_ylabel(f"{name} (nats)")
        ax.set_title(name, fontsize="medium")
        if not rounds.empty:
            ax.set_xticks(sorted(rounds["round"].unique()))
    n = rounds.groupby(["dataset", "question_id"]).ngroups if not rounds.empty else 0
    handles, names = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(
            handles,
            names,
            loc="lower center",
            bbox_to_anchor=(0.5, -0.02),
            ncol=min(3, len(handles)),
            fontsize="small",
            frameon=False,
        )
    fig.suptitle(f"{outputs.experiment}: system uncertainty per round (mean over n={n} questions)", fontsize="large")
    fig.tight_layout(rect=(0, 0.12 if handles else 0, 1, 1))
    return fig


# --------------------------------------------------------------------------- answer flips


def flip_transitions(states: pd.DataFrame, outputs: RunOutputs) -> pd.DataFrame:
    """Per protocol, seat and pair of consecutive rounds, over the (question, thread) transitions of
    all datasets: the shares (%) C2C, C2W, W2C, W2W, flip_ratio = C2W + W2C (the share that changes
    correctness, App. D.4) and answer_changed (the share whose answer differs at all), each with its
    95 % interval (`<share>_low`, `<share>_high`, %): over questions, a question's threads drawn
    together (BCa), Clopper-Pearson's exact interval where each question's threads agree; a bootstrap
    gives none under `intervals.MIN_UNITS` questions. n: (question, thread) transitions."""
    columns = [
        "setting",
        "method",
        "protocol",
        "seat",
        "agent",
        "from_round",
        "to_round",
        *TRANSITIONS,
        "flip_ratio",
        "answer_changed",
        "n",
        *bound_columns(FLIP_SHARES),
    ]
    if states.empty:
        return pd.DataFrame(columns=columns)
    after = states.assign(round=states["round"] - 1)
    pairs = states.merge(after, on=[*STATE_KEYS, "round"], suffixes=("", "_next"))
    was, now = pairs["correct"] == 1, pairs["correct_next"] == 1
    pairs = pairs.assign(
        C2C=was & now,
        C2W=was & ~now,
        W2C=~was & now,
        W2W=~was & ~now,
        answer_changed=pairs["answer"] != pairs["answer_next"],
    )
    pairs["flip_ratio"] = pairs["C2W"] | pairs["W2C"]
    rates = list(FLIP_SHARES)
    keys = ["protocol", "agent_index", "round"]
    g = pairs.groupby(keys, sort=False)
    out = (100 * g[rates].mean()).join(g.size().rename("n")).reset_index()
    # the unit is the question of its dataset (ids may repeat across datasets), pooled over datasets
    pairs = pairs.assign(question=pairs.groupby(["dataset", "question_id"], sort=False).ngroup())
    rate_metrics = {rate: (rate, 100.0) for rate in rates}
    out = out.merge(
        cell_intervals(pairs.astype({r: float for r in rates}), keys, rate_metrics, "question", shares=rates), on=keys
    )
    labels, infos = row_labels(outputs), pair_protocols(outputs)
    out["setting"] = out["protocol"].map(lambda p: labels[p][0])
    out["method"] = out["protocol"].map(lambda p: labels[p][1])
    out["seat"] = out["agent_index"].map(lambda i: SEATS[int(i)])
    out["agent"] = [infos[p].participants[int(i)] for p, i in zip(out["protocol"], out["agent_index"])]
    out["from_round"] = out["round"].astype(int)
    out["to_round"] = out["from_round"] + 1
    order = {p: i for i, p in enumerate(labels)}
    out = out.sort_values(["protocol", "from_round", "seat"], key=lambda s: s.map(order) if s.name == "protocol" else s)
    return out[columns].reset_index(drop=True)


def plot_flips(flips: pd.DataFrame, experiment: str):
    """Stacked shares of the four transitions from the initial answer to the first debate round
    (App. D.4 / Fig. 5), one bar per protocol and seat."""
    first = flips[flips["from_round"] == 0].reset_index(drop=True)
    fig, ax = subplots(figsize=(max(5.0, 1.3 * len(first) + 2), 4.2))
    x = np.arange(len(first))
    bottom = np.zeros(len(first))
    colours = {"C2C": "tab:green", "C2W": "tab:red", "W2C": "tab:blue", "W2W": "tab:grey"}
    for transition in TRANSITIONS:
        values = first[transition].to_numpy(float)
        ax.bar(x, values, 0.6, bottom=bottom, label=transition, color=colours[transition])
        bottom += values
    ticks = [f"{r.protocol}\n{r.seat} {r.agent}\nflip {r.flip_ratio:.0f}%, n={r.n}" for r in first.itertuples()]
    ax.set_xticks(x, ticks, fontsize="small")
    ax.set_ylabel("share of (question, thread) transitions (%)")
    ax.set_xlabel("protocol and seat (flip = C2W + W2C)")
    ax.set_ylim(0, 105)
    n = int(first["n"].sum()) if len(first) else 0
    ax.set_title(
        f"{experiment}: answer transitions, initial answer → debate round 1 (n={n} transitions)", fontsize="medium"
    )
    if len(first):
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- the paper


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    from .umad_claims import paper_claims  # imports this module's tables: here, not at the top

    states = agent_states(outputs)
    cells = table1_cells(outputs, states)
    ablations = cells[cells["method"].isin(ABLATION_METHODS)]
    sys_u = sys_uncertainty(outputs)
    flips = flip_transitions(states, outputs)
    result = PaperEvaluation()
    result.tables["table1"] = paper_layout(cells, TABLE1_METHODS)
    result.tables["table3"] = paper_layout(ablations, ABLATION_METHODS, by_method_first=True)
    result.tables["sys_uncertainty"] = sys_u.round(4)
    result.tables["flips"] = flips.round(2)
    result.cells["table1"] = long_table(cells, CELL_KEYS, SEATS)
    result.cells["table3"] = long_table(ablations, CELL_KEYS, SEATS)
    result.claims = paper_claims(cells, flips, states, outputs)
    if not outputs.uncertainty_rounds.empty:
        result.figures["sys_uncertainty"] = plot_sys_uncertainty(outputs)
    if (flips["from_round"] == 0).any():
        result.figures["flips"] = plot_flips(flips, outputs.experiment)
    return result
