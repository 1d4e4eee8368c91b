"""The zero-shot stage on the real tiny model (its kill-and-resume through Snakemake is in test_resume)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from workflow_helpers import snakemake

from debatelab.data import load_benchmark
from debatelab.llm import GenerationCache
from debatelab.llm.agent import AgentSpec
from debatelab.llm.transformers_backend import TransformersBackend
from debatelab.zero_shot import ZERO_SHOT_COLUMNS, ZeroShotSettings, run_zero_shot, select_questions


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
    df = run_zero_shot(
        questions,
        AgentSpec(name="a", model="tiny", max_tokens=6),
        counting,
        GenerationCache(tmp_path),
        _settings(estimators=()),
        "commonsense_qa",
    )
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
    per_question = {
        a: pd.read_parquet(tmp_path / t).groupby("question_id")["sample"].nunique()
        for a, t in zip(("alice", "bob"), targets)
    }
    assert per_question["alice"].eq(1).all() and len(per_question["alice"]) == 2
    assert per_question["bob"].eq(3).all() and len(per_question["bob"]) == 2
