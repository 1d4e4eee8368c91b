"""The confidence paper's evaluation (Elahi & Di Eugenio, arXiv:2606.13591 §4.1, §5) on small hand-made stage outputs: Table 1
cells next to the published ones, the calibration table and the claims, each checked against
values worked out by hand."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from debatelab.evaluation import RunOutputs, evaluate_paper
from debatelab.evaluation.claims import claims_frame
from debatelab.evaluation.papers import confidence, confidence_claims

RUNS = 10  # calibration runs of the fixture: claims.MIN_UNITS, the fewest that get an interval

# lift rows of the beta calibrator: method -> (lift_f1, k_f1, lift_auarc, k_auarc), in points
BETA = {
    "mad": (-3.0, 0, -1.0, 0),
    "mad_d": (-1.0, 0, 0.5, 1),
    "wsv": (1.25, 2, 4.5, 2),
    "cga": (0.5, 1, 5.0, 2),
    "hid": (0.25, 0, -0.5, 0),
}


def _lift() -> pd.DataFrame:
    rows = []
    for dataset in ("tiny_boolq", "tiny_mmlu"):
        for estimator in ("seqprob", "verbal"):
            for kind, shift in (("raw", -10.0), ("beta", 0.0)):
                for method, (f1, kf, auarc, ka) in BETA.items():
                    rows.append(
                        {
                            "dataset": dataset,
                            "estimator": estimator,
                            "calibrator": kind,
                            "method": method,
                            "n_pairs": 2,
                            "n_runs": 3,
                            "lift_f1": f1 + shift,
                            "k_f1": kf,
                            "lift_auarc": auarc + shift,
                            "k_auarc": ka,
                        }
                    )
    return pd.DataFrame(rows)


def _calibration() -> pd.DataFrame:
    """Test ECE: raw .2, beta .1, isotonic .1 on p1 and .32 on p2 (mean .21: worse); test AUARC:
    raw .70, beta .71, isotonic .75. The validation rows are far off, so using them would show."""
    ece = {"raw": {"p1": 0.2, "p2": 0.2}, "beta": {"p1": 0.1, "p2": 0.1}, "isotonic": {"p1": 0.1, "p2": 0.32}}
    auarc = {"raw": 0.70, "beta": 0.71, "isotonic": 0.75}
    rows = []
    for pair in ("p1", "p2"):
        for run in range(RUNS):
            for kind in ece:
                for agent in ("a", "b"):
                    for stream in (0, 1):
                        base = {
                            "run": run,
                            "estimator": "seqprob",
                            "calibrator": kind,
                            "agent": agent,
                            "stream": stream,
                            "nll": 0.6,
                            "brier": 0.2,
                            "dataset": "tiny_boolq",
                            "pair": pair,
                        }
                        rows.append({**base, "split": "test", "n": 50, "ece": ece[kind][pair], "auarc": auarc[kind]})
                        rows.append({**base, "split": "val", "n": 30, "ece": 0.9, "auarc": 0.1})
    return pd.DataFrame(rows)


# test F1 / AUARC (fractions) per calibrator and method; zero_shot:a is one agent, never a method
METRICS = {
    "beta": {
        "zero_shot:a": (0.90, 0.90),
        "zero_shot": (0.60, 0.65),
        "mad": (0.57, 0.64),
        "mad_d": (0.59, 0.66),
        "wsv": (0.63, 0.70),
        "cga": (0.62, 0.74),
        "hid": (0.61, 0.72),
    },
    "raw": {
        "zero_shot:a": (0.90, 0.90),
        "zero_shot": (0.60, 0.60),
        "mad": (0.57, 0.60),
        "mad_d": (0.59, 0.60),
        "wsv": (0.61, 0.60),
        "cga": (0.63, 0.60),
        "hid": (0.61, 0.60),
    },
}


def _metrics() -> pd.DataFrame:
    rows = []
    for pair, wobble in (("p1", 0.01), ("p2", -0.01)):  # cancels in the mean over pairs
        for run in range(RUNS):
            for kind, methods in METRICS.items():
                for method, (f1, auarc) in methods.items():
                    rows.append(
                        {
                            "dataset": "tiny_boolq",
                            "pair": pair,
                            "run": run,
                            "estimator": "seqprob",
                            "calibrator": kind,
                            "method": method,
                            "agent": "",
                            "accuracy": f1,
                            "f1": f1 + wobble,
                            "auarc": auarc + wobble,
                            "ece": 0.1,
                            "n": 50,
                        }
                    )
    return pd.DataFrame(rows)


# streams: (dataset, question, agent) -> ((correct, seqprob, verbal) before, (correct, seqprob, verbal) after
# or None: not debated)
STREAMS = {
    ("tiny_boolq", "q1", "a"): ((True, 0.6, 0.5), (True, 0.7, 0.5)),  # c→c +.1
    ("tiny_boolq", "q1", "b"): ((True, 0.5, 0.6), (False, 0.8, 0.4)),  # c→i +.3 (self-report −.2)
    ("tiny_boolq", "q2", "a"): ((False, 0.4, 0.3), (True, 0.5, 0.5)),  # i→c +.1
    ("tiny_boolq", "q2", "b"): ((True, 0.7, 0.7), (False, 0.6, 0.7)),  # c→i −.1 (self-report 0)
    ("tiny_boolq", "q3", "a"): ((False, 0.5, 0.5), (False, 0.45, 0.5)),  # i→i −.05
    ("tiny_boolq", "q3", "b"): ((False, 0.5, 0.5), None),  # not debated: stream 1 carries stream 0 over
    ("tiny_mmlu", "q9", "a"): ((True, 0.3, 0.2), (True, 0.4, 0.2)),  # the only mmlu answer: c→c
}


def _streams() -> pd.DataFrame:
    rows = []
    for (dataset, question, agent), (before, after) in STREAMS.items():
        base = {"dataset": dataset, "pair": "p1", "question_id": question, "agent": agent}
        rows.append(
            {
                **base,
                "stream": 0,
                "correct": before[0],
                "conf_seqprob": before[1],
                "conf_verbal": before[2],
                "debated": False,
            }
        )
        debated = after is not None
        after = after or before
        rows.append(
            {
                **base,
                "stream": 1,
                "correct": after[0],
                "conf_seqprob": after[1],
                "conf_verbal": after[2],
                "debated": debated,
            }
        )
    return pd.DataFrame(rows + rows[:2])  # q1/a again, as another run's split repeats it


def _outputs(**settings) -> RunOutputs:
    outputs = RunOutputs("tiny_conf", {}, {}, {"tiny_boolq": "boolq", "tiny_mmlu": "mmlu_college"}, settings=settings)
    outputs.__dict__["confidence_lift"] = _lift()
    outputs.__dict__["calibration"] = _calibration()
    outputs.__dict__["confidence_metrics"] = _metrics()
    outputs.__dict__["confidence_streams"] = _streams()
    return outputs


@pytest.fixture(scope="module")
def result():
    """One evaluation of the default fixture, shared: building the lift plot is the slow part."""
    evaluation = confidence.evaluate(_outputs())
    yield evaluation
    plt.close("all")


def _claims(result) -> pd.DataFrame:
    return claims_frame(result.claims)


def _claim(claims: pd.DataFrame, number: str, scope: str, statement_part: str = "") -> pd.Series:
    rows = claims[
        (claims["claim"] == number)
        & (claims["scope"] == scope)
        & claims["statement"].str.contains(statement_part, regex=False)
    ]
    assert len(rows) == 1, (number, scope, statement_part, claims[["claim", "scope", "statement"]])
    return rows.iloc[0]


def test_table1_is_the_stage_layout_with_paper_keys_in_the_cells(result):
    table = result.tables["table1"].set_index(["estimator", "method"])
    assert list(table.columns) == ["tiny_boolq (boolq)", "tiny_mmlu (mmlu_college)"]
    assert table.loc[("seqprob", "wsv"), "tiny_boolq (boolq)"] == "+1.25(2) / +4.50(2)"  # beta, not raw
    assert list(table.loc["seqprob"].index) == ["mad", "mad_d", "wsv", "cga", "hid"]
    cells = result.cells["table1"].set_index(["estimator", "method", "dataset", "metric"])
    assert cells.loc[("verbal", "cga", "boolq", "auarc_lift"), "value"] == 5.0
    assert cells.loc[("seqprob", "mad_d", "mmlu_college", "auarc_k"), "value"] == 1
    assert cells.loc[("seqprob", "wsv", "boolq", "f1_lift"), "run_dataset"] == "tiny_boolq"
    assert (cells["n"] == 6).all()  # 2 pairs × 3 runs


def test_the_report_calibrator_falls_back_to_the_first_present():
    assert confidence.report_calibrator(_outputs(), _lift()) == "beta"
    assert confidence.report_calibrator(_outputs(calibrator="isotonic"), _lift()) == "raw"
    raw = confidence.evaluate(_outputs(calibrator="raw"))
    plt.close("all")
    assert (
        raw.tables["table1"].set_index(["estimator", "method"]).loc[("seqprob", "wsv"), "tiny_boolq (boolq)"]
        == "-8.75(2) / -5.50(2)"
    )


def test_calibration_table_uses_the_test_split_only(result):
    table = result.tables["calibration"].set_index(["run_dataset", "estimator"])
    row = table.loc[("tiny_boolq", "seqprob")]
    assert row["dataset"] == "boolq"
    assert [c for c in table.columns if c.startswith("ece_")] == ["ece_raw", "ece_beta", "ece_isotonic"]
    assert row["ece_raw"] == pytest.approx(0.2) and row["ece_beta"] == pytest.approx(0.1)
    assert row["ece_isotonic"] == pytest.approx(0.21) and row["auarc_isotonic"] == pytest.approx(0.75)
    assert row["n"] == 50 * RUNS * 2  # 50 test questions × runs × 2 pairs


def test_calibration_reports_get_dataset_and_pair_from_their_path(tmp_path):
    frame = _calibration()
    paths = []
    for pair in ("p1", "p2"):
        path = tmp_path / "calibration" / "tiny_boolq" / f"{pair}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame[frame["pair"] == pair].drop(columns=["dataset", "pair"]).to_csv(path, index=False)
        paths.append(path)
    outputs = RunOutputs("t", {}, {}, {}, calibration_paths=paths)
    read = confidence.calibration_frame(outputs)
    assert set(read["dataset"]) == {"tiny_boolq"} and sorted(set(read["pair"])) == ["p1", "p2"]
    cells = confidence.calibration_cells(read).set_index("calibrator")
    assert cells.loc["beta", "ece"] == pytest.approx(0.1) and cells.loc["beta", "n"] == 50 * RUNS * 2


def test_streams_get_dataset_and_pair_from_their_path(tmp_path):
    """A validation split appended from another dataset entry (boolq_dev) counts under the file's dataset."""
    frame = _streams()
    path = tmp_path / "streams" / "tiny_boolq" / "m1__m2.parquet"
    path.parent.mkdir(parents=True)
    frame[frame["dataset"] == "tiny_boolq"].assign(dataset="tiny_boolq_dev").to_parquet(path)
    streams = RunOutputs("t", {}, {}, {}, confidence_stream_paths=[path]).confidence_streams
    assert set(streams["dataset"]) == {"tiny_boolq"} and set(streams["pair"]) == {"m1__m2"}
    transitions = confidence_claims.debate_transitions(streams)
    assert sorted(transitions["transition"]) == ["c→c", "c→i", "c→i", "i→c", "i→i"]


