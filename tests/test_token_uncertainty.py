"""Token-level uncertainty (issue 31): the top-k entropy formula worked by hand and against scipy,
the transformers backend against a full-vocabulary computation from the model's logits, the cache
(old parts read, k = 0 keys unchanged), the token-level estimators through calibration, and UMAD's
claim umad-10 on generated turns. The transformers / vLLM agreement is in test_vllm_backend.py (its engine)."""

from __future__ import annotations

import math
from dataclasses import asdict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import stats

from debatelab.confidence import stage
from debatelab.confidence.stage import CalibrationSettings
from debatelab.confidence.streams import ESTIMATOR_COLUMNS, build_streams, synthetic_streams
from debatelab.estimators import TOKEN_ESTIMATORS, token_confidence
from debatelab.estimators.tokens import (
    max_token_probability,
    mean_token_entropy,
    perplexity,
    topk_entropy,
    topk_summaries,
)
from debatelab.evaluation.claims import claims_frame
from debatelab.evaluation.papers import umad_claims
from debatelab.evaluation.run import ProtocolInfo, RunOutputs
from debatelab.io import DataFileError, write_parquet_atomic
from debatelab.llm import GenerationCache, GenerationRequest, SamplingParams, generate_cached
from debatelab.llm.base import Generation, stable_hash
from debatelab.llm.cache import generation_key
from debatelab.llm.openai_backend import _top_summaries

LN2 = math.log(2)


# --------------------------------------------------------------------------- the formula by hand


def test_entropy_of_a_three_token_vocabulary_by_hand():
    p = np.array([0.5, 0.25, 0.25])
    # −(.5 ln .5 + 2 · .25 ln .25) = .5 ln 2 + ln 2
    assert float(topk_entropy(np.log(p))) == pytest.approx(1.5 * LN2)
    # k = 2: top (.5, .25), remainder .25 counted as one outcome; V − k = 1 token, so exact
    assert float(topk_entropy(np.log(p[:2]))) == pytest.approx(1.5 * LN2)
    # k = 1: top .5, remainder .5: ln 2, below the full 1.5 ln 2 by at most r·log(V − k) = .5 ln 2
    assert float(topk_entropy(np.log(p[:1]))) == pytest.approx(LN2)


def test_truncated_entropy_is_a_lower_bound_within_r_log_v_minus_k():
    p = np.array([0.5, 0.25, 0.125, 0.125])  # H = (.5 + .5 + .75) ln 2 = 1.75 ln 2
    full = float(topk_entropy(np.log(p)))
    assert full == pytest.approx(1.75 * LN2)
    # k = 2: .5 ln 2 + .5 ln 2 + (r = .25) · 2 ln 2 = 1.5 ln 2; bound 1.5 ln 2 + .25 ln 2 = 1.75 ln 2,
    # reached here because the two left-out tokens share the remainder equally
    h2 = float(topk_entropy(np.log(p[:2])))
    assert h2 == pytest.approx(1.5 * LN2)
    assert h2 <= full <= h2 + 0.25 * math.log(4 - 2) + 1e-12
    assert full == pytest.approx(h2 + 0.25 * math.log(2))


def test_order_of_the_top_k_and_zero_probabilities_do_not_matter():
    lp = np.log([0.125, 0.5, 0.25, 0.125])
    assert float(topk_entropy(lp)) == pytest.approx(1.75 * LN2)
    assert float(topk_entropy([0.0, -np.inf])) == 0.0  # a certain token: no entropy, no NaN


def test_k_equal_to_the_vocabulary_matches_scipy_on_random_distributions():
    rng = np.random.default_rng(0)
    for alpha in (0.05, 1.0, 20.0):
        p = rng.dirichlet(np.full(50, alpha), size=8)
        lp = np.log(np.maximum(p, 1e-300))
        got = topk_entropy(lp)
        want = stats.entropy(p, axis=-1)
        np.testing.assert_allclose(got, want, atol=1e-9)
        # and truncated, never above the full entropy, never below it by more than r·log(V − k)
        top = -np.sort(-lp, axis=-1)[:, :10]
        hk = topk_entropy(top)
        r = 1 - np.exp(top).sum(-1)
        assert np.all(hk <= want + 1e-9) and np.all(want <= hk + r * np.log(50 - 10) + 1e-9)


