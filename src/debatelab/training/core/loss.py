"""The clipped policy-gradient loss on completion tokens (DAPO Eq. 7 / GRPO), with token masks.

For a batch of sequences with per-token log-probabilities ℓ under the current policy, ℓ_old under
the rollout policy (π_old) and advantages A (one per sequence, or one per token):

    ratio_t  = exp(ℓ_t − ℓ_old,t)
    loss_t   = −min(ratio_t·A_t, clip(ratio_t, 1 − ε_low, 1 + ε_high)·A_t)  [+ β·KL_t]
    KL_t     = ℓ_t − ℓ_ref,t                                  (k1)
             = exp(ℓ_ref,t − ℓ_t) − (ℓ_ref,t − ℓ_t) − 1       (k3, Schulman's estimator)

and, with per-sequence weights w (`weights`), each sequence's loss_t times its w: UDPO's replay
importance weight on the whole objective, w·(ℓ_clip − η·KL) (Tang et al., arXiv:2602.07186 App. A.3; App. A.4, Algorithm 1).

Only tokens with mask 1 count (completion tokens; a debate prompt's candidate solutions are
context and never in the mask). Aggregation:

* ``token_mean`` (DAPO): Σ_t mask·loss_t / `normaliser`, where the normaliser is the number of
  masked tokens of the whole mini-batch (pass it when a mini-batch is split into micro-batches or
  across processes, so that the gradient equals the full mini-batch's);
* ``sequence_mean`` (GRPO): each sequence's masked mean, summed and divided by `normaliser`
  (the mini-batch's number of sequences).

Ratio level (UDPO, Tang et al., arXiv:2602.07186 §4.3): ``token`` (above); ``sequence`` (GSPO-style): one ratio per
sequence, exp of the mean over its masked tokens of ℓ − ℓ_old; ``trajectory`` (the paper's): one
ratio per group of sequences (`groups`, e.g. an agent's turns of one debate), exp of the *sum* over
all their masked tokens. The log-ratio of the last two is clamped to ±20 (a literal trajectory
ratio overflows float32 within a few hundred tokens).

This is the loss TRL's GRPOTrainer computes (`_compute_loss`, loss types "dapo" and "grpo"), written
as a function so that our own loop can feed it per-agent batches, variable group sizes and
trajectory-level advantages; the log-probabilities come from TRL's `selective_log_softmax`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossParts:
    loss: torch.Tensor  # what to backpropagate (already divided by the normaliser)
    clip_fraction: float  # share of masked tokens whose ratio was clipped in the objective's min
    kl: float  # mean KL to the reference over masked tokens (0 without one)
    ratio_mean: float
    tokens: int


def kl_per_token(logprobs, ref_logprobs, estimator: str = "k3"):
    """Each token's estimate of KL(π ‖ π_ref) from the sampled tokens' log-probabilities: k1 =
    log π − log π_ref (unbiased, can be negative) or k3 = r − log r − 1 with r = π_ref / π (unbiased,
    never negative, lower variance): Schulman's estimators, verl's "kl" and "low_var_kl"."""
    delta = ref_logprobs - logprobs
    if estimator == "k1":
        return -delta
    return torch.exp(delta) - delta - 1


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    aggregation: str = "token_mean",
    normaliser: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    ratio_level: str = "token",
    groups: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
) -> LossParts:
    """The loss of the module docstring for (B, T) log-probabilities; `advantages` is (B,) or (B, T);
    `groups` (B,) integer ids of the trajectory each sequence belongs to (``ratio_level="trajectory"``);
    `weights` (B,) multiplies each sequence's per-token loss, clip and KL terms both (the normaliser
    stays the token or sequence count; the reported KL stays unweighted)."""
    mask = mask.to(logprobs.dtype)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    ratio = _ratio(logprobs - old_logprobs, mask, ratio_level, groups)
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    kl = torch.zeros_like(per_token)
    if ref_logprobs is not None and kl_coef:
        kl = kl_per_token(logprobs, ref_logprobs, kl_estimator)
        per_token = per_token + kl_coef * kl
    elif kl_coef:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    if weights is not None:
        per_token = per_token * weights.to(per_token.dtype).unsqueeze(1)
    tokens = mask.sum()
    if aggregation == "token_mean":
        loss = (per_token * mask).sum() / (normaliser if normaliser is not None else tokens.clamp(min=1.0))
    elif aggregation == "sequence_mean":
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        loss = per_sequence.sum() / (normaliser if normaliser is not None else max(len(per_sequence), 1))
    else:
        raise ValueError(f"unknown loss aggregation {aggregation!r}; expected token_mean or sequence_mean")
    with torch.no_grad():
        # a token is clipped when the clipped term is the one the min picked and it differs
        was_clipped = ((clipped * advantages < ratio * advantages) & (clipped != ratio)).to(mask.dtype)
        n = float(tokens.clamp(min=1.0))
        return LossParts(
            loss=loss,
            clip_fraction=float((was_clipped * mask).sum()) / n,
            kl=float((kl * mask).sum()) / n,
            ratio_mean=float((ratio * mask).sum()) / n,
            tokens=int(tokens),
        )


RATIO_LEVELS = ("token", "sequence", "trajectory")


def _ratio(log_ratio: torch.Tensor, mask: torch.Tensor, level: str, groups: torch.Tensor | None) -> torch.Tensor:
    if level == "token":
        return torch.exp(log_ratio)
    per_sequence = (log_ratio * mask).sum(-1)
    if level == "sequence":
        per_sequence = per_sequence / mask.sum(-1).clamp(min=1.0)
    elif level == "trajectory":
        if groups is None:
            raise ValueError("ratio_level 'trajectory' needs the sequences' groups")
        totals = torch.zeros(int(groups.max()) + 1, dtype=per_sequence.dtype, device=per_sequence.device)
        per_sequence = totals.index_add(0, groups, per_sequence)[groups]
    else:
        raise ValueError(f"unknown ratio level {level!r}; expected one of {RATIO_LEVELS}")
    return torch.exp(per_sequence.clamp(-20.0, 20.0)).unsqueeze(1).expand_as(log_ratio)


def token_logprobs(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_start: int,
    *,
    with_entropy: bool = False,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π_T(token_t | tokens_<t) of every position from `completion_start` on, (B, T − start), and
    optionally the entropy of the next-token distribution there, for the policy the rollouts were
    sampled from: logits divided by the sampling `temperature` before the log-softmax, as TRL's
    GRPOTrainer and verl do (at T = 0.8 the ratio, the KL, UMAD's Û and the entropy are otherwise
    those of another policy). Left padding is handled by the position ids; TRL's
    `selective_log_softmax` avoids materialising the full log-softmax, and `logits_to_keep` (as TRL
    passes it) the prompt's logits: a long prompt's (B, L, vocab) logits were most of a training
    step's memory."""
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    keep = input_ids.shape[1] - completion_start + 1  # the positions that predict the completion, and the last
    logits = model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, logits_to_keep=keep
    ).logits
    logits = logits[:, -keep:-1].float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, completion_start:].to(logits.device)  # a model over several GPUs ends on its last
    logps = selective_log_softmax(logits, targets)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = entropy_from_logits(logits).to(input_ids.device)
    return logps.to(input_ids.device), entropy


