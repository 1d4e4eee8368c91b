"""Uncertainty stage: the UDPO measures of every debate and the UMAD decomposition across
threads, from one protocol's `questions.parquet` (debate stage), with failure diagnostics
and selective prediction. No model calls: everything comes from `answers_by_round`.

Outputs of `uncertainty_job` (results/{experiment}/uncertainty/{dataset}/{protocol}.*):

`.parquet`: one row per debate trajectory (question_id, thread):

================  =====  ==================================================================
question_id       str    dataset row id
dataset           str
protocol          str
thread            int    debate thread
correct           bool   the protocol's final answer is correct
rounds_used       int    debate rounds run
n_agents          int    participants
k_threads         int    threads of this question (UMAD's K)
u_intra ...       float  `measures.UDPO_KEYS` of this thread (`debate_uncertainty`, Tang et al., arXiv:2602.07186
                         §4): u_intra, u_inter, u_sys, flip_rate, belief_revision, entropy,
                         disagreement, leave_one_out
tu                float  UMAD total uncertainty H(p̄) of the final round across the K threads
                         (nats; Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1), the same on every thread row of a question
epistemic         float  Sys-EU (JSD) of the final round
aleatoric         float  Sys-AU (mean agent entropy) of the final round
================  =====  ==================================================================

`.rounds.parquet`: one row per (question_id, round) — question_id, dataset, protocol,
round (0 = pre-debate), k_threads, n_agents, total, epistemic, aleatoric. At round t agent
i's distribution is the empirical distribution of its answers over the K threads (Qiao et al., arXiv:2603.01221
§4.1 step 3, `parallel_threads`), all agents canonicalised together with the question's
task_type, invalid answers one bucket `<none>` kept in the support (`decompose_samples`).
Threads that stopped early carry their last round forward to the question's last round.
With K = 1 every agent's distribution is a point mass: aleatoric = 0 and total = epistemic
= the entropy of the agents' answers. Agent accuracy (Qiao et al., arXiv:2603.01221 App. C.1, Algorithm 1 step 4) needs each
answer graded against gold and is not computed here.

`.diagnostics.csv`: dataset, protocol and `metrics.FAILURE_DIAGNOSTIC_COLUMNS` for
u_intra, u_inter, u_sys, and tu, epistemic, aleatoric when some question has K > 1. Cohen's d
and Pearson r carry 95 % BCa intervals and p-values over questions, a question's threads drawn
together (`unit` "question_id", `n_units` questions; fewer than `intervals.MIN_UNITS` give none);
Welch's t and p take the trajectories as independent, which they are with K = 1 only.
`.selective.csv`: dataset, protocol, measure, fraction, kept, accuracy for the same
measures; `.selective.png` plots them.

The unit of the diagnostics is the debate trajectory (one row of `.parquet`): with K > 1
threads each thread is a debate with its own correctness, and a question's UMAD values
repeat over its threads.

`entropy_norm="n_options"` takes K from questions.parquet's `n_options` (the choices of a
multiple-choice question, 2 for yes/no, the label set); an open-ended (math) question has
no answer set, so it falls back to "observed" and the log says how many did.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..io import DataFileError, read_parquet_checked, save_figure_atomic, write_parquet_atomic, write_text_atomic
from ..metrics import failure_diagnostics, selective_prediction
from ..reporting.uncertainty import plot_selective_prediction
from .measures import ENTROPY_NORMALISERS, LOO_TIE_RULES, UDPO_KEYS, debate_uncertainty, decompose_samples

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = [
    "question_id",
    "dataset",
    "protocol",
    "thread",
    "task_type",
    "n_agents",
    "correct",
    "rounds_used",
    "answers_by_round",
]
UDPO_MEASURES = ("u_intra", "u_inter", "u_sys")
UMAD_MEASURES = ("tu", "epistemic", "aleatoric")
DEFAULT_SELECTIVE_FRACTIONS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


@dataclass(frozen=True)
class UncertaintySettings:
    """Config `uncertainty` (defaults match config/schema.yaml)."""

    entropy_norm: str = "observed"  # K of H/log K: distinct answers, N agents, or the answer set
    lam: float = 0.5  # λ in U_intra = λF + (1−λ)M
    loo_tie: str = "first"
    selective_fractions: tuple[float, ...] = DEFAULT_SELECTIVE_FRACTIONS

    def __post_init__(self):
        object.__setattr__(self, "selective_fractions", tuple(float(f) for f in self.selective_fractions))
        if self.entropy_norm not in ENTROPY_NORMALISERS:
            raise ValueError(
                f"uncertainty entropy_norm must be one of {ENTROPY_NORMALISERS}, got {self.entropy_norm!r}"
            )
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"uncertainty lam must lie in [0, 1], got {self.lam}")
        if self.loo_tie not in LOO_TIE_RULES:
            raise ValueError(f"uncertainty loo_tie must be one of {LOO_TIE_RULES}, got {self.loo_tie!r}")
        bad = [f for f in self.selective_fractions if not 0.0 < f <= 1.0]
        if bad or not self.selective_fractions:
            raise ValueError(
                f"uncertainty selective_fractions must lie in (0, 1], got {list(self.selective_fractions)}"
            )


MEASURE_COLUMNS = [
    "question_id",
    "dataset",
    "protocol",
    "thread",
    "correct",
    "rounds_used",
    "n_agents",
    "k_threads",
    *UDPO_KEYS,
    *UMAD_MEASURES,
]
ROUND_COLUMNS = [
    "question_id",
    "dataset",
    "protocol",
    "round",
    "k_threads",
    "n_agents",
    "total",
    "epistemic",
    "aleatoric",
]

Trajectory = list[list[str | None]]


def uncertainty_job(
    questions_path: str | os.PathLike,
    out_path: str | os.PathLike,
    rounds_out_path: str | os.PathLike,
    diagnostics_path: str | os.PathLike,
    selective_path: str | os.PathLike,
    plot_path: str | os.PathLike,
    settings: UncertaintySettings = UncertaintySettings(),
) -> pd.DataFrame:
    """The `uncertainty` rule: write the five outputs of the module docstring; return the per-thread measures."""
    entropy_norm, lam, loo_tie = settings.entropy_norm, settings.lam, settings.loo_tie
    required = REQUIRED_COLUMNS + (["n_options"] if entropy_norm == "n_options" else [])
    questions = read_parquet_checked(questions_path, required)
    if questions.empty:
        raise DataFileError(f"{questions_path}: no questions")
    if questions["correct"].isna().any():
        raise DataFileError(f"{questions_path}: column 'correct' has null values")
    if questions.duplicated(["question_id", "thread"]).any():
        raise DataFileError(f"{questions_path}: repeated (question_id, thread) rows")
    if (questions.groupby("question_id")["n_agents"].nunique() > 1).any():
        raise DataFileError(f"{questions_path}: threads of one question differ in n_agents")
    dataset = _single_value(questions, "dataset", questions_path)
    protocol = _single_value(questions, "protocol", questions_path)
    questions = questions.reset_index(drop=True)
    trajectories = [_trajectory(row, questions_path) for row in questions.itertuples(index=False)]

    rounds = round_decomposition(questions, trajectories)
    measures = trajectory_measures(questions, trajectories, rounds, entropy_norm=entropy_norm, lam=lam, loo_tie=loo_tie)

    names = list(UDPO_MEASURES)
    if measures["k_threads"].max() > 1:
        names += UMAD_MEASURES
    diagnostics = failure_diagnostics(measures, names, cluster_col="question_id")
    curves = pd.concat(
        [
            selective_prediction(measures[m], measures["correct"], settings.selective_fractions).assign(measure=m)
            for m in names
        ],
        ignore_index=True,
    )
    label = {"dataset": dataset, "protocol": protocol}
    diagnostics = pd.concat([pd.DataFrame([label] * len(diagnostics)), diagnostics], axis=1)
    curves = curves.assign(**label)[["dataset", "protocol", "measure", "fraction", "kept", "accuracy"]]

    write_parquet_atomic(measures, out_path)
    write_parquet_atomic(rounds, rounds_out_path)
    write_text_atomic(diagnostics.to_csv(index=False), diagnostics_path)
    write_text_atomic(curves.to_csv(index=False), selective_path)
    title = f"{dataset} / {protocol}: selective prediction (n={len(measures)})"
    save_figure_atomic(plot_selective_prediction(curves, title), plot_path)
    return measures


def round_decomposition(questions: pd.DataFrame, trajectories: Sequence[Trajectory]) -> pd.DataFrame:
    """UMAD total / epistemic / aleatoric per (question_id, round) across the question's
    threads (columns `ROUND_COLUMNS`); `trajectories[j]` belongs to `questions.iloc[j]`."""
    rows = []
    for question_id, group in questions.groupby("question_id", sort=False):
        group = group.sort_values("thread", kind="stable")
        threads = [trajectories[j] for j in group.index]
        n_agents = len(threads[0][0])
        if any(len(t[0]) != n_agents for t in threads):
            raise ValueError(f"question {question_id}: threads have different numbers of agents")
        n_rounds = max(len(t) for t in threads)
        # Early-stopped threads keep their last answers for the remaining rounds.
        padded = [t + [t[-1]] * (n_rounds - len(t)) for t in threads]
        first = group.iloc[0]
        for round_ in range(n_rounds):
            samples = [[thread[round_][i] for thread in padded] for i in range(n_agents)]
            parts = decompose_samples(samples, task_type=first["task_type"])
            rows.append(
                {
                    "question_id": question_id,
                    "dataset": first["dataset"],
                    "protocol": first["protocol"],
                    "round": round_,
                    "k_threads": len(threads),
                    "n_agents": n_agents,
                    **parts,
                }
            )
    return pd.DataFrame(rows, columns=ROUND_COLUMNS)


def trajectory_measures(
    questions: pd.DataFrame,
    trajectories: Sequence[Trajectory],
    rounds: pd.DataFrame,
    *,
    entropy_norm: str = "observed",
    lam: float = 0.5,
    loo_tie: str = "first",
) -> pd.DataFrame:
    """UDPO measures per (question_id, thread) plus the question's final-round UMAD values
    from `rounds` (columns `MEASURE_COLUMNS`)."""
    final = rounds.sort_values("round", kind="stable").groupby("question_id").last()
    rows, open_ended = [], 0
    for row, answers in zip(questions.itertuples(index=False), trajectories):
        normaliser, n_options = entropy_norm, None
        if entropy_norm == "n_options":
            n_options = row.n_options  # a required column under this normaliser
            if pd.isna(n_options):
                normaliser, n_options = "observed", None
                open_ended += 1
            else:
                n_options = int(n_options)
        udpo = debate_uncertainty(
            answers,
            entropy_normaliser=normaliser,
            n_options=n_options,
            lam=lam,
            loo_tie=loo_tie,
            task_type=row.task_type,
        )
        umad = final.loc[row.question_id]
        rows.append(
            {
                "question_id": row.question_id,
                "dataset": row.dataset,
                "protocol": row.protocol,
                "thread": int(row.thread),
                "correct": bool(row.correct),
                "rounds_used": int(row.rounds_used),
                "n_agents": int(row.n_agents),
                "k_threads": int(umad["k_threads"]),
                **udpo,
                "tu": float(umad["total"]),
                "epistemic": float(umad["epistemic"]),
                "aleatoric": float(umad["aleatoric"]),
            }
        )
    if open_ended:
        log.warning(
            "entropy_norm n_options: %d of %d trajectories have no answer set (open-ended); "
            "their K is the number of distinct answers (observed)",
            open_ended,
            len(rows),
        )
    return pd.DataFrame(rows, columns=MEASURE_COLUMNS)


def _trajectory(row, path) -> Trajectory:
    """answers_by_round of one row, checked: a list of rounds of n_agents answers (str/null)."""
    where = f"{path}: question {row.question_id} thread {row.thread}: answers_by_round"
    try:
        rounds = json.loads(row.answers_by_round)
    except (TypeError, ValueError) as exc:
        raise DataFileError(f"{where} is not JSON ({exc})") from exc
    if not isinstance(rounds, list) or not rounds:
        raise DataFileError(f"{where} must be a non-empty list of rounds")
    for t, answers in enumerate(rounds):
        if not isinstance(answers, list) or len(answers) != row.n_agents:
            raise DataFileError(f"{where}: round {t} must list n_agents = {row.n_agents} answers")
        if any(a is not None and not isinstance(a, str) for a in answers):
            raise DataFileError(f"{where}: round {t} has an answer that is neither text nor null")
    return rounds


def _single_value(frame: pd.DataFrame, column: str, path) -> str:
    values = frame[column].unique()
    if len(values) != 1:
        raise DataFileError(f"{path}: expected one {column}, found {sorted(map(str, values))}")
    return str(values[0])
