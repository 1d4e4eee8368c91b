"""One GPU window: every (run, seed) of a multi-agent experiment trained at once on one GPU, each in
its own process, within a wall-clock budget, resuming where the last window stopped.

    PYTHONPATH=src python benchmarks/gpu_window.py --work .gpu_work --out "$OUT" --budget-s 480 \
        [--configfile config/experiments/learning_gpu.yaml] [--runs udpo mappo rmaac umad ippo] [--seeds 1 2 3]

What it does, in order (docs/experiments.md, "One GPU window", has the device commands):

1. The experiment of each seed: the config file with the seed and the experiment's name set as
   `snakemake --config seed=S experiment=<name>_sS` sets them, then the size overrides (`--steps`,
   `--questions-per-step`, `--threads`, `--max-tokens`, `--heldout-questions`, `--heldout-every`,
   `--warmup-fraction`, and any `--set a.b.c=<yaml>`, `*` matching every key of a level) on the
   config's mapping, and the trackers off (`training.report_to: none`); then the library's own
   validation (`config.validate_config`, schema defaults filled, as Snakemake's `validate`) and
   `config.Experiment`. Written to `<work>/inputs/<seed>/config.json`.
2. Inputs, once, skipping what exists: the datasets the runs read (`data.write_benchmark`, as rule
   `download_dataset`: per seed, since the data's seed is the experiment's) into
   `<work>/inputs/<seed>/data/` (beside the seed's config.json; the datasets need reasoning_gym, so
   on a machine without it `--prepare-only` makes them elsewhere and `<work>/inputs` travels),
   and the base model (`models.prepare_model`, as rule `prepare_model`; with `--gguf FILE` the bundled
   source converts that file, its package being missing) into
   `<work>/resources/models/`. `--prepare-only` stops here.
3. Every (run, seed) not finished as its own OS process (`worker`), all at once, on the GPU the
   environment gives (CUDA_VISIBLE_DEVICES as it is). A worker calls what the rules call: for a UDPO
   run `multi_agent_stage.udpo_warmup_job` (rule udpo_warmup) and `udpo_coefficients_job` (rule
   udpo_coefficients) unless their files exist, then `launch.launch_or_train`
   (rule train_agents) with the rule's arguments, outputs in `<work>/<seed>/train/<run>/` (agents/,
   metrics.parquet, curves.png, settings.json) and its checkpoints in `.../checkpoint/` (every step:
   `checkpoint_every`), from which a killed worker's rerun resumes. A sample of each step's replies
   goes to `replies.parquet` beside them (`training.core.replies`). Each worker invocation appends
   one JSON line to `sessions.jsonl`: its wall time, exit, GPU name, peak GPU memory (torch's max
   allocated) and the Python distributions it imported.
4. As steps complete (read from the newest checkpoint's metrics, written atomically every step), a
   progress line per step on stdout. At `--budget-s` minus the grace and packing reserve, workers
   still running get SIGTERM, then SIGKILL after `--grace-s`: the script exits within the budget,
   and the same command run again continues every run from its last checkpoint.
5. Into `--out` (at most 8 files, each < 16 MB): `summary.json` (per run and seed: steps done,
   mean step, rollout and update seconds, first and last rewards, the last held-out accuracies,
   GPU name, peak GPU memory per process: torch's and nvidia-smi's), `runs.tar.gz` (each run's
   metrics, replies, settings, job.json (the job's arguments, `launch.write_job_spec`), warm-up,
   coefficients, curves, sessions and logs; no weights, no
   checkpoints), `progress.txt` (the table) and `nvidia-smi.txt`.

The summary is assembled from `--work` alone, so `--budget-s 0`-like reruns (`--pack-only`) re-pack.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = "config/experiments/learning_gpu.yaml"
DEFAULT_RUNS = ["udpo", "mappo", "rmaac", "umad", "ippo"]
DEFAULT_SEEDS = [1, 2, 3]
#: the method's own block, where its questions per step (and UMAD's threads) are set
METHOD_BLOCK = {"udpo": "udpo", "mappo": "mappo", "rmaac": "mappo", "umad": "umad"}
MAX_OUT_FILES = 8
MAX_OUT_BYTES = 16 * 1024 * 1024
LOG_TAIL_BYTES = 512 * 1024
PACK_RESERVE_S = 15.0


# -- the experiment of a seed -------------------------------------------------------------------
def _parse_set(item: str) -> tuple[list[str], object]:
    import yaml

    key, sep, value = item.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set {item!r}: expected a.b.c=<yaml value>")
    return key.split("."), yaml.safe_load(value)


def _set_path(node, keys: list[str], value) -> None:
    head, rest = keys[0], keys[1:]
    targets = list(node) if head == "*" else [head]
    for key in targets:
        if not rest:
            node[key] = value
        else:
            if node.get(key) is None:
                node[key] = {}
            _set_path(node[key], rest, value)


def size_overrides(args, config: dict) -> list[tuple[list[str], object]]:
    """The `--set`-style overrides that the size options stand for, on every run of `config`."""
    out = []
    for run, spec in config["training"]["runs"].items():
        block = METHOD_BLOCK.get(spec.get("method"))
        base = ["training", "runs", run]
        if args.steps is not None:
            out.append((base + ["steps"], args.steps))
        if args.max_tokens is not None:
            out.append((base + ["max_tokens"], args.max_tokens))
        if args.heldout_questions is not None and spec.get("heldout"):
            out.append((base + ["heldout", "questions"], args.heldout_questions))
        if args.heldout_every is not None and spec.get("heldout"):
            out.append((base + ["heldout", "every"], args.heldout_every))
        if args.checkpoint_every is not None:
            out.append((base + ["checkpoint_every"], args.checkpoint_every))
        if block and args.questions_per_step is not None:
            out.append((base + [block, "questions_per_step"], args.questions_per_step))
        if block == "umad" and args.threads is not None:
            out.append((base + [block, "threads"], args.threads))
        if block == "udpo" and spec.get("method") == "udpo" and args.warmup_fraction is not None:
            out.append((base + [block, "warmup_fraction"], args.warmup_fraction))
    return out


def seed_config(args, seed: int) -> dict:
    """The validated config of one seed (module docstring, step 1)."""
    import yaml

    from debatelab.config import Experiment, validate_config

    # a JSON round trip: YAML anchors share nested mappings between runs; an override must touch one
    config = json.loads(json.dumps(yaml.safe_load(Path(args.configfile).read_text())))
    config["experiment"] = f"{config['experiment']}_s{seed}"
    if args.data_seed is None:  # as `--config seed=S`: the data and every run follow the seed
        config["seed"] = seed
    else:  # the data of one experiment seed (learning_cpu's questions at 0); each run's own seed is S
        config["seed"] = args.data_seed
        for spec in (config.get("training") or {}).get("runs", {}).values():
            spec["seed"] = seed
    config.setdefault("training", {})["report_to"] = "none"
    for keys, value in size_overrides(args, config) + [_parse_set(item) for item in args.set or []]:
        _set_path(config, keys, value)
    config = validate_config(config)
    exp = Experiment(config)
    unknown = [run for run in args.runs if run not in exp.training_runs]
    if unknown:
        raise SystemExit(f"--runs {unknown}: not runs of {args.configfile} ({sorted(exp.training_runs)})")
    not_multi = [run for run in args.runs if run not in exp.multi_agent_runs()]
    if not_multi:
        raise SystemExit(f"--runs {not_multi}: not multi-agent runs (this script trains those)")
    return config


# -- paths --------------------------------------------------------------------------------------
def seed_dir(work: Path, seed: int) -> Path:
    return work / str(seed)


def inputs_dir(work: Path, seed: int) -> Path:
    """A seed's config.json and datasets: one folder for every seed (`<work>/inputs/`), carried whole
    to a machine that can't make them (the datasets need reasoning_gym)."""
    return work / "inputs" / str(seed)


