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
