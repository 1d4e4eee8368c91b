"""Benchmarks in one schema: the registry, offline/online sources, validation and I/O.

The schema (one row per question: id, question, choices, answer, task_type,
meta) is documented in :mod:`debatelab.data.schema`.
"""
from .registry import BENCHMARKS, Benchmark, DerivedSplit, get_benchmark, load_benchmark, write_benchmark
from .schema import (
    SCHEMA_COLUMNS,
    TASK_TYPES,
    dataset_label,
    frame_from_rows,
    parse_meta,
    read_dataset,
    validate_dataset_frame,
)

__all__ = [
    "BENCHMARKS",
    "Benchmark",
    "DerivedSplit",
    "SCHEMA_COLUMNS",
    "TASK_TYPES",
    "dataset_label",
    "frame_from_rows",
    "get_benchmark",
    "load_benchmark",
    "parse_meta",
    "read_dataset",
    "validate_dataset_frame",
    "write_benchmark",
]
