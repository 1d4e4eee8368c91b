"""SVR-MAD's claims (Jiang et al., arXiv:2605.23099 §5.1): each a Table 1 cell difference with a paired bootstrap interval
over questions, n = questions, and a verdict read from the interval. Fixtures are small question
frames whose intervals follow from the numbers in the comments."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from scipy import stats

from debatelab import intervals
from debatelab.evaluation import ProtocolInfo, RunOutputs, build_paper, evaluate_paper
from debatelab.evaluation.claims import claims_frame
from debatelab.evaluation.papers import svr_mad
from debatelab.evaluation.run import QUESTION_COLUMNS

KINDS = {"sc": "self_consistency", "svr": "svr_mad", "s2": "s2_mad", "mad": "all_to_all"}


def _outputs(
    spec: dict[str, list[tuple]], threads: int = 1, paper_dataset: str = "gsm8k", backbones: dict | None = None
) -> RunOutputs:
    """spec: protocol -> [(ncomm, tokens, correct[, pre_unanimous]) per question], non-unanimous
    unless the fourth field says so; with `threads` > 1 every question repeats once per thread with
    the same values. `paper_dataset`: the paper's name for the run's gsm_symbolic; `backbones`:
    model "m" -> the paper backbone it stands for (none by default)."""
    rows = []
    for protocol, questions in spec.items():
        for i, (ncomm, tokens, correct, *unanimous) in enumerate(questions):
            for thread in range(threads):
                rows.append(
                    {
                        "question_id": f"q{i}",
                        "dataset": "gsm_symbolic",
                        "protocol": protocol,
                        "kind": KINDS[protocol],
                        "thread": thread,
                        "ncomm": ncomm,
                        "total_tokens": tokens,
                        "correct": correct,
                        "pre_unanimous": bool(unanimous and unanimous[0]),
                    }
                )
    protocols = {
        p: ProtocolInfo(
            name=p,
            kind=KINDS[p],
            rounds=2,
            threads=threads,
            template="du",
            participants=("a", "b", "c"),
            models=("m", "m", "m"),
            adversarial=0,
            trained_runs=(),
            datasets=("gsm_symbolic",),
            adversarial_seats=(False, False, False),
        )
        for p in spec
    }
    model_backbones = {"svr_mad": {"m": backbones}} if backbones else {}
    outputs = RunOutputs("fixture", protocols, {}, {"gsm_symbolic": paper_dataset}, model_backbones=model_backbones)
    outputs.__dict__["questions"] = pd.DataFrame(rows)
    return outputs


def _claims(outputs: RunOutputs) -> dict[str, pd.Series]:
    frame = claims_frame(build_paper("svr_mad", outputs).claims)
    return {row["statement"]: row for _, row in frame.iterrows()}


def test_a_constant_per_question_difference_has_a_point_interval():
    """NComm is 2 for SVR-MAD and 6 for MAD on every one of 12 questions: every resample's difference
    is −4 (BCa is undefined without spread: the percentile interval, a point)."""
    claims = _claims(_outputs({"svr": [(2, 1000, True)] * 12, "mad": [(6, 1500, True)] * 12}))
    fewer = claims["SVR-MAD sends fewer messages than all-to-all MAD"]
    assert (fewer["value"], fewer["low"], fewer["high"]) == (-4.0, -4.0, -4.0)
    assert fewer["verdict"] == "holds" and fewer["n"] == 12 and fewer["expect"] == "< 0"
    assert fewer["interval"].startswith("paired bootstrap over questions")


def test_two_questions_decide_nothing():
    """NComm differences −10 and −6 on two questions: fewer than claims.MIN_UNITS, so no bootstrap
    interval ("n/a (too few)"; the percentile bootstrap of old gave [−10, −6] and "holds"). Accuracy
    on one row per question is paired correctness: SVR-MAD right on both, SC on q1 only: +50 points
    from one discordant question; Clopper-Pearson of 1/1 is [0.025, 1], mapped by 100 · (1/2)(2p − 1)
    to [−47.5, 50], McNemar p = 1, so "≥ 0" is inconclusive (the old [0, 100] let it hold)."""
    claims = _claims(
        _outputs(
            {
                "svr": [(2, 1200, True), (4, 1400, True)],
                "s2": [(12, 3000, False), (10, 2000, True)],
                "sc": [(0, 200, False), (0, 300, True)],
            }
        )
    )
    ncomm = claims["NComm: SVR-MAD < S2-MAD"]
    assert ncomm["value"] == -8.0 and math.isnan(ncomm["low"]) and math.isnan(ncomm["high"])
    assert ncomm["verdict"] == "n/a (too few)" and ncomm["n"] == 2
    acc = claims["SVR-MAD accuracy ≥ Self Consistency"]
    assert (acc["value"], acc["low"], acc["high"]) == pytest.approx((50.0, -47.5, 50.0))
    assert acc["verdict"] == "inconclusive" and "McNemar exact p = 1" in acc["interval"] and acc["p"] == 1.0
    tokens = claims["Tokens: Self Consistency < SVR-MAD"]  # (0.2 − 1.2, 0.3 − 1.4) ×10³
    assert tokens["value"] == pytest.approx(-1.05) and tokens["verdict"] == "n/a (too few)"


def test_a_large_difference_on_many_questions_holds():
    """40 questions, SVR-MAD 2-4 messages and 1-2k tokens, S2-MAD 10-12 and 3-4k: every question's
    difference is negative, so every resample's is."""
    svr = [(2 + i % 3, 1000 + 25 * i, i % 2 == 0) for i in range(40)]
    s2 = [(10 + i % 3, 3000 + 25 * i, i % 2 == 0) for i in range(40)]
    claims = _claims(_outputs({"svr": svr, "s2": s2}))
    for statement in ("NComm: SVR-MAD < S2-MAD", "Tokens: SVR-MAD < S2-MAD"):
        assert claims[statement]["verdict"] == "holds" and claims[statement]["n"] == 40
        assert claims[statement]["high"] < 0


