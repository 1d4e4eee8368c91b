"""SVR-MAD's claims (Jiang et al., arXiv:2605.23099 §5.1): each a Table 1 cell difference with a paired bootstrap interval
over questions, n = questions, and a verdict read from the interval. Fixtures are small question
frames whose intervals follow from the numbers in the comments."""

from __future__ import annotations

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
    """NComm is 2 for SVR-MAD and 6 for MAD on every question: every resample's difference is −4."""
    claims = _claims(_outputs({"svr": [(2, 1000, True)] * 5, "mad": [(6, 1500, True)] * 5}))
    fewer = claims["SVR-MAD sends fewer messages than all-to-all MAD"]
    assert (fewer["value"], fewer["low"], fewer["high"]) == (-4.0, -4.0, -4.0)
    assert fewer["verdict"] == "holds" and fewer["n"] == 5 and fewer["expect"] == "< 0"
    assert fewer["interval"].startswith("paired bootstrap over questions")


def test_two_questions_give_the_bootstrap_interval_by_hand():
    """NComm differences −10 and −6 on two questions: a resample's mean is −10 (p 1/4), −8 (1/2) or
    −6 (1/4), so the 2.5 % and 97.5 % percentiles of 2000 resamples are −10 and −6. Accuracy on one
    row per question is the McNemar-backed paired difference: SVR-MAD right on both, SC on q1 only:
    +50 points, resamples 0 (1/4), 50, 100 (1/4), so [0, 100] and "≥ 0" holds (0 is allowed)."""
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
    assert (ncomm["value"], ncomm["low"], ncomm["high"]) == (-8.0, -10.0, -6.0)
    assert ncomm["verdict"] == "holds" and ncomm["n"] == 2
    acc = claims["SVR-MAD accuracy ≥ Self Consistency"]
    assert (acc["value"], acc["low"], acc["high"]) == (50.0, 0.0, 100.0)
    assert acc["verdict"] == "holds" and "McNemar exact p = 1" in acc["interval"]
    tokens = claims["Tokens: Self Consistency < SVR-MAD"]  # (0.2 − 1.2, 0.3 − 1.4) ×10³: both below 0
    assert tokens["value"] == pytest.approx(-1.05) and tokens["high"] == pytest.approx(-1.0)
    assert tokens["verdict"] == "holds"


def test_a_large_difference_on_many_questions_holds():
    """40 questions, SVR-MAD 2-4 messages and 1-2k tokens, S2-MAD 10-12 and 3-4k: every question's
    difference is negative, so every resample's is."""
    svr = [(2 + i % 3, 1000 + 25 * i, i % 2 == 0) for i in range(40)]
    s2 = [(10 + i % 3, 3000 + 25 * i, i % 2 == 0) for i in range(40)]
    claims = _claims(_outputs({"svr": svr, "s2": s2}))
    for statement in ("NComm: SVR-MAD < S2-MAD", "Tokens: SVR-MAD < S2-MAD"):
        assert claims[statement]["verdict"] == "holds" and claims[statement]["n"] == 40
        assert claims[statement]["high"] < 0


def test_a_small_difference_on_few_questions_is_inconclusive():
    """NComm differences −6, −6, +4 on three questions: the mean −2.7 is below 0 (the old point-value
    claim said it holds), but a resample drawing +4 twice has mean +0.7 (p 7/27 with +4 three times),
    so the interval covers 0."""
    claims = _claims(
        _outputs(
            {
                "svr": [(4, 1000, True), (4, 1000, True), (14, 1000, True)],
                "s2": [(10, 2000, True), (10, 2000, True), (10, 2000, True)],
            }
        )
    )
    ncomm = claims["NComm: SVR-MAD < S2-MAD"]
    assert ncomm["value"] == pytest.approx(-8 / 3) and ncomm["low"] < 0 < ncomm["high"]
    assert ncomm["verdict"] == "inconclusive" and ncomm["n"] == 3


def test_threads_of_a_question_resample_together_and_count_as_one_unit():
    """Three threads per question: n stays the number of questions, and the cell is still the mean
    over (question, thread) rows (the same values here, so the difference is that of one thread)."""
    claims = _claims(
        _outputs({"svr": [(2, 1200, True), (4, 1400, False)], "sc": [(0, 200, False), (0, 300, True)]}, threads=3)
    )
    acc = claims["SVR-MAD accuracy ≥ Self Consistency"]
    assert acc["n"] == 2 and acc["value"] == 0.0 and "McNemar" not in acc["interval"]
    assert (acc["low"], acc["high"]) == (-100.0, 100.0) and acc["verdict"] == "inconclusive"
