"""debatelab.evaluation.comparisons: paired accuracy comparisons with intervals, and their config checks."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from debatelab.config import ConfigError, load_experiment
from debatelab.evaluation.comparisons import comparison_table, summarize_comparisons


def _zero_shot(correct_by_agent: dict[str, list[bool]], dataset: str = "arith") -> pd.DataFrame:
    rows = [
        {"dataset": dataset, "question_id": f"q{i}", "agent": agent, "sample": 0, "correct": c}
        for agent, correct in correct_by_agent.items()
        for i, c in enumerate(correct)
    ]
    return pd.DataFrame(rows)


def test_a_trained_agent_that_answers_many_more_questions_right_is_better():
    # 200 questions: trained alone right on 60, base alone on 10, both on 50 -> +25 points; the
    # interval is exact conditional on the 70 discordant questions (Clopper-Pearson of 60/70 mapped by
    # 100 · (70/200)(2p − 1)), p the exact McNemar p of 60 vs 10
    trained = [True] * 60 + [False] * 10 + [True] * 50 + [False] * 80
    base = [False] * 60 + [True] * 10 + [True] * 50 + [False] * 80
    table = comparison_table(
        {"dapo": {"treatment": "dapo", "control": "base"}}, _zero_shot({"dapo": trained, "base": base}), None
    )
    row = table.iloc[0]
    assert (row["kind"], row["n"]) == ("single agent", 200)
    assert (row["acc_treatment"], row["acc_control"]) == pytest.approx((55.0, 30.0))
    # each accuracy with its Clopper-Pearson interval (110 and 60 of 200 right)
    for side, right in (("treatment", 110), ("control", 60)):
        side_ci = stats.binomtest(right, 200).proportion_ci(0.95, method="exact")
        assert (row[f"acc_{side}_low"], row[f"acc_{side}_high"]) == pytest.approx(
            (100 * side_ci.low, 100 * side_ci.high)
        )
    assert row["difference"] == pytest.approx(25.0)
    ci = stats.binomtest(60, 70).proportion_ci(0.95, method="exact")
    assert (row["low"], row["high"]) == pytest.approx((35 * (2 * ci.low - 1), 35 * (2 * ci.high - 1)))
    assert row["p"] == pytest.approx(stats.binomtest(60, 70, 0.5).pvalue) and row["verdict"] == "better"


def test_accuracies_over_several_samples_carry_the_bootstrap_interval_of_their_question_means():
    """Two samples a question: each side's accuracy is the mean of its per-question means, with their
    BCa interval over questions (scipy's, same seed and resamples), never a bare number."""
    rng = np.random.default_rng(5)
    rows = [
        {"dataset": "arith", "question_id": f"q{i}", "agent": agent, "sample": s, "correct": bool(rng.random() < p)}
        for agent, p in (("a", 0.7), ("b", 0.4))
        for i in range(30)
        for s in range(2)
    ]
    frame = pd.DataFrame(rows)
    row = comparison_table({"c": {"treatment": "a", "control": "b"}}, frame, None).iloc[0]
    means = frame[frame["agent"] == "a"].groupby("question_id")["correct"].mean().to_numpy(float)
    ref = stats.bootstrap((means,), np.mean, n_resamples=2000, method="BCa", rng=np.random.default_rng(0))
    assert row["acc_treatment"] == pytest.approx(100 * means.mean())
    low, high = ref.confidence_interval
    assert (row["acc_treatment_low"], row["acc_treatment_high"]) == pytest.approx((100 * low, 100 * high), rel=1e-9)


def test_a_small_difference_on_few_questions_is_inconclusive():
    table = comparison_table(
        {"c": {"treatment": "a", "control": "b"}},
        _zero_shot({"a": [True, True, False, True, False], "b": [True, False, False, True, False]}),
        None,
    )
    row = table.iloc[0]
    assert row["difference"] == pytest.approx(20.0) and row["low"] <= 0 < row["high"]
    assert row["verdict"] == "inconclusive"


def test_debate_comparisons_pair_questions_and_average_threads(tmp_path):
    # protocol p: q0 right in 1 of 2 threads, q1 in 2 of 2; protocol base: q0 0/2, q1 2/2, q2 only in base
    questions = pd.DataFrame(
        {
            "dataset": "arith",
            "protocol": ["p", "p", "p", "p", "base", "base", "base", "base", "base"],
            "question_id": ["q0", "q0", "q1", "q1", "q0", "q0", "q1", "q1", "q2"],
            "correct": [True, False, True, True, False, False, True, True, True],
        }
    )
    zero_shot = _zero_shot({"a": [True], "b": [False]})
    q_path, z_path = tmp_path / "q.parquet", tmp_path / "z.parquet"
    questions.to_parquet(q_path)
    zero_shot.to_parquet(z_path)
    table = summarize_comparisons(
        {"debate": {"treatment": "p", "control": "base"}}, [z_path], [q_path], tmp_path / "c.csv", tmp_path / "c.png"
    )
    row = table.iloc[0]
    # shared questions q0, q1: p 75 %, base 50 %; two threads a question, so not one 0/1 outcome: the
    # BCa bootstrap over questions, which 2 questions are too few for (claims.MIN_UNITS)
    assert (row["kind"], row["n"], row["acc_treatment"], row["acc_control"]) == ("debate", 2, 75.0, 50.0)
    assert np.isnan(row["low"]) and np.isnan(row["high"]) and np.isnan(row["p"]) and "fewer than" in row["test"]
    assert pd.read_csv(tmp_path / "c.csv")["verdict"].tolist() == ["n/a (too few)"]
    assert (tmp_path / "c.png").stat().st_size > 1000


def _config(tmp_path, comparisons):
    config = yaml.safe_load(open("config/config.yaml"))
    config = copy.deepcopy(config)
    config.setdefault("evaluation", {})["comparisons"] = comparisons
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    "comparisons, message",
    [
        ({"x": {"treatment": "nobody", "control": "smol_a"}}, "evaluation.comparisons.x.treatment is 'nobody'"),
        ({"x": {"treatment": "smol_a", "control": "mad"}}, "compare two agents or two protocols"),
    ],
)
def test_comparisons_name_agents_or_protocols_of_one_kind(tmp_path, comparisons, message):
    with pytest.raises(ConfigError, match=message):
        load_experiment(_config(tmp_path, comparisons))


