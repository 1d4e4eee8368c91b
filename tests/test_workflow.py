"""The real workflow end to end on the tiny model, through the real Snakemake."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from conftest import require
from workflow_helpers import REPO_ROOT, TWO_TINY_JOBS_AT_ONCE, snakemake

from debatelab.debate.schema import ENDINGS, QUESTION_COLUMNS, TURN_COLUMNS
from debatelab.evaluation import PAPER_TITLES, load_paper_numbers
from debatelab.evaluation.claims import VERDICTS
from debatelab.evaluation.papers import PAPERS
from debatelab.zero_shot import ZERO_SHOT_COLUMNS

TINY = str(REPO_ROOT / "tests/configs/tiny.yaml")
LOCAL = str(REPO_ROOT / "profiles/local")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    snakemake(workdir, "--configfile", TINY, "--profile", LOCAL, *TWO_TINY_JOBS_AT_ONCE)
    return workdir


def test_default_dag_outputs(finished_run):
    results = finished_run / "results/tiny"
    for dataset in ("asdiv", "commonsense_qa"):
        for agent in ("alice", "bob"):
            df = pd.read_parquet(results / f"zero_shot/{dataset}/{agent}.parquet")
            assert list(df.columns) == ZERO_SHOT_COLUMNS
            assert len(df) == 3 * 2  # limit 3 questions × 2 samples
            assert set(df["sample"]) == {0, 1}
            assert df["conf_verbal"].between(0, 1).all()
            assert (df["completion_tokens"] <= 12).all()
            assert (df["parse_failed"] == df["answer"].isna()).all()
            assert not (df["correct"] & df["parse_failed"]).any()
    summary = pd.read_csv(results / "summary/zero_shot.csv")
    assert len(summary) == 6  # alice, bob on both datasets; carol, dave (trained models) on asdiv, where they debate
    assert summary["accuracy"].between(0, 1).all() and set(summary["agent"]) == {"alice", "bob", "carol", "dave"}
    assert (results / "summary/zero_shot.png").stat().st_size > 1000
    assert (finished_run / "data/asdiv/test/auto.parquet").exists()
    (model,) = (finished_run / "resources/models").glob("tiny-random-llama-*")
    assert (model / "config.json").exists()
    assert list((finished_run / "logs/tiny/zero_shot/asdiv").glob("*.log"))
    assert (results / "benchmarks/zero_shot/asdiv/alice.tsv").exists()


def test_every_protocol_runs_from_the_same_zero_shot_answers(finished_run):
    results = finished_run / "results/tiny"
    protocols = ("sc", "mad", "mad_d", "ring", "hub", "groups", "s2", "sid", "svr", "mad_pair")
    asdiv_only = ("ring", "hub", "groups", "sid")
    for dataset in ("asdiv", "commonsense_qa"):
        zero_shot = {a: pd.read_parquet(results / f"zero_shot/{dataset}/{a}.parquet") for a in ("alice", "bob")}
        for protocol in protocols:
            if dataset != "asdiv" and protocol in asdiv_only:
                assert not (results / f"debate/{dataset}/{protocol}").exists()
                continue
            folder = results / f"debate/{dataset}/{protocol}"
            questions = pd.read_parquet(folder / "questions.parquet")
            turns = pd.read_parquet(folder / "turns.parquet")
            assert list(questions.columns) == QUESTION_COLUMNS and list(turns.columns) == TURN_COLUMNS
            assert len(questions) == 3
            assert set(questions["ended_by"]) <= set(ENDINGS)
            # round 0 is the zero-shot stage's answer, copied, never regenerated
            for row in turns[turns["round"] == 0].itertuples():
                z = zero_shot[row.agent_config]
                source = z[(z["question_id"] == row.question_id) & (z["sample"] == row.zero_shot_sample)]
                assert source["response"].item() == row.response
            assert (turns.loc[turns["round"] > 0, "completion_tokens"] <= 12).all()
            assert (questions["total_tokens"] >= questions["pre_debate_tokens"]).all()
            assert (results / f"uncertainty/{dataset}/{protocol}.parquet").exists()
            assert (results / f"uncertainty/{dataset}/{protocol}.selective.png").stat().st_size > 1000
            assert (results / f"benchmarks/debate/{dataset}/{protocol}.tsv").exists()
    mad = pd.read_parquet(results / "debate/asdiv/mad/questions.parquet")
    assert (mad["ncomm"] == 2 * 3 * 2).all()  # 3 agents, 2 rounds, all-to-all
    summary = pd.read_csv(results / "summary/debate.csv")
    assert len(summary) == 2 * len(protocols) - len(asdiv_only) + 1 and set(summary["protocol"]) == {
        *protocols,
        "trained",
    }
    assert (results / "summary/debate_cost_accuracy.png").stat().st_size > 1000


def test_training_runs_before_the_agents_that_use_its_policy(finished_run):
    """The sdrl run trains alice's model; carol's model is `trained:sdrl`: her zero-shot answers and
    the `trained` debate come from the trained folder, with no special case."""
    run = finished_run / "results/tiny/train/sdrl"
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert list(metrics["step"]) == [1, 2] and (metrics["sequences"] > 0).all()
    assert (metrics["debate_groups"] == 1).all()  # one SDRL debate prompt per step
    assert (run / "model/config.json").exists() and (run / "curves.png").stat().st_size > 1000
    assert json.loads((run / "settings.json").read_text())["settings"]["method"] == "sdrl"
    assert (run / "checkpoint/latest").read_text() == "step-00002"
    carol = pd.read_parquet(finished_run / "results/tiny/zero_shot/asdiv/carol.parquet")
    assert set(carol["model"]) == {"tiny-trained"} and len(carol) == 3 * 2
    turns = pd.read_parquet(finished_run / "results/tiny/debate/asdiv/trained/turns.parquet")
    assert set(turns["agent_config"]) == {"carol", "dave"}
    # the trained folder is a different model: its generations are cached apart from the base model's
    assert list((finished_run / "results/tiny/cache/tiny-trained").glob("part-*.parquet"))


def test_udpo_trains_every_agent_of_the_debate_and_a_trained_agent_debates(finished_run):
    """The udpo run: a warm-up debate on 1 of asdiv's 3 questions, App. A.2's coefficients, 2 steps
    on the other 2; bob's trained folder is dave's model (`trained:udpo/bob`). Beside it, the umad run
    and the rmaac baseline (its critic's settings in settings.json)."""
    run = finished_run / "results/tiny/train/udpo"
    warmup = pd.read_parquet(run / "warmup.parquet")
    assert warmup["question_id"].nunique() == 1 and set(warmup["seat"]) == {"alice", "bob"}
    assert sorted(warmup["round"].unique()) == [0, 1]
    coefficients = json.loads((run / "coefficients.json").read_text())
    assert set(coefficients["seats"]) == {"alice", "bob"}
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert list(metrics["step"]) == [1, 2] and (metrics["debates"] == 2).all() and (metrics["updates"] == 2).all()
    for agent in ("alice", "bob"):
        assert (run / f"agents/{agent}/model.safetensors").exists()
    assert (run / "models/bob/model.safetensors").stat().st_ino == (run / "agents/bob/model.safetensors").stat().st_ino
    umad = finished_run / "results/tiny/train/umad"
    umad_metrics = pd.read_parquet(umad / "metrics.parquet")
    assert list(umad_metrics["step"]) == [1] and (umad_metrics["debates"] == 2).all()  # 1 question × 2 threads
    assert (umad_metrics["sequences"] == 2 * 2 * 2).all() and not (umad / "coefficients.json").exists()
    assert all((umad / f"agents/{agent}/config.json").exists() for agent in ("alice", "bob"))
    rmaac = finished_run / "results/tiny/train/rmaac"
    rmaac_metrics = pd.read_parquet(rmaac / "metrics.parquet")
    assert list(rmaac_metrics["step"]) == [1] and (rmaac_metrics["debates"] == 2).all()
    assert (rmaac_metrics["sequences"] == 2 * 2 * 2).all() and np.isfinite(rmaac_metrics["value_loss"]).all()
    assert json.loads((rmaac / "settings.json").read_text())["settings"]["mappo"]["critic_hidden"] == 8
    assert all((rmaac / f"agents/{agent}/config.json").exists() for agent in ("alice", "bob"))
    dave = pd.read_parquet(finished_run / "results/tiny/zero_shot/asdiv/dave.parquet")
    assert set(dave["model"]) == {"tiny-udpo-bob"} and len(dave) == 3 * 2
    assert list((finished_run / "results/tiny/cache/tiny-udpo-bob").glob("part-*.parquet"))


def test_calibration_and_protocol_search_run_after_the_debate(finished_run):
    results = finished_run / "results/tiny"
    for dataset in ("asdiv", "commonsense_qa"):
        streams = pd.read_parquet(results / f"streams/{dataset}/ab.parquet")
        assert len(streams) == 3 * 4 and set(streams["agent"]) == {"alice", "bob"}
        calibration = json.loads((results / f"calibration/{dataset}/ab.json").read_text())
        assert [len(r["val_question_ids"]) for r in calibration["runs"]] == [2, 2]
        assert len(calibration["runs"][0]["fitted"]) == 2 * 4 * 4  # estimators × calibrators × (agent, stream)
        for protocol in ("wsv", "cga", "hid"):
            best = json.loads((results / f"search/{dataset}/ab/{protocol}.json").read_text())["best"]
            assert len(best) == 2 * 4 * 2  # estimators × calibrators × runs
            assert all(1 <= b["n_trials"] <= 8 for b in best)
            trials = pd.read_parquet(results / f"search/{dataset}/ab/{protocol}.trials.parquet")
            assert len(trials) == sum(b["n_trials"] for b in best)
            assert (results / f"search/{dataset}/ab/{protocol}.optuna.journal").stat().st_size > 0
        table = pd.read_csv(results / f"protocols/{dataset}/ab/metrics.csv")
        assert set(table["method"]) == {
            "zero_shot:alice",
            "zero_shot:bob",
            "zero_shot",
            "mad",
            "mad_d",
            "wsv",
            "cga",
            "hid",
        }
        for plot in ("reliability.png", "accuracy_rejection.png"):
            assert (results / f"protocols/{dataset}/ab/{plot}").stat().st_size > 1000
    paper = pd.read_csv(results / "summary/confidence_paper.csv")
    assert {"asdiv", "commonsense_qa"} <= set(paper.columns)
    assert set(paper["method"]) == {"mad", "mad_d", "wsv", "cga", "hid"}
    assert (results / "summary/confidence_lift.png").stat().st_size > 1000


def test_forcerun_search_resumes_its_study_without_new_trials(finished_run):
    best = finished_run / "results/tiny/search/asdiv/ab/cga.json"
    before, mtime = best.read_text(), best.stat().st_mtime_ns
    target = "results/tiny/search/asdiv/ab/cga.json"
    snakemake(finished_run, "--configfile", TINY, "--profile", LOCAL, "--forcerun", target, "--until", target)
    assert best.stat().st_mtime_ns > mtime
    assert best.read_text() == before


def test_rerun_is_a_no_op(finished_run):
    out = snakemake(finished_run, "--configfile", TINY, "--profile", LOCAL, "-n")
    assert "Nothing to be done" in out.stdout + out.stderr


def _planned_jobs(output: str) -> dict[str, int]:
    """Rule → count from the job-stats table of a dry run."""
    table = output.split("Job stats:")[1]
    return {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, flags=re.M) if m.group(1) != "total"
    }


