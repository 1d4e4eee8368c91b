"""Debate summary, SVR-MAD Table 1 layout and cost/accuracy plot on small hand-built results."""

from __future__ import annotations

import math

import matplotlib.image
import pandas as pd
import pytest

from debatelab.debate.schema import QUESTION_COLUMNS, TURN_COLUMNS
from debatelab.io import DataFileError, save_figure_atomic, write_parquet_atomic
from debatelab.reporting.debate import (
    DEBATE_QUESTION_INPUTS,
    DEBATE_SUMMARY_COLUMNS,
    DEBATE_TURN_INPUTS,
    debate_summary,
    debate_table_paper_layout,
    plot_debate_cost_accuracy,
    summarize_debate,
)

KINDS = {"sc": "self_consistency", "mad": "all_to_all", "svr": "svr_mad"}


def questions(dataset, protocol, rows):
    """rows: (question_id, thread, correct, pre_unanimous, ncomm, total_tokens, parse_failed)."""
    records = []
    for qid, thread, correct, unanimous, ncomm, tokens, failed in rows:
        debate = ncomm > 0
        record = dict.fromkeys(QUESTION_COLUMNS)
        record.update(
            question_id=qid,
            dataset=dataset,
            protocol=protocol,
            kind=KINDS[protocol],
            thread=thread,
            task_type="multiple_choice",
            gold="A",
            n_agents=3,
            participants='["#0", "#1", "#2"]',
            final_answer=None if failed else ("A" if correct else "B"),
            correct=correct,
            parse_failed=failed,
            rounds_used=2 if debate else 0,
            stopped_early=not debate,
            ended_by="rounds" if debate else "no_debate",
            ncomm=ncomm,
            ncomm_full=ncomm,
            ncomm_answers=0,
            debate_calls=3 if debate else 0,
            debate_prompt_tokens=0,
            debate_completion_tokens=0,
            pre_debate_tokens=tokens,
            total_tokens=tokens,
            confidence_tokens=0,
            pre_majority="A",
            pre_correct=True,
            pre_unanimous=unanimous,
            pre_n_correct=3,
            answers_by_round="[]",
        )
        records.append(record)
    return pd.DataFrame(records, columns=QUESTION_COLUMNS)


def turns(dataset, protocol, failures_by_round):
    """One turn per entry of failures_by_round[round]: its parse_failed flag."""
    records = []
    for rnd, failures in failures_by_round.items():
        for k, failed in enumerate(failures):
            record = dict.fromkeys(TURN_COLUMNS)
            record.update(
                question_id=f"q{k}",
                dataset=dataset,
                protocol=protocol,
                thread=0,
                round=rnd,
                agent=f"#{k % 3}",
                agent_index=k % 3,
                agent_config="a",
                model="tiny",
                call=0,
                zero_shot_sample=-1 if rnd else 0,
                sources=[],
                answer_sources=[],
                response="...",
                answer=None if failed else "A",
                correct=not failed,
                parse_failed=failed,
                prompt_tokens=10,
                completion_tokens=5,
                finish_reason="stop",
                min_logprob=-1.0,
                mean_logprob=-0.5,
                conf_verbal=None,
                conf_seqprob=None,
                confidence_tokens=0,
            )
            records.append(record)
    return pd.DataFrame(records, columns=TURN_COLUMNS)


T, F = True, False
# ds_a: q1 unanimous before debate, q2 and q3 not. Columns as in `questions`.
QUESTIONS = {
    ("ds_a", "sc"): [("q1", 0, T, T, 0, 1000, F), ("q2", 0, T, F, 0, 45000, F), ("q3", 0, F, F, 0, 45800, T)],
    ("ds_a", "mad"): [
        ("q1", 0, T, T, 6, 2000, F),
        ("q1", 1, T, T, 6, 2000, F),
        ("q2", 0, T, F, 12, 100000, F),
        ("q2", 1, F, F, 18, 120000, F),
        ("q3", 0, F, F, 18, 130000, F),
        ("q3", 1, F, F, 18, 150000, T),
    ],
    ("ds_a", "svr"): [("q1", 0, T, T, 0, 1000, F), ("q2", 0, T, F, 4, 70000, F), ("q3", 0, T, F, 8, 79000, F)],
    # ds_b: every question unanimous; svr is cheapest here, unlike on ds_a
    ("ds_b", "sc"): [("p1", 0, T, T, 0, 1000, F), ("p2", 0, F, T, 0, 1000, F)],
    ("ds_b", "mad"): [("p1", 0, T, T, 6, 3000, F), ("p2", 0, T, T, 6, 3000, F)],
    ("ds_b", "svr"): [("p1", 0, F, T, 1, 500, F), ("p2", 0, F, T, 1, 500, F)],
}
TURNS = {
    ("ds_a", "sc"): {0: [T, F, F, F, F, F, F, F, F]},  # round 0 failures don't count
    ("ds_a", "mad"): {0: [T, T, T, F, F, F], 1: [T, F, F, F], 2: [F, T, F, F]},  # 2 of 8 debate turns
    ("ds_a", "svr"): {0: [F, F, F], 1: [T, F, F, F, F]},
    ("ds_b", "sc"): {0: [F, F]},
    ("ds_b", "mad"): {0: [F, F], 1: [F, F, F, F]},
    ("ds_b", "svr"): {0: [T, F], 1: [F, F]},
}