def test_summaries_follow_lm_polygraph_definitions():
    """MeanTokenEntropy = mean over tokens of the full distribution's entropy; lm-polygraph's Perplexity
    = −mean log p(y_t), the log of the perplexity stored here."""
    rng = np.random.default_rng(1)
    dists = rng.dirichlet(np.ones(30), size=6)  # 6 generated positions, V = 30
    sampled = [int(rng.choice(30, p=d)) for d in dists]
    lp_sampled = [math.log(d[t]) for d, t in zip(dists, sampled)]
    entropies, max_lps = topk_summaries(np.log(dists).tolist(), k=30)
    assert mean_token_entropy(entropies) == pytest.approx(np.mean([stats.entropy(d) for d in dists]))
    assert math.log(perplexity(lp_sampled)) == pytest.approx(-np.mean(lp_sampled))
    assert max_token_probability(max_lps) == pytest.approx(np.mean(dists.max(-1)))


def test_max_probability_and_perplexity_by_hand():
    assert max_token_probability([math.log(0.5), math.log(0.8)]) == pytest.approx(0.65)
    # log p = ln .5, ln .25: mean −1.5 ln 2, perplexity 2^1.5
    assert perplexity([math.log(0.5), math.log(0.25)]) == pytest.approx(2**1.5)
    for f in (mean_token_entropy, max_token_probability, perplexity):
        assert math.isnan(f(None)) and math.isnan(f([]))


def test_the_sampled_tokens_extra_entry_is_not_part_of_the_top_k():
    # vLLM / servers add the sampled token as a (k+1)-th entry when it is outside the top k
    with_extra = [[math.log(0.25), math.log(0.5), math.log(0.01)]]
    entropies, max_lps = topk_summaries(with_extra, k=2)
    assert entropies == pytest.approx([float(topk_entropy(np.log([0.5, 0.25])))])
    assert max_lps == pytest.approx([math.log(0.5)])
    with pytest.raises(ValueError, match="k must be >= 1"):
        topk_summaries(with_extra, k=0)


def test_token_confidences_are_in_zero_one():
    assert token_confidence("entropy", 1.5 * LN2) == pytest.approx(2**-1.5)
    assert token_confidence("entropy", 0.0) == 1.0
    assert token_confidence("maxprob", 0.65) == 0.65
    assert token_confidence("perplexity", 4.0) == 0.25
    assert math.isnan(token_confidence("perplexity", float("nan")))
    with pytest.raises(ValueError, match="unknown token estimator 'nope'"):
        token_confidence("nope", 1.0)


def test_an_openai_choice_without_top_logprobs_reads_none():
    entry = SimpleNamespace
    content = [
        entry(logprob=math.log(0.5), top_logprobs=[entry(logprob=math.log(0.5)), entry(logprob=math.log(0.25))]),
        entry(logprob=math.log(0.8), top_logprobs=[entry(logprob=math.log(0.8)), entry(logprob=math.log(0.1))]),
    ]
    entropies, max_lps = _top_summaries(content, 2)
    assert entropies == pytest.approx(
        [float(topk_entropy(np.log([0.5, 0.25]))), float(topk_entropy(np.log([0.8, 0.1])))]
    )
    assert max_lps == pytest.approx([math.log(0.5), math.log(0.8)])
    assert _top_summaries(content, 0) == (None, None)
    content[1].top_logprobs = []  # a server that left the top-k out of one position
    assert _top_summaries(content, 2) == (None, None)


# --------------------------------------------------------------------------- sampling settings and the cache


def test_top_logprobs_needs_logprobs_and_is_not_negative():
    with pytest.raises(ValueError, match="top_logprobs=5 needs logprobs=True"):
        SamplingParams(top_logprobs=5)
    with pytest.raises(ValueError, match="top_logprobs must be >= 0, got -1"):
        SamplingParams(logprobs=True, top_logprobs=-1)


def test_keys_of_k_zero_are_those_from_before_the_field_existed():
    sampling = SamplingParams(temperature=0.3, max_tokens=9, seed=4, logprobs=True)
    request = GenerationRequest([{"role": "user", "content": "hi"}], sampling)
    before = {k: v for k, v in asdict(sampling).items() if k != "top_logprobs"}  # the payload as it was
    expected = stable_hash(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "sampling": before, "sample_index": 0}
    )
    assert generation_key("m", request, 0) == expected
    with_k = GenerationRequest(request.messages, SamplingParams(**{**before, "top_logprobs": 20}))
    assert generation_key("m", with_k, 0) != expected  # k > 0 asks for what an old entry lacks