def run_dir(work: Path, seed: int, run: str) -> Path:
    return seed_dir(work, seed) / "train" / run


def model_path(work: Path, exp, agent: str) -> Path:
    """A base agent's model folder under `<work>`, where rule prepare_model's `resources/models/<m>` lies."""
    rel = Path(exp.agent_model_dir(agent))
    if rel.parts[:2] != ("resources", "models"):
        raise SystemExit(f"agent {agent}: model {rel} is not a prepared base model (resources/models/...)")
    return work / rel


def run_inputs(work: Path, seed: int, exp, run: str) -> dict:
    """What the training rules give a multi-agent run (rules/common.smk `multi_agent_job`, `heldout_input`)."""
    spec = exp.training_runs[run]
    agents = exp.run_agents(run)
    heldout = exp.heldout_dataset(run)
    return {
        "bases": {a: str(model_path(work, exp, a)) for a in agents},
        "agents": {a: exp.agent_settings(a) for a in agents},
        "participants": spec["participants"],
        "dataset": str(inputs_dir(work, seed) / exp.dataset_path(spec["dataset"])),
        "heldout": str(inputs_dir(work, seed) / exp.dataset_path(heldout)) if heldout else None,
        "limit": exp.datasets[spec["dataset"]]["limit"],
    }


# -- step 2: inputs -----------------------------------------------------------------------------
def dataset_build(exp, dataset: str) -> tuple[str, str, str, int]:
    """(benchmark, split, source, seed) that rule download_dataset builds `exp.dataset_path(dataset)`
    with: read back from the file's name where the library names splits by what their rows depend on
    (`data.registry.parse_split_variant`), else the first entry's source and the experiment's seed."""
    benchmark, split = exp.benchmark_of(dataset), exp.datasets[dataset]["split"]
    try:
        from debatelab.data.registry import parse_split_variant
    except ImportError:
        return benchmark, split, exp.download_source(benchmark), exp.seed
    source, seed = parse_split_variant(Path(exp.dataset_path(dataset)).stem)
    return benchmark, split, source, seed


