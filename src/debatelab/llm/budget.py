"""A reply budget against the model's context window: what our local backends do when a prompt plus
its `max_tokens` does not fit.

What vLLM (0.32) does on its own, offline (`LLM.generate`):

* a prompt longer than `max_model_len` is refused, and the whole `generate` call with it:
  `VLLMValidationError` ("This model's maximum context length is M tokens. However, your prompt
  contains P input tokens, which exceeds this limit even without any output tokens", from the
  renderer's `_token_len_check`, `vllm/renderers/params.py`); the engine's
  `InputProcessor._validate_prompt_len` (`vllm/v1/engine/input_processor.py`) also refuses a prompt
  of exactly `max_model_len` ("... plus the number of requested output tokens (at least 1) is longer
  than the maximum model length");
* a prompt that fits, with prompt + `max_tokens` > `max_model_len`, is accepted as it is: the
  scheduler's `check_stop` (`vllm/v1/core/sched/utils.py`) ends the request when
  `num_tokens >= max_model_len` (`FINISHED_LENGTH_CAPPED`), so the reply is cut at the window with finish reason "length",
  the same as a reply that used its whole `max_tokens`: nothing says the budget was not the one
  asked for. (Its OpenAI server instead clips `max_tokens` to `max_model_len` − prompt up front,
  `vllm/entrypoints/serve/utils/api_utils.py`, `get_max_tokens`, and refuses a prompt longer than the window.)

transformers' `generate` knows no window: it runs past the model's positions.

Ours, the same in the transformers and the vLLM backends (`fit_max_tokens`): a request's budget is
min(`max_tokens`, window − prompt tokens), and every clipped request is counted (the backend's
`budget_clips`) and logged as a warning; a prompt that leaves no room for one token is refused with
`PromptTooLong`, which names the request, before anything is generated. A config that wants no
clipping sizes its budgets so that the longest prompt plus the reply fits (SDRL's debates:
`config/experiments/sdrl.yaml`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

log = logging.getLogger(__name__)


class PromptTooLong(ValueError):
    """A prompt that leaves no room in the context window for one reply token."""


def fit_max_tokens(
    prompt_lengths: Sequence[int], max_tokens: Sequence[int], window: int | None, *, model: str = "model"
) -> tuple[list[int], int]:
    """(each request's budget clipped to `window` − its prompt, how many were clipped). `window`
    None: no window known, budgets as asked. Raises `PromptTooLong` on a prompt of `window` tokens
    or more (vLLM's own rule)."""
    if window is None:
        return list(max_tokens), 0
    budgets, clipped = [], 0
    for i, (prompt, asked) in enumerate(zip(prompt_lengths, max_tokens)):
        room = window - prompt
        if room < 1:
            raise PromptTooLong(
                f"{model}: request {i}'s prompt is {prompt} tokens, the context window {window}: no room for a "
                f"reply (max_tokens {asked}). Shorten the prompt or raise max_model_len."
            )
        if asked > room:
            clipped += 1
        budgets.append(min(asked, room))
    if clipped:
        log.warning(
            "%s: %d of %d requests' max_tokens clipped to the context window (%d tokens - prompt)",
            model,
            clipped,
            len(budgets),
            window,
        )
    return budgets, clipped
