"""Packed, padding-free update passes (`packed_updates`) and the π_old pass the update skips.

Packing concatenates a micro-batch's sequences into one row with position ids restarting at 0 for
each; transformers then masks attention to each sequence's own tokens. Every test compares it with
the padded layout on the same rollouts: per-token log-probabilities, loss and gradients within
float32 rounding (rtol 1e-5), and the weights after whole updates alike.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import adapter_keys, at_ratio_level, toy_settings
from test_training import _questions

from debatelab.llm.chat import chat_prompt_ids
from debatelab.training.core.loss import policy_loss
from debatelab.training.core.rollouts import Rollout
from debatelab.training.core.trainer import Trainer


def _rollouts(prompt_lengths, reply_lengths):
    """Prompts and replies of very different lengths (an empty reply among them)."""
    return [
        Rollout(
            question_id=f"q{k}",
            group=f"g{k // 2}",
            turn=1,
            sample=k,
            messages=({"role": "user", "content": "ab " * p},),
            text="",
            token_ids=[7 + (3 * k + t) % 20 for t in range(n)],
            finish_reason="stop",
            answer=None,
            correct=False,
            reward=0.0,
            advantage=(-1.0) ** k * (1 + k / 3),
        )
        for k, (p, n) in enumerate(zip(prompt_lengths, reply_lengths))
    ]


def _policy(model_dir, finetuning="lora", ratio_level="token", **overrides):
    from debatelab.training.core.policy import Policy

    torch.manual_seed(0)
    settings = toy_settings(
        **{
            "finetuning": finetuning,
            "learning_rate": 1e-2,
            "warmup_steps": 0,
            "show_progress": False,
            **adapter_keys(finetuning),
            **overrides,
        }
    )
    settings = at_ratio_level(settings, ratio_level)
    policy = Policy(model_dir, settings, device="cpu")
    with torch.no_grad():  # a nonzero adapter, so its gradient depends on the activations
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    return policy, Trainer(_questions(2), policy, settings, run="t")


def _grads(policy):
    return torch.cat([p.grad.flatten() for p in policy.model.parameters() if p.requires_grad])


@pytest.mark.parametrize("finetuning", ["lora", "full"])
def test_packed_and_padded_passes_give_the_same_logprobs_loss_and_gradients(char_model_dir, finetuning):
    """Prompts of 1 to 90 words and replies of 0 to 40 tokens in one pass: the packed row's per-token
    log-probabilities, entropy, clipped loss (with a KL term) and the trainable parameters' gradients
    equal the padded block's within float32 rounding."""
    rollouts = _rollouts([1, 90, 12, 40, 3], [40, 1, 0, 17, 5])
    policy, trainer = _policy(char_model_dir, finetuning)
    policy.model.train()
    results = {}
    for packed in (False, True):
        trainer.settings = dataclasses.replace(trainer.settings, packed_updates=packed)
        batch = trainer._batch(rollouts)
        assert (batch.packed is not None) == packed and (batch.padded is None) == packed
        if packed:  # the shorter sequences share rows no wider than the longest one
            longest = max(len(chat_prompt_ids(policy.tokenizer, r.messages)) + r.length for r in rollouts)
            assert batch.packed[0].shape[1] == longest and batch.packed[0].shape[0] < len(rollouts)
        logps, entropy = batch.logprobs(policy.model, with_entropy=True, temperature=0.8)
        parts = policy_loss(
            logps,
            logps.detach() - 0.3,  # ratios e^0.3 > 1.28: positive advantages clipped
            batch.advantages,
            batch.mask,
            ref_logprobs=logps.detach() + 0.05,
            kl_coef=0.3,
        )
        policy.model.zero_grad(set_to_none=True)
        parts.loss.backward()
        mask = batch.mask.bool()
        results[packed] = (logps.detach()[mask], entropy[mask], parts, _grads(policy), batch.mask)
    padded, packed = results[False], results[True]
    torch.testing.assert_close(packed[4], padded[4])
    assert int(packed[4].sum()) == 63  # every reply token is scored, the empty reply has none
    torch.testing.assert_close(packed[0], padded[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], rtol=1e-5, atol=1e-5)
    assert packed[2].loss.item() == pytest.approx(padded[2].loss.item(), rel=1e-5)
    assert packed[2].clip_fraction == padded[2].clip_fraction > 0
    assert packed[3].abs().sum() > 0
    torch.testing.assert_close(packed[3], padded[3], rtol=1e-5, atol=1e-6 * float(padded[3].abs().max()))


