"""Hugging Face transformers backend: batched generation with left padding, CPU or GPU.

Sampling draws every sequence's tokens from its own random stream, seeded by its request's seed
(`SeededSampler`), so a sample does not depend on which other requests share its batch (up to
floating-point differences in the logits that another batch shape can cause). Tokens come from our
own decode loop over the model's forward and KV cache (`_decode`), not `model.generate`: the
model's `generation_config.json` adds no logits processors (a repetition penalty, say), as vLLM
runs with `--generation-config vllm`, and the log-probs are the raw model's.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections import defaultdict
from collections.abc import Sequence

from ..probability import topk_entropy
from .base import (
    Backend,
    Generation,
    GenerationRequest,
    Message,
    ProgressCallback,
    ScoredText,
    model_fingerprint,
    stable_hash,
)
from .chat import chat_prompt_ids, paired_score_inputs, reply_text, reply_token_ids

log = logging.getLogger(__name__)


def bf16_autocast(device, enabled: bool):
    """`torch.autocast` to bfloat16 on `device`'s type when `enabled`, else a context that does nothing
    (training's `autocast` setting: its rollouts here, its update's forwards in `core.trainer`)."""
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if enabled else contextlib.nullcontext()


def cache_frozen_bf16_weights(model) -> int:
    """Under bf16 autocast, every frozen `nn.Linear` of `model` multiplies by a bf16 copy of its weight
    made once, instead of the copy autocast makes at every call: autocast caches the casts of
    trainable leaf weights only, so a frozen LoRA base was cast again at every decode step and
    every forward of the update. The product is bit for bit autocast's own (the same cast, the same
    kernel); outside bf16 autocast the layer runs as before. The copy is made again when the weight
    changes (merged, loaded, moved: its version, storage or device). Returns the layers cached.
    Not for weights sharded under ZeRO-3 or FSDP (their storage is gathered per call)."""
    import types

    import torch

    count = 0
    for module in model.modules():
        if (
            isinstance(module, torch.nn.Linear)
            and not module.weight.requires_grad
            and "_bf16_weight" not in vars(module)
        ):
            module._bf16_weight, module._bf16_weight_key = None, None
            module.forward = types.MethodType(_linear_with_cached_bf16_weight, module)  # deepcopy rebinds it
            count += 1
    return count


def _linear_with_cached_bf16_weight(module, x):
    """`nn.Linear.forward` with a frozen weight's bf16 copy kept between calls (`cache_frozen_bf16_weights`)."""
    import torch
    import torch.nn.functional as F

    weight, kind = module.weight, x.device.type
    if weight.requires_grad or not torch.is_autocast_enabled(kind) or torch.get_autocast_dtype(kind) != torch.bfloat16:
        return F.linear(x, weight, module.bias)
    key = (weight.data_ptr(), weight._version, weight.device, weight.shape)
    if module._bf16_weight_key != key:
        with torch.inference_mode(False):  # made during a rollout, used by the update's autograd too
            module._bf16_weight, module._bf16_weight_key = weight.detach().to(torch.bfloat16), key
    return F.linear(x, module._bf16_weight, module.bias)  # autocast casts x and the bias as it did


#: transformers' SDPA attention, except a decode step on CPU (`cpu_decode_attention`).
CPU_DECODE_SDPA = "sdpa_cpu_decode"


def cpu_decode_attention(model) -> bool:
    """Run `model`'s decode steps on CPU (one query token against the KV cache) in float32, the key and
    value heads shared in the kernel (SDPA's `enable_gqa`), instead of transformers' SDPA path,
    which copies every layer's whole cache to repeat the heads (`repeat_kv`) whenever there is a
    mask (left padding), and whose CPU kernel is slower in bf16 (under autocast) than in float32:
    at SmolLM2-135M's shape (9 heads, 3 key-value heads), batch 64 and a 350-token cache, 1.9 ms a
    layer against 12.4 ms (heads repeated, bf16) and 34.8 ms (heads repeated, float32). Every other call (prefill, the update's passes, a GPU) is
    transformers' SDPA unchanged. Applies to a model on SDPA; returns whether it did."""
    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    _register_cpu_decode_attention()
    model.set_attn_implementation(CPU_DECODE_SDPA)
    return True


