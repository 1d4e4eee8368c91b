"""Online sources: Hugging Face datasets (and two CSV releases), with one record normaliser each.

A normaliser maps one raw record, exactly as ``datasets.load_dataset`` (or the
CSV reader) yields it, to a schema row, or to None to leave the record out
(e.g. HLE questions with an image). Normalisers never download anything, so
the tests check each one on committed copies of real records.
"""
from __future__ import annotations

import hashlib
import logging
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .offline import SourceUnavailable
from .schema import letter
from ..grading.answers import last_boxed
from .text import gsm8k_final_answer, number_text, split_lettered_options

log = logging.getLogger(__name__)

Rows = list[dict]


@dataclass(frozen=True)
class RecordContext:
    """Where a raw record sits: the id prefix, our split name, its position, the config (if it is part of ids)."""

    prefix: str
    split: str
    index: int
    config: str | None = None

    def default_id(self) -> str:
        parts = [self.prefix, *([self.config] if self.config else []), self.split, f"{self.index:05d}"]
        return "-".join(parts)


Normaliser = Callable[[Mapping[str, Any], RecordContext], "dict | None"]
Fetcher = Callable[[str, "str | None"], Iterable[Mapping[str, Any]]]


@dataclass(frozen=True)
class OnlineSource:
    """A remote source: ``fetch(source_split, config)`` yields raw records, ``normalise`` maps each one."""

    origin: str
    prefix: str
    split_map: dict[str, str]
    normalise: Normaliser
    fetch: Fetcher
    configs: tuple[str | None, ...] = (None,)
    dedupe: bool = False  # drop records whose id was already seen (DAPO repeats each prompt)
    kind: str = field(default="online", init=False)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.split_map)

    def rows_from_records(
        self, records: Iterable[Mapping[str, Any]], split: str, config: str | None = None
    ) -> Rows:
        """Normalise raw records of our ``split`` (and source ``config``) into schema rows."""
        rows, seen, skipped = [], set(), 0
        # ids name the config only when it tells rows apart (MMLU subjects), not for "main"/"default"
        id_config = config if len(self.configs) > 1 else None
        for index, record in enumerate(records):
            ctx = RecordContext(self.prefix, split, index, id_config)
            row = self.normalise(record, ctx)
            if row is None:
                skipped += 1
                continue
            row.setdefault("id", ctx.default_id())
            if self.dedupe:
                if row["id"] in seen:
                    continue
                seen.add(row["id"])
            meta = {"source": self.origin, "source_split": self.split_map.get(split, split), "index": index}
            if config:
                meta["config"] = config
            row["meta"] = {**meta, **row.get("meta", {})}
            rows.append(row)
        if skipped:
            log.info("%s %s%s: left out %d record(s)", self.origin, split, f"/{config}" if config else "", skipped)
        return rows

    def load(self, split: str, seed: int, limit: int | None) -> Rows:
        rows: Rows = []
        for config in self.configs:
            try:
                records = self.fetch(self.split_map[split], config)
                rows.extend(self.rows_from_records(records, split, config))
            except SourceUnavailable:
                raise
            except Exception as exc:
                where = f"{self.origin}" + (f" config {config!r}" if config else "")
                raise RuntimeError(
                    f"could not load {where} split {self.split_map[split]!r}: {type(exc).__name__}: {exc}"
                ) from exc
        return rows


# ---------------------------------------------------------------- fetchers


def hf_fetcher(path: str, columns: tuple[str, ...] | None = None) -> Fetcher:
    """``datasets.load_dataset(path, config, split=...)``; ``columns`` skips the rest (e.g. HLE images)."""

    def fetch(split: str, config: str | None) -> Iterable[Mapping[str, Any]]:
        import datasets  # slow to import; only the download stage needs it

        ds = datasets.load_dataset(path, config, split=split)
        if columns:
            ds = ds.select_columns([c for c in columns if c in ds.column_names])
        return ds

    return fetch


def csv_fetcher(urls: Mapping[str, str]) -> Fetcher:
    """Rows of a CSV release read as text (pandas reads http(s) URLs); ``urls`` maps source split -> URL."""

    def fetch(split: str, config: str | None) -> Iterable[Mapping[str, Any]]:
        import pandas as pd

        # dtype=str: mixed columns ("3" vs "$2^{u-2}$") must not be coerced to numbers
        return pd.read_csv(urls[split], dtype=str, keep_default_na=False).to_dict("records")

    return fetch


EZSTANCE_ENV = "DEBATELAB_EZSTANCE_DIR"


