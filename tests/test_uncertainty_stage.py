"""debatelab.uncertainty_stage: UDPO measures and the UMAD decomposition from a debate
stage's questions.parquet, with failure diagnostics and selective prediction.

Expected numbers are worked out by hand in the comments (ln = natural log).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from debatelab.debate.schema import QUESTION_COLUMNS
from debatelab.io import DataFileError, write_parquet_atomic
from debatelab.uncertainty import UDPO_KEYS
from debatelab.uncertainty.stage import MEASURE_COLUMNS, ROUND_COLUMNS, UncertaintySettings, uncertainty_job

A, B = "A", "B"

# H(0.8, 0.2)/ln 2 = 0.500402/0.693147 = 0.721928; u_sys = (0.721928 + 1 + 0)/3
ENTROPY_4_1 = 0.721928
U_SYS_4_1 = 0.573976
# H(0.6, 0.4)/ln 2 = (0.6·0.510826 + 0.4·0.916291)/0.693147 = 0.970951; L = 0 (see below)
U_SYS_3_2 = (0.970951 + 1 + 0) / 3


def question(question_id, answers, *, correct, thread=0, task_type="multiple_choice", **extra):
    """One questions.parquet row; columns the stage does not read get plausible values."""
    n_agents = len(answers[0])
    row = {column: None for column in QUESTION_COLUMNS}
    row.update(
        question_id=question_id,
        dataset="toy",
        protocol="mad",
        kind="all_to_all",
        thread=thread,
        task_type=task_type,
        gold=A,
        n_agents=n_agents,
        participants=json.dumps([f"#{i}" for i in range(n_agents)]),
        final_answer=answers[-1][0],
        correct=correct,
        parse_failed=False,
        rounds_used=len(answers) - 1,
        stopped_early=False,
        ended_by="rounds",
        answers_by_round=json.dumps(answers),
    )
    row.update(extra)
    return row


def run(tmp_path, rows, **options):
    path = tmp_path / "questions.parquet"
    write_parquet_atomic(pd.DataFrame(rows, columns=QUESTION_COLUMNS), path)
    out = {
        "out_path": tmp_path / "out" / "mad.parquet",
        "rounds_out_path": tmp_path / "out" / "mad.rounds.parquet",
        "diagnostics_path": tmp_path / "out" / "mad.diagnostics.csv",
        "selective_path": tmp_path / "out" / "mad.selective.csv",
        "plot_path": tmp_path / "out" / "mad.selective.png",
    }
    uncertainty_job(path, **out, settings=UncertaintySettings(**options))
    return {
        "measures": pd.read_parquet(out["out_path"]),
        "rounds": pd.read_parquet(out["rounds_out_path"]),
        "diagnostics": pd.read_csv(out["diagnostics_path"]),
        "selective": pd.read_csv(out["selective_path"]),
        "plot": out["plot_path"],
    }


# Five agents, one thread each; failed debates end split, correct ones mostly unanimous.
SINGLE_THREAD = [
    # final 4-to-1: entropy 0.722, D = 1, L = 0 (dropping any agent leaves A ahead)
    question("q1", [[A, A, B, B, A], [A, A, A, B, B], [A, A, A, A, B]], correct=False),
    question("q2", [[A] * 5, [A] * 5, [A] * 5], correct=True),
    # final 3-to-2: dropping an A leaves A,A,B,B tied → first in agent order = A: L = 0
    question("q3", [[A, A, A, B, B], [A, A, A, B, B], [A, A, A, B, B]], correct=False),
    question("q4", [[B] * 5, [A] * 5, [A] * 5], correct=True),
    question("q5", [[A, A, A, A, B]] * 3, correct=True),
]


def test_udpo_measures_per_thread(tmp_path):
    measures = run(tmp_path, SINGLE_THREAD)["measures"].set_index("question_id")
    assert list(measures.reset_index().columns) == MEASURE_COLUMNS
    q1 = measures.loc["q1"]
    assert q1["entropy"] == pytest.approx(ENTROPY_4_1, abs=1e-6)
    assert (q1["disagreement"], q1["leave_one_out"]) == (1.0, 0.0)
    assert q1["u_sys"] == pytest.approx(U_SYS_4_1, abs=1e-6)
    # flips between rounds 1 → 2: agents 3 (B→A) and 4 (B→B: none) → 1 flip of N(T−1) = 5
    assert q1["flip_rate"] == pytest.approx(1 / 5)
    # round 0 → 2: agents 2, 3 (B→A) and 4 (A→B) revised → M = 3/5; u_intra = (.2 + .6)/2
    assert q1["belief_revision"] == pytest.approx(3 / 5)
    assert q1["u_intra"] == pytest.approx(0.4)
    assert measures.loc["q3", "u_sys"] == pytest.approx(U_SYS_3_2, abs=1e-6)
    for key in UDPO_KEYS:
        assert measures.loc["q2", key] == 0.0, key  # unanimity throughout
    assert measures.loc["q4", "belief_revision"] == 1.0  # everyone moved B → A
    q2 = measures.loc["q2"]
    assert (q2["dataset"], q2["protocol"], q2["thread"], q2["n_agents"], q2["rounds_used"]) == ("toy", "mad", 0, 5, 2)
    # One thread: every agent's distribution is a point mass, so aleatoric = 0 and total =
    # the entropy of the final answers in nats, H(0.8, 0.2) = 0.500402 for q1.
    assert (q1["k_threads"], q1["aleatoric"]) == (1, 0.0)
    assert q1["tu"] == pytest.approx(0.500402, abs=1e-6)
    assert q1["epistemic"] == pytest.approx(q1["tu"])


def test_failed_debates_are_more_uncertain(tmp_path):
    result = run(tmp_path, SINGLE_THREAD)
    diagnostics = result["diagnostics"].set_index("measure")
    assert diagnostics.index.tolist() == ["u_intra", "u_inter", "u_sys"]  # K = 1: no UMAD rows
    assert set(diagnostics["dataset"]) == {"toy"} and set(diagnostics["protocol"]) == {"mad"}
    u_sys = diagnostics.loc["u_sys"]
    assert (u_sys["n_failed"], u_sys["n_correct"]) == (2, 3)
    # failed: .573976, .656984 (mean .615480, (n−1)s² = 2·.041504² = .003445)
    # correct: 0, 0, .573976 (mean .191325, (n−1)s² = 2·.191325² + .382651² = .219633)
    # s_pooled = sqrt((.003445 + .219633)/3) = .272688; d = (.615480 − .191325)/.272688
    assert u_sys["mean_failed"] == pytest.approx(0.615480, abs=1e-5)
    assert u_sys["cohens_d"] == pytest.approx(1.555460, abs=1e-4)
    assert u_sys["welch_t"] > 0 and u_sys["pearson_r"] < 0


def test_selective_curves_and_plot(tmp_path):
    result = run(tmp_path, SINGLE_THREAD, selective_fractions=(0.4, 0.6, 1.0))
    selective = result["selective"]
    assert list(selective.columns) == ["dataset", "protocol", "measure", "fraction", "kept", "accuracy"]
    u_sys = selective[selective["measure"] == "u_sys"]
    # u_sys ascending (stable): q2 0 ✓, q4 0 ✓, q1 .574 ✗, q5 .574 ✓, q3 .657 ✗
    assert u_sys["kept"].tolist() == [2, 3, 5]
    assert u_sys["accuracy"].tolist() == pytest.approx([1.0, 2 / 3, 3 / 5])
    assert set(selective["measure"]) == {"u_intra", "u_inter", "u_sys"}

    from PIL import Image

    assert result["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(result["plot"]) as image:
        image.verify()


# Two agents, K = 2 threads. q1: thread 1 stops after round 1 (unanimous) and is carried
# forward to round 2. At rounds 1 and 2 agent 0 answers A in both threads (p = {A: 1}),
# agent 1 answers B and A (p = {A: .5, B: .5}); p̄ = {A: .75, B: .25}:
# total = H(.75, .25) = .75·0.287682 + .25·1.386294 = 0.562335
# aleatoric = (0 + ln 2)/2 = 0.346574; epistemic (JSD) = 0.562335 − 0.346574 = 0.215762
TOTAL_Q1, ALEATORIC_Q1, EPISTEMIC_Q1 = 0.562335, 0.346574, 0.215762
TWO_THREADS = [
    question("q1", [[B, B], [A, B], [A, B]], correct=False, thread=0),
    question("q1", [[B, B], [A, A]], correct=True, thread=1, stopped_early=True, ended_by="unanimous"),
    question("q2", [[A, A], [A, A]], correct=True, thread=0),
    question("q2", [[A, A], [A, A]], correct=True, thread=1),
    # agent 1 gives no answer in thread 0: p_1 = {<none>: .5, B: .5}, p_0 = {A: 1}. The
    # supports are disjoint, so JSD = ln 2 = 0.693147; aleatoric = ln 2 / 2.
    question("q3", [[A, None], [A, None]], correct=False, thread=0),
    question("q3", [[A, B], [A, B]], correct=False, thread=1),
]


def test_thread_decomposition_per_round(tmp_path):
    result = run(tmp_path, TWO_THREADS)
    rounds = result["rounds"]
    assert list(rounds.columns) == ROUND_COLUMNS
    q1 = rounds[rounds["question_id"] == "q1"].set_index("round")
    assert q1.index.tolist() == [0, 1, 2]  # the early-stopped thread is carried forward
    assert (q1["k_threads"] == 2).all() and (q1["n_agents"] == 2).all()
    assert q1.loc[0, ["total", "epistemic", "aleatoric"]].tolist() == [0.0, 0.0, 0.0]
    for round_ in (1, 2):
        assert q1.loc[round_, "total"] == pytest.approx(TOTAL_Q1, abs=1e-6)
        assert q1.loc[round_, "epistemic"] == pytest.approx(EPISTEMIC_Q1, abs=1e-6)
        assert q1.loc[round_, "aleatoric"] == pytest.approx(ALEATORIC_Q1, abs=1e-6)
    # total = epistemic + aleatoric on every row
    assert (rounds["total"] - rounds["epistemic"] - rounds["aleatoric"]).abs().max() < 1e-12
    assert (rounds.loc[rounds["question_id"] == "q2", "total"] == 0.0).all()
    q3_final = rounds[rounds["question_id"] == "q3"].iloc[-1]
    assert q3_final["epistemic"] == pytest.approx(math.log(2), abs=1e-9)
    assert q3_final["aleatoric"] == pytest.approx(math.log(2) / 2, abs=1e-9)

    measures = result["measures"]
    q1_threads = measures[measures["question_id"] == "q1"]
    assert q1_threads["thread"].tolist() == [0, 1]
    assert q1_threads["tu"].tolist() == pytest.approx([TOTAL_Q1] * 2, abs=1e-6)
    assert q1_threads["epistemic"].tolist() == pytest.approx([EPISTEMIC_Q1] * 2, abs=1e-6)
    assert q1_threads["rounds_used"].tolist() == [2, 1]
    assert (measures["k_threads"] == 2).all()

    diagnostics = result["diagnostics"]
    assert diagnostics["measure"].tolist() == ["u_intra", "u_inter", "u_sys", "tu", "epistemic", "aleatoric"]


def test_all_correct_gives_nan_statistics_not_a_crash(tmp_path):
    rows = [question(f"q{i}", [[A, A, B], [A, A, A]], correct=True) for i in range(3)]
    result = run(tmp_path, rows)
    diagnostics = result["diagnostics"]
    assert (diagnostics["n_failed"] == 0).all()
    for column in ("welch_t", "welch_p", "cohens_d", "pearson_r", "pearson_p"):
        assert diagnostics[column].isna().all(), column
    assert (result["selective"]["accuracy"] == 1.0).all()
    assert result["plot"].exists()


def test_entropy_norm_n_agents_is_passed_through(tmp_path):
    # final 4-to-1 with K = N = 5: H(0.8, 0.2)/ln 5 = 0.500402/1.609438 = 0.310918
    measures = run(tmp_path, SINGLE_THREAD[:1], entropy_norm="n_agents")["measures"]
    assert measures["entropy"].iloc[0] == pytest.approx(0.310918, abs=1e-6)


def test_entropy_norm_n_options_uses_each_questions_answer_set(tmp_path, caplog):
    # final 4-to-1 over 4 options: H(0.8, 0.2)/ln 4 = 0.500402/1.386294 = 0.360964;
    # the same split on an open-ended question (no answer set) falls back to K = 2 observed.
    rows = [
        question("mc", [[A] * 4 + [B]], correct=True, n_options=4),
        question("math", [[A] * 4 + [B]], correct=True, task_type="math", n_options=None),
    ]
    with caplog.at_level("WARNING", logger="debatelab"):
        measures = run(tmp_path, rows, entropy_norm="n_options")["measures"].set_index("question_id")
    assert measures.loc["mc", "entropy"] == pytest.approx(0.360964, abs=1e-6)
    assert measures.loc["math", "entropy"] == pytest.approx(ENTROPY_4_1, abs=1e-6)
    assert "1 of 2 trajectories have no answer set" in caplog.text


def test_entropy_norm_n_options_needs_the_column(tmp_path):
    path = tmp_path / "questions.parquet"
    frame = pd.DataFrame(SINGLE_THREAD, columns=QUESTION_COLUMNS).drop(columns=["n_options"])
    write_parquet_atomic(frame, path)
    with pytest.raises(DataFileError, match=r"questions\.parquet.*n_options"):
        uncertainty_job(path, *(tmp_path / f"o{i}" for i in range(5)), UncertaintySettings(entropy_norm="n_options"))


def test_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "questions.parquet"
    frame = pd.DataFrame(SINGLE_THREAD, columns=QUESTION_COLUMNS).drop(columns=["answers_by_round"])
    write_parquet_atomic(frame, path)
    with pytest.raises(DataFileError, match=r"questions\.parquet.*answers_by_round"):
        uncertainty_job(path, *(tmp_path / f"o{i}" for i in range(5)))


def test_zero_questions_names_the_file(tmp_path):
    with pytest.raises(DataFileError, match=r"questions\.parquet: no questions"):
        run(tmp_path, [])


@pytest.mark.parametrize(
    "answers_by_round, message",
    [("not json", "not JSON"), ("[]", "non-empty"), ('[["A", "A"]]', "n_agents = 3")],
)
def test_malformed_answers_name_file_and_question(tmp_path, answers_by_round, message):
    row = question("q9", [[A, A, A]], correct=True, answers_by_round=answers_by_round)
    with pytest.raises(DataFileError, match=rf"questions\.parquet: question q9 thread 0.*{message}"):
        run(tmp_path, [row])


def test_the_split_merges_equivalent_answers_as_the_protocols_do(tmp_path):
    """UMAD (Qiao et al., arXiv:2603.01221, App. C.1) merges semantically equivalent answers before the
    decomposition. K = 16 threads: agent 0 answers 8 × "2^{n}-1" and 8 × "2^n-1", agent 1 16 × "2^n-1",
    one answer to the protocols (`grading.AnswerClasses`): total = epistemic = aleatoric = 0. Unmerged,
    the split was 0.562 / 0.216 / 0.347 nats (the entropy of a 3:1 mixture; JSD; ln 2 / 2)."""
    rows = [
        question(
            "q1",
            [["2^{n}-1" if thread < 8 else "2^n-1", "2^n-1"]] * 2,
            correct=True,
            thread=thread,
            task_type="math",
            gold="2^n-1",
        )
        for thread in range(16)
    ]
    result = run(tmp_path, rows)
    parts = result["rounds"][["total", "epistemic", "aleatoric"]]
    assert (parts == 0.0).all().all(), parts
    # UDPO's measures count the same classes: nobody flips or disagrees
    assert (result["measures"][["u_intra", "u_inter"]] == 0.0).all().all()
