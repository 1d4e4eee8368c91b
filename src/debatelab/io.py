"""Parquet and JSON I/O: atomic writes and reads that fail with the file's name."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


class DataFileError(RuntimeError):
    """A data file is missing, unreadable, or lacks required columns."""


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back: os has no getter before 3.14)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _atomic_target(path: str | os.PathLike) -> tuple[Path, str]:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    # mkstemp makes 0600 files: an output gets the mode any file the user writes gets (0644 under
    # umask 022, group-readable or -writable under a shared group's umask)
    os.fchmod(fd, 0o666 & ~current_umask())
    os.close(fd)
    return path, tmp


def write_parquet_atomic(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write to a temporary file in the same folder, then rename: readers never see half a file."""
    path, tmp = _atomic_target(path)
    try:
        table = pa.Table.from_pandas(df, preserve_index=False)
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(text: str, path: str | os.PathLike) -> None:
    path, tmp = _atomic_target(path)
    try:
        with open(tmp, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save_figure_atomic(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Save a matplotlib figure atomically (format from the suffix, PNG without one) and close it."""
    import matplotlib.pyplot as plt

    path, tmp = _atomic_target(path)
    try:
        fig.savefig(tmp, dpi=dpi, format=path.suffix.lstrip(".") or "png", bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_json_atomic(obj, path: str | os.PathLike) -> None:
    write_text_atomic(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", path)


def read_json_checked(path: str | os.PathLike) -> dict:
    """Read a JSON file; a missing or corrupt file raises DataFileError naming it."""
    path = Path(path)
    if not path.exists():
        raise DataFileError(f"{path}: file not found")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}: not valid JSON ({exc})") from exc


def read_parquet_checked(
    path: str | os.PathLike, required_columns: Iterable[str] = (), only_required: bool = False
) -> pd.DataFrame:
    """Read a Parquet file; a missing, corrupt or incomplete file raises DataFileError naming it.
    `only_required` reads just the required columns (a debate's turns carry every response)."""
    path = Path(path)
    required_columns = list(required_columns)
    if not path.exists():
        raise DataFileError(f"{path}: file not found")
    try:
        names = pq.read_schema(path).names
        missing = [c for c in required_columns if c not in names]
        if missing:
            raise DataFileError(f"{path}: missing required column(s) {missing}; has {names}")
        return pd.read_parquet(path, columns=required_columns if only_required else None)
    except DataFileError:
        raise
    except Exception as exc:  # pyarrow raises several types for corrupt files
        # the message says it all; pyarrow's own traceback would only hide the file's name
        raise DataFileError(
            f"{path}: not a readable Parquet file ({type(exc).__name__}: {exc}); it may have been "
            "cut short (a full disk, a killed copy): delete it and rerun the rule that writes it"
        ) from None


def link_tree(source: str | os.PathLike, target: str | os.PathLike, log_path: str | os.PathLike | None = None) -> None:
    """`target` as a copy of the folder `source` made of hard links (no bytes copied; a plain copy
    where links can't be made), built beside it and renamed into place; `log_path` gets a line saying
    how many files were linked and copied."""
    import shutil

    counts = {"linked": 0, "copied": 0}

    def link(src, dst):
        try:
            os.link(src, dst)
            counts["linked"] += 1
        except OSError:
            shutil.copy2(src, dst)
            counts["copied"] += 1

    source, target = Path(source), Path(target)
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such folder")
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp, copy_function=link)
    os.replace(tmp, target)
    if log_path is not None:
        write_text_atomic(
            f"{source} -> {target}: {counts['linked']} files hard-linked, {counts['copied']} copied\n", log_path
        )