def _register_cpu_decode_attention() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(CPU_DECODE_SDPA, _cpu_decode_sdpa)
    AttentionMaskInterface.register(CPU_DECODE_SDPA, sdpa_mask)  # the masks SDPA gets


def _cpu_decode_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    import torch
    import torch.nn.functional as F
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if (
        query.device.type != "cpu"
        or query.shape[2] != 1
        or dropout
        or kwargs.get("position_bias") is not None
        or kwargs.get("cache") is not None
        or kwargs.get("output_attentions")
    ):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        attention_mask = attention_mask.float()  # an additive mask in the kernel's dtype
    with torch.autocast("cpu", enabled=False):
        out = F.scaled_dot_product_attention(
            query.float(),
            key.float(),
            value.float(),
            attn_mask=attention_mask,
            scale=scaling,
            enable_gqa=getattr(module, "num_key_value_groups", 1) > 1,
        )
    return out.to(query.dtype).transpose(1, 2).contiguous(), None


def row_seed(request: GenerationRequest, sample_index: int) -> int:
    """The random stream of one sample: the request's seed (sample 0), or one derived per sample."""
    seed = request.sampling.seed
    return seed if sample_index == 0 else int(stable_hash({"seed": seed, "sample_index": sample_index})[:8], 16)


class SeededSampler:
    """Samples each row's next token from its own random stream, by inverse CDF.

    Row i's token at step t is drawn with the t-th uniform of a generator seeded with `seeds[i]`,
    after temperature and top-p, so it depends on that row's logits and seed only: not on its
    batch mates, the chunking, nor how many rows are still generating. Float32 throughout (float64
    over the whole vocabulary cost 10-50 ms a step on 2 CPU cores): the CDF's rounding moves about
    1e-6 of probability mass between neighbouring tokens. The top-p nucleus comes from a top-k
    that widens until it holds the row's nucleus (64, then 1024 candidates), and only a row whose
    nucleus is wider still sorts the whole vocabulary (120 ms a step at 16 rows on CPU); its edge is
    decided in float64 over those values.
    """

    #: the top-k passes that look for each row's nucleus, before a sort of the whole vocabulary
    NUCLEUS_CANDIDATES = (64, 1024)

    def __init__(self, seeds, max_new_tokens: int, device, temperature: float = 1.0, top_p: float = 1.0):
        import torch

        if temperature <= 0 or not 0 < top_p <= 1:
            raise ValueError(f"SeededSampler needs temperature > 0 and top_p in (0, 1], got {temperature}, {top_p}")
        streams = [
            torch.rand(max_new_tokens, generator=torch.Generator().manual_seed(int(s)), dtype=torch.float64)
            for s in seeds
        ]
        self.uniforms = torch.stack(streams).to(device)
        self.temperature = float(temperature)
        self.top_p = float(top_p)

    def select(self, rows) -> None:
        """Keep only these rows' streams (rows that finished are dropped from the batch)."""
        self.uniforms = self.uniforms[rows]

    def sample(self, logits, step: int):
        """Each row's token at `step` from its `logits` (rows × vocabulary): a LongTensor of rows."""
        import torch

        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1:
            probs = probs.masked_fill(probs < self._nucleus_floor(probs), 0.0)
        cdf = probs.cumsum(dim=-1)
        target = (self.uniforms[:, step : step + 1].to(cdf.device) * cdf[:, -1:].double()).float()
        # right=True: a token of probability 0 (a flat run of the CDF) is never picked
        return torch.searchsorted(cdf, target, right=True).clamp(max=cdf.shape[-1] - 1).squeeze(-1)

    def _nucleus_floor(self, probs):
        """Per row, the smallest probability inside the nucleus: the most likely tokens until their
        mass reaches top_p (the top token always). Ties at the edge are all kept."""
        import torch

        vocab = probs.shape[-1]
        floor = torch.empty(probs.shape[0], 1, dtype=probs.dtype, device=probs.device)
        pending = torch.arange(probs.shape[0], device=probs.device)
        for k in (*self.NUCLEUS_CANDIDATES, vocab):
            k = min(k, vocab)
            rows = probs[pending]
            # a top-k of most of the vocabulary is slower than sorting it
            top = rows.sort(dim=-1, descending=True).values if k == vocab else rows.topk(k, dim=-1).values
            before = top.double().cumsum(dim=-1) - top.double()  # mass of the more likely tokens
            kept = (before < self.top_p).sum(dim=-1, keepdim=True)
            closed = (kept < k).squeeze(-1) | (k == vocab)
            floor[pending[closed]] = top[closed].gather(-1, kept[closed] - 1)
            pending = pending[~closed]
            if not len(pending):
                return floor
        return floor


