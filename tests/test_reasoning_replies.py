"""A reasoning model's reply (gpt-oss, harmony format): the final channel is the reply's text, the
one graded, stored and forwarded to peers; the analysis channel (its chain of thought) is kept
apart, and its tokens still count. SVR-MAD (arXiv:2605.23099) debates GPT-OSS-120B; a peer there
is shown the sender's answer as a reader sees it (docs/debate.md, "Reasoning models")."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from debatelab import prompts
from debatelab.debate.engine import Ask, Participant, QuestionState, to_turn
from debatelab.llm.base import Generation, GenerationRequest, SamplingParams
from debatelab.llm.chat import is_harmony, reply_text, split_harmony
from debatelab.llm.vllm_backend import VLLMBackend

ANALYSIS = "We need 2+2. A careless reader might write \\boxed{5}; check: 2+2 = 4."
FINAL = "2 + 2 = 4, so the answer is \\boxed{4}."
#: What gpt-oss generates after its generation prompt `<|start|>assistant`, special tokens kept
#: (vLLM with skip_special_tokens=False, transformers' decode(..., skip_special_tokens=False)).
RAW = f"<|channel|>analysis<|message|>{ANALYSIS}<|end|><|start|>assistant<|channel|>final<|message|>{FINAL}<|return|>"
#: The same reply cut off by max_tokens while still reasoning: no final channel.
TRUNCATED = f"<|channel|>analysis<|message|>{ANALYSIS} Let me double-check by"
HARMONY_SPECIAL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>"]


def test_split_harmony_keeps_the_final_channel_as_the_text():
    assert split_harmony(RAW) == (FINAL, ANALYSIS)
    assert split_harmony(RAW.removesuffix("<|return|>")) == (FINAL, ANALYSIS)  # stop token left out
    assert split_harmony(TRUNCATED) == ("", ANALYSIS + " Let me double-check by")
    # two analysis messages (the model may reason again after a commentary preamble)
    raw = (
        "<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>commentary<|message|>c<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>b<|end|><|start|>assistant<|channel|>final<|message|>f"
    )
    assert split_harmony(raw) == ("f", "a\n\nb")


@pytest.fixture(scope="module")
def harmony_tokenizer(tiny_model_dir):
    """SmolLM2's tokenizer with harmony's markers as special tokens (gpt-oss's are special too)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.add_special_tokens({"additional_special_tokens": HARMONY_SPECIAL})
    return tok


def _stub_vllm(tokenizer, raw: str, finish_reason: str = "stop") -> tuple[VLLMBackend, list[int]]:
    """A VLLMBackend around a stub engine that returns `raw`'s tokens as vLLM's LLM.generate does:
    `text` decoded with its default skip_special_tokens=True."""
    ids = tokenizer(raw, add_special_tokens=False)["input_ids"]
    completion = SimpleNamespace(
        index=0,
        token_ids=ids,
        text=tokenizer.decode(ids, skip_special_tokens=True),
        logprobs=None,
        finish_reason=finish_reason,
    )

    class Engine:
        def generate(self, prompts, params, use_tqdm=False, lora_request=None):
            return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[completion]) for p in prompts]

    backend = object.__new__(VLLMBackend)
    backend._llm, backend._vllm, backend.tokenizer = Engine(), SimpleNamespace(SamplingParams=dict), tokenizer
    backend.max_model_len, backend.budget_clips = 131072, 0  # gpt-oss's window: nothing here is clipped
    backend.model_id = "vllm::stub"
    return backend, ids


def test_vllm_returns_the_final_channel_as_text_and_the_analysis_as_reasoning(harmony_tokenizer):
    assert is_harmony(harmony_tokenizer)
    backend, ids = _stub_vllm(harmony_tokenizer, RAW)
    # what vLLM's text is by default: the channels run together, the analysis first
    assert backend._llm.generate([{"prompt_token_ids": []}], None)[0].outputs[0].text.startswith("analysisWe need")
    request = GenerationRequest([{"role": "user", "content": "What is 2+2?"}], SamplingParams(max_tokens=64))
    (g,) = backend.generate([request])[0]
    assert g.text == FINAL
    assert g.reasoning == ANALYSIS
    assert g.completion_tokens == len(ids)  # the reasoning tokens count
    assert g.token_ids == ids  # training updates on every generated token


def test_a_reply_cut_off_while_reasoning_has_no_answer(harmony_tokenizer):
    backend, _ = _stub_vllm(harmony_tokenizer, TRUNCATED, "length")
    request = GenerationRequest([{"role": "user", "content": "What is 2+2?"}], SamplingParams(max_tokens=16))
    (g,) = backend.generate([request])[0]
    assert g.text == "" and g.finish_reason == "length"
    assert g.reasoning.startswith(ANALYSIS)


def test_a_model_without_harmony_keeps_its_decoded_text(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert not is_harmony(tok)
    assert reply_text(tok, [1, 2, 3], "as decoded") == ("as decoded", None)


@pytest.mark.parametrize("template", ["du", "pairwise"])
def test_svr_mad_grades_and_forwards_the_final_channel_only(harmony_tokenizer, template):
    """The sender's pre-debate reply, as the backend returns it, becomes the turn a challenge shows
    the receiver: its answer is the final channel's (4, not the analysis' 5), and the receiver's
    prompt holds the final channel and none of the analysis."""
    backend, _ = _stub_vllm(harmony_tokenizer, RAW)
    row = {"id": "q", "question": "What is 2+2?", "choices": None, "answer": "4", "task_type": "math", "meta": "{}"}
    parts = [Participant(i, f"a{i}", "a", "m", None, SamplingParams()) for i in range(2)]
    q = QuestionState(row=row, thread=0, participants=parts, pre=[], seed=0)
    question = [{"role": "user", "content": "What is 2+2?"}]
    (g,) = backend.generate([GenerationRequest(question, SamplingParams())])[0]
    sender = to_turn(q, Ask(agent=0, round=0, messages=question), g)
    assert (sender.answer, sender.correct) == ("4", True)
    receiver = to_turn(q, Ask(agent=1, round=0, messages=question), Generation("I get \\boxed{5}.", 5, 10))
    messages, _ = prompts.debate_turn(
        template,
        row,
        None,
        own_conversation=receiver.conversation,
        own_response=receiver.response,
        own_index=1,
        peers=[prompts.PeerView(0, sender.response, sender.answer, True)],
    )
    shown = "\n".join(m["content"] for m in messages)
    assert FINAL in shown
    assert "careless" not in shown and "analysis" not in shown and "assistantfinal" not in shown
