"""Optuna TPE search of a confidence protocol's parameters θ on the validation split (Elahi & Di Eugenio, arXiv:2606.13591 §3.4).

    θ̂ = argmin_θ  L(θ) + λ_ECE·ECE(θ) + λ_anchor·‖θ − θ0‖²
    L = NLL of the system confidence against z = 1[ŷ_P = y]       (objective "nll", the paper's)
    L = −(weighted F1 + AUARC)                                    (objective "f1_auarc", the variant)

Studies live in an Optuna JournalStorage file. The study name carries a fingerprint of the data
and the settings, so a rerun (or a killed job's restart) continues the same study and never redoes
finished trials, and any number of processes (``workers``, or separate SLURM jobs calling
`optimize_study` with the same arguments) can join one study. With one worker and a seed the
search is exactly repeatable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

from .. import metrics
from ..metrics import ECE_WEIGHTINGS
from .fusion import Parameter, apply_method, search_space
from .streams import StreamArrays

log = logging.getLogger(__name__)

OBJECTIVES = ("nll", "f1_auarc")


@dataclass(frozen=True)
class SearchSettings:
    """Config `protocol_search` (defaults match config/schema.yaml), plus the ECE settings of `calibration`."""

    trials: int = 300
    patience: int = 50  # stop after this many trials without a gain above min_delta
    min_delta: float = 1e-4
    objective: str = "nll"
    lambda_ece: float = 0.1
    lambda_anchor: float = 0.1
    ece_bins: int = 10
    ece_weighting: str = "count"
    wsv_softmax_support: str = "all"
    ranges: dict = field(default_factory=dict)  # {"w": [lo, hi], "tau": [...], "delta": [...]}
    workers: int = 1
    startup_trials: int = 10

    def __post_init__(self):
        if self.objective not in OBJECTIVES:
            raise ValueError(f"search objective must be one of {OBJECTIVES}, got {self.objective!r}")
        for name in ("trials", "workers", "patience", "startup_trials", "ece_bins"):
            if getattr(self, name) < 1:
                raise ValueError(f"search {name} must be >= 1, got {getattr(self, name)}")
        if self.ece_weighting not in ECE_WEIGHTINGS:
            raise ValueError(f"ece_weighting must be one of {ECE_WEIGHTINGS}, got {self.ece_weighting!r}")
        if self.wsv_softmax_support not in ("all", "present"):
            raise ValueError(f"wsv_softmax_support must be 'all' or 'present', got {self.wsv_softmax_support!r}")
        unknown = set(self.ranges) - {"w", "tau", "delta"}
        if unknown:
            raise ValueError(f"search ranges: unknown parameter families {sorted(unknown)} (known: w, tau, delta)")
        for family, bounds in self.ranges.items():
            if len(bounds) != 2 or not bounds[0] < bounds[1]:
                raise ValueError(f"search ranges.{family} = {list(bounds)}: give [low, high] with low < high")


def objective_parts(
    protocol: str, arrays: StreamArrays, params: dict, settings: SearchSettings, *, tie_agent: int = 0, seed: int = 0
) -> dict[str, float]:
    """The objective and its parts for one θ on ``arrays`` (the validation split)."""
    answer, confidence = apply_method(
        protocol,
        arrays.pred,
        arrays.conf,
        arrays.n_labels,
        params=params,
        tie_agent=tie_agent,
        wsv_softmax_support=settings.wsv_softmax_support,
    )
    correct = arrays.correct(answer)
    space = search_space(protocol, settings.ranges)
    anchor = float(sum((params[p.name] - p.neutral) ** 2 for p in space))
    ece = metrics.ece(confidence, correct, bins=settings.ece_bins, weighting=settings.ece_weighting)
    parts = {"ece": ece, "anchor": anchor, "accuracy": float(correct.mean())}
    if settings.objective == "nll":
        parts["nll"] = metrics.nll(confidence, correct)
        loss = parts["nll"]
    else:
        parts["f1"] = metrics.weighted_f1(arrays.gold, answer)
        parts["auarc"] = metrics.auarc(confidence, correct, seed=seed)
        loss = -(parts["f1"] + parts["auarc"])
    parts["value"] = float(loss + settings.lambda_ece * ece + settings.lambda_anchor * anchor)
    return parts


def stalled(values: list[float], patience: int, min_delta: float) -> bool:
    """True once ``patience`` trials in a row brought no gain above ``min_delta`` over the best."""
    best, last_gain = np.inf, -1
    for i, value in enumerate(values):
        if value < best - min_delta:
            best, last_gain = value, i
    return len(values) - 1 - last_gain >= patience


class _EarlyStop:
    def __init__(self, patience: int, min_delta: float):
        self.patience, self.min_delta = patience, min_delta

    def __call__(self, study: optuna.Study, trial) -> None:
        if stalled(_complete_values(study), self.patience, self.min_delta):
            study.stop()


def _complete_values(study: optuna.Study) -> list[float]:
    return [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]


def storage(path: str | Path) -> JournalStorage:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    _repair_journal(Path(path))
    return JournalStorage(JournalFileBackend(str(path)))


def _repair_journal(path: Path) -> None:
    """Cut a journal back to its last whole line. Optuna writes whole lines, but a full disk or a
    node crash can leave the last one cut off: Optuna skips it on reading, appends the next trial
    onto it, and from then on no read of the study parses. Under the journal's own lock (Optuna's
    default symlink lock), so a worker writing its line is never cut."""
    if not path.exists() or path.stat().st_size == 0:
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "rb+") as journal:
            data = journal.read()
            if data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            journal.truncate(keep)
        log.warning(
            "optuna journal %s ended in a cut-off line (%d bytes): cut back to its last whole line",
            path,
            len(data) - keep,
        )
    finally:
        lock.release()


def study_fingerprint(protocol: str, arrays: StreamArrays, settings: SearchSettings, seed: int, tie_agent: int) -> str:
    h = hashlib.sha256()
    for array in (arrays.pred, arrays.conf, arrays.gold, arrays.n_labels):
        h.update(np.ascontiguousarray(array).tobytes())
    # The budget and the worker count don't change the question: raising `trials` continues the study.
    budget = ("trials", "patience", "min_delta", "workers")
    shared = {k: v for k, v in asdict(settings).items() if k not in budget}
    h.update(json.dumps([protocol, shared, seed, tie_agent], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


class HistorySeededTPE(optuna.samplers.BaseSampler):
    """Optuna's TPE, its randomness for each trial seeded by (seed, trials completed so far): a trial
    is a function of the study's history, so a search killed and resumed, or continued with a larger
    `trials`, draws what one uninterrupted search draws. One `TPESampler(seed)` for the whole search
    would start its random state again at every resume."""

    def __init__(self, seed: int, n_startup_trials: int):
        self.seed, self.n_startup_trials = int(seed), int(n_startup_trials)
        self._tpe = self._seeded(0)

    def _seeded(self, completed: int) -> optuna.samplers.TPESampler:
        mixed = int.from_bytes(hashlib.sha256(f"{self.seed}:{completed}".encode()).digest()[:4], "little")
        return optuna.samplers.TPESampler(seed=mixed, n_startup_trials=self.n_startup_trials)

    def before_trial(self, study, trial) -> None:
        self._tpe = self._seeded(len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))))
        self._tpe.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._tpe.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self._tpe.after_trial(study, trial, state, values)


def _suggest(trial: optuna.Trial, space: tuple[Parameter, ...]) -> dict[str, float]:
    return {p.name: trial.suggest_float(p.name, p.low, p.high) for p in space}


def optimize_study(
    protocol: str,
    arrays: StreamArrays,
    settings: SearchSettings,
    *,
    storage_path: str | Path,
    study_name: str,
    seed: int,
    tie_agent: int = 0,
    worker: int = 0,
) -> None:
    """Run trials of one study until the trial budget is spent or the search stalls.

    Safe to call from several processes at once with the same arguments (they share the study);
    each worker samples with its own seed.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = search_space(protocol, settings.ranges)
    study = optuna.create_study(
        study_name=study_name,
        storage=storage(storage_path),
        direction="minimize",
        load_if_exists=True,
        sampler=HistorySeededTPE(seed + 7919 * worker, settings.startup_trials),
    )
    values = _complete_values(study)
    if len(values) >= settings.trials or stalled(values, settings.patience, settings.min_delta):
        return
    if worker == 0 and not values:
        study.enqueue_trial({p.name: p.neutral for p in space})  # θ0 is always evaluated

    def objective(trial: optuna.Trial) -> float:
        parts = objective_parts(protocol, arrays, _suggest(trial, space), settings, tie_agent=tie_agent, seed=seed)
        for key, value in parts.items():
            if key != "value":
                trial.set_user_attr(key, value)
        return parts["value"]

    study.optimize(
        objective,
        n_trials=settings.trials - len(values) if settings.workers == 1 else None,
        callbacks=[
            optuna.study.MaxTrialsCallback(settings.trials, states=(TrialState.COMPLETE,)),
            _EarlyStop(settings.patience, settings.min_delta),
        ],
    )


