"""SDRL's single-agent results (Liu et al., arXiv:2601.22297 §6.3, Table 2): mean@K and maj@K of each
trained policy and its base from the zero-shot samples, K = 4 on MATH500 and 32 elsewhere."""

from __future__ import annotations

import pandas as pd

from ..paper_numbers import joined_datasets
from ..run import RunOutputs, run_label
from .sdrl import (
    AVG,
    BASE,
    DEFAULT_K,
    PAPER,
    PAPER_K,
    dataset_order,
    method_rank,
    plurality_correct,
    task_types,
    with_answer_keys,
)


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
    zs = with_answer_keys(zs[zs["sample"] < limit], task_types(outputs)).assign(
        correct=lambda f: f["correct"].astype(bool)
    )
    groups = ["dataset", "agent", "question_id"]
    per_question = zs.groupby(groups, sort=False).agg(mean=("correct", "mean"), k=("sample", "size")).reset_index()
    per_question = per_question.merge(
        plurality_correct(zs, groups, "sample").rename(columns={"correct": "maj"}), on=groups
    )
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
                "run_dataset": joined_datasets(g["run_dataset"]),
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
    datasets = dataset_order(t2)
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
        ["model", "method"], key=lambda s: s.map(method_rank) if s.name == "method" else s, kind="stable"
    ).reset_index(drop=True)