class _TopKBackend:
    """Echoes each request, with per-token summaries when k > 0."""

    model_id = "fake-topk"

    def __init__(self):
        self.calls = 0

    def generate(self, requests, progress=None):
        self.calls += 1
        out = []
        for r in requests:
            k = r.sampling.top_logprobs
            out.append(
                [
                    Generation(
                        text=r.messages[-1]["content"],
                        completion_tokens=2,
                        prompt_tokens=3,
                        token_logprobs=[-0.5, -1.0],
                        token_entropies=[0.1 * k, 0.2] if k else None,
                        token_max_logprobs=[-0.1, -0.2] if k else None,
                    )
                ]
            )
        return out


def test_summaries_round_trip_through_the_cache_and_old_parts_still_read(tmp_path):
    requests = [
        GenerationRequest(
            [{"role": "user", "content": f"q{i}"}], SamplingParams(logprobs=True, top_logprobs=20, seed=i)
        )
        for i in range(3)
    ]
    backend = _TopKBackend()
    first = generate_cached(backend, requests, GenerationCache(tmp_path), batch_size=2, show_progress=False)
    again = generate_cached(backend, requests, GenerationCache(tmp_path), batch_size=2, show_progress=False)
    assert backend.calls == 2  # two units, then all from disk
    assert again == first and again[0][0].token_entropies == pytest.approx([2.0, 0.2])

    # a part of the schema before token summaries (no such columns) still loads, reading None
    old_schema = pa.schema([f for f in pq.read_schema(next(tmp_path.glob("part-*.parquet")))][:7])
    assert old_schema.names == [
        "unit",
        "key",
        "text",
        "completion_tokens",
        "prompt_tokens",
        "token_logprobs",
        "finish_reason",
    ]
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    k0 = [GenerationRequest(r.messages, SamplingParams(logprobs=True, seed=i)) for i, r in enumerate(requests)]
    reference = generate_cached(_TopKBackend(), k0, GenerationCache(tmp_path / "fresh"), show_progress=False)
    for part in (tmp_path / "fresh").glob("part-*.parquet"):
        table = pq.read_table(part).select(old_schema.names)
        pq.write_table(table.cast(old_schema), old_dir / part.name)
    cache = GenerationCache(old_dir)
    assert len(cache) == 3
    offline = _TopKBackend()
    served = generate_cached(offline, k0, cache, show_progress=False)
    assert offline.calls == 0 and served == reference
    assert served[0][0].token_entropies is None and served[0][0].token_max_logprobs is None


# --------------------------------------------------------------------------- the transformers backend


@pytest.fixture(scope="module")
def transformers_backend(tiny_model_dir):
    from debatelab.llm.transformers_backend import TransformersBackend

    return TransformersBackend(tiny_model_dir, device="cpu", dtype="float32", batch_size=2)


