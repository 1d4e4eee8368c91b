"""Streams, calibration fitting, the test report and the lift table of the confidence stages."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from debatelab.confidence import stage
from debatelab.confidence.calibrators import fit_calibrator
from debatelab.confidence.fusion import BASELINES
from debatelab.confidence.search import SearchSettings
from debatelab.confidence.stage import CalibrationSettings
from debatelab.confidence.streams import (
    aggregate_samples,
    build_streams,
    split_questions,
    streams_job,
    synthetic_streams,
)
from debatelab.io import DataFileError, write_parquet_atomic
from debatelab.metrics import paired_t_greater
from debatelab.reporting import confidence as report


def _samples(answers, verbal, seqprob, gold="4"):
    return pd.DataFrame(
        {
            "sample": range(len(answers)),
            "answer": answers,
            "correct": [a == gold for a in answers],
            "conf_verbal": verbal,
            "conf_seqprob": seqprob,
        }
    )


def test_self_consistency_takes_the_plurality_and_averages_as_decided():
    out = aggregate_samples(_samples(["4", "5", "4"], [0.9, 0.3, 0.6], [0.8, 0.2, 0.6]))
    assert out["answer"] == "4" and out["correct"] and out["n_samples"] == 3
    assert out["conf_verbal"] == pytest.approx(0.6)  # all samples
    assert out["conf_seqprob"] == pytest.approx(0.7)  # the samples agreeing with the answer


def test_self_consistency_tie_goes_to_the_most_confident_sample():
    out = aggregate_samples(_samples(["4", "5", None], [0.5, 0.5, 0.5], [0.3, 0.9, 0.1]))
    assert out["answer"] == "5" and not out["correct"]
    out = aggregate_samples(_samples([None, None], [0.5, 0.7], [np.nan, np.nan]))
    assert out["answer"] is None and not out["correct"] and np.isnan(out["conf_seqprob"])


def test_split_is_seeded_order_free_and_exact():
    ids = [f"q{i}" for i in range(20)]
    mask = split_questions(ids, seed=0, run=0, val_fraction=0.3)
    assert mask.sum() == 6
    shuffled = ids[::-1]
    assert set(np.array(shuffled)[split_questions(shuffled, 0, 0, 0.3)]) == set(np.array(ids)[mask])
    assert not np.array_equal(mask, split_questions(ids, 0, 1, 0.3))
    assert split_questions(["a", "b"], 0, 0, 0.01).sum() == 1  # both splits keep a question
    with pytest.raises(ValueError, match="val_fraction"):
        split_questions(ids, 0, 0, 1.0)


def _write_inputs(tmp_path, elicit=True):
    tmp_path.mkdir(parents=True, exist_ok=True)
    dataset = pd.DataFrame(
        {
            "id": ["q1", "q2"],
            "question": ["2+2?", "Pick"],
            "choices": [None, ["x", "y", "z"]],
            "answer": ["4", "B"],
            "task_type": ["math", "multiple_choice"],
            "meta": ['{"source": "t", "source_split": "test"}'] * 2,
        }
    )
    write_parquet_atomic(dataset, tmp_path / "data.parquet")
    paths = []
    for agent, answers in (("a", ["4", "A"]), ("b", ["5", "B"])):
        zero = pd.DataFrame(
            {
                "question_id": ["q1", "q2"],
                "agent": agent,
                "sample": 0,
                "answer": answers,
                "gold": ["4", "B"],
                "correct": [answers[0] == "4", answers[1] == "B"],
                "task_type": ["math", "multiple_choice"],
                "conf_verbal": [0.8, 0.6],
                "conf_seqprob": [0.7, 0.5],
            }
        )
        path = tmp_path / f"{agent}.parquet"
        write_parquet_atomic(zero, path)
        paths.append(path)
    # the pair's debate ran on q1 only (e.g. MAD-D style), agent b's second call is its last
    turns = pd.DataFrame(
        {
            "question_id": ["q1", "q1", "q1", "q1", "q1"],
            "round": [0, 0, 1, 1, 1],
            "agent": ["a", "b", "a", "b", "b"],
            "agent_config": ["a", "b", "a", "b", "b"],
            "call": [0, 0, 0, 0, 1],
            "answer": ["4", "5", "4", "5", "4"],
            "correct": [True, False, True, False, True],
            "conf_verbal": [None, None, 0.9, 0.2, 0.7 if elicit else None],
            "conf_seqprob": [None, None, 0.95, 0.3, 0.8],
        }
    )
    if not elicit:
        turns["conf_verbal"] = np.nan
    write_parquet_atomic(turns, tmp_path / "turns.parquet")
    return tmp_path / "data.parquet", paths, tmp_path / "turns.parquet"


def test_streams_take_round_one_and_carry_stream_zero_where_there_was_no_debate(tmp_path):
    data, zero, turns = _write_inputs(tmp_path)
    frame = build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "b"])
    assert len(frame) == 8
    row = frame.set_index(["question_id", "agent", "stream"])
    assert row.loc[("q1", "b", 1), "answer"] == "4" and row.loc[("q1", "b", 1), "conf_verbal"] == 0.7
    assert bool(row.loc[("q1", "b", 1), "debated"]) and bool(row.loc[("q1", "b", 1), "correct"])
    assert row.loc[("q2", "a", 1), "answer"] == "A" and not row.loc[("q2", "a", 1), "debated"]
    assert row.loc[("q2", "a", 0), "n_labels"] == 3 and row.loc[("q1", "a", 0), "n_labels"] == 0


def test_streams_name_the_file_and_column_when_the_debate_elicited_no_confidence(tmp_path):
    data, zero, turns = _write_inputs(tmp_path, elicit=False)
    with pytest.raises(DataFileError, match=r"turns\.parquet: column conf_verbal is empty"):
        build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "b"])
    with pytest.raises(DataFileError, match=r"b\.parquet: expected agent 'c'"):
        build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "c"], estimators=["seqprob"])


def _run_stage(directory, streams, trials=15):
    directory.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(streams, directory / "streams.parquet")
    stage.fit_calibrators_job(
        directory / "streams.parquet",
        directory / "cal.json",
        directory / "cal.csv",
        seed=0,
        settings=CalibrationSettings(runs=2, calibrators=["raw", "beta", "isotonic"]),
    )
    searches = []
    for protocol in ("wsv", "cga", "hid"):
        stage.search_protocol_job(
            directory / "streams.parquet",
            directory / "cal.json",
            directory / f"{protocol}.json",
            directory / f"{protocol}.trials.parquet",
            directory / f"{protocol}.png",
            directory / f"{protocol}.journal",
            dataset="d",
            pair="ab",
            protocol=protocol,
            settings=SearchSettings(trials=trials, patience=trials),
            show_progress=False,
        )
        searches.append(directory / f"{protocol}.json")
    stage.apply_protocol_job(
        directory / "streams.parquet",
        directory / "cal.json",
        searches,
        directory / "pred.parquet",
        directory / "metrics.csv",
        directory / "rel.png",
        directory / "rej.png",
        dataset="d",
        pair="ab",
    )
    return directory


def test_the_whole_stage_is_deterministic_for_a_seed(tmp_path):
    streams = synthetic_streams(120, seed=4)
    first = _run_stage(tmp_path / "one", streams)
    second = _run_stage(tmp_path / "two", streams)
    for name in ("cal.json", "cal.csv", "metrics.csv", "wsv.json", "hid.json"):
        assert (first / name).read_text() == (second / name).read_text(), name
    pd.testing.assert_frame_equal(pd.read_parquet(first / "pred.parquet"), pd.read_parquet(second / "pred.parquet"))
    for name in ("rel.png", "rej.png", "cga.png"):
        assert (first / name).stat().st_size > 1000


def test_calibrators_see_only_the_validation_split(tmp_path):
    streams = synthetic_streams(80, seed=2)
    calibration = stage.fit_calibrators(
        streams, seed=0, settings=CalibrationSettings(runs=1, estimators=["seqprob"], calibrators=["beta"])
    )
    val = set(calibration["runs"][0]["val_question_ids"])
    assert len(val) == 40
    flipped = streams.copy()
    test_rows = ~flipped["question_id"].isin(val)
    flipped.loc[test_rows, "correct"] = ~flipped.loc[test_rows, "correct"]
    again = stage.fit_calibrators(
        flipped, seed=0, settings=CalibrationSettings(runs=1, estimators=["seqprob"], calibrators=["beta"])
    )
    assert json.dumps(again) == json.dumps(calibration)


def _fixed_split_streams(n=160, seed=3):
    """Synthetic streams whose first half of questions is a fixed validation split, the rest test."""
    streams = synthetic_streams(n, seed=seed, skills=(0.55, 0.7))
    ids = np.sort(streams["question_id"].unique())
    return streams.assign(split=np.where(streams["question_id"].isin(ids[: n // 2]), "val", "test"))


def _baseline_metrics(streams, seed, runs=2):
    settings = CalibrationSettings(runs=runs, estimators=["seqprob"], calibrators=["beta"])
    calibration = stage.fit_calibrators(streams, seed=seed, settings=settings)
    _, table = stage.evaluate_methods(streams, calibration, [])
    return calibration, table.set_index(["run", "method"])


def test_runs_on_a_fixed_split_draw_their_own_val_and_test_questions_and_baselines():
    streams = _fixed_split_streams()
    fixed_val = set(streams.loc[streams["split"] == "val", "question_id"])
    calibration, table = _baseline_metrics(streams, seed=0)
    runs = []
    for run in (0, 1):
        val, test = stage.split_arrays(streams, calibration, run, "seqprob", "beta")
        assert len(val) == len(test) == 80  # a bootstrap sample is as large as its side
        assert set(val.question_ids) <= fixed_val and not set(test.question_ids) & fixed_val
        runs.append((list(val.question_ids), list(test.question_ids)))
    assert runs[0][0] != runs[1][0] and runs[0][1] != runs[1][1]
    # the baselines see different questions, so their test metrics move between runs
    for method in ("zero_shot:a", "zero_shot:b", "mad", "mad_d"):
        for metric in ("f1", "nll"):
            assert table.loc[(0, method), metric] != table.loc[(1, method), metric], (method, metric)
    # run 0's calibrator is fitted on run 0's sample: refitting on exactly those rows gives it back
    first = [f for f in calibration["runs"][0]["fitted"] if f["agent_index"] == 0 and f["stream"] == 0][0]
    rows = stage.take_questions(streams, calibration["runs"][0]["val_question_ids"])
    rows = rows[(rows["agent_index"] == 0) & (rows["stream"] == 0)]
    assert len(rows) == 80 and first["fit"]["n_fit"] == 80
    refit = fit_calibrator("beta", rows["conf_seqprob"].to_numpy(float), rows["correct"].to_numpy(bool)).to_dict()
    assert refit == first["fit"]
    # the same seed gives the same runs; another experiment seed other ones
    again, again_table = _baseline_metrics(streams, seed=0)
    assert json.dumps(again) == json.dumps(calibration)
    pd.testing.assert_frame_equal(again_table, table)
    other, _ = _baseline_metrics(streams, seed=1)
    assert other["runs"][0]["test_question_ids"] != calibration["runs"][0]["test_question_ids"]


def test_report_covers_every_method_and_picks_the_validation_better_agent(tmp_path):
    streams = synthetic_streams(200, seed=1, skills=(0.4, 0.8))
    directory = _run_stage(tmp_path / "s", streams, trials=5)
    table = pd.read_csv(directory / "metrics.csv")
    methods = set(table["method"])
    assert methods == {"zero_shot:a", "zero_shot:b", "zero_shot", "mad", "mad_d", "wsv", "cga", "hid"}
    assert set(table.loc[table["method"] == "zero_shot", "agent"]) == {"b"}
    assert len(table) == 8 * 2 * 3 * 2  # methods × estimators × calibrators × runs
    assert table[["f1", "auarc", "ece", "nll"]].notna().all().all()
    predictions = pd.read_parquet(directory / "pred.parquet")
    calibration = json.loads((directory / "cal.json").read_text())
    run0 = predictions[predictions["run"] == 0]
    assert not set(run0["question_id"]) & set(calibration["runs"][0]["val_question_ids"])  # test split only


def _metrics_table(rng, pair_effects):
    rows = []
    for pair, effect in pair_effects.items():
        for run in range(5):
            for method, base in (("zero_shot", 0.6), ("mad", 0.55), ("mad_d", 0.58), ("cga", 0.6 + effect)):
                value = base + rng.normal(0, 0.005)
                rows.append(
                    {
                        "dataset": "d",
                        "pair": pair,
                        "estimator": "seqprob",
                        "calibrator": "beta",
                        "method": method,
                        "run": run,
                        "f1": value,
                        "auarc": value,
                    }
                )
    return pd.DataFrame(rows)


def test_lift_counts_pairs_significantly_better_than_every_comparator():
    table = _metrics_table(np.random.default_rng(0), {"p1": 0.05, "p2": -0.05, "p3": 0.0})
    lift = report.lift_table(table, BASELINES).set_index("method")
    assert lift.loc["cga", "k_f1"] == 1 and lift.loc["cga", "n_pairs"] == 3
    assert lift.loc["cga", "lift_f1"] == pytest.approx(0.0, abs=0.5)  # +5, −5, 0 points
    assert lift.loc["mad", "k_auarc"] == 0 and lift.loc["mad", "lift_auarc"] == pytest.approx(-5, abs=0.5)
    paper = report.paper_layout(report.lift_table(table, BASELINES), "beta")
    assert paper.set_index("method").loc["cga", "d"].endswith("(1)")


def _runs_table(pairs):
    """Metrics rows of one (dataset, estimator, calibrator): pairs -> method -> 5 per-run values."""
    return pd.DataFrame(
        [
            {
                "dataset": "d",
                "pair": pair,
                "estimator": "seqprob",
                "calibrator": "beta",
                "method": method,
                "run": run,
                "f1": value,
                "auarc": value,
            }
            for pair, methods in pairs.items()
            for method, values in methods.items()
            for run, value in enumerate(values)
        ]
    )


def test_significance_needs_a_positive_difference_that_beats_its_own_variance():
    zero_shot = np.array([0.60, 0.62, 0.58, 0.61, 0.59])
    mad = zero_shot - np.array([0.10, 0.12, 0.09, 0.11, 0.10])  # CGA beats MAD and MAD-D clearly in every pair
    straddle = np.array([0.02, -0.01, 0.03, -0.02, 0.01])  # CGA − zs*
    # by hand: mean 0.006, deviations 0.014 −0.016 0.024 −0.026 0.004, Σ² = 17.2e-4, s = √(4.3e-4),
    # t = 0.006 / (s/√5) = 0.647 on 4 df: one-sided p ≈ 0.28, not significant
    assert paired_t_greater(zero_shot + straddle, zero_shot) == pytest.approx(stats.t.sf(0.647, 4), abs=1e-3)
    steady = np.array([0.03, 0.04, 0.05, 0.04, 0.04])  # mean 0.04, s = √(0.5e-4): t = 12.6, p ≈ 1e-4
    assert paired_t_greater(zero_shot + steady, zero_shot) == pytest.approx(stats.t.sf(12.65, 4), rel=0.01)
    pairs = {
        name: {"zero_shot": zero_shot, "mad": mad, "mad_d": mad, "cga": zero_shot + difference}
        for name, difference in (("straddles", straddle), ("steady", steady), ("constant", np.full(5, 0.05)))
    }
    lift = report.lift_table(_runs_table(pairs), BASELINES).set_index("method")
    # only "steady" counts: "straddles" is not significant, and "constant" (no variance over runs,
    # t = inf) is untestable, not significant by a p = 0 artefact
    assert lift.loc["cga", "k_f1"] == 1 and lift.loc["cga", "untestable_f1"] == 1
    assert paired_t_greater(zero_shot + 0.05, zero_shot) != paired_t_greater(zero_shot + 0.05, zero_shot)
    assert paired_t_greater(zero_shot, zero_shot) == 1.0  # the same method is simply not better
    # runs that share their data (every value the same in every run) can claim nothing: k is "–"
    flat = {
        "p": {"zero_shot": np.full(5, 0.6), "mad": np.full(5, 0.5), "mad_d": np.full(5, 0.5), "cga": np.full(5, 0.7)}
    }
    flat_lift = report.lift_table(_runs_table(flat), BASELINES).set_index("method")
    assert np.isnan(flat_lift.loc["cga", "k_f1"]) and np.isnan(flat_lift.loc["mad", "k_f1"])
    assert report.paper_layout(report.lift_table(_runs_table(flat), BASELINES), "beta").set_index("method").loc[
        "cga", "d"
    ] == ("+10.00(–) / +10.00(–)")


def test_lifts_and_run_means_carry_the_t_interval_over_runs(tmp_path):
    """The lift's interval is the one-sample t interval of each run's lift averaged over pairs (what
    the paired t-test over runs inverts); the summary's means carry theirs over runs; under 2 runs
    there is none."""
    rng = np.random.default_rng(4)
    table = _metrics_table(rng, {"p1": 0.03, "p2": 0.01})
    lift = report.lift_table(table, BASELINES).set_index("method")
    wide = table.pivot_table(index=["run", "pair"], columns="method", values="f1")
    per_run = (100 * (wide["cga"] - wide["zero_shot"])).groupby(level="run").mean()
    expected = stats.ttest_1samp(per_run, 0).confidence_interval(0.95)
    assert lift.loc["cga", "lift_f1_low"] == pytest.approx(expected.low)
    assert lift.loc["cga", "lift_f1_high"] == pytest.approx(expected.high)
    assert lift.loc["cga", "lift_f1_low"] < lift.loc["cga", "lift_f1"] < lift.loc["cga", "lift_f1_high"]

    for name in ("accuracy", "auroc", "ece", "brier", "nll"):
        table[name] = rng.uniform(size=len(table))
    paths = [tmp_path / "m.csv"]
    table.to_csv(paths[0], index=False)
    outputs = [tmp_path / f for f in ("t.csv", "l.csv", "p.csv", "l.png")]
    summary = report.summarize_confidence(paths, *outputs, baselines=BASELINES)
    assert "lift_auarc_low" in summary
    means = pd.read_csv(tmp_path / "t.csv").set_index(["pair", "method"])
    runs = table[(table["pair"] == "p2") & (table["method"] == "mad")]["ece"]
    expected = stats.ttest_1samp(runs, 0).confidence_interval(0.95)
    row = means.loc[("p2", "mad")]
    assert row["n_runs"] == 5 and row["ece"] == pytest.approx(runs.mean())
    assert (row["ece_low"], row["ece_high"]) == pytest.approx((expected.low, expected.high))
    one_run = report.lift_table(table[table["run"] == 0], BASELINES)
    assert one_run[["lift_f1_low", "lift_f1_high"]].isna().all().all()


def test_a_pair_debate_that_debated_nothing_repeats_stream_zero(tmp_path):
    data, zero, turns = _write_inputs(tmp_path)
    frame = pd.read_parquet(turns)
    write_parquet_atomic(frame[frame["round"] == 0], turns)  # e.g. MAD-D on unanimous answers
    streams = build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "b"])
    by_stream = streams.set_index(["question_id", "agent", "stream"])
    for agent in ("a", "b"):
        for question in ("q1", "q2"):
            assert by_stream.loc[(question, agent, 1), "answer"] == by_stream.loc[(question, agent, 0), "answer"]
    assert not streams["debated"].any()


def test_a_fixed_validation_dataset_is_the_validation_side_of_every_run(tmp_path):
    test_files = _write_inputs(tmp_path / "test")
    val_files = _write_inputs(tmp_path / "val")
    for path in [val_files[0], *val_files[1], val_files[2]]:  # the validation split's own question ids
        frame = pd.read_parquet(path)
        column = "id" if "id" in frame else "question_id"
        frame[column] = frame[column].str.replace("q", "v")
        write_parquet_atomic(frame, path)
    validation = {
        "dataset_path": val_files[0],
        "zero_shot_paths": val_files[1],
        "turns_path": val_files[2],
        "dataset": "d_dev",
    }
    streams = streams_job(
        *test_files, tmp_path / "s.parquet", dataset="d", pair="ab", agents=["a", "b"], validation=validation
    )
    assert streams.groupby("split")["question_id"].nunique().to_dict() == {"test": 2, "val": 2}
    assert set(streams.loc[streams["split"] == "val", "dataset"]) == {"d_dev"}
    settings = dict(runs=3, estimators=["seqprob"], calibrators=["beta"])
    whole = stage.fit_calibrators(streams, seed=0, settings=CalibrationSettings(**settings, resample="none"))
    assert [r["val_question_ids"] for r in whole["runs"]] == [["v1", "v2"]] * 3
    assert [r["test_question_ids"] for r in whole["runs"]] == [["q1", "q2"]] * 3
    val, test = stage.split_arrays(streams, whole, 0, "seqprob", "beta")
    assert list(val.question_ids) == ["v1", "v2"] and list(test.question_ids) == ["q1", "q2"]
    # bootstrap (the default): each run draws from its own side only, as many questions as it has
    drawn = stage.fit_calibrators(streams, seed=0, settings=CalibrationSettings(**settings))
    for run in drawn["runs"]:
        assert len(run["val_question_ids"]) == 2 and set(run["val_question_ids"]) <= {"v1", "v2"}
        assert len(run["test_question_ids"]) == 2 and set(run["test_question_ids"]) <= {"q1", "q2"}
    # the same questions on both sides would leak the test set into the fit
    with pytest.raises(DataFileError, match="must not overlap"):
        streams_job(
            *test_files,
            tmp_path / "t.parquet",
            dataset="d",
            pair="ab",
            agents=["a", "b"],
            validation={
                **validation,
                "dataset_path": test_files[0],
                "zero_shot_paths": test_files[1],
                "turns_path": test_files[2],
            },
        )


def test_a_missing_or_corrupt_calibration_file_is_named(tmp_path):
    streams = synthetic_streams(20)
    write_parquet_atomic(streams, tmp_path / "streams.parquet")
    (tmp_path / "cal.json").write_text("{not json")
    for name, message in (("absent.json", "file not found"), ("cal.json", "not valid JSON")):
        with pytest.raises(DataFileError, match=rf"{name}: {message}"):
            stage.search_protocol_job(
                tmp_path / "streams.parquet",
                tmp_path / name,
                tmp_path / "o.json",
                tmp_path / "t.parquet",
                tmp_path / "h.png",
                tmp_path / "j.log",
                dataset="d",
                pair="ab",
                protocol="cga",
                settings=SearchSettings(trials=2),
                show_progress=False,
            )
