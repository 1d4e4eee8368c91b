"""Any OpenAI-compatible server (`vllm serve`, SGLang, the OpenAI API) as a Backend.

Transport: the official `openai` client (`AsyncOpenAI`). Its built-in retry loop resends a
request on connection errors, timeouts, HTTP 408/409/429 and every 5xx, with exponential
backoff (0.5 s doubling to at most 8 s, minus up to 25 % jitter; a server's `Retry-After` of up
to 2 minutes is honoured), `max_retries` times. `timeout` (seconds) bounds each attempt.
A batch runs its requests concurrently on one asyncio loop, at most `max_concurrency` in flight.

Generation uses chat completions, so the server applies the model's chat template.
Token counts: `prompt_tokens` is the request's `usage.prompt_tokens`, `cached_tokens` its
`usage.prompt_tokens_details.cached_tokens` (prompt tokens served from the API's prompt cache, billed
at the cached-input price; 0 where the server leaves it out). `usage.completion_tokens`
covers all `n` choices of a request, so per choice:
  * n == 1: `usage.completion_tokens`;
  * n > 1: the number of entries in the choice's token logprobs (exact; the backend asks for
    `logprobs=True, top_logprobs=0` whenever n > 1, and drops them from the result unless the
    request wanted them);
  * if the server returns no logprobs: the re-tokenised choice text when a tokenizer is
    available, else the usage total spread evenly over the choices (remainder to the first).

With `top_logprobs` = k > 0 the chat request asks for `top_logprobs=k` (the OpenAI API allows at
most 20) and each reply's per-token entropy and max probability come from them
(`debatelab.probability.topk_summaries`); a server that returns no top-k leaves them None (NaN).

Scoring (`score`) uses the legacy completions endpoint: the chat template is rendered and
tokenised on the client, the token ids are sent as the prompt with `echo=True, logprobs=0,
max_tokens=1`, and the echoed prompt logprobs of the reply's tokens are returned (OpenAI
semantics, supported by `vllm serve`). The tokenizer comes from `tokenizer_path`, else from
`model` when that is a local model folder, else from the server's `/tokenize` endpoint
(vLLM-specific; it applies the server's chat template).

Servers fill sampling settings a request leaves out from the model's generation_config.json
(`vllm serve` does, e.g. top_k); this backend always sends temperature, top_p, max_tokens and
seed. Use `extra_body` (e.g. `{"top_k": -1}`) or `vllm serve --generation-config vllm` to match
the offline engine exactly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from ..probability import topk_summaries
from .base import Backend, Generation, GenerationRequest, Message, ProgressCallback, ScoredText
from .chat import encode_text, normalise_finish_reason, paired_score_inputs, reply_token_ids

log = logging.getLogger(__name__)

T = TypeVar("T")


def run_coroutine(make_coro: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code.

    With no event loop running in this thread (scripts, worker threads) it runs here; inside a
    running loop (a notebook, an async caller) it runs on a fresh loop in a helper thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="openai-backend") as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()


def _reasoning(message) -> str | None:
    """A reasoning model's chain of thought, which OpenAI-compatible servers return beside `content`
    (vLLM: `reasoning_content`, newer `reasoning`; gpt-oss's analysis channel); None when absent.
    `content`, the final answer, stays the generation's text."""
    extra = getattr(message, "model_extra", None) or {}
    for name in ("reasoning_content", "reasoning"):
        value = getattr(message, name, None) or extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(max(total, 0), parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _top_summaries(content, k: int) -> tuple[list[float] | None, list[float] | None]:
    """Per-token (H_k, log max p) from a chat choice's `logprobs.content` entries' `top_logprobs`;
    (None, None) when k = 0 or the server left any position's top-k out (its columns then read NaN)."""
    if not k or not content:
        return None, None
    positions = [[float(t.logprob) for t in (entry.top_logprobs or [])] for entry in content]
    if not all(positions):
        return None, None
    return topk_summaries(positions, k)


class ServerUnavailableError(RuntimeError):
    """An OpenAI-compatible server that stopped answering (connection refused, 5xx, 429) after every retry."""


#: the variable a hosted OpenAI API's key usually lives in (named in error messages; never read unless
#: a config names it with `api_key_env`)
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
#: what a client sends where no user key may go (vLLM without --api-key accepts any)
NO_KEY = "EMPTY"


def is_loopback(url: str) -> bool:
    """Whether `url` is a server on this machine (a `vllm serve` of the job or an SSH tunnel)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:  # an address, not a name that starts like one (127.0.0.1.example.com is anyone's server)
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_key_from_environment(base_url: str, variable: str | None) -> str:
    """The API key for `base_url`: the value of the environment variable `variable`, which the config
    names for this endpoint (`api_key_env`), never a config value (Snakemake stores job params in
    plain text). Without `variable` no user key is sent: to a server on this machine "EMPTY" (any
    user of a shared node can bind a loopback port, so it gets no key it wasn't given), and for any
    other server it is an error asking to name the variable."""
    if variable:
        value = os.environ.get(variable)
        if value:
            return value
        raise ValueError(
            f"OpenAIBackend: no API key for {base_url}: the environment variable {variable!r} (its api_key_env) "
            f"is not set. Export it before running snakemake (e.g. `export {variable}=...`; on SLURM the job "
            "inherits it); keys never go in a config"
        )
    if is_loopback(base_url):
        return NO_KEY
    raise ValueError(
        f"OpenAIBackend: no API key for {base_url}: name the environment variable that holds its key with "
        f"backend_options.api_key_env (e.g. `api_key_env: {DEFAULT_API_KEY_ENV}`, then `export "
        f"{DEFAULT_API_KEY_ENV}=...`); a key is sent only to the endpoint it is named for, and never goes in a config"
    )


class OpenAIBackend(Backend):
    """One model behind an OpenAI-compatible HTTP endpoint (`base_url` ends in `/v1`)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        max_concurrency: int = 16,
        timeout: float = 120.0,
        max_retries: int = 5,
        tokenizer_path: str | None = None,
        extra_body: dict[str, Any] | None = None,
    ):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key if api_key is not None else api_key_from_environment(self.base_url, api_key_env)
        self.max_concurrency = int(max_concurrency)
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.tokenizer_path = tokenizer_path
        self.extra_body = dict(extra_body or {})
        self.model_id = f"{self.base_url}::{model}"
        self._tokenizer = None

    # -- plumbing ---------------------------------------------------------------------------
    def make_client(self):
        """A fresh AsyncOpenAI client carrying this backend's timeout and retry settings.

        One client per batch: an async HTTP connection pool belongs to the event loop that
        opened it, and each batch runs on its own loop.
        """
        from openai import AsyncOpenAI

        return AsyncOpenAI(
            base_url=self.base_url, api_key=self.api_key, timeout=self.timeout, max_retries=self.max_retries
        )

    @property
    def tokenizer(self):
        """The model's Hugging Face tokenizer (with its chat template), or None if none is local."""
        if self._tokenizer is None:
            source = self.tokenizer_path
            if source is None and Path(self.model).is_dir():
                source = self.model
            if source is not None:
                from transformers import AutoTokenizer

                self._tokenizer = AutoTokenizer.from_pretrained(source)
        return self._tokenizer

    def _root_url(self) -> str:
        """The server's root, for vLLM's non-OpenAI routes such as /tokenize."""
        return self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url

    async def _gather(self, make_calls: Callable[[Any, asyncio.Semaphore], list[Awaitable[T]]]) -> list[T]:
        import openai

        semaphore = asyncio.Semaphore(self.max_concurrency)
        async with self.make_client() as client:
            try:
                return await asyncio.gather(*make_calls(client, semaphore))
            except (openai.APIConnectionError, openai.InternalServerError, openai.RateLimitError) as error:
                # the client's own retries are spent: the server is down or overloaded, not the request wrong
                raise ServerUnavailableError(
                    f"model {self.model!r} at {self.base_url}: no answer after {self.max_retries} retries "
                    f"({type(error).__name__}: {error}). The units finished before are cached; rerun to go on from the "
                    "unit in flight once the server is back"
                ) from error

    # -- generation -------------------------------------------------------------------------
    def generate(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[list[Generation]]:
        requests = list(requests)
        if not requests:
            return []
        tokenizer = self.tokenizer  # loaded here, not inside the event loop

        def calls(client, semaphore):
            return [self._generate_one(client, semaphore, r, tokenizer, progress) for r in requests]

        return run_coroutine(lambda: self._gather(calls))

    async def _generate_one(
        self, client, semaphore, request: GenerationRequest, tokenizer, progress
    ) -> list[Generation]:
        s = request.sampling
        kwargs: dict[str, Any] = dict(
            model=self.model,
            messages=[dict(m) for m in request.messages],
            n=request.n,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens,
            seed=s.seed,
        )
        if s.logprobs or request.n > 1:  # n > 1: the logprobs give each choice's exact token count
            # top_logprobs = k: the OpenAI API allows at most 20, `vllm serve` its --max-logprobs
            kwargs.update(logprobs=True, top_logprobs=s.top_logprobs if s.logprobs else 0)
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        async with semaphore:
            response = await client.chat.completions.create(**kwargs)

        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != request.n:
            raise RuntimeError(f"{self.model_id}: server returned {len(choices)} choices, expected n={request.n}")
        usage = response.usage
        prompt_tokens = int(usage.prompt_tokens) if usage is not None else 0
        total_completion = int(usage.completion_tokens) if usage is not None else 0
        details = getattr(usage, "prompt_tokens_details", None) if usage is not None else None
        cached_tokens = int(getattr(details, "cached_tokens", 0) or 0) if details is not None else 0

        token_lists, top_summaries = [], []
        for c in choices:
            content = c.logprobs.content if c.logprobs is not None else None
            token_lists.append(None if content is None else [float(t.logprob) for t in content])
            top_summaries.append(_top_summaries(content, s.top_logprobs))

        if request.n == 1 and usage is not None:
            counts = [total_completion]
        elif all(t is not None for t in token_lists):
            counts = [len(t) for t in token_lists]
        elif tokenizer is not None:
            counts = [len(encode_text(tokenizer, c.message.content or "")) for c in choices]
        else:
            counts = _split_evenly(total_completion, request.n)

        gens = []
        for c, lps, count, (entropies, max_logprobs) in zip(choices, token_lists, counts, top_summaries):
            if s.logprobs and lps is None:
                raise RuntimeError(f"{self.model_id}: logprobs were requested but the server returned none")
            gens.append(
                Generation(
                    text=c.message.content or "",
                    completion_tokens=count,
                    prompt_tokens=prompt_tokens,
                    token_logprobs=lps if s.logprobs else None,
                    finish_reason=normalise_finish_reason(c.finish_reason),
                    token_entropies=entropies,
                    token_max_logprobs=max_logprobs,
                    reasoning=_reasoning(c.message),
                    cached_tokens=cached_tokens,
                )
            )
        if progress is not None:
            progress(len(gens))
        return gens

    # -- scoring ----------------------------------------------------------------------------
    def score(self, prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> list[ScoredText]:
        prompts, replies = paired_score_inputs(prompts, replies)
        if not prompts:
            return []
        tokenizer = self.tokenizer
        spans = [reply_token_ids(tokenizer, p, r) for p, r in zip(prompts, replies)] if tokenizer is not None else None

        def calls(client, semaphore):
            if spans is not None:
                return [self._score_ids(client, semaphore, ids, start) for ids, start in spans]
            return [self._score_remote(client, semaphore, p, r) for p, r in zip(prompts, replies)]

        return run_coroutine(lambda: self._gather(calls))

    async def _score_ids(self, client, semaphore, ids: list[int], start: int) -> ScoredText:
        kwargs: dict[str, Any] = dict(
            model=self.model, prompt=ids, echo=True, logprobs=0, max_tokens=1, temperature=0.0
        )
        if self.extra_body:
            kwargs["extra_body"] = dict(self.extra_body)
        async with semaphore:
            response = await client.completions.create(**kwargs)
        lp = response.choices[0].logprobs
        token_logprobs = None if lp is None else lp.token_logprobs
        # Echoed: one entry per prompt token (the first is None) and then the generated token.
        if token_logprobs is None or len(token_logprobs) < len(ids):
            raise RuntimeError(
                f"{self.model_id}: the completions endpoint did not echo prompt logprobs "
                "(needs echo + logprobs support, as in vllm serve)"
            )
        values = token_logprobs[start : len(ids)]
        if any(v is None for v in values):
            raise RuntimeError(f"{self.model_id}: missing prompt logprobs in the echoed reply")
        return ScoredText(token_logprobs=[float(v) for v in values], prompt_tokens=start)

    async def _score_remote(self, client, semaphore, prompt: Sequence[Message], reply: str) -> ScoredText:
        """No local tokenizer: let a vLLM server render and tokenise the chat (`POST /tokenize`)."""
        messages = [dict(m) for m in prompt]
        url = self._root_url() + "/tokenize"
        async with semaphore:
            prefix = await client.post(
                url,
                cast_to=dict,
                body={"model": self.model, "messages": messages, "add_generation_prompt": True},
            )
            full = await client.post(
                url,
                cast_to=dict,
                body={
                    "model": self.model,
                    "messages": messages + [{"role": "assistant", "content": reply}],
                    "add_generation_prompt": False,
                },
            )
        prefix_ids, full_ids = list(prefix["tokens"]), list(full["tokens"])
        if full_ids[: len(prefix_ids)] != prefix_ids:
            raise ValueError(
                f"{self.model_id}: the server's tokens for the prompt are not a prefix of those for "
                "prompt + reply; pass tokenizer_path to score with a local tokenizer"
            )
        return await self._score_ids(client, semaphore, full_ids, len(prefix_ids))

    def close(self) -> None:
        """Nothing to free: each batch opens and closes its own HTTP client."""
