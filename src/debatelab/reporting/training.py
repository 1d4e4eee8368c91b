"""The training stage's plot: learning curves and where a step's time goes."""

from __future__ import annotations

import pandas as pd

from .figures import subplots


def heldout_curve(metrics: pd.DataFrame, column: str = "heldout_accuracy") -> pd.Series:
    """Held-out accuracy by step, the base model at step 0 (`training.core.heldout`'s columns): the
    evaluated steps only; empty when the run measured none."""
    if column not in metrics:
        return pd.Series(dtype=float)
    base_column = column.replace("heldout_accuracy", "heldout_base_accuracy", 1)
    base = metrics[base_column].dropna() if base_column in metrics else pd.Series(dtype=float)
    after = pd.Series(metrics[column].to_numpy(dtype=float), index=metrics["step"].to_numpy()).dropna()
    return pd.concat([pd.Series([float(base.iloc[0])], index=[0]) if len(base) else pd.Series(dtype=float), after])


def plot_training_curves(metrics: pd.DataFrame, title: str):
    """Four panels per rollout step: reward (± std), rollout accuracy (a multi-agent run: also each
    agent's last round) and, when measured, held-out accuracy (from step 0, the base model; a
    multi-agent run: the agents' mean and each agent's);
    response length; groups kept by dynamic sampling and SDRL's kept debate groups, or UDPO's
    stability rewards (r_intra, r_inter, r_sys), UMAD's terms, or MAPPO's critic and consensus;
    rollout and update seconds."""
    fig, axes = subplots(1, 4, figsize=(17, 3.8), squeeze=False)
    reward, length, groups, time = axes[0]
    steps = metrics["step"] if len(metrics) else []
    if len(metrics):
        reward.plot(steps, metrics["reward_mean"], marker="o", markersize=3, label="mean reward")
        reward.fill_between(
            steps,
            metrics["reward_mean"] - metrics["reward_std"],
            metrics["reward_mean"] + metrics["reward_std"],
            alpha=0.2,
        )
        reward.plot(steps, metrics["accuracy"], marker="s", markersize=3, label="rollout accuracy")
        for column in metrics.columns:  # a multi-agent run: each agent's own last-round training replies
            if column.startswith("accuracy_last_"):
                reward.plot(
                    steps,
                    metrics[column],
                    linestyle=":",
                    linewidth=1,
                    label=f"rollout accuracy, {column.removeprefix('accuracy_last_')}",
                )
        heldout = heldout_curve(metrics)
        if len(heldout):
            n = int(metrics["heldout_questions"].max())
            reward.plot(
                heldout.index,
                heldout.values,
                marker="D",
                markersize=4,
                color="black",
                label=f"held-out accuracy (n = {n})",
            )
            for column in metrics.columns:  # a multi-agent run: each agent alone
                if column.startswith("heldout_accuracy_"):
                    curve = heldout_curve(metrics, column)
                    reward.plot(
                        curve.index,
                        curve.values,
                        linestyle="--",
                        linewidth=1,
                        marker=".",
                        label=f"held-out, {column.removeprefix('heldout_accuracy_')}",
                    )
        length.plot(steps, metrics["response_length"], marker="o", markersize=3)
        if "r_sys" in metrics:  # a multi-agent (UDPO) run: the debates' stability rewards
            for column, marker in (("r_intra", "o"), ("r_inter", "s"), ("r_sys", "^")):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=column)
        elif "value_loss" in metrics:  # MAPPO / RMAAC: consensus, the critic's fit, RMAAC's swapped peers
            for column, marker, label in (
                ("consensus", "o", "final-round consensus"),
                ("value_mean", "s", "mean V(s)"),
                ("value_loss", "^", "critic MSE"),
                ("peer_swaps", "v", "peers swapped"),
            ):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=label)
        elif "eu_mean" in metrics:  # UMAD: first- and last-turn accuracy, the EU reward, the AU weight
            for column, marker, label in (
                ("accuracy_first", "o", "accuracy, first turn"),
                ("eu_mean", "s", "mean EU reward"),
                ("weight_mean", "^", "mean aleatoric weight W"),
            ):
                groups.plot(steps, metrics[column], marker=marker, markersize=3, label=label)
        else:
            groups.plot(steps, metrics["groups_kept"], marker="o", markersize=3, label="first-turn groups kept")
            groups.plot(steps, metrics["prompts_sampled"], linestyle=":", label="prompts sampled")
            groups.plot(steps, metrics["debate_groups_kept"], marker="s", markersize=3, label="debate groups kept")
        time.plot(steps, metrics["rollout_seconds"], marker="o", markersize=3, label="rollout")
        time.plot(steps, metrics["update_seconds"], marker="s", markersize=3, label="update")
    reward.set_ylabel("reward / accuracy")
    length.set_ylabel("mean response length (tokens)")
    groups.set_ylabel(
        "debate stability reward"
        if "r_sys" in metrics
        else "critic and consensus"
        if "value_loss" in metrics
        else "UMAD terms"
        if "eu_mean" in metrics
        else "prompt groups per step"
    )
    time.set_ylabel("seconds per step")
    for ax in (reward, groups, time):
        ax.legend(fontsize="small")
    from matplotlib.ticker import MaxNLocator

    for ax in axes[0]:
        ax.set_xlabel("rollout step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(metrics):  # whole steps only, also for a run of one or two steps (from 0 with a held-out base)
            ax.set_xlim(min([*steps, *heldout.index]) - 0.5, max(steps) + 0.5)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return fig