@pytest.mark.slow
def test_transformers_entropies_equal_the_full_vocabulary_at_k_equal_v(transformers_backend, hf):
    import torch

    tok, model = hf
    vocab = model.config.vocab_size
    chat = [{"role": "user", "content": "What is 2 + 2?"}]

    def run(k):
        sampling = SamplingParams(temperature=0.0, max_tokens=5, logprobs=True, top_logprobs=k)
        return transformers_backend.generate([GenerationRequest(chat, sampling)])[0][0]

    full_k = run(vocab)
    prompt = transformers_backend.prompt_ids(chat)
    ids = torch.tensor([prompt + full_k.token_ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    steps = logp[len(prompt) - 1 : len(prompt) - 1 + len(full_k.token_ids)]
    reference = (-(steps.exp() * steps).sum(-1)).tolist()
    assert len(full_k.token_entropies) == full_k.completion_tokens == len(reference)
    np.testing.assert_allclose(full_k.token_entropies, reference, atol=1e-3)
    np.testing.assert_allclose(full_k.token_max_logprobs, steps.max(-1).values.tolist(), atol=1e-4)

    small = run(5)
    assert small.token_ids == full_k.token_ids  # greedy: k changes what is recorded, not what is sampled
    assert all(h <= ref + 1e-4 for h, ref in zip(small.token_entropies, reference))
    assert sum(small.token_entropies) < sum(reference) - 1.0  # a near-uniform random model: much is left out
    np.testing.assert_allclose(small.token_max_logprobs, full_k.token_max_logprobs, atol=1e-6)
    assert run(0).token_entropies is None


# --------------------------------------------------------------------------- the confidence stage


def _write_token_inputs(tmp_path, entropy_in_turns=True):
    dataset = pd.DataFrame(
        {
            "id": ["q1", "q2"],
            "question": ["2+2?", "3+3?"],
            "choices": [None, None],
            "answer": ["4", "6"],
            "task_type": ["math", "math"],
            "meta": ['{"source": "t", "source_split": "test"}'] * 2,
        }
    )
    write_parquet_atomic(dataset, tmp_path / "data.parquet")
    paths = []
    for agent, answers, entropy in (("a", ["4", "6"], [0.5, 1.0]), ("b", ["5", "6"], [2.0, 0.25])):
        zero = pd.DataFrame(
            {
                "question_id": ["q1", "q2"],
                "agent": agent,
                "sample": 0,
                "answer": answers,
                "gold": ["4", "6"],
                "correct": [answers[0] == "4", answers[1] == "6"],
                "task_type": "math",
                "conf_verbal": np.nan,
                "conf_seqprob": np.nan,
                "mean_token_entropy": entropy,
                "max_token_prob": [0.9, 0.6],
                "perplexity": [1.25, 2.0],
            }
        )
        write_parquet_atomic(zero, tmp_path / f"{agent}.parquet")
        paths.append(tmp_path / f"{agent}.parquet")
    turns = pd.DataFrame(
        {
            "question_id": ["q1", "q1", "q2", "q2"],
            "round": [1, 1, 1, 1],
            "agent": ["a", "b", "a", "b"],
            "agent_config": ["a", "b", "a", "b"],
            "call": [0, 0, 0, 0],
            "answer": ["4", "4", "6", "6"],
            "correct": [True, True, True, True],
            "conf_verbal": np.nan,
            "conf_seqprob": np.nan,
            "mean_token_entropy": [0.1, 0.2, np.nan if not entropy_in_turns else 0.3, 0.4],
            "max_token_prob": [0.95, 0.9, 0.85, 0.8],
            "perplexity": [1.1, 1.2, 1.3, 1.4],
        }
    )
    if not entropy_in_turns:
        turns["mean_token_entropy"] = np.nan
    write_parquet_atomic(turns, tmp_path / "turns.parquet")
    return tmp_path / "data.parquet", paths, tmp_path / "turns.parquet"


def test_streams_carry_the_token_confidences(tmp_path):
    data, zero, turns = _write_token_inputs(tmp_path)
    frame = build_streams(
        data, zero, turns, dataset="d", pair="ab", agents=["a", "b"], estimators=list(TOKEN_ESTIMATORS)
    )
    row = frame.set_index(["question_id", "agent", "stream"])
    assert row.loc[("q1", "b", 0), "conf_entropy"] == pytest.approx(math.exp(-2.0))
    assert row.loc[("q1", "b", 1), "conf_entropy"] == pytest.approx(math.exp(-0.2))
    assert row.loc[("q2", "a", 0), "conf_maxprob"] == pytest.approx(0.6)
    assert row.loc[("q2", "b", 1), "conf_perplexity"] == pytest.approx(1 / 1.4)
    assert frame["conf_seqprob"].isna().all()  # not asked for


def test_streams_say_which_setting_an_empty_token_column_needs(tmp_path):
    data, zero, turns = _write_token_inputs(tmp_path, entropy_in_turns=False)
    with pytest.raises(
        DataFileError, match=r"turns\.parquet: column mean_token_entropy is empty.*debate\.top_logprobs"
    ):
        build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "b"], estimators=["entropy"])
    old = pd.read_parquet(zero[0]).drop(columns=["max_token_prob"])
    write_parquet_atomic(old, zero[0])
    with pytest.raises(DataFileError, match=r"a\.parquet: no column max_token_prob, which estimator 'maxprob' reads"):
        build_streams(data, zero, turns, dataset="d", pair="ab", agents=["a", "b"], estimators=["maxprob"])


def test_token_estimators_are_calibrated_like_the_elicited_ones():
    streams = synthetic_streams(60, seed=5)
    # confidences that track the self-report, as a token-level one would
    streams = streams.assign(
        conf_entropy=streams["conf_seqprob"] ** 2,
        conf_maxprob=streams["conf_seqprob"],
        conf_perplexity=np.sqrt(streams["conf_seqprob"]),
    )
    settings = CalibrationSettings(runs=1, estimators=list(TOKEN_ESTIMATORS), calibrators=["raw", "isotonic"])
    calibration = stage.fit_calibrators(streams, seed=0, settings=settings)
    fitted = {(f["estimator"], f["calibrator"]) for f in calibration["runs"][0]["fitted"]}
    assert fitted == {(e, c) for e in TOKEN_ESTIMATORS for c in ("raw", "isotonic")}
    raw = stage.calibrated(streams, calibration, 0, "entropy", "raw")
    np.testing.assert_allclose(raw["p"], streams[ESTIMATOR_COLUMNS["entropy"]])
    iso = stage.calibrated(streams, calibration, 0, "perplexity", "isotonic")
    assert iso["p"].between(0, 1).all() and not np.allclose(iso["p"], streams["conf_perplexity"])
    with pytest.raises(ValueError, match="calibration estimators must be some of"):
        CalibrationSettings(estimators=["entropyy"])


