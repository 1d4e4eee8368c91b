"""The size of every claim statistic: draw data sets under a true null for each statistic family the
claim engine computes, at the sizes the shipped configs produce, and print how often the verdict
rejects (holds or fails) with its Monte Carlo (Clopper-Pearson) interval. Each must be at most 5 %
plus its Monte Carlo error; a bootstrap below `intervals.MIN_UNITS` units gives "n/a (too few)".
The families and their nulls are `debatelab.evaluation.claim_size`; docs/evaluation.md keeps the
table ("Size of every claim statistic").

    python benchmarks/claims_size.py        # sizes 4, 6, 10: 1,000 draws of the exact families, 100 of the rest (minutes)
    python benchmarks/claims_size.py --sizes 4 6 10 30 200 --bootstrap-draws 1000   # every size (hours of CPU)
    python benchmarks/claims_size.py --family "Cohen" --sizes 10 30
"""

from __future__ import annotations

import argparse
import time

from debatelab.evaluation.claim_engine import PAIRED_ACCURACY, PROPORTION
from debatelab.evaluation.claim_size import FAMILIES, SIZES, rejection_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=1000, help="data sets per size of the exact families")
    parser.add_argument(
        "--bootstrap-draws", type=int, default=100, help="data sets per size of the bootstrapped families (slow)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 10], help=f"units (the configs': {SIZES})")
    parser.add_argument("--family", default="", help="only the families whose name contains this")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("family | size | rejected under the null (95 % MC interval) | draws")
    print("--- | --- | --- | ---")
    for family in FAMILIES:
        if args.family.lower() not in family.name.lower():
            continue
        exact = family.family in (PAIRED_ACCURACY, PROPORTION)
        for size in args.sizes:
            start = time.process_time()
            result = rejection_rate(family, size, args.draws if exact else args.bootstrap_draws, args.seed)
            print(f"{result.row()}   ({time.process_time() - start:.0f} s CPU)", flush=True)


if __name__ == "__main__":
    main()
