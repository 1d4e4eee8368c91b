"""Training checkpoints for resume: everything a killed run needs to go on as if it had not stopped.

`{directory}/step-NNNNN/` holds the trainable weights (safetensors), the optimizer and schedule
states, the random-number states (Python, NumPy, torch), the step counter and data order, and the
metrics so far; `{directory}/latest` names the newest. A checkpoint is written to a temporary
folder and renamed, then `latest` is replaced, then older checkpoints are removed, so a kill at any
moment leaves a complete checkpoint to resume from. The newest two are kept: a checkpoint that does
not load (bytes cut off by a full disk, a file missing) is set aside as `corrupt-step-NNNNN` with a
warning, and the run resumes from the one before it, or from the start. A checkpoint of other
settings (another base model, dataset or hyperparameter; `steps` may grow) is not resumed: the run
starts afresh and logs which setting changed.
Under DeepSpeed ZeRO or FSDP `optimizer-zero/` holds the engine's own checkpoint instead of its
weights and optimizer state (DeepSpeed's files of every process by accelerate's `save_state`,
`zero.py`; FSDP's shards as accelerate saves them, `fsdp.py`): the processes write them first, then
the checkpoint takes the folder in.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ...io import read_parquet_checked, write_text_atomic
from ...llm.base import model_fingerprint, stable_hash

log = logging.getLogger(__name__)

#: Settings a resumed run may change: the budget, logging (held-out evaluation included: it changes
#: no update), and the vLLM engine's memory knobs.
RESUMABLE_CHANGES = (
    "steps",
    "show_progress",
    "checkpoint_every",
    "vllm_gpu_memory_utilization",
    "vllm_max_model_len",
    "vllm_enforce_eager",
    "vllm_sleep",
    "heldout_every",
    "heldout_questions",
)


def resumable_settings(settings) -> dict:
    """The settings a checkpoint must match to be resumed (all but `RESUMABLE_CHANGES`)."""
    return {k: v for k, v in settings.to_dict().items() if k not in RESUMABLE_CHANGES}


@dataclass
class TrainState:
    step: int = 0  # rollout steps finished
    epoch: int = 0  # passes over the training questions started
    cursor: int = 0  # position in this epoch's question order
    metrics: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # a method's own state (JSON), e.g. UDPO's replay priorities


# A fingerprint is what a checkpoint must match to be resumed: a hash, or the dict of parts it hashes
# (then a mismatch says which part changed).
def fingerprint_hash(fingerprint) -> str:
    return fingerprint if isinstance(fingerprint, str) else stable_hash(fingerprint)


def policy_fingerprint(
    settings, model_path: str, dataset_path: str, system_prompt: str | None, optimizer_layout: str | None = None
) -> dict:
    """A single-policy run's parts: every setting but the budget and logging, the base weights, the
    training questions, the policy's prompt, and how the optimizer state is split among processes
    (`zero.layout`: a ZeRO or FSDP checkpoint holds one partition per process)."""
    data = Path(dataset_path)
    ids = read_parquet_checked(data, ["id"], only_required=True)["id"] if data.exists() else None
    parts = {
        "settings": resumable_settings(settings),
        "model": model_fingerprint(model_path).split("#")[-1],
        "data": stable_hash(ids.astype(str).tolist()) if ids is not None else str(data),
        "system_prompt": system_prompt,
    }
    if optimizer_layout is not None:  # absent for a whole optimizer state: earlier checkpoints still resume
        parts["optimizer_layout"] = optimizer_layout
    return parts


def agents_fingerprint(
    settings,
    bases: dict[str, str],
    question_ids: list[str],
    participants,
    coefficients: dict,
    system_prompts: dict,
    optimizer_layout: str | None = None,
) -> dict:
    """A multi-agent run's parts: the settings, every agent's base weights, the training questions,
    the seats, UDPO's coefficients, the prompts, and (full fine-tuning split under DeepSpeed or FSDP)
    the optimizer's split."""
    parts = {
        "settings": resumable_settings(settings),
        "models": {a: model_fingerprint(p).split("#")[-1] for a, p in bases.items()},
        "questions": list(question_ids),
        "participants": list(participants),
        "coefficients": coefficients,
        "prompts": system_prompts,
    }
    if optimizer_layout is not None:
        parts["optimizer_layout"] = optimizer_layout
    return parts


