"""The transformers backend on the real tiny model: batching, padding, logprobs, scoring."""

from __future__ import annotations

import pytest
import torch

from debatelab.llm import GenerationRequest, SamplingParams
from debatelab.llm.base import model_fingerprint
from debatelab.llm.transformers_backend import TransformersBackend


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return TransformersBackend(tiny_model_dir, device="cpu", dtype="float32", batch_size=3)


def _chat(text):
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


def test_n_generations_per_request_in_order_with_counts(backend):
    requests = [
        GenerationRequest(messages=_chat("short"), sampling=SamplingParams(max_tokens=5, logprobs=True), n=1),
        GenerationRequest(
            messages=_chat("a much longer question " * 5), sampling=SamplingParams(max_tokens=7, logprobs=True), n=3
        ),
        GenerationRequest(messages=_chat("mid length one"), sampling=SamplingParams(max_tokens=5), n=2),
    ]
    out = backend.generate(requests)
    assert [len(x) for x in out] == [1, 3, 2]
    for request, gens in zip(requests, out):
        expected_prompt = len(backend.prompt_ids(request.messages))
        for g in gens:
            assert g.prompt_tokens == expected_prompt
            assert 1 <= g.completion_tokens <= request.sampling.max_tokens
            assert g.finish_reason == ("length" if g.completion_tokens == request.sampling.max_tokens else "stop")
            if request.sampling.logprobs:
                assert len(g.token_logprobs) == g.completion_tokens
                assert all(lp <= 0 for lp in g.token_logprobs)
            else:
                assert g.token_logprobs is None


def test_greedy_batch_equals_one_by_one(backend):
    """Left padding must not change what a prompt generates."""
    greedy = SamplingParams(temperature=0.0, max_tokens=6, logprobs=True)
    requests = [GenerationRequest(messages=_chat("x " * k), sampling=greedy) for k in (1, 9, 20)]
    batched = backend.generate(requests)
    single = [backend.generate([r])[0] for r in requests]
    for b, s in zip(batched, single):
        assert b[0].text == s[0].text
        assert b[0].token_logprobs == pytest.approx(s[0].token_logprobs, abs=1e-4)


def test_a_sample_does_not_depend_on_its_batch_mates(backend):
    """Each row samples from its own stream (its request's seed): the same request alone, in a small
    batch and in a large batch of other requests gives the same text (logprobs may differ in the
    last bits with the batch shape)."""
    hot = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=11, logprobs=True)
    target = GenerationRequest(messages=_chat("what is two plus two?"), sampling=hot)
    others = [
        GenerationRequest(
            messages=_chat("other question " * k),
            sampling=SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=k, logprobs=True),
        )
        for k in range(1, 13)
    ]
    alone = backend.generate([target])[0][0]
    small = backend.generate([others[0], target])[1][0]
    large = backend.generate([*others, target])[-1][0]
    assert alone.text == small.text == large.text
    assert alone.token_logprobs == pytest.approx(large.token_logprobs, abs=1e-4)
    reseeded = GenerationRequest(
        messages=target.messages,
        sampling=SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=12, logprobs=True),
    )
    assert backend.generate([reseeded])[0][0].text != alone.text


def test_seeded_sampler_draws_from_the_distribution():
    """The per-row sampler picks tokens with the probabilities it is given."""
    from debatelab.llm.transformers_backend import SeededSampler

    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    scores = torch.log(probs).repeat(4000, 1)
    sampler = SeededSampler(range(4000), max_new_tokens=1, device="cpu")
    tokens = sampler.sample(scores, step=0)
    assert tokens.shape == (4000,)
    frequencies = torch.bincount(tokens, minlength=4).float() / 4000
    assert frequencies[1] == 0  # never a token of probability 0
    assert frequencies.tolist() == pytest.approx(probs.tolist(), abs=0.03)