def test_a_small_difference_on_few_questions_is_not_decided():
    """NComm differences −6, −6, +4 on three questions: the mean −2.7 is below 0 (the old point-value
    claim said it holds), but three questions are fewer than claims.MIN_UNITS: no interval, no verdict."""
    claims = _claims(
        _outputs(
            {
                "svr": [(4, 1000, True), (4, 1000, True), (14, 1000, True)],
                "s2": [(10, 2000, True), (10, 2000, True), (10, 2000, True)],
            }
        )
    )
    ncomm = claims["NComm: SVR-MAD < S2-MAD"]
    assert ncomm["value"] == pytest.approx(-8 / 3) and math.isnan(ncomm["low"])
    assert ncomm["verdict"] == "n/a (too few)" and ncomm["n"] == 3


def test_threads_of_a_question_resample_together_and_count_as_one_unit():
    """Three threads per question: n stays the number of questions, and the cell is still the mean
    over (question, thread) rows (the same values here, so the difference is that of one thread)."""
    claims = _claims(
        _outputs({"svr": [(2, 1200, True), (4, 1400, False)], "sc": [(0, 200, False), (0, 300, True)]}, threads=3)
    )
    acc = claims["SVR-MAD accuracy ≥ Self Consistency"]
    assert acc["n"] == 2 and acc["value"] == 0.0 and "McNemar" not in acc["interval"]
    # several threads: the paired sign-flip test over the 2 questions (issue 71), which decides nothing here
    assert acc["interval"].startswith("paired sign-flip test over questions") and acc["verdict"] == "inconclusive"


# --------------------------------------------------------------------------- Table 1 cells' intervals


def _cell(outputs: RunOutputs, method: str, metric: str) -> pd.Series:
    cells = build_paper("svr_mad", outputs).cells["table1"]
    (row,) = cells[(cells["method"] == method) & (cells["metric"] == metric)].to_dict("records")
    return pd.Series(row)