def fingerprint_summary(fingerprint) -> dict | None:
    """What state.json keeps of the parts to explain a mismatch: settings as they are, others hashed."""
    if isinstance(fingerprint, str):
        return None
    return {key: value if key == "settings" else stable_hash(value) for key, value in fingerprint.items()}


def fingerprint_changes(old: dict | None, new) -> str:
    """'learning_rate 0.001 -> 0.002, the base model' for two summaries; '' when unknown."""
    new = fingerprint_summary(new)
    if old is None or new is None:
        return ""
    changes = []
    for key in sorted(set(old) | set(new), key=lambda k: (k != "settings", k)):  # settings first
        if old.get(key) == new.get(key):
            continue
        if key == "settings" and isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            a, b = old[key], new[key]
            changes += [f"{k} {a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
        else:
            changes.append(PART_NAMES.get(key, key))
    return ", ".join(changes)


PART_NAMES = {
    "model": "the base model",
    "models": "the base models",
    "data": "the training questions",
    "questions": "the training questions",
    "system_prompt": "the system prompt",
    "prompts": "the system prompts",
    "optimizer_layout": "the optimizer's split among processes",
    "participants": "the participants",
    "coefficients": "the UDPO coefficients",
}


def save_checkpoint(
    directory: str | Path,
    policy,
    state: TrainState,
    fingerprint,
    keep: int = 2,
    optimizer_partitions: str | Path | None = None,
) -> Path:
    """`optimizer_partitions`: the folder of the engines' checkpoints every process saved for this
    step (`zero.save_partition`), moved into the checkpoint in place of the whole optimizer state and
    of the engines' weights (`policy.trainable_state(for_checkpoint=True)` leaves those out).
    `keep` newest checkpoints stay: the one before the newest is the fallback if the newest won't load."""
    import torch
    from safetensors.torch import save_file

    from .zero import PARTITIONS

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"step-{state.step:05d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory))
    try:
        trainable = policy.trainable_state(for_checkpoint=True)
        save_file({k: v.contiguous().cpu() for k, v in trainable.items()}, tmp / "trainable.safetensors")
        # the optimizers outside the engines (all of them without one; a multi-agent run's others beside its agents')
        optimizer = policy.checkpoint_optimizer()
        whole = optimizer.state_dict() if optimizer is not None else None
        torch.save({"optimizer": whole, "scheduler": policy.scheduler.state_dict()}, tmp / "optimizer.pt")
        if optimizer_partitions is not None:
            os.replace(optimizer_partitions, tmp / PARTITIONS)
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / "rng.pt")
        pd.DataFrame(state.metrics).to_parquet(tmp / "metrics.parquet")
        (tmp / "state.json").write_text(
            json.dumps(
                {
                    "step": state.step,
                    "epoch": state.epoch,
                    "cursor": state.cursor,
                    "fingerprint": fingerprint_hash(fingerprint),
                    "fingerprint_parts": fingerprint_summary(fingerprint),
                    "extra": state.extra,
                }
            )
        )
        final = directory / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text_atomic(name, directory / "latest")  # for people and scripts: a resume takes the newest step
    finished = sorted(p for p in directory.glob("step-*") if p.is_dir())
    # and what a killed save left: its partitions, its unfinished folder (weights and optimizer: gigabytes)
    for old in [*finished[:-keep], *directory.glob(".zero-step-*"), *directory.glob(".step-*")]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(directory: str | Path, policy, fingerprint, rank: int = 0, world: int = 1) -> TrainState | None:
    """Restore the newest checkpoint that loads into `policy` and the random states; None if there is
    none to resume (none yet, or made with other settings). Under DeepSpeed or FSDP each engine
    comes back (`policy.checkpoint_engines()`: a single policy's from the engines' folder itself, a
    multi-agent run's each from its agent's subfolder): DeepSpeed's weights and this process's
    optimizer partition, FSDP's shards of both. The trainer's own files are read, and the engines'
    checked to be one per process, before anything is restored, so a checkpoint cut short or of
    another world size leaves the policy as it was."""
    engines = policy.checkpoint_engines()
    directory = Path(directory)
    for path in _newest_first(directory):
        try:
            meta = json.loads((path / "state.json").read_text())
            made_with = meta["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            _set_aside(path, error, rank)
            continue
        if made_with != fingerprint_hash(fingerprint):
            why = fingerprint_changes(meta.get("fingerprint_parts"), fingerprint)
            log.warning(
                "checkpoint %s was made with other settings, base model or data%s: starting afresh; its "
                "checkpoints are set aside as stale-step-*",
                path,
                f" ({why})" if why else "",
            )
            if rank == 0:  # out of the way of this run's own checkpoints (and of their pruning)
                for old in directory.glob("stale-step-*"):
                    shutil.rmtree(old, ignore_errors=True)
                for old in directory.glob("step-*"):
                    os.replace(old, old.with_name(f"stale-{old.name}"))
                (directory / "latest").unlink(missing_ok=True)
            return None
        try:
            _check_partitions(path, engines, world)
            trainable, states, rng, metrics = _read_checkpoint(path, policy.device, meta["step"])
        except Exception as error:  # safetensors, torch and pyarrow each raise their own types on cut-off files
            _set_aside(path, error, rank)
            continue
        policy.load_trainable_state(trainable)
        _restore_optimizer(policy, states, path, engines)
        _restore_rng(rng)
        log.info("resuming from %s (step %d)", path, meta["step"])
        return TrainState(
            step=meta["step"], epoch=meta["epoch"], cursor=meta["cursor"], metrics=metrics, extra=meta.get("extra", {})
        )
    return None


def _newest_first(directory: Path) -> list[Path]:
    """Every finished checkpoint, newest first. Not `latest` first: a kill between a checkpoint's
    rename and `latest`'s write leaves `latest` one behind, and steps only grow."""
    return sorted((p for p in directory.glob("step-*") if p.is_dir()), reverse=True)


def _check_partitions(path: Path, engines: dict, world: int) -> None:
    """`zero.check_partitions` of each engine's folder, before anything is restored (partitions mixed
    with a killed save's of another world size won't load; a missing folder holds none of its files)."""
    from .zero import PARTITIONS, check_partitions

    for name, engine in engines.items():
        check_partitions(engine, path / PARTITIONS / name, world)


def _set_aside(path: Path, error: Exception, rank: int) -> None:
    """Move a checkpoint that does not load out of the way (kept for inspection, never resumed)."""
    target = path.with_name(f"corrupt-{path.name}")
    log.warning(
        "checkpoint %s does not load (%s: %s): set aside as %s; resuming from the one before it, if any",
        path,
        type(error).__name__,
        str(error)[:200],
        target.name,
    )
    if rank == 0:  # one process moves it; the others skip it as well
        shutil.rmtree(target, ignore_errors=True)
        os.replace(path, target)


def _read_checkpoint(path: Path, device, step: int):
    import torch
    from safetensors.torch import load_file

    trainable = load_file(path / "trainable.safetensors", device=str(device))
    # weights_only: a checkpoint folder is data, never code to run (but DeepSpeed unpickles its own
    # files under optimizer-zero/, as it does any DeepSpeed checkpoint); numpy's RNG state is an array,
    # whose three constructors are the only globals allowed beyond tensors and plain containers
    states = torch.load(path / "optimizer.pt", map_location=device, weights_only=True)
    with torch.serialization.safe_globals(
        [np._core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    ):
        rng = torch.load(path / "rng.pt", weights_only=True)
    metrics = pd.read_parquet(path / "metrics.parquet").to_dict("records") if step else []
    return trainable, states, rng, metrics


def _restore_optimizer(policy, states: dict, path: Path, engines: dict) -> None:
    """The optimizers and schedules back; each engine from its folder, which `_check_partitions` passed."""
    from .zero import PARTITIONS, load_partition

    if (path / PARTITIONS).exists():
        if not engines:
            raise ValueError(
                f"checkpoint {path} holds sharded optimizer partitions (DeepSpeed ZeRO or FSDP): resume it under the "
                "same accelerate config"
            )
        for name, engine in engines.items():
            load_partition(engine, path / PARTITIONS / name)
        if states["optimizer"] is not None:  # the optimizers outside the engines
            policy.checkpoint_optimizer().load_state_dict(states["optimizer"])
    else:
        policy.checkpoint_optimizer().load_state_dict(states["optimizer"])
    policy.scheduler.load_state_dict(states["scheduler"])


def _restore_rng(rng: dict) -> None:
    import torch

    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