def frames():
    # deliberately unsorted: ds_b before ds_a, expensive protocols first
    keys = sorted(QUESTIONS, reverse=True)
    return [questions(*k, QUESTIONS[k]) for k in keys], [turns(*k, TURNS[k]) for k in keys]


@pytest.fixture
def summary():
    return debate_summary(*frames())


def row(summary, dataset, protocol):
    match = summary[(summary["dataset"] == dataset) & (summary["protocol"] == protocol)]
    assert len(match) == 1
    return match.iloc[0]


def test_inputs_are_schema_columns():
    assert set(DEBATE_QUESTION_INPUTS) <= set(QUESTION_COLUMNS)
    assert set(DEBATE_TURN_INPUTS) <= set(TURN_COLUMNS)


def test_sorted_by_dataset_then_tokens(summary):
    assert list(summary.columns) == DEBATE_SUMMARY_COLUMNS
    assert list(zip(summary["dataset"], summary["protocol"])) == [
        ("ds_a", "sc"),
        ("ds_a", "svr"),
        ("ds_a", "mad"),
        ("ds_b", "svr"),
        ("ds_b", "sc"),
        ("ds_b", "mad"),
    ]


def test_counts_and_accuracy(summary):
    mad = row(summary, "ds_a", "mad")
    assert mad["kind"] == "all_to_all"
    assert (mad["questions"], mad["threads"], mad["non_unanimous_questions"]) == (3, 2, 2)
    assert mad["accuracy"] == pytest.approx(3 / 6)
    assert mad["accuracy_non_unanimous"] == pytest.approx(1 / 4)  # q2 t0 right; q2 t1, q3 t0, q3 t1 wrong
    assert mad["final_parse_failure_rate"] == pytest.approx(1 / 6)
    assert mad["pre_majority_accuracy"] == 1.0
    assert row(summary, "ds_a", "sc")["accuracy"] == pytest.approx(2 / 3)
    assert row(summary, "ds_a", "sc")["accuracy_non_unanimous"] == pytest.approx(1 / 2)
    assert row(summary, "ds_a", "svr")["accuracy_non_unanimous"] == 1.0


def test_parse_failures_count_debate_turns_only(summary):
    assert row(summary, "ds_a", "mad")["parse_failure_rate"] == pytest.approx(2 / 8)
    assert row(summary, "ds_a", "svr")["parse_failure_rate"] == pytest.approx(1 / 5)
    assert row(summary, "ds_b", "svr")["parse_failure_rate"] == 0.0  # its round-0 failure is ignored
    assert math.isnan(row(summary, "ds_a", "sc")["parse_failure_rate"])  # no debate calls at all


def test_communication_tokens_and_rounds(summary):
    mad = row(summary, "ds_a", "mad")
    assert mad["mean_ncomm"] == pytest.approx((6 + 6 + 12 + 18 + 18 + 18) / 6)
    assert mad["mean_ncomm_non_unanimous"] == pytest.approx((12 + 18 + 18 + 18) / 4)
    assert mad["mean_total_tokens"] == pytest.approx((2000 + 2000 + 100000 + 120000 + 130000 + 150000) / 6)
    assert mad["mean_total_tokens_non_unanimous"] == pytest.approx(500000 / 4)
    assert (mad["mean_debate_calls"], mad["mean_rounds"], mad["early_stop_rate"]) == (3, 2, 0)
    sc = row(summary, "ds_a", "sc")
    assert (sc["mean_ncomm"], sc["mean_debate_calls"], sc["mean_rounds"], sc["early_stop_rate"]) == (0, 0, 0, 1)
    svr = row(summary, "ds_a", "svr")
    assert svr["mean_ncomm"] == pytest.approx(4) and svr["mean_rounds"] == pytest.approx(4 / 3)


