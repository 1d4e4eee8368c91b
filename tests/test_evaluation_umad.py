"""UMAD evaluation (Qiao et al., arXiv:2603.01221 §5.2, Table 1; §3, §5) on hand-made stage outputs whose cells are worked out by hand:
two questions, two threads, one debate round, a heterogeneous and a homogeneous untrained pair,
a UMAD- and an IPPO-trained pair, and a three-agent debate that is not the paper's. The claims'
values are worked out by hand too (two questions are fewer than claims.MIN_UNITS, so the bootstrapped
claims have no interval there); a generated pair on 40 and on 4 questions shows one effect holding and
the same effect undecided."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from debatelab import intervals
from debatelab.evaluation import stage
from debatelab.evaluation.claims import claims_frame
from debatelab.evaluation.paper_numbers import load_paper_numbers
from debatelab.evaluation.papers import umad
from debatelab.evaluation.run import ProtocolInfo, RunInfo, RunOutputs

GOLD = {"q1": "4", "q2": "7"}
RIGHT, WRONG = ("4", "7"), ("0", "0")


def protocol(name, participants, trained_runs=(), rounds=1):
    return ProtocolInfo(
        name=name,
        kind="all_to_all",
        rounds=rounds,
        threads=2,
        template="umad",
        participants=tuple(participants),
        models=("m",) * len(participants),
        adversarial=0,
        trained_runs=tuple(trained_runs),
        datasets=("ds1",),
    )


def debate(name, agents, answers):
    """answers[seat][round][thread] = (answer to q1, answer to q2); a tuple for one question is
    several calls of that round, of which the last counts."""
    rows = []
    for seat, by_round in enumerate(answers):
        for rnd, by_thread in enumerate(by_round):
            for thread, per_question in enumerate(by_thread):
                for q, given in zip(GOLD, per_question):
                    for call, answer in enumerate(given if isinstance(given, tuple) else (given,)):
                        rows.append(
                            {
                                "question_id": q,
                                "dataset": "ds1",
                                "protocol": name,
                                "thread": thread,
                                "round": rnd,
                                "agent": f"{agents[seat]}#{seat}",
                                "agent_index": seat,
                                "agent_config": agents[seat],
                                "call": call,
                                "answer": answer,
                                "correct": answer == GOLD[q],
                                "parse_failed": answer is None,
                                "completion_tokens": 10,
                                "finish_reason": "stop",
                            }
                        )
    return rows


def every_round(threads_answers, rounds=2):
    return [threads_answers] * rounds


def uq_rounds(name, per_round):
    """per_round[round][question] = (Sys-EU, Sys-AU); TU is their sum."""
    return [
        {
            "question_id": q,
            "dataset": "ds1",
            "protocol": name,
            "round": rnd,
            "k_threads": 2,
            "n_agents": 2,
            "total": eu + au,
            "epistemic": eu,
            "aleatoric": au,
        }
        for rnd, by_q in enumerate(per_round)
        for q, (eu, au) in by_q.items()
    ]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> RunOutputs:
    tmp_path = tmp_path_factory.mktemp("umad_outputs")
    turns = (
        # weak agent of the hetero pair: 0 % / 50 % right in threads 0 / 1 at round 0, 50 % / 50 % at round 1;
        # q2 of thread 0 answers twice in round 1, right then wrong: the wrong one counts
        debate(
            "pair",
            ["weak", "strong"],
            [
                [[("5", "8"), ("4", None)], [("4", ("7", "9")), ("4", None)]],
                every_round([RIGHT, RIGHT]),
            ],
        )
        + debate("pair_homo", ["weak", "weak"], [every_round([("4", "1"), ("4", "2")])] * 2)
        + debate("umad_pair", ["weak_umad", "strong_umad"], [every_round([RIGHT, RIGHT]), every_round([WRONG, WRONG])])
        + debate("ippo_pair", ["weak_ippo", "strong_ippo"], [every_round([WRONG, WRONG]), every_round([RIGHT, RIGHT])])
        + debate("mad3", ["weak", "strong", "weak"], [[[RIGHT, RIGHT]]] * 3)
    )
    rounds = uq_rounds(
        "pair", [{"q1": (0.6, 0.2), "q2": (0.6, 0.2)}, {"q1": (0.3, 0.1), "q2": (0.3, 0.4)}]
    ) + uq_rounds("pair_homo", [{"q1": (0.2, 0.3), "q2": (0.2, 0.3)}, {"q1": (0.1, 0.3), "q2": (0.1, 0.3)}])
    paths = {"turns": tmp_path / "turns.parquet", "rounds": tmp_path / "rounds.parquet"}
    pd.DataFrame(turns).to_parquet(paths["turns"])
    pd.DataFrame(rounds).to_parquet(paths["rounds"])
    # slopes worked by hand in test_claims: umad_run 0.12 per step, ippo_run −0.23 per step
    training = {
        "umad_run": pd.DataFrame(
            {
                "step": [0, 1, 2, 3, 4],
                "reward_mean": [0.5, 0.7, 0.6, 0.9, 1.0],
                "weight_mean": [1.0, 1.1, 0.95, 1.05, 1.0],
            }
        ),
        "ippo_run": pd.DataFrame(
            {"step": [0, 1, 2, 3], "reward_mean": [1.0, 0.6, 0.7, 0.2], "weight_mean": [1.0, 1.0, 1.0, 1.0]}
        ),
    }
    training_paths = {}
    for run, frame in training.items():
        training_paths[run] = tmp_path / f"{run}.parquet"
        frame.to_parquet(training_paths[run])
    protocols = [
        protocol("pair", ["weak", "strong"]),
        protocol("pair_homo", ["weak", "weak"]),
        protocol("pair_unmasked", ["weak", "strong"]),  # no outputs: only its row name is checked
        protocol("umad_pair", ["weak_umad", "strong_umad"], ["umad_run"]),
        protocol("ippo_pair", ["weak_ippo", "strong_ippo"], ["ippo_run"]),
        protocol("mad3", ["weak", "strong", "weak"], rounds=0),
    ]
    runs = {
        "umad_run": RunInfo("umad_run", "umad", {"umad": {"eta": 0.25, "alpha_au": 0.25}}),
        "ippo_run": RunInfo("ippo_run", "umad", {"umad": {"eta": 0.0, "alpha_au": 0.0}}),
    }
    return RunOutputs(
        experiment="umad_fixture",
        protocols={p.name: p for p in protocols},
        runs=runs,
        paper_datasets={"ds1": "gsm8k"},
        turn_paths=[paths["turns"]],
        round_paths=[paths["rounds"]],
        training_paths=training_paths,
    )


@pytest.fixture(scope="module")
def result(outputs):
    """One evaluation shared by the tests that only read it (its figures closed afterwards)."""
    built = umad.evaluate(outputs)
    yield built
    _close_figures(built)


def _close_figures(built) -> None:
    import matplotlib.pyplot as plt

    for fig in built.figures.values():
        plt.close(fig)


def _row(table, **keys):
    hit = table
    for k, v in keys.items():
        hit = hit[hit[k] == v]
    assert len(hit) == 1, f"{keys}: {len(hit)} rows"
    return hit.iloc[0]


def test_row_names_follow_the_config(outputs):
    labels = umad.row_labels(outputs)
    assert labels == {
        "pair": ("hetero", "Zero-Shot"),
        "pair_homo": ("homo", "Zero-Shot"),
        "pair_unmasked": ("hetero", "Zero-Shot [pair_unmasked]"),
        "umad_pair": ("hetero", "UMAD"),
        "ippo_pair": ("hetero", "IPPO"),
    }


def test_table1_accuracy_per_seat_and_turn(result):
    table = result.tables["table1"]
    hetero_t1 = _row(table, setting="hetero", method="Zero-Shot", turn=1)
    # weak agent: thread 0 gets 0 %, thread 1 50 %: mean 25, sample std 35.36
    assert hetero_t1["gsm8k A0"] == "25.0 ± 35.4"
    assert hetero_t1["gsm8k A1"] == "100.0 ± 0.0"
    # turn 2 = round 1; the last call of q2 (wrong) counts, not the first (right)
    hetero_t2 = _row(table, setting="hetero", method="Zero-Shot", turn=2)
    assert hetero_t2["gsm8k A0"] == "50.0 ± 0.0"
    assert hetero_t2["Avg A0"] == "50.0 ± 0.0"  # one dataset: Avg is that dataset
    assert _row(table, setting="homo", method="Zero-Shot", turn=1)["gsm8k A1"] == "50.0 ± 0.0"
    # one debate round: turns 1 and 2 only; the three-agent debate and the empty protocol have no row
    assert set(table["turn"]) == {1, 2}
    assert set(table["protocol"]) == {"pair", "pair_homo", "umad_pair", "ippo_pair"}
    assert list(table.columns[:7]) == ["setting", "method", "turn", "gsm8k A0", "gsm8k A1", "Avg A0", "Avg A1"]
    # the paper's order: homo before hetero, then turn, then Zero-Shot, IPPO, UMAD
    hetero = table[table["setting"] == "hetero"]
    assert list(hetero["method"])[:3] == ["Zero-Shot", "IPPO", "UMAD"]
    assert table["setting"].iloc[0] == "homo"

    cells = result.cells["table1"]
    a0 = _row(cells, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=1, metric="A0")
    assert a0["value"] == pytest.approx(25.0)
    assert a0["n"] == 4  # 2 questions x 2 threads
    assert a0["run_dataset"] == "ds1"
    assert _row(cells, setting="hetero", method="UMAD", dataset="avg", turn=2, metric="A1")["value"] == 0.0

    ablations = result.tables["table3"]
    assert set(ablations["method"]) == {"UMAD", "IPPO"}
    assert _row(ablations, method="UMAD", turn=2)["Avg A0"] == "100.0 ± 0.0"


def test_flip_transitions(result):
    flips = result.tables["flips"]
    weak = _row(flips, protocol="pair", seat="A0", from_round=0)
    # (q1,t0) W→C, (q2,t0) W→W, (q1,t1) C→C, (q2,t1) W→W
    assert (weak["C2C"], weak["C2W"], weak["W2C"], weak["W2W"]) == (25.0, 0.0, 25.0, 50.0)
    assert weak["flip_ratio"] == 25.0
    assert weak["answer_changed"] == 50.0  # "5"→"4" and "8"→"9"; "4"→"4" and none→none stay
    assert weak["n"] == 4 and weak["agent"] == "weak"
    strong = _row(flips, protocol="pair", seat="A1", from_round=0)
    assert strong["C2C"] == 100.0 and strong["flip_ratio"] == 0.0


def test_sys_uncertainty_per_round(result):
    sys_u = result.tables["sys_uncertainty"]
    last = _row(sys_u, protocol="pair", round=1)
    assert last["Sys-EU"] == pytest.approx(0.3)
    assert last["Sys-AU"] == pytest.approx(0.25)
    assert last["TU"] == pytest.approx(0.55)
    assert last["turn"] == 2 and last["n"] == 2 and last["dataset"] == "gsm8k"


def _claim(claims, number, statement_part, scope_part="", scope=None):
    hit = claims[
        (claims["claim"] == number)
        & claims["statement"].str.contains(statement_part, regex=False)
        & claims["scope"].str.contains(scope_part, regex=False)
    ]
    if scope is not None:
        hit = hit[hit["scope"] == scope]
    assert len(hit) == 1, (number, statement_part, scope_part, hit)
    return hit.iloc[0]


def test_claims(result):
    claims = claims_frame(result.claims)

    def claim(*args, **kwargs):
        return _claim(claims, *args, **kwargs)

    # identities: computed on every (question, round) row, no sampling: the interval is the value
    identity = claim("umad-1", "TU = Sys-EU + Sys-AU")
    assert identity["verdict"] == "holds" and identity["n"] == 8 and identity["expect"] == "<= 1e-09"
    assert identity["value"] <= 1e-9 and identity["low"] == identity["high"] == identity["value"]
    bound = claim("umad-2", "log N")
    # largest excess: Sys-EU − log 2 at the hetero pair's 0.6 nats
    assert bound["verdict"] == "holds" and bound["value"] == pytest.approx(0.6 - math.log(2)) and bound["n"] == 8
    # the bootstrapped claims below have two questions, fewer than claims.MIN_UNITS: each keeps its
    # value (worked out by hand) without an interval, "n/a (too few)"; the old percentile intervals on
    # two questions let "Sys-EU falls" and "initial Sys-EU" hold
    too_few = "n/a (too few)"
    # both questions fall by 0.3 nats
    falls = claim("umad-3", "Sys-EU falls", "pair (hetero")
    assert falls["verdict"] == too_few and falls["n"] == 2 and falls["expect"] == "< 0"
    assert falls["value"] == pytest.approx(-0.3) and math.isnan(falls["low"]) and math.isnan(falls["high"])
    assert "paired bootstrap over questions" in falls["interval"] and "at least 10" in falls["detail"]
    assert claim("umad-3", "Sys-EU falls", "umad_pair")["verdict"] == "n/a"
    initial = claim("umad-4", "initial Sys-EU")  # 0.6 vs 0.2 on both questions
    assert initial["verdict"] == too_few and initial["n"] == 2 and initial["value"] == pytest.approx(0.4)
    # the weak seat gains 50 points on q1 (1 of 2 threads right -> 2 of 2) and 0 on q2: +25
    # paired accuracy with two threads a question: the sign-flip test over questions, exact at any
    # n; one informative question of two has p = 1 (issue 71)
    gain = claim("umad-5", "raises the weaker agent")
    assert gain["value"] == pytest.approx(25.0) and "A0 (weak)" in gain["statistic"]
    assert gain["verdict"] == "inconclusive" and gain["n"] == 2 and gain["p"] == 1.0
    assert gain["interval"].startswith("paired sign-flip test over questions")
    versus = claim("umad-6", "by more in the hetero pair")  # the homo pair gains 0 on each question
    assert versus["value"] == pytest.approx(25.0) and versus["verdict"] == too_few
    flips = claim("umad-7", "weaker agent flips more", scope="pair")  # flips 1 of 2 on q1, 0 of 2 on q2
    assert flips["value"] == pytest.approx(25.0) and flips["verdict"] == "inconclusive" and flips["n"] == 2
    assert flips["p"] == 1.0
    assert claim("umad-8", "lies between", scope="pair")["verdict"] == "n/a"  # no homo pair of the strong agent
    assert claim("umad-7", "weaker agent flips more", scope="pair_unmasked")["verdict"] == "n/a"  # no outputs
    # per (protocol, question) point (Δacc points, ΔSys-AU): hetero q1 (25, -0.1), q2 (0, 0.2); homo q1, q2
    # (0, 0); a question's two points move together, so the units are the 2 questions: too few
    au = claim("umad-9", "Δaccuracy")
    expected = np.corrcoef([25, 0, 0, 0], [-0.1, 0.2, 0, 0])[0, 1]
    assert au["value"] == pytest.approx(expected) and au["n"] == 2 and au["expect"] == "< 0"
    assert au["verdict"] == too_few and "4 (protocol, question) points" in au["detail"]
    # the fixture's turns have no mean_token_entropy column (written before it was recorded): n/a, saying why
    entropy = claim("umad-10", "token entropy", "pair (hetero, Zero-Shot)")
    assert entropy["verdict"] == "n/a" and "mean_token_entropy is empty" in entropy["detail"]
    # reward 0.5, 0.7, 0.6, 0.9, 1.0 at steps 0..4: slope 1.2 / 10 = 0.12, on 5 steps: too few for the
    # bootstrap over steps (the old t interval said "holds")
    rises = claim("umad-12", "team reward rises", "umad_run")
    assert rises["value"] == pytest.approx(0.12) and rises["n"] == 5 and rises["verdict"] == too_few
    # reward 1.0, 0.6, 0.7, 0.2: slope −0.23 on four steps
    falling = claim("umad-12", "team reward rises", "ippo_run")
    assert falling["value"] == pytest.approx(-0.23) and falling["verdict"] == too_few
    weight = claim("umad-13", "confidence weight", "umad_run")
    assert weight["verdict"] == "holds" and weight["value"] == pytest.approx(math.log(1.1)) and weight["n"] == 5
    assert weight["low"] == weight["high"] == weight["value"] and weight["expect"] == "<= 0.5"
    # A0 right everywhere under UMAD, wrong under IPPO; two threads a question, so the sign-flip test
    # over the 2 questions: p = 2/4, however large the difference
    gpu = claim("umad-14", "UMAD > IPPO")
    assert gpu["value"] == pytest.approx(100.0) and gpu["verdict"] == "inconclusive" and gpu["n"] == 2
    assert gpu["p"] == pytest.approx(0.5)
    assert set(claims["verdict"]) <= {"holds", "fails", "inconclusive", "n/a", too_few}


def _gain_outputs(tmp_path, n_questions: int) -> RunOutputs:
    """A hetero pair (weak, strong) and the weak agent's homo pair on `n_questions` questions, 2 threads,
    1 round. Question q: the weak seat is right at T = 1 iff q % 4 == 0 and at T = 2 iff q % 4 != 3, so it
    gains 100 points on half the questions (q % 4 in {1, 2}) and 0 on the others: +50 on average; the
    strong seat is always right, the weak homo pair right iff q is even in both rounds (gains 0, never
    flips). The strong agent's homo pair is right at T = 1 and at T = 2 iff q is even: it flips on half."""

    def right(protocol, seat, rnd, q):
        if protocol == "pair":
            return seat == 1 or (q % 4 == 0 if rnd == 0 else q % 4 != 3)
        if protocol == "pair_homo_strong":
            return rnd == 0 or q % 2 == 0
        return q % 2 == 0

    rows = [
        {
            "question_id": f"g{q}",
            "dataset": "ds1",
            "protocol": protocol,
            "thread": thread,
            "round": rnd,
            "agent": f"{agents[seat]}#{seat}",
            "agent_index": seat,
            "agent_config": agents[seat],
            "call": 0,
            "answer": "1" if right(protocol, seat, rnd, q) else "2",
            "correct": right(protocol, seat, rnd, q),
            "parse_failed": False,
            "completion_tokens": 10,
            "finish_reason": "stop",
        }
        for protocol, agents in (
            ("pair", ("weak", "strong")),
            ("pair_homo", ("weak", "weak")),
            ("pair_homo_strong", ("strong", "strong")),
        )
        for q in range(n_questions)
        for thread in range(2)
        for rnd in range(2)
        for seat in range(2)
    ]
    path = tmp_path / f"turns_{n_questions}.parquet"
    pd.DataFrame(rows).to_parquet(path)
    protocols = [
        protocol("pair", ["weak", "strong"]),
        protocol("pair_homo", ["weak", "weak"]),
        protocol("pair_homo_strong", ["strong", "strong"]),
    ]
    return RunOutputs(
        experiment=f"gain_{n_questions}",
        protocols={p.name: p for p in protocols},
        runs={},
        paper_datasets={"ds1": "gsm8k"},
        turn_paths=[path],
    )


