"""Regrade a run's math replies with another revision's grader and print every accuracy that moves.

A grading change moves every table, claim and reward. This reads a results directory's zero-shot
answers (`zero_shot/<dataset>/<agent>.parquet`) and debate turns (`debate/<dataset>/<protocol>/
turns.parquet`), regrades each math reply (`task_type == "math"`) with `grading/answers.py` as it was at
a git revision, and prints, per file and agent and round, the accuracy as the run graded it (the
current code, if the run is fresh) and as that revision grades the same replies, with n and the number
of replies whose verdict differs. Non-math replies are left out: only math grading is compared.

    python benchmarks/regrade.py results/learning_cpu --against 8aebcdc
    python benchmarks/regrade.py results/default --against 8aebcdc --all   # also rows that don't move
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

REPOSITORY = Path(__file__).resolve().parents[1]
GRADER = "src/debatelab/grading/answers.py"


def grader_at(revision: str):
    """`grading/answers.py` at `revision`, imported as a module of its own (it needs only the stdlib
    and math-verify)."""
    source = subprocess.run(
        ["git", "-C", str(REPOSITORY), "show", f"{revision}:{GRADER}"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "answers_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("answers_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def math_replies(results: Path) -> pd.DataFrame:
    """Every math reply of the run with its gold: file, agent, round, response, gold, correct."""
    frames, golds = [], {}
    for path in sorted(results.glob("zero_shot/*/*.parquet")):
        table = pd.read_parquet(
            path, columns=["question_id", "agent", "round", "task_type", "response", "gold", "correct"]
        )
        golds.update(dict(zip(table["question_id"], zip(table["gold"], table["task_type"], strict=True), strict=True)))
        frames.append(table.assign(file=str(path.relative_to(results))))
    for path in sorted(results.glob("debate/*/*/turns.parquet")):
        table = pd.read_parquet(path, columns=["question_id", "agent", "round", "response", "correct"])
        known = table["question_id"].map(golds)
        if known.isna().any():  # a question no zero-shot file saw: its gold is not in this run
            table = table[known.notna()]
            known = known[known.notna()]
        frames.append(
            table.assign(
                gold=[gold for gold, _ in known],
                task_type=[task for _, task in known],
                file=str(path.relative_to(results)),
            )
        )
    if not frames:
        raise SystemExit(f"{results}: no zero_shot/*/*.parquet or debate/*/*/turns.parquet")
    replies = pd.concat(frames, ignore_index=True)
    return replies[replies["task_type"] == "math"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="a results directory, e.g. results/learning_cpu")
    parser.add_argument("--against", required=True, help="the git revision whose grader regrades the replies")
    parser.add_argument("--all", action="store_true", help="print every group, not only those that move")
    args = parser.parse_args()
    replies = math_replies(args.results)
    old = grader_at(args.against)
    replies["correct_then"] = [
        bool(old.is_correct(old.extract_answer(text, "math"), str(gold), "math"))
        for text, gold in zip(replies["response"], replies["gold"], strict=True)
    ]
    replies["moved"] = replies["correct"] != replies["correct_then"]
    groups = replies.groupby(["file", "agent", "round"], sort=True).agg(
        n=("correct", "size"), now=("correct", "sum"), then=("correct_then", "sum"), moved=("moved", "sum")
    )
    print(f"{len(replies)} math replies in {args.results}; graded as stored (now) and by {args.against} (then)")
    shown = groups if args.all else groups[groups["now"] != groups["then"]]
    for (file, agent, round_), row in shown.iterrows():
        print(
            f"{file} {agent} round {round_}: n {row.n}, now {row.now} ({row.now / row.n:.1%}), "
            f"then {row.then} ({row.then / row.n:.1%}), {row.moved} verdicts differ"
        )
    print(f"groups: {len(groups)}, whose accuracy moves: {int((groups['now'] != groups['then']).sum())}")
    print(f"replies whose verdict differs: {int(replies['moved'].sum())} of {len(replies)}")
    for _, row in replies[replies["moved"]].head(10).iterrows():
        tail = row.response[-160:].replace("\n", " ")
        print(f"  gold {row.gold!r}: now {row.correct}, then {row.correct_then}: ...{tail!r}")


if __name__ == "__main__":
    main()
