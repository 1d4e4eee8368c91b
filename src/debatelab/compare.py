"""Compare two result trees file by file: did a change (a refactor, a resumed run) alter any output?

    python -m debatelab.compare results/default /elsewhere/results/default [--rtol 1e-12]

Every Parquet, CSV, JSON and PNG output under both folders is compared: tables by content (the
same columns, rows and values; floats bit for bit unless `rtol` allows a relative difference),
JSON by value, PNGs byte for byte. What is not an output of the science is left out: the
generation cache (its part files are named at random and grow on resume), Optuna journals (they
hold wall-clock times), benchmark TSVs, logs and the trackers' folders (timings), and table
columns named in `ignore_columns`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

#: Folders of a result tree that hold no comparable output (the trackers' folders: `debatelab.tracking`).
SKIPPED_DIRS = ("cache", "benchmarks", "tensorboard", "tensorboard_warmup")
COMPARED_SUFFIXES = (".parquet", ".csv", ".json", ".png")


@dataclass
class Comparison:
    identical: list[str] = field(default_factory=list)  # equal bit for bit (tables: every value)
    close: list[str] = field(default_factory=list)  # equal up to rtol in some float
    different: dict[str, str] = field(default_factory=dict)  # file -> the first difference
    only_in_first: list[str] = field(default_factory=list)
    only_in_second: list[str] = field(default_factory=list)

    @property
    def same(self) -> bool:
        return not (self.different or self.only_in_first or self.only_in_second)

    def summary(self) -> str:
        lines = [
            f"{len(self.identical)} identical, {len(self.close)} equal within rtol, "
            f"{len(self.different)} different, {len(self.only_in_first)} only in the first tree, "
            f"{len(self.only_in_second)} only in the second"
        ]
        lines += [f"  close: {name}" for name in self.close]
        lines += [f"  DIFFERENT: {name}: {why}" for name, why in self.different.items()]
        lines += [f"  only in first: {name}" for name in self.only_in_first]
        lines += [f"  only in second: {name}" for name in self.only_in_second]
        return "\n".join(lines)


def output_files(root: str | Path) -> set[str]:
    """Relative paths of the comparable outputs under `root`."""
    root = Path(root)
    out = set()
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and path.suffix in COMPARED_SUFFIXES and not set(rel.parts[:-1]) & set(SKIPPED_DIRS):
            if not rel.name.startswith("."):  # temporary files of atomic writes
                out.add(rel.as_posix())
    return out


def compare_trees(
    first: str | Path, second: str | Path, *, rtol: float = 0.0, ignore_columns: Sequence[str] = ()
) -> Comparison:
    """Compare every output file present under either root (module docstring)."""
    first, second = Path(first), Path(second)
    a, b = output_files(first), output_files(second)
    result = Comparison(only_in_first=sorted(a - b), only_in_second=sorted(b - a))
    for name in sorted(a & b):
        verdict, why = compare_files(first / name, second / name, rtol=rtol, ignore_columns=ignore_columns)
        if verdict == "identical":
            result.identical.append(name)
        elif verdict == "close":
            result.close.append(name)
        else:
            result.different[name] = why
    return result


def compare_files(a: Path, b: Path, *, rtol: float = 0.0, ignore_columns: Sequence[str] = ()) -> tuple[str, str]:
    """("identical" | "close" | "different", the first difference)."""
    if a.suffix == ".png":
        return ("identical", "") if a.read_bytes() == b.read_bytes() else ("different", "the images' bytes differ")
    if a.suffix == ".json":
        return _compare_values(json.loads(a.read_text()), json.loads(b.read_text()), rtol, "")
    read = pd.read_parquet if a.suffix == ".parquet" else pd.read_csv
    return compare_frames(read(a), read(b), rtol=rtol, ignore_columns=ignore_columns)


def compare_frames(
    a: pd.DataFrame, b: pd.DataFrame, *, rtol: float = 0.0, ignore_columns: Iterable[str] = ()
) -> tuple[str, str]:
    """Compare two tables value by value (NaN equals NaN); floats within `rtol` count as close."""
    ignore = set(ignore_columns)
    columns_a, columns_b = [c for c in a.columns if c not in ignore], [c for c in b.columns if c not in ignore]
    if columns_a != columns_b:
        return "different", f"columns {columns_a} vs {columns_b}"
    if len(a) != len(b):
        return "different", f"{len(a)} vs {len(b)} rows"
    verdict = "identical"
    for column in columns_a:
        for row, (x, y) in enumerate(zip(a[column].tolist(), b[column].tolist())):
            outcome, why = _compare_values(x, y, rtol, f"column {column!r} row {row}")
            if outcome == "different":
                return outcome, why
            if outcome == "close":
                verdict = "close"
    return verdict, ""


def _compare_values(x, y, rtol: float, where: str) -> tuple[str, str]:
    if isinstance(x, np.ndarray):
        x = x.tolist()
    if isinstance(y, np.ndarray):
        y = y.tolist()
    if isinstance(x, dict) and isinstance(y, dict):
        if set(x) != set(y):
            return "different", f"{where}: keys {sorted(x)} vs {sorted(y)}"
        results = [_compare_values(x[k], y[k], rtol, f"{where}.{k}") for k in sorted(x)]
        return _worst(results)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        if len(x) != len(y):
            return "different", f"{where}: {len(x)} vs {len(y)} items"
        return _worst([_compare_values(p, q, rtol, f"{where}[{i}]") for i, (p, q) in enumerate(zip(x, y))])
    if _is_missing(x) and _is_missing(y):
        return "identical", ""
    if isinstance(x, float) or isinstance(y, float):
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) and not isinstance(x, bool):
            if x == y:
                return "identical", ""
            if math.isclose(x, y, rel_tol=rtol, abs_tol=0.0):
                return "close", ""
        return "different", f"{where}: {x!r} vs {y!r}"
    return ("identical", "") if x == y else ("different", f"{where}: {x!r} vs {y!r}")


def _is_missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _worst(results: list[tuple[str, str]]) -> tuple[str, str]:
    for outcome in ("different", "close"):
        for result in results:
            if result[0] == outcome:
                return result
    return "identical", ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative difference allowed in floats (default: none)")
    parser.add_argument("--ignore-column", action="append", default=[], help="a table column to leave out (repeatable)")
    args = parser.parse_args(argv)
    result = compare_trees(args.first, args.second, rtol=args.rtol, ignore_columns=args.ignore_column)
    print(result.summary())
    return 0 if result.same else 1


if __name__ == "__main__":
    sys.exit(main())
