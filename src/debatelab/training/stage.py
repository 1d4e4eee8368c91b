"""The `train` stage: one training run of a policy on a dataset's questions.

Outputs (`results/{experiment}/train/{run}/`):

- ``model/``: the trained policy as a plain Hugging Face folder (LoRA merged into the base), which
  any agent can use as its model (`models.<name>: {source: "trained:<run>"}`);
- ``metrics.parquet``: one row per rollout step, columns `trainer.METRIC_COLUMNS`: the loss; mean
  and std of the first-turn rewards and their accuracy; KL to the reference; the share of clipped
  tokens; the policy's entropy on the trained tokens; mean response length; prompts sampled and
  groups kept by dynamic sampling; SDRL's debate prompts, kept debate groups and their accuracy;
  sequences and optimizer steps; learning rate; rollout and update seconds; tokens per second; and
  with a held-out dataset (`heldout_path`) the held-out accuracy of the base model and after every
  `heldout_every` steps (`heldout.HELDOUT_COLUMNS`, documented in `heldout.py`);
- ``curves.png``: reward, accuracy (and held-out accuracy), response length and where time goes, per step;
- ``settings.json``: the run's resolved settings, policy agent, dataset and base model.

Checkpoints live in ``checkpoint/`` beside them (not a Snakemake output, so a failed job's rerun
finds them): a killed job continues from its last finished step and, on a CPU, ends with the same
weights as an uninterrupted run.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from ..config import AgentSpec
from ..data import read_dataset
from ..io import read_parquet_checked, save_figure_atomic, write_json_atomic, write_parquet_atomic
from ..llm.base import model_fingerprint, stable_hash
from ..reporting.training import plot_training_curves
from ..zero_shot import select_questions
from . import zero
from .settings import TrainSettings

log = logging.getLogger(__name__)


#: Settings a resumed run may change: the budget, logging (held-out evaluation included: it changes
#: no update), and the vLLM engine's memory knobs.
RESUMABLE_CHANGES = ("steps", "show_progress", "checkpoint_every", "vllm_gpu_memory_utilization", "vllm_max_model_len",
                     "vllm_enforce_eager", "vllm_sleep", "heldout_every", "heldout_questions")


def default_device(rank: int = 0) -> str:
    """The training process's device: its own GPU (by rank) when there are GPUs, else the CPU."""
    import torch

    return f"cuda:{rank % max(torch.cuda.device_count(), 1)}" if torch.cuda.is_available() else "cpu"


def resumable_settings(settings: TrainSettings) -> dict:
    """The settings a checkpoint must match to be resumed (all but `RESUMABLE_CHANGES`)."""
    return {k: v for k, v in settings.to_dict().items() if k not in RESUMABLE_CHANGES}


def run_fingerprint(settings: TrainSettings, model_path: str, dataset_path: str, policy: AgentSpec,
                    optimizer_layout: str | None = None) -> dict:
    """What a checkpoint must match to be resumed: every setting but the budget and logging, the base
    weights, the training questions, the policy's prompt, and how the optimizer state is split among
    processes (`zero.layout`: a ZeRO checkpoint holds one partition per process). The parts, hashed by
    `checkpoint.fingerprint_hash`; a checkpoint of other parts is discarded naming what changed."""
    own = resumable_settings(settings)
    data = Path(dataset_path)
    ids = read_parquet_checked(data, ["id"], only_required=True)["id"] if data.exists() else None
    parts = {"settings": own, "model": model_fingerprint(model_path).split("#")[-1],
             "data": stable_hash(ids.astype(str).tolist()) if ids is not None else str(data),
             "system_prompt": policy.system_prompt}
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
) -> pd.DataFrame:
    """The `train` rule: train, then write the model folder, metrics, curves and settings.
    `heldout_path`: a dataset file whose held-out accuracy the run measures as it trains."""
    import torch

    from .policy import Policy
    from .trainer import Trainer, _world

    rank, world = _world()
    device = device or default_device(rank)
    torch.manual_seed(settings.seed)
    questions = select_questions(read_dataset(dataset_path), limit, settings.seed)
    trainer = Trainer(questions, Policy(model_path, settings, device=device), settings, run=run,
                      system_prompt=policy.system_prompt, reward=reward, checkpoint_dir=checkpoint_dir,
                      fingerprint=run_fingerprint(settings, str(model_path), str(dataset_path), policy, zero.layout(world)),
                      heldout=read_dataset(heldout_path) if heldout_path else None)
    try:
        metrics = trainer.train()
    finally:
        trainer.policy.close()
    if rank == 0:
        trainer.policy.save(out_dir)
        write_parquet_atomic(metrics, metrics_path)
        save_figure_atomic(plot_training_curves(metrics, f"{run}: {settings.method} on {Path(dataset_path).parent.name}, "
                                                          f"{Path(model_path).name}"), curves_path)
        write_json_atomic({"run": run, "policy": policy.name, "base_model": str(model_path),
                           "dataset": str(dataset_path), "questions": len(questions), "processes": world,
                           "heldout": {"dataset": str(heldout_path), "questions": len(trainer.heldout_rows)}
                           if heldout_path else None,
                           "device": device, "settings": settings.to_dict()}, settings_path)
        log.info("trained %s: %d steps, final reward %.3f -> %s", run, len(metrics),
                 metrics["reward_mean"].iloc[-1] if len(metrics) else float("nan"), out_dir)
    return metrics