def test_forcerun_zero_shot_reruns_it_and_only_what_depends_on_it(finished_run):
    dry = snakemake(finished_run, "--configfile", TINY, "--profile", LOCAL, "-n", "--forcerun", "zero_shot")
    assert _planned_jobs(dry.stdout + dry.stderr) == {
        "all": 1,
        "summarize_zero_shot": 1,
        "zero_shot": 6,
        "debate": 17,
        "uncertainty": 17,
        "summarize_debate": 1,
        "streams": 2,
        "fit_calibrators": 2,
        "search_protocol": 6,
        "apply_protocol": 2,
        "summarize_confidence": 1,
        "evaluate": 5,
    }
    until = snakemake(
        finished_run, "--configfile", TINY, "--profile", LOCAL, "-n", "--forcerun", "zero_shot", "--until", "zero_shot"
    )
    assert _planned_jobs(until.stdout + until.stderr) == {"zero_shot": 6}

    data = finished_run / "data/asdiv/test/auto.parquet"
    zs = finished_run / "results/tiny/zero_shot/asdiv/alice.parquet"
    data_mtime, zs_mtime = data.stat().st_mtime_ns, zs.stat().st_mtime_ns
    before = pd.read_parquet(zs)
    snakemake(
        finished_run,
        "--configfile",
        TINY,
        "--profile",
        LOCAL,
        "--forcerun",
        "zero_shot",
        "--until",
        "zero_shot",
        *TWO_TINY_JOBS_AT_ONCE,
    )
    assert data.stat().st_mtime_ns == data_mtime
    assert zs.stat().st_mtime_ns > zs_mtime
    # Rerun from the generation cache: identical generations, no new model calls needed.
    pd.testing.assert_frame_equal(before, pd.read_parquet(zs))