def ezstance_fetcher(split: str, config: str | None) -> Iterable[Mapping[str, Any]]:
    """EZ-STANCE is only released as a Google-Drive zip: read the unpacked CSVs from a local folder."""
    import pandas as pd

    folder = os.environ.get(EZSTANCE_ENV)
    if not folder:
        raise SourceUnavailable(
            f"EZ-STANCE has no Hugging Face copy: download the zip linked from "
            f"https://github.com/chenyez/EZ-STANCE, unpack it, and set {EZSTANCE_ENV} to the folder holding "
            f"raw_train_all_onecol.csv / raw_val_all_onecol.csv / raw_test_all_onecol.csv "
            f"(e.g. subtaskA_dataset_split/mixed/combined_easy)"
        )
    path = Path(folder) / f"raw_{split}_all_onecol.csv"
    if not path.exists():
        raise SourceUnavailable(f"{path}: file not found (check {EZSTANCE_ENV})")
    return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")


# ---------------------------------------------------------------- math normalisers


def _math_row(question: str, answer: str | None, meta: dict) -> dict | None:
    if not question or not question.strip() or answer is None or not str(answer).strip():
        return None
    return {"question": question.strip(), "choices": None, "answer": str(answer).strip(),
            "task_type": "math", "meta": meta}


def gsm8k_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """openai/gsm8k: the gold number follows "####" in the worked solution."""
    return _math_row(rec["question"], gsm8k_final_answer(rec["answer"]), {"solution": rec["answer"]})


def math_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """Hendrycks MATH (lighteval copy): the gold answer is the last \\boxed{} of the solution."""
    return _math_row(
        rec["problem"], last_boxed(rec["solution"]),
        {"level": rec.get("level"), "subject": rec.get("type"), "solution": rec["solution"]},
    )


def math500_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    return _math_row(
        rec["problem"], rec["answer"],
        {"level": rec.get("level"), "subject": rec.get("subject"),
         "original_id": rec.get("unique_id"), "solution": rec.get("solution")},
    )


def aime24_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """HuggingFaceH4/aime_2024: id, problem, solution, answer, url, year."""
    return _math_row(
        rec["problem"], number_text(rec["answer"]),
        {"original_id": rec.get("id"), "url": rec.get("url"), "year": rec.get("year")},
    )


def aime25_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """MathArena/aime_2025: problem_idx, problem, answer (AIME I then II), problem_type."""
    return _math_row(
        rec["problem"], number_text(rec["answer"]),
        {"problem_idx": rec.get("problem_idx"), "problem_type": rec.get("problem_type")},
    )


def amc23_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """knoveleng/AMC-23: problem + answer (some copies name the text "question", store answers as floats)."""
    question = rec.get("problem") or rec.get("question")
    return _math_row(question, number_text(rec["answer"]), {"original_id": rec.get("id"), "url": rec.get("url")})


def imo_answerbench_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """IMO-AnswerBench CSV: Problem ID, Problem, Short Answer, Category, Level, Subcategory, Source."""
    row = _math_row(
        rec["Problem"], rec["Short Answer"],
        {"original_id": rec.get("Problem ID"), "category": rec.get("Category"), "level": rec.get("Level"),
         "subcategory": rec.get("Subcategory"), "origin": rec.get("Source")},
    )
    if row is not None and rec.get("Problem ID"):
        row["id"] = f"imo_answerbench-{rec['Problem ID'].strip()}"
    return row


DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'


def dapo_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """DAPO-Math-17k: the problem sits inside a fixed instruction; the answer in reward_model.ground_truth.

    `meta["prompt"]` keeps the dataset's own prompt (instruction, problem, "Answer:" reminder)
    verbatim: `prompts.question_messages` asks the row with it, as verl trains on it (Liu et al., arXiv:2601.22297 §6.1, App. B-C).
    `question` is the bare problem (ids, debate templates, reports). The raw file repeats each
    prompt many times (1.79M rows, ~17.4k unique), so the id hashes the problem text and the
    source drops repeats.
    """
    prompt = rec["prompt"][0]["content"]
    question = prompt
    if question.startswith(DAPO_PREFIX):
        question = question[len(DAPO_PREFIX):]
    if question.endswith(DAPO_SUFFIX):
        question = question[: -len(DAPO_SUFFIX)]
    question = question.strip()
    row = _math_row(
        question, rec["reward_model"]["ground_truth"],
        {"original_id": (rec.get("extra_info") or {}).get("index"), "prompt": prompt,
         "data_source": rec.get("data_source")},
    )
    if row is not None:
        row["id"] = f"{ctx.prefix}-{hashlib.sha1(question.encode('utf-8')).hexdigest()[:16]}"
    return row


# ---------------------------------------------------------------- multiple choice


def _mc_row(question: str, choices: list[str], gold_index: int, meta: dict) -> dict | None:
    choices = [str(c).strip() for c in choices]
    if not question.strip() or len(choices) < 2 or not 0 <= gold_index < len(choices) or not all(choices):
        return None
    return {"question": question.strip(), "choices": choices, "answer": letter(gold_index),
            "task_type": "multiple_choice", "meta": meta}