def test_accuracy_tokens_and_messages_get_intervals_over_the_valid_questions_only():
    """12 non-unanimous questions (5 right, 2-4 messages, 1-1.55k tokens) and 3 unanimous ones (right,
    20 messages, 9k tokens) that Table 1 leaves out: Acc 5/12 with Clopper-Pearson's interval of 5/12
    (all 15 rows would give 8/15), NComm and Tok the BCa interval of the 12 valid questions' mean."""
    valid = [(2 + i % 3, 1000 + 50 * i, i < 5) for i in range(12)]
    spec = {"svr": valid + [(20, 9000, True, True)] * 3}
    outputs = _outputs(spec)

    acc = _cell(outputs, "SVR-MAD", "Acc")
    exact = stats.binomtest(5, 12).proportion_ci(0.95, method="exact")
    assert acc["n"] == 12 and acc["value"] == pytest.approx(100 * 5 / 12)
    assert (acc["low"], acc["high"]) == pytest.approx((100 * exact.low, 100 * exact.high))

    qids = [f"q{i}" for i in range(12)]
    for metric, column, scale in (("NComm", 0, 1.0), ("Tok", 1, 1 / 1000)):
        cell = _cell(outputs, "SVR-MAD", metric)
        est = intervals.mean_estimate([q[column] for q in valid], clusters=qids)
        assert cell["value"] == pytest.approx(est.value * scale)
        assert (cell["low"], cell["high"]) == pytest.approx((est.low * scale, est.high * scale))
        assert cell["low"] < cell["value"] < cell["high"]
    assert _cell(outputs, "SVR-MAD", "Tok")["high"] < 1.6  # the unanimous 9k-token questions are out


