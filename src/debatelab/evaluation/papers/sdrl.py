"""SDRL (Liu et al., arXiv:2601.22297 §6, Tables 1-6; §6): Tables 1-6 and Fig. 1 (accuracy by debate round) from the debate stage's
questions and turns, the zero-shot samples and the training metrics, and the claims of §9.

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

Claims (§9.3-§9.5) carry a 95 % interval: the debate and single-agent ones a bootstrap over
questions (paired: two protocols or policies are read on the same resampled questions), the
training ones (one logged row per step, nothing per question) a bootstrap over steps or the OLS
slope's t interval.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ...grading import INVALID, answer_keys
from ...grading.votes import plurality
from ...reporting.figures import subplots
from ...training.settings import TrainSettings
from ..claim_engine import (
    DIFFERENCE,
    PAIRED_ACCURACY,
    SLOPE,
    Case,
    ClaimSpec,
    For,
    Resampled,
    Rows,
    Shares,
    Untestable,
    evaluate_claims,
    only,
)
from ..claims import Claim, finite
from ..paper_numbers import long_table
from ..run import ProtocolInfo, RunOutputs, protocol_method, run_label, seat_rounds
from ..stage import PaperEvaluation

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


def _task_types(outputs: RunOutputs) -> dict[tuple[str, str], str]:
    """(dataset, question_id) -> task type, from the questions (turns and samples don't carry it)."""
    q = outputs.questions
    if q.empty:
        return {}
    q = q.drop_duplicates(["dataset", "question_id"])
    return dict(zip(zip(q["dataset"], q["question_id"].astype(str)), q["task_type"]))


def _with_keys(frame: pd.DataFrame, task_types: dict) -> pd.DataFrame:
    """`key` per row as the debate stage compares answers (`answer_keys` of the question's task
    type; the raw answer where the type is unknown), each distinct answer canonicalised once."""
    answers = [None if pd.isna(a) else str(a) for a in frame["answer"]]
    types = [task_types.get((d, str(q))) for d, q in zip(frame["dataset"], frame["question_id"])]
    cache: dict = {}
    for pair in set(zip(types, answers)):
        cache[pair] = answer_keys([pair[1]], task_type=pair[0])[0]
    return frame.assign(key=[cache[p] for p in zip(types, answers)])


def _plurality(frame: pd.DataFrame, groups: list[str], order: str) -> pd.DataFrame:
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
    turns = _with_keys(turns, _task_types(outputs))
    questions = outputs.questions
    last_round = {name: max(names[name].rounds, int(part["round"].max())) for name, part in turns.groupby("protocol")}
    frames = []
    for name, long in seat_rounds(turns, ["key", "correct"], last_round).groupby("protocol", sort=False):
        info = names[name]
        # keys are strings (INVALID too), so only a missing call is NaN
        long = long.assign(key=long["key"].where(long["key"].notna(), INVALID), correct=long["correct"].eq(True))
        system = _plurality(long, [*GROUP, "round"], "agent_index")
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
    Debate, Δ in %, mean and sd over threads, n = question-thread rows (`q`: `question_outcomes`)."""
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
            run_dataset=("dataset", lambda d: "+".join(sorted(set(d)))),
        )
        .reset_index()
    )
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
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _preference(info: ProtocolInfo) -> tuple:
    """The protocol that stands for a cell: N nearest the paper's 5 (the larger on a tie), Choi's
    template, then by name."""
    return abs(info.n_agents - MAIN_N), -info.n_agents, info.template != "choi", info.name


def _pick(infos: list[ProtocolInfo], outputs: RunOutputs, by: list[str], order=_preference) -> list[ProtocolInfo]:
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


def _decentralized(infos: list[ProtocolInfo]) -> list[ProtocolInfo]:
    return [p for p in infos if TOPOLOGIES[p.kind] == "decentralized"]


def _method_rank(method: str) -> str:
    """Sort key: the paper's order (Base, DAPO, SDRL-rand, SDRL-freq), then any other by name."""
    return f"{METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER):02d} {method}"


def _dataset_order(cells: pd.DataFrame) -> list[str]:
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
    datasets = _dataset_order(cells)
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
        index, key=lambda s: s.map(_method_rank) if s.name == "method" else s, kind="stable"
    ).reset_index(drop=True)


