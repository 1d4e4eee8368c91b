"""The common question schema shared by every benchmark, and its validation.

A dataset file (``data/{dataset}/{split}/{source}.parquet``) holds one row per question:

``id`` (str)
    Unique within the file and stable across reruns: built from the benchmark,
    the source split and the row's position in that split (or the source's own
    id where it has a reliable one). Derived splits keep the ids of the split
    they were cut from, so a question has one id wherever it appears.
``question`` (str)
    The text shown to the model: the question itself only. Reading-task context
    (a BoolQ passage) is NOT folded in; it lives in ``meta["context"]`` so that
    each paper's prompt can place it where it wants. For stance and hate-speech
    tasks the question is the text to classify (the stance topic is in
    ``meta["topic"]``). For math word problems whose source splits body and
    question (ASDiv) both are joined, since that is the problem.
``choices`` (list[str] or null)
    Multiple choice only: the option texts in display order, without letters.
    Null for every other task type.
``answer`` (str)
    The gold answer, by task type:

    - ``math``: the final answer as a string ("42", "\\frac{1}{2}", "9281.25");
    - ``multiple_choice``: the gold letter, "A" for ``choices[0]`` and so on;
    - ``yes_no``: "yes" or "no";
    - ``label``: one of the labels listed in ``meta["labels"]``.
``task_type`` (str)
    One of :data:`TASK_TYPES`.
``meta`` (str)
    A JSON object (serialised, so the Parquet schema never depends on a
    benchmark). Always has ``source`` (where the row came from) and
    ``source_split``; label tasks have ``labels`` (the label set, in a fixed
    order); reading tasks have ``context``; others carry what the source offers
    (``subject``, ``level``, ``solution``, ``original_id``, ...).
"""
from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from debatelab.grading.answers import TASK_TYPES
from debatelab.io import DataFileError, read_parquet_checked

SCHEMA_COLUMNS: tuple[str, ...] = ("id", "question", "choices", "answer", "task_type", "meta")
YES_NO: tuple[str, ...] = ("yes", "no")
LETTERS: str = string.ascii_uppercase


def letter(index: int) -> str:
    """The option letter for a 0-based choice index (0 -> "A")."""
    if not 0 <= index < len(LETTERS):
        raise ValueError(f"choice index {index} has no letter (at most {len(LETTERS)} options)")
    return LETTERS[index]


def parse_meta(value: str | Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``meta`` column as a dict (accepts the JSON string, an already-parsed dict, or nothing)."""
    if isinstance(value, Mapping):
        return dict(value)
    if not value:
        return {}
    return json.loads(value)


def answer_set_size(task_type: str, choices: Sequence[str] | None, labels: Sequence[str] | None) -> int | None:
    """How many answers a question allows: its options (multiple choice), 2 (yes/no), its label
    set (label tasks); None when open-ended (math) or the set is not given."""
    if task_type == "multiple_choice":
        return len(choices) if choices is not None and len(choices) else None
    if task_type == "yes_no":
        return len(YES_NO)
    if task_type == "label":
        return len(labels) if labels else None
    return None


def frame_from_rows(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Assemble schema rows (``meta`` as a dict or JSON string) into a frame with the schema's columns."""
    records = []
    for row in rows:
        meta = row.get("meta", {})
        if not isinstance(meta, str):
            meta = json.dumps(meta, sort_keys=True, ensure_ascii=False, default=str)
        choices = row.get("choices")
        records.append(
            {
                "id": row["id"],
                "question": row["question"],
                "choices": None if choices is None else [str(c) for c in choices],
                "answer": row["answer"],
                "task_type": row["task_type"],
                "meta": meta,
            }
        )
    return pd.DataFrame.from_records(records, columns=list(SCHEMA_COLUMNS))


def _as_choice_list(value: Any) -> list | None:
    # Parquet hands lists back as numpy arrays; accept both.
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, float) and np.isnan(value):
        return None
    return value  # wrong type: reported by the validator


def _show(value: Any) -> str:
    # pandas turns a missing string into None, NaN or NA depending on dtype: report them alike
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return "null"
    return repr(value)