def _gain_claims(tmp_path, n_questions):
    built = umad.evaluate(_gain_outputs(tmp_path, n_questions))
    _close_figures(built)
    claims = claims_frame(built.claims)
    return (
        _claim(claims, "umad-5", "raises the weaker agent"),
        _claim(claims, "umad-6", "by more in the hetero"),
        _claim(claims, "umad-7", "weaker agent flips more"),
        _claim(claims, "umad-8", "lies between"),
    )


def test_a_large_gain_on_many_questions_holds(tmp_path):
    gain, versus, flips, between = _gain_claims(tmp_path, 40)
    # 40 questions, half gaining 100 points and half 0: SE = 50 / sqrt(40) = 7.9, interval about 50 ± 15.5
    assert versus["value"] == pytest.approx(50.0) and versus["n"] == 40 and versus["verdict"] == "holds"
    assert versus["low"] == pytest.approx(50 - 1.96 * 7.9, abs=4)
    assert versus["high"] == pytest.approx(50 + 1.96 * 7.9, abs=4)
    # paired accuracy: the sign-flip test over the 20 informative questions, all one way (p = 2 / 10,000,
    # Monte Carlo), its interval conditional on them: (20/40)(2π − 1) for π from Clopper-Pearson's
    # 0.025^(1/20) to 1, as the exact McNemar interval of b = 20, c = 0 (issue 71)
    assert gain["value"] == pytest.approx(50.0) and gain["n"] == 40 and gain["verdict"] == "holds"
    assert gain["low"] == pytest.approx(50 * (2 * 0.025 ** (1 / 20) - 1), abs=0.5)
    assert gain["high"] == pytest.approx(50.0) and gain["p"] == pytest.approx(2 / 10_000)
    # the weak seat flips on the questions it gains on, the strong one never
    assert flips["value"] == pytest.approx(50.0) and flips["verdict"] == "holds" and flips["n"] == 40
    # flip ratios: hetero (50 + 0) / 2 = 25 %, weak homo 0 %, strong homo 50 %: 25 points inside either end
    assert between["value"] == pytest.approx(25.0) and between["expect"] == ">= 0" and between["n"] == 40
    assert between["verdict"] == "holds" and "homo pairs 0.0% to 50.0%" in between["detail"]