def model_build(exp, model: str, folder: Path) -> tuple[str, dict]:
    """(name, keyword arguments) of `models.prepare_model` as rule prepare_model calls it for `model`."""
    if hasattr(exp, "prepared_model_settings"):  # folders named by what they are built from
        settings = exp.prepared_model_settings(model)
        kwargs = {"dtype": settings.get("dtype", "float32"), "seed": settings.get("seed", 0)}
        if settings.get("include"):
            kwargs["include"] = settings["include"]
        return folder.name, {"source": settings["source"], **kwargs}
    spec = exp.models[model]
    return model, {"source": spec["source"], "dtype": spec["dtype"], "seed": exp.seed}


def prepare(args, work: Path, configs: dict[int, dict], log) -> None:
    from debatelab.config import Experiment

    for seed, config in configs.items():
        exp = Experiment(json.loads(json.dumps(config)))
        datasets = set()
        for run in args.runs:
            datasets.add(exp.training_runs[run]["dataset"])
            if exp.heldout_dataset(run):
                datasets.add(exp.heldout_dataset(run))
        for dataset in sorted(datasets):
            path = inputs_dir(work, seed) / exp.dataset_path(dataset)
            if path.exists():
                continue
            from debatelab.data import write_benchmark

            benchmark, split, source, data_seed = dataset_build(exp, dataset)
            start = time.perf_counter()
            write_benchmark(benchmark, split, path, source=source, seed=data_seed)
            log(f"prepared {path} ({time.perf_counter() - start:.1f} s)")
        for run in [] if args.no_model else args.runs:
            for agent in exp.run_agents(run):
                folder = model_path(work, exp, agent)
                if folder.exists():
                    continue
                import debatelab.models as models

                if args.gguf:  # the bundled GGUF where its package is missing: the same conversion of that file
                    gguf = Path(args.gguf).resolve()
                    models.smollm2_gguf_path = lambda: gguf
                name, kwargs = model_build(exp, exp.agents[agent]["model"], folder)
                start = time.perf_counter()
                folder.parent.mkdir(parents=True, exist_ok=True)
                models.prepare_model(name, out_dir=folder, **kwargs)
                log(f"prepared {folder} ({time.perf_counter() - start:.1f} s)")


# -- step 3: one (run, seed) --------------------------------------------------------------------
def loaded_distributions() -> dict[str, str]:
    """{distribution: version} of the modules this process imported (what a device must have)."""
    import importlib.metadata as md

    names = md.packages_distributions()
    out = {}
    for module in list(sys.modules):
        for dist in names.get(module.split(".")[0], []):
            try:
                out[dist] = md.version(dist)
            except md.PackageNotFoundError:
                pass
    return dict(sorted(out.items()))


