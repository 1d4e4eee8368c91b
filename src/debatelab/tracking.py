"""Experiment tracking: a training job's metrics row streamed to a tracker after every step, and the
evaluation's tables, as TRL's `report_to` does (config `training.report_to`, per run
`training.runs.<run>.report_to`).

- Trackers (`TRACKERS`): TensorBoard event files in the job's tracker folder (the default; offline,
  no account), Weights & Biases, trackio or MLflow, one or several; `none` turns tracking off. The
  packages other than TensorBoard are imported only when named, and their keys come from their own
  environment variables (WANDB_API_KEY, HF_TOKEN, MLFLOW_TRACKING_TOKEN), never from the config: the
  tracker run's config (the job's settings) is refused if it holds one (`credentials.check_no_secrets`).
- Tags (`scalar_tags`): a metrics column `c` is `<prefix>/c`; a multi-agent run's per-agent column
  `c_<agent>` is `agent/<agent>/c`; `step` is the step, not a scalar; NaN cells are left out.
- Resume (`open_tracker(..., resumed_at=k)`): a job resumed after k finished steps continues the same
  tracker run. TensorBoard purges the steps after k that a killed job logged (`purge_step`), so
  each step is there once; W&B resumes its run by the id kept in the folder (`RUN_IDS`), MLflow
  its run id, trackio its run by name. A job starting from step 0 clears the folder first, so it
  never appends to an earlier run's event files.
"""

from __future__ import annotations

import importlib
import json
import logging
import math
import shutil
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pandas as pd

from .credentials import check_no_secrets
from .data.schema import dataset_label
from .io import write_json_atomic

log = logging.getLogger(__name__)

#: The trackers `report_to` may name (with `none`: no tracking), as TRL names them.
TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")
#: What to install for each tracker.
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio", "mlflow": "mlflow-skinny"}
#: The file in a tracker folder that keeps the tracker runs' ids, so a resumed job continues them.
RUN_IDS = "tracker_runs.json"


def tracker_names(report_to: str | Sequence[str] | None) -> tuple[str, ...]:
    """The trackers of a `report_to` value (a name or a list of names; `none` or empty: none)."""
    names = [report_to] if isinstance(report_to, str) else list(report_to or [])
    names = [n for n in names if n != "none"]
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"report_to: {name!r} is not one of {[*TRACKERS, 'none']}")
    return tuple(dict.fromkeys(names))


def scalar_tags(row: Mapping, agents: Iterable[str] = (), prefix: str = "train") -> dict[str, float]:
    """A metrics row as {tag: value} (module docstring): numbers only, NaN left out."""
    by_length = sorted(agents, key=len, reverse=True)  # "bob_2" before "2"
    out = {}
    for column, value in row.items():
        if column == "step" or isinstance(value, str) or value is None:
            continue
        try:
            value = float(value)
        except (TypeError, ValueError):
            continue
        if math.isnan(value):
            continue
        agent = next((a for a in by_length if column.endswith(f"_{a}")), None)
        tag = f"agent/{agent}/{column[: -len(agent) - 1]}" if agent else f"{prefix}/{column}"
        out[tag] = value
    return out


def markdown_table(frame: pd.DataFrame) -> str:
    """A table as Markdown (TensorBoard's text panel renders it): numbers to 4 significant digits."""

    def cell(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return ""
        return f"{value:.4g}" if isinstance(value, float) else str(value).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _require(name: str):
    """The tracker's package, or an error saying what to install."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise ImportError(
            f"report_to names {name!r}, whose package is not installed: pip install {PACKAGES[name]} "
            f"(or report_to: tensorboard, the default)"
        ) from error


class _TensorBoard:
    """Event files in the tracker folder; flushed after every step so a running job shows in TensorBoard."""

    def __init__(self, directory: Path, *, resumed_at: int, **_):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as error:
            raise ImportError(f"report_to names 'tensorboard': pip install {PACKAGES['tensorboard']}") from error
        _after_existing_event_files(directory)
        # the steps after the checkpoint that a killed job logged are redone: TensorBoard drops them
        self.writer = SummaryWriter(str(directory), purge_step=resumed_at + 1 if resumed_at else None)

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()

    def log_table(self, name: str, frame: pd.DataFrame, step: int) -> None:
        self.writer.add_text(name, markdown_table(frame), global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _after_existing_event_files(directory: Path) -> None:
    """Wait until the clock is past the newest event file's second: TensorBoard reads a folder's files
    in name order, whose first field is the second a file was opened, so a resumed job's file (with its
    purge) must sort after the killed job's."""
    fields = [p.name.split(".") for p in directory.glob("events.out.tfevents.*")]
    seconds = [int(f[3]) for f in fields if len(f) > 4 and f[3].isdigit()]
    while seconds and time.time() < max(seconds) + 1:
        time.sleep(0.05)


class _Wandb:
    """A W&B run whose id stays in the folder: a resumed job continues it (resume="allow"). W&B keeps
    the first value it got for a step, so a step a killed job logged keeps that value when redone."""

    def __init__(self, directory: Path, *, project, name, tags, config, run_ids, **_):
        self.wandb = _require("wandb")
        run_ids.setdefault("wandb", uuid.uuid4().hex[:12])
        self.run = self.wandb.init(
            project=project,
            name=name,
            config=config,
            tags=list(tags),
            id=run_ids["wandb"],
            resume="allow",
            dir=str(directory),
        )

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def log_table(self, name: str, frame: pd.DataFrame, step: int) -> None:
        self.run.log({name: self.wandb.Table(dataframe=frame)}, step=step)

    def close(self) -> None:
        self.run.finish()