@pytest.mark.parametrize(
    "temperature, top_p, expected",
    [
        # p^(1/T) renormalised: (0.1, 0, 0.6, 0.3) at T = 0.5 -> (0.01, 0, 0.36, 0.09)/0.46
        (0.5, 1.0, [0.01 / 0.46, 0.0, 0.36 / 0.46, 0.09 / 0.46]),
        # top-p 0.7 keeps 0.6 and then 0.3 (the mass before 0.3 is 0.6 < 0.7), drops 0.1
        (1.0, 0.7, [0.0, 0.0, 0.6 / 0.9, 0.3 / 0.9]),
        # top-p 0.5 keeps only the top token
        (1.0, 0.5, [0.0, 0.0, 1.0, 0.0]),
    ],
)
def test_seeded_sampler_applies_temperature_and_top_p(temperature, top_p, expected):
    """transformers runs a caller's logits processors before its own temperature / top-p warpers, so
    the sampler must apply them itself (it sampled at T = 1, top-p 1 whatever was asked before)."""
    from debatelab.llm.transformers_backend import SeededSampler

    scores = torch.log(torch.tensor([0.1, 0.0, 0.6, 0.3])).repeat(4000, 1)
    sampler = SeededSampler(range(4000), max_new_tokens=1, device="cpu", temperature=temperature, top_p=top_p)
    tokens = sampler.sample(scores, step=0)
    frequencies = torch.bincount(tokens, minlength=4).float() / 4000
    assert frequencies.tolist() == pytest.approx(expected, abs=0.03)


def test_a_low_temperature_sample_is_the_greedy_reply(backend):
    """End to end through `generate`: at T = 0.01 every seed gives the greedy reply; at T = 1 they differ."""

    def replies(temperature):
        return [
            backend.generate(
                [
                    GenerationRequest(
                        messages=_chat("tell me a story"),
                        sampling=SamplingParams(temperature=temperature, max_tokens=8, seed=seed),
                    )
                ]
            )[0][0].text
            for seed in range(4)
        ]

    greedy = replies(0.0)[0]
    assert replies(0.01) == [greedy] * 4
    assert len(set(replies(1.0))) > 1


def test_greedy_first_token_logprob_is_the_max(backend, tiny_model_dir):
    request = GenerationRequest(
        messages=_chat("hello"), sampling=SamplingParams(temperature=0.0, max_tokens=1, logprobs=True)
    )
    gen = backend.generate([request])[0][0]
    ids = torch.tensor([backend.prompt_ids(request.messages)])
    with torch.inference_mode():
        logits = backend.model(input_ids=ids).logits[0, -1].float()
    assert gen.token_logprobs[0] == pytest.approx(torch.log_softmax(logits, -1).max().item(), abs=1e-4)


def test_same_seed_same_sample_different_seed_differs(backend):
    def run(seed):
        r = GenerationRequest(
            messages=_chat("tell me"), sampling=SamplingParams(temperature=1.0, max_tokens=8, seed=seed)
        )
        return backend.generate([r])[0][0].text

    assert run(1) == run(1)
    assert len({run(s) for s in range(4)}) > 1


def test_batched_score_matches_unpadded_forward(backend):
    prompts = [_chat("q"), _chat("a longer prompt " * 6), _chat("mid")]
    replies = ["The answer is 4.", "B", "yes it is"]
    scored = backend.score(prompts, replies)
    for prompt, reply, s in zip(prompts, replies, scored):
        p = backend.prompt_ids(prompt)
        r = backend.tokenizer.encode(reply, add_special_tokens=False) + backend.tokenizer.encode(
            "<|im_end|>\n", add_special_tokens=False
        )
        ids = torch.tensor([p + r])
        with torch.inference_mode():
            logp = torch.log_softmax(backend.model(input_ids=ids).logits[0].float(), -1)
        expected = [logp[len(p) - 1 + t, r[t]].item() for t in range(len(r))]
        assert s.prompt_tokens == len(p)
        assert s.token_logprobs == pytest.approx(expected, abs=1e-4)


def test_fingerprint_changes_when_weights_change(tiny_model_dir, tmp_path):
    import shutil
    import time

    copy = tmp_path / "m"
    shutil.copytree(tiny_model_dir, copy)
    before = model_fingerprint(copy)
    time.sleep(1.1)
    weights = next(copy.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes())
    assert model_fingerprint(copy) != before


def test_the_model_loads_on_first_use_only(tiny_model_dir, tmp_path):
    """A job whose generations are all cached never loads the model (nor transformers' generation
    code): the cache serves it on the model id alone."""
    from debatelab.llm.cache import GenerationCache, generate_cached

    request = GenerationRequest(
        [{"role": "user", "content": "Hi"}], SamplingParams(temperature=1.0, max_tokens=4, seed=3)
    )
    first = TransformersBackend(tiny_model_dir, device="cpu")
    cache = GenerationCache(tmp_path / "cache")
    expected = generate_cached(first, [request], cache, batch_size=4)
    assert "model" in first.__dict__  # it had to generate

    second = TransformersBackend(tiny_model_dir, device="cpu")
    assert second.model_id == first.model_id and "model" not in second.__dict__
    assert generate_cached(second, [request], cache, batch_size=4)[0][0].text == expected[0][0].text
    assert "model" not in second.__dict__  # served from disk: never loaded
    assert second.generate([request])[0][0].text == first.generate([request])[0][0].text  # loads when it must
    second.close()
    with pytest.raises(RuntimeError, match="closed"):
        second.generate([request])


