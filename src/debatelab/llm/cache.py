"""The generation cache: every finished flush unit is on disk before the next one starts, and a
request's generation never depends on the run's history.

Flush units
  A call of `generate_cached` (or `score_cached`) first lists all its samples, whether cached or
  not: sample 0 of every request in order, then sample 1, and so on (so asking for more samples
  later keeps the earlier units), each distinct request once. It cuts that list into fixed units
  of `batch_size` consecutive samples. A unit is one backend call and one cache part. A unit whose
  part is on disk is read back; any other unit is generated whole, with the same members, order,
  padding and seeds as every time before. A killed job therefore loses at most the unit in flight,
  and a rerun rebuilds exactly the units it had.

What is guaranteed
  Cache entries are stored and served per unit: an entry written by another job's unit (another
  protocol, another kill point) is never mixed into this call's outputs. A call's outputs are a
  function of its request list, `batch_size` and the backend alone: not of which units were
  cached, which job ran first, or where a kill fell. So a resumed run ends bit-identical to an
  uninterrupted one on the same backend and hardware. Identical units are still shared (a replay
  or `--forcerun`, a ring of three agents that asks what all-to-all asks); a protocol that asks a
  subset of another's requests generates its own units. Not guaranteed: equal outputs under a
  different `batch_size` (other units; the transformers backend's per-request seeds keep texts
  the same up to floating-point differences of batch composition), another backend, or other
  hardware; vLLM and OpenAI-compatible servers schedule batches themselves, so their numerics may
  vary between runs of the same unit.

Storage
  Parquet parts named at random and written atomically, one per unit, so concurrent jobs (even on
  different nodes of a shared filesystem) never clobber each other. Keys hash (engine and model
  weights, messages, sampling settings, seed, sample index); the unit id hashes its member keys.
  Parts of the earlier per-request format (no `unit` column) are still read, counted and logged,
  but never served: their generations depended on which requests shared their batch.
  Parts written before `token_entropies` / `token_max_logprobs` existed read them as None. Their
  entries are never asked for with top-k summaries: a request with `top_logprobs` = k > 0 has the
  k in its key (keys of k = 0 are those from before), so it is generated anew, with them. An entry
  of a k > 0 key without them (a server that returned no top-k) is served as it is, and its
  entropy and max-probability columns read NaN. Parts written before `reasoning` existed read it as None,
  and before `cached_tokens` (prompt tokens an API served from its prompt cache) as 0.

Budget
  A cache given a `debatelab.cost.Budget` asks it before every unit it would generate and tells it
  what each unit cost (its model's price): a unit that would pass the experiment's or the job's cap
  stops the job with `BudgetExceeded` before its requests are sent; every unit finished before is
  on disk, so the rerun with a higher cap sends only the missing ones.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from .base import Backend, Generation, GenerationRequest, Message, ScoredText, sample_seed, stable_hash

log = logging.getLogger(__name__)

_PART_SCHEMA = pa.schema(
    [
        ("unit", pa.string()),
        ("key", pa.string()),
        ("text", pa.string()),
        ("completion_tokens", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("token_logprobs", pa.list_(pa.float64())),
        ("finish_reason", pa.string()),
        ("token_entropies", pa.list_(pa.float64())),
        ("token_max_logprobs", pa.list_(pa.float64())),
        ("reasoning", pa.string()),
        ("cached_tokens", pa.int64()),
    ]
)


class GenerationCache:
    """A folder of Parquet parts, one per flush unit, mapping request keys to generations (and scores)."""

    def __init__(self, directory: str | os.PathLike | None, *, budget=None, model: str | None = None):
        """`budget` (a `debatelab.cost.Budget`) and `model` (the config's name of the model whose
        generations this folder holds: its price) make every unit ask the budget first."""
        self.directory = Path(directory) if directory is not None else None
        self.budget = budget
        self.model = model
        self._units: dict[str, dict[str, Generation]] = {}
        self.stale_entries = 0  # entries of the per-request format, read but never served
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._load()

    def _load(self) -> None:
        for part in sorted(self.directory.glob("part-*.parquet")):
            try:
                table = pq.read_table(part)
                if "key" not in table.column_names:
                    raise ValueError(f"no key column (has {table.column_names})")
            except Exception as exc:  # bytes cut off by a full disk or a bad copy (our own writes are atomic)
                aside = part.with_name(f"corrupt-{part.name}")
                log.warning(
                    "cache part %s does not load (%s: %s): moved aside as %s; its unit is generated again",
                    part,
                    type(exc).__name__,
                    str(exc)[:200],
                    aside.name,
                )
                try:
                    os.replace(part, aside)
                except OSError:  # another job moved it first
                    pass
                continue
            if "unit" not in table.column_names:
                self.stale_entries += table.num_rows
                continue
            for row in table.to_pylist():
                self._units.setdefault(row["unit"], {})[row["key"]] = Generation.from_dict(row)
        if self.stale_entries:
            log.warning(
                "cache %s: %d entries were written by debatelab before flush units (one entry per request); a "
                "generation there depended on which other requests shared its batch, so they are not reused and "
                "their requests are generated again",
                self.directory,
                self.stale_entries,
            )

    def __len__(self) -> int:
        return sum(len(unit) for unit in self._units.values())

    def unit(self, unit_id: str) -> dict[str, Generation] | None:
        """The entries of a finished unit, or None."""
        return self._units.get(unit_id)

    def put_unit(self, unit_id: str, items: Sequence[tuple[str, Generation]]) -> None:
        """Record a finished unit; with a folder, its part file is in place when this returns (a kill
        loses at most the unit in flight; a part a crash left unreadable is set aside on loading)."""
        if not items:
            return
        self._units[unit_id] = dict(items)
        if self.directory is None:
            return
        rows = [{"unit": unit_id, "key": k, **g.to_dict()} for k, g in items]
        table = pa.Table.from_pylist(rows, schema=_PART_SCHEMA)
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = self.directory / f".{name}.tmp"
        try:
            pq.write_table(table, tmp)
            os.replace(tmp, self.directory / name)
        except BaseException:  # a full disk: no half-written temp file left behind
            tmp.unlink(missing_ok=True)
            raise


def generation_key(model_id: str, request: GenerationRequest, sample_index: int) -> str:
    return stable_hash({"model": model_id, **request.key_payload(sample_index)})


def score_key(model_id: str, prompt: Sequence[Message], reply: str) -> str:
    return stable_hash({"model": model_id, "score": [dict(m) for m in prompt], "reply": reply})


def flush_units(keys: Sequence[str], batch_size: int) -> list[tuple[str, list[str]]]:
    """(unit id, member keys) of consecutive runs of `batch_size` distinct keys, in order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    distinct = list(dict.fromkeys(keys))
    units = [distinct[i : i + batch_size] for i in range(0, len(distinct), batch_size)]
    return [(stable_hash({"unit": members}), members) for members in units]