def test_claims_hold_or_fail_as_computed_by_hand(result):
    """The fixture's runs repeat the same values, so every bootstrap resample of runs gives the point
    value: the intervals are points and each verdict follows from the sign worked out by hand."""
    claims = _claims(result)
    # conf-1: beta lowers ECE by .1; isotonic's .1 and .32 average above raw's .2; units: the runs
    beta = _claim(claims, "conf-1", "tiny_boolq, seqprob, beta")
    assert (beta["value"], beta["low"], beta["high"]) == pytest.approx((-0.1, -0.1, -0.1))
    assert beta["verdict"] == "holds" and beta["n"] == RUNS and beta["expect"] == "< 0"
    assert beta["interval"].startswith("paired bootstrap over calibration runs, each averaged over pairs")
    iso = _claim(claims, "conf-1", "tiny_boolq, seqprob, isotonic")
    assert iso["value"] == pytest.approx(0.01) and iso["verdict"] == "fails"
    # conf-2: |Δ AUARC| .01 (beta) is within 0.02, .05 (isotonic) is not
    kept = _claim(claims, "conf-2", "tiny_boolq, seqprob, beta")
    assert kept["value"] == pytest.approx(0.01) and kept["verdict"] == "holds" and kept["expect"] == "<= 0.02"
    assert _claim(claims, "conf-2", "tiny_boolq, seqprob, isotonic")["verdict"] == "fails"
    # conf-3 and conf-4 on the BoolQ stand-in only (MMLU is not a stance / BoolQ task), from the beta test metrics:
    # MAD .57 − zs* .60 = −3 points over each run; MAD-D .59 − MAD .57 = +2
    assert set(claims.loc[claims["claim"].isin(["conf-3", "conf-4"]), "scope"]) == {"tiny_boolq"}
    mad = _claim(claims, "conf-3", "tiny_boolq", "MAD F1")
    assert (mad["value"], mad["high"]) == pytest.approx((-3.0, -3.0)) and mad["verdict"] == "holds" and mad["n"] == RUNS
    assert _claim(claims, "conf-4", "tiny_boolq", "MAD-D")["value"] == pytest.approx(2.0)
    # conf-5, conf-6: CGA .74 is +9 over zs* .65 and +10 over MAD .64; HID .72 is +7 over zs*
    assert _claim(claims, "conf-6", "tiny_boolq, seqprob, cga", "≥ MAD")["value"] == pytest.approx(10.0)
    hid = _claim(claims, "conf-5", "tiny_boolq, seqprob, hid", "≥ zs*")
    assert hid["value"] == pytest.approx(7.0) and hid["verdict"] == "holds"
    # conf-7: beta vs raw F1 of the protocols, in points, from the test metrics
    assert _claim(claims, "conf-7", "tiny_boolq, seqprob, beta, wsv")["value"] == pytest.approx(2.0)
    cga = _claim(claims, "conf-7", "tiny_boolq, seqprob, beta, cga")
    assert cga["value"] == pytest.approx(-1.0) and cga["verdict"] == "fails" and cga["n"] == RUNS
    # HID's F1 is .61 calibrated and raw: a tie is not "≥" with margin 0 (the old verdict let it hold)
    tie = _claim(claims, "conf-7", "tiny_boolq, seqprob, beta, hid")
    assert tie["value"] == pytest.approx(0.0) and tie["verdict"] == "inconclusive" and tie["margin"] == 0.0
    best_f1 = _claim(claims, "conf-8", "tiny_boolq, seqprob, beta", "WSV")
    assert best_f1["value"] == pytest.approx(1.0) and best_f1["verdict"] == "holds"  # zero_shot:a's .90 is no method
    assert best_f1["detail"] == "best other: cga"
    best_auarc = _claim(claims, "conf-9", "tiny_boolq, seqprob, beta", "AUARC")
    assert best_auarc["value"] == pytest.approx(4.0) and best_auarc["detail"] == "best: cga; best other: wsv"
    # conf-10: mean seqprob after − before per transition; q3/b was not debated; q1/a counts once. The
    # c→i flips are q1/b +.3 and q2/b −.1: the mean .1 on 2 questions, too few for an interval
    flips = _claim(claims, "conf-10", "tiny_boolq, c→i")
    assert flips["value"] == pytest.approx(0.1) and pd.isna(flips["low"])
    assert flips["verdict"] == "n/a (too few)" and flips["n"] == 2
    assert flips["interval"].startswith("bootstrap over questions")
    assert flips["detail"] == "2 questions: an interval needs at least 10; 2 answers; self-report after − before: -0.1"
    same = _claim(claims, "conf-10", "tiny_boolq, c→c")
    assert same["value"] == pytest.approx(0.1) and same["n"] == 1 and same["verdict"] == "n/a (too few)"
    assert "1 question: an interval needs at least 10" in same["detail"]
    assert _claim(claims, "conf-10", "tiny_boolq, i→c")["value"] == pytest.approx(0.1)
    missing = _claim(claims, "conf-10", "tiny_mmlu, c→i")
    assert missing["verdict"] == "n/a" and missing["detail"] == "no c→i answer among 1 debated"