def _worker_entry(kwargs: dict) -> None:
    optimize_study(**kwargs)


@dataclass
class SearchResult:
    study_name: str
    params: dict[str, float]
    value: float
    n_trials: int
    stopped_early: bool
    trials: pd.DataFrame


def tpe_search(
    protocol: str,
    arrays: StreamArrays,
    settings: SearchSettings,
    *,
    storage_path: str | Path,
    label: str,
    seed: int,
    tie_agent: int = 0,
) -> SearchResult:
    """Search θ for ``protocol`` on ``arrays``; ``label`` names the study (the fingerprint is appended)."""
    study_name = f"{label}:{study_fingerprint(protocol, arrays, settings, seed, tie_agent)}"
    kwargs = dict(
        protocol=protocol,
        arrays=arrays,
        settings=settings,
        storage_path=str(storage_path),
        study_name=study_name,
        seed=seed,
        tie_agent=tie_agent,
    )
    if settings.workers == 1:
        optimize_study(**kwargs)
    else:
        # The study must exist before the workers race to create it.
        optuna.create_study(
            study_name=study_name, storage=storage(storage_path), direction="minimize", load_if_exists=True
        )
        context = multiprocessing.get_context("spawn")
        processes = [
            context.Process(target=_worker_entry, args=({**kwargs, "worker": w},)) for w in range(settings.workers)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
            if process.exitcode != 0:
                raise RuntimeError(f"search worker for {study_name} exited with {process.exitcode}")
    study = optuna.load_study(study_name=study_name, storage=storage(storage_path))
    values = _complete_values(study)
    return SearchResult(
        study_name=study_name,
        params=dict(study.best_params),
        value=float(study.best_value),
        n_trials=len(values),
        stopped_early=len(values) < settings.trials,
        trials=trials_frame(study),
    )


def trials_frame(study: optuna.Study) -> pd.DataFrame:
    """One row per finished trial: number, value, running best, parameters and objective parts."""
    rows = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        rows.append(
            {
                "trial": t.number,
                "value": t.value,
                **{f"param_{k}": v for k, v in t.params.items()},
                **{k: v for k, v in t.user_attrs.items()},
            }
        )
    frame = pd.DataFrame(rows)
    if len(frame):
        frame = frame.sort_values("trial", kind="stable").reset_index(drop=True)
        frame["best_value"] = frame["value"].cummin()
    return frame
