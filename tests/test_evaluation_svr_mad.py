"""SVR-MAD's claims (Jiang et al., arXiv:2605.23099 §5.1): each a Table 1 cell difference with a paired bootstrap interval
over questions, n = questions, and a verdict read from the interval. Fixtures are small question
frames whose intervals follow from the numbers in the comments."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from debatelab.evaluation import ProtocolInfo, RunOutputs, build_paper
from debatelab.evaluation.claims import claims_frame

KINDS = {"sc": "self_consistency", "svr": "svr_mad", "s2": "s2_mad", "mad": "all_to_all"}


def _outputs(spec: dict[str, list[tuple]], threads: int = 1) -> RunOutputs:
    """spec: protocol -> [(ncomm, tokens, correct) per question], every question non-unanimous;
    with `threads` > 1 every question repeats once per thread with the same values."""
    rows = []
    for protocol, questions in spec.items():
        for i, (ncomm, tokens, correct) in enumerate(questions):
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
                        "pre_unanimous": False,
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
    outputs = RunOutputs("fixture", protocols, {}, {"gsm_symbolic": "gsm8k"})
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
    assert math.isnan(acc["low"]) and acc["verdict"] == "n/a (too few)"