def _run_outputs(f1: dict[str, list[float]], auarc: dict[str, list[float]] | None = None) -> RunOutputs:
    """Test metrics of one pair on tiny_boolq (seqprob, beta), one value per run for each method,
    in [0, 1]; nothing else in the run."""
    rows = []
    for method, values in f1.items():
        for run, value in enumerate(values):
            rows.append(
                {
                    "dataset": "tiny_boolq",
                    "pair": "p1",
                    "run": run,
                    "estimator": "seqprob",
                    "calibrator": "beta",
                    "method": method,
                    "agent": "",
                    "f1": value,
                    "auarc": (auarc or f1)[method][run],
                    "n": 50,
                }
            )
    outputs = RunOutputs("runs", {}, {}, {"tiny_boolq": "boolq"})
    for name in ("confidence_lift", "calibration", "confidence_streams"):
        outputs.__dict__[name] = pd.DataFrame()
    outputs.__dict__["confidence_metrics"] = pd.DataFrame(rows)
    return outputs


def test_a_lift_that_swings_over_runs_is_inconclusive_where_its_mean_alone_would_hold():
    """MAD − zs* F1 is −4 points in even runs and +1 in odd ones (10 runs): the mean −1.5 is ≤ 0 (the
    old point-value claim held), but the runs' SD is 2.6 points, the mean's SE 0.83, so the interval
    (about −1.5 ± 1.6) reaches 0: a resample's mean is 1 − k/2 for k runs of −4, and its upper end is
    the resamples' 0 exactly (not a float a hair above it). On 2 runs there would be no interval at all
    (claims.MIN_UNITS)."""
    outputs = _run_outputs({"zero_shot": [0.60] * 10, "mad": [0.56, 0.61] * 5})
    mad = _claim(claims_frame(confidence.evaluate(outputs).claims), "conf-3", "tiny_boolq", "MAD F1")
    assert mad["value"] == pytest.approx(-1.5) and mad["low"] < 0 <= mad["high"] and mad["low"] >= -4
    assert mad["verdict"] == "inconclusive" and mad["n"] == 10
    two = _run_outputs({"zero_shot": [0.60, 0.60], "mad": [0.56, 0.61]})
    assert _claim(claims_frame(confidence.evaluate(two).claims), "conf-3", "tiny_boolq", "MAD F1")["verdict"] == (
        "n/a (too few)"
    )


