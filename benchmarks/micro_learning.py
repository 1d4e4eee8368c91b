"""Each trainer on the micro model: seconds a step, and whether it beats its base on held-out
questions (`testbed.learning.learning_check`: trained in process exactly as the run's rule trains it,
then the exact paired test against the shipped base).

  python benchmarks/micro_learning.py [--config config/experiments/learning_micro.yaml]
        [--runs dapo_s0 umad_s0 ...] [--steps N] [--questions 300] [--sabotage flipped_advantages|no_peers] [--curve]
        [--work /tmp/micro_learning] [--model FOLDER]

Prints one line a run (held-out accuracy of base and trained, the difference with its exact 95 %
interval and McNemar p, seconds in all and a step), how the base's and the trained model's replies
open and read the question (careful or hasty, misread or not: what was learnt), and a JSON line
with the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CONFIG = ROOT / "config" / "experiments" / "learning_micro.yaml"


def main() -> None:
    from debatelab.config import load_experiment
    from debatelab.testbed.learning import SABOTAGE, learning_check

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(CONFIG))
    parser.add_argument("--runs", nargs="*", help="runs of the config (default: every run)")
    parser.add_argument("--steps", type=int, help="override each run's steps")
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--sabotage", choices=SABOTAGE)
    parser.add_argument("--curve", action="store_true", help="keep the runs' held-out curves (slower)")
    parser.add_argument("--work", help="working folder (default: a temporary one)")
    parser.add_argument("--model", help="the base's folder (default: the shipped micro model)")
    args = parser.parse_args()

    experiment = load_experiment(args.config)
    runs = args.runs or list(experiment.training_runs)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        for run in runs:
            check = learning_check(
                experiment,
                run,
                work / run,
                steps=args.steps,
                questions=args.questions,
                sabotage=args.sabotage,
                curve=args.curve,
                model_dir=args.model,
            )
            e = check.estimate
            print(check.describe(), f"{check.train_seconds / check.steps:.1f} s a step", flush=True)
            for policy, kinds in check.kinds().items():  # what was learnt: openings, misreads
                print(f"  {policy}: {kinds}", flush=True)
            print(
                json.dumps(
                    {
                        "run": run,
                        "method": check.method,
                        "steps": check.steps,
                        "sabotage": args.sabotage,
                        "n": len(check.base),
                        "base_right": sum(check.base),
                        "trained_right": sum(check.trained),
                        "difference": round(e.value, 2),
                        "low": round(e.low, 2),
                        "high": round(e.high, 2),
                        "p": e.p,
                        "seconds": round(check.seconds, 1),
                        "step_seconds": round(check.train_seconds / check.steps, 2),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