#: Sequences per forward pass when `batch_size` is not given: 2 CPU cores gain nothing from more,
#: while an H100 went from 2.2k tokens/s at 64 to 6-7k at 256 on the zero-shot stage.
DEFAULT_BATCH_SIZE = {"cpu": 8, "cuda": 256}


class TransformersBackend(Backend):
    #: decode steps between looks at which rows have ended: each look syncs with a GPU, whose queue
    #: of kernels then runs dry (generate defers its stop check likewise); a row that ended in
    #: between only runs on as padding
    STOP_CHECK_EVERY = {"cpu": 1, "cuda": 8}

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int | None = None,
        num_threads: int | None = None,
        devices: list[str] | None = None,
        max_model_len: int | None = None,
    ):
        """`devices`: the job's GPU this model runs on when a job holds several models
        (`gpu_plan.engine_slices`, CUDA names); its first one. `max_model_len`: the context window
        (prompt + reply) replies are clipped to (`llm.budget`); None: the model's
        `max_position_embeddings`."""
        import torch

        if num_threads:
            torch.set_num_threads(num_threads)
        if devices and device in ("auto", "cuda"):
            from ..gpu_plan import visible_gpus

            device = f"cuda:{visible_gpus().index(str(devices[0]))}"
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.batch_size = batch_size or DEFAULT_BATCH_SIZE.get(torch.device(device).type, DEFAULT_BATCH_SIZE["cpu"])
        self.model_path = str(model_path)
        self.model_id = f"transformers::{model_fingerprint(model_path)}"
        self._dtype = dtype
        self.max_model_len = max_model_len
        self.budget_clips = 0  # requests whose max_tokens the context window clipped (`llm.budget`)
        self.autocast = False  # generation in the weights' dtype (`from_model` may ask for bf16 autocast)
        # The model loads on first use: a job whose generations are all cached never imports
        # transformers' generation code (~10 s on 2 CPU cores) nor reads the weights.

    def __getattr__(self, name: str):
        if name in ("model", "tokenizer", "eos_ids") and "_dtype" in self.__dict__ and "model" not in self.__dict__:
            if self.__dict__.get("_closed"):
                raise RuntimeError(f"{self.model_id}: the backend is closed")
            self._load()
            return self.__dict__[name]
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        log.info("loading %s on %s", self.model_path, self.device)
        tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        torch_dtype = "auto" if self._dtype == "auto" else getattr(torch, self._dtype)
        model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=torch_dtype).to(self.device)
        cpu_decode_attention(model)
        self._attach(model, tokenizer)

    @classmethod
    def from_model(
        cls, model, tokenizer, *, model_id: str, batch_size: int | None = None, autocast: bool = False
    ) -> TransformersBackend:
        """A backend over a model already in memory (the policy being trained): it generates with the
        live weights, on the model's device; `model_id` names them. `autocast`: generate under bf16
        autocast (training's `autocast` setting)."""
        import torch

        backend = cls.__new__(cls)
        backend.device = str(next(model.parameters()).device)
        backend.batch_size = batch_size or DEFAULT_BATCH_SIZE.get(
            torch.device(backend.device).type, DEFAULT_BATCH_SIZE["cpu"]
        )
        backend.model_path, backend.model_id = model_id, model_id
        backend.max_model_len, backend.budget_clips, backend.autocast = None, 0, autocast
        backend._attach(model, tokenizer, eval_mode=False)
        return backend

    def _attach(self, model, tokenizer, eval_mode: bool = True) -> None:
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model
        if eval_mode:
            self.model.eval()
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])
        # The chat template's end-of-turn token also ends a reply (ChatML's <|im_end|>).
        for tok in ("<|im_end|>", "<|eot_id|>", "<end_of_turn>"):
            tid = self.tokenizer.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                self.eos_ids.add(tid)

    # -- prompts -------------------------------------------------------------------------
    def context_window(self) -> int | None:
        """Prompt + reply tokens the model takes: `max_model_len`, else its config's
        `max_position_embeddings` (None when it has none)."""
        if self.max_model_len is not None:
            return int(self.max_model_len)
        positions = getattr(self.model.config, "max_position_embeddings", None)
        return int(positions) if positions else None

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        return chat_prompt_ids(self.tokenizer, messages)

    # -- generation ----------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[list[Generation]]:
        from .budget import fit_max_tokens

        units = [(ri, j) for ri, r in enumerate(requests) for j in range(r.n)]
        prompts = {ri: self.prompt_ids(r.messages) for ri, r in enumerate(requests)}
        budgets, clipped = fit_max_tokens(
            [len(prompts[ri]) for ri in range(len(requests))],
            [r.sampling.max_tokens for r in requests],
            self.context_window(),
            model=self.model_id,
        )
        self.budget_clips += clipped
        # One generate() call needs one sampling setting; group, then sort by length to cut padding.
        groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for ri, j in units:
            s = requests[ri].sampling
            groups[(s.temperature, s.top_p, budgets[ri], s.logprobs, s.top_logprobs)].append((ri, j))
        out: list[list[Generation | None]] = [[None] * r.n for r in requests]
        for (temperature, top_p, max_tokens, want_logprobs, top_k), members in groups.items():
            members.sort(key=lambda u: len(prompts[u[0]]))
            for start in range(0, len(members), self.batch_size):
                chunk = members[start : start + self.batch_size]
                seeds = [row_seed(requests[ri], j) for ri, j in chunk]
                gens = self._generate_chunk(
                    [prompts[ri] for ri, _ in chunk], seeds, temperature, top_p, max_tokens, want_logprobs, top_k
                )
                for (ri, j), g in zip(chunk, gens):
                    out[ri][j] = g
                if progress:
                    progress(len(chunk))
        return out  # type: ignore[return-value]

    def _generate_chunk(
        self, prompt_ids, seeds, temperature, top_p, max_tokens, want_logprobs, top_k: int = 0
    ) -> list[Generation]:
        """`top_k` > 0: each position's entropy and max probability from the top-k of the raw
        log-softmax, the formula the other backends apply to what they return (estimators.tokens)."""
        import torch

        width = max(len(p) for p in prompt_ids)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompt_ids], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompt_ids], device=self.device)
        sampler = None
        if temperature > 0:
            sampler = SeededSampler(seeds, max_tokens, self.device, temperature=temperature, top_p=top_p)
        with torch.inference_mode(), bf16_autocast(self.device, self.autocast):
            new_tokens, logprobs, top = self._decode(input_ids, attention, max_tokens, sampler, want_logprobs, top_k)
        entropies = max_logprobs = None
        if top is not None:
            top = top.cpu().double().numpy()
            entropies, max_logprobs = topk_entropy(top), top[..., 0]
        gens = []
        for b, prompt in enumerate(prompt_ids):
            tokens = new_tokens[b].tolist()
            length, finish = len(tokens), "length"
            for t, tok in enumerate(tokens):
                if tok in self.eos_ids:
                    length, finish = t + 1, "stop"
                    break
            text, reasoning = reply_text(
                self.tokenizer, tokens[:length], self.tokenizer.decode(tokens[:length], skip_special_tokens=True)
            )
            gens.append(
                Generation(
                    text=text,
                    completion_tokens=length,
                    prompt_tokens=len(prompt),
                    token_logprobs=None if logprobs is None else [float(x) for x in logprobs[b, :length].tolist()],
                    finish_reason=finish,
                    token_ids=tokens[:length],
                    token_entropies=None if entropies is None else [float(x) for x in entropies[b, :length]],
                    token_max_logprobs=None if max_logprobs is None else [float(x) for x in max_logprobs[b, :length]],
                    reasoning=reasoning,
                )
            )
        return gens

    def _decode(self, input_ids, attention, max_tokens: int, sampler, want_logprobs: bool, top_k: int):
        """The decode loop, written out rather than `generate`'s: the sampler picks each row's token
        from the raw logits, so generate's own multinomial draw over the whole vocabulary (30 ms a
        step at 16 rows on 2 CPU cores) and its logits processors never run, and the log-probs are
        taken step by step instead of keeping every step's logits. Rows that finished leave the
        batch once they are a quarter of it (their KV cache is dropped), where `generate` computes
        them until the last row ends. Returns the new tokens (pad after a row's end), their raw
        log-probs and the raw top-`top_k` log-probs of each step (None where not asked)."""
        import inspect

        import torch

        model, pad = self.model, self.tokenizer.pad_token_id
        rows, device = input_ids.shape[0], input_ids.device
        eos = torch.tensor(sorted(self.eos_ids), device=device)
        tokens = torch.full((rows, max_tokens), pad, dtype=torch.long, device=device)
        logprobs = torch.zeros(rows, max_tokens, device=device) if want_logprobs else None
        top = None
        alive = torch.arange(rows, device=device)  # each batch row's row in the chunk
        done = torch.zeros(rows, dtype=torch.bool, device=device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        check_every = self.STOP_CHECK_EVERY.get(device.type, 8)  # other accelerators: as CUDA
        forward = getattr(model, "get_base_model", lambda: model)().forward
        # the prompt's logits at its last position only (the whole prompt's would be rows × width × vocab)
        keep_last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(forward).parameters else {}
        out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=True, **keep_last)
        cache = out.past_key_values
        if cache is None or cache.get_seq_length() == 0:  # each step would see its one token only
            raise RuntimeError(
                f"{self.model_id}: the model kept no KV cache of the prompt (gradient checkpointing in "
                "train mode turns it off): generate in eval mode"
            )
        for step in range(max_tokens):
            logits = out.logits[:, -1].float()
            token = logits.argmax(-1) if sampler is None else sampler.sample(logits, step)
            token = token.masked_fill(done, pad)
            tokens[alive, step] = token
            if want_logprobs or top_k:
                # raw log-probs (before temperature and top-p), as vLLM reports them
                log_softmax = torch.log_softmax(logits, dim=-1)
                if want_logprobs:
                    logprobs[alive, step] = log_softmax.gather(-1, token.unsqueeze(-1)).squeeze(-1)
                if top_k:
                    values = log_softmax.topk(min(top_k, log_softmax.shape[-1]), dim=-1).values
                    if top is None:
                        top = torch.zeros(rows, max_tokens, values.shape[-1], device=device)
                    top[alive, step] = values
            done |= torch.isin(token, eos)
            if step == max_tokens - 1:
                break
            if step % check_every != check_every - 1:
                finished = 0  # not looked at: reading `done` waits for the GPU
            elif (finished := int(done.sum())) == len(alive):
                break
            if finished and finished * 4 >= len(alive):
                keep = (~done).nonzero().squeeze(-1)
                alive, token, done = alive[keep], token[keep], done[keep]
                attention, positions = attention[keep], positions[keep]
                cache.batch_select_indices(keep)
                if sampler is not None:
                    sampler.select(keep)
            attention = torch.cat([attention, attention.new_ones(len(alive), 1)], dim=-1)
            positions = positions[:, -1:] + 1
            out = model(
                input_ids=token.unsqueeze(-1),
                attention_mask=attention,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            )
        return tokens, logprobs, top

    # -- teacher-forced scoring ---------------------------------------------------------
    def score(self, prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> list[ScoredText]:
        """log P(reply | chat prompt): the reply's tokens and the template's end-of-turn tokens."""
        import torch

        pairs = []
        for messages, reply in zip(*paired_score_inputs(prompts, replies)):
            ids, start = reply_token_ids(self.tokenizer, messages, reply)
            pairs.append((ids[:start], ids[start:]))
        if not pairs:
            return []
        out: list[ScoredText | None] = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            seqs = [pairs[i][0] + pairs[i][1] for i in idx]
            width = max(len(s) for s in seqs)
            ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=self.device)
            att = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=self.device)
            pos = (att.cumsum(-1) - 1).clamp(min=0)
            with torch.inference_mode():
                logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos).logits.float()
            logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            for b, i in enumerate(idx):
                n_reply = len(pairs[i][1])
                values = logp[b, width - 1 - n_reply :].tolist() if n_reply else []
                out[i] = ScoredText(token_logprobs=[float(v) for v in values], prompt_tokens=len(pairs[i][0]))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.__dict__.pop("model", None)
        self._closed = True