def test_forcerun_one_debate_stage_replays_it_from_the_cache(finished_run):
    questions = finished_run / "results/tiny/debate/asdiv/mad/questions.parquet"
    before, mtime = pd.read_parquet(questions), questions.stat().st_mtime_ns
    target = "results/tiny/debate/asdiv/mad/questions.parquet"
    snakemake(finished_run, "--configfile", TINY, "--profile", LOCAL, "--forcerun", target, "--until", target)
    assert questions.stat().st_mtime_ns > mtime
    pd.testing.assert_frame_equal(before, pd.read_parquet(questions))


def test_every_paper_gets_its_tables_beside_the_published_numbers(finished_run):
    tables = finished_run / "results/tiny/tables"
    assert sorted(p.name for p in tables.iterdir()) == sorted(PAPERS)
    for paper in PAPERS:
        files = {p.name for p in (tables / paper).iterdir()}
        published = load_paper_numbers(paper)
        assert {f"{name}_vs_paper.csv" for name in published} <= files, paper
        for name in published:
            vs = pd.read_csv(tables / paper / f"{name}_vs_paper.csv")
            assert len(vs) == len(published[name]) and vs["paper_value"].notna().all(), (paper, name)
        claims = pd.read_csv(tables / paper / "claims.csv", keep_default_na=False)  # "n/a" is a value here
        assert len(claims) > 0 and set(claims["verdict"]) <= set(VERDICTS), paper
        # an untestable claim says why; a decided or inconclusive one has its n and interval
        untested = claims["verdict"].str.startswith("n/a")
        assert (claims.loc[untested, "detail"] != "").all(), paper
        decided = claims[~untested]
        assert (decided["n"] > 0).all() and (decided["interval"] != "").all(), paper
        low, high = decided["low"].astype(float), decided["high"].astype(float)
        assert (low <= high).all(), paper
    # the tiny run's cells reach the tables: SVR-MAD's rows are this run's protocols
    svr = pd.read_csv(tables / "svr_mad/table1.csv")
    assert {"Self Consistency", "GroupDebate", "SID-ET", "S2-MAD", "SVR-MAD"} <= set(svr["method"])
    udpo = pd.read_csv(tables / "udpo/table1.csv")
    assert "MAD" in set(udpo["method"]) and udpo["accuracy"].between(0, 100).all()
    assert (tables / "svr_mad/cost_accuracy.png").stat().st_size > 1000