#: The jobs a training process can run: "train" (one policy), "train_agents" (UDPO, UMAD).
JOBS = {"train": ("debatelab.training.stage", "train_job"),
        "train_agents": ("debatelab.training.multi_agent_stage", "train_agents_job")}


def job_function(kind: str):
    import importlib

    module, name = JOBS[kind]
    return getattr(importlib.import_module(module), name)


def write_job_spec(path: str | Path, *, job_kind: str = "train", **job) -> None:
    """A job's arguments as JSON, for `python -m debatelab.training.launch` in each process of
    `accelerate launch`; `job_kind` names the function (`JOBS`)."""
    job = dict(job)
    if "policy" in job:
        job["policy"] = {**job["policy"].__dict__}
    if "agents" in job:
        job["agents"] = {name: {**spec.__dict__} for name, spec in job["agents"].items()}
    job["settings"] = job["settings"].to_dict()
    write_json_atomic({"job": job_kind, "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in job.items()}},
                      path)


def read_job_spec(path: str | Path) -> tuple[str, dict]:
    """(job kind, its arguments) of `write_job_spec`'s file."""
    spec = json.loads(Path(path).read_text())
    job = spec["arguments"]
    if "policy" in job:
        job["policy"] = AgentSpec(**job["policy"])
    if "agents" in job:
        job["agents"] = {name: AgentSpec(**value) for name, value in job["agents"].items()}
    job["settings"] = TrainSettings(**job["settings"])
    return spec["job"], job


def launch_or_train(*, processes: int = 1, accelerate_config: str | None = None, log_path: str | None = None,
                    job_kind: str = "train", **job):
    """Run a training job (`train_job`, or `train_agents_job` with `job_kind="train_agents"`) in this
    process, or with several processes: `accelerate launch` on GPUs (one per GPU) and with a
    DeepSpeed config anywhere, else torchrun's Gloo processes on a CPU. The job's arguments travel
    as JSON beside the checkpoints."""
    if processes <= 1:
        return job_function(job_kind)(**job)
    import subprocess
    import sys

    import torch

    spec = Path(job["checkpoint_dir"]) / "job.json"
    write_job_spec(spec, job_kind=job_kind, **job)
    if torch.cuda.is_available() or (accelerate_config and is_deepspeed_config(accelerate_config)):
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(processes), "--num_machines", "1"]
        cmd += ["--config_file", str(accelerate_config)] if accelerate_config else ["--multi_gpu"]
    else:  # accelerate starts several CPU processes only through MPI (DeepSpeed's aside); torchrun gives Gloo processes
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
    cmd += ["-m", "debatelab.training.launch", str(spec)] + ([str(log_path)] if log_path else [])
    log.info("launching %d training processes: %s", processes, " ".join(cmd))
    subprocess.run(cmd, check=True)
    return pd.read_parquet(job["metrics_path"])


def is_deepspeed_config(path: str | Path) -> bool:
    """Whether an accelerate config file runs DeepSpeed (`distributed_type: DEEPSPEED`)."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"accelerate_config {path}: no such file")
    return str((yaml.safe_load(path.read_text()) or {}).get("distributed_type", "")).upper() == "DEEPSPEED"