def test_the_same_gain_on_four_questions_is_not_decided(tmp_path):
    """Questions 0..3 gain 0, 100, 100, 0 points: the point value is +50 (the old yes/no said "yes"), but
    four questions are fewer than claims.MIN_UNITS for the bootstrap: no interval, "n/a (too few)";
    the paired accuracy claims' sign-flip test has two informative questions, p = 2/4: inconclusive."""
    gain, versus, flips, _ = _gain_claims(tmp_path, 4)
    assert versus["value"] == pytest.approx(50.0) and versus["n"] == 4
    assert math.isnan(versus["low"]) and math.isnan(versus["high"]) and versus["verdict"] == "n/a (too few)"
    for row in (gain, flips):
        assert row["value"] == pytest.approx(50.0) and row["n"] == 4
        assert row["verdict"] == "inconclusive" and row["p"] == pytest.approx(0.5)


def test_claims_without_threads_or_training_are_untestable(outputs):
    single = RunOutputs(
        experiment="one_thread",
        protocols=outputs.protocols,
        runs=outputs.runs,
        paper_datasets={},
        turn_paths=outputs.turn_paths,
    )
    single.__dict__["uncertainty_rounds"] = outputs.uncertainty_rounds.assign(k_threads=1)
    built = umad.evaluate(single)
    _close_figures(built)
    claims = claims_frame(built.claims)
    au = claims[claims["claim"] == "umad-9"].iloc[0]
    assert au["verdict"] == "n/a" and "K > 1" in au["detail"]
    training = claims[claims["claim"] == "umad-12"]
    assert list(training["scope"]) == ["umad_run", "ippo_run"] and set(training["verdict"]) == {"n/a"}