def test_a_valid_comparison_is_accepted(tmp_path):
    experiment = load_experiment(_config(tmp_path, {"sdrl": {"treatment": "mad_sdrl", "control": "mad"}}))
    assert experiment.comparisons == {"sdrl": {"treatment": "mad_sdrl", "control": "mad"}}


@pytest.mark.parametrize(
    "trained, base, expected",
    [
        ([False] * 6, [False] * 6, "inconclusive"),  # identical: [0, 0] is no difference
        ([False] * 6, [True, False, False, False, False, False], "inconclusive"),  # interval reaches 0
        ([False] * 40, [True] * 20 + [False] * 20, "worse"),
    ],
)
def test_the_verdict_is_two_sided(trained, base, expected):
    table = comparison_table({"c": {"treatment": "t", "control": "b"}}, _zero_shot({"t": trained, "b": base}), None)
    assert table.iloc[0]["verdict"] == expected


def test_holm_adjusts_over_every_comparison_of_the_table():
    """Two comparisons at p = 0.031 each: better alone, inconclusive after Holm over the two."""
    rows = []
    for agent, pattern in (("base", [0] * 200), ("t1", [1] * 6 + [0] * 194), ("t2", [1] * 6 + [0] * 194)):
        rows += [
            {"dataset": "d", "question_id": f"q{i}", "agent": agent, "correct": bool(c)} for i, c in enumerate(pattern)
        ]
    table = comparison_table(
        {"one": {"treatment": "t1", "control": "base"}, "two": {"treatment": "t2", "control": "base"}},
        pd.DataFrame(rows),
        None,
    )
    p = stats.binomtest(6, 6, 0.5).pvalue  # exact McNemar: 6 discordant questions, all one way
    assert table["p"].tolist() == pytest.approx([p, p])
    assert table["p_holm"].tolist() == pytest.approx([2 * p, 2 * p])
    assert table["verdict"].tolist() == ["better", "better"]
    assert table["verdict_holm"].tolist() == ["inconclusive", "inconclusive"]