def test_a_reply_budget_past_the_context_window_is_clipped_and_counted(tiny_model_dir, caplog):
    """prompt + max_tokens > max_model_len: the budget becomes the room the prompt leaves (vLLM
    would cut the reply there unannounced; `llm.budget`), the request is counted and logged; a
    prompt with no room is refused before anything is generated."""
    from debatelab.llm.budget import PromptTooLong

    backend = TransformersBackend(tiny_model_dir, device="cpu", dtype="float32", batch_size=3, max_model_len=10_000)
    chat = _chat("Count to one hundred.")
    prompt = len(backend.prompt_ids(chat))
    room = 6
    backend.max_model_len = prompt + room
    fits = GenerationRequest(chat, SamplingParams(temperature=1.0, max_tokens=room, seed=3))
    asks_more = GenerationRequest(chat, SamplingParams(temperature=1.0, max_tokens=200, seed=3))
    with caplog.at_level("WARNING", logger="debatelab.llm.budget"):
        [[within]], [[clipped]] = backend.generate([fits]), backend.generate([asks_more])
    assert backend.budget_clips == 1 and "1 of 1 requests' max_tokens clipped" in caplog.text
    assert clipped.completion_tokens <= room and clipped.prompt_tokens == prompt
    assert clipped.token_ids == within.token_ids  # the same seed, the same budget: the same reply
    backend.max_model_len = prompt
    with pytest.raises(PromptTooLong, match=f"prompt is {prompt} tokens, the context window {prompt}"):
        backend.generate([fits])


def test_the_nucleus_from_a_widening_top_k_is_the_one_a_full_sort_gives():
    """The nucleus comes from a top-k widened until it holds each row's (64, 1024 candidates, then a
    sort): it must keep exactly the tokens a sort of the whole vocabulary keeps, for a peaked row
    and for flat rows whose nucleus needs the wider passes."""
    from debatelab.llm.transformers_backend import SeededSampler

    torch.manual_seed(0)
    vocab = 5000
    logits = torch.stack([torch.randn(vocab) * 8, torch.randn(vocab) * 0.5, torch.randn(vocab) * 0.01])
    probs = torch.softmax(logits, dim=-1)
    for top_p in (0.3, 0.9, 0.999):
        sampler = SeededSampler(range(3), max_new_tokens=1, device="cpu", top_p=top_p)
        kept = probs >= sampler._nucleus_floor(probs)
        ordered, order = probs.sort(dim=-1, descending=True)
        inside = (ordered.double().cumsum(-1) - ordered.double()) < top_p
        expected = torch.zeros_like(kept).scatter(1, order, inside)
        assert torch.equal(kept, expected)
    assert kept[2].sum() > 1024  # the flat row needed the sort


def test_sampled_logprobs_are_the_raw_model_log_probabilities(backend):
    """At T = 0.7, top-p 0.9 the returned log-probs (and the top log-probs' maximum) are the raw
    model's log-softmax at the sampled tokens, before temperature and top-p, as vLLM reports them."""
    request = GenerationRequest(
        messages=_chat("name three colours"),
        sampling=SamplingParams(temperature=0.7, top_p=0.9, max_tokens=6, seed=5, logprobs=True, top_logprobs=3),
    )
    gen = backend.generate([request])[0][0]
    prompt = backend.prompt_ids(request.messages)
    with torch.inference_mode():
        logits = backend.model(input_ids=torch.tensor([prompt + gen.token_ids])).logits[0].float()
    log_softmax = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    expected = log_softmax.gather(-1, torch.tensor(gen.token_ids).unsqueeze(-1)).squeeze(-1)
    assert gen.token_logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    assert gen.token_max_logprobs == pytest.approx(log_softmax.max(-1).values.tolist(), abs=1e-4)
    assert len(gen.token_entropies) == gen.completion_tokens