def truthfulqa_mc1_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """truthful_qa multiple_choice: mc1_targets has exactly one label 1, always listed first.

    The options are shuffled with a fixed per-question seed so the gold letter is
    not always A, and every run sees the same order.
    """
    targets = rec["mc1_targets"]
    choices, labels = list(targets["choices"]), list(targets["labels"])
    if labels.count(1) != 1:
        return None
    order = list(range(len(choices)))
    random.Random(f"truthfulqa-mc1-{ctx.index}").shuffle(order)
    shuffled = [choices[i] for i in order]
    return _mc_row(rec["question"], shuffled, order.index(labels.index(1)), {"shuffle_order": order})


def commonsense_qa_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """tau/commonsense_qa: choices.label A-E with choices.text; answerKey ("" on the unlabelled test split)."""
    labels, texts = list(rec["choices"]["label"]), list(rec["choices"]["text"])
    key = (rec.get("answerKey") or "").strip()
    if key not in labels or labels != [letter(i) for i in range(len(labels))]:
        return None
    return _mc_row(rec["question"], texts, labels.index(key),
                   {"original_id": rec.get("id"), "concept": rec.get("question_concept")})


def mmlu_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """cais/mmlu: choices (4 texts) and answer as a class index 0-3."""
    return _mc_row(rec["question"], list(rec["choices"]), int(rec["answer"]), {"subject": rec.get("subject") or ctx.config})


HLE_CHOICES_MARKER = "answer choices:"


def hle_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """cais/hle, kept as SVR-MAD does: text-only, category other than Math, multipleChoice.

    The options are inside the question after "Answer Choices:"; they are split
    out so prompts can render them like any other multiple-choice question.
    """
    if rec.get("image") or rec.get("answer_type") != "multipleChoice" or rec.get("category") == "Math":
        return None
    text = rec["question"]
    marker = text.lower().rfind(HLE_CHOICES_MARKER)
    if marker >= 0:
        parsed = split_lettered_options(text[marker + len(HLE_CHOICES_MARKER):])
        stem = text[:marker].strip()
    else:  # a few questions list options without the marker
        parsed = split_lettered_options(text)
        stem = parsed[0] if parsed else ""
    if parsed is None:
        return None
    choices = parsed[1]
    gold = str(rec["answer"]).strip().rstrip(".").upper()
    if len(gold) != 1 or not "A" <= gold <= "Z":
        return None
    row = _mc_row(stem, choices, ord(gold) - ord("A"),
                  {"original_id": rec.get("id"), "category": rec.get("category"),
                   "subject": rec.get("raw_subject")})
    if row is not None:
        row["id"] = f"{ctx.prefix}-{rec['id']}"
    return row


# ---------------------------------------------------------------- yes/no and labels


def boolq_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """google/boolq: question, answer (bool), passage ("Title -- text"), which goes to meta context."""
    answer = rec["answer"]
    if isinstance(answer, str):
        answer = answer.strip().lower() == "true"
    return {"question": rec["question"].strip(), "choices": None, "answer": "yes" if answer else "no",
            "task_type": "yes_no", "meta": {"context": rec["passage"].strip()}}


HATEVAL_LABELS = ["not hateful", "hateful"]  # tweet_eval/hate: 0 non-hate, 1 hate
STANCE_LABELS = ["against", "support", "neutral"]


def _label_row(text: str, label: str, labels: list[str], meta: dict) -> dict | None:
    if not text or not text.strip() or label not in labels:
        return None
    return {"question": text.strip(), "choices": None, "answer": label, "task_type": "label",
            "meta": {"labels": list(labels), **meta}}


def hateval_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    label = int(rec["label"])
    if not 0 <= label < len(HATEVAL_LABELS):
        return None
    return _label_row(rec["text"], HATEVAL_LABELS[label], HATEVAL_LABELS, {})


VAST_LABELS = {"0": "against", "1": "support", "2": "neutral"}  # README: 0=con, 1=pro, 2=neutral


def vast_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """VAST CSV (emilyallaway/zero-shot-stance): post, new_topic (crowd-corrected topic), label."""
    topic = str(rec.get("new_topic") or rec.get("topic_str") or "").strip()
    label = VAST_LABELS.get(str(rec["label"]).strip())
    if not topic or label is None:
        return None
    return _label_row(
        str(rec["post"]), label, STANCE_LABELS,
        {"topic": topic, "original_id": rec.get("new_id"), "type_idx": rec.get("type_idx"),
         "seen": rec.get("seen?")},
    )


EZSTANCE_LABELS = {"AGAINST": "against", "FAVOR": "support", "NONE": "neutral"}


def ezstance_record(rec: Mapping[str, Any], ctx: RecordContext) -> dict | None:
    """EZ-STANCE CSV: "Ori Text" (raw tweet; "Text" is the authors' cleaned copy), "Target 1", "Stance 1"."""
    text = str(rec.get("Ori Text") or rec.get("Text") or "")
    topic = str(rec.get("Target 1") or "").strip()
    label = EZSTANCE_LABELS.get(str(rec.get("Stance 1", "")).strip().upper())
    if not topic or label is None:
        return None
    return _label_row(text, label, STANCE_LABELS, {"topic": topic, "keywords": rec.get("Keywords")})
