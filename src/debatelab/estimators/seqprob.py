"""Bias-corrected sequence probability (Elahi & Di Eugenio, arXiv:2606.13591 §3.2, Zhao et al. 2021): C = log P(ŷ|x) − log P(ŷ|x_null),
each log-probability length-normalised (mean per token), x_null the content-free twin of the prompt;
conf_seqprob = σ(C). ŷ is the rendered final answer ("The answer is (B).", `seqprob_target: answer`)
or the whole reply (`seqprob_target: response`)."""

from __future__ import annotations

import math

from .. import prompts
from ..llm import score_cached
from ..probability import sigmoid

SEQPROB_TARGETS = ("answer", "response")


def bias_corrected_confidence(logp_content: float, logp_null: float) -> tuple[float, float]:
    """C = log P(ŷ|x) − log P(ŷ|x_null) (length-normalised), mapped to [0, 1] by σ(C).

    Returns (C, σ(C)); σ is monotone, so rankings by C and by confidence agree.
    """
    if math.isnan(logp_content) or math.isnan(logp_null):
        return float("nan"), float("nan")
    c = logp_content - logp_null
    return c, sigmoid(c)


def sequence_probability(items, out, backend, cache, settings, *, seed, batch_size, tag, show_progress) -> None:
    """Fill the `seqprob_*` fields, `conf_seqprob` and `extra_tokens` of each `out[i]` for `items[i]`
    (scoring is deterministic: `seed` is unused)."""
    targets = []
    for item in items:
        if settings.seqprob_target == "response":
            targets.append(item.response)
        elif item.answer is not None:
            targets.append(prompts.final_answer_text(item.task_type, item.answer))
        else:
            targets.append(None)  # nothing parsed: no answer to score
    todo = [i for i, t in enumerate(targets) if t]
    content = [items[i].chat for i in todo]
    null = [items[i].null_chat for i in todo]
    replies = [targets[i] for i in todo]
    scored = score_cached(
        backend,
        content + null,
        replies + replies,
        cache,
        batch_size=batch_size,
        desc=f"seq-prob {tag}",
        show_progress=show_progress,
    )
    n = len(todo)
    for k, i in enumerate(todo):
        with_x, without_x = scored[k], scored[n + k]
        confidence = out[i]
        confidence.seqprob_logp, confidence.seqprob_logp_null = with_x.mean_logprob, without_x.mean_logprob
        confidence.seqprob_c, confidence.conf_seqprob = bias_corrected_confidence(
            with_x.mean_logprob, without_x.mean_logprob
        )
        confidence.extra_tokens += with_x.prompt_tokens + without_x.prompt_tokens + 2 * len(with_x.token_logprobs)