def split_of_file(path: str | os.PathLike) -> tuple[str, str] | None:
    """(benchmark, split) of a workflow dataset file, data/<benchmark>/<split>/<source>.parquet
    (`registry.split_file`; also the older data/<benchmark>/<split>.parquet), else None."""
    parts = Path(path).parts
    if not parts or not parts[-1].endswith(".parquet"):
        return None
    if len(parts) >= 4 and parts[-4] == "data":
        return parts[-3], parts[-2]
    if len(parts) >= 3 and parts[-3] == "data":
        return parts[-2], parts[-1].removesuffix(".parquet")
    return None


def dataset_label(path: str | os.PathLike) -> str:
    """The benchmark a dataset file holds, for titles and tags (its folder's name for any other file)."""
    found = split_of_file(path)
    return found[0] if found else Path(path).parent.name


def _dataset_and_split(name: str) -> str:
    """'dataset chain_sum, split test,' for a workflow dataset file (`split_of_file`), else 'the dataset'."""
    found = split_of_file(name)
    return f"dataset {found[0]}, split {found[1]}," if found else "the dataset"


def validate_dataset_frame(df: pd.DataFrame, path_or_name: str | os.PathLike) -> None:
    """Check a frame against the schema; raise DataFileError naming the file, the field and the value."""
    name = str(path_or_name)
    missing = [c for c in SCHEMA_COLUMNS if c not in df.columns]
    if missing:
        raise DataFileError(f"{name}: missing required column(s) {missing}; has {list(df.columns)}")

    if df.empty:  # caught here, not two stages later as too few samples or an empty plot
        raise DataFileError(f"{name}: {_dataset_and_split(name)} has no rows; every stage needs at least one question")

    seen: dict[str, int] = {}
    for pos, row in enumerate(df[list(SCHEMA_COLUMNS)].itertuples(index=False, name=None)):
        rid, question, choices, answer, task_type, meta_text = row
        where = f"{name}: row {pos}"

        def fail(field: str, value: Any, why: str) -> None:
            raise DataFileError(f"{where} (id={rid!r}): field {field!r} {why}: {_show(value)}")

        if not isinstance(rid, str) or not rid:
            fail("id", rid, "must be a non-empty string")
        if rid in seen:
            fail("id", rid, f"is a duplicate (first at row {seen[rid]})")
        seen[rid] = pos
        if task_type not in TASK_TYPES:
            fail("task_type", task_type, f"must be one of {list(TASK_TYPES)}")
        if not isinstance(question, str) or not question.strip():
            fail("question", question, "must be a non-empty string")
        if not isinstance(answer, str) or not answer.strip():
            fail("answer", answer, "must be a non-empty string")
        if not isinstance(meta_text, str):
            fail("meta", meta_text, "must be a JSON object serialised as a string")
        try:
            meta = json.loads(meta_text)
        except ValueError:
            fail("meta", meta_text, "is not valid JSON")
        if not isinstance(meta, dict):
            fail("meta", meta_text, "must be a JSON object")

        choice_list = _as_choice_list(choices)
        if task_type == "multiple_choice":
            if not isinstance(choice_list, list) or len(choice_list) < 2:
                fail("choices", choices, "must list at least two options for multiple_choice")
            if any(not isinstance(c, str) or not c.strip() for c in choice_list):
                fail("choices", choices, "must hold non-empty strings")
            valid = list(LETTERS[: len(choice_list)])
            if answer not in valid:
                fail("answer", answer, f"must be a letter in {valid} for {len(choice_list)} choices")
        else:
            if choice_list is not None:
                fail("choices", choices, f"must be null for task_type {task_type!r}")
            if task_type == "yes_no" and answer not in YES_NO:
                fail("answer", answer, f"must be one of {list(YES_NO)} for yes_no")
            if task_type == "label":
                labels = meta.get("labels")
                if not isinstance(labels, list) or len(labels) < 2:
                    fail("meta.labels", labels, "must list the label set (at least two) for label tasks")
                if answer not in labels:
                    fail("answer", answer, f"must be one of meta.labels {labels}")


def read_dataset(path: str | os.PathLike) -> pd.DataFrame:
    """Read and validate a dataset file; a missing, corrupt or invalid file raises DataFileError naming it."""
    df = read_parquet_checked(path, SCHEMA_COLUMNS)
    df["choices"] = [_as_choice_list(c) for c in df["choices"]]
    validate_dataset_frame(df, path)
    return df