class _Trackio:
    """A trackio run named after the job; a resumed job continues the run of that name."""

    def __init__(self, directory: Path, *, project, name, tags, config, resumed_at, **_):
        self.trackio = _require("trackio")
        self.run = self.trackio.init(
            project=project,
            name=name,
            config={**config, "tags": list(tags)},  # trackio has no tags of its own
            resume="allow" if resumed_at else "never",
        )

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.trackio.log(scalars, step=step)

    def log_table(self, name: str, frame: pd.DataFrame, step: int) -> None:
        self.trackio.log({name: self.trackio.Table(dataframe=frame)}, step=step)

    def close(self) -> None:
        self.trackio.finish()


class _Mlflow:
    """An MLflow run in experiment `project` (the tracking server: MLFLOW_TRACKING_URI); a resumed job
    reopens it by its id. Parameters are logged once, at a fresh start (MLflow refuses to change one;
    a resume may raise `steps`); the whole config goes in as config.json each time."""

    def __init__(self, directory: Path, *, project, name, tags, config, resumed_at, run_ids, **_):
        self.mlflow = _require("mlflow")
        self.mlflow.set_experiment(project)
        run_id = run_ids.get("mlflow") if resumed_at else None
        run = self.mlflow.start_run(
            run_id=run_id, run_name=None if run_id else name, tags={"debatelab.tags": ", ".join(tags)}
        )
        run_ids["mlflow"] = run.info.run_id
        if run_id is None:
            self.mlflow.log_params(_flat(config))
        self.mlflow.log_dict(config, "config.json")

    def log_scalars(self, scalars: dict[str, float], step: int) -> None:
        self.mlflow.log_metrics(scalars, step=step)

    def log_table(self, name: str, frame: pd.DataFrame, step: int) -> None:
        self.mlflow.log_table(data=frame, artifact_file=f"tables/{name}.json")

    def close(self) -> None:
        self.mlflow.end_run()


def _flat(config: Mapping, prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow parameters: dotted keys, values as text."""
    out = {}
    for key, value in config.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = json.dumps(value, default=str)[:6000]  # MLflow's longest value
    return out


BACKENDS = {"tensorboard": _TensorBoard, "wandb": _Wandb, "trackio": _Trackio, "mlflow": _Mlflow}


class Tracker:
    """The trackers of one job; with none, every call does nothing."""

    def __init__(self, backends: Sequence = (), directory: Path | None = None):
        self.backends, self.directory = list(backends), directory

    def log_metrics(self, row: Mapping, step: int, agents: Iterable[str] = (), prefix: str = "train") -> None:
        """One metrics row at `step` (`scalar_tags`); each tracker writes it out at once."""
        scalars = scalar_tags(row, agents, prefix)
        for backend in self.backends:
            backend.log_scalars(scalars, step)

    def log_tables(self, tables: Mapping[str, pd.DataFrame], step: int = 0) -> None:
        for name, frame in tables.items():
            for backend in self.backends:
                backend.log_table(name, frame, step)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def training_tracking(
    report_to, metrics_path: str | Path, *, experiment: str, run: str, method: str, dataset_path: str | Path, config
) -> dict:
    """A training job's `open_tracker` arguments but `resumed_at` (what `BaseTrainer.train` takes): the
    folder `tensorboard/` beside its metrics, the experiment as project, the run as name, experiment,
    method and dataset as tags, the job's settings (`config`) as the tracker run's config."""
    return {
        "report_to": report_to,
        "directory": Path(metrics_path).parent / "tensorboard",
        "project": experiment,
        "name": run,
        "tags": [experiment, method, dataset_label(dataset_path)],
        "config": config,
    }


def open_tracker(
    report_to: str | Sequence[str] | None,
    directory: str | Path,
    *,
    project: str,
    name: str,
    tags: Sequence[str] = (),
    config: Mapping | None = None,
    resumed_at: int = 0,
) -> Tracker:
    """The trackers `report_to` names, as one `Tracker`, for a job whose tracker folder is `directory`
    (TensorBoard's event files, `RUN_IDS`, W&B's local files) and that resumes after `resumed_at`
    finished steps (0: a fresh start, which clears the folder). `project`, `name`, `tags`: the tracker
    run's (the experiment, the run); `config`: its config, which must hold no credential."""
    names = tracker_names(report_to)
    config = dict(config or {})
    check_no_secrets(config, "tracker config")
    directory = Path(directory)
    if not resumed_at:
        shutil.rmtree(directory, ignore_errors=True)
    if not names:
        return Tracker()
    directory.mkdir(parents=True, exist_ok=True)
    ids_path = directory / RUN_IDS
    run_ids = _run_ids(ids_path) if resumed_at else {}
    backends = [
        BACKENDS[n](
            directory,
            project=project,
            name=name,
            tags=tuple(tags),
            config=config,
            resumed_at=resumed_at,
            run_ids=run_ids,
        )
        for n in names
    ]
    if run_ids:
        write_json_atomic(run_ids, ids_path)
    return Tracker(backends, directory)


def _run_ids(path: Path) -> dict:
    """The tracker runs a resumed job continues; an unreadable file (cut off by a full disk) starts
    new runs, with a warning, rather than stopping the training job."""
    if not path.exists():
        return {}
    try:
        ids = json.loads(path.read_text())
        if isinstance(ids, dict):
            return ids
    except (OSError, ValueError):
        pass
    log.warning("tracking: %s does not read as the runs' ids; the resumed job logs to new runs", path)
    return {}