def test_a_questions_threads_are_one_unit_of_the_accuracy_interval():
    """12 questions × 2 threads, thread 0 right on q0-q5, thread 1 on q0-q2: 9 of 24 rows right. The
    24 rows are not 24 independent answers: the interval is the BCa bootstrap over the 12 questions,
    a question's two threads drawn together, not Clopper-Pearson of 9/24."""
    outputs = _outputs({"svr": [(2, 1000, True)] * 12}, threads=2)
    questions = outputs.questions
    questions["correct"] = ((questions["thread"] == 0) & (questions.index // 2 < 6)) | (questions.index // 2 < 3)
    acc = _cell(outputs, "SVR-MAD", "Acc")
    est = intervals.mean_estimate(questions["correct"].astype(float), clusters=questions["question_id"])
    assert acc["n"] == 24 and acc["value"] == pytest.approx(100 * 9 / 24)
    assert (acc["low"], acc["high"]) == pytest.approx((100 * est.low, 100 * est.high))
    assert est.method.startswith("bootstrap over questions, each one's rows drawn together")
    rows_as_answers = stats.binomtest(9, 24).proportion_ci(0.95, method="exact")
    assert acc["low"] != pytest.approx(100 * rows_as_answers.low)


def test_a_constant_count_has_a_point_interval_and_few_or_no_valid_questions_none():
    """Self Consistency sends no message on any of 12 questions: NComm's interval is [0, 0] (a count,
    not a binomial share: Clopper-Pearson of 0/12 would be [0, 26.5]). Three valid questions are fewer
    than intervals.MIN_UNITS for a bootstrap: no NComm or Tok interval, while Acc's Clopper-Pearson
    interval is exact at any n (2/3 right). A protocol whose questions all start unanimous has no
    cell value and no interval."""
    outputs = _outputs(
        {
            "sc": [(0, 300, True)] * 12,
            "svr": [(2, 1000, True), (3, 1100, False), (4, 1200, True)],
            "s2": [(6, 2000, True, True)] * 12,
        }
    )
    ncomm = _cell(outputs, "Self Consistency", "NComm")
    assert (ncomm["value"], ncomm["low"], ncomm["high"]) == (0.0, 0.0, 0.0)
    for metric in ("NComm", "Tok"):
        few = _cell(outputs, "SVR-MAD", metric)
        assert few["n"] == 3 and not math.isnan(few["value"])
        assert math.isnan(few["low"]) and math.isnan(few["high"])
    acc = _cell(outputs, "SVR-MAD", "Acc")
    exact = stats.binomtest(2, 3).proportion_ci(0.95, method="exact")
    assert (acc["low"], acc["high"]) == pytest.approx((100 * exact.low, 100 * exact.high))
    for metric in svr_mad.METRICS:
        none = _cell(outputs, "S2-MAD", metric)
        assert none["n"] == 0 and math.isnan(none["value"]) and math.isnan(none["low"]) and math.isnan(none["high"])


def test_the_vs_paper_table_carries_the_run_intervals_and_whether_the_paper_lies_in_them(tmp_path):
    """SVR-MAD on 20 valid HLE questions, model "m" standing for GPT-OSS-120B: Acc 4/20 = 20 % with
    Clopper-Pearson [5.7, 43.7] holds the paper's 21.4; 2-4 messages and 1-1.5k tokens are far from
    the paper's 7.3 messages and 39.1k tokens."""
    svr = [(2 + i % 3, 1000 + 25 * i, i < 4) for i in range(20)]
    outputs = _outputs({"svr": svr}, paper_dataset="hle", backbones="GPT-OSS-120B")
    evaluate_paper("svr_mad", outputs, tmp_path)
    vs = pd.read_csv(tmp_path / "table1_vs_paper.csv").set_index(["llm", "dataset", "method", "metric"]).sort_index()
    cells = vs.loc[("GPT-OSS-120B", "hle", "SVR-MAD")]
    exact = stats.binomtest(4, 20).proportion_ci(0.95, method="exact")
    # the CSV keeps 4 significant digits
    assert cells.loc["Acc", ["run_value", "run_low", "run_high"]].tolist() == pytest.approx(
        [20.0, 100 * exact.low, 100 * exact.high], rel=1e-3
    )
    assert cells.loc["Acc", "paper_value"] == 21.4 and bool(cells.loc["Acc", "paper_in_interval"])
    tokens = intervals.mean_estimate([t for _, t, _ in svr], clusters=[f"q{i}" for i in range(20)]).scaled(1 / 1000)
    assert cells.loc["Tok", ["run_low", "run_high"]].tolist() == pytest.approx([tokens.low, tokens.high], rel=1e-3)
    for metric in ("NComm", "Tok"):
        assert cells.loc[metric, "run_low"] < cells.loc[metric, "run_value"] < cells.loc[metric, "run_high"]
        assert not bool(cells.loc[metric, "paper_in_interval"])
    # the other methods and the DeepSeek rows have no run cell, so no interval
    assert vs.drop(index=("GPT-OSS-120B", "hle", "SVR-MAD"))[["run_value", "run_low", "run_high"]].isna().all().all()


def test_a_run_without_debates_compares_no_cell_with_the_paper(tmp_path):
    """No question rows: Table 1's long cells still have their columns (low and high among them), so
    the vs-paper table is written with every run value and interval empty (a frame without columns
    made the join fail)."""
    outputs = RunOutputs("empty", {}, {}, {})
    outputs.__dict__["questions"] = pd.DataFrame(columns=QUESTION_COLUMNS)
    cells = build_paper("svr_mad", outputs).cells["table1"]
    assert cells.empty and {"dataset", "llm", "method", "metric", "value", "low", "high", "n"} <= set(cells)
    evaluate_paper("svr_mad", outputs, tmp_path)
    vs = pd.read_csv(tmp_path / "table1_vs_paper.csv")
    assert len(vs) > 0 and vs[["run_value", "run_low", "run_high", "paper_in_interval"]].isna().all().all()