def test_a_large_auarc_lift_over_many_runs_holds():
    """CGA's AUARC is 5 ± 1 points above zs*'s and MAD's in every one of 10 runs: every resample's
    mean is between 4 and 6."""
    zs = [0.60 + 0.01 * (r % 3) for r in range(10)]
    cga = [z + 0.05 + 0.01 * ((r % 3) - 1) for r, z in enumerate(zs)]
    outputs = _run_outputs({"zero_shot": zs, "mad": zs, "cga": cga})
    claims = claims_frame(confidence.evaluate(outputs).claims)
    for number, statement in (("conf-5", "≥ zs*"), ("conf-6", "≥ MAD")):
        lift = _claim(claims, number, "tiny_boolq, seqprob, cga", statement)
        assert lift["verdict"] == "holds" and lift["n"] == 10 and 4.0 <= lift["low"] <= lift["high"] <= 6.0
    best = _claim(claims, "conf-9", "tiny_boolq, seqprob, beta", "AUARC")
    assert best["verdict"] == "holds" and best["low"] >= 4.0


def test_auarc_about_unchanged_takes_the_absolute_mean_shift_on_each_resample():
    """Beta moves AUARC by +.03 in even runs and −.01 in odd ones (10 runs): |mean| is .01, but a
    resample's mean reaches .03 when it draws mostly even runs (the shifts' SE is about .0067), so
    the interval's upper end is above the .02 tolerance and the claim is inconclusive."""
    rows = []
    for run, shift in enumerate([0.03, -0.01] * 5):
        for kind, auarc in (("raw", 0.70), ("beta", 0.70 + shift)):
            rows.append(
                {
                    "dataset": "tiny_boolq",
                    "pair": "p1",
                    "run": run,
                    "estimator": "seqprob",
                    "calibrator": kind,
                    "agent": "a",
                    "stream": 0,
                    "split": "test",
                    "n": 50,
                    "ece": 0.1,
                    "auarc": auarc,
                }
            )
    outputs = RunOutputs("runs", {}, {}, {})
    for name in ("confidence_lift", "confidence_metrics", "confidence_streams"):
        outputs.__dict__[name] = pd.DataFrame()
    outputs.__dict__["calibration"] = pd.DataFrame(rows)
    kept = _claim(claims_frame(confidence.evaluate(outputs).claims), "conf-2", "tiny_boolq, seqprob, beta")
    assert kept["value"] == pytest.approx(0.01) and kept["low"] < 0.02 < kept["high"]
    assert kept["verdict"] == "inconclusive" and kept["n"] == 10


