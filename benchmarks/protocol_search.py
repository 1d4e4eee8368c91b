"""Protocol search speed: 300 TPE trials per study from cached streams, and proof that no model ran.

    .venv/bin/python benchmarks/protocol_search.py [--streams results/default/streams/asdiv/smol_ab.parquet]
        [--questions 1000] [--trials 300]

Without --streams it builds synthetic streams of --questions questions (a val split of half of
them), so it runs anywhere. Early stopping is off, so every study runs all its trials. Prints the
wall time per protocol (target: ≤ 30 s per 300 trials on 2 cores), the trials per second, and the
model-call check: the backends' generate functions are replaced by ones that raise, and torch,
transformers and vllm must never have been imported.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def forbid_model_calls() -> list[str]:
    """Make every generation entry point raise; returns what was patched."""
    import debatelab.llm as llm
    import debatelab.llm.cache as cache

    def refuse(*args, **kwargs):
        raise AssertionError("a model was called during the protocol search")

    patched = []
    for module in (llm, cache):
        for name in ("generate_cached", "score_cached"):
            if hasattr(module, name):
                setattr(module, name, refuse)
                patched.append(f"{module.__name__}.{name}")
    return patched


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", help="a streams parquet written by the workflow (default: synthetic)")
    parser.add_argument("--questions", type=int, default=1000, help="synthetic questions (val = half)")
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--protocols", nargs="+", default=["wsv", "cga", "hid"])
    parser.add_argument("--estimator", default="seqprob")
    parser.add_argument("--calibrator", default="beta")
    args = parser.parse_args()

    patched = forbid_model_calls()
    from debatelab.confidence import stage
    from debatelab.confidence.search import SearchSettings
    from debatelab.confidence.streams import synthetic_streams
    from debatelab.io import write_json_atomic, write_parquet_atomic

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        streams_path = Path(args.streams) if args.streams else tmp / "streams.parquet"
        if not args.streams:
            write_parquet_atomic(synthetic_streams(args.questions), streams_path)
        streams = stage.read_streams(streams_path)
        calibration = stage.fit_calibrators(
            streams,
            seed=0,
            settings=stage.CalibrationSettings(
                runs=1, val_fraction=0.5, estimators=(args.estimator,), calibrators=(args.calibrator,)
            ),
        )
        write_json_atomic(calibration, tmp / "calibration.json")
        n_val = len(calibration["runs"][0]["val_question_ids"])
        print(
            f"streams: {streams['question_id'].nunique()} questions ({n_val} in val); "
            f"estimator {args.estimator}, calibrator {args.calibrator}; {args.trials} trials per protocol"
        )
        total = 0.0
        for protocol in args.protocols:
            start = time.perf_counter()
            out = stage.search_protocol_job(
                streams_path,
                tmp / "calibration.json",
                tmp / f"{protocol}.json",
                tmp / f"{protocol}.trials.parquet",
                tmp / f"{protocol}.png",
                tmp / f"{protocol}.journal",
                dataset="bench",
                pair="ab",
                protocol=protocol,
                settings=SearchSettings(trials=args.trials, patience=args.trials),
                show_progress=False,
            )
            elapsed = time.perf_counter() - start
            total += elapsed
            n = out["best"][0]["n_trials"]
            print(
                f"{protocol}: {n} trials in {elapsed:.1f} s ({n / elapsed:.0f} trials/s), "
                f"best objective {out['best'][0]['value']:.4f}  [target <= 30 s: {'met' if elapsed <= 30 else 'NOT met'}]"
            )
        print(f"total: {total:.1f} s")
    loaded = [m for m in ("torch", "transformers", "vllm") if m in sys.modules]
    print(
        f"model calls: 0 (generation entry points patched to raise: {', '.join(patched)}; "
        f"model libraries imported: {loaded or 'none'})"
    )
    if loaded:
        raise SystemExit("a model library was imported during the search")


if __name__ == "__main__":
    main()
