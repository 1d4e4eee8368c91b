"""SDRL (Liu et al., arXiv:2601.22297 §6, Tables 1-6): Tables 1-6 and Fig. 1 (accuracy by debate round) from the debate stage's
questions and turns, the zero-shot samples and the training metrics. Tables 1, 3, 4 and 5 are built
here; Table 2 (single agent) is `sdrl_single_agent`'s, Fig. 1 and Table 6 (by debate round)
`sdrl_rounds`'s; the claims (sdrl-1 to sdrl-8) are `sdrl_claims`.

Which protocol fills which cell follows from the config: the topology = its kind (all_to_all is the
paper's decentralized MAD, ring its sparse MAD, centralized its centralized MAD), N = its
participants, T = its rounds, the method = "Base" for untrained agents, else the label of the
training run behind them ("DAPO", "SDRL-rand", "SDRL-freq"). Maj is the system answer of round 0
(the plurality; for centralized MAD the hub's answer, as in Choi et al.'s code), Debate the
protocol's answer after round T, Δ = Debate − Maj; all in %, the mean over the protocol's threads
(the paper's 5 runs), "± sd" over threads in the printed tables where there are several. `model` =
the paper backbone the protocol's (or the agent's) model stands for (`RunOutputs.backbone`: the
paper's "Q2.5-3B" / "Q3-4B-Base"), so a cell meets its own backbone's published rows only and the
tables keep one row per backbone.

Every cell compared with the paper carries its 95 % interval (`low`, `high` of the long cells), over
questions, the unit the paper samples: Maj, Debate, Δ and mean@K / maj@K by `cell_estimates` /
`difference_estimate` (exact where a cell is a count of questions, else the BCa bootstrap of the printed
statistic itself, a question's threads and agents drawn together), Table 6's token means by
`paper_numbers.cell_intervals` (`sdrl_rounds`). A bootstrap over fewer than `intervals.MIN_UNITS` questions gives none.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ...grading import INVALID, answer_keys
from ...grading.votes import plurality
from ...intervals import Estimate, bootstrap, paired_accuracy_difference, proportion
from ...training.settings import TrainSettings
from ..claims import finite
from ..paper_numbers import (
    agreed_outcomes,
    bound_columns,
    dataset_average_statistic,
    joined_datasets,
    long_table,
)
from ..result import PaperEvaluation
from ..run import ProtocolInfo, RunOutputs, protocol_method, seat_rounds

log = logging.getLogger(__name__)

TOPOLOGIES = {"all_to_all": "decentralized", "ring": "sparse", "centralized": "centralized"}
MAIN_N = 5  # the paper's main setting: 5 agents, 1 round
METRICS = ["maj", "debate", "delta"]
LABELS = {"maj": "Maj", "debate": "Debate", "delta": "Δ"}
PAPER_K = {"math500": 4}  # Table 2's K per benchmark; the others 32
DEFAULT_K = 32
AVG = "avg"
BASE = "Base"
METHOD_ORDER = [BASE, "DAPO", "SDRL-rand", "SDRL-freq"]
GROUP = ["protocol", "dataset", "question_id", "thread"]
PAPER = "sdrl"


# --------------------------------------------------------------------------- answers and votes


def task_types(outputs: RunOutputs) -> dict[tuple[str, str], str]:
    """(dataset, question_id) -> task type, from the questions (turns and samples don't carry it)."""
    q = outputs.questions
    if q.empty:
        return {}
    q = q.drop_duplicates(["dataset", "question_id"])
    return dict(zip(zip(q["dataset"], q["question_id"].astype(str)), q["task_type"]))


def with_answer_keys(frame: pd.DataFrame, task_types: dict) -> pd.DataFrame:
    """`key` per row as the debate stage compares answers (`answer_keys` of the question's task
    type; the raw answer where the type is unknown), each distinct answer canonicalised once."""
    answers = [None if pd.isna(a) else str(a) for a in frame["answer"]]
    types = [task_types.get((d, str(q))) for d, q in zip(frame["dataset"], frame["question_id"])]
    cache: dict = {}
    for pair in set(zip(types, answers)):
        cache[pair] = answer_keys([pair[1]], task_type=pair[0])[0]
    return frame.assign(key=[cache[p] for p in zip(types, answers)])


def plurality_correct(frame: pd.DataFrame, groups: list[str], order: str) -> pd.DataFrame:
    """Per group, whether the plurality answer is correct: `grading.votes.plurality` over the keys
    in `order` (ties to the first voter, the workflow's first_agent rule), the winner graded as its
    first voter's answer; a group without a valid answer is wrong."""

    def winner_correct(group: pd.DataFrame) -> bool:
        group = group.sort_values(order, kind="stable")
        position = plurality(list(group["key"])).position
        return position is not None and bool(group["correct"].iloc[position])

    if frame.empty:
        return pd.DataFrame(columns=[*groups, "correct"])
    winners = [
        (*(name if isinstance(name, tuple) else (name,)), winner_correct(g))
        for name, g in frame.groupby(groups, sort=False)
    ]
    return pd.DataFrame(winners, columns=[*groups, "correct"])


def system_by_round(outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Per (protocol, dataset, question, thread, round 0..T): is the system's answer after that round
    correct. Each agent's answer is its last call's, carried forward through rounds it sat out;
    the system answer is the plurality, or the hub's (agent 0) for centralized MAD whose final
    answers are the hub's."""
    columns = [*GROUP, "round", "correct"]
    turns = outputs.turns
    names = {p.name: p for p in infos}
    turns = turns[turns["protocol"].isin(list(names))]
    if turns.empty:
        return pd.DataFrame(columns=columns)
    turns = with_answer_keys(turns, task_types(outputs))
    questions = outputs.questions
    last_round = {name: max(names[name].rounds, int(part["round"].max())) for name, part in turns.groupby("protocol")}
    frames = []
    for name, long in seat_rounds(turns, ["key", "correct"], last_round).groupby("protocol", sort=False):
        info = names[name]
        # keys are strings (INVALID too), so only a missing call is NaN
        long = long.assign(key=long["key"].where(long["key"].notna(), INVALID), correct=long["correct"].eq(True))
        system = plurality_correct(long, [*GROUP, "round"], "agent_index")
        if info.kind == "centralized":
            hub = long[long["agent_index"] == 0][[*GROUP, "round", "correct"]]
            if _final_is_hub(hub, questions[questions["protocol"] == name], info.rounds):
                system = hub
        frames.append(system[columns])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _final_is_hub(hub: pd.DataFrame, questions: pd.DataFrame, rounds: int) -> bool:
    """Whether the protocol's final answers are the hub's (config `final: hub`, the paper's setting):
    the hub's last-round answer is right exactly where the protocol's is."""
    last = hub[hub["round"] == rounds]
    joined = questions[GROUP[1:] + ["protocol", "correct"]].merge(last, on=GROUP, suffixes=("", "_hub"))
    return bool(len(joined)) and bool((joined["correct"].astype(bool) == joined["correct_hub"]).all())


# --------------------------------------------------------------------------- intervals

RESAMPLED = "questions, each one's threads and agents drawn together"


def _question_counts(rows: pd.DataFrame, columns: list[str], thread: str | None) -> pd.DataFrame | None:
    """Each question's 0/1 value of `columns` where the cell is a count of questions: one dataset,
    every thread on the same questions, and each question's rows (threads, agents) agreeing on every
    column, so the printed mean is the share of questions; else None."""
    if rows["dataset"].nunique() != 1:
        return None
    if thread and rows.groupby(thread)["question_id"].agg(frozenset).nunique() > 1:
        return None
    if not rows[columns].astype(float).isin([0.0, 1.0]).all().all():
        return None
    return agreed_outcomes(rows[columns], rows["question_id"])


def cell_estimates(rows: pd.DataFrame, columns: list[str], thread: str | None = None) -> dict[str, Estimate]:
    """Each column's printed mean (`paper_numbers.dataset_average_statistic`) over one cell's rows in %
    with its 95 % interval: exact (Clopper-Pearson) where it is a count of questions
    (`_question_counts`: one answer per question, or threads that agree), else the BCa bootstrap over
    questions of that very statistic (centred on the printed value even where threads cover different
    questions or datasets differ in size)."""
    statistic, n_questions = dataset_average_statistic(rows, columns, thread)
    out = {}
    for j, column in enumerate(columns):
        counts = _question_counts(rows, [column], thread)
        if counts is not None:
            out[column] = proportion(int(counts[column].sum()), len(counts))
        else:
            out[column] = bootstrap(
                lambda index, j=j: statistic(index)[:, j], n_questions, unit=RESAMPLED, vectorized=True
            )
    return {column: est.scaled(100) for column, est in out.items()}


def difference_estimate(rows: pd.DataFrame, minuend: str, subtrahend: str, thread: str | None = None) -> Estimate:
    """The printed mean of `minuend` − that of `subtrahend` (0/1 columns, e.g. Debate − Maj) in
    points, paired by question: exact (the conditional interval, McNemar's) where both are counts of
    questions (`_question_counts`), else the BCa bootstrap over questions of the difference of
    `paper_numbers.dataset_average_statistic`s on the same resample."""
    counts = _question_counts(rows, [minuend, subtrahend], thread)
    if counts is not None:
        return paired_accuracy_difference(counts[minuend].astype(bool), counts[subtrahend].astype(bool)).scaled(100)
    statistic, n_questions = dataset_average_statistic(rows, [minuend, subtrahend], thread)
    return bootstrap(
        lambda index: np.subtract(*statistic(index).T), n_questions, unit=RESAMPLED, vectorized=True, paired=True
    ).scaled(100)


# --------------------------------------------------------------------------- debate cells


def _steps(outputs: RunOutputs, info: ProtocolInfo):
    """Training steps of the run behind a trained protocol (Table 5's budget); None when untrained."""
    if len(info.trained_runs) != 1:
        return None
    return int(outputs.runs[info.trained_runs[0]].settings.get("steps", TrainSettings.steps))


def debate_infos(outputs: RunOutputs) -> list[ProtocolInfo]:
    """The protocols the tables read: the paper's three topologies, no adversarial seats."""
    return [p for p in outputs.protocols.values() if p.kind in TOPOLOGIES and not p.adversarial]


def question_outcomes(outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Per (protocol, dataset, question, thread): whether the round-0 system answer (Maj) and the
    final answer (Debate) are right, the rows the tables average and the claims resample."""
    q = outputs.questions
    names = {p.name for p in infos}
    q = q[q["protocol"].isin(list(names))][[*GROUP, "pre_correct", "correct"]].copy()
    if q.empty:
        return pd.DataFrame(columns=[*GROUP, "maj", "debate"])
    q["maj"] = q["pre_correct"].astype(bool)
    hubs = [p for p in infos if p.kind == "centralized"]
    if hubs:  # centralized Maj: the hub's round-0 answer where its final answer is the hub's
        rounds = system_by_round(outputs, hubs)
        first = rounds[rounds["round"] == 0].rename(columns={"correct": "hub0"})[[*GROUP, "hub0"]]
        q = q.merge(first, on=GROUP, how="left")
        q["maj"] = q["hub0"].where(q["hub0"].notna(), q["maj"]).astype(bool)
    q["debate"] = q["correct"].astype(bool)
    return q[[*GROUP, "maj", "debate"]]


def debate_cells(outputs: RunOutputs, infos: list[ProtocolInfo], q: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (protocol, dataset) and per protocol over its datasets (dataset "avg"): Maj,
    Debate, Δ in %, mean and sd over threads, n = question-thread rows (`q`: `question_outcomes`).
    `<metric>_low` / `_high`: the 95 % interval over questions, a question's threads drawn together
    (`cell_estimates`; Δ paired by question, `difference_estimate`); for "avg" the questions of
    every dataset, the statistic still the unweighted mean of the datasets' values."""
    columns = [
        "protocol",
        "model",
        "topology",
        "n_agents",
        "rounds",
        "method",
        "steps",
        "dataset",
        "run_dataset",
        "threads",
        *METRICS,
        *[f"{m}_sd" for m in METRICS],
        *bound_columns(METRICS),
        "n",
    ]
    names = {p.name: p for p in infos}
    q = question_outcomes(outputs, infos) if q is None else q
    if q.empty:
        return pd.DataFrame(columns=columns)
    per_thread = (
        q.groupby(["protocol", "dataset", "thread"], sort=False)
        .agg(maj=("maj", "mean"), debate=("debate", "mean"), n=("maj", "size"))
        .reset_index()
    )
    per_thread[["maj", "debate"]] *= 100
    per_thread["delta"] = per_thread["debate"] - per_thread["maj"]
    avg = (
        per_thread.groupby(["protocol", "thread"], sort=False)
        .agg(
            maj=("maj", "mean"),
            debate=("debate", "mean"),
            delta=("delta", "mean"),
            n=("n", "sum"),
            run_dataset=("dataset", joined_datasets),
        )
        .reset_index()
    )
    questions = dict(list(q.groupby(["protocol", "dataset"], sort=False)))
    questions |= {(p, AVG): g for p, g in q.groupby("protocol", sort=False)}
    rows = []
    for (protocol, dataset), g in [
        *per_thread.groupby(["protocol", "dataset"], sort=False),
        *(((p, AVG), g) for p, g in avg.groupby("protocol", sort=False)),
    ]:
        info = names[protocol]
        row = {
            "protocol": protocol,
            "model": outputs.backbone(PAPER, info.models),
            "topology": TOPOLOGIES[info.kind],
            "n_agents": info.n_agents,
            "rounds": info.rounds,
            "method": protocol_method(info, outputs.runs, base=BASE),
            "steps": _steps(outputs, info),
            "threads": len(g),
            "n": int(g["n"].sum()),
            "dataset": AVG if dataset == AVG else outputs.paper_dataset(dataset),
            "run_dataset": g["run_dataset"].iloc[0] if dataset == AVG else dataset,
        }
        for m in METRICS:
            row[m] = float(g[m].mean())
            row[f"{m}_sd"] = float(g[m].std(ddof=1)) if len(g) > 1 else float("nan")
        cell = questions[(protocol, dataset)]
        estimates = cell_estimates(cell, ["maj", "debate"], thread="thread")
        estimates["delta"] = difference_estimate(cell, "debate", "maj", thread="thread")
        for m, est in estimates.items():
            row[f"{m}_low"], row[f"{m}_high"] = est.low, est.high
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def preference(info: ProtocolInfo) -> tuple:
    """The protocol that stands for a cell: N nearest the paper's 5 (the larger on a tie), Choi's
    template, then by name."""
    return abs(info.n_agents - MAIN_N), -info.n_agents, info.template != "choi", info.name


def pick(infos: list[ProtocolInfo], outputs: RunOutputs, by: list[str], order=preference) -> list[ProtocolInfo]:
    """One protocol per value of `by` (attributes, or "method" / "topology" / "model"), the first by `order`."""
    chosen = {}
    for info in sorted(infos, key=order):
        attrs = {
            "method": protocol_method(info, outputs.runs, base=BASE),
            "topology": TOPOLOGIES[info.kind],
            "model": outputs.backbone(PAPER, info.models),
            "steps": _steps(outputs, info),
        }
        key = tuple(attrs[b] if b in attrs else getattr(info, b) for b in by)
        chosen.setdefault(key, info)
    return list(chosen.values())


def _one_round(infos: list[ProtocolInfo]) -> list[ProtocolInfo]:
    return [p for p in infos if p.rounds == 1]


def decentralized(infos: list[ProtocolInfo]) -> list[ProtocolInfo]:
    return [p for p in infos if TOPOLOGIES[p.kind] == "decentralized"]


def method_rank(method: str) -> str:
    """Sort key: the paper's order (Base, DAPO, SDRL-rand, SDRL-freq), then any other by name."""
    return f"{METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER):02d} {method}"


def dataset_order(cells: pd.DataFrame) -> list[str]:
    own = set(cells.loc[cells["dataset"] != AVG, "run_dataset"])
    return [d for d in dict.fromkeys(cells["run_dataset"]) if d in own]


def _fmt(mean: float, sd: float) -> str:
    if not finite(mean):
        return ""
    return f"{mean:.1f}" if not finite(sd) else f"{mean:.1f} ± {sd:.1f}"


def debate_layout(cells: pd.DataFrame, index: list[str]) -> pd.DataFrame:
    """The paper's layout: rows = `index` (method first), columns "<dataset> Maj|Debate|Δ" per run
    dataset then "Avg ...", cells "mean ± sd over threads" (one decimal)."""
    if cells.empty:
        return pd.DataFrame(columns=[*index, "protocol", "threads"])
    datasets = dataset_order(cells)
    rows = []
    for key, g in cells.groupby(index, sort=False):
        row = dict(zip(index, key if isinstance(key, tuple) else (key,)))
        row["protocol"] = ",".join(dict.fromkeys(g["protocol"]))
        row["threads"] = int(g["threads"].max())
        per = {r["run_dataset"]: r for _, r in g[g["dataset"] != AVG].iterrows()}
        per["Avg"] = next((r for _, r in g[g["dataset"] == AVG].iterrows()), None)
        for label in [*datasets, "Avg"]:
            r = per.get(label)
            for m in METRICS:
                row[f"{label} {LABELS[m]}"] = "" if r is None else _fmt(r[m], r[f"{m}_sd"])
        rows.append(row)
    out = pd.DataFrame(rows)
    return out.sort_values(
        index, key=lambda s: s.map(method_rank) if s.name == "method" else s, kind="stable"
    ).reset_index(drop=True)


def _cells_long(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return long_table(cells.drop_duplicates(keys), keys, METRICS)


# --------------------------------------------------------------------------- the tables


def _full_budget_first(outputs: RunOutputs):
    """`preference`, with the run of the most training steps first after N: a reduced-budget run
    (Table 5's SDRL-125) stands for its method in Table 5 only."""
    return lambda p: (*preference(p)[:2], -(_steps(outputs, p) or 0), *preference(p)[2:])


def table1(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Decentralized MAD, T = 1, per method the N nearest 5 (of its longest-trained run)."""
    chosen = pick(_one_round(decentralized(infos)), outputs, ["model", "method"], order=_full_budget_first(outputs))
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table3(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """The N ablation: decentralized MAD, T = 1, every N per method."""
    chosen = pick(
        _one_round(decentralized(infos)), outputs, ["model", "method", "n_agents"], order=_full_budget_first(outputs)
    )
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table4(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Topologies: sparse, centralized (and decentralized for reference), T = 1, N nearest 5."""
    chosen = pick(_one_round(infos), outputs, ["model", "method", "topology"], order=_full_budget_first(outputs))
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table5(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """The training budget: Table 1's setting (decentralized, T = 1, N nearest 5) for every trained
    run, one row per (backbone, method, steps), so a reduced-budget run sits beside the full one."""
    trained = [p for p in _one_round(decentralized(infos)) if _steps(outputs, p) is not None]
    chosen = pick(trained, outputs, ["model", "method", "steps"])
    out = cells[cells["protocol"].isin([p.name for p in chosen])].copy()
    return out.assign(steps=out["steps"].astype(int))


def single_agent_intervals(t2: pd.DataFrame, per_question: pd.DataFrame) -> pd.DataFrame:
    """Table 2 (`sdrl_single_agent.single_agent`) with the 95 % intervals of mean@K and maj@K
    (`<metric>_low` / `_high`) over questions, a question's K samples (and those of the method's other
    agents) drawn together (`cell_estimates`: maj@K exact with one agent; "avg" the unweighted mean
    of the datasets' values over every dataset's questions)."""
    metrics = {"mean_at_k": "mean", "maj_at_k": "maj"}
    out = t2.assign(**{column: np.nan for column in bound_columns(list(metrics))})
    for i, row in t2.iterrows():
        rows = per_question[(per_question["model"] == row["model"]) & (per_question["method"] == row["method"])]
        if row["dataset"] != AVG:
            rows = rows[rows["dataset"] == row["run_dataset"]]
        estimates = cell_estimates(rows, list(metrics.values()))
        for metric, column in metrics.items():
            out.loc[i, [f"{metric}_low", f"{metric}_high"]] = estimates[column].low, estimates[column].high
    return out


# --------------------------------------------------------------------------- entry point


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    # all three import this module's helpers: here, not at the top
    from .sdrl_claims import paper_claims
    from .sdrl_rounds import fig1, plot_fig1, table6, table6_cells
    from .sdrl_single_agent import single_agent, single_agent_layout, single_agent_questions

    infos = debate_infos(outputs)
    q = question_outcomes(outputs, infos)
    cells = debate_cells(outputs, infos, q)
    t1, t3, t4 = table1(cells, outputs, infos), table3(cells, outputs, infos), table4(cells, outputs, infos)
    t5 = table5(cells, outputs, infos)
    per_question = single_agent_questions(outputs)
    t2 = single_agent_intervals(single_agent(outputs, per_question), per_question)
    t6 = table6(outputs, infos)
    by_round = fig1(outputs, infos)
    result = PaperEvaluation()
    result.tables["table1"] = debate_layout(t1, ["model", "method", "n_agents", "rounds"])
    result.tables["table2"] = single_agent_layout(t2)
    result.tables["table3"] = debate_layout(t3, ["model", "method", "n_agents"])
    result.tables["table4"] = debate_layout(t4, ["model", "method", "topology", "n_agents"])
    result.tables["table5"] = debate_layout(t5, ["model", "method", "steps", "n_agents"])
    result.tables["table6"] = t6.round(1)
    result.tables["fig1"] = by_round.round(2)
    result.cells["table1"] = _cells_long(t1, ["model", "dataset", "n_agents", "method"])
    result.cells["table2"] = long_table(t2, ["model", "dataset", "method"], ["mean_at_k", "maj_at_k"])
    result.cells["table3"] = _cells_long(t3, ["model", "dataset", "n_agents", "method"])
    result.cells["table4"] = _cells_long(t4, ["model", "dataset", "n_agents", "topology", "method"])
    result.cells["table5"] = _cells_long(t5, ["model", "dataset", "n_agents", "method", "steps"])
    result.cells["table6"] = table6_cells(t6)
    result.claims = paper_claims(outputs, q, cells, infos, t1, per_question, t2, t6)
    if not by_round.empty:
        result.figures["fig1_accuracy_by_round"] = plot_fig1(by_round, outputs.experiment)
    return result