@pytest.mark.parametrize("finetuning", ["lora", "full"])
def test_a_prompt_shared_by_several_replies_is_packed_once_with_the_same_logprobs_loss_and_gradients(
    char_model_dir, finetuning
):
    """Three replies (one empty) to one prompt, two to another and one alone, in one pass: with
    `shared_prompts` each prompt sits in the row once and its replies see it through a tree-shaped
    mask; per-token log-probabilities, entropy, the clipped loss with a KL term and the gradients
    equal the padded block's within float32 rounding, over fewer positions than packing each
    sequence whole."""
    rollouts = _rollouts([30, 30, 5, 60, 30, 5], [12, 0, 7, 9, 25, 18])
    policy, trainer = _policy(char_model_dir, finetuning)
    policy.model.train()
    results, positions = {}, {}
    for mode in ("padded", "whole", "shared"):
        trainer.settings = dataclasses.replace(
            trainer.settings, packed_updates=mode != "padded", shared_prompts=mode != "whole"
        )
        batch = trainer._batch(rollouts)
        if mode != "padded":
            positions[mode] = batch.packed[0].numel()
            assert (batch.packed[6] is not None) == (mode == "shared")  # the tree mask only where prompts are shared
        logps, entropy = batch.logprobs(policy.model, with_entropy=True, temperature=0.8)
        parts = policy_loss(
            logps, logps.detach() - 0.3, batch.advantages, batch.mask, ref_logprobs=logps.detach() + 0.05, kl_coef=0.3
        )
        policy.model.zero_grad(set_to_none=True)
        parts.loss.backward()
        mask = batch.mask.bool()
        results[mode] = (logps.detach()[mask], entropy[mask], parts.loss.item(), _grads(policy), batch.mask)
    widths = trainer._widths(rollouts) or {
        id(r): (len(chat_prompt_ids(policy.tokenizer, r.messages)), r.length) for r in rollouts
    }
    prompt = {p: widths[id(r)][0] for p, r in zip([30, 30, 5, 60, 30, 5], rollouts)}
    once = sum(prompt.values()) + sum(r.length for r in rollouts)  # each prompt once, every reply
    assert positions["shared"] >= once and positions["shared"] < positions["whole"]
    padded = results["padded"]
    for mode in ("whole", "shared"):
        out = results[mode]
        torch.testing.assert_close(out[4], padded[4])
        torch.testing.assert_close(out[0], padded[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[1], padded[1], rtol=1e-5, atol=1e-5)
        assert out[2] == pytest.approx(padded[2], rel=1e-5)
        assert out[3].abs().sum() > 0
        torch.testing.assert_close(out[3], padded[3], rtol=1e-5, atol=1e-6 * float(padded[3].abs().max()))


def test_micro_batches_keep_a_prompts_sequences_together_and_count_the_prompt_once(char_model_dir):
    """With `shared_prompts`, a pass takes a prompt's sequences side by side (wherever the shuffle put
    them) and a token budget counts their prompt once: budget for one prompt and its four replies,
    the four share one pass; packing each sequence whole needs a pass per two."""
    rollouts = _rollouts([40, 3, 40, 3, 40, 3, 40, 3], [6, 5, 6, 5, 6, 5, 6, 5])
    _, trainer = _policy(char_model_dir, micro_batch_size=8)
    widths = {id(r): (len(chat_prompt_ids(trainer.policy.tokenizer, r.messages)), r.length) for r in rollouts}
    long_prompt = widths[id(rollouts[0])][0]
    budget = long_prompt + 4 * 6
    passes = {}
    for shared in (True, False):
        trainer.settings = dataclasses.replace(trainer.settings, micro_batch_tokens=budget, shared_prompts=shared)
        passes[shared] = trainer.micro_batches(rollouts)
        assert sorted(id(r) for m in passes[shared] for r in m) == sorted(id(r) for r in rollouts)
    assert sorted(len(m) for m in passes[True]) == [4, 4]
    assert all(len({r.messages[0]["content"] for r in m}) == 1 for m in passes[True])
    assert max(len(m) for m in passes[False] if m[0].messages == rollouts[0].messages) < 4


def test_flash_attention_packs_each_sequence_whole(char_model_dir):
    """Flash-attention reads sequence boundaries from the position ids and takes no mask: there a
    shared prompt is packed with each of its replies."""
    policy, trainer = _policy(char_model_dir)
    assert trainer._shares_prompts()
    policy.model.config._attn_implementation_internal = "flash_attention_2"
    assert not trainer._shares_prompts()
    assert trainer._batch(_rollouts([30, 30], [4, 5])).packed[6] is None


def test_a_packed_row_without_reply_tokens_still_backpropagates(char_model_dir):
    policy, trainer = _policy(char_model_dir, packed_updates=True)
    batch = trainer._batch(_rollouts([5, 8], [0, 0]))
    logps, _ = batch.logprobs(policy.model)
    assert logps.shape == (2, 1) and not logps.detach().any()
    (logps * batch.mask).sum().backward()  # a zero loss, but a graph (DDP needs every backward)
    assert all(p.grad is not None for p in policy.model.parameters() if p.requires_grad)


@pytest.mark.parametrize(
    ("ratio_level", "prompt_lengths"),
    [
        ("token", [1, 90, 12, 40, 3, 25, 7, 60]),
        ("trajectory", [1, 90, 12, 40, 3, 25, 7, 60]),
        ("token", [1, 90, 90, 40, 40, 40, 90, 60]),  # shared prompts: one pass packs each once
    ],
)
def test_packed_and_padded_updates_leave_the_same_weights(char_model_dir, ratio_level, prompt_lengths):
    """Whole `update_policy` calls (2 epochs of mini-batches of 4, passes of 2, a KL to the reference,
    two steps so the reference differs from the policy): the adapter and the statistics of packed
    passes equal the padded ones'."""
    rollouts = _rollouts(prompt_lengths, [40, 1, 0, 17, 5, 30, 2, 9])
    adapters, metrics = [], []
    for packed in (False, True):
        policy, trainer = _policy(
            char_model_dir,
            packed_updates=packed,
            mini_batch_size=4,
            micro_batch_size=2,
            epochs=2,
            kl_coef=0.5,
            ratio_level=ratio_level,
        )
        policy.model.train()
        for step in range(2):
            out = trainer.update_policy(rollouts, step=step)
        metrics.append(out)
        adapters.append(torch.cat([p.detach().flatten() for p in policy.model.parameters() if p.requires_grad]))
    assert metrics[1]["updates"] == 4 and metrics[1]["kl"] > 0
    for key in ("loss", "kl", "entropy", "clip_fraction"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-7), key
    torch.testing.assert_close(adapters[1], adapters[0], rtol=1e-5, atol=1e-6)


def test_a_packed_token_budget_counts_real_tokens(char_model_dir):
    """With `micro_batch_tokens`, a packed pass holds at most that many prompt + reply tokens (a longer
    sequence alone), where the padded block would count every row at the longest prompt and reply."""
    rollouts = _rollouts([1, 90, 12, 40, 3, 25, 7, 60], [40, 1, 0, 17, 5, 30, 2, 9])
    counts = {}
    for packed in (False, True):
        _, trainer = _policy(char_model_dir, packed_updates=packed, micro_batch_size=8, micro_batch_tokens=400)
        widths = trainer._widths(rollouts)
        passes = trainer.micro_batches(rollouts)
        assert sorted(id(r) for m in passes for r in m) == sorted(id(r) for r in rollouts)
        for m in passes:
            real = sum(sum(widths[id(r)]) for r in m)
            padded = len(m) * (max(widths[id(r)][0] for r in m) + max(widths[id(r)][1] for r in m))
            assert (real if packed else padded) <= 400 or len(m) == 1
        counts[packed] = len(passes)
    assert counts[True] < counts[False]  # real tokens fill a pass further


def test_the_first_mini_batch_is_its_own_pi_old(char_model_dir):
    """Several mini-batches: the π_old (and reference) pass skips the first mini-batch, whose own
    forward runs before any optimizer step; the weights are those of the full pass."""
    rollouts = _rollouts([1, 90, 12, 40, 3, 25, 7, 60], [40, 1, 3, 17, 5, 30, 2, 9])
    adapters, metrics, forwards = [], [], []
    for reuse in (False, True):
        policy, trainer = _policy(char_model_dir, mini_batch_size=4, micro_batch_size=2, epochs=2, kl_coef=0.5)
        trainer.reuse_policy_logprobs = reuse
        policy.model.train()
        calls = []
        hook = policy.model.base_model.model.register_forward_hook(lambda *a: calls.append(1))
        for step in range(2):
            out = trainer.update_policy(rollouts, step=step)
        hook.remove()
        forwards.append(len(calls))
        metrics.append(out)
        adapters.append(torch.cat([p.detach().flatten() for p in policy.model.parameters() if p.requires_grad]))
    first = len(trainer._plan(rollouts, 0, 0, policy)[0])  # passes of the first mini-batch
    assert first == 2 and forwards[0] - forwards[1] == 2 * first  # two steps (the reference runs either way)
    for key in ("loss", "kl", "entropy", "clip_fraction"):
        assert metrics[1][key] == pytest.approx(metrics[0][key], rel=1e-4, abs=1e-7), key
    torch.testing.assert_close(adapters[1], adapters[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("packed", [False, True])
def test_bf16_autocast_stays_within_its_stated_tolerance(char_model_dir, packed):
    """`autocast` (opt-in) changes results: it is active (the log-probabilities differ from float32's)
    and within the tolerance docs/training.md states: mean |Δ log p| ≤ 0.05 nats, gradient cosine ≥ 0.99;
    an update under it sees ratio 1 in its first mini-batch (π_old taken in the same precision)."""
    rollouts = _rollouts([1, 90, 12, 40, 3], [40, 1, 0, 17, 5])
    policy, trainer = _policy(char_model_dir, packed_updates=packed)
    policy.model.train()
    results = {}
    for autocast in (False, True):
        trainer.settings = dataclasses.replace(trainer.settings, autocast=autocast)
        batch = trainer._batch(rollouts)
        with trainer._precision(policy):
            logps, _ = batch.logprobs(policy.model)
        policy.model.zero_grad(set_to_none=True)
        policy_loss(logps, logps.detach(), batch.advantages, batch.mask).loss.backward()
        results[autocast] = (logps.detach()[batch.mask.bool()], _grads(policy))
    diff = (results[True][0] - results[False][0]).abs()
    assert 0 < diff.mean() <= 0.05
    assert torch.nn.functional.cosine_similarity(results[True][1], results[False][1], dim=0) >= 0.99
    out = trainer.update_policy(rollouts, step=0)  # one mini-batch: its own forward is π_old
    assert out["updates"] == 1 and out["clip_fraction"] == 0.0


def test_bf16_autocast_rollouts_stay_within_the_same_tolerance(char_model_dir):
    """With `autocast`, the policy's rollouts run under bf16 autocast too: active (the log-probabilities
    of the same greedy tokens differ from float32's) and within the update's stated tolerance (mean
    |Δ log p| ≤ 0.05 nats over the tokens both runs chose alike)."""
    from debatelab.llm.base import GenerationRequest, SamplingParams

    requests = [
        GenerationRequest(
            messages=({"role": "user", "content": text},),
            sampling=SamplingParams(temperature=0.0, max_tokens=12, logprobs=True),
        )
        for text in ("abc", "hello there", "what is 3 + 4?")
    ]
    seen = {}
    for autocast in (False, True):
        policy, _ = _policy(char_model_dir, autocast=autocast)
        policy.model.eval()
        backend = policy.backend("t")
        assert backend.autocast is autocast
        seen[autocast] = [g[0] for g in backend.generate(requests)]
    diffs = []
    for plain, mixed in zip(seen[False], seen[True]):
        same = 0
        while same < min(len(plain.token_ids), len(mixed.token_ids)) and plain.token_ids[same] == mixed.token_ids[same]:
            same += 1
        diffs += [abs(a - b) for a, b in zip(plain.token_logprobs[:same], mixed.token_logprobs[:same])]
    assert diffs and 0 < sum(diffs) / len(diffs) <= 0.05


def test_frozen_bf16_weights_give_autocasts_results_bit_for_bit(char_model_dir):
    """With `autocast`, the frozen LoRA base keeps a bf16 copy of its linear weights between forwards
    (autocast otherwise casts them again at every call): the log-probabilities and the adapter's
    gradients equal plain autocast's exactly (copies made in a rollout's inference mode serve the
    update's autograd), the copy is made once and again when a weight changes
    in place, a deep copy of the model multiplies by its own weights, and outside autocast the
    layers are float32's."""
    import copy

    from debatelab.llm.transformers_backend import cache_frozen_bf16_weights

    rollouts = _rollouts([1, 90, 12, 40, 3], [40, 1, 0, 17, 5])
    cached, trainer = _policy(char_model_dir, autocast=True)
    plain, _ = _policy(char_model_dir)
    layers = [m for m in cached.model.modules() if "_bf16_weight" in vars(m)]
    assert layers and not any("_bf16_weight" in vars(m) for m in plain.model.modules())
    assert cache_frozen_bf16_weights(cached.model) == 0  # installed once
    cached.model.train(), plain.model.train()
    batch = trainer._batch(rollouts, cached)

    def pass_of(policy, autocast=True):
        policy.model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logps, _ = batch.logprobs(policy.model)
        policy_loss(logps, logps.detach(), batch.advantages, batch.mask).loss.backward()
        return logps.detach(), _grads(policy)

    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):  # as a rollout makes the copies
        batch.logprobs(cached.model)
    for a, b in zip(pass_of(cached), pass_of(plain)):
        assert torch.equal(a, b)
    copies = [m._bf16_weight for m in layers]
    pass_of(cached)
    assert all(m._bf16_weight is c for m, c in zip(layers, copies))  # made once
    with torch.no_grad():  # the same in-place change of both bases: the copy follows it
        for policy in (cached, plain):
            for m in [
                m for m in policy.model.modules() if isinstance(m, torch.nn.Linear) and not m.weight.requires_grad
            ]:
                m.weight.mul_(1.5)
    for a, b in zip(pass_of(cached), pass_of(plain)):
        assert torch.equal(a, b)
    twin = copy.deepcopy(cached.model)
    with torch.no_grad():
        for m in twin.modules():
            if "_bf16_weight" in vars(m):
                m.weight.mul_(-1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not torch.equal(batch.logprobs(twin)[0], batch.logprobs(cached.model)[0])
    for a, b in zip(pass_of(cached, autocast=False), pass_of(plain, autocast=False)):
        assert torch.equal(a, b)
