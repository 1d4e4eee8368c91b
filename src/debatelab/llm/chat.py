"""Chat-template helpers shared by every backend (any Hugging Face tokenizer with a chat template).

One definition of "the prompt's tokens" and "the reply's tokens" for all backends, so token
counts and teacher-forced scores agree whichever engine produced them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .base import Message

log = logging.getLogger(__name__)


def render_chat(tokenizer, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    """The chat as text, rendered by the tokenizer's chat template."""
    return tokenizer.apply_chat_template(
        [dict(m) for m in messages], tokenize=False, add_generation_prompt=add_generation_prompt
    )


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of already-templated text: the template supplies every special token."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def chat_prompt_ids(tokenizer, messages: Sequence[Message]) -> list[int]:
    """Token ids of a chat prompt ending with the assistant's generation prompt."""
    return encode_text(tokenizer, render_chat(tokenizer, messages, add_generation_prompt=True))


def reply_token_ids(tokenizer, prompt: Sequence[Message], reply: str) -> tuple[list[int], int]:
    """Token ids of `prompt` + `reply` (as the assistant turn) and the index where the reply starts.

    The reply's tokens are everything the template renders after the generation prompt: the
    reply text *and* the template's end-of-turn tokens (for SmolLM2 `<|im_end|>` and a newline),
    i.e. what the model would have to emit to produce this reply and end its turn.

    The rendered prompt (with the generation prompt) must be a text prefix of the rendered full
    chat, otherwise a ValueError is raised. Normally the full chat's tokens start with the
    prompt's tokens; if tokenisation merges across the boundary, the prompt is kept as it is
    tokenised for generation and the rest is tokenised on its own.
    """
    messages = [dict(m) for m in prompt]
    if messages and messages[-1].get("role") == "assistant":
        raise ValueError("score: the prompt must not end with an assistant turn; the reply is that turn")
    prefix_text = render_chat(tokenizer, messages, add_generation_prompt=True)
    full_text = render_chat(
        tokenizer, messages + [{"role": "assistant", "content": reply}], add_generation_prompt=False
    )
    if not full_text.startswith(prefix_text):
        raise ValueError(
            "score: the chat template's rendering of the prompt with add_generation_prompt=True is "
            "not a prefix of its rendering of prompt + assistant reply; cannot locate the reply's tokens.\n"
            f"prompt rendering ends with: {prefix_text[-200:]!r}\nfull rendering: {full_text[-400:]!r}"
        )
    prefix_ids = encode_text(tokenizer, prefix_text)
    full_ids = encode_text(tokenizer, full_text)
    if full_ids[: len(prefix_ids)] == prefix_ids:
        return full_ids, len(prefix_ids)
    log.debug("score: tokens merge across the prompt/reply boundary; tokenising the reply on its own")
    return prefix_ids + encode_text(tokenizer, full_text[len(prefix_text) :]), len(prefix_ids)


def normalise_finish_reason(reason: str | None) -> str:
    """Map an engine's finish reason onto Generation's "stop" / "length"."""
    if reason == "length":
        return "length"
    if reason in ("abort", "error"):
        raise RuntimeError(f"generation finished with reason {reason!r}")
    return "stop"  # "stop" (EOS or stop string), None, or an API-specific reason such as "tool_calls"


def paired_score_inputs(prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> tuple[list, list[str]]:
    """`score`'s arguments as lists, checked to pair up one prompt per reply."""
    prompts, replies = list(prompts), list(replies)
    if len(prompts) != len(replies):
        raise ValueError(f"score: {len(prompts)} prompts but {len(replies)} replies")
    return prompts, replies


#: gpt-oss's harmony format (github.com/openai/harmony): a reply is a sequence of assistant messages
#: `<|start|>assistant<|channel|>{analysis|commentary|final}<|message|>...<|end|>`, the first one
#: without its `<|start|>assistant` (the generation prompt supplies it), the last ended by
#: `<|return|>` (end of turn) or `<|call|>`. The tokens are special, so a decode that skips special
#: tokens (vLLM's and transformers' default) runs them together ("analysis...assistantfinal...").
HARMONY_MARKERS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>")
_HARMONY_ENDS = ("<|end|>", "<|return|>", "<|call|>")


def is_harmony(tokenizer) -> bool:
    """Whether the tokenizer speaks harmony (gpt-oss): its markers are added special tokens."""
    added = getattr(tokenizer, "added_tokens_encoder", None) or {}
    return all(marker in added for marker in HARMONY_MARKERS)


def split_harmony(raw: str) -> tuple[str, str]:
    """(final, analysis) of a harmony-format reply decoded with its special tokens.

    `final` is the text of the final-channel message(s), what a reader (and a peer) is shown: vLLM's
    OpenAI server returns it as `content`, the analysis as `reasoning_content`. `analysis` joins the
    analysis-channel messages (the chain of thought) with blank lines. A reply cut off before its
    final channel (max_tokens spent reasoning) has final "": no answer, as the SVR-MAD paper
    (arXiv:2605.23099, App. A) says of replies that "exhaust the maximum token cap before outputting
    a valid answer"."""
    final, analysis = [], []
    for message in raw.split("<|start|>"):
        header, sep, body = message.partition("<|message|>")
        if not sep:
            continue
        for end in _HARMONY_ENDS:
            body = body.split(end, 1)[0]
        channel = header.partition("<|channel|>")[2].split("<|", 1)[0].split()
        channel = channel[0] if channel else ""
        recipient = " to=" in header or header.strip().startswith("assistant to=")
        if channel == "final":
            final.append(body)
        elif channel == "analysis" and not recipient:
            analysis.append(body)
    return "".join(final), "\n\n".join(analysis)


def reply_text(tokenizer, token_ids: Sequence[int] | None, text: str) -> tuple[str, str | None]:
    """(text, reasoning) of a generated reply: for a harmony tokenizer (gpt-oss) the final channel
    and the analysis channel of its tokens (`split_harmony`); otherwise `text` as decoded, no reasoning."""
    if token_ids is None or tokenizer is None or not is_harmony(tokenizer):
        return text, None
    return split_harmony(tokenizer.decode(list(token_ids), skip_special_tokens=False))