def packed_token_logprobs(
    model,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    keep: torch.Tensor,
    rows: torch.Tensor,
    cols: torch.Tensor,
    shape: tuple[int, int],
    targets: torch.Tensor,
    attention: torch.Tensor | None = None,
    *,
    with_entropy: bool = False,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` of sequences packed into rows without padding: `input_ids` and `position_ids`
    (R, W), the positions restarting at 0 for every sequence (transformers then masks attention to
    each sequence's own tokens: `masking_utils.find_packed_sequence_indices`, which needs
    `attention_mask=None` and no cache; flash-attention reads the same position ids as varlen
    boundaries); `keep` (N,) the flat (R·W) indices of the positions that predict the completion
    tokens: the lm_head runs on those hidden states only; `rows`, `cols` (N,) where each of those
    tokens goes in the (B, T) = `shape` result, zero elsewhere, so `policy_loss` takes it as it takes
    the padded layout. With no completion token at all, `keep` is one index whose value is dropped.

    A prompt shared by several sequences may sit in a row once (`BaseTrainer._packed_tensors`):
    `attention` (R, 1, W, W), True where a position may attend (each reply to its prompt and its own
    earlier tokens), replies' positions continuing from their prompt's; `keep` then names the
    prompt's last position once per reply. `targets` (N,): the token each kept position predicts."""
    from trl.trainer.utils import entropy_from_logits, selective_log_softmax

    head = getattr(model, "module", model).get_output_embeddings()  # DDP and DeepSpeed wrap the model
    gather = head.register_forward_pre_hook(lambda _, args: (args[0].flatten(0, 1)[keep],) + tuple(args[1:]))
    try:
        logits = model(
            input_ids=input_ids,
            position_ids=position_ids,
            attention_mask=attention,  # None: packed sequences found from the position ids
            logits_to_keep=0,
            use_cache=False,
        ).logits
    finally:
        gather.remove()
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    values = selective_log_softmax(logits, targets.to(logits.device)).to(input_ids.device)
    if not len(rows):  # no completion token (`keep` holds one index then): a zero that keeps the graph
        return values.new_zeros(shape) + 0.0 * values.sum(), values.new_zeros(shape) if with_entropy else None
    logps = values.new_zeros(shape).index_put((rows, cols), values)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = values.new_zeros(shape).index_put((rows, cols), entropy_from_logits(logits).to(values.device))
    return logps, entropy