def test_paper_numbers_cover_the_built_tables():
    published = load_paper_numbers("umad")
    assert set(published) == {"table1", "table3"}
    t1 = published["table1"]
    assert len(t1) == 18 * 6 * 2  # 18 rows, 5 datasets + Average, A0 and A1
    hetero_umad = t1[(t1["setting"] == "hetero") & (t1["method"] == "UMAD") & (t1["turn"] == 5)]
    assert hetero_umad.set_index(["dataset", "metric"]).loc[("avg", "A0"), "value"] == 66.5
    # the paper's Average is the unweighted mean of its five benchmarks
    per_dataset = t1[t1["dataset"] != "avg"].groupby(["setting", "method", "turn", "metric"])["value"].mean()
    avg = t1[t1["dataset"] == "avg"].set_index(["setting", "method", "turn", "metric"])["value"]
    assert (per_dataset - avg).abs().max() < 0.11
    t3 = published["table3"]
    assert _row(t3, method="Single-GRPO Pair", dataset="math500", turn=5, metric="A1")["value"] == 89.5


def test_evaluate_paper_writes_tables_comparison_and_claims(outputs, tmp_path):
    out = tmp_path / "out"
    stage.evaluate_paper("umad", outputs, out)
    for name in (
        "table1.csv",
        "table3.csv",
        "sys_uncertainty.csv",
        "flips.csv",
        "table1_vs_paper.csv",
        "table3_vs_paper.csv",
        "claims.csv",
        "sys_uncertainty.png",
        "flips.png",
    ):
        assert (out / name).exists(), name
    vs = pd.read_csv(out / "table1_vs_paper.csv")
    cell = _row(vs, setting="homo", method="Zero-Shot", dataset="gsm8k", turn=1, metric="A0")
    assert cell["paper_value"] == 83.3
    assert cell["run_value"] == 50.0
    assert cell["difference"] == pytest.approx(-33.3)
    assert cell["run_dataset"] == "ds1"
    # the homo pair's threads agree on both questions: 1 of 2 questions, Clopper-Pearson's exact interval
    exact = stats.binomtest(1, 2).proportion_ci(0.95, method="exact")
    assert (cell["run_low"], cell["run_high"]) == pytest.approx((100 * exact.low, 100 * exact.high), rel=1e-3)
    assert bool(cell["paper_in_interval"])
    assert pd.isna(_row(vs, setting="homo", method="Zero-Shot", dataset="gsm8k", turn=5, metric="A0")["run_value"])
    umad_t2 = _row(pd.read_csv(out / "table3_vs_paper.csv"), method="UMAD", dataset="avg", turn=2, metric="A0")
    assert umad_t2["run_value"] == 100.0 and umad_t2["paper_value"] == 57.2
    claims = pd.read_csv(out / "claims.csv")
    assert {f"umad-{i}" for i in range(1, 14)} <= set(claims["claim"])
    assert (claims["source"].str.match(r"UMAD (§|App\. )")).all()  # where the paper states each


