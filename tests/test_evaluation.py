"""The evaluation stage's framework (paper numbers, the vs-paper join, method labels) and the
UDPO and SVR-MAD tables, on fixture outputs whose cells are worked out by hand."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO_ROOT

from debatelab.config import ConfigError, Experiment, validate_config
from debatelab.evaluation import (
    ProtocolInfo,
    RunInfo,
    RunOutputs,
    build_paper,
    compare_with_paper,
    describe_protocols,
    evaluate_paper,
    load_paper_numbers,
    protocol_method,
    run_label,
)
from debatelab.evaluation.paper_numbers import PaperNumbersError
from debatelab.evaluation.papers import PAPERS, svr_mad, udpo

TINY = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())


def _protocol(name, kind="all_to_all", seats=("a", "b", "c"), rounds=2, adversarial=0, runs=(), threads=1):
    return ProtocolInfo(
        name=name,
        kind=kind,
        rounds=rounds,
        threads=threads,
        template="du",
        participants=tuple(seats),
        models=tuple("m" for _ in seats),
        adversarial=adversarial,
        trained_runs=tuple(runs),
        datasets=("gsm_symbolic",),
        adversarial_seats=tuple(i >= len(seats) - adversarial for i in range(len(seats))),
    )


def _outputs(protocols, runs=None, **frames) -> RunOutputs:
    outputs = RunOutputs("fixture", {p.name: p for p in protocols}, runs or {}, {"gsm_symbolic": "gsm8k"})
    outputs.__dict__.update(frames)  # fills the cached properties
    return outputs


# --------------------------------------------------------------------------- paper numbers


def test_every_shipped_paper_numbers_file_loads_and_names_tables_its_paper_builds(tmp_path):
    for paper in PAPERS:
        tables = load_paper_numbers(paper)
        assert tables, paper
        for name, frame in tables.items():
            assert len(frame) > 0 and frame["value"].map(lambda v: isinstance(v, (int, float))).all(), (paper, name)


def test_a_malformed_row_names_file_table_and_row(tmp_path):
    (tmp_path / "udpo.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "udpo",
                "tables": {
                    "table1": {
                        "columns": ["dataset", "method", "value"],
                        "rows": [["gsm8k", "MAD", 1.0], ["gsm8k", 2.0]],
                    }
                },
            }
        )
    )
    with pytest.raises(PaperNumbersError, match=r"udpo.yaml: table table1, row 1"):
        load_paper_numbers("udpo", tmp_path)
    (tmp_path / "udpo.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "udpo",
                "tables": {"table1": {"columns": ["dataset", "method", "value"], "rows": [["gsm8k", "MAD", "high"]]}},
            }
        )
    )
    with pytest.raises(PaperNumbersError, match=r"value 'high' is not a number"):
        load_paper_numbers("udpo", tmp_path)


def test_run_cells_carry_their_interval_beside_the_paper_value():
    """A cell's share with one answer per question (or threads that agree) gets Clopper-Pearson's
    interval (at any n: it is exact); with threads that disagree, or a measure that is no share, the
    BCa bootstrap over questions (threads drawn together), none under MIN_UNITS questions. The vs-paper row says
    whether the paper's value lies in the run's interval, and nothing where there is none."""
    from scipy import stats

    from debatelab import intervals
    from debatelab.evaluation.paper_numbers import cell_intervals, long_table

    rng = np.random.default_rng(1)
    single = pd.DataFrame({"cell": "a", "question_id": [f"q{i}" for i in range(30)], "correct": rng.random(30) < 0.6})
    threads = pd.DataFrame(
        {"cell": "b", "question_id": np.repeat([f"q{i}" for i in range(12)], 3), "correct": rng.random(36) < 0.5}
    )
    few = pd.DataFrame({"cell": "c", "question_id": ["q1", "q2"], "correct": [True, False]})
    rows = pd.concat([single, threads, few], ignore_index=True).assign(u=lambda f: rng.normal(size=len(f)))
    metrics = {"accuracy": ("correct", 100.0), "u": ("u", 1.0)}
    bounds = cell_intervals(rows, ["cell"], metrics, shares=["accuracy"]).set_index("cell")
    exact = stats.binomtest(int(single["correct"].sum()), 30).proportion_ci(0.95, method="exact")
    assert bounds.loc["a", ["accuracy_low", "accuracy_high"]].tolist() == pytest.approx(
        [100 * exact.low, 100 * exact.high]
    )
    clustered = intervals.mean_estimate(threads["correct"].astype(float), clusters=threads["question_id"])
    assert bounds.loc["b", "accuracy_low"] == pytest.approx(100 * clustered.low)
    assert bounds.loc["b", "accuracy_high"] == pytest.approx(100 * clustered.high)
    u = intervals.mean_estimate(rows.loc[rows["cell"] == "a", "u"], clusters=single["question_id"])
    assert bounds.loc["a", ["u_low", "u_high"]].tolist() == pytest.approx([u.low, u.high])
    assert bounds.loc["c", ["u_low", "u_high"]].isna().all()  # 2 questions: no bootstrap interval
    assert bounds.loc["c", "accuracy_low"] == pytest.approx(100 * stats.binomtest(1, 2).proportion_ci().low)

    # threads that agree on every question: a count of questions, exact (never [100, 100] at 100 %)
    agreed = rows[rows["cell"] == "b"].assign(correct=True)
    unanimous = cell_intervals(agreed, ["cell"], metrics, shares=["accuracy"]).iloc[0]
    assert unanimous["accuracy_low"] == pytest.approx(100 * stats.binomtest(12, 12).proportion_ci().low)
    assert unanimous["accuracy_high"] == 100
    # a count that is 0 or 1 everywhere is no share: bootstrapped, a constant gives a point
    counts = cell_intervals(agreed.assign(calls=1.0), ["cell"], {"calls": ("calls", 1.0)}).iloc[0]
    assert (counts["calls_low"], counts["calls_high"]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="share 'u'"):
        cell_intervals(rows, ["cell"], metrics, shares=["u"])

    cells = pd.DataFrame({"cell": ["a", "c"], "accuracy": [60.0, 50.0], "u": 0.0, "n": [30, 2], "run_dataset": "toy"})
    long = long_table(cells.merge(bounds.reset_index(), on="cell"), ["cell"], ["accuracy", "u"])
    published = pd.DataFrame(
        {"cell": ["a", "a", "c", "c"], "metric": ["accuracy", "accuracy", "accuracy", "u"], "value": [55.0, 99, 50, 0]}
    )
    published["where"] = "Table 9"
    published.attrs["match"] = ["cell", "metric"]
    vs = compare_with_paper(long, published)
    assert vs["paper_in_interval"].tolist() == [True, False, True, None]
    assert vs["run_low"].iloc[0] == pytest.approx(100 * exact.low) and math.isnan(vs["run_low"].iloc[3])


def test_compare_with_paper_matches_on_the_match_keys_only(tmp_path):
    (tmp_path / "svr_mad.yaml").write_text(
        yaml.safe_dump(
            {
                "paper": "svr_mad",
                "tables": {
                    "t": {
                        "columns": ["llm", "dataset", "n_agents", "metric", "value"],
                        "match": ["dataset", "n_agents", "metric"],
                        "rows": [
                            ["big", "gsm8k", 5, "Acc", 60.0],
                            ["huge", "gsm8k", 5, "Acc", 70.0],
                            ["big", "hle", 5, "Acc", 20.0],
                        ],
                    }
                },
            }
        )
    )
    published = load_paper_numbers("svr_mad", tmp_path)["t"]
    run = pd.DataFrame(
        {
            "dataset": ["gsm8k"],
            "n_agents": ["5"],
            "metric": ["Acc"],
            "value": [65.0],
            "n": [12],
            "run_dataset": ["gsm_symbolic"],
        }
    )
    vs = compare_with_paper(run, published)
    assert list(vs["llm"]) == ["big", "huge", "big"]
    assert list(vs["difference"][:2]) == [5.0, -5.0]  # one run cell beside both models' values; "5" matches 5
    assert math.isnan(vs["run_value"].iloc[2]) and list(vs["n"][:2]) == [12, 12]


def test_a_backbone_key_is_always_matched_and_names_a_listed_backbone(tmp_path):
    table = {
        "columns": ["llm", "dataset", "metric", "value"],
        "backbone": "llm",
        "rows": [["big", "gsm8k", "Acc", 60.0]],
    }
    for backbones, match, error in [
        (["big"], ["dataset", "metric"], "`backbone: llm` must be a key"),
        (["huge"], None, r"backbones \['big'\] are not among `backbones` \['huge'\]"),
    ]:
        (tmp_path / "svr_mad.yaml").write_text(
            yaml.safe_dump({"paper": "svr_mad", "backbones": backbones, "tables": {"t": {**table, "match": match}}})
        )
        with pytest.raises(PaperNumbersError, match=error):
            load_paper_numbers("svr_mad", tmp_path)
    for paper in ("sdrl", "svr_mad"):  # the shipped tables with two backbones' rows join on the backbone
        for frame in load_paper_numbers(paper).values():
            assert frame.attrs["backbone"] in frame.attrs["match"] and frame[frame.attrs["backbone"]].nunique() >= 1


def test_a_run_cell_meets_its_own_backbones_published_row_only(tmp_path):
    """SVR-MAD's Table 1 has a GPT-OSS-120B and a DeepSeek-V3.1 row for each cell; a run whose model
    stands for GPT-OSS-120B fills the first only, a model that stands for no backbone neither."""
    questions, protocols = _svr_questions()

    def acc_of_svr_mad(backbones):
        outputs = _outputs(protocols, questions=questions)
        outputs.paper_datasets = {"gsm_symbolic": "imo_answerbench"}
        outputs.model_backbones = backbones  # every fixture seat runs model "m"
        evaluate_paper("svr_mad", outputs, tmp_path)
        vs = pd.read_csv(tmp_path / "table1_vs_paper.csv")
        cell = vs[(vs["dataset"] == "imo_answerbench") & (vs["method"] == "SVR-MAD") & (vs["metric"] == "Acc")]
        return cell.set_index("llm")[["paper_value", "run_value"]]

    # SVR-MAD's non-unanimous questions q1, q2 are both right: Acc 100 %
    claimed = acc_of_svr_mad({"svr_mad": {"m": "GPT-OSS-120B"}})
    assert claimed.loc["GPT-OSS-120B"].tolist() == [42.8, 100.0]
    assert claimed.loc["DeepSeek-V3.1", "paper_value"] == 41.5 and math.isnan(claimed.loc["DeepSeek-V3.1", "run_value"])
    unclaimed = acc_of_svr_mad({})
    assert len(unclaimed) == 2 and unclaimed["run_value"].isna().all()


def test_a_cells_backbone_comes_from_its_seats_models():
    outputs = RunOutputs(
        "fixture",
        {},
        {},
        {},
        model_backbones={"sdrl": {"a": "Q2.5-3B", "b": "Q3-4B-Base", "c": None}},
        agent_models={"alice": "a", "carol": "c"},
    )
    assert outputs.backbone("sdrl", ["a", "a"]) == "Q2.5-3B"
    assert outputs.backbone("sdrl", ["b", "a", "b"]) == "Q3-4B-Base + Q2.5-3B"  # a mixed ensemble: no published row
    assert outputs.backbone("sdrl", ["a", "c"]) == "" and outputs.backbone("svr_mad", ["a"]) == ""
    assert outputs.agent_backbone("sdrl", "alice") == "Q2.5-3B" and outputs.agent_backbone("sdrl", "carol") == ""


def test_paper_backbone_names_a_backbone_of_the_papers_numbers_and_trained_models_inherit_it():
    def experiment(claim):
        config = copy.deepcopy(TINY)
        config["models"]["tiny-random-llama"]["paper_backbone"] = claim
        return Experiment(validate_config(config))

    exp = experiment("Q2.5-3B")
    # tiny-trained is trained:sdrl (alice's model), tiny-udpo-bob trained:udpo/bob: both stand for their base
    assert [exp.paper_backbone(m, "sdrl") for m in ("tiny-random-llama", "tiny-trained", "tiny-udpo-bob")] == [
        "Q2.5-3B"
    ] * 3
    outputs = RunOutputs.from_experiment(exp)
    assert outputs.backbone("sdrl", outputs.protocols["trained"].models) == "Q2.5-3B"
    # a stand-in for a different backbone in each paper
    exp = experiment({"sdrl": "Q3-4B-Base", "svr_mad": "GPT-OSS-120B"})
    assert (
        exp.paper_backbone("tiny-trained", "svr_mad") == "GPT-OSS-120B"
        and exp.paper_backbone("tiny-trained", "udpo") is None
    )
    assert experiment(None).paper_backbone("tiny-trained", "sdrl") is None
    for claim, key in [
        ("Qwen2.5-3B", r"models\.tiny-random-llama\.paper_backbone = 'Qwen2.5-3B'"),
        ({"svr_mad": "Q2.5-3B"}, r"models\.tiny-random-llama\.paper_backbone\.svr_mad = 'Q2.5-3B'"),
    ]:
        with pytest.raises(ConfigError, match=key):
            experiment(claim)
    with pytest.raises(Exception, match="paper_backbone"):  # the schema knows the papers
        experiment({"madness": "Q2.5-3B"})


# --------------------------------------------------------------------------- labels


def test_run_labels_name_the_papers_variants():
    assert run_label(RunInfo("u", "udpo", {"udpo": {"ablate": ["intra"]}})) == "UDPO w/o intra"
    assert run_label(RunInfo("u", "umad", {"umad": {"eta": 0, "alpha_au": 0}})) == "IPPO"
    assert run_label(RunInfo("u", "umad", {"umad": {"eta": 0.25, "alpha_au": 0}})) == "Intrinsic-only"
    assert run_label(RunInfo("u", "sdrl", {"sdrl": {"pair_mode": "freq"}})) == "SDRL-freq"
    assert run_label(RunInfo("d", "dapo", {})) == "DAPO"


def test_protocols_know_their_trained_runs_and_adversaries():
    exp = Experiment(validate_config(yaml.safe_load(yaml.safe_dump(TINY))))
    infos = describe_protocols(exp)
    assert infos["trained"].trained_runs == ("sdrl", "udpo") and infos["mad"].trained_runs == ()
    assert infos["mad"].participants == ("alice", "bob", "alice") and infos["mad"].rounds == 2
    runs = {name: RunInfo(name, spec["method"], spec) for name, spec in exp.training_runs.items()}
    assert protocol_method(infos["trained"], runs) == "SDRL-rand + UDPO"
    assert protocol_method(infos["mad"], runs, base="MAD") == "MAD"


# --------------------------------------------------------------------------- UDPO


def _trajectory_rows(protocol, correct, u_sys, dataset="gsm_symbolic"):
    return [
        {
            "question_id": f"q{i}",
            "dataset": dataset,
            "protocol": protocol,
            "thread": 0,
            "correct": c,
            "u_intra": u / 2,
            "u_inter": u / 3,
            "u_sys": u,
        }
        for i, (c, u) in enumerate(zip(correct, u_sys))
    ]


def _udpo_outputs():
    protocols = [
        _protocol("mad_n3"),
        _protocol("mad_n3_t1", rounds=1),
        _protocol("attack_m1", adversarial=1),
        _protocol("attack_m2", adversarial=2),
        _protocol("udpo_n3", runs=("udpo",)),
    ]
    rows = (
        _trajectory_rows("mad_n3", [True, True, False, False], [0.1, 0.3, 0.7, 0.9])
        + _trajectory_rows("mad_n3_t1", [True, False, False, False], [0.2, 0.5, 0.8, 0.95])
        + _trajectory_rows("attack_m1", [True, False, False, False], [0.2, 0.6, 0.8, 0.9])
        + _trajectory_rows("attack_m2", [False, False, False, False], [0.5, 0.7, 0.9, 1.0])
        + _trajectory_rows("udpo_n3", [True, True, True, False], [0.1, 0.2, 0.3, 0.4])
    )
    training = {"udpo": pd.DataFrame({"step": [1, 2, 3], "r_sys": [0.2, 0.4, 0.5]})}
    # round-0 answers of two debates: mad_n3 had a correct agent on q0, q2; udpo_n3 on q0, q1, q3
    # (a later round's correct answer, or None for an unparseable one, doesn't count)
    turns = (
        _turn_rows(
            "mad_n3",
            [[True, False, False], [None, False, False], [False, False, True], [False] * 3],
            later_correct=[1, 3],
        )
        + _turn_rows("udpo_n3", [[True, True, True], [False, True, False], [False] * 3, [True, False, False]])
        # the adversarial seat (the last) right on q1 doesn't count: only q2 collapsed of {q0, q2}
        + _turn_rows("attack_m1", [[True, False, False], [False, False, True], [False, True, False], [False] * 3])
    )
    return _outputs(
        protocols,
        {"udpo": RunInfo("udpo", "udpo", {"udpo": {"ablate": []}})},
        uncertainty=pd.DataFrame(rows),
        training=training,
        turns=pd.DataFrame(turns),
    )


def _turn_rows(protocol, round0_correct, later_correct=()):
    rows = []
    for i, seats in enumerate(round0_correct):
        for seat, correct in enumerate(seats):
            rows.append(
                {
                    "question_id": f"q{i}",
                    "dataset": "gsm_symbolic",
                    "protocol": protocol,
                    "thread": 0,
                    "round": 0,
                    "agent_index": seat,
                    "correct": correct,
                }
            )
            rows.append({**rows[-1], "round": 1, "correct": i in later_correct})
    return rows


def test_udpo_tables_from_fixture_trajectories():
    result = build_paper("udpo", _udpo_outputs())
    t1 = result.tables["table1"].set_index("method")
    # mad_n3 (T = 2) fills the MAD cell over mad_n3_t1: the paper's Table 1 is the longest debate
    assert t1.loc["MAD", "accuracy"] == 50.0 and t1.loc["MAD", "u_sys"] == pytest.approx(0.5)
    assert t1.loc["UDPO", "accuracy"] == 75.0 and t1.loc["UDPO", "u_intra"] == pytest.approx(0.125)
    # collapse: right in round 0, wrong at the end. MAD: q2 of {q0, q2}; UDPO: q3 of {q0, q1, q3}
    assert t1.loc["MAD", "collapse"] == 50.0 and t1.loc["UDPO", "collapse"] == pytest.approx(100 / 3, abs=1e-3)
    assert list(result.tables["table2"]["method"]) == ["Full"]
    t3 = result.tables["table3"].set_index("m")
    assert t3.loc[0].query("method == 'MAD'")["accuracy"].item() == 50.0 and t3.loc[2, "accuracy"] == 0.0
    assert t3.loc[1, "collapse"] == 50.0 and math.isnan(t3.loc[2, "collapse"])  # no turns for attack_m2: unknown
    t5 = result.tables["table5"].set_index(["method", "rounds"])
    assert t5.loc[("MAD", 1), "accuracy"] == 25.0 and t5.loc[("MAD", 2), "accuracy"] == 50.0
    # Fig. 5: questions binned by MAD's U_sys; UDPO's gain per bin: q2 (0.7) wrong -> right = +100
    fig5 = result.tables["fig5"].set_index("bin")
    assert fig5.loc["[.6,.8)", "delta_acc"] == 100.0 and fig5.loc["[0,.2)", "delta_acc"] == 0.0
    assert fig5.loc["[.2,.4)", "n"] == 1
    vs = result.cells["table1"].set_index(["method", "metric"])
    assert vs.loc[("UDPO", "accuracy"), "dataset"] == "gsm8k" and vs.loc[("UDPO", "accuracy"), "n"] == 4


def test_udpo_claims_measure_the_directions():
    claims = build_paper("udpo", _udpo_outputs()).claims
    by = {(c.claim, c.statement): c for c in claims}
    # the fixture has 4 questions, fewer than claims.MIN_UNITS: bootstrapped claims keep their value
    # without an interval ("n/a (too few)"; the old percentile intervals on 4 questions let udpo-1 and
    # udpo-8 hold); accuracy differences with one trajectory a question get the exact interval
    too_few = "n/a (too few)"
    # standard MAD pools mad_n3 and mad_n3_t1 (8 trajectories of 4 questions, resampled by question)
    d = by[("udpo-1", "failures have higher u_sys than successes")]
    assert d.verdict == too_few and d.n == 4 and d.value > 0 and "cluster bootstrap" in d.interval
    fall = [c for c in claims if c.claim == "udpo-5" and c.statement.startswith("accuracy falls")][0]
    # 50 % at m = 0, 0 % at m = 2: 2 discordant questions, both lost; Clopper-Pearson of 0/2 is
    # [0, 1 − 0.025^(1/2)], mapped by 100 · (2/4)(2p − 1); McNemar p = 0.5
    assert fall.value == -50.0 and fall.verdict == "inconclusive" and fall.n == 4 and fall.p == pytest.approx(0.5)
    assert (fall.low, fall.high) == pytest.approx((-50.0, 50 * (2 * (1 - 0.025**0.5) - 1)))
    rounds = [c for c in claims if c.claim == "udpo-8"][0]
    # T = 1: mean U_sys 0.6125, T = 2: 0.5; per question −0.1, −0.2, −0.1, −0.05
    assert rounds.verdict == too_few and rounds.value == pytest.approx(0.5 - 0.6125)
    train = [c for c in claims if c.claim == "udpo-9"][0]
    assert train.verdict == too_few and train.value == pytest.approx(-0.15) and train.n == 3
    gpu = [c for c in claims if c.claim in ("udpo-10", "udpo-11")]
    # UDPO − MAD: +25 points on 4 questions (only q2 differs): Clopper-Pearson of 1/1 mapped, [−23.75, 25]
    assert len(gpu) == 2 and gpu[0].value == 25.0 and gpu[0].low == pytest.approx(-23.75)
    assert gpu[0].verdict == "inconclusive" and gpu[0].p == 1.0
    assert gpu[1].statement.startswith("UDPO collapses less") and gpu[1].value == pytest.approx(100 / 3 - 50)
    assert gpu[1].verdict == too_few and gpu[1].n == 4
    # with the baselines trained: each step of UDPO > RMAAC > MAPPO > MAD, and UDPO against MAD
    outputs = _udpo_outputs()
    outputs.protocols.update(
        {p.name: p for p in (_protocol("mappo_n3", runs=("mappo",)), _protocol("rmaac_n3", runs=("rmaac",)))}
    )
    outputs.runs.update({"mappo": RunInfo("mappo", "mappo", {}), "rmaac": RunInfo("rmaac", "rmaac", {})})
    outputs.uncertainty = pd.concat(
        [
            outputs.uncertainty,
            pd.DataFrame(
                _trajectory_rows("mappo_n3", [True, True, False, False], [0.1] * 4)
                + _trajectory_rows("rmaac_n3", [True, True, True, True], [0.1] * 4)
            ),
        ],
        ignore_index=True,
    )
    order = {
        c.statement.split(" (")[0]: c for c in build_paper("udpo", outputs).claims if c.claim in ("udpo-10", "udpo-11")
    }
    assert list(order) == [
        "UDPO is more accurate than RMAAC",
        "RMAAC is more accurate than MAPPO",
        "MAPPO is more accurate than MAD",
        "UDPO is more accurate than MAD",
        "UDPO collapses less often than MAD",
    ]
    # RMAAC is right on every question UDPO is and on one more: one discordant question, McNemar p = 1,
    # so the exact interval [−25, 23.75] can't say UDPO is behind (the old bootstrap's [−25, 0] "failed")
    assert order["UDPO is more accurate than RMAAC"].value == -25.0 and order[
        "UDPO is more accurate than RMAAC"
    ].high == pytest.approx(23.75)
    assert order["UDPO is more accurate than RMAAC"].verdict == "inconclusive"
    assert (
        order["RMAAC is more accurate than MAPPO"].value == 50.0
        and order["MAPPO is more accurate than MAD"].value == 0.0
    )
    assert order["RMAAC is more accurate than MAPPO"].verdict == "inconclusive"


def test_evaluate_paper_writes_tables_comparisons_claims_and_plots(tmp_path):
    evaluate_paper("udpo", _udpo_outputs(), tmp_path)
    vs = pd.read_csv(tmp_path / "table1_vs_paper.csv")
    row = vs[
        (vs["dataset"] == "gsm8k") & (vs["n_agents"] == 3) & (vs["method"] == "MAD") & (vs["metric"] == "accuracy")
    ]
    assert row["paper_value"].item() == 51.2 and row["run_value"].item() == 50.0
    assert row["difference"].item() == pytest.approx(-1.2) and row["run_dataset"].item() == "gsm_symbolic"
    assert vs[vs["method"] == "MAPPO"]["run_value"].isna().all()  # no mappo run in this fixture
    claims = pd.read_csv(tmp_path / "claims.csv")
    # 4 questions: the bootstrapped claims are "n/a (too few)", the exact accuracy ones inconclusive
    assert set(claims["verdict"]) <= {"holds", "fails", "inconclusive", "n/a", "n/a (too few)"}
    assert (claims["verdict"] == "n/a (too few)").sum() >= 5 and "verdict_holm" in claims
    measured = claims[~claims["verdict"].isin(["n/a", "n/a (too few)"])]
    assert len(measured) and (measured["low"] <= measured["value"]).all()
    assert (measured["value"] <= measured["high"]).all()
    assert (measured["n"] > 0).all() and measured["interval"].notna().all()
    assert (tmp_path / "fig5_delta_by_usys.png").stat().st_size > 0
    assert {
        "table2_vs_paper.csv",
        "table3_vs_paper.csv",
        "table5_vs_paper.csv",
        "table6_vs_paper.csv",
        "fig5_vs_paper.csv",
    } <= {p.name for p in tmp_path.iterdir()}


# --------------------------------------------------------------------------- SVR-MAD


def _svr_questions():
    rows = []
    spec = {  # protocol: (kind, [(ncomm, tokens, correct, unanimous) per question])
        "sc": ("self_consistency", [(0, 100, True, True), (0, 200, False, False), (0, 300, True, False)]),
        "svr": ("svr_mad", [(0, 100, True, True), (2, 1200, True, False), (4, 1400, True, False)]),
        "s2": ("s2_mad", [(6, 900, True, True), (12, 3000, False, False), (10, 2000, True, False)]),
    }
    for protocol, (kind, questions) in spec.items():
        for i, (ncomm, tokens, correct, unanimous) in enumerate(questions):
            rows.append(
                {
                    "question_id": f"q{i}",
                    "dataset": "gsm_symbolic",
                    "protocol": protocol,
                    "kind": kind,
                    "thread": 0,
                    "ncomm": ncomm,
                    "total_tokens": tokens,
                    "correct": correct,
                    "pre_unanimous": unanimous,
                }
            )
    return pd.DataFrame(rows), [
        _protocol("sc", "self_consistency"),
        _protocol("svr", "svr_mad"),
        _protocol("s2", "s2_mad"),
    ]


def test_svr_mad_table1_counts_the_non_unanimous_questions_only():
    questions, protocols = _svr_questions()
    result = build_paper("svr_mad", _outputs(protocols, questions=questions))
    t1 = result.tables["table1"].set_index("method")
    assert list(t1.index) == ["Self Consistency", "S2-MAD", "SVR-MAD"]  # the paper's row order
    assert t1.loc["SVR-MAD", "gsm_symbolic NComm"] == 3.0 and t1.loc["SVR-MAD", "gsm_symbolic Tok"] == 1.3
    assert t1.loc["S2-MAD", "gsm_symbolic Acc"] == 50.0 and t1.loc["Self Consistency", "gsm_symbolic Acc"] == 50.0
    by = {c.statement: c for c in result.claims}
    # the claims are paired over the two non-unanimous questions q1, q2 (intervals: test_evaluation_svr_mad.py):
    # fewer than claims.MIN_UNITS, so the bootstrapped ones have no interval; accuracy is exact
    assert by["NComm: SVR-MAD < S2-MAD"].verdict == "n/a (too few)" and by["NComm: SVR-MAD < S2-MAD"].value == -8.0
    assert by["SVR-MAD accuracy ≥ Self Consistency"].value == 50.0
    assert by["SVR-MAD accuracy ≥ Self Consistency"].verdict == "inconclusive"
    assert by["Tokens: Self Consistency < SVR-MAD"].verdict == "n/a (too few)"
    assert {c.n for c in result.claims} == {2}


def test_pareto_front_keeps_the_points_nothing_beats():
    tokens = np.array([1.0, 2.0, 3.0, 4.0, 2.5])
    accuracy = np.array([0.3, 0.5, 0.4, 0.9, 0.5])
    assert list(svr_mad.pareto_front(tokens, accuracy)) == [0, 1, 3]


def test_two_protocols_of_one_kind_get_distinct_labels():
    outputs = _outputs(
        [_protocol("mad"), _protocol("mad_pair", seats=("a", "b")), _protocol("t", runs=("u",))],
        {"u": RunInfo("u", "udpo", {})},
    )
    assert svr_mad.method_labels(outputs) == {"mad": "MAD", "mad_pair": "MAD [mad_pair]", "t": "MAD (UDPO)"}
    assert udpo.ABLATION_NAMES["UDPO"] == "Full"


def test_fig5_draws_one_series_per_method_and_n():
    """A method trained and evaluated at two N (udpo_cpu: UDPO at N = 3 and 5) has a bin row per N:
    the plot draws each as its own series (it used to fail on the duplicate bin labels)."""
    from debatelab.evaluation.papers.udpo import BIN_LABELS, plot_fig5

    bins = pd.DataFrame(
        [
            {"n_agents": n, "method": "UDPO", "bin": label, "delta_acc": float(n), "n": 1, "run_dataset": "all"}
            for n in (5, 3)
            for label in BIN_LABELS
        ]
    )
    fig = plot_fig5(bins, "exp")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["UDPO (N=5)", "UDPO (N=3)"]
    assert sorted({round(p.get_height()) for p in ax.patches}) == [3, 5]


def test_run_outputs_read_only_the_columns_they_use_and_name_a_missing_one(tmp_path):
    from debatelab.evaluation.run import TURN_COLUMNS, TURN_OPTIONAL_COLUMNS
    from debatelab.io import DataFileError, write_parquet_atomic

    turns = pd.DataFrame([{c: 0 for c in TURN_COLUMNS} | {"response": "x" * 100}])
    write_parquet_atomic(turns, tmp_path / "turns.parquet")
    write_parquet_atomic(turns.assign(mean_token_entropy=0.25), tmp_path / "newer.parquet")
    outputs = RunOutputs("fixture", {}, {}, {}, turn_paths=[tmp_path / "turns.parquet", tmp_path / "newer.parquet"])
    assert list(outputs.turns.columns) == TURN_COLUMNS + TURN_OPTIONAL_COLUMNS  # the responses stay on disk
    # an optional column a file lacks (written before it existed) reads NaN, the other file's value stays
    assert outputs.turns["mean_token_entropy"].isna().tolist() == [True, False]
    assert outputs.turns["mean_token_entropy"].iloc[1] == 0.25
    write_parquet_atomic(turns.drop(columns="round"), tmp_path / "broken.parquet")
    with pytest.raises(DataFileError, match=r"broken\.parquet: missing required column\(s\) \['round'\]"):
        RunOutputs("fixture", {}, {}, {}, turn_paths=[tmp_path / "broken.parquet"]).turns  # noqa: B018 (reading it raises)
    (tmp_path / "corrupt.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataFileError, match=r"corrupt\.parquet: not a readable Parquet file"):
        RunOutputs("fixture", {}, {}, {}, turn_paths=[tmp_path / "corrupt.parquet"]).turns  # noqa: B018 (reading it raises)


# --------------------------------------------------------------------------- homogeneous ensembles, other LLMs


def _on(protocol: ProtocolInfo, model: str, datasets=("gsm_symbolic",)) -> ProtocolInfo:
    """The fixture protocol with every seat on `model` and running on `datasets`."""
    import dataclasses

    return dataclasses.replace(protocol, models=tuple(model for _ in protocol.participants), datasets=tuple(datasets))


def test_udpo_homogeneous_qwen_protocols_fill_table4_and_table7(tmp_path):
    """Five Qwen-3 agents (udpo_homogeneous / udpo_attack_qwen): MAD and UDPO natural fill Table 4's
    Qwen row, their one-malicious-seat debates Table 7 with the drop from the natural ones; the
    heterogeneous mad_n5 (seats on no backbone) stays Table 1's, and Table 1 ignores the Qwen ones."""
    five = ("a", "a", "a", "a", "a")
    protocols = [
        _on(_protocol("mad_qwen3", seats=five, rounds=5), "qwen"),
        _on(_protocol("attack_qwen3_m1", seats=five, rounds=5, adversarial=1), "qwen"),
        _on(_protocol("udpo_qwen3", seats=five, rounds=5, runs=("udpo_qwen3",)), "qwen-udpo"),
        _on(_protocol("udpo_attack_qwen3_m1", seats=five, rounds=5, adversarial=1, runs=("udpo_qwen3",)), "qwen-udpo"),
        _protocol("mad_n5", seats=("a", "b", "c", "d", "e"), rounds=5),
    ]
    rows = (
        _trajectory_rows("mad_qwen3", [True, True, True, False], [0.1, 0.2, 0.3, 0.8])  # 75 %
        + _trajectory_rows("attack_qwen3_m1", [True, False, False, False], [0.2, 0.6, 0.7, 0.9])  # 25 %
        + _trajectory_rows("udpo_qwen3", [True, True, True, True], [0.0, 0.1, 0.1, 0.2])  # 100 %
        + _trajectory_rows("udpo_attack_qwen3_m1", [True, True, True, False], [0.1, 0.1, 0.2, 0.6])  # 75 %
        + _trajectory_rows("mad_n5", [True, False, False, False], [0.3, 0.5, 0.7, 0.9])
    )  # 25 %
    outputs = _outputs(
        protocols,
        {"udpo_qwen3": RunInfo("udpo_qwen3", "udpo", {"udpo": {}})},
        uncertainty=pd.DataFrame(rows),
        training={},
    )
    outputs.model_backbones = {"udpo": {"qwen": "Qwen-3-8B", "qwen-udpo": "Qwen-3-8B", "m": None}}
    evaluate_paper("udpo", outputs, tmp_path)

    t4 = pd.read_csv(tmp_path / "table4_vs_paper.csv").set_index(["dataset", "model", "method", "metric"])
    assert t4.loc[("gsm8k", "Qwen-3-8B", "MAD", "accuracy"), ["paper_value", "run_value"]].tolist() == [65.8, 75.0]
    assert t4.loc[("gsm8k", "Qwen-3-8B", "UDPO", "accuracy"), ["paper_value", "run_value"]].tolist() == [90.2, 100.0]
    assert t4.loc[("gsm8k", "Qwen-3-8B", "MAD", "u_sys"), "run_value"] == pytest.approx(0.35)  # mean of .1 .2 .3 .8
    # the other backbones' rows have no run value
    assert t4.xs("Llama-4-Scout", level="model")["run_value"].isna().all()
    assert math.isnan(t4.loc[("gsm8k", "Qwen-3-8B", "MAPPO", "accuracy"), "run_value"])  # no mappo run here

    t7 = pd.read_csv(tmp_path / "table7_vs_paper.csv").set_index(["dataset", "method", "metric"])
    assert t7.loc[("gsm8k", "MAD", "accuracy"), ["paper_value", "run_value"]].tolist() == [35.2, 25.0]
    assert t7.loc[("gsm8k", "MAD", "drop"), "run_value"] == -50.0  # 25 - 75
    assert t7.loc[("gsm8k", "UDPO", "accuracy"), "run_value"] == 75.0
    assert t7.loc[("gsm8k", "UDPO", "drop"), "run_value"] == -25.0  # 75 - 100
    assert math.isnan(t7.loc[("truthfulqa", "MAD", "accuracy"), "run_value"])

    t1 = pd.read_csv(tmp_path / "table1_vs_paper.csv").set_index(["dataset", "n_agents", "method", "metric"])
    assert t1.loc[("gsm8k", 5, "MAD", "accuracy"), "run_value"] == 25.0  # mad_n5 only, not the Qwen ensembles
    assert math.isnan(t1.loc[("gsm8k", 5, "UDPO", "accuracy"), "run_value"])  # udpo_qwen3 is Table 4's
    t3 = pd.read_csv(tmp_path / "table3_vs_paper.csv")
    assert t3["run_value"].isna().all()  # Table 3 is the heterogeneous ensemble's