def worker(args) -> int:
    """Train one (run, seed) as the rules would (module docstring, step 3); 0 when finished."""
    work, seed, run = Path(args.work), args.seed, args.run
    out = run_dir(work, seed, run)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    started, status = time.time(), "failed"

    def stop(signum, frame):  # noqa: ARG001 - a clean exit: `finally` blocks run, the log says so
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    record = {"seed": seed, "run": run, "pid": os.getpid(), "started": started}
    try:
        from debatelab.config import Experiment
        from debatelab.llm.agent import AgentSpec
        from debatelab.runlog import job_log
        from debatelab.training import TrainSettings
        from debatelab.training.core.launch import launch_or_train, write_job_spec
        from debatelab.training.core.replies import recording_replies
        from debatelab.training.multi_agent_stage import udpo_coefficients_job, udpo_warmup_job
        from debatelab.training.settings import udpo_job_settings

        exp = Experiment(json.loads((inputs_dir(work, seed) / "config.json").read_text()))
        job = run_inputs(work, seed, exp, run)
        agents = {name: AgentSpec.from_config(name, spec) for name, spec in job["agents"].items()}
        spec = exp.train_settings(run)
        method = exp.training_runs[run]["method"]
        coefficients = None
        if method == "udpo":
            warmup, coefficients = out / "warmup.parquet", out / "coefficients.json"
            if not warmup.exists():
                t = time.time()
                with job_log(out / "logs" / "warmup.log"):
                    udpo_warmup_job(
                        dataset_path=job["dataset"],
                        bases=job["bases"],
                        participants=job["participants"],
                        agents=agents,
                        settings=TrainSettings.from_config(udpo_job_settings(spec, "warmup")),
                        out_path=str(warmup),
                        limit=job["limit"],
                        report_to=exp.report_to(run),
                        experiment=exp.name,
                        run=run,
                    )
                record["warmup_seconds"] = time.time() - t
            if not coefficients.exists():
                with job_log(out / "logs" / "coefficients.log"):
                    udpo_coefficients_job(
                        warmup_path=str(warmup),
                        out_path=str(coefficients),
                        settings=TrainSettings.from_config(udpo_job_settings(spec, "coefficients")),
                    )
        if not (out / "metrics.parquet").exists():
            settings = TrainSettings.from_config(spec)
            log_path = str(out / "logs" / "train.log")
            train_job = dict(
                dataset_path=job["dataset"],
                heldout_path=job["heldout"],
                bases=job["bases"],
                participants=job["participants"],
                agents=agents,
                coefficients_path=str(coefficients) if coefficients else None,
                out_dirs={name: str(out / "agents" / name) for name in job["bases"]},
                metrics_path=str(out / "metrics.parquet"),
                curves_path=str(out / "curves.png"),
                settings_path=str(out / "settings.json"),
                checkpoint_dir=str(out / "checkpoint"),
                run=run,
                settings=settings,
                limit=job["limit"],
                report_to=exp.report_to(run),
                experiment=exp.name,
            )
            # the job's arguments as the library writes them for its processes: what ran, even where
            # settings.json (written after curves.png) is missing
            write_job_spec(out / "job.json", **train_job)
            with job_log(log_path), recording_replies(out / "replies.parquet", args.replies_per_agent):
                launch_or_train(
                    processes=settings.processes(1),
                    accelerate_config=None,
                    log_path=log_path,
                    **train_job,
                )
        status = "finished"
        return 0
    except ImportError as error:  # the curves come last, after the agents and metrics.parquet
        if "matplotlib" not in str(error) or not (out / "metrics.parquet").exists():
            raise
        status = "finished (no curves.png: matplotlib is not installed)"
        return 0
    except SystemExit as stopped:
        status = f"stopped ({stopped.code})"
        return int(stopped.code or 1)
    finally:
        record.update(status=status, seconds=time.time() - started, **_gpu_record())
        record["distributions"] = loaded_distributions()
        with open(out / "sessions.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")


def _gpu_record() -> dict:
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return {"device": "cpu", "gpu": None, "peak_gpu_bytes": None}
    return {
        "device": "cuda",
        "gpu": torch.cuda.get_device_name(),
        "peak_gpu_bytes": int(torch.cuda.max_memory_allocated()),
        "peak_gpu_reserved_bytes": int(torch.cuda.max_memory_reserved()),
    }


# -- step 4: progress ---------------------------------------------------------------------------
def read_metrics(folder: Path):
    """(the run's metrics rows so far as a DataFrame or None, finished): metrics.parquet when the run
    is done, else its newest checkpoint's (every step's row, held-out columns included)."""
    import pandas as pd

    final = folder / "metrics.parquet"
    if final.exists():
        return pd.read_parquet(final), True
    checkpoints = folder / "checkpoint"
    for attempt in range(3):  # a checkpoint may be pruned between naming and reading it
        try:
            latest = (checkpoints / "latest").read_text().strip()
            return pd.read_parquet(checkpoints / latest / "metrics.parquet"), False
        except (OSError, ValueError):
            time.sleep(0.2 * attempt)
        except Exception:  # pyarrow's own error on a file being replaced
            time.sleep(0.2 * attempt)
    return None, False


