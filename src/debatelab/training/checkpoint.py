"""Training checkpoints for resume: everything a killed run needs to go on as if it had not stopped.

`{directory}/step-NNNNN/` holds the trainable weights (safetensors), the optimizer and schedule
states, the random-number states (Python, NumPy, torch), the step counter and data order, and the
metrics so far; `{directory}/latest` names the newest. A checkpoint is written to a temporary
folder and renamed, then `latest` is replaced, then older checkpoints are removed, so a kill at any
moment leaves a complete checkpoint to resume from. A checkpoint of other settings (another base
model, dataset or hyperparameter; `steps` may grow) is not resumed: the run starts afresh and says so.
Under DeepSpeed ZeRO each process's optimizer partition sits in `optimizer-zero/rank-R.pt` instead
(`zero.py`): the processes write them first, then the checkpoint takes the folder in.
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

from ..io import write_text_atomic

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    step: int = 0  # rollout steps finished
    epoch: int = 0  # passes over the training questions started
    cursor: int = 0  # position in this epoch's question order
    metrics: list[dict] = field(default_factory=list)
    extra: dict = field(default_factory=dict)  # a method's own state (JSON), e.g. UDPO's replay priorities


def save_checkpoint(directory: str | Path, policy, state: TrainState, fingerprint: str, keep: int = 1,
                    optimizer_partitions: str | Path | None = None) -> Path:
    """`optimizer_partitions`: the folder of ZeRO optimizer partitions every process saved for this
    step (`zero.save_partition`), moved into the checkpoint in place of the whole optimizer state."""
    import torch

    from .zero import PARTITIONS
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    name = f"step-{state.step:05d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=directory))
    try:
        save_file({k: v.contiguous().cpu() for k, v in policy.trainable_state().items()}, tmp / "trainable.safetensors")
        whole = None if optimizer_partitions is not None else policy.optimizer.state_dict()
        torch.save({"optimizer": whole, "scheduler": policy.scheduler.state_dict()}, tmp / "optimizer.pt")
        if optimizer_partitions is not None:
            os.replace(optimizer_partitions, tmp / PARTITIONS)
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        torch.save(rng, tmp / "rng.pt")
        pd.DataFrame(state.metrics).to_parquet(tmp / "metrics.parquet")
        (tmp / "state.json").write_text(json.dumps({"step": state.step, "epoch": state.epoch, "cursor": state.cursor,
                                                    "fingerprint": fingerprint, "extra": state.extra}))
        final = directory / name
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_text_atomic(name, directory / "latest")
    finished = sorted(p for p in directory.glob("step-*") if p.is_dir())
    for old in finished[:-keep] + list(directory.glob(".zero-step-*")):  # and partitions of a killed save
        shutil.rmtree(old, ignore_errors=True)
    return final


def load_checkpoint(directory: str | Path, policy, fingerprint: str, engine=None, rank: int = 0,
                    world: int = 1) -> TrainState | None:
    """Restore the newest checkpoint into `policy` and the random states; None if there is none to
    resume. `engine`: the DeepSpeed engine whose optimizer partition this process restores."""
    import torch
    from safetensors.torch import load_file

    from .zero import PARTITIONS, load_partition

    directory = Path(directory)
    latest = directory / "latest"
    if not latest.exists():
        return None
    path = directory / latest.read_text().strip()
    meta = json.loads((path / "state.json").read_text())
    if meta["fingerprint"] != fingerprint:
        log.warning("checkpoint %s was made with other settings, base model or data: starting afresh", path)
        return None
    policy.load_trainable_state(load_file(path / "trainable.safetensors", device=str(policy.device)))
    states = torch.load(path / "optimizer.pt", map_location=policy.device, weights_only=False)
    if (path / PARTITIONS).exists():
        if engine is None:
            raise ValueError(f"checkpoint {path} holds DeepSpeed ZeRO optimizer partitions: resume it under the "
                             "same accelerate config")
        load_partition(engine, path / PARTITIONS, rank, world)
    else:
        policy.optimizer.load_state_dict(states["optimizer"])
    policy.scheduler.load_state_dict(states["scheduler"])
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    metrics = pd.read_parquet(path / "metrics.parquet").to_dict("records") if meta["step"] else []
    log.info("resuming from %s (step %d)", path, meta["step"])
    return TrainState(step=meta["step"], epoch=meta["epoch"], cursor=meta["cursor"], metrics=metrics,
                      extra=meta.get("extra", {}))
