"""The training stage's plot: learning curves and where a step's time goes."""
from __future__ import annotations

import pandas as pd

from .figures import subplots


def plot_training_curves(metrics: pd.DataFrame, title: str):
    """Four panels per rollout step: reward (± std) and accuracy; response length; groups kept by
    dynamic sampling and SDRL's kept debate groups, or UDPO's stability rewards (r_intra, r_inter,
    r_sys), UMAD's terms, or MAPPO's critic and consensus; rollout and update seconds."""
    fig, axes = subplots(1, 4, figsize=(17, 3.8), squeeze=False)
    reward, length, groups, time = axes[0]
    steps = metrics["step"] if len(metrics) else []
    if len(metrics):
        reward.plot(steps, metrics["reward_mean"], marker="o", markersize=3, label="mean reward")
        reward.fill_between(steps, metrics["reward_mean"] - metrics["reward_std"],
                            metrics["reward_mean"] + metrics["reward_std"], alpha=0.2)
        reward.plot(steps, metrics["accuracy"], marker="s", markersize=3, label="rollout accuracy")
        length.plot(steps, metrics["response_length"], marker="o", markersize=3)
        if "r_sys" in metrics:  # a multi-agent (UDPO) run: the debates' stability rewards
            for column, marker in (("r_intra", "o"), ("r_inter", "s"), ("r_sys", "^")):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=column)
        elif "value_loss" in metrics:  # MAPPO / RMAAC: consensus, the critic's fit, RMAAC's swapped peers
            for column, marker, label in (("consensus", "o", "final-round consensus"), ("value_mean", "s", "mean V(s)"),
                                          ("value_loss", "^", "critic MSE"), ("peer_swaps", "v", "peers swapped")):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=label)
        elif "eu_mean" in metrics:  # UMAD: first- and last-turn accuracy, the EU reward, the AU weight
            for column, marker, label in (("accuracy_first", "o", "accuracy, first turn"), ("eu_mean", "s", "mean EU reward"),
                                          ("weight_mean", "^", "mean aleatoric weight W")):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=label)
        else:
            groups.plot(steps, metrics["groups_kept"], marker="o", markersize=3, label="first-turn groups kept")
            groups.plot(steps, metrics["prompts_sampled"], linestyle=":", label="prompts sampled")
            groups.plot(steps, metrics["debate_groups_kept"], marker="s", markersize=3, label="debate groups kept")
        time.plot(steps, metrics["rollout_seconds"], marker="o", markersize=3, label="rollout")
        time.plot(steps, metrics["update_seconds"], marker="s", markersize=3, label="update")
    reward.set_ylabel("reward / accuracy")
    length.set_ylabel("mean response length (tokens)")
    groups.set_ylabel("debate stability reward" if "r_sys" in metrics else "critic and consensus" if "value_loss" in metrics
                      else "UMAD terms" if "eu_mean" in metrics else "prompt groups per step")
    time.set_ylabel("seconds per step")
    for ax in (reward, groups, time):
        ax.legend(fontsize=7)
    from matplotlib.ticker import MaxNLocator

    for ax in axes[0]:
        ax.set_xlabel("rollout step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(metrics):  # whole steps only, also for a run of one or two steps
            ax.set_xlim(min(steps) - 0.5, max(steps) + 0.5)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