def test_svr_mad_protocols_meet_their_own_llm_and_skip_rate_rows():
    """svr_mad.yaml: SID-ET at 60 % on IMO and at 70 % on HLE (sid_et, sid_et_r70, one dataset each)
    are both Table 1's "SID-ET", and the DeepSeek-V3.1 protocols fill the DeepSeek rows under the
    paper's method names, beside the GPT-OSS ones."""
    protocols = [
        _on(_protocol("sid_et", "sid_et"), "gptoss", ["imo_answerbench"]),
        _on(_protocol("sid_et_r70", "sid_et"), "gptoss", ["hle"]),
        _on(_protocol("svr_mad", "svr_mad"), "gptoss", ["imo_answerbench", "hle"]),
        _on(_protocol("sid_et_r60_deepseek", "sid_et"), "deepseek", ["hle"]),
        _on(_protocol("svr_mad_deepseek", "svr_mad"), "deepseek", ["imo_answerbench", "hle"]),
        _on(_protocol("svr_mad_again", "svr_mad"), "deepseek", ["hle"]),  # a second one on one (LLM, dataset)
    ]
    rows = []
    spec = {
        ("sid_et", "imo_answerbench"): (10, [True, False]),
        ("sid_et_r70", "hle"): (4, [True, True]),
        ("svr_mad", "imo_answerbench"): (2, [True, True]),
        ("svr_mad", "hle"): (3, [False, False]),
        ("sid_et_r60_deepseek", "hle"): (6, [False, True]),
        ("svr_mad_deepseek", "imo_answerbench"): (5, [True, False]),
        ("svr_mad_deepseek", "hle"): (1, [True, False]),
        ("svr_mad_again", "hle"): (9, [True, True]),
    }
    for (protocol, dataset), (ncomm, correct) in spec.items():
        for i, c in enumerate(correct):
            rows.append(
                {
                    "question_id": f"q{i}",
                    "dataset": dataset,
                    "protocol": protocol,
                    "thread": 0,
                    "ncomm": ncomm,
                    "total_tokens": 1000,
                    "correct": c,
                    "pre_unanimous": False,
                }
            )
    outputs = RunOutputs(
        "fixture",
        {p.name: p for p in protocols},
        {},
        {"imo_answerbench": "imo_answerbench", "hle": "hle"},
        model_backbones={"svr_mad": {"gptoss": "GPT-OSS-120B", "deepseek": "DeepSeek-V3.1"}},
    )
    outputs.__dict__["questions"] = pd.DataFrame(rows)

    labels = svr_mad.method_labels(outputs)
    assert labels["sid_et"] == labels["sid_et_r70"] == labels["sid_et_r60_deepseek"] == "SID-ET"
    assert labels["svr_mad"] == labels["svr_mad_deepseek"] == "SVR-MAD"
    assert labels["svr_mad_again"] == "SVR-MAD [svr_mad_again]"

    result = build_paper("svr_mad", outputs)
    vs = compare_with_paper(result.cells["table1"], load_paper_numbers("svr_mad")["table1"]).set_index(
        ["llm", "dataset", "method", "metric"]
    )
    assert vs.loc[("GPT-OSS-120B", "imo_answerbench", "SID-ET", "NComm"), "run_value"] == 10.0
    assert vs.loc[("GPT-OSS-120B", "hle", "SID-ET", "NComm"), "run_value"] == 4.0  # the 70 % protocol
    assert vs.loc[("GPT-OSS-120B", "hle", "SVR-MAD", "Acc"), "run_value"] == 0.0
    assert vs.loc[("DeepSeek-V3.1", "hle", "SID-ET", "NComm"), "run_value"] == 6.0
    assert vs.loc[("DeepSeek-V3.1", "hle", "SVR-MAD", "NComm"), "run_value"] == 1.0  # not svr_mad_again's 9
    assert vs.loc[("DeepSeek-V3.1", "imo_answerbench", "SVR-MAD", "Acc"), "run_value"] == 50.0
    assert not vs.index.duplicated().any()
    # the layout keeps the two LLMs' blocks apart
    layout = result.tables["table1"].set_index(["llm", "method"])
    assert layout.loc[("DeepSeek-V3.1", "SVR-MAD"), "hle NComm"] == 1.0
    assert layout.loc[("GPT-OSS-120B", "SVR-MAD"), "hle NComm"] == 3.0