# --------------------------------------------------------------------------- UMAD's claim umad-10


def _entropy_outputs(tmp_path, first_round, differences) -> RunOutputs:
    """A two-agent debate over len(differences) questions, two threads, rounds 0 and 1: seat 1 always
    0.2 nats above seat 0, and every reply of question q in round 1 `differences[q]` above round 0."""
    rows = []
    for q, (base, diff) in enumerate(zip(first_round, differences)):
        for thread in (0, 1):
            for seat in (0, 1):
                for rnd in (0, 1):
                    rows.append(
                        {
                            "question_id": f"q{q}",
                            "dataset": "ds1",
                            "protocol": "pair",
                            "thread": thread,
                            "round": rnd,
                            "agent": f"ag{seat}",
                            "agent_index": seat,
                            "agent_config": f"ag{seat}",
                            "call": 0,
                            "answer": "1",
                            "correct": True,
                            "parse_failed": False,
                            "completion_tokens": 5,
                            "finish_reason": "stop",
                            "mean_token_entropy": base + 0.2 * seat + diff * rnd,
                        }
                    )
    path = tmp_path / "turns.parquet"
    pd.DataFrame(rows).to_parquet(path)
    info = ProtocolInfo(
        name="pair",
        kind="all_to_all",
        rounds=1,
        threads=2,
        template="umad",
        participants=("ag0", "ag1"),
        models=("m", "m"),
        adversarial=0,
        trained_runs=(),
        datasets=("ds1",),
    )
    return RunOutputs("entropy", {"pair": info}, {}, {"ds1": "gsm8k"}, turn_paths=[path])


def _entropy_claim(outputs):
    claims = claims_frame(umad_claims.token_entropy_claims(outputs))
    assert list(claims["claim"]) == ["umad-10"]
    return claims.iloc[0]


def test_entropy_rising_clearly_holds_and_falling_clearly_fails(tmp_path):
    rng = np.random.default_rng(0)
    first = rng.uniform(0.5, 2.0, 30)
    rises = [0.5 + 0.1 * (q % 3 - 1) for q in range(30)]  # 0.4, 0.5, 0.6: every resample's mean in [0.4, 0.6]
    claim = _entropy_claim(_entropy_outputs(tmp_path, first, rises))
    assert claim["value"] == pytest.approx(np.mean(rises)) and claim["n"] == 30 and claim["expect"] == "> 0"
    assert 0.4 <= claim["low"] <= claim["high"] <= 0.6 and claim["verdict"] == "holds"
    claim = _entropy_claim(_entropy_outputs(tmp_path, first, [-d for d in rises]))
    assert claim["value"] == pytest.approx(-np.mean(rises)) and claim["verdict"] == "fails"


def test_a_small_change_on_few_questions_is_not_decided(tmp_path):
    # +0.3, −0.2, +0.05: mean 0.05 on three questions, fewer than claims.MIN_UNITS: no interval
    claim = _entropy_claim(_entropy_outputs(tmp_path, [1.0, 1.0, 1.0], [0.3, -0.2, 0.05]))
    assert claim["value"] == pytest.approx(0.05) and claim["n"] == 3
    assert np.isnan(claim["low"]) and claim["verdict"] == "n/a (too few)"
    # the same changes on 12 questions: the mean 0.05 against an SD of 0.2 (SE 0.06) covers 0
    claim = _entropy_claim(_entropy_outputs(tmp_path, [1.0] * 12, [0.3, -0.2, 0.05] * 4))
    assert claim["value"] == pytest.approx(0.05) and claim["n"] == 12
    assert claim["low"] < 0 < claim["high"] and claim["verdict"] == "inconclusive"


def test_missing_entropies_make_the_claim_n_a(tmp_path):
    claim = _entropy_claim(_entropy_outputs(tmp_path, [np.nan] * 4, [0.1] * 4))
    assert claim["verdict"] == "n/a" and "mean_token_entropy is empty" in claim["detail"]