@pytest.mark.parametrize("config", ["umad", "umad_cpu"])
def test_the_umad_configs_label_every_debate_with_the_papers_setting_and_method(config):
    """Rows of Table 1 / Table 3 from the shipped training configs: a trained pair keeps the setting of
    the agents it was trained from (two copies of one agent, each its own adapter, is the homogeneous
    pair), and each run is named by its η / α_au (or as two single-agent GRPO runs)."""
    from conftest import REPO_ROOT

    from debatelab.config import load_experiment

    exp = load_experiment(REPO_ROOT / f"config/experiments/{config}.yaml")
    labels = umad.row_labels(RunOutputs.from_experiment(exp))
    expected = {
        "umad": ("hetero", "Zero-Shot"),
        "umad_homo": ("homo", "Zero-Shot"),
        "trained_umad": ("hetero", "UMAD"),
        "trained_ippo": ("hetero", "IPPO"),
        "trained_intrinsic_only": ("hetero", "Intrinsic-only"),
        "trained_nll_only": ("hetero", "NLL-only"),
        "trained_umad_homo": ("homo", "UMAD"),
        "trained_ippo_homo": ("homo", "IPPO"),
        "single_grpo_pair": ("hetero", "Single-GRPO Pair"),
    }
    assert {p: labels[p] for p in expected if p in exp.protocols} == {
        p: v for p, v in expected.items() if p in exp.protocols
    }
    assert {"umad", "umad_homo", "trained_umad", "trained_ippo"} <= set(exp.protocols)


