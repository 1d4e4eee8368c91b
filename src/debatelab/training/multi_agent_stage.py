"""UDPO's jobs before training (Tang et al., arXiv:2602.07186 App. A.2; App. A.4, Algorithm 1):
what rules `udpo_warmup` and `udpo_coefficients` call. The training itself, rule `train_agents` of
every multi-agent method, is `stage.train_job`.

1. `udpo_warmup_job` (GPU): the untrained agents debate the held-out `warmup_fraction` of the
   training questions (App. A.2 step 1). Writes `warmup.parquet`, one row per (question, round,
   seat): the parsed answer, whether it is right, the gold answer; and to the run's trackers
   (`report_to`, in `tensorboard_warmup/`) each round's accuracy, overall and per seat. The debates
   run in fixed chunks of `WARMUP_CHUNK` questions, each written to `warmup.parquet.parts/` when
   it ends, so a killed job reruns only the chunk it was in: a chunk's name hashes what its debates
   depend on (settings, weights, seats, system prompts, its questions), so changed ones are never
   reused, and its seeds derive from (seed, question, seat, round), not from the chunks before it.
2. `udpo_coefficients_job` (CPU): App. A.2's calibration on those debates. Writes `coefficients.json`: α, β,
   γ, λ, η per seat, and the warm-up profile they came from. `UdpoTrainer.prepare_job` reads it and
   trains on the questions the warm-up held out.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from ..data import dataset_label, read_dataset
from ..io import read_parquet_checked, write_json_atomic, write_parquet_atomic
from ..llm.agent import AgentSpec
from ..llm.base import model_fingerprint, stable_hash
from ..tracking import open_tracker
from ..zero_shot import select_questions
from .core.distributed import default_device, rank_and_world
from .methods.udpo import ablated, calibrate_coefficients, reward_ranking, split_warmup
from .settings import TrainSettings

log = logging.getLogger(__name__)

WARMUP_COLUMNS = ["question_id", "task_type", "gold", "round", "seat", "agent", "answer", "correct"]
#: Questions debated per chunk of the warm-up (one rollout call, one part on disk): large enough to
#: fill a rollout batch, small enough that a kill loses little.
WARMUP_CHUNK = 64


def _warmup_questions(dataset_path, limit, settings: TrainSettings) -> pd.DataFrame:
    """UDPO's warm-up questions (`methods.udpo.split_warmup`; the training takes the others)."""
    return split_warmup(
        select_questions(read_dataset(dataset_path), limit, settings.seed), settings.udpo.warmup_fraction, settings.seed
    )[0]


def _policies(bases: dict[str, str], settings: TrainSettings, device: str | None):
    import torch

    from .core.agents import AgentPolicies

    torch.manual_seed(settings.seed)
    device = device or default_device(rank_and_world()[0])
    return AgentPolicies(bases, settings, device=device), device


def udpo_warmup_job(
    *,
    dataset_path,
    bases: dict[str, str],
    participants: Sequence[str],
    agents: dict[str, AgentSpec],
    settings: TrainSettings,
    out_path,
    limit: int | None = None,
    device: str | None = None,
    report_to: str | list[str] = "tensorboard",
    experiment: str = "debatelab",
    run: str = "udpo",
    chunk_questions: int = WARMUP_CHUNK,
) -> pd.DataFrame:
    """App. A.2 step 1: one debate per held-out question by the untrained agents, `chunk_questions`
    at a time (module docstring). Each round's accuracy (overall and per seat) goes to the trackers
    `report_to` names, as step = round."""
    from ..debate.stage import participant_labels
    from .core.debate_rollouts import rollout_debates

    warmup = _warmup_questions(dataset_path, limit, settings)
    seats = participant_labels(participants)
    system_prompts = {a: s.system_prompt for a, s in agents.items()}
    parts = Path(str(out_path) + ".parts")
    identity = {
        "settings": settings.to_dict(),
        "bases": {name: model_fingerprint(path) for name, path in sorted(bases.items())},
        "participants": list(participants),
        "system_prompts": {a: system_prompts.get(a) for a in sorted(set(participants))},
    }
    chunks = [warmup.iloc[i : i + chunk_questions] for i in range(0, len(warmup), chunk_questions)]
    paths = [
        parts / f"chunk-{k:05d}-{stable_hash({**identity, 'questions': list(c['id'])})[:16]}.parquet"
        for k, c in enumerate(chunks)
    ]
    missing = [k for k, path in enumerate(paths) if not path.exists()]
    if len(missing) < len(chunks):
        log.info("udpo warm-up: %d of %d chunks already debated (%s)", len(chunks) - len(missing), len(chunks), parts)
    if missing:
        policies, _ = _policies(bases, settings, device)
        policies.train(False)
        try:
            for k in tqdm(missing, desc="udpo warm-up chunks", disable=len(missing) < 2):
                states = rollout_debates(  # step −1: seeds apart from every training step's
                    policies,
                    chunks[k].to_dict("records"),
                    participants,
                    settings,
                    step=-1,
                    rounds=settings.udpo.rounds,
                    system_prompts=system_prompts,
                )
                write_parquet_atomic(_warmup_rows(states, seats), paths[k])
        finally:
            policies.close()
    frame = pd.concat([read_parquet_checked(path, WARMUP_COLUMNS) for path in paths], ignore_index=True)
    write_parquet_atomic(frame, out_path)
    shutil.rmtree(parts, ignore_errors=True)
    labels = [label for label, _, _ in seats]
    with open_tracker(
        report_to,
        Path(out_path).parent / "tensorboard_warmup",
        project=experiment,
        name=f"{run}-warmup",
        tags=[experiment, settings.method, "warmup", dataset_label(dataset_path)],
        config={"run": run, "participants": list(participants), "settings": settings.to_dict()},
    ) as tracker:
        for round_, turns in frame.groupby("round", sort=True):
            row = {"accuracy": turns["correct"].mean(), "debates": turns["question_id"].nunique()}
            row.update({f"accuracy_{seat}": t["correct"].mean() for seat, t in turns.groupby("seat")})
            tracker.log_metrics(row, int(round_), labels, prefix="warmup")
    log.info(
        "udpo warm-up: %d debates of %d seats, %d rounds -> %s", len(warmup), len(seats), settings.udpo.rounds, out_path
    )
    return frame


