"""The `train` stage's training job (`train_job`): what rules `train` (DAPO, SDRL: one policy) and
`train_agents` (UDPO, MAPPO, RMAAC, UMAD: every agent of a debate) call. The run's method's trainer
(`methods.METHODS`) says which questions it trains on, what it trains and what its checkpoints must
match; several processes are started by `core.launch.launch_or_train`.

Outputs (`results/{experiment}/train/{run}/`):

- rule `train`: ``model/``, the trained policy as a plain Hugging Face folder (LoRA merged into the
  base), which any agent can use as its model (`models.<name>: {source: "trained:<run>"}`);
  rule `train_agents`: ``agents/<agent>/``, one such folder per trained agent (model
  `trained:<run>/<agent>`);
- ``metrics.parquet``: one row per rollout step, the method's columns (DAPO and SDRL:
  `methods.dapo.DAPO_METRIC_COLUMNS`: the loss; mean and std of the first-turn rewards and their
  accuracy; KL to the reference; the share of clipped tokens; the policy's entropy on the trained
  tokens; mean response length; prompts sampled and groups kept by dynamic sampling; SDRL's debate
  prompts, kept debate groups and their accuracy; sequences and optimizer steps; learning rate;
  rollout and update seconds; tokens per second; the multi-agent methods: `DebateTrainer.columns`);
  with a held-out dataset (`heldout_path`) the held-out accuracy of the base model(s) and after
  every `heldout_every` steps (`core.heldout.HELDOUT_COLUMNS`, documented in `core/heldout.py`);
- ``curves.png``: reward, accuracy (and held-out accuracy), response length and where time goes, per step;
- ``settings.json``: the run's resolved settings, method, base model per trained agent, seats,
  dataset and UDPO's coefficients;
- ``tensorboard/``: each step's metrics row as the run trains (`report_to`, `debatelab.tracking`; not
  an output: a resumed job continues it), with `tracker_runs.json`, the W&B / MLflow run ids.

Checkpoints live in ``checkpoint/`` beside them (not a Snakemake output, so a failed job's rerun
finds them): a killed job continues from its last finished step and, on a CPU, ends with the same
weights as an uninterrupted run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..data import dataset_label, read_dataset
from ..io import save_figure_atomic, write_json_atomic, write_parquet_atomic
from ..llm.agent import AgentSpec
from ..reporting.training import plot_training_curves
from ..tracking import training_tracking
from ..zero_shot import select_questions
from .core.distributed import default_device, rank_and_world
from .methods import training_method
from .settings import TrainSettings

log = logging.getLogger(__name__)


def train_job(
    *,
    dataset_path: str | Path,
    bases: dict[str, str],
    agents: dict[str, AgentSpec],
    out_dirs: dict[str, str],
    metrics_path: str | Path,
    curves_path: str | Path,
    settings_path: str | Path,
    checkpoint_dir: str | Path,
    run: str,
    settings: TrainSettings,
    participants: Sequence[str] | None = None,
    coefficients_path: str | Path | None = None,
    reward=None,
    limit: int | None = None,
    device: str | None = None,
    heldout_path: str | Path | None = None,
    report_to: str | list[str] = "tensorboard",
    experiment: str = "debatelab",
) -> pd.DataFrame:
    """The `train` and `train_agents` rules: train with the run's method's trainer, then write each
    trained agent's folder (`out_dirs`), the metrics, curves and settings.

    `bases`: each trained agent's base model folder; `agents`: the agents' specs (their prompts);
    `participants`: a multi-agent method's seats (None for DAPO and SDRL, which train one agent);
    `coefficients_path`: UDPO's calibrated coefficients. `reward`: a single-policy run's reward
    function in place of the settings' (tests). `heldout_path`: a dataset file whose held-out
    accuracy the run measures as it trains. `report_to`: the trackers each step's metrics go to
    (`tracking.TRACKERS`), in project `experiment`. The trainer class builds what differs between
    methods (`BaseTrainer.prepare_job`, `load_policies`, `job_fingerprint`, `job_arguments`, `save_models`)."""
    import torch

    spec = training_method(settings.method)
    check_job_agents(spec, bases, agents, out_dirs, participants, coefficients_path, reward)
    trainer_class = spec.trainer
    rank, world = rank_and_world()
    device = device or default_device(rank)
    questions, own = trainer_class.prepare_job(
        select_questions(read_dataset(dataset_path), limit, settings.seed),
        settings,
        coefficients_path=coefficients_path,
    )
    torch.manual_seed(settings.seed)
    policies = trainer_class.load_policies(bases, settings, device=device)
    system_prompts = {a: s.system_prompt for a, s in agents.items()}
    trainer = trainer_class(
        questions,
        policies,
        settings,
        run=run,
        checkpoint_dir=checkpoint_dir,
        fingerprint=trainer_class.job_fingerprint(
            settings,
            bases=bases,
            dataset_path=dataset_path,
            questions=questions,
            system_prompts=system_prompts,
            participants=participants,
            own=own,
            world=world,
        ),
        heldout=read_dataset(heldout_path) if heldout_path else None,
        **trainer_class.job_arguments(system_prompts=system_prompts, participants=participants, reward=reward, own=own),
    )
    info = {
        "run": run,
        "method": settings.method,
        "bases": {a: str(path) for a, path in bases.items()},
        "participants": list(participants) if participants is not None else None,
        "dataset": str(dataset_path),
        "questions": len(questions),
        "processes": world,
        "device": device,
        "heldout": {"dataset": str(heldout_path), "questions": len(trainer.heldout_rows)} if heldout_path else None,
        "coefficients": {s: c.to_dict() for s, c in own.get("coefficients", {}).items()},
        "settings": settings.to_dict(),
    }
    agents_label = f"{len(participants)} agents" if participants is not None else Path(next(iter(bases.values()))).name
    tracking = training_tracking(
        report_to,
        metrics_path,
        experiment=experiment,
        run=run,
        method=settings.method,
        dataset_path=str(dataset_path),
        config=info,
    )
    try:
        metrics = trainer.train(tracking)
    finally:
        policies.close()  # the rollout engines, whatever happens
    trainer.save_models(out_dirs)  # by every process: ZeRO-3 and FSDP gather the weights from all
    if rank == 0:
        write_parquet_atomic(metrics, metrics_path)
        title = f"{run}: {settings.method}, {agents_label} on {dataset_label(dataset_path)}"
        save_figure_atomic(plot_training_curves(metrics, title), curves_path)
        write_json_atomic(info, settings_path)
        log.info("trained %s: %d steps -> %s", run, len(metrics), ", ".join(str(out) for out in out_dirs.values()))
    return metrics


def check_job_agents(spec, bases, agents, out_dirs, participants, coefficients_path, reward) -> None:
    """A ValueError for a job whose agents don't fit its method: one trained agent for a single-policy
    method, seats for a multi-agent one, a base and an output folder for each trained agent."""
    name = spec.name
    if set(out_dirs) != set(bases):
        raise ValueError(f"training {name}: output folders for {sorted(out_dirs)}, bases for {sorted(bases)}")
    if missing := sorted(set(bases) - set(agents)):
        raise ValueError(f"training {name}: no agent spec for {missing}")
    if not spec.multi_agent:
        if len(agents) != 1 or len(bases) != 1 or participants is not None or coefficients_path is not None:
            raise ValueError(
                f"training {name}: the method trains one policy (rule train): one agent, no participants or "
                f"coefficients; got agents {sorted(agents)}"
            )
        return
    if participants is None:
        raise ValueError(
            f"training {name}: the method trains every agent of a debate (rule train_agents): no participants given"
        )
    if untrained := sorted(set(participants) - set(bases)):
        raise ValueError(f"training {name}: participants {untrained} have no base model")
    if reward is not None:
        raise ValueError(f"training {name}: a reward function replaces a single policy's reward only")