def test_flips_with_one_thread_are_paired_outcomes_with_the_exact_mcnemar_test(tmp_path):
    """umad-7 with K = 1: each question has one flip outcome per seat, a paired 0/1 difference, so
    the interval is the exact one conditional on the discordant questions (issue 43). The weaker
    seat flips on 4 of 100 questions and the stronger never (b = 4, c = 0): exact McNemar p = 0.125,
    inconclusive; the bootstrap over questions said it held (almost every resample keeps a flip)."""
    import dataclasses

    def right(seat, rnd, q):
        return seat == 1 or q >= 50 or (rnd == 1 and q < 4)

    rows = [
        {
            "question_id": f"f{q}",
            "dataset": "ds1",
            "protocol": "pair",
            "thread": 0,
            "round": rnd,
            "agent": f"{agent}#{seat}",
            "agent_index": seat,
            "agent_config": agent,
            "call": 0,
            "answer": "1" if right(seat, rnd, q) else "2",
            "correct": right(seat, rnd, q),
            "parse_failed": False,
            "completion_tokens": 10,
            "finish_reason": "stop",
        }
        for q in range(100)
        for rnd in range(2)
        for seat, agent in enumerate(("weak", "strong"))
    ]
    path = tmp_path / "turns_flips.parquet"
    pd.DataFrame(rows).to_parquet(path)
    pair = dataclasses.replace(protocol("pair", ["weak", "strong"]), threads=1)
    built = umad.evaluate(RunOutputs("flips", {"pair": pair}, {}, {"ds1": "gsm8k"}, turn_paths=[path]))
    _close_figures(built)
    flips = _claim(claims_frame(built.claims), "umad-7", "weaker agent flips more")
    assert flips["value"] == pytest.approx(4.0) and flips["n"] == 100
    assert flips["interval"].startswith("exact interval conditional on the 4 discordant of 100 questions")
    assert flips["p"] == pytest.approx(0.125) and flips["verdict"] == "inconclusive"


# --------------------------------------------------------------------------- 95 % intervals


def _weak_seat_rows(outputs: RunOutputs, protocol_name: str, rnd: int) -> pd.DataFrame:
    """The weak seat's (question, thread) answers of one protocol and round, as the stage wrote them."""
    turns = outputs.turns
    return turns[(turns["protocol"] == protocol_name) & (turns["round"] == rnd) & (turns["agent_index"] == 0)]


def _clustered_percent(values, questions) -> intervals.Estimate:
    return intervals.mean_estimate(np.asarray(values, dtype=float), clusters=np.asarray(questions)).scaled(100)


def _one_thread(outputs: RunOutputs, tmp_path) -> RunOutputs:
    """The same debates with thread 0 only: one answer per question and seat."""
    import dataclasses

    path = tmp_path / "turns_one_thread.parquet"
    outputs.turns[outputs.turns["thread"] == 0].to_parquet(path)
    protocols = {name: dataclasses.replace(info, threads=1) for name, info in outputs.protocols.items()}
    return RunOutputs("one_thread", protocols, {}, outputs.paper_datasets, turn_paths=[path])


def test_fixture_cells_on_two_questions_are_exact_where_threads_agree_and_else_none(result):
    """Two questions: a cell whose threads agree on each question is a count of questions with
    Clopper-Pearson's exact interval; one whose threads disagree somewhere would need the bootstrap,
    and two questions are fewer than intervals.MIN_UNITS: NaN. The columns are there either way."""
    cells = result.cells["table1"]
    assert {"low", "high"} <= set(cells.columns) and len(cells)
    exact = cells[cells["low"].notna()]
    assert len(exact) and cells["low"].isna().any()  # the hetero weak seat's threads differ at T = 1
    for row in exact.itertuples():
        ci = stats.binomtest(round(row.value / 50), 2).proportion_ci(0.95, method="exact")
        assert (row.low, row.high) == pytest.approx((100 * ci.low, 100 * ci.high))
    flips = result.tables["flips"]
    assert {"W2C_low", "flip_ratio_high"} <= set(flips.columns)
    sys_u = result.tables["sys_uncertainty"]
    assert {"Sys-EU_low", "Sys-AU_high", "TU_low"} <= set(sys_u.columns) and sys_u["Sys-EU_low"].isna().all()


def test_accuracy_cells_carry_the_interval_over_questions_threads_together(tmp_path):
    """40 questions, 2 threads answering alike: the weak seat is right at T = 1 on q % 4 == 0 (25 %).
    Each question's threads agree, so the share is a count of the 40 questions with its exact
    interval, wider than one that took the 80 answers as independent."""
    outputs = _gain_outputs(tmp_path, 40)
    built = umad.evaluate(outputs)
    _close_figures(built)
    cells = built.cells["table1"]
    expected = intervals.proportion(10, 40).scaled(100)
    unclustered = intervals.proportion(20, 80).scaled(100)
    assert expected.high - expected.low > unclustered.high - unclustered.low
    a0 = _row(cells, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=1, metric="A0")
    assert a0["value"] == 25.0 and a0["n"] == 80
    assert (a0["low"], a0["high"]) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert a0["low"] < 25.0 < a0["high"] and 10 < a0["low"] and a0["high"] < 45
    # an Avg over one dataset is that dataset's cell, interval included
    avg = _row(cells, setting="hetero", method="Zero-Shot", dataset="avg", turn=1, metric="A0")
    assert (avg["value"], avg["low"], avg["high"]) == (a0["value"], a0["low"], a0["high"])
    # T = 2: right unless q % 4 == 3 (75 %)
    expected = intervals.proportion(30, 40).scaled(100)
    a0 = _row(cells, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=2, metric="A0")
    assert (
        a0["value"] == 75.0 and a0["low"] == pytest.approx(expected.low) and a0["high"] == pytest.approx(expected.high)
    )
    assert a0["low"] < 75.0 < a0["high"]
    # the wide table carries the same bounds per seat
    wide = _row(umad.table1_cells(outputs), protocol="pair", dataset="gsm8k", turn=2)
    assert (wide["A0_low"], wide["A0_high"]) == (a0["low"], a0["high"])


