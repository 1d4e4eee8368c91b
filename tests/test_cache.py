"""Generation cache and batching: scheduling logic, so a scripted fake backend is used here."""

from __future__ import annotations

import pytest

from debatelab.llm import GenerationCache, GenerationRequest, SamplingParams, generate_cached
from debatelab.llm.base import Backend, Generation, ScoredText, stable_hash
from debatelab.llm.cache import score_cached


class ScriptedBackend(Backend):
    """Echoes a deterministic text per (messages, seed); can die after a number of calls."""

    model_id = "scripted"

    def __init__(self, die_after_calls: int | None = None):
        self.calls: list[int] = []
        self.die_after_calls = die_after_calls

    def generate(self, requests, progress=None):
        if self.die_after_calls is not None and len(self.calls) >= self.die_after_calls:
            raise KeyboardInterrupt("killed")
        self.calls.append(len(requests))
        out = []
        for r in requests:
            assert r.n == 1, "the cache sends one sample per unit"
            text = f"{r.messages[-1]['content']}|seed={r.sampling.seed}"
            out.append([Generation(text=text, completion_tokens=3, prompt_tokens=5, token_logprobs=[-0.1] * 3)])
        if progress:
            progress(len(requests))
        return out

    def score(self, prompts, replies):
        self.calls.append(len(prompts))
        return [ScoredText(token_logprobs=[-float(len(r))], prompt_tokens=len(p)) for p, r in zip(prompts, replies)]


def _requests(k, n=3):
    return [
        GenerationRequest(messages=[{"role": "user", "content": f"q{i}"}], sampling=SamplingParams(seed=7), n=n)
        for i in range(k)
    ]


def test_batches_respect_batch_size_and_return_n_in_order(tmp_path):
    backend = ScriptedBackend()
    out = generate_cached(backend, _requests(5, n=3), GenerationCache(tmp_path), batch_size=4, show_progress=False)
    assert backend.calls == [4, 4, 4, 3]  # 15 samples in units of at most 4
    assert [len(x) for x in out] == [3] * 5
    assert all(g.text.startswith(f"q{i}|") for i, gens in enumerate(out) for g in gens)
    # samples of one request get different derived seeds
    assert len({g.text for g in out[0]}) == 3


def test_second_run_is_served_from_disk_without_backend_calls(tmp_path):
    first = generate_cached(
        ScriptedBackend(), _requests(4), GenerationCache(tmp_path), batch_size=5, show_progress=False
    )
    again = ScriptedBackend()
    second = generate_cached(again, _requests(4), GenerationCache(tmp_path), batch_size=5, show_progress=False)
    assert again.calls == []
    assert [[g.text for g in x] for x in first] == [[g.text for g in x] for x in second]


def test_killed_run_resumes_without_redoing_finished_batches(tmp_path):
    requests = _requests(6, n=2)  # 12 samples, units of 4 → 3 units
    with pytest.raises(KeyboardInterrupt):
        generate_cached(
            ScriptedBackend(die_after_calls=2), requests, GenerationCache(tmp_path), batch_size=4, show_progress=False
        )
    assert len(GenerationCache(tmp_path)) == 8  # two finished units are on disk
    resumed = ScriptedBackend()
    out = generate_cached(resumed, requests, GenerationCache(tmp_path), batch_size=4, show_progress=False)
    assert resumed.calls == [4]  # only the unit that was in flight
    reference = generate_cached(ScriptedBackend(), requests, GenerationCache(None), batch_size=12, show_progress=False)
    assert [[g.text for g in x] for x in out] == [[g.text for g in x] for x in reference]


def test_changed_sampling_settings_miss_the_cache(tmp_path):
    generate_cached(ScriptedBackend(), _requests(2), GenerationCache(tmp_path), show_progress=False)
    hotter = [
        GenerationRequest(messages=r.messages, sampling=SamplingParams(seed=7, temperature=1.3), n=r.n)
        for r in _requests(2)
    ]
    backend = ScriptedBackend()
    generate_cached(backend, hotter, GenerationCache(tmp_path), show_progress=False)
    assert sum(backend.calls) == 6


def test_more_samples_reuse_the_first_units(tmp_path):
    # samples are listed sample-major (sample 0 of every request, then sample 1, ...), so the units
    # of the first samples stay the same when more samples are asked for
    generate_cached(ScriptedBackend(), _requests(2, n=2), GenerationCache(tmp_path), batch_size=2, show_progress=False)
    backend = ScriptedBackend()
    generate_cached(backend, _requests(2, n=5), GenerationCache(tmp_path), batch_size=2, show_progress=False)
    assert backend.calls == [2, 2, 2]  # 3 new samples for each of 2 requests


