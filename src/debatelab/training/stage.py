"""The `train` stage: one training run of a policy on a dataset's questions.

Outputs (`results/{experiment}/train/{run}/`):

- ``model/``: the trained policy as a plain Hugging Face folder (LoRA merged into the base), which
  any agent can use as its model (`models.<name>: {source: "trained:<run>"}`);
- ``metrics.parquet``: one row per rollout step, columns `methods.dapo.DAPO_METRIC_COLUMNS`: the loss; mean
  and std of the first-turn rewards and their accuracy; KL to the reference; the share of clipped
  tokens; the policy's entropy on the trained tokens; mean response length; prompts sampled and
  groups kept by dynamic sampling; SDRL's debate prompts, kept debate groups and their accuracy;
  sequences and optimizer steps; learning rate; rollout and update seconds; tokens per second; and
  with a held-out dataset (`heldout_path`) the held-out accuracy of the base model and after every
  `heldout_every` steps (`core.heldout.HELDOUT_COLUMNS`, documented in `core/heldout.py`);
- ``curves.png``: reward, accuracy (and held-out accuracy), response length and where time goes, per step;
- ``settings.json``: the run's resolved settings, policy agent, dataset and base model;
- ``tensorboard/``: each step's metrics row as the run trains (`report_to`, `debatelab.tracking`; not
  an output: a resumed job continues it), with `tracker_runs.json`, the W&B / MLflow run ids.

Checkpoints live in ``checkpoint/`` beside them (not a Snakemake output, so a failed job's rerun
finds them): a killed job continues from its last finished step and, on a CPU, ends with the same
weights as an uninterrupted run.

The method's trainer comes from the registry (`methods.METHODS`: DAPO's or SDRL's); several
processes are started by `core.launch.launch_or_train`.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from ..data import dataset_label, read_dataset
from ..io import read_parquet_checked, save_figure_atomic, write_json_atomic, write_parquet_atomic
from ..llm.agent import AgentSpec
from ..llm.base import model_fingerprint, stable_hash
from ..reporting.training import plot_training_curves
from ..tracking import training_tracking
from ..zero_shot import select_questions
from .core import zero
from .core.checkpoint import resumable_settings
from .core.distributed import default_device, rank_and_world
from .methods import training_method
from .settings import TrainSettings

log = logging.getLogger(__name__)


def run_fingerprint(
    settings: TrainSettings, model_path: str, dataset_path: str, policy: AgentSpec, optimizer_layout: str | None = None
) -> dict:
    """What a checkpoint must match to be resumed: every setting but the budget and logging, the base
    weights, the training questions, the policy's prompt, and how the optimizer state is split among
    processes (`zero.layout`: a ZeRO checkpoint holds one partition per process). The parts, hashed by
    `checkpoint.fingerprint_hash`; a checkpoint of other parts is discarded naming what changed."""
    own = resumable_settings(settings)
    data = Path(dataset_path)
    ids = read_parquet_checked(data, ["id"], only_required=True)["id"] if data.exists() else None
    parts = {
        "settings": own,
        "model": model_fingerprint(model_path).split("#")[-1],
        "data": stable_hash(ids.astype(str).tolist()) if ids is not None else str(data),
        "system_prompt": policy.system_prompt,
    }
    if optimizer_layout is not None:  # absent for a whole optimizer state: earlier checkpoints still resume
        parts["optimizer_layout"] = optimizer_layout
    return parts


def train_job(
    *,
    dataset_path: str | Path,
    model_path: str | Path,
    out_dir: str | Path,
    metrics_path: str | Path,
    curves_path: str | Path,
    settings_path: str | Path,
    checkpoint_dir: str | Path,
    run: str,
    policy: AgentSpec,
    settings: TrainSettings,
    limit: int | None = None,
    device: str | None = None,
    reward=None,
    heldout_path: str | Path | None = None,
    report_to: str | list[str] = "tensorboard",
    experiment: str = "debatelab",
) -> pd.DataFrame:
    """The `train` rule: train, then write the model folder, metrics, curves and settings.
    `heldout_path`: a dataset file whose held-out accuracy the run measures as it trains.
    `report_to`: the trackers each step's metrics go to (`tracking.TRACKERS`), in project `experiment`."""
    import torch

    from .core.policy import Policy

    spec = training_method(settings.method)
    if spec.multi_agent:
        raise ValueError(f"train: method {settings.method!r} trains every agent of a debate (rule train_agents)")
    rank, world = rank_and_world()
    device = device or default_device(rank)
    torch.manual_seed(settings.seed)
    questions = select_questions(read_dataset(dataset_path), limit, settings.seed)
    trainer = spec.trainer(
        questions,
        Policy(model_path, settings, device=device),
        settings,
        run=run,
        system_prompt=policy.system_prompt,
        reward=reward,
        checkpoint_dir=checkpoint_dir,
        fingerprint=run_fingerprint(settings, str(model_path), str(dataset_path), policy, zero.layout(world)),
        heldout=read_dataset(heldout_path) if heldout_path else None,
    )
    info = {
        "run": run,
        "policy": policy.name,
        "base_model": str(model_path),
        "dataset": str(dataset_path),
        "questions": len(questions),
        "processes": world,
        "heldout": {"dataset": str(heldout_path), "questions": len(trainer.heldout_rows)} if heldout_path else None,
        "device": device,
        "settings": settings.to_dict(),
    }
    metrics = train_and_record(
        trainer,
        info,
        report_to=report_to,
        experiment=experiment,
        paths=(metrics_path, curves_path, settings_path),
        title=f"{run}: {settings.method} on {dataset_label(dataset_path)}, {Path(model_path).name}",
        close=trainer.policy.close,
        save=lambda: trainer.policy.save(out_dir),
    )
    if rank == 0:
        log.info(
            "trained %s: %d steps, final reward %.3f -> %s",
            run,
            len(metrics),
            metrics["reward_mean"].iloc[-1] if len(metrics) else float("nan"),
            out_dir,
        )
    return metrics


def train_and_record(
    trainer, info: dict, *, report_to, experiment: str, paths, title: str, close, save
) -> pd.DataFrame:
    """A training job's run and outputs, for `train_job` and `multi_agent_stage.train_agents_job`:
    `trainer.train` with the job's trackers (`tracking.training_tracking`, `info` its settings record:
    run, dataset, settings), `close()` the rollout engines whatever happens, then `save()` the trained
    model(s) (called by every process: ZeRO-3 gathers the weights from all; rank 0 writes) and on
    rank 0 write `paths` = (metrics.parquet, curves.png titled `title`, settings.json)."""
    metrics_path, curves_path, settings_path = paths
    tracking = training_tracking(
        report_to,
        metrics_path,
        experiment=experiment,
        run=info["run"],
        method=info["settings"]["method"],
        dataset_path=info["dataset"],
        config=info,
    )
    try:
        metrics = trainer.train(tracking)
    finally:
        close()
    save()
    if trainer.rank == 0:
        write_parquet_atomic(metrics, metrics_path)
        save_figure_atomic(plot_training_curves(metrics, title), curves_path)
        write_json_atomic(info, settings_path)
    return metrics