def test_one_thread_accuracy_and_flip_shares_are_exact_binomial(tmp_path):
    """One thread: one 0/1 answer per question and seat, so Clopper-Pearson's interval (scipy's exact
    binomial): the weak seat is right on 10 of 40 questions at T = 1, 30 of 40 at T = 2, and turns
    wrong to right (W2C) on 20 of 40."""
    outputs = _one_thread(_gain_outputs(tmp_path, 40), tmp_path)
    built = umad.evaluate(outputs)
    _close_figures(built)
    cells = built.cells["table1"]

    def exact(k, n=40):
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
        return 100 * ci.low, 100 * ci.high

    for turn, right in ((1, 10), (2, 30)):
        a0 = _row(cells, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=turn, metric="A0")
        assert a0["value"] == 100 * right / 40 and a0["n"] == 40
        assert (a0["low"], a0["high"]) == pytest.approx(exact(right))
    flips = _row(built.tables["flips"], protocol="pair", seat="A0", from_round=0)
    assert flips["W2C"] == 50.0 and (flips["W2C_low"], flips["W2C_high"]) == pytest.approx(exact(20), abs=0.01)
    assert (flips["flip_ratio_low"], flips["flip_ratio_high"]) == pytest.approx(exact(20), abs=0.01)
    assert (flips["C2C_low"], flips["C2C_high"]) == pytest.approx(exact(10), abs=0.01)
    # the strong seat never flips: 0 of 40, the exact interval still reaches 8.8 %
    strong = _row(built.tables["flips"], protocol="pair", seat="A1", from_round=0)
    assert strong["C2W"] == 0.0 and strong["C2W_low"] == 0.0
    assert strong["C2W_high"] == pytest.approx(exact(0)[1], abs=0.01)


def test_flip_shares_with_threads_are_over_questions(tmp_path):
    """Two threads: the shares of the weak seat's 80 transitions, over the 40 questions: where the
    threads agree on every question, the exact interval of a count of questions (20 of 40 turn wrong
    to right); where one thread differs somewhere, the BCa bootstrap over questions, a question's two
    threads drawn together."""
    outputs = _gain_outputs(tmp_path, 40)
    built = umad.evaluate(outputs)
    _close_figures(built)
    expected = intervals.proportion(20, 40).scaled(100)
    flips = _row(built.tables["flips"], protocol="pair", seat="A0", from_round=0)
    assert flips["W2C"] == 50.0 and flips["n"] == 80
    # the table is rounded to 2 decimals
    assert (flips["W2C_low"], flips["W2C_high"]) == pytest.approx((expected.low, expected.high), abs=0.006)
    assert flips["W2C_low"] < 50.0 < flips["W2C_high"]

    turns = outputs.turns
    # thread 1 of the weak seat now wrong at T = 2 on every 8th question: its threads differ there
    differ = (turns["protocol"] == "pair") & (turns["agent_index"] == 0) & (turns["round"] == 1)
    differ &= (turns["thread"] == 1) & turns["question_id"].str[1:].astype(int).mod(8).eq(1)
    path = tmp_path / "turns_differ.parquet"
    turns.assign(correct=turns["correct"] & ~differ, answer=turns["answer"].where(~differ, "2")).to_parquet(path)
    noisy = RunOutputs("differ", outputs.protocols, {}, outputs.paper_datasets, turn_paths=[path])
    built = umad.evaluate(noisy)
    _close_figures(built)
    before, after = _weak_seat_rows(noisy, "pair", 0), _weak_seat_rows(noisy, "pair", 1)
    joined = before.merge(after, on=["question_id", "thread"], suffixes=("", "_next"))
    wrong_to_right = ~joined["correct"] & joined["correct_next"]
    clustered = _clustered_percent(wrong_to_right, joined["question_id"])
    flips = _row(built.tables["flips"], protocol="pair", seat="A0", from_round=0)
    assert flips["W2C"] == pytest.approx(100 * wrong_to_right.mean(), abs=0.006) and clustered.n == 40
    assert (flips["W2C_low"], flips["W2C_high"]) == pytest.approx((clustered.low, clustered.high), abs=0.006)


def test_sys_uncertainty_means_carry_the_bca_interval_over_questions(tmp_path):
    """12 questions of the hetero pair, Sys-EU q / 10 and Sys-AU 0.2 nats at round 0: each mean has the
    BCa bootstrap interval over the questions; a constant has none wider than itself."""
    outputs = _gain_outputs(tmp_path, 40)
    questions = [f"g{q}" for q in range(12)]
    epistemic = np.arange(12) / 10
    rounds = pd.DataFrame(
        {
            "question_id": questions,
            "dataset": "ds1",
            "protocol": "pair",
            "round": 0,
            "k_threads": 2,
            "n_agents": 2,
            "total": epistemic + 0.2,
            "epistemic": epistemic,
            "aleatoric": 0.2,
        }
    )
    path = tmp_path / "rounds.parquet"
    rounds.to_parquet(path)
    with_rounds = RunOutputs(
        "rounds", outputs.protocols, {}, outputs.paper_datasets, turn_paths=outputs.turn_paths, round_paths=[path]
    )
    sys_u = _row(umad.sys_uncertainty(with_rounds), protocol="pair", round=0)
    expected = intervals.mean_estimate(epistemic, clusters=questions)
    assert sys_u["Sys-EU"] == pytest.approx(0.55) and sys_u["n"] == 12
    assert (sys_u["Sys-EU_low"], sys_u["Sys-EU_high"]) == (pytest.approx(expected.low), pytest.approx(expected.high))
    assert sys_u["Sys-EU_low"] < 0.55 < sys_u["Sys-EU_high"]
    assert (sys_u["Sys-AU_low"], sys_u["Sys-AU_high"]) == pytest.approx((0.2, 0.2))
    total = intervals.mean_estimate(epistemic + 0.2, clusters=questions)
    assert (sys_u["TU_low"], sys_u["TU_high"]) == (pytest.approx(total.low), pytest.approx(total.high))