def test_scores_are_cached(tmp_path):
    prompts = [[{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]]
    first = score_cached(ScriptedBackend(), prompts, ["x", "yy"], GenerationCache(tmp_path), show_progress=False)
    backend = ScriptedBackend()
    second = score_cached(backend, prompts, ["x", "yy"], GenerationCache(tmp_path), show_progress=False)
    assert backend.calls == []
    assert [s.token_logprobs for s in first] == [s.token_logprobs for s in second] == [[-1.0], [-2.0]]


class BatchDependentBackend(ScriptedBackend):
    """Like an engine whose numerics depend on the batch: each text also names its batch mates."""

    def generate(self, requests, progress=None):
        out = super().generate(requests, progress)
        batch = stable_hash([r.messages[-1]["content"] for r in requests])[:6]
        return [[Generation(text=f"{g[0].text}|batch={batch}", completion_tokens=3, prompt_tokens=5)] for g in out]


def test_outputs_do_not_depend_on_what_other_calls_cached(tmp_path):
    """A call sees only its own units: another call's entries for some of its requests (another
    protocol, another job order) never change its outputs."""
    requests = _requests(6, n=1)
    alone = generate_cached(
        BatchDependentBackend(), requests, GenerationCache(tmp_path / "a"), batch_size=4, show_progress=False
    )
    shared = GenerationCache(tmp_path / "b")
    generate_cached(
        BatchDependentBackend(), requests[1:4], shared, batch_size=4, show_progress=False
    )  # a subset, first
    after = generate_cached(
        BatchDependentBackend(), requests, GenerationCache(tmp_path / "b"), batch_size=4, show_progress=False
    )
    assert [g[0].text for g in after] == [g[0].text for g in alone]


def test_a_unit_is_rebuilt_with_the_same_members(tmp_path):
    requests = _requests(5, n=1)
    reference = generate_cached(
        BatchDependentBackend(), requests, GenerationCache(None), batch_size=2, show_progress=False
    )
    with pytest.raises(KeyboardInterrupt):
        generate_cached(
            BatchDependentBackend(die_after_calls=1),
            requests,
            GenerationCache(tmp_path),
            batch_size=2,
            show_progress=False,
        )
    resumed = BatchDependentBackend()
    out = generate_cached(resumed, requests, GenerationCache(tmp_path), batch_size=2, show_progress=False)
    assert resumed.calls == [2, 1]
    assert [g[0].text for g in out] == [g[0].text for g in reference]


def test_entries_of_the_per_request_format_are_counted_and_not_served(tmp_path, caplog):
    import pyarrow as pa
    import pyarrow.parquet as pq

    old = pa.Table.from_pylist(
        [
            {
                "key": "k",
                "text": "t",
                "completion_tokens": 1,
                "prompt_tokens": 1,
                "token_logprobs": None,
                "finish_reason": "stop",
            }
        ]
    )
    pq.write_table(old, tmp_path / "part-old.parquet")
    with caplog.at_level("WARNING"):
        cache = GenerationCache(tmp_path)
    assert cache.stale_entries == 1 and len(cache) == 0
    assert "not reused" in caplog.text and str(tmp_path) in caplog.text


def test_partial_part_file_is_ignored(tmp_path):
    generate_cached(ScriptedBackend(), _requests(1), GenerationCache(tmp_path), show_progress=False)
    (tmp_path / "part-broken.parquet").write_bytes(b"PAR1 not really")
    assert len(GenerationCache(tmp_path)) == 3


def test_a_part_cut_short_is_moved_aside_and_only_its_unit_generated_again(tmp_path, caplog):
    requests = _requests(4, n=2)  # 8 samples, units of 4 → 2 parts
    first = generate_cached(ScriptedBackend(), requests, GenerationCache(tmp_path), batch_size=4, show_progress=False)
    parts = sorted(tmp_path.glob("part-*.parquet"))
    assert len(parts) == 2
    cut = parts[0]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])  # as a full disk leaves a copied file
    again = ScriptedBackend()
    with caplog.at_level("WARNING", logger="debatelab.llm.cache"):
        second = generate_cached(again, requests, GenerationCache(tmp_path), batch_size=4, show_progress=False)
    assert again.calls == [4]  # the lost unit only
    assert [[g.text for g in x] for x in first] == [[g.text for g in x] for x in second]
    assert f"cache part {cut} does not load" in caplog.text and "generated again" in caplog.text
    assert (tmp_path / f"corrupt-{cut.name}").exists() and not cut.exists()
    assert len(list(tmp_path.glob("part-*.parquet"))) == 2  # the regenerated unit's new part and the intact one