def _num(row, key, fmt="{:.3f}") -> str:
    value = row.get(key)
    try:
        return "-" if value is None or value != value else fmt.format(float(value))
    except (TypeError, ValueError):
        return "-"


def progress_line(seed: int, run: str, row: dict, steps: int, elapsed: float) -> str:
    held = [k for k in row if k.startswith("heldout_accuracy_") and row[k] == row[k]]
    held_text = " ".join(f"{k[len('heldout_accuracy_') :]}={float(row[k]):.2f}" for k in held) or "-"
    return (
        f"{elapsed:7.0f}s  seed {seed}  {run:<6} step {int(row.get('step', 0)):>3}/{steps:<3} "
        f"reward {_num(row, 'reward_mean')}  acc {_num(row, 'accuracy')}  "
        f"roll {_num(row, 'rollout_seconds', '{:.1f}')}s upd {_num(row, 'update_seconds', '{:.1f}')}s  "
        f"heldout {held_text}"
    )


def _nvidia_smi_apps() -> dict[int, int]:
    """{pid: used GPU MiB} of the compute processes nvidia-smi sees ({} without it)."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        text = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    out = {}
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = int(parts[1])
    return out


# -- the window ---------------------------------------------------------------------------------
#: peak GPU memory of one worker (GiB, nvidia-smi, the process's whole footprint) at learning_gpu's
#: sizes, measured on one H100 on 2026-11-27 (docs/experiments.md): 15 workers at once need ~130 GiB,
#: and on an 80 GiB card the ones started last ran out of memory
MEASURED_PEAK_GIB = {"udpo": 13.0, "mappo": 12.0, "rmaac": 12.0, "umad": 4.1, "ippo": 4.1}


def gpu_memory_gib() -> float:
    """The GPU's memory (0 where there is none: no memory budget then)."""
    try:
        import torch

        return torch.cuda.get_device_properties(0).total_memory / 2**30 if torch.cuda.is_available() else 0.0
    except Exception:  # no driver: a CPU test
        return 0.0


class Job:
    def __init__(self, seed: int, run: str, folder: Path, steps: int, argv: list[str], need_gib: float = 0.0):
        self.seed, self.run, self.folder, self.steps, self.argv = seed, run, folder, steps, argv
        self.need_gib = need_gib  # GPU memory it is expected to take (MEASURED_PEAK_GIB)
        self.proc: subprocess.Popen | None = None
        self.seen_step = 0
        self.returncode: int | None = None
        self.stopped = False
        self.peak_smi_mib = 0

    @property
    def key(self) -> str:
        return f"{self.seed}/{self.run}"