def test_rows_that_end_early_leave_the_batch_without_changing_the_others(backend, monkeypatch):
    """With many end-of-turn tokens, rows end at different steps and leave the batch (their KV cache
    is dropped), at once or when next looked at: every row still gets the tokens and log-probs it
    gets alone."""
    from transformers import DynamicCache

    early = TransformersBackend.from_model(backend.model, backend.tokenizer, model_id="early", batch_size=16)
    early.eos_ids = set(range(0, len(backend.tokenizer), 5))  # a fifth of the vocabulary ends a reply
    drops = []
    select = DynamicCache.batch_select_indices
    monkeypatch.setattr(DynamicCache, "batch_select_indices", lambda self, i: drops.append(len(i)) or select(self, i))
    requests = [
        GenerationRequest(
            messages=_chat("count " * k),
            sampling=SamplingParams(temperature=1.0, top_p=0.95, max_tokens=12, seed=k, logprobs=True),
        )
        for k in range(8)
    ]
    together = [g[0] for g in early.generate(requests)]
    assert drops  # rows left the batch
    lengths = [g.completion_tokens for g in together]
    assert len(set(lengths)) > 2 and min(lengths) < 12
    early.STOP_CHECK_EVERY = {"cpu": 3}  # as on a GPU: ended rows are found a few steps late
    late = [g[0] for g in early.generate(requests)]
    for request, row, late_row in zip(requests, together, late):
        alone = early.generate([request])[0][0]
        for batched in (row, late_row):
            assert alone.token_ids == batched.token_ids
            assert alone.finish_reason == batched.finish_reason
            assert alone.token_logprobs == pytest.approx(batched.token_logprobs, abs=1e-4)


def test_a_model_that_keeps_no_kv_cache_is_refused(backend):
    """Gradient checkpointing in train mode turns the KV cache off: the decode loop, which feeds one
    token a step, must refuse rather than generate from that token alone."""
    model = backend.model
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    try:
        request = GenerationRequest(messages=_chat("hi"), sampling=SamplingParams(temperature=0.0, max_tokens=3))
        with pytest.raises(RuntimeError, match="no KV cache"):
            backend.generate([request])
    finally:
        model.gradient_checkpointing_disable()
        model.eval()


def test_cpu_decode_steps_share_the_key_value_heads_in_the_kernel(char_model_dir, monkeypatch):
    """On CPU the decode steps of a grouped-query model (here 2 heads, 1 key-value head) give SDPA the
    cache's key-value heads as they are (`enable_gqa`) instead of copying them per step
    (`repeat_kv`, which transformers does whenever there is a mask): only the prefill repeats them,
    and a left-padded greedy batch gives the same tokens and scores in float32 (1e-5), and under
    bf16 autocast the same tokens and log-probabilities within autocast's stated 0.05 nats (ours
    attends in float32 there). The backend loads its models so."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.integrations import sdpa_attention

    from debatelab.llm.transformers_backend import CPU_DECODE_SDPA, cpu_decode_attention

    tokenizer = AutoTokenizer.from_pretrained(char_model_dir)
    tokenizer.padding_side = "left"
    batch = tokenizer(["what is 2+3?", "a longer one: 4+5+6 = ?", "7"], return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()  # a mask: transformers would repeat the heads
    models = [AutoModelForCausalLM.from_pretrained(char_model_dir, dtype=torch.float32).eval() for _ in range(2)]
    assert cpu_decode_attention(models[1]) and models[1].config._attn_implementation == CPU_DECODE_SDPA
    repeats = []
    original = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda h, n: repeats.append(h.shape[2]) or original(h, n))
    layers, new_tokens = models[0].config.num_hidden_layers, 6
    for autocast in (False, True):
        outputs = []
        for model in models:
            repeats.clear()
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                out = model.generate(
                    **batch,
                    max_new_tokens=new_tokens,
                    min_new_tokens=new_tokens,
                    do_sample=False,
                    output_scores=True,
                    return_dict_in_generate=True,
                )
            outputs.append(out)
            repeated = len(repeats)
            assert repeated == 2 * layers * (new_tokens if model is models[0] else 1)  # key and value per layer
        assert torch.equal(outputs[0].sequences, outputs[1].sequences)
        for plain, shared in zip(outputs[0].scores, outputs[1].scores):
            if autocast:  # transformers' kernel runs in bf16 there, ours in float32: bf16's rounding apart
                plain, shared = plain.log_softmax(-1), shared.log_softmax(-1)
            torch.testing.assert_close(shared, plain, rtol=0, atol=0.05 if autocast else 1e-5)
    backend = TransformersBackend(char_model_dir, device="cpu", dtype="float32")
    assert backend.model.config._attn_implementation == CPU_DECODE_SDPA