def test_avg_over_several_datasets_has_the_interval_of_its_own_average(tmp_path):
    """The Avg of two datasets is the unweighted mean of their accuracies: ds1's weak seat 25 % on 40
    questions, ds2's 50 % on 20, so Avg 37.5 where the pooled share is 33.3. Its interval is the BCa
    bootstrap over the 60 (dataset, question) units of that average (each resample's per-dataset
    accuracies, then their mean), computed here by hand from the questions' outcomes; it used to be
    NaN. Each dataset's own cell keeps its interval."""
    outputs = _gain_outputs(tmp_path, 40)
    turns = outputs.turns
    second = turns[turns["question_id"].isin([f"g{q}" for q in range(20)])].assign(dataset="ds2")
    weak_first = (second["protocol"] == "pair") & (second["agent_index"] == 0) & (second["round"] == 0)
    even = second["question_id"].str[1:].astype(int) % 2 == 0
    second.loc[weak_first, "correct"] = even[weak_first]
    path = tmp_path / "turns_two_datasets.parquet"
    pd.concat([turns, second], ignore_index=True).to_parquet(path)
    two = RunOutputs("two", outputs.protocols, {}, {"ds1": "gsm8k", "ds2": "math500"}, turn_paths=[path])
    built = umad.evaluate(two)
    _close_figures(built)
    cells = built.cells["table1"]
    for dataset, share in (("gsm8k", 25.0), ("math500", 50.0)):
        a0 = _row(cells, setting="hetero", method="Zero-Shot", dataset=dataset, turn=1, metric="A0")
        assert a0["value"] == share and a0["low"] < share < a0["high"]
    avg = _row(cells, setting="hetero", method="Zero-Shot", dataset="avg", turn=1, metric="A0")
    assert avg["value"] == 37.5 and avg["run_dataset"] == "ds1+ds2"
    # by hand: the units in sorted (dataset, question) order, each with its outcome (both threads agree)
    weak = pd.concat([turns, second])
    weak = weak[(weak["protocol"] == "pair") & (weak["agent_index"] == 0) & (weak["round"] == 0)]
    units = weak.groupby(["dataset", "question_id"])["correct"].first().reset_index()
    in_ds2, correct = (units["dataset"] == "ds2").to_numpy(), units["correct"].to_numpy(float)

    def average(index):
        second_share = (correct[index] * in_ds2[index]).sum(axis=-1) / in_ds2[index].sum(axis=-1)
        first_share = (correct[index] * ~in_ds2[index]).sum(axis=-1) / (~in_ds2[index]).sum(axis=-1)
        return 100 * (first_share + second_share) / 2

    expected = intervals.bootstrap(average, len(units), vectorized=True)
    assert expected.value == pytest.approx(37.5)
    assert (avg["low"], avg["high"]) == pytest.approx((expected.low, expected.high), rel=1e-9)
    assert avg["low"] < 37.5 < avg["high"]


def test_vs_paper_rows_carry_the_run_interval_and_judge_the_papers_value(tmp_path):
    """table1_vs_paper.csv: the hetero Zero-Shot weak seat on 40 questions, 25 % at T = 1 (the paper's
    82.8 lies outside its interval) and 75 % at T = 2 (the paper's 85.6 inside, about 60 to 87.5)."""
    outputs = _gain_outputs(tmp_path, 40)
    out = tmp_path / "out"
    _close_figures(stage.evaluate_paper("umad", outputs, out))
    vs = pd.read_csv(out / "table1_vs_paper.csv")
    for turn, rnd, paper, inside in ((1, 0, 82.8, False), (2, 1, 85.6, True)):
        rows = _weak_seat_rows(outputs, "pair", rnd)
        expected = intervals.proportion(int(rows["correct"].sum()) // 2, 40).scaled(100)  # threads agree
        cell = _row(vs, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=turn, metric="A0")
        assert cell["paper_value"] == paper
        # the CSV keeps 4 significant digits
        assert (cell["run_low"], cell["run_high"]) == pytest.approx((expected.low, expected.high), rel=1e-3)
        assert cell["run_low"] < cell["run_value"] < cell["run_high"]
        assert bool(cell["paper_in_interval"]) is inside
    # the single-dataset Avg is judged too; a turn the run lacks has neither value nor interval
    avg = _row(vs, setting="hetero", method="Zero-Shot", dataset="avg", turn=2, metric="A0")
    assert avg["run_value"] == 75.0 and np.isfinite(avg["run_low"]) and not pd.isna(avg["paper_in_interval"])
    missing = _row(vs, setting="hetero", method="Zero-Shot", dataset="gsm8k", turn=5, metric="A0")
    assert pd.isna(missing["run_value"]) and pd.isna(missing["run_low"]) and pd.isna(missing["paper_in_interval"])
