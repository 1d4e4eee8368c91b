"""UDPO's claims (Tang et al., arXiv:2602.07186 §3.2, §5) with their 95 % intervals and verdicts, on hand-made uncertainty-stage
outputs: a large fixture where the claims hold, few questions where the point value points the
claimed way but the interval can't tell, and intervals checked against their formulas worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from debatelab import intervals, metrics
from debatelab.config import load_experiment
from debatelab.evaluation import (
    ProtocolInfo,
    RunInfo,
    RunOutputs,
    build_paper,
    compare_with_paper,
    load_paper_numbers,
)
from debatelab.evaluation.papers import udpo, udpo_claims

REPO_ROOT = Path(__file__).resolve().parents[1]

Z = 1.959963984540054  # z_.975


def _protocol(name, rounds=2, adversarial=0, runs=(), n_seats=3):
    seats = tuple("abcde"[:n_seats])
    return ProtocolInfo(
        name=name,
        kind="all_to_all",
        rounds=rounds,
        threads=1,
        template="du",
        participants=seats,
        models=("m",) * n_seats,
        adversarial=adversarial,
        trained_runs=tuple(runs),
        datasets=("gsm_symbolic",),
        adversarial_seats=tuple(i >= n_seats - adversarial for i in range(n_seats)),
    )


def _rows(protocol, correct, u_sys, first=0):
    """One trajectory per question q{first}, q{first+1}, ...; U_intra = U_sys / 2, U_inter = U_sys / 3."""
    return [
        {
            "question_id": f"q{first + i}",
            "dataset": "gsm_symbolic",
            "protocol": protocol,
            "thread": 0,
            "correct": bool(c),
            "u_intra": u / 2,
            "u_inter": u / 3,
            "u_sys": u,
        }
        for i, (c, u) in enumerate(zip(correct, u_sys))
    ]


def _round0_rows(protocol, n_questions):
    """Round-0 turns where seat 0 (honest) is right on every question: every debate had a correct agent."""
    return [
        {
            "question_id": f"q{i}",
            "dataset": "gsm_symbolic",
            "protocol": protocol,
            "thread": 0,
            "round": 0,
            "agent_index": seat,
            "correct": seat == 0,
        }
        for i in range(n_questions)
        for seat in range(3)
    ]


def _outputs(protocols, rows, training=None, turns=None, runs=None) -> RunOutputs:
    runs = runs or {"udpo": RunInfo("udpo", "udpo", {"udpo": {"ablate": []}})}
    outputs = RunOutputs("fixture", {p.name: p for p in protocols}, runs, {"gsm_symbolic": "gsm8k"})
    outputs.__dict__.update(uncertainty=pd.DataFrame(rows), training=training or {}, turns=pd.DataFrame(turns or []))
    return outputs


def _claim(claims, number, start=""):
    found = [c for c in claims if c.claim == number and c.statement.startswith(start)]
    assert found, (number, start)
    return found[0]


def _large():
    """200 questions, one trajectory each. MAD is right on the even questions, with U_sys in
    [.1, .3] there and in [.5, .9] on its failures; UDPO is right on those and on every i ≡ 1 (mod 4):
    150 of 200, 50 questions where only UDPO is right and none where only MAD is."""
    n = 200
    i = np.arange(n)
    mad_correct = i % 2 == 0
    level = (i // 2) % 5 / 4
    u_sys = np.where(mad_correct, 0.1 + 0.2 * level, 0.5 + 0.4 * level)
    udpo_correct = mad_correct | (i % 4 == 1)
    rows = _rows("mad_n3", mad_correct, u_sys) + _rows("udpo_n3", udpo_correct, np.full(n, 0.1))
    turns = _round0_rows("mad_n3", n) + _round0_rows("udpo_n3", n)
    protocols = [_protocol("mad_n3"), _protocol("udpo_n3", runs=("udpo",))]
    return _outputs(protocols, rows, turns=turns), u_sys, mad_correct


def test_large_effects_hold_with_closed_form_intervals_worked_by_hand():
    outputs, u_sys, correct = _large()
    claims = build_paper("udpo", outputs).claims

    # udpo-1: Cohen's d of U_sys, failures over successes, with a BCa bootstrap over the trajectories
    # (one a question; the interval itself is checked against scipy in tests/test_verdicts.py)
    fail, ok = u_sys[~correct], u_sys[correct]
    pooled = math.sqrt((((fail - fail.mean()) ** 2).sum() + ((ok - ok.mean()) ** 2).sum()) / (200 - 2))
    d = (fail.mean() - ok.mean()) / pooled  # (0.7 − 0.2) / 0.0888 ≈ 5.6
    gap = _claim(claims, "udpo-1", "failures have higher u_sys")
    assert gap.value == pytest.approx(d) and gap.low < d < gap.high and gap.low > 3
    assert gap.verdict == "holds" and gap.n == 200 and gap.expect == "> 0" and "BCa" in gap.interval

    # udpo-2: point-biserial r, BCa bootstrap over trajectories (not Fisher's z: a 0/1 variable)
    r = stats.pearsonr(u_sys, correct.astype(float)).statistic
    pb = _claim(claims, "udpo-2", "u_sys correlates")
    assert pb.value == pytest.approx(r) and r < -0.9 and pb.low < r < pb.high < -0.8
    assert pb.verdict == "holds" and pb.expect == "< 0" and pb.n == 200 and pb.p < 0.001

    # udpo-4: the least uncertain half is the 100 successes: 100 % against 50 % overall
    selective = _claim(claims, "udpo-4")
    assert selective.value == pytest.approx(50.0) and selective.verdict == "holds" and selective.low > 30

    # udpo-10 (GPU): UDPO − MAD = +25 points, paired correctness: 50 discordant questions, all UDPO's;
    # the exact interval maps Clopper-Pearson of 50/50, [0.025^(1/50), 1], by 100 · (50/200)(2p − 1)
    better = _claim(claims, "udpo-10", "UDPO is more accurate than MAD")
    assert better.value == pytest.approx(25.0) and better.n == 200 and better.verdict == "holds"
    assert (better.low, better.high) == pytest.approx((25 * (2 * 0.025 ** (1 / 50) - 1), 25.0))
    assert "discordant" in better.interval and "McNemar" in better.interval
    assert better.p == pytest.approx(2 * 0.5**50)
    # every debate had a right honest agent in round 0: MAD collapsed on its 100 failures (50 %),
    # UDPO on its 50 (25 %): −25 points, paired over the same 200 questions
    collapse = _claim(claims, "udpo-11", "UDPO collapses less")
    assert collapse.value == pytest.approx(-25.0) and collapse.verdict == "holds" and collapse.high < -15


def test_few_questions_point_the_claimed_way_but_are_inconclusive():
    """Four questions: UDPO right on one more than MAD (+25 points; the point value said "yes"
    before intervals), and a three-step training log whose U_sys falls (slope −0.15)."""
    rows = _rows("mad_n3", [True, True, False, False], [0.1, 0.3, 0.7, 0.9]) + _rows(
        "udpo_n3", [True, True, True, False], [0.1, 0.2, 0.3, 0.4]
    )
    training = {"udpo": pd.DataFrame({"step": [1, 2, 3], "r_sys": [0.2, 0.4, 0.5]})}
    outputs = _outputs([_protocol("mad_n3"), _protocol("udpo_n3", runs=("udpo",))], rows, training=training)
    claims = build_paper("udpo", outputs).claims

    better = _claim(claims, "udpo-10", "UDPO is more accurate than MAD")
    # one discordant question (q2, UDPO's): Clopper-Pearson of 1/1 is [0.025, 1], mapped by
    # 100 · (1/4)(2p − 1) to [−23.75, 25]; McNemar p = 1
    assert better.value == pytest.approx(25.0) and better.verdict == "inconclusive" and better.p == 1.0
    assert (better.low, better.high) == pytest.approx((-23.75, 25.0))
    assert better.holds is None and better.n == 4

    # U = 0.8, 0.6, 0.5 at steps 1, 2, 3: slope −0.15, but 3 steps are fewer than claims.MIN_UNITS
    trend = _claim(claims, "udpo-9")
    assert trend.value == pytest.approx(-0.15) and math.isnan(trend.low)
    assert trend.verdict == "n/a (too few)" and trend.n == 3 and trend.expect == "< 0"


def test_a_difference_the_same_on_every_question_has_a_zero_width_paired_interval():
    """udpo-8: standard MAD at T = 1 and T = 2 on the same twelve questions, U_sys lower by exactly 0.1
    on each: every paired resample gives −0.1, so twelve questions (≥ claims.MIN_UNITS) decide the
    claim. Both protocols pool into the udpo-1 to udpo-3 rows: two trajectories per question, resampled
    together."""
    rows = _rows("mad_t1", [True, False, False] * 4, [0.5, 0.6, 0.9] * 4) + _rows(
        "mad_t2", [True, True, False] * 4, [0.4, 0.5, 0.8] * 4
    )
    claims = build_paper("udpo", _outputs([_protocol("mad_t1", rounds=1), _protocol("mad_t2")], rows)).claims
    fewer = _claim(claims, "udpo-8")
    assert fewer.statistic == "U_sys(T=2) − U_sys(T=1)" and fewer.n == 12
    assert (fewer.value, fewer.low, fewer.high) == pytest.approx((-0.1, -0.1, -0.1))
    assert fewer.verdict == "holds" and "paired" in fewer.interval
    gap = _claim(claims, "udpo-1", "failures have higher u_sys")
    assert gap.n == 12 and "cluster bootstrap over questions" in gap.interval


def test_methods_on_different_questions_are_compared_over_the_union_of_their_questions():
    rows = _rows("mad_n3", [True, False, False, False], [0.2] * 4) + _rows(
        "udpo_n3", [True, True, True, False], [0.1] * 4, first=2
    )
    claims = build_paper("udpo", _outputs([_protocol("mad_n3"), _protocol("udpo_n3", runs=("udpo",))], rows)).claims
    better = _claim(claims, "udpo-10", "UDPO is more accurate than MAD")
    assert better.value == pytest.approx(50.0) and better.n == 6  # q0..q5, q2 and q3 shared
    assert "union" in better.interval and "2 shared" in better.interval and "McNemar" not in better.interval


def test_attack_claims_compare_the_ends_of_m_on_the_same_questions():
    """udpo-5, udpo-6: m = 0, 1, 2 on twelve questions; accuracy 75 → 50 → 0 %, U_sys up by 0.3 on every question."""
    rows = (
        _rows("mad_n3", [True, True, True, False] * 3, [0.1, 0.2, 0.3, 0.4] * 3)
        + _rows("attack_m1", [True, True, False, False] * 3, [0.2, 0.3, 0.4, 0.5] * 3)
        + _rows("attack_m2", [False] * 12, [0.4, 0.5, 0.6, 0.7] * 3)
    )
    protocols = [_protocol("mad_n3"), _protocol("attack_m1", adversarial=1), _protocol("attack_m2", adversarial=2)]
    claims = build_paper("udpo", _outputs(protocols, rows)).claims
    falls = _claim(claims, "udpo-5", "accuracy falls")
    # 9 discordant questions, all lost under m = 2: Clopper-Pearson of 0/9 is [0, 1 − 0.025^(1/9)],
    # mapped by 100 · (9/12)(2p − 1); McNemar p = 2 · 0.5⁹
    assert falls.statistic == "acc(m=2) − acc(m=0), points" and falls.value == pytest.approx(-75.0)
    assert (falls.low, falls.high) == pytest.approx((-75.0, 75 * (2 * (1 - 0.025 ** (1 / 9)) - 1)))
    assert falls.high < 0 and falls.n == 12 and "m=1: acc 50.0" in falls.detail and falls.verdict == "holds"
    rises = _claim(claims, "udpo-6", "U_sys rises")
    assert (rises.value, rises.low, rises.high) == pytest.approx((0.3, 0.3, 0.3)) and rises.verdict == "holds"


def test_row_weights_equal_repeating_the_rows_a_resample_draws():
    """The cluster bootstrap weighs rows by how often their question was drawn: each statistic on
    weights (or on weighted sums) equals the plain statistic on the rows repeated that often."""
    rng = np.random.default_rng(1)
    values = rng.random(12)
    correct = rng.random(12) < 0.5
    weights = rng.integers(0, 4, 12).astype(float)
    repeated = np.repeat(np.arange(12), weights.astype(int))
    # Cohen's d and r from per-row sums (claims.sums_bootstrap's statistics, which the clustered
    # claims use): weighted sums are the sums over the repeated rows
    f, s = (~correct).astype(float), correct.astype(float)
    d_columns = np.column_stack([f, f * values, f * values**2, s, s * values, s * values**2])
    assert intervals._d_of_sums((d_columns * weights[:, None]).sum(axis=0)) == pytest.approx(
        metrics.cohens_d(values[repeated][~correct[repeated]], values[repeated][correct[repeated]])
    )
    other = rng.random(12)

    def r_columns(x, y):
        return np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])

    r_sums = (r_columns(values, other) * weights[:, None]).sum(axis=0)
    assert intervals._r_of_sums(r_sums) == pytest.approx(np.corrcoef(values[repeated], other[repeated])[0, 1])
    constant = r_columns(np.full(12, 0.1), other).sum(axis=0)  # Σx² − (Σx)²/n is float residue, not spread
    assert math.isnan(intervals._r_of_sums(constant))
    # selective prediction on ranked rows: the lowest half of the repeated rows against all of them
    ranked = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    w = np.array([2.0, 0.0, 1.0, 3.0, 1.0, 2.0])  # repeated: 1 1 0 1 1 1 | 0 0 0 -> the lowest 5 of 9
    curve = metrics.selective_prediction(np.arange(9), np.repeat(ranked, w.astype(int)).astype(bool), [0.5, 1.0])
    assert udpo_claims._weighted_selective_gain(ranked, w, 0.5) == pytest.approx(
        100 * (curve["accuracy"].iloc[0] - curve["accuracy"].iloc[1])
    )
    assert udpo_claims._weighted_selective_gain(ranked, w, 0.5) == pytest.approx(100 * (4 / 5 - 5 / 9))


def test_table6_gives_each_correlation_its_bootstrap_interval_over_questions():
    """Table 6's r of U_sys with correctness carries a 95 % interval and the p it inverts: the BCa
    bootstrap over questions (here one trajectory each, so scipy's paired BCa over rows, same seed
    and resamples), not Pearson's p alone, which takes a question's trajectories as independent."""
    outputs, u_sys, mad_correct = _large()
    table = build_paper("udpo", outputs).tables["table6"]
    row = table[(table["condition"] == "natural") & (table["measure"] == "u_sys")].iloc[0]
    # the bootstrap numbers questions in their sorted order: the reference resamples them so too
    mad = pd.DataFrame(outputs.uncertainty).query("protocol == 'mad_n3'").sort_values("question_id")
    x, y = mad["u_sys"].to_numpy(float), mad["correct"].to_numpy(float)
    assert row["r"] == pytest.approx(stats.pearsonr(x, y).statistic, abs=5e-4)  # the table rounds to 3 places
    ref = stats.bootstrap(
        (x, y),
        lambda a, b: stats.pearsonr(a, b).statistic,
        paired=True,
        vectorized=False,
        n_resamples=2000,
        method="BCa",
        rng=0,
    ).confidence_interval
    assert (row["low"], row["high"]) == pytest.approx((ref.low, ref.high), abs=5e-4)
    assert row["high"] < 0 and row["p"] < 0.05 and (row["n"], row["questions"]) == (200, 200)


def test_the_drop_under_attack_is_exact_where_threads_agree_and_bootstrapped_where_they_differ():
    """Table 7's drop on 12 questions, two threads each: where every question's threads agree, both
    sides count questions and the interval is the exact paired one; once they differ, the paired
    bootstrap of per-question thread means."""
    from debatelab.evaluation.papers.udpo import _drop_estimate

    questions = np.tile([f"q{i:02d}" for i in range(12)], 2)
    unattacked = np.tile(np.arange(12) % 4 != 0, 2)  # right on 9
    attacked = np.tile(np.arange(12) % 2 == 0, 2)  # right on 6
    frame = pd.DataFrame(
        {
            "protocol": ["attacked"] * 24 + ["plain"] * 24,
            "question_id": np.concatenate([questions, questions]),
            "correct": np.concatenate([attacked, unattacked]),
        }
    )
    est = _drop_estimate(frame, "attacked", "plain")
    exact = intervals.paired_accuracy_difference(attacked[:12], unattacked[:12]).scaled(100)
    assert (est.value, est.low, est.high) == pytest.approx((-25.0, exact.low, exact.high))
    differ = frame.assign(correct=frame["correct"] & ~((frame.index == 0) & (frame["protocol"] == "attacked")))
    assert "bootstrap" in _drop_estimate(differ, "attacked", "plain").method


#: Table 5 (Tang et al., arXiv:2602.07186 App. C.2): every method at T = 3 / 5 / 10, N = 5, on each dataset
TABLE5_METHODS = ("MAD", "MAPPO", "RMAAC", "UDPO")
TABLE5_METRICS = ("accuracy", "u_intra", "u_inter", "u_sys")


def test_table5_gives_mappo_and_rmaac_their_rounds_and_carries_the_us_beside_the_paper():
    """Table 5's MAPPO and RMAAC columns come from their own agents' debates at each T (method from the
    training run, T from the protocol's rounds), and each cell carries accuracy and the three U's,
    paired in `table5_vs_paper` with the paper's cell of the same method, T and metric. The other
    tables and Fig. 5 stay at the paper's main T = 5, not Table 5's T = 3 / 10."""
    spec = {  # protocol: (T, training run, correct on q0..q3, U_sys)
        "mad_n5_t3": (3, (), [True, False, False, False], 0.6),
        "mad_n5": (5, (), [True, True, False, False], 0.5),
        "mad_n5_t10": (10, (), [True, True, True, False], 0.7),
        "mappo_n5_t3": (3, ("mappo",), [True, True, True, False], 0.3),
        "mappo_n5": (5, ("mappo",), [True, True, True, True], 0.2),
        "rmaac_n5_t10": (10, ("rmaac",), [True, True, False, True], 0.4),
        "udpo_n5_t10": (10, ("udpo",), [True, True, True, True], 0.1),
    }
    protocols = [_protocol(name, t, runs=runs, n_seats=5) for name, (t, runs, _, _) in spec.items()]
    rows = [r for name, (_, _, correct, u) in spec.items() for r in _rows(name, correct, [u] * 4)]
    runs = {
        "udpo": RunInfo("udpo", "udpo", {"udpo": {"ablate": []}}),
        "mappo": RunInfo("mappo", "mappo", {}),
        "rmaac": RunInfo("rmaac", "rmaac", {}),
    }
    result = build_paper("udpo", _outputs(protocols, rows, runs=runs))
    table = result.tables["table5"].set_index(["method", "rounds"])
    assert set(table.index) == {
        ("MAD", 3),
        ("MAD", 5),
        ("MAD", 10),
        ("MAPPO", 3),
        ("MAPPO", 5),
        ("RMAAC", 10),
        ("UDPO", 10),
    }
    assert table.loc[("MAPPO", 3), "accuracy"] == 75.0 and table.loc[("RMAAC", 10), "accuracy"] == 75.0
    assert table.loc[("MAPPO", 5), "accuracy"] == 100.0 and table.loc[("MAPPO", 3), "n"] == 4

    cells = result.cells["table5"].set_index(["method", "rounds", "metric"])
    assert set(cells.index.get_level_values("metric")) == set(TABLE5_METRICS)
    # _rows: U_intra = U_sys / 2, U_inter = U_sys / 3
    for metric, value in {"accuracy": 75.0, "u_intra": 0.15, "u_inter": 0.1, "u_sys": 0.3}.items():
        assert cells.loc[("MAPPO", 3, metric), "value"] == pytest.approx(value), metric
    assert cells.loc[("RMAAC", 10, "u_sys"), "value"] == pytest.approx(0.4)

    vs = compare_with_paper(result.cells["table5"], load_paper_numbers("udpo")["table5"])
    filled = vs[vs["run_value"].notna()].set_index(["method", "rounds", "metric"])
    assert set(filled.index) == {(m, t, k) for m, t in table.index for k in TABLE5_METRICS}
    assert set(filled["dataset"]) == {"gsm8k"} and set(filled["run_dataset"]) == {"gsm_symbolic"}
    # the paper's cells (App. C.2, Table 5, GSM8K), each beside the run's own
    for key, (paper, run) in {
        ("MAPPO", 3, "accuracy"): (69.5, 75.0),
        ("MAPPO", 3, "u_sys"): (0.258, 0.3),
        ("MAPPO", 5, "u_intra"): (0.185, 0.1),
        ("RMAAC", 10, "accuracy"): (77.5, 75.0),
        ("RMAAC", 10, "u_inter"): (0.122, 0.4 / 3),
    }.items():
        assert (filled.loc[key, "paper_value"], filled.loc[key, "run_value"]) == pytest.approx((paper, run)), key

    # Table 1 (T = 5): MAD and MAPPO from mad_n5 and mappo_n5, not their T = 10 / 3 debates; RMAAC and
    # UDPO debated at T = 10 only, so that fills theirs
    t1 = result.tables["table1"].set_index("method")
    assert t1["accuracy"].to_dict() == {"MAD": 50.0, "MAPPO": 100.0, "RMAAC": 75.0, "UDPO": 100.0}
    # Fig. 5: MAD's U_sys at T = 5 (0.5 on every question) bins them; MAPPO's T = 5 gain over it is
    # +50 points on those 4 questions (q2, q3 wrong -> right), its T = 3 debate left out
    fig5 = result.tables["fig5"].set_index(["method", "bin"])
    assert (fig5.loc[("MAPPO", "[.4,.6)"), "delta_acc"], fig5.loc[("MAPPO", "[.4,.6)"), "n"]) == (50.0, 4)
    assert fig5.loc[("MAPPO", "[.6,.8)"), "n"] == 0


def test_every_published_table5_cell_has_a_measured_cell_from_udpo_yaml():
    """Every cell of the paper's Table 5 (4 methods x T = 3 / 5 / 10 x 3 datasets x accuracy and the
    three U's) is transcribed, and udpo.yaml runs a protocol that fills it: the evaluation's own
    builders, fed one trajectory per (protocol, dataset), pair each published cell with exactly one
    measured cell, and the MAPPO / RMAAC cells come from that method's agents, trained on that
    dataset, debating for that T. Tables 1 and 3 keep to T = 5."""
    published = load_paper_numbers("udpo")["table5"]
    expected = {
        (d, 5, t, m, k)
        for d in ("gsm8k", "truthfulqa", "commonsense_qa")
        for t in (3, 5, 10)
        for m in TABLE5_METHODS
        for k in TABLE5_METRICS
    }
    keys = ["dataset", "n_agents", "rounds", "method", "metric"]
    assert set(published[keys].itertuples(index=False, name=None)) == expected and len(published) == len(expected)

    exp = load_experiment(REPO_ROOT / "config/experiments/udpo.yaml")
    outputs = RunOutputs.from_experiment(exp)
    rows = [
        {"question_id": "q", "dataset": d, "protocol": p, "thread": 0, "correct": True}
        | {"u_intra": 0.1, "u_inter": 0.1, "u_sys": 0.1}
        for p in exp.protocols
        for d in exp.protocol_datasets(p)
    ]
    outputs.__dict__.update(uncertainty=pd.DataFrame(rows), turns=pd.DataFrame())
    frame = udpo.heterogeneous(udpo.trajectories(outputs))
    t5 = udpo.table5(frame)
    vs = compare_with_paper(udpo.table5_cells(t5), published)
    missing = vs[vs["run_value"].isna()]
    assert missing.empty, missing[keys].to_string()
    assert len(vs) == len(published)  # one measured cell per published one
    baselines = t5[t5["method"].isin(["MAPPO", "RMAAC"]) & (t5["n_agents"] == 5)]
    assert len(baselines) == 2 * 3 * 3  # MAPPO, RMAAC x T = 3, 5, 10 x the three datasets
    for row in baselines.itertuples():
        info = outputs.protocols[row.protocol]
        assert info.rounds == row.rounds and info.adversarial == 0, row.protocol
        assert [exp.training_runs[r]["method"] for r in info.trained_runs] == [row.method.lower()], row.protocol
        for run in info.trained_runs:
            trained_on = exp.benchmark_of(exp.training_runs[run]["dataset"])
            assert trained_on == exp.benchmark_of(row.run_dataset), (row.protocol, run)
    # Table 1 and Table 3 are at T = 5: Table 5's T = 3 / 10 debates fill neither
    for table in (udpo.table1(frame, outputs.protocols), udpo.table3(frame, outputs.protocols)):
        assert {outputs.protocols[p].rounds for p in table["protocol"]} == {5}
