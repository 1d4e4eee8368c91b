"""The generation cache: every finished batch is on disk before the next one starts.

A cache entry is keyed by a hash of (model identity, messages, sampling settings, seed, sample
index). Entries live in small append-only Parquet parts inside one folder; each flush writes a
new part atomically under a unique name, so concurrent jobs (even on different nodes of a
shared filesystem) never clobber each other, and a killed job loses only the batch in flight.
"""
from __future__ import annotations

import logging
import os
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from .base import Backend, Generation, GenerationRequest, Message, ScoredText, sample_seed, stable_hash

log = logging.getLogger(__name__)

_PART_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("text", pa.string()),
        ("completion_tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("token_logprobs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
    ]
)


class GenerationCache:
    """A folder of Parquet parts mapping request keys to generations (and scores)."""

    def __init__(self, directory: str | os.PathLike | None):
        self.directory = Path(directory) if directory is not None else None
        self._entries: dict[str, Generation] = {}
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load()

    def _load(self) -> None:
        for part in sorted(self.directory.glob("part-*.parquet")):
            try:
                table = pq.read_table(part)
            except Exception as exc:  # a part cut short by a crash before rename can't exist; be safe anyway
                log.warning("skipping unreadable cache part %s: %s", part, exc)
                continue
            for row in table.to_pylist():
                self._entries[row["key"]] = Generation.from_dict(row)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def get(self, key: str) -> Generation | None:
        return self._entries.get(key)

    def put_many(self, items: Sequence[tuple[str, Generation]]) -> None:
        """Record a finished batch; with a folder, it is on disk when this returns."""
        if not items:
            return
        for key, generation in items:
            self._entries[key] = generation
        if self.directory is None:
            return
        rows = [{"key": k, **g.to_dict()} for k, g in items]
        table = pa.Table.from_pylist(rows, schema=_PART_SCHEMA)
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = self.directory / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.directory / name)


def generation_key(model_id: str, request: GenerationRequest, sample_index: int) -> str:
    return stable_hash({"model": model_id, **request.key_payload(sample_index)})


def score_key(model_id: str, prompt: Sequence[Message], reply: str) -> str:
    return stable_hash({"model": model_id, "score": [dict(m) for m in prompt], "reply": reply})


def generate_cached(
    backend: Backend,
    requests: Sequence[GenerationRequest],
    cache: GenerationCache,
    *,
    batch_size: int = 256,
    desc: str = "generate",
    show_progress: bool = True,
) -> list[list[Generation]]:
    """Generate `request.n` samples for every request, reusing and filling the cache.

    Each sample is its own unit with a seed derived from (request seed, sample index, messages),
    so a sample's identity does not depend on which batch it ran in. Misses go to the backend
    in batches of `batch_size` samples; each finished batch is flushed before the next starts.
    """
    results: list[list[Generation | None]] = [[None] * r.n for r in requests]
    pending: list[tuple[int, int, str, GenerationRequest]] = []
    for ri, request in enumerate(requests):
        for j in range(request.n):
            key = generation_key(backend.model_id, request, j)
            hit = cache.get(key)
            if hit is not None:
                results[ri][j] = hit
            else:
                single = GenerationRequest(
                    messages=request.messages,
                    sampling=replace(request.sampling, seed=sample_seed(request.sampling.seed, j, request.messages)),
                    n=1,
                )
                pending.append((ri, j, key, single))
    total = sum(r.n for r in requests)
    with tqdm(
        total=total,
        initial=total - len(pending),
        desc=desc,
        unit="gen",
        disable=not show_progress,
        dynamic_ncols=True,
    ) as bar:
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            outputs = backend.generate([u[3] for u in chunk], progress=bar.update)
            finished = []
            for (ri, j, key, _), out in zip(chunk, outputs):
                results[ri][j] = out[0]
                finished.append((key, out[0]))
            cache.put_many(finished)
            bar.n = total - len(pending) + start + len(chunk)
            bar.refresh()
    return results  # type: ignore[return-value]


def score_cached(
    backend: Backend,
    prompts: Sequence[Sequence[Message]],
    replies: Sequence[str],
    cache: GenerationCache,
    *,
    batch_size: int = 256,
    desc: str = "score",
    show_progress: bool = True,
) -> list[ScoredText]:
    """Teacher-forced scores through the same cache (a score is a deterministic generation)."""
    out: list[ScoredText | None] = [None] * len(prompts)
    pending = []
    for i, (prompt, reply) in enumerate(zip(prompts, replies)):
        key = score_key(backend.model_id, prompt, reply)
        hit = cache.get(key)
        if hit is not None:
            out[i] = ScoredText(token_logprobs=hit.token_logprobs or [], prompt_tokens=hit.prompt_tokens)
        else:
            pending.append((i, key))
    with tqdm(total=len(prompts), initial=len(prompts) - len(pending), desc=desc, unit="seq",
              disable=not show_progress, dynamic_ncols=True) as bar:
        for start in range(0, len(pending), batch_size):
            chunk = pending[start : start + batch_size]
            scored = backend.score([prompts[i] for i, _ in chunk], [replies[i] for i, _ in chunk])
            finished = []
            for (i, key), s in zip(chunk, scored):
                out[i] = s
                finished.append((key, Generation(text=replies[i], completion_tokens=len(s.token_logprobs),
                                                 prompt_tokens=s.prompt_tokens, token_logprobs=list(s.token_logprobs))))
            cache.put_many(finished)
            bar.update(len(chunk))
    return out  # type: ignore[return-value]