def run_window(
    jobs: list[Job],
    deadline: float,
    grace_s: float,
    log,
    poll_s: float = 2.0,
    started=None,
    max_procs: int = 0,
    memory_gib: float = 0.0,
) -> None:
    """Start the jobs' processes (all at once, or at most `max_procs` at a time, or while their
    expected GPU memory fits in `memory_gib`; the next as one ends);
    report new steps; at `deadline` (time.monotonic) SIGTERM those running, start no more, and SIGKILL
    after `grace_s`. Returns when every started one has ended."""
    started = time.monotonic() if started is None else started
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    pending = list(jobs)

    def start(job: Job) -> None:
        job.folder.mkdir(parents=True, exist_ok=True)
        (job.folder / "logs").mkdir(exist_ok=True)
        out = open(job.folder / "logs" / "worker.out", "ab")
        job.proc = subprocess.Popen(job.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        out.close()
        log(f"started {job.key} (pid {job.proc.pid})")

    term_at, last_smi = None, 0.0
    while True:
        now = time.monotonic()
        while pending and term_at is None and now < deadline:
            alive = [j for j in jobs if j.proc is not None and j.returncode is None]
            if max_procs and len(alive) >= max_procs:
                break
            if memory_gib and alive and sum(j.need_gib for j in alive) + pending[0].need_gib > memory_gib:
                break  # waits for memory to free (the first always starts)
            start(pending.pop(0))
        for job in jobs:
            if job.proc is None:
                continue
            _report(job, log, now - started)
            if job.returncode is None:
                job.returncode = job.proc.poll()
                if job.returncode is not None:
                    _report(job, log, now - started)
                    log(f"ended {job.key}: exit {job.returncode}{' (stopped)' if job.stopped else ''}")
        running = [job for job in jobs if job.proc is not None and job.returncode is None]
        if not running and (not pending or term_at is not None or now >= deadline):
            for job in pending:
                log(f"not started {job.key}: no time left")
            return
        if now - last_smi > 10:
            last_smi = now
            usage = _nvidia_smi_apps()
            for job in running:
                job.peak_smi_mib = max(job.peak_smi_mib, usage.get(job.proc.pid, 0))
        if term_at is None and now >= deadline:
            term_at = now
            for job in running:
                job.stopped = True
                _signal(job, signal.SIGTERM)
            if running:
                log(f"budget: SIGTERM to {', '.join(j.key for j in running)}")
        elif term_at is not None and now >= term_at + grace_s:
            for job in running:
                _signal(job, signal.SIGKILL)
            log(f"budget: SIGKILL to {', '.join(j.key for j in running)}")
            term_at = float("inf")
        time.sleep(poll_s)


def _signal(job: Job, signum) -> None:
    try:
        os.killpg(job.proc.pid, signum)  # the worker and anything it started
    except ProcessLookupError:
        pass


def _report(job: Job, log, elapsed: float) -> None:
    frame, _ = read_metrics(job.folder)
    if frame is None or not len(frame):
        return
    for row in frame.to_dict("records"):
        if int(row.get("step", 0)) > job.seen_step:
            job.seen_step = int(row["step"])
            log(progress_line(job.seed, job.run, row, job.steps, elapsed))


# -- step 5: what comes back --------------------------------------------------------------------
def run_summary(folder: Path, steps: int) -> dict:
    import numpy as np

    frame, finished = read_metrics(folder)
    sessions = []
    if (folder / "sessions.jsonl").exists():
        sessions = [json.loads(line) for line in (folder / "sessions.jsonl").read_text().splitlines() if line.strip()]
    out = {"steps_done": 0, "steps": steps, "finished": finished, "phase": _phase(folder)}
    if frame is not None and len(frame):
        mean = lambda c: float(frame[c].mean()) if c in frame else None  # noqa: E731
        out.update(
            steps_done=int(frame["step"].max()),
            mean_step_seconds=(mean("rollout_seconds") or 0.0) + (mean("update_seconds") or 0.0),
            mean_rollout_seconds=mean("rollout_seconds"),
            mean_update_seconds=mean("update_seconds"),
        )
        for column in ("reward_mean", "accuracy"):
            if column in frame:
                values = frame[column].to_numpy(dtype=float)
                k = min(5, len(values))  # the first and last (up to) 5 steps
                out[f"{column}_first"] = float(np.nanmean(values[:k]))
                out[f"{column}_last"] = float(np.nanmean(values[-k:]))
        held = {}
        for column in frame.columns:
            if column.startswith("heldout_base_accuracy") or column.startswith("heldout_accuracy"):
                values = frame[["step", column]].dropna()
                if len(values):
                    held[column] = {"step": int(values["step"].iloc[-1]), "value": float(values[column].iloc[-1])}
        out["heldout"] = held
    if sessions:
        gpus = [s.get("gpu") for s in sessions if s.get("gpu")]
        peaks = [s["peak_gpu_bytes"] for s in sessions if s.get("peak_gpu_bytes")]
        out.update(
            gpu=gpus[-1] if gpus else None,
            peak_gpu_gib=max(peaks) / 2**30 if peaks else None,
            peak_nvidia_smi_mib=max((s.get("peak_nvidia_smi_mib") or 0) for s in sessions) or None,
            sessions=[
                {k: s.get(k) for k in ("status", "seconds", "gpu", "peak_gpu_bytes", "warmup_seconds")}
                for s in sessions
            ],
        )
    return out


def _phase(folder: Path) -> str:
    if (folder / "metrics.parquet").exists():
        return "finished"
    if (folder / "checkpoint" / "latest").exists():
        return "training"
    return "not started" if not (folder / "logs").exists() else "starting"


def pack(work: Path, out: Path, summary: dict, keys: list[tuple[int, str]]) -> list[Path]:
    """summary.json and runs.tar.gz (each run's small files, no weights) into `out`; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    tar_path = out / "runs.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        for seed in dict.fromkeys(seed for seed, _ in keys):
            if (inputs_dir(work, seed) / "config.json").exists():
                tar.add(inputs_dir(work, seed) / "config.json", f"{seed}/config.json")
        for seed, run in keys:
            folder = run_dir(work, seed, run)
            base = f"{seed}/{run}"
            for name in (
                "metrics.parquet",
                "replies.parquet",
                "settings.json",
                "job.json",
                "warmup.parquet",
                "coefficients.json",
                "curves.png",
                "sessions.jsonl",
            ):
                if (folder / name).exists():
                    tar.add(folder / name, f"{base}/{name}")
            checkpoints = folder / "checkpoint"
            if not (folder / "metrics.parquet").exists() and (checkpoints / "latest").exists():
                latest = checkpoints / (checkpoints / "latest").read_text().strip()
                for name, as_name in (("metrics.parquet", "metrics_partial.parquet"), ("state.json", "state.json")):
                    if (latest / name).exists():
                        tar.add(latest / name, f"{base}/checkpoint_{as_name}")
            for log_file in sorted((folder / "logs").glob("*")) if (folder / "logs").exists() else []:
                _add_tail(tar, log_file, f"{base}/logs/{log_file.name}")
    written = [p for p in out.iterdir() if p.is_file()]
    for path in written:
        if path.stat().st_size >= MAX_OUT_BYTES:
            raise RuntimeError(f"{path}: {path.stat().st_size} bytes, over the device tool's 16 MB")
    return [out / "summary.json", tar_path]


def _add_tail(tar: tarfile.TarFile, path: Path, name: str) -> None:
    import io

    data = path.read_bytes()
    if len(data) > LOG_TAIL_BYTES:
        data = b"[... cut: the last %d bytes follow]\n" % LOG_TAIL_BYTES + data[-LOG_TAIL_BYTES:]
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), int(path.stat().st_mtime)
    tar.addfile(info, io.BytesIO(data))


def nvidia_smi_text() -> str:
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi: not found\n"
    try:
        return subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError) as error:
        return f"nvidia-smi: {error}\n"


# -- the command --------------------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--configfile", default=DEFAULT_CONFIG)
    p.add_argument("--runs", nargs="+", default=DEFAULT_RUNS)
    p.add_argument("--seeds", nargs="+", type=int, default=DEFAULT_SEEDS)
    p.add_argument(
        "--gpu-memory-gib",
        type=float,
        default=None,
        help="start workers while their measured peaks (MEASURED_PEAK_GIB) fit in this much GPU memory "
        "(default: 92 %% of the GPU's; 0: no limit)",
    )
    p.add_argument(
        "--data-seed",
        type=int,
        default=None,
        help="keep the experiment seed (its data: 0 is learning_cpu's questions) and vary only each run's "
        "seed (training.runs.*.seed = S); default: the seed sets both, as --config seed=S does",
    )
    p.add_argument("--budget-s", type=float, default=480.0, help="wall-clock budget of the whole command")
    p.add_argument("--grace-s", type=float, default=20.0, help="SIGTERM to SIGKILL")
    p.add_argument("--work", default=".gpu_work", help="checkpoints and results (kept between calls)")
    p.add_argument("--out", default=None, help="summary.json, runs.tar.gz, progress.txt, nvidia-smi.txt")
    p.add_argument("--gguf", default=None, help="the bundled model's GGUF file, where its package is missing")
    p.add_argument("--steps", type=int)
    p.add_argument("--questions-per-step", type=int)
    p.add_argument("--threads", type=int, help="UMAD/IPPO threads per question")
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--heldout-questions", type=int)
    p.add_argument("--heldout-every", type=int)
    p.add_argument("--warmup-fraction", type=float, help="UDPO's warm-up share of the training questions")
    p.add_argument("--checkpoint-every", type=int)
    p.add_argument("--set", action="append", metavar="A.B.C=YAML", help="any config key ('*': every key)")
    p.add_argument("--replies-per-agent", type=int, default=8, help="replies kept per agent and step")
    p.add_argument("--torch-threads", type=int, help="OMP/MKL threads per worker (CPU runs)")
    p.add_argument("--max-procs", type=int, default=0, help="workers at a time (0: every run and seed at once)")
    p.add_argument("--prepare-only", action="store_true", help="write configs and inputs, train nothing")
    p.add_argument("--no-model", action="store_true", help="with --prepare-only: configs and datasets only")
    p.add_argument("--pack-only", action="store_true", help="summarise and pack --work, train nothing")
    # a worker (started by the window)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    p.add_argument("--run", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.worker:
        return worker(args)
    started = time.monotonic()
    work = Path(args.work).resolve()
    out = Path(args.out).resolve() if args.out else work / "out"
    lines: list[str] = []

    def log(message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {message}"
        lines.append(line)
        print(line, flush=True)

    configs = {}
    for seed in args.seeds:
        configs[seed] = seed_config(args, seed)
        path = inputs_dir(work, seed) / "config.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(configs[seed], indent=1, sort_keys=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    from debatelab.config import Experiment

    exps = {seed: Experiment(json.loads(json.dumps(c))) for seed, c in configs.items()}
    steps = {(s, r): int(exps[s].train_settings(r)["steps"]) for s in args.seeds for r in args.runs}
    keys = [(s, r) for s in args.seeds for r in args.runs]
    jobs: list[Job] = []
    if not args.pack_only:
        prepare(args, work, configs, log)
        if args.prepare_only:
            return 0
        for seed, run in keys:
            if (run_dir(work, seed, run) / "metrics.parquet").exists():
                log(f"{seed}/{run}: finished before")
                continue
            argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--work", str(work)]
            argv += ["--seed", str(seed), "--run", run, "--replies-per-agent", str(args.replies_per_agent)]
            need = MEASURED_PEAK_GIB.get(exps[seed].training_runs[run]["method"], 0.0)
            jobs.append(Job(seed, run, run_dir(work, seed, run), steps[(seed, run)], argv, need))
        if args.torch_threads:
            for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ[name] = str(args.torch_threads)
        deadline = started + args.budget_s - args.grace_s - PACK_RESERVE_S
        at_once = min(len(jobs), args.max_procs) if args.max_procs else len(jobs)
        memory = args.gpu_memory_gib if args.gpu_memory_gib is not None else 0.92 * gpu_memory_gib()
        log(
            f"{len(jobs)} runs, at most {at_once} at once within {memory:.0f} GiB of GPU memory, "
            f"SIGTERM at {max(0.0, deadline - started):.0f} s of {args.budget_s:.0f} s"
        )
        run_window(jobs, deadline, args.grace_s, log, started=started, max_procs=args.max_procs, memory_gib=memory)
        for job in jobs:  # what nvidia-smi saw, beside torch's own peak in the session's line
            sessions = job.folder / "sessions.jsonl"
            if job.peak_smi_mib and sessions.exists():
                rows = sessions.read_text().splitlines()
                last = json.loads(rows[-1])
                last["peak_nvidia_smi_mib"] = job.peak_smi_mib
                sessions.write_text("\n".join(rows[:-1] + [json.dumps(last)]) + "\n")
    by_job = {j.key: j for j in jobs}
    summary = {
        "configfile": args.configfile,
        "seeds": args.seeds,
        "runs": args.runs,
        "budget_s": args.budget_s,
        "wall_s": time.monotonic() - started,
        "gpu": _gpu_name(),
        "results": {},
    }
    for seed, run in keys:
        entry = run_summary(run_dir(work, seed, run), steps[(seed, run)])
        job = by_job.get(f"{seed}/{run}")
        if job is not None:
            entry.update(exit=job.returncode, stopped=job.stopped)
        summary["results"][f"{seed}/{run}"] = entry
    lines.append(table(summary))
    print(lines[-1], flush=True)
    pack(work, out, summary, keys)
    (out / "progress.txt").write_text("\n".join(lines) + "\n")
    (out / "nvidia-smi.txt").write_text(nvidia_smi_text())
    return 0


def _gpu_name() -> str | None:
    try:
        import torch
    except ImportError:
        return None
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def table(summary: dict) -> str:
    rows = ["run/seed     done   step s (roll/upd)  reward first5->last5  last held-out accuracies"]
    for key, r in summary["results"].items():
        reward = f"{r['reward_mean_first']:.3f}->{r['reward_mean_last']:.3f}" if "reward_mean_first" in r else "-"
        split = (
            f"{r['mean_step_seconds']:.1f} ({r['mean_rollout_seconds']:.1f}/{r['mean_update_seconds']:.1f})"
            if r.get("mean_step_seconds") is not None and r.get("mean_rollout_seconds") is not None
            else "-"
        )
        held = " ".join(
            f"{k.replace('heldout_', '').replace('accuracy_', '')}@{v['step']}={v['value']:.2f}"
            for k, v in (r.get("heldout") or {}).items()
            if k.startswith("heldout_accuracy_")
        )
        rows.append(f"{key:<12} {r['steps_done']:>3}/{r['steps']:<3} {split:<19} {reward:<21} {held}")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