def test_claims_say_why_without_the_inputs():
    outputs = RunOutputs("empty", {}, {}, {})
    for name in ("confidence_lift", "calibration", "confidence_metrics", "confidence_streams"):
        outputs.__dict__[name] = pd.DataFrame()
    empty = confidence.evaluate(outputs)
    claims = _claims(empty)
    assert (claims["verdict"] == "n/a").all() and claims["detail"].str.len().gt(0).all()
    assert {"conf-1", "conf-2", "conf-3..4", "conf-5..6", "conf-7", "conf-8..9", "conf-10"} == set(claims["claim"])
    assert claims["source"].str.startswith("Elahi & Di Eugenio §").all()  # where the paper states each
    assert empty.tables["table1"].empty and not empty.figures


def test_lift_plot_has_plain_tick_labels_and_says_what_it_shows(result):
    fig = result.figures["lift"]
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert "tiny_boolq (boolq) / seqprob" in labels and not any(label.startswith("(") for label in labels)
    assert ax.get_legend() is None and fig.legends  # one legend, beside the panels
    assert "points" in ax.get_ylabel()
    title = fig._suptitle.get_text()
    assert "tiny_conf" in title and "beta" in title and "n = 2 pairs × 3 runs" in title


def test_table1_lifts_carry_the_lift_tables_interval_and_k_none():
    from debatelab.evaluation.papers.confidence import table1_cells

    lift = _lift().assign(lift_f1_low=lambda f: f["lift_f1"] - 1, lift_f1_high=lambda f: f["lift_f1"] + 2)
    cells = table1_cells(lift, "beta", _outputs())
    f1 = cells[cells["metric"] == "f1_lift"]
    assert (f1["low"] == f1["value"] - 1).all() and (f1["high"] == f1["value"] + 2).all()
    assert cells.loc[cells["metric"] != "f1_lift", ["low", "high"]].isna().all().all()  # AUARC: none given; k: none


