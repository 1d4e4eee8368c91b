"""SDRL's results by debate round (Liu et al., arXiv:2601.22297 §6.4, Figure 1; App. D.3, Table 6):
the accuracy of the system answer after each round of decentralized MAD (Fig. 1, round 0 = Maj) and
the mean completion tokens of correct and incorrect responses per round (Table 6), each method's
protocol the one with N nearest 5 and the most rounds (`round_infos`). The other tables are `sdrl`'s."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...reporting.figures import subplots
from ..paper_numbers import bound_columns, cell_intervals
from ..run import ProtocolInfo, RunOutputs, protocol_method
from .sdrl import BASE, PAPER, decentralized, method_rank, pick, preference, system_by_round


def round_infos(outputs: RunOutputs, infos: list[ProtocolInfo]) -> list[ProtocolInfo]:
    """Fig. 1 / Table 6: per method the decentralized protocol with N nearest 5 and the most rounds."""
    return pick(
        decentralized(infos),
        outputs,
        ["model", "method"],
        order=lambda p: (*preference(p)[:2], -p.rounds, *preference(p)[2:]),
    )


TOKEN_KINDS = ("correct", "incorrect")


def table6(outputs: RunOutputs, infos: list[ProtocolInfo]) -> pd.DataFrame:
    """Mean completion tokens of correct and incorrect responses per round (every call, round 0 =
    the pre-debate answers), per method and dataset, with 95 % intervals (`<kind>_tokens_low` /
    `_high`): the BCa bootstrap over the questions with such a call, all of a question's calls of the
    round (its agents', in every thread) drawn together (`paper_numbers.cell_intervals`)."""
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
        *bound_columns([f"{kind}_tokens" for kind in TOKEN_KINDS]),
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
    if not rows:
        return pd.DataFrame(columns=columns)
    right, tokens = turns["correct"].astype(bool), turns["completion_tokens"].astype(float)
    calls = turns.assign(correct_tokens=tokens.where(right), incorrect_tokens=tokens.where(~right))
    keys = ["protocol", "dataset", "round"]
    spans = cell_intervals(calls, keys, {f"{kind}_tokens": (f"{kind}_tokens", 1.0) for kind in TOKEN_KINDS})
    spans = spans.rename(columns={"dataset": "run_dataset"}).astype({"round": int})
    table = pd.DataFrame(rows).merge(spans, on=["protocol", "run_dataset", "round"], how="left")
    return table[columns]


def table6_cells(t6: pd.DataFrame) -> pd.DataFrame:
    keys = ["dataset", "model", "n_agents", "method", "round"]
    parts = [
        t6[[*keys, "run_dataset"]].assign(
            metric=f"{kind}_tokens",
            value=t6[f"{kind}_tokens"].astype(float),
            low=t6[f"{kind}_tokens_low"].astype(float),
            high=t6[f"{kind}_tokens_high"].astype(float),
            n=t6[f"n_{kind}"],
        )
        for kind in TOKEN_KINDS
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
    methods = sorted(dict.fromkeys(by_round["method"]), key=method_rank)
    for ax, dataset in zip(axes[0], datasets):
        sub = by_round[by_round["run_dataset"] == dataset]
        for i, method in enumerate(methods):
            part = sub[sub["method"] == method].sort_values("round", kind="stable")
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