def _cells_long(cells: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    if cells.empty:
        return pd.DataFrame(columns=[*keys, "n", "run_dataset", "metric", "value"])
    return long_table(cells.drop_duplicates(keys), keys, METRICS)


# --------------------------------------------------------------------------- the tables


def _full_budget_first(outputs: RunOutputs):
    """`_preference`, with the run of the most training steps first after N: a reduced-budget run
    (Table 5's SDRL-125) stands for its method in Table 5 only."""
    return lambda p: (*_preference(p)[:2], -(_steps(outputs, p) or 0), *_preference(p)[2:])


def table1(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Decentralized MAD, T = 1, per method the N nearest 5 (of its longest-trained run)."""
    chosen = _pick(_one_round(_decentralized(infos)), outputs, ["model", "method"], order=_full_budget_first(outputs))
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table3(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """The N ablation: decentralized MAD, T = 1, every N per method."""
    chosen = _pick(
        _one_round(_decentralized(infos)), outputs, ["model", "method", "n_agents"], order=_full_budget_first(outputs)
    )
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table4(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Topologies: sparse, centralized (and decentralized for reference), T = 1, N nearest 5."""
    chosen = _pick(_one_round(infos), outputs, ["model", "method", "topology"], order=_full_budget_first(outputs))
    return cells[cells["protocol"].isin([p.name for p in chosen])]


def table5(cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """The training budget: Table 1's setting (decentralized, T = 1, N nearest 5) for every trained
    run, one row per (backbone, method, steps), so a reduced-budget run sits beside the full one."""
    trained = [p for p in _one_round(_decentralized(infos)) if _steps(outputs, p) is not None]
    chosen = _pick(trained, outputs, ["model", "method", "steps"])
    out = cells[cells["protocol"].isin([p.name for p in chosen])].copy()
    return out.assign(steps=out["steps"].astype(int))


def round_infos(outputs: RunOutputs, infos: list[ProtocolInfo]) -> list[ProtocolInfo]:
    """Fig. 1 / Table 6: per method the decentralized protocol with N nearest 5 and the most rounds."""
    return _pick(
        _decentralized(infos),
        outputs,
        ["model", "method"],
        order=lambda p: (*_preference(p)[:2], -p.rounds, *_preference(p)[2:]),
    )


def table6(outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Mean completion tokens of correct and incorrect responses per round (every call, round 0 =
    the pre-debate answers), per method and dataset."""
    columns = [
        "dataset",
        "run_dataset",
        "model",
        "n_agents",
        "method",
        "protocol",
        "round",
        "correct_tokens",
        "incorrect_tokens",
        "n_correct",
        "n_incorrect",
    ]
    chosen = {p.name: p for p in round_infos(outputs, infos)}
    turns = outputs.turns
    turns = turns[turns["protocol"].isin(list(chosen))]
    rows = []
    for (protocol, dataset, rnd), g in turns.groupby(["protocol", "dataset", "round"], sort=True):
        info = chosen[protocol]
        right = g["correct"].astype(bool)
        tokens = g["completion_tokens"].astype(float)
        rows.append(
            {
                "dataset": outputs.paper_dataset(dataset),
                "run_dataset": dataset,
                "model": outputs.backbone(PAPER, info.models),
                "n_agents": info.n_agents,
                "method": protocol_method(info, outputs.runs, base=BASE),
                "protocol": protocol,
                "round": int(rnd),
                "correct_tokens": tokens[right].mean() if right.any() else np.nan,
                "incorrect_tokens": tokens[~right].mean() if (~right).any() else np.nan,
                "n_correct": int(right.sum()),
                "n_incorrect": int((~right).sum()),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def table6_cells(t6: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "model", "n_agents", "method", "round"]
    parts = [
        t6[[*keys, "run_dataset"]].assign(
            metric=f"{kind}_tokens", value=t6[f"{kind}_tokens"].astype(float), n=t6[f"n_{kind}"]
        )
        for kind in ("correct", "incorrect")
    ]
    return pd.concat(parts, ignore_index=True)


def fig1(outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Accuracy (%) of the system answer after each round (round 0 = Maj) per method and dataset."""
    columns = ["dataset", "run_dataset", "method", "protocol", "n_agents", "round", "accuracy", "n"]
    chosen = round_infos(outputs, infos)
    rounds = system_by_round(outputs, chosen)
    if rounds.empty:
        return pd.DataFrame(columns=columns)
    methods = {p.name: protocol_method(p, outputs.runs, base=BASE) for p in chosen}
    sizes = {p.name: p.n_agents for p in chosen}
    out = rounds.groupby(["protocol", "dataset", "round"], sort=True)["correct"].agg(["mean", "size"]).reset_index()
    return pd.DataFrame(
        {
            "dataset": out["dataset"].map(outputs.paper_dataset),
            "run_dataset": out["dataset"],
            "method": out["protocol"].map(methods),
            "protocol": out["protocol"],
            "n_agents": out["protocol"].map(sizes),
            "round": out["round"].astype(int),
            "accuracy": 100 * out["mean"].astype(float),
            "n": out["size"],
        },
        columns=columns,
    )


def plot_fig1(by_round: pd.DataFrame, experiment: str):
    datasets = list(dict.fromkeys(by_round["run_dataset"]))
    width = 4.2 * max(1, len(datasets)) + 1.8  # 1.8 inches on the right hold the legend
    fig, axes = subplots(1, max(1, len(datasets)), figsize=(width, 3.8), squeeze=False, sharey=True)
    methods = sorted(dict.fromkeys(by_round["method"]), key=_method_rank)
    for ax, dataset in zip(axes[0], datasets):
        sub = by_round[by_round["run_dataset"] == dataset]
        for i, method in enumerate(methods):
            part = sub[sub["method"] == method].sort_values("round")
            if len(part):
                ax.plot(
                    part["round"],
                    part["accuracy"],
                    marker="o",
                    color=f"C{i % 10}",
                    label=f"{method} (N={int(part['n_agents'].iloc[0])})",
                )
        ax.set_xticks(sorted(set(sub["round"].astype(int))))
        ax.set_xlabel("debate round (0 = round-0 majority, Maj)")
        ax.set_title(f"{dataset}, n={int(sub.groupby('method')['n'].max().max())} question-threads", fontsize="medium")
        ax.set_ylim(-3, 103)
    axes[0][0].set_ylabel("accuracy of the system answer (%)")
    fig.suptitle(f"{experiment}: decentralized MAD accuracy by round (Fig. 1)", fontsize="large")
    fig.tight_layout()
    fig.subplots_adjust(right=1 - 1.8 / width)
    legend = {}
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(name, handle)
    handles, names = list(legend.values()), list(legend)
    if handles:  # inside the figure: the saved PNG is not cropped to fit what sticks out
        fig.legend(
            handles, names, loc="center left", bbox_to_anchor=(1 - 1.75 / width, 0.5), fontsize="small", frameon=False
        )
    return fig


# --------------------------------------------------------------------------- single agent (Table 2)


def agent_methods(outputs: RunOutputs) -> dict[str, str]:
    """Agent name -> the method its model is: "Base", or the label of the run that trained it."""
    return {agent: BASE if run is None else run_label(outputs.runs[run]) for agent, run in outputs.agent_runs.items()}


def single_agent_agents(outputs: RunOutputs, methods: dict[str, str]) -> dict[str, str]:
    """The agents of Table 2 (agent -> method): per (backbone, method), those with the largest reply
    budget. A config keeps the single-agent evaluation at the paper's budget and gives its debate
    seats smaller ones, cut to fit N replies into the window (sdrl.yaml's "_n5" / "_n7" agents):
    those samples are the debates' round 0, not Table 2's."""
    budget = {a: int(outputs.agent_max_tokens.get(a, 0)) for a in methods}
    key = {a: (outputs.agent_backbone(PAPER, a), m) for a, m in methods.items()}
    best: dict[tuple, int] = {}
    for a, k in key.items():
        best[k] = max(best.get(k, 0), budget[a])
    return {a: m for a, m in methods.items() if budget[a] == best[key[a]]}


def single_agent_questions(outputs: RunOutputs) -> pd.DataFrame:
    """Per (dataset, agent, question): `mean` = the share right of the first K samples, `maj` = their
    plurality is right, `k` = samples kept, with the agent's method and backbone; K = 4 on MATH500,
    32 elsewhere (fewer where the run sampled fewer). Only the agents of `single_agent_agents`."""
    columns = ["dataset", "agent", "question_id", "mean", "k", "maj", "method", "model"]
    zs = outputs.zero_shot
    methods = single_agent_agents(outputs, agent_methods(outputs))
    zs = zs[zs["agent"].isin(list(methods))]
    if zs.empty:
        return pd.DataFrame(columns=columns)
    limit = zs["dataset"].map(lambda d: PAPER_K.get(outputs.paper_dataset(d), DEFAULT_K))
    zs = _with_keys(zs[zs["sample"] < limit], _task_types(outputs)).assign(correct=lambda f: f["correct"].astype(bool))
    groups = ["dataset", "agent", "question_id"]
    per_question = zs.groupby(groups, sort=False).agg(mean=("correct", "mean"), k=("sample", "size")).reset_index()
    per_question = per_question.merge(_plurality(zs, groups, "sample").rename(columns={"correct": "maj"}), on=groups)
    per_question["method"] = per_question["agent"].map(methods)
    per_question["model"] = per_question["agent"].map(lambda a: outputs.agent_backbone(PAPER, a))
    return per_question[columns]


def single_agent(outputs: RunOutputs, per_question: pd.DataFrame | None = None) -> pd.DataFrame:
    """Table 2: per (dataset, method) mean@K and maj@K in %, over the (agent, question) pairs of
    `single_agent_questions`; dataset "avg" = the mean over datasets."""
    columns = ["dataset", "run_dataset", "model", "method", "agents", "k", "mean_at_k", "maj_at_k", "n"]
    per_question = single_agent_questions(outputs) if per_question is None else per_question
    if per_question.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (dataset, model, method), g in per_question.groupby(["dataset", "model", "method"], sort=False):
        rows.append(
            {
                "dataset": outputs.paper_dataset(dataset),
                "run_dataset": dataset,
                "model": model,
                "method": method,
                "agents": ",".join(sorted(set(g["agent"]))),
                "k": int(g["k"].max()),
                "mean_at_k": 100 * g["mean"].mean(),
                "maj_at_k": 100 * g["maj"].astype(float).mean(),
                "n": len(g),
            }
        )
    out = pd.DataFrame(rows, columns=columns)
    for (model, method), g in out.groupby(["model", "method"], sort=False):
        rows.append(
            {
                "dataset": AVG,
                "run_dataset": "+".join(sorted(g["run_dataset"])),
                "model": model,
                "method": method,
                "agents": ",".join(sorted(set(",".join(g["agents"]).split(",")))),
                "k": "/".join(str(k) for k in sorted(set(g["k"]))),
                "mean_at_k": g["mean_at_k"].mean(),
                "maj_at_k": g["maj_at_k"].mean(),
                "n": int(g["n"].sum()),
            }
        )
    return pd.DataFrame(rows, columns=columns)


def single_agent_layout(t2: pd.DataFrame) -> pd.DataFrame:
    """Rows = (backbone, method), columns "<dataset> mean@K|maj@K" per run dataset then "Avg ..." (one decimal)."""
    if t2.empty:
        return pd.DataFrame(columns=["model", "method"])
    datasets = _dataset_order(t2)
    per_dataset = t2[t2["dataset"] != AVG]
    ks = {
        d: "K" if d == "Avg" else int(per_dataset.loc[per_dataset["run_dataset"] == d, "k"].max())
        for d in [*datasets, "Avg"]
    }
    rows = []
    for (model, method), g in t2.groupby(["model", "method"], sort=False):
        row = {"model": model, "method": method, "agents": g["agents"].iloc[-1]}
        for _, r in g.iterrows():
            label = "Avg" if r["dataset"] == AVG else r["run_dataset"]
            row[f"{label} mean@{ks[label]}"] = round(r["mean_at_k"], 1)
            row[f"{label} maj@{ks[label]}"] = round(r["maj_at_k"], 1)
        rows.append(row)
    order = ["model", "method", "agents", *[f"{d} {m}@{ks[d]}" for d in [*datasets, "Avg"] for m in ("mean", "maj")]]
    out = pd.DataFrame(rows).reindex(columns=order)
    return out.sort_values(
        ["model", "method"], key=lambda s: s.map(_method_rank) if s.name == "method" else s, kind="stable"
    ).reset_index(drop=True)


# --------------------------------------------------------------------------- claims


def _by_question(frame: pd.DataFrame, value: str) -> pd.Series:
    """`value` per (dataset, question_id), the mean over its threads (or agents): the question is the
    unit the claims resample."""
    return frame.groupby(["dataset", "question_id"], sort=False)[value].mean().astype(float)


def _paired_question_difference(a: pd.Series, b: pd.Series, *, one_outcome: bool = False) -> tuple[Shares, list[str]]:
    """mean(a − b) on the questions both have (a, b indexed by (dataset, question_id)), as the mean
    over datasets of each dataset's mean (the tables' "avg"; one dataset: the plain mean), paired
    over questions: a resample draws questions once and reads both sides on them. A resample that
    misses a dataset averages the datasets it drew. With `one_outcome` (each side one 0/1 outcome
    per question) on one dataset it is paired correctness (exact, McNemar). Also the datasets compared."""
    joined = pd.concat({"a": a, "b": b}, axis=1, join="inner").dropna()
    d = (joined["a"] - joined["b"]).to_numpy(float)
    codes, datasets = pd.factorize(joined.index.get_level_values(0))
    k = len(datasets)

    def statistic(index: np.ndarray) -> float:
        sums = np.bincount(codes[index], weights=d[index], minlength=k)
        counts = np.bincount(codes[index], minlength=k)
        drawn = counts > 0
        return float(np.mean(sums[drawn] / counts[drawn]))

    ones = np.ones(len(d))
    a_values, b_values = joined["a"].to_numpy(float), joined["b"].to_numpy(float)
    data = Shares(a_values, ones, b_values, ones, statistic, exact_allowed=one_outcome and k == 1)
    return data, sorted(str(x) for x in datasets)


def _length_gap(turns: pd.DataFrame) -> Resampled:
    """Mean tokens of incorrect responses − mean tokens of correct ones (over responses, as Table 6),
    resampled over questions: each question's responses (all seats and threads) move together; a
    resample without a correct or an incorrect response is dropped."""
    right = turns["correct"].eq(True).to_numpy()
    tokens = turns["completion_tokens"].astype(float).to_numpy()
    codes, _ = pd.factorize(turns["question_id"].astype(str))
    k = int(codes.max()) + 1 if len(codes) else 0
    sums = {
        kind: np.bincount(codes[mask], weights=tokens[mask], minlength=k)
        for kind, mask in (("right", right), ("wrong", ~right))
    }
    counts = {kind: np.bincount(codes[mask], minlength=k) for kind, mask in (("right", right), ("wrong", ~right))}

    def statistic(index: np.ndarray) -> float:
        n_right, n_wrong = counts["right"][index].sum(), counts["wrong"][index].sum()
        if not (n_right and n_wrong):
            return np.nan
        return float(sums["wrong"][index].sum() / n_wrong - sums["right"][index].sum() / n_right)

    return Resampled(statistic, k)


# --------------------------------------------------------------------------- the claims as rows

S9_3 = "debate-turn accuracy > first-turn accuracy during SDRL training"
S9_3B = "the share of all-correct (dropped) debate groups rises over training"
S9_4 = "round-0 majority accuracy (Maj) rises with N (base decentralized MAD)"
S9_4_LENGTH = "incorrect round-0 responses are longer than correct ones"
S9_5_DELTA = "SDRL's Δ = Debate − Maj ≥ DAPO's (decentralized, T = 1)"
S9_5_MEAN = "SDRL has no single-agent accuracy drop against DAPO (mean@K)"

SPECS = [
    ClaimSpec(
        "§9.3",
        S9_3,
        DIFFERENCE,
        only("first turn"),
        "mean over steps of debate − first-turn acc. (points; steps resampled)",
        unit="steps",
        scale=100,
    ),
    ClaimSpec(
        "§9.3", S9_3B, SLOPE, only("groups"), "OLS slope per step of the {share} share of debate groups", unit="steps"
    ),
    ClaimSpec("§9.4", S9_4 + " (N = {ns})", PAIRED_ACCURACY, only("N"), "Maj(max N) − Maj(min N), points", scale=100),
    ClaimSpec("§9.4", S9_4_LENGTH, DIFFERENCE, only("length"), "mean tokens incorrect − correct (questions resampled)"),
    ClaimSpec(
        "§9.5",
        "{method}'s Δ = Debate − Maj ≥ DAPO's (decentralized, T = 1)",
        DIFFERENCE,
        only("delta"),
        "Δ({method}) − Δ(DAPO), points (questions resampled)",
        ">=",
        margin_reason="[CHOICE] margin 0 points: the paper claims SDRL improves debate over its RLVR baseline "
        "(Liu et al., arXiv:2601.22297, Table 1's Δ), a gain, not 'no worse within δ'",
        scale=100,
    ),
    ClaimSpec(
        "§9.5",
        "{method} has no single-agent accuracy drop against DAPO (mean@K)",
        PAIRED_ACCURACY,
        only("mean@K"),
        "mean@K({method}) − mean@K(DAPO), points (questions resampled)",
        ">=",
        margin=2.0,
        margin_reason="[CHOICE] margin 2 points: the paper (arXiv:2601.22297, abstract, Table 2) says SDRL also "
        "strengthens single-agent accuracy but states no margin; the claim checked here is the weaker 'no "
        "drop' (non-inferiority), and 2 points (4 of 200 held-out questions) is the smallest drop we would call one",
        scale=100,
    ),
]


def _training_contexts(outputs: RunOutputs) -> list:
    """§9.3 from the trainer's step metrics: `debate_accuracy` (every debate-turn rollout) against
    `debate_pair_accuracy` (the pairs the debate prompts show; older metrics: `accuracy`, every
    first-turn rollout), and the share of all-correct debate groups (older metrics: of dropped ones).
    The logs hold one row per step and nothing per question, so the step is the unit: the mean gap
    is paired over steps (both accuracies of a step move together), the trend is the OLS slope."""
    contexts = []
    runs = [r for r, info in outputs.runs.items() if info.method == "sdrl"]
    if not runs:
        return [Untestable("no sdrl training run in this experiment", claim="§9.3", statement=S9_3)]
    for run in runs:
        steps = outputs.training.get(run)
        if steps is None:
            contexts.append(For("first turn", Untestable("no training metrics for this run", run)))
            continue
        missing = [c for c in ("accuracy", "debate_accuracy") if c not in steps]
        if missing:
            contexts.append(For("first turn", Untestable(f"the metrics don't log {missing}", run)))
        else:
            # the pair shown in the debate prompt (logged since this wave), else every first-turn rollout
            pair = "debate_pair_accuracy" in steps and steps["debate_pair_accuracy"].notna().any()
            first = "debate_pair_accuracy" if pair else "accuracy"
            both = steps[[first, "debate_accuracy"]].astype(float).dropna()
            what = (
                "the two first-turn answers each debate prompt shows"
                if pair
                else "every first-turn rollout sampled (kept and filtered groups; the pairs' own accuracy "
                "isn't in these metrics)"
            )
            detail = f"first-turn accuracy is over {what}; steps are resampled as if independent"
            case = (
                Untestable("no step sampled a debate turn", run)
                if both.empty
                else Case(run, Rows(both["debate_accuracy"], both[first]), detail=detail)
            )
            contexts.append(For("first turn", case))
        contexts.append(For("groups", _groups_case(run, steps)))
    return contexts


def _groups_case(run: str, steps: pd.DataFrame) -> Case | Untestable:
    if not {"debate_groups", "debate_groups_kept"} <= set(steps.columns):
        return Untestable("the metrics don't log debate_groups(_kept)", run)
    asked = steps[steps["debate_groups"].astype(float) > 0]
    if len(asked) < 3:
        return Untestable("a slope's interval needs at least 3 steps with debate groups", run)
    groups = asked["debate_groups"].astype(float)
    if "debate_groups_all_correct" in asked:
        share = asked["debate_groups_all_correct"].astype(float) / groups
        detail = (
            f"all-correct {int(asked['debate_groups_all_correct'].sum())}, all-wrong "
            f"{int(asked['debate_groups_all_wrong'].sum())} of {int(asked['debate_groups'].sum())} "
            "debate groups over training"
        )
        return Case(run, Rows(asked["step"].astype(float), share), {"share": "all-correct"}, detail)
    dropped = 1 - asked["debate_groups_kept"].astype(float) / groups
    detail = (
        "these metrics count dropped groups without splitting all-correct from all-wrong: "
        "the dropped share stands in for the all-correct share"
    )
    return Case(run, Rows(asked["step"].astype(float), dropped), {"share": "dropped"}, detail)


def _training_claims(outputs: RunOutputs) -> list[Claim]:
    return evaluate_claims(SPECS, _training_contexts(outputs))


def _n_contexts(q: pd.DataFrame, cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> list:
    """§9.4: round-0 majority accuracy rises with N, untrained decentralized MAD, one protocol per N.
    The statistic is Maj(max N) − Maj(min N) on the questions both answered: exact (McNemar) with one
    thread a question, else paired over questions; whether the N between are in order is in `detail`."""
    base = [p for p in _decentralized(infos) if not p.trained_runs]
    chosen = _pick(base, outputs, ["model", "n_agents"], order=lambda p: (p.rounds != 1, p.template != "choi", p.name))
    part = cells[cells["protocol"].isin([p.name for p in chosen]) & (cells["dataset"] != AVG)]
    if part["n_agents"].nunique() < 2:
        reason = "needs untrained decentralized protocols with ≥ 2 different N"
        return [Untestable(reason, claim="§9.4", statement=S9_4)]
    contexts = []
    for (dataset, model), g in part.groupby(["run_dataset", "model"], sort=False):
        g = g.sort_values("n_agents")
        maj = g["maj"].to_numpy(float)
        rows = q[q["dataset"] == dataset]
        ends = [rows[rows["protocol"] == g["protocol"].iloc[i]] for i in (-1, 0)]
        one_outcome = all(e.groupby(["dataset", "question_id"]).size().eq(1).all() for e in ends)
        data, _ = _paired_question_difference(
            _by_question(ends[0], "maj"), _by_question(ends[1], "maj"), one_outcome=one_outcome
        )
        monotone = "yes" if np.all(np.diff(maj) >= 0) else "no"
        by_n = ", ".join(f"{int(n)}: {m:.1f}" for n, m in zip(g["n_agents"], maj))
        detail = f"Maj by N (%): {by_n}; non-decreasing: {monotone}; truncation not checked"
        fields = {"ns": ", ".join(str(int(n)) for n in g["n_agents"])}
        contexts.append(For("N", Case(f"{dataset}, {model}" if model else dataset, data, fields, detail)))
    return contexts


def _length_contexts(t6: pd.DataFrame, outputs: RunOutputs) -> list:
    """§9.4 / Table 6: incorrect round-0 responses are longer than correct ones."""
    first = t6[t6["round"] == 0]
    if first.empty:
        return [Untestable("no round-0 turns of a decentralized protocol", claim="§9.4", statement=S9_4_LENGTH)]
    turns = outputs.turns
    turns = turns[turns["round"] == 0]
    contexts = []
    for _, r in first.iterrows():
        scope = f"{r['run_dataset']}, {r['method']}"
        if not (r["n_correct"] and r["n_incorrect"]):
            contexts.append(For("length", Untestable("needs correct and incorrect round-0 responses", scope)))
            continue
        rows = turns[(turns["protocol"] == r["protocol"]) & (turns["dataset"] == r["run_dataset"])]
        detail = f"{int(r['n_incorrect'])} incorrect and {int(r['n_correct'])} correct responses"
        contexts.append(For("length", Case(scope, _length_gap(rows), detail=detail)))
    return contexts


def _scope(dataset: str, run_dataset: str) -> str:
    return f"avg over {run_dataset}" if dataset == AVG else run_dataset


def _versus_dapo(q: pd.DataFrame, t1: pd.DataFrame, per_question: pd.DataFrame, t2: pd.DataFrame) -> list:
    """§9.5: SDRL's Δ ≥ DAPO's at the same N, and no single-agent (mean@K) drop. Both on the questions
    the two methods answered, paired over questions; "avg" rows average the datasets as the tables do."""
    contexts = []
    sdrl_methods = sorted({m for m in t1["method"] if m.startswith("SDRL")})
    if "DAPO" not in set(t1["method"]) or not sdrl_methods:
        reason = "needs debates of both a dapo and an sdrl run"
        contexts.append(Untestable(reason, claim="§9.5", statement=S9_5_DELTA))
    q = q.assign(delta=q["debate"].astype(float) - q["maj"].astype(float))
    for method in sdrl_methods if "DAPO" in set(t1["method"]) else []:
        for (dataset, _, n_agents), g in t1.groupby(["dataset", "model", "n_agents"], sort=False):
            by = g.set_index("method")
            if method not in by.index or "DAPO" not in by.index:
                continue
            rows = (
                q
                if dataset == AVG
                else q[q["dataset"].isin({by.loc[method, "run_dataset"], by.loc["DAPO", "run_dataset"]})]
            )
            data, shared = _paired_question_difference(
                _by_question(rows[rows["protocol"] == by.loc[method, "protocol"]], "delta"),
                _by_question(rows[rows["protocol"] == by.loc["DAPO", "protocol"]], "delta"),
            )
            detail = "on the questions both protocols answered, each question's Δ the mean over its threads"
            scope = f"{_scope(dataset, '+'.join(shared))}, N={n_agents}"
            contexts.append(For("delta", Case(scope, data, {"method": method}, detail)))
    sdrl_methods = sorted({m for m in t2["method"] if m.startswith("SDRL")})
    if "DAPO" not in set(t2["method"]) or not sdrl_methods:
        reason = "needs zero-shot samples of both a dapo and an sdrl policy"
        return [*contexts, Untestable(reason, claim="§9.5", statement=S9_5_MEAN)]
    for method in sdrl_methods:
        for (dataset, model), g in t2.groupby(["dataset", "model"], sort=False):
            by = g.set_index("method")
            if method not in by.index or "DAPO" not in by.index:
                continue
            rows = per_question[per_question["model"] == model]
            if dataset != AVG:
                rows = rows[rows["dataset"].isin({by.loc[method, "run_dataset"], by.loc["DAPO", "run_dataset"]})]
            sides = [rows[rows["method"] == m] for m in (method, "DAPO")]
            # one agent and one sample per question on each side: paired correctness (exact, McNemar)
            one_outcome = all(
                s["k"].eq(1).all() and s.groupby(["dataset", "question_id"]).size().eq(1).all() for s in sides
            )
            data, shared = _paired_question_difference(
                _by_question(sides[0], "mean"), _by_question(sides[1], "mean"), one_outcome=one_outcome
            )
            detail = "on the questions both policies were sampled on; margin: a drop of 2 points or more fails"
            contexts.append(For("mean@K", Case(_scope(dataset, "+".join(shared)), data, {"method": method}, detail)))
    return contexts


def _claims(outputs, q, cells, infos, t1, per_question, t2, t6) -> list[Claim]:
    fixed = [
        Untestable(
            "a numerical simulation of the theory, not a measure of this run's outputs",
            claim="§9.1",
            statement="DCM simulation: δ = 0 is a martingale, δ > 0 drifts up, higher ρ lowers MV acc.",
        ),
        Untestable(
            "unit tests of the trainer (tests/test_training.py), not a measure of this run's outputs",
            claim="§9.2",
            statement="pairing, dynamic sampling, dropped debate groups, advantages, overlong penalty",
        ),
    ]
    contexts = [
        *_n_contexts(q, cells, outputs, infos),
        *_length_contexts(t6, outputs),
        *_versus_dapo(q, t1, per_question, t2),
    ]
    return [*evaluate_claims(SPECS, fixed), *_training_claims(outputs), *evaluate_claims(SPECS, contexts)]


# --------------------------------------------------------------------------- entry point


def evaluate(outputs: RunOutputs) -> PaperEvaluation:
    infos = debate_infos(outputs)
    q = question_outcomes(outputs, infos)
    cells = debate_cells(outputs, infos, q)
    t1, t3, t4 = table1(cells, outputs, infos), table3(cells, outputs, infos), table4(cells, outputs, infos)
    t5 = table5(cells, outputs, infos)
    per_question = single_agent_questions(outputs)
    t2 = single_agent(outputs, per_question)
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
    result.cells["table2"] = (
        long_table(t2, ["model", "dataset", "method"], ["mean_at_k", "maj_at_k"])
        if not t2.empty
        else pd.DataFrame(columns=["model", "dataset", "method", "n", "run_dataset", "metric", "value"])
    )
    result.cells["table3"] = _cells_long(t3, ["model", "dataset", "n_agents", "method"])
    result.cells["table4"] = _cells_long(t4, ["model", "dataset", "n_agents", "topology", "method"])
    result.cells["table5"] = _cells_long(t5, ["model", "dataset", "n_agents", "method", "steps"])
    result.cells["table6"] = table6_cells(t6)
    result.claims = _claims(outputs, q, cells, infos, t1, per_question, t2, t6)
    if not by_round.empty:
        result.figures["fig1_accuracy_by_round"] = plot_fig1(by_round, outputs.experiment)
    return result