def test_evaluate_paper_writes_the_tables_and_the_comparison(tmp_path):
    evaluate_paper("confidence", _outputs(), tmp_path / "out")
    out = tmp_path / "out"
    for name in ("table1.csv", "table1_vs_paper.csv", "calibration.csv", "claims.csv", "lift.png"):
        assert (out / name).exists(), name
    vs = pd.read_csv(out / "table1_vs_paper.csv")
    assert len(vs) == 200  # 2 estimators × 5 methods × 5 datasets × 4 metrics
    row = vs[
        (vs["estimator"] == "seqprob")
        & (vs["method"] == "wsv")
        & (vs["dataset"] == "boolq")
        & (vs["metric"] == "f1_lift")
    ].iloc[0]
    assert row["paper_value"] == pytest.approx(0.77) and row["run_value"] == pytest.approx(1.25)
    assert row["difference"] == pytest.approx(0.48) and row["run_dataset"] == "tiny_boolq" and row["n"] == 6
    selfrep = vs[
        (vs["estimator"] == "verbal")
        & (vs["method"] == "cga")
        & (vs["dataset"] == "vast")
        & (vs["metric"] == "auarc_lift")
    ].iloc[0]
    assert selfrep["paper_value"] == pytest.approx(9.58) and pd.isna(selfrep["run_value"])  # no VAST in the run
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False)  # "n/a" is a value here
    assert set(claims["verdict"]) == {"holds", "fails", "inconclusive", "n/a", "n/a (too few)"}
    assert claims.loc[claims["verdict"] != "n/a", "interval"].str.contains("bootstrap").all()
    assert {"margin", "p", "p_holm", "verdict_holm"} <= set(claims.columns)