def _run_units(units, cache: GenerationCache, produce, *, desc: str, unit_name: str, show_progress: bool) -> dict:
    """Serve finished units from the cache and `produce(members, progress)` the others, flushing each."""
    out: dict[str, Generation] = {}
    todo = []
    for unit_id, members in units:
        hit = cache.unit(unit_id)
        if hit is not None and all(k in hit for k in members):
            out.update(hit)
        else:
            todo.append((unit_id, members))
    total = sum(len(members) for _, members in units)
    missing = sum(len(members) for _, members in todo)
    budget = cache.budget
    if budget is not None:
        budget.served(cache.model, out.values())
    if total:
        log.info(
            "%s: %d of %d %s from the cache, %d to do in %d unit(s)",
            desc,
            total - missing,
            total,
            unit_name,
            missing,
            len(todo),
        )
    with tqdm(
        total=total,
        initial=total - missing,
        desc=desc,
        unit=unit_name[:3],
        disable=not show_progress,
        dynamic_ncols=True,
    ) as bar:
        done = total - missing
        for i, (unit_id, members) in enumerate(todo):
            if budget is not None:
                budget.before_unit(
                    cache.model,
                    len(members),
                    desc=desc,
                    done=len(units) - len(todo) + i,
                    total=len(units),
                    left=total - done,
                )
            finished = produce(members, bar.update)
            cache.put_unit(unit_id, finished)
            if budget is not None:
                budget.sent(cache.model, [g for _, g in finished])
            out.update(finished)
            done += len(members)
            bar.n = done
            bar.refresh()
    return out


def generate_cached(
    backend: Backend,
    requests: Sequence[GenerationRequest],
    cache: GenerationCache,
    *,
    batch_size: int = 256,
    desc: str = "generate",
    show_progress: bool = True,
) -> list[list[Generation]]:
    """`request.n` samples of every request, in fixed flush units of `batch_size` (module docstring).

    Each sample is sent as its own n=1 request with a seed derived from (request seed, sample
    index, messages), so a sample's seed does not depend on the unit it is in.
    """
    keys = [[generation_key(backend.model_id, r, j) for j in range(r.n)] for r in requests]
    source: dict[str, GenerationRequest] = {}
    ordered = []
    for j in range(max((r.n for r in requests), default=0)):  # sample-major: more samples keep the first units
        for ri, request in enumerate(requests):
            if j < request.n and keys[ri][j] not in source:
                key = keys[ri][j]
                seed = sample_seed(request.sampling.seed, j, request.messages)
                source[key] = GenerationRequest(
                    messages=request.messages, sampling=replace(request.sampling, seed=seed)
                )
                ordered.append(key)

    def produce(members, progress):
        outputs = backend.generate([source[k] for k in members], progress=progress)
        return [(k, out[0]) for k, out in zip(members, outputs)]

    done = _run_units(
        flush_units(ordered, batch_size),
        cache,
        produce,
        desc=desc,
        unit_name="generations",
        show_progress=show_progress,
    )
    return [[done[k] for k in request_keys] for request_keys in keys]


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
    """Teacher-forced scores in fixed flush units through the same cache (a score is a deterministic generation)."""
    if len(prompts) != len(replies):
        raise ValueError(f"score: {len(prompts)} prompts but {len(replies)} replies")
    keys = [score_key(backend.model_id, p, r) for p, r in zip(prompts, replies)]
    pairs = {}
    for key, prompt, reply in zip(keys, prompts, replies):
        pairs.setdefault(key, (prompt, reply))

    def produce(members, progress):
        scored = backend.score([pairs[k][0] for k in members], [pairs[k][1] for k in members])
        progress(len(members))
        return [
            (
                k,
                Generation(
                    text=pairs[k][1],
                    completion_tokens=len(s.token_logprobs),
                    prompt_tokens=s.prompt_tokens,
                    token_logprobs=list(s.token_logprobs),
                ),
            )
            for k, s in zip(members, scored)
        ]

    done = _run_units(
        flush_units(keys, batch_size), cache, produce, desc=desc, unit_name="scores", show_progress=show_progress
    )
    return [ScoredText(token_logprobs=done[k].token_logprobs or [], prompt_tokens=done[k].prompt_tokens) for k in keys]
