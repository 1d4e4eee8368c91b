"""The zero-shot stage on the real tiny model, and a real kill-and-resume of its Snakemake job."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from debatelab.data import load_benchmark
from debatelab.llm import GenerationCache
from debatelab.llm.transformers_backend import TransformersBackend
from debatelab.config import AgentSpec
from debatelab.zero_shot import ZERO_SHOT_COLUMNS, ZeroShotSettings, run_zero_shot, select_questions
from workflow_helpers import REPO_ROOT, SNAKEMAKE, snakemake


class CountingBackend:
    """Wraps a real backend and counts what reaches it."""

    def __init__(self, inner):
        self.inner, self.model_id, self.generated, self.scored = inner, inner.model_id, 0, 0

    def generate(self, requests, progress=None):
        self.generated += sum(r.n for r in requests)
        return self.inner.generate(requests, progress)

    def score(self, prompts, replies):
        self.scored += len(prompts)
        return self.inner.score(prompts, replies)


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return TransformersBackend(tiny_model_dir, device="cpu", dtype="float32", batch_size=8)


@pytest.fixture(scope="module")
def questions():
    return select_questions(load_benchmark("commonsense_qa", "validation", source="offline"), limit=4, seed=1)


def _settings(**kw):
    base = dict(samples=2, batch_size=5, verbal_samples=2, seqprob_target="response", show_progress=False)
    base.update(kw)
    return ZeroShotSettings.from_config(base)


def test_rows_schema_and_confidences(backend, questions, tmp_path):
    counting = CountingBackend(backend)
    agent = AgentSpec(name="a", model="tiny", max_tokens=8)
    df = run_zero_shot(questions, agent, counting, GenerationCache(tmp_path), _settings(), "commonsense_qa")
    assert list(df.columns) == ZERO_SHOT_COLUMNS
    assert len(df) == 4 * 2 and df.groupby("question_id").size().eq(2).all()
    assert counting.generated == 4 * 2 + 4 * 2 * 2  # answers + 2 self-reports each
    assert counting.scored == 2 * 4 * 2  # content and content-free prompt per answer
    assert df["seqprob_c"].notna().all()
    np.testing.assert_allclose(df["seqprob_c"], df["seqprob_logp"] - df["seqprob_logp_null"], atol=1e-9)
    np.testing.assert_allclose(df["conf_seqprob"], 1 / (1 + np.exp(-df["seqprob_c"])), atol=1e-9)
    assert (df["min_logprob"] <= df["mean_logprob"] + 1e-9).all()
    assert df["conf_verbal"].between(0, 1).all()
    assert (df["extra_tokens"] > 0).all()


def test_estimators_can_be_switched_off(backend, questions, tmp_path):
    counting = CountingBackend(backend)
    df = run_zero_shot(questions, AgentSpec(name="a", model="tiny", max_tokens=6), counting, GenerationCache(tmp_path),
                       _settings(estimators=()), "commonsense_qa")
    assert counting.generated == 8 and counting.scored == 0
    assert df["conf_verbal"].isna().all() and df["conf_seqprob"].isna().all()


def test_second_run_makes_no_model_call_and_matches(backend, questions, tmp_path):
    agent = AgentSpec(name="a", model="tiny", max_tokens=8)
    first = run_zero_shot(questions, agent, backend, GenerationCache(tmp_path), _settings(), "commonsense_qa")
    counting = CountingBackend(backend)
    second = run_zero_shot(questions, agent, counting, GenerationCache(tmp_path), _settings(), "commonsense_qa")
    assert counting.generated == 0 and counting.scored == 0
    pd.testing.assert_frame_equal(first, second)


def test_seeded_question_subset_is_stable():
    df = load_benchmark("asdiv", "test", source="offline")
    a, b = select_questions(df, 5, seed=3), select_questions(df, 5, seed=3)
    assert list(a["id"]) == list(b["id"]) and list(a["id"]) != list(select_questions(df, 5, seed=4)["id"])
    positions = [df.index[df["id"] == i][0] for i in a["id"]]
    assert positions == sorted(positions)  # the dataset's own order


def _entries_in(parts) -> int:
    return sum(pq.read_metadata(p).num_rows for p in parts)


@pytest.mark.slow
def test_killed_zero_shot_job_resumes_without_redoing_finished_batches(tmp_path):
    """Kill the real Snakemake job mid-generation (SIGKILL, as a preempted node would), rerun it."""
    batch = 2
    config = tmp_path / "resume.yaml"
    config.write_text(
        "experiment: resume\n"
        "datasets: {asdiv: {split: test, limit: 4}}\n"
        "models: {tiny-random-llama: {source: 'bundled:tiny-random-llama'}}\n"
        "agents: {alice: {model: tiny-random-llama, max_tokens: 48}}\n"
        "backends: {transformers: {batch_size: 2, num_threads: 1}}\n"
        f"zero_shot: {{samples: 6, batch_size: {batch}, estimators: []}}\n"
    )
    target = "results/resume/zero_shot/asdiv/alice.parquet"
    snakemake(tmp_path, "--configfile", str(config), "--cores", "1", "data/asdiv/test.parquet", "resources/models/tiny-random-llama")
    cache_dir = tmp_path / "results/resume/cache/tiny-random-llama"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        [SNAKEMAKE, "--snakefile", str(REPO_ROOT / "Snakefile"), "--directory", str(tmp_path), "--configfile", str(config),
         "--cores", "1", target],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and len(list(cache_dir.glob("part-*.parquet"))) < 3:
        assert proc.poll() is None, "the job finished before it could be killed: make it longer"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    parts_at_kill = set(cache_dir.glob("part-*.parquet"))
    done_at_kill = _entries_in(parts_at_kill)
    total = 4 * 6
    assert batch <= done_at_kill < total
    assert not (tmp_path / target).exists()

    snakemake(tmp_path, "--configfile", str(config), "--cores", "1", "--unlock")
    snakemake(tmp_path, "--configfile", str(config), "--cores", "1", "--rerun-incomplete", target)
    new_parts = set(cache_dir.glob("part-*.parquet")) - parts_at_kill
    # Every generation finished before the kill is reused: the rerun makes only the rest.
    assert _entries_in(new_parts) == total - done_at_kill
    assert all(pq.read_metadata(p).num_rows <= batch for p in new_parts)
    df = pd.read_parquet(tmp_path / target)
    assert len(df) == total and df.groupby("question_id")["sample"].nunique().eq(6).all()


def test_an_agent_can_draw_more_samples_than_the_default(tmp_path):
    """agents.<a>.samples overrides zero_shot.samples for that agent only (real Snakemake jobs)."""
    config = tmp_path / "samples.yaml"
    config.write_text(
        "experiment: samples\n"
        "datasets: {asdiv: {split: test, limit: 2}}\n"
        "models: {tiny-random-llama: {source: 'bundled:tiny-random-llama'}}\n"
        "agents: {alice: {model: tiny-random-llama, max_tokens: 4},"
        " bob: {model: tiny-random-llama, max_tokens: 4, samples: 3}}\n"
        "backends: {transformers: {batch_size: 4, num_threads: 1}}\n"
        "zero_shot: {samples: 1, estimators: []}\n"
    )
    targets = [f"results/samples/zero_shot/asdiv/{a}.parquet" for a in ("alice", "bob")]
    snakemake(tmp_path, "--configfile", str(config), "--cores", "1", *targets)
    per_question = {a: pd.read_parquet(tmp_path / t).groupby("question_id")["sample"].nunique()
                    for a, t in zip(("alice", "bob"), targets)}
    assert per_question["alice"].eq(1).all() and len(per_question["alice"]) == 2
    assert per_question["bob"].eq(3).all() and len(per_question["bob"]) == 2