def _warmup_rows(states, seats) -> pd.DataFrame:
    """The warm-up rows (`WARMUP_COLUMNS`) of finished debates."""
    rows = []
    for state in states:
        for turn in state.pre + state.turns:
            label, agent, _ = seats[turn.agent]
            rows.append(
                {
                    "question_id": state.question_id,
                    "task_type": state.task_type,
                    "gold": str(state.row["answer"]),
                    "round": turn.round,
                    "seat": label,
                    "agent": agent,
                    "answer": turn.answer,
                    "correct": bool(turn.correct),
                }
            )
    return pd.DataFrame(rows, columns=WARMUP_COLUMNS)


def warmup_trajectories(frame: pd.DataFrame, path="warm-up") -> tuple[list, list[str], list[str], str]:
    """(answers[q][t][i] per question, gold answers, seat labels in order, task type) of a warm-up file."""
    seats = list(dict.fromkeys(frame["seat"]))
    rounds = int(frame["round"].max()) + 1
    trajectories, golds = [], []
    for qid, rows in frame.groupby("question_id", sort=True):
        grid = rows.pivot(index="round", columns="seat", values="answer").reindex(index=range(rounds), columns=seats)
        if len(rows) != rounds * len(seats):
            raise ValueError(
                f"{path}: question {qid} has {len(rows)} rows, expected {rounds} rounds × {len(seats)} seats"
            )
        trajectories.append([[a if isinstance(a, str) else None for a in grid.loc[t]] for t in range(rounds)])
        golds.append(str(rows["gold"].iloc[0]))
    task_types = set(frame["task_type"])
    if len(task_types) != 1:
        raise ValueError(f"{path}: one task type expected, found {sorted(task_types)}")
    return trajectories, golds, seats, task_types.pop()


def udpo_coefficients_job(*, warmup_path, out_path, settings: TrainSettings) -> dict:
    """App. A.2 steps 2-5: per-seat coefficients from the warm-up debates, as JSON."""
    frame = read_parquet_checked(warmup_path, WARMUP_COLUMNS)
    trajectories, golds, seats, task_type = warmup_trajectories(frame, warmup_path)
    u = settings.udpo
    coefficients, profile = calibrate_coefficients(
        trajectories,
        golds,
        task_type,
        kappa=u.kappa,
        lambda_base=u.lambda_base,
        eta_base=u.eta_base,
        lam=u.intra_lambda,
        sys_mode=u.sys_mode,
        base=u.base_weights,
    )
    coefficients = [ablated(c, u.ablate) for c in coefficients]
    ranking = reward_ranking(trajectories, golds, task_type, coefficients, lam=u.intra_lambda)
    out = {
        "seats": {seat: c.to_dict() for seat, c in zip(seats, coefficients)},
        "ablate": list(u.ablate),
        "profile": {**profile, "agents": dict(zip(seats, profile["agents"]))},
        "reward_check": dict(zip(seats, ranking)),
    }
    write_json_atomic(out, out_path)
    log.info(
        "udpo coefficients from %d warm-up debates (accuracy %.2f): %s",
        len(trajectories),
        profile["warmup_accuracy"],
        json.dumps(out["seats"]),
    )
    for seat, check in zip(seats, ranking):
        if check["task_share"] < 0.5:  # NaN (no spread at all) is not flagged
            log.warning(
                "udpo: on the warm-up, the task term is %.0f %% of seat %s's advantages (the rest is agreement "
                "and stability, earned as fully by a unanimous wrong debate); a wrong debate scores at least "
                "a right one in %.0f %% of pairs. Training may reward agreement over correctness: see "
                "reward_check in %s, and lambda_base",
                100 * check["task_share"],
                seat,
                100 * check["misranked"],
                out_path,
            )
    return out