def test_all_unanimous_dataset_has_no_valid_accuracy(summary):
    for protocol in ("sc", "mad", "svr"):
        r = row(summary, "ds_b", protocol)
        assert r["non_unanimous_questions"] == 0
        assert math.isnan(r["accuracy_non_unanimous"]) and math.isnan(r["mean_total_tokens_non_unanimous"])
    assert row(summary, "ds_b", "sc")["accuracy"] == 0.5


def test_paper_layout(summary):
    paper = debate_table_paper_layout(summary)
    assert list(paper.index) == ["sc", "svr", "mad"]  # cheapest first on ds_a
    assert list(paper.columns) == [(d, m) for d in ("ds_a", "ds_b") for m in ("NComm", "Tok", "Acc")]
    assert paper.loc["sc", ("ds_a", "Tok")] == 45.4  # (45000 + 45800) / 2 valid-question tokens
    assert paper.loc["sc", ("ds_a", "Acc")] == 50.0
    assert paper.loc["sc", ("ds_a", "NComm")] == 0.0
    assert paper.loc["mad", ("ds_a", "NComm")] == 16.5
    assert paper.loc["mad", ("ds_a", "Tok")] == 125.0
    assert paper.loc["mad", ("ds_a", "Acc")] == 25.0
    assert paper.loc["svr", ("ds_a", "Tok")] == 74.5  # (70000 + 79000) / 2
    assert paper.loc["svr", ("ds_a", "NComm")] == 6.0
    assert paper["ds_b"].isna().all().all()


def test_paper_layout_rounds_to_one_decimal():
    summary = pd.DataFrame(
        {
            "dataset": ["d"],
            "protocol": ["p"],
            "mean_ncomm_non_unanimous": [5.5555],
            "mean_total_tokens_non_unanimous": [82149.0],
            "accuracy_non_unanimous": [127 / 297],
        }
    )
    paper = debate_table_paper_layout(summary)
    assert paper.loc["p"].tolist() == [5.6, 82.1, 42.8]  # SVR-MAD's GPT-OSS IMO row


def test_plot_has_one_panel_per_dataset(summary, tmp_path):
    path = tmp_path / "plots" / "debate.png"
    fig = plot_debate_cost_accuracy(summary)
    save_figure_atomic(fig, path)
    assert [ax.get_title() for ax in fig.axes] == ["ds_a (n=3 questions)", "ds_b (n=2 questions)"]
    for ax in fig.axes:
        assert not ax.texts  # no labels on the points: they overlapped
        assert ax.get_ylabel() in ("accuracy (%)", "") and "tokens" in ax.get_xlabel()
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["mad", "sc", "svr"]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width = matplotlib.image.imread(path).shape[:2]
    assert width > height > 0  # two panels side by side
    assert [p.name for p in path.parent.iterdir()] == ["debate.png"]  # no temp file left behind


def _write_inputs(tmp_path, question_frames, turn_frames):
    qpaths, tpaths = [], []
    for k, (q, t) in enumerate(zip(question_frames, turn_frames)):
        qpaths.append(tmp_path / f"in/{k}/questions.parquet")
        tpaths.append(tmp_path / f"in/{k}/turns.parquet")
        write_parquet_atomic(q, qpaths[-1])
        write_parquet_atomic(t, tpaths[-1])
    return qpaths, tpaths


def test_summarize_debate_writes_all_three(tmp_path):
    qpaths, tpaths = _write_inputs(tmp_path, *frames())
    out = tmp_path / "summary"
    summary = summarize_debate(qpaths, tpaths, out / "debate.csv", out / "debate_paper.csv", out / "plot.png")
    table = pd.read_csv(out / "debate.csv")
    assert list(table.columns) == DEBATE_SUMMARY_COLUMNS and len(table) == len(summary) == 6
    assert table.loc[table["protocol"].eq("mad") & table["dataset"].eq("ds_a"), "parse_failure_rate"].item() == 0.25
    paper = pd.read_csv(out / "debate_paper.csv", index_col="protocol")
    assert list(paper.columns) == [f"{d} {m}" for d in ("ds_a", "ds_b") for m in ("NComm", "Tok", "Acc")]
    assert paper.loc["sc", "ds_a Tok"] == 45.4 and paper.loc["mad", "ds_a Acc"] == 25.0
    assert (out / "plot.png").stat().st_size > 1000


def test_questions_file_missing_ncomm_is_named(tmp_path):
    question_frames, turn_frames = frames()
    question_frames[2] = question_frames[2].drop(columns="ncomm")
    qpaths, tpaths = _write_inputs(tmp_path, question_frames, turn_frames)
    out = tmp_path / "summary"
    with pytest.raises(DataFileError, match=r"in/2/questions\.parquet.*'ncomm'"):
        summarize_debate(qpaths, tpaths, out / "a.csv", out / "b.csv", out / "c.png")
    assert not out.exists()
