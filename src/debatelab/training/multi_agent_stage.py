"""The multi-agent jobs of the `train` stage: what rules `udpo_warmup`, `udpo_coefficients` and
`train_agents` call. UDPO (Tang et al., arXiv:2602.07186 App. A.2; App. A.4, Algorithm 1) has all three; UMAD (Qiao et al., arXiv:2603.01221 §4.2, App. C.2, Algorithm 2) only the last.

1. `udpo_warmup_job` (GPU): the untrained agents debate the held-out `warmup_fraction` of the
   training questions (App. A.2 step 1). Writes `warmup.parquet`, one row per (question, round,
   seat): the parsed answer, whether it is right, the gold answer; and to the run's trackers
   (`report_to`, in `tensorboard_warmup/`) each round's accuracy, overall and per seat.
2. `udpo_coefficients_job` (CPU): App. A.2's calibration on those debates. Writes `coefficients.json`: α, β,
   γ, λ, η per seat, and the warm-up profile they came from.
3. `train_agents_job` (GPU): the run's method's trainer (`methods.METHODS`): UDPO on the other
   questions (`methods.udpo.UdpoTrainer`), or UMAD (`methods.umad.UmadTrainer`) or UDPO's baselines
   MAPPO and RMAAC (`methods.mappo.MappoTrainer`) on all of them (`DebateTrainer.prepare_job` says
   which questions, and what else the trainer reads). Writes one plain Hugging Face folder per trained agent
   (`agents/<agent>/`, used as model `trained:<run>/<agent>`), `metrics.parquet`, `curves.png` and
   `settings.json`, with resume checkpoints beside them; each step's metrics row goes to the run's
   trackers as it trains (`report_to`, `debatelab.tracking`: by default `tensorboard/`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..data import dataset_label, read_dataset
from ..io import read_parquet_checked, write_json_atomic, write_parquet_atomic
from ..llm.agent import AgentSpec
from ..llm.base import model_fingerprint
from ..tracking import open_tracker
from ..zero_shot import select_questions
from .core import zero
from .core.checkpoint import resumable_settings
from .core.distributed import default_device, rank_and_world
from .methods import training_method
from .methods.udpo import ablated, calibrate_coefficients, reward_ranking, split_warmup
from .settings import TrainSettings
from .stage import train_and_record

log = logging.getLogger(__name__)

WARMUP_COLUMNS = ["question_id", "task_type", "gold", "round", "seat", "agent", "answer", "correct"]


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
) -> pd.DataFrame:
    """App. A.2 step 1: one debate per held-out question by the untrained agents. Each round's
    accuracy (overall and per seat) goes to the trackers `report_to` names, as step = round."""
    from ..debate.stage import participant_labels
    from .core.debate_rollouts import rollout_debates

    warmup = _warmup_questions(dataset_path, limit, settings)
    policies, _ = _policies(bases, settings, device)
    policies.train(False)
    try:  # step −1: seeds apart from every training step's
        states = rollout_debates(
            policies,
            warmup.to_dict("records"),
            participants,
            settings,
            step=-1,
            rounds=settings.udpo.rounds,
            system_prompts={a: s.system_prompt for a, s in agents.items()},
        )
    finally:
        policies.close()
    seats = participant_labels(participants)
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
    frame = pd.DataFrame(rows, columns=WARMUP_COLUMNS)
    write_parquet_atomic(frame, out_path)
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
        "udpo warm-up: %d debates of %d seats, %d rounds -> %s", len(states), len(seats), settings.udpo.rounds, out_path
    )
    return frame


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


def train_agents_job(
    *,
    dataset_path,
    bases: dict[str, str],
    participants: Sequence[str],
    agents: dict[str, AgentSpec],
    out_dirs: dict[str, str],
    metrics_path,
    curves_path,
    settings_path,
    checkpoint_dir,
    run: str,
    settings: TrainSettings,
    coefficients_path=None,
    limit: int | None = None,
    device: str | None = None,
    heldout_path=None,
    report_to: str | list[str] = "tensorboard",
    experiment: str = "debatelab",
) -> pd.DataFrame:
    """UDPO on the training questions (the warm-up's held out), or UMAD, MAPPO or RMAAC on all of them; then every
    agent's folder, the metrics, the curves and the settings. `heldout_path`: a dataset file each agent's
    held-out accuracy is measured on as the run trains (`core/heldout.py`). `report_to`: the trackers each
    step's metrics go to (`tracking.TRACKERS`), in project `experiment`."""
    spec = training_method(settings.method)
    if not spec.multi_agent:
        raise ValueError(f"train_agents: method {settings.method!r} trains one policy (rule train)")
    trainer_class = spec.trainer
    # the questions it trains on (UDPO: the warm-up's held out) and its own arguments (UDPO: its coefficients)
    questions, own = trainer_class.prepare_job(
        select_questions(read_dataset(dataset_path), limit, settings.seed),
        settings,
        coefficients_path=coefficients_path,
    )
    coefficients = own.get("coefficients", {})
    policies, device = _policies(bases, settings, device)
    system_prompts = {a: s.system_prompt for a, s in agents.items()}
    fingerprint = {  # a checkpoint of other parts is discarded naming what changed (checkpoint.load_checkpoint)
        "settings": resumable_settings(settings),
        "models": {a: model_fingerprint(p).split("#")[-1] for a, p in bases.items()},
        "questions": questions["id"].astype(str).tolist(),
        "participants": list(participants),
        "coefficients": {s: c.to_dict() for s, c in coefficients.items()},
        "prompts": system_prompts,
    }
    layout = zero.layout(rank_and_world()[1]) if settings.finetuning == "full" else None
    if (
        layout is not None
    ):  # the agents' optimizers split under DeepSpeed or FSDP: a checkpoint resumes into the same split
        fingerprint["optimizer_layout"] = layout
    trainer = trainer_class(
        questions,
        policies,
        settings,
        run=run,
        participants=participants,
        system_prompts=system_prompts,
        checkpoint_dir=checkpoint_dir,
        fingerprint=fingerprint,
        heldout=read_dataset(heldout_path) if heldout_path else None,
        **own,
    )
    info = {
        "run": run,
        "method": settings.method,
        "participants": list(participants),
        "bases": dict(bases),
        "dataset": str(dataset_path),
        "questions": len(questions),
        "device": device,
        "processes": trainer.world,
        "heldout": {"dataset": str(heldout_path), "questions": len(trainer.heldout_rows)} if heldout_path else None,
        "coefficients": {s: c.to_dict() for s, c in coefficients.items()},
        "settings": settings.to_dict(),
    }

    def save() -> None:  # every process: ZeRO-3 gathers each agent from all of them; rank 0 writes
        for agent, out in out_dirs.items():
            policies.save(agent, out)

    metrics = train_and_record(
        trainer,
        info,
        report_to=report_to,
        experiment=experiment,
        paths=(metrics_path, curves_path, settings_path),
        title=f"{run}: {settings.method}, {len(participants)} agents on {dataset_label(dataset_path)}",
        close=policies.close,
        save=save,
    )
    return metrics