def test_report_has_a_section_per_paper_and_the_summaries(finished_run):
    snakemake(finished_run, "--configfile", TINY, "--profile", LOCAL, "--report", "report.html")
    html = (finished_run / "report.html").read_text(errors="ignore")
    for name in (
        "zero_shot.csv",
        "zero_shot.png",
        "debate.csv",
        "debate_cost_accuracy.png",
        "mad.selective.png",
        "confidence_lift.png",
        "confidence_paper.csv",
        "reliability.png",
        "cga.history.png",
        "table1_vs_paper.html",
        "claims.html",
        "fig5_delta_by_usys.png",
    ):
        assert name in html, name
    categories = json.loads(re.search(r"var categories = (\{.*?\});\n", html).group(1))
    for paper in PAPERS:
        section = categories[PAPER_TITLES[paper]]
        assert set(section) == {"Tables and plots", "Beside the published numbers", "Checkable claims"}, paper
    _open_in_a_browser(finished_run / "report.html")


def _open_in_a_browser(report):
    """Open the report in headless Chromium as a user would: every paper is a section of the menu,
    its tables open as tables with this run's rows, its plots load, the front page names the run."""
    require(
        shutil.which("chromium") is not None and shutil.which("chromedriver") is not None,
        "Chromium and chromedriver (Debian: chromium, chromium-driver; tools/setup.sh installs them)",
    )
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1600,1000",
    ):
        options.add_argument(arg)
    options.binary_location = shutil.which("chromium")
    driver = webdriver.Chrome(
        service=webdriver.ChromeService(executable_path=shutil.which("chromedriver")), options=options
    )
    wait = WebDriverWait(driver, 20)

    def menu(text):
        return wait.until(lambda d: [a for a in d.find_elements(By.CSS_SELECTOR, "nav li a") if a.text == text])[0]

    def open_result(name):
        """Click a result's eye button; return the iframe or image it shows."""
        row = wait.until(
            lambda d: [
                r
                for r in d.find_elements(By.CSS_SELECTOR, "tbody tr")
                if r.find_elements(By.TAG_NAME, "td") and r.find_element(By.TAG_NAME, "td").text == name
            ]
        )[0]
        row.find_element(By.CSS_SELECTOR, "a[iconname=eye]").click()

    try:
        driver.get(report.as_uri())
        menu("Workflow").click()
        # textContent, not .text: the long page scrolls, and WebDriver's .text leaves out what is scrolled away
        app_text = "return document.getElementById('app').textContent"
        assert wait.until(lambda d: "debatelab run tiny" in " ".join(d.execute_script(app_text).split()))
        # the run's settings read as a list: each agent is an item of its own
        items = [
            " ".join(li.get_attribute("textContent").split()) for li in driver.find_elements(By.CSS_SELECTOR, "#app li")
        ]
        for agent in ("alice", "bob", "carol", "dave"):
            assert sum(t.startswith(f"{agent}:") for t in items) == 1, (agent, items)

        def fits_its_frame():
            width, visible = driver.execute_script(
                "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            return width <= visible + 1

        for paper in PAPERS:
            driver.get(report.as_uri())
            menu(PAPER_TITLES[paper]).click()
            menu("Beside the published numbers").click()
            open_result("table1_vs_paper")
            frame = wait.until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
            driver.switch_to.frame(frame)
            headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "th")]
            rows = driver.find_elements(By.CSS_SELECTOR, "tbody tr")
            assert {"paper_value", "run_value", "difference"} <= set(headers), (paper, headers)
            assert len(rows) == len(load_paper_numbers(paper)["table1"]), paper
            assert fits_its_frame(), paper  # no sideways scrolling to reach a column
            driver.switch_to.default_content()
            driver.get(report.as_uri())
            menu(PAPER_TITLES[paper]).click()
            menu("Checkable claims").click()
            open_result("claims")
            driver.switch_to.frame(wait.until(lambda d: d.find_element(By.TAG_NAME, "iframe")))
            headers = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "th")]
            assert headers[:5] == ["claim", "statement", "verdict", "value", "95 % interval"], (paper, headers)
            assert fits_its_frame(), paper
            driver.switch_to.default_content()
        # a plot loads as an image
        driver.get(report.as_uri())
        menu(PAPER_TITLES["svr_mad"]).click()
        menu("Tables and plots").click()
        open_result("cost_accuracy")
        image = wait.until(
            lambda d: [
                i
                for i in d.find_elements(By.TAG_NAME, "img")
                if "cost_accuracy" in (i.get_attribute("src") or "")[:120]
            ]
        )[0]
        assert driver.execute_script("return arguments[0].naturalWidth", image) > 500
    finally:
        driver.quit()


def test_dag_rulegraph_mermaid(finished_run):
    out = snakemake(finished_run, "--configfile", TINY, "--rulegraph", "mermaid-js")
    for rule in (
        "download_dataset",
        "prepare_model",
        "train",
        "udpo_warmup",
        "udpo_coefficients",
        "train_agents",
        "trained_agent",
        "zero_shot",
        "debate",
        "uncertainty",
        "summarize_zero_shot",
        "summarize_debate",
        "streams",
        "fit_calibrators",
        "search_protocol",
        "apply_protocol",
        "summarize_confidence",
        "evaluate",
    ):
        assert rule in out.stdout