def test_svr_mad_table1_keeps_a_method_whose_questions_all_start_unanimous_and_adds_no_other_backbone():
    """A dataset whose debates all start unanimous has empty cells, kept (the tiny DAG's random model);
    with two backbones, a method run on one of them gets no empty row on the other."""
    nan = float("nan")
    cells = pd.DataFrame(
        [
            {"run_dataset": "d", "llm": "", "method": "SVR-MAD", "NComm": nan, "Tok": nan, "Acc": nan},
            {"run_dataset": "d", "llm": "", "method": "Self Consistency", "NComm": nan, "Tok": nan, "Acc": nan},
        ]
    )
    assert list(svr_mad.table1_layout(cells)["method"]) == ["Self Consistency", "SVR-MAD"]
    two = pd.DataFrame(
        [
            {"run_dataset": "d", "llm": "A", "method": "SVR-MAD", "NComm": 1.0, "Tok": 2.0, "Acc": 50.0},
            {"run_dataset": "d", "llm": "B", "method": "S2-MAD", "NComm": nan, "Tok": nan, "Acc": nan},
        ]
    )
    table = svr_mad.table1_layout(two)
    assert list(zip(table["llm"], table["method"])) == [("A", "SVR-MAD"), ("B", "S2-MAD")]


def test_the_evaluation_reads_only_columns_its_writers_write():
    """run.py's column lists are taken from the writers' schemas (issue 43 part 2): a column the
    writer doesn't write fails when the list is made, not when a run's files are read."""
    from debatelab.debate import schema as debate_schema
    from debatelab.evaluation import run
    from debatelab.zero_shot.schema import ZERO_SHOT_COLUMNS

    assert set(run.QUESTION_COLUMNS) <= set(debate_schema.QUESTION_COLUMNS)
    assert set(run.TURN_COLUMNS + run.TURN_OPTIONAL_COLUMNS) <= set(debate_schema.TURN_COLUMNS)
    assert set(run.ZERO_SHOT_COLUMNS) <= set(ZERO_SHOT_COLUMNS)
    with pytest.raises(ImportError, match="final_answers"):
        run.writers_columns(debate_schema.QUESTION_COLUMNS, "question_id", "final_answers")
