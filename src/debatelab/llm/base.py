"""The one interface every inference backend implements.

A request is a chat (list of {"role", "content"} messages) plus sampling settings; the backend
returns `n` generations for it. Requests reach a backend in large batches; backends never see
the generation cache (see `debatelab.llm.cache`), which sits in front of them.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

Message = dict  # {"role": "system" | "user" | "assistant", "content": str}


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int = 0
    logprobs: bool = False  # return the log-probability of every sampled token
    # k > 0 (with logprobs): also summarise each position's top-k log-probabilities into the
    # generation's token_entropies / token_max_logprobs (debatelab.estimators.tokens)
    top_logprobs: int = 0

    def __post_init__(self):
        if self.top_logprobs < 0:
            raise ValueError(f"SamplingParams.top_logprobs must be >= 0, got {self.top_logprobs}")
        if self.top_logprobs and not self.logprobs:
            raise ValueError(f"SamplingParams.top_logprobs={self.top_logprobs} needs logprobs=True")

    def to_dict(self) -> dict:
        """The cache-key payload: `top_logprobs` only when set, so keys of k = 0 stay those from before it existed."""
        payload = asdict(self)
        if not payload["top_logprobs"]:
            del payload["top_logprobs"]
        return payload


@dataclass(frozen=True)
class GenerationRequest:
    messages: tuple[Message, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    n: int = 1

    def __post_init__(self):
        # Accept lists for convenience; freeze them so requests hash and compare by value.
        object.__setattr__(self, "messages", tuple(dict(m) for m in self.messages))
        if self.n < 1:
            raise ValueError(f"GenerationRequest.n must be >= 1, got {self.n}")

    def key_payload(self, sample_index: int) -> dict:
        return {
            "messages": [dict(m) for m in self.messages],
            "sampling": self.sampling.to_dict(),
            "sample_index": sample_index,
        }


@dataclass
class Generation:
    text: str
    completion_tokens: int
    prompt_tokens: int
    token_logprobs: list[float] | None = None
    finish_reason: str = "stop"  # "stop" (end of sequence / stop string) or "length" (hit max_tokens)
    # The reply's token ids (end-of-turn token included) when the backend has them: what RL updates
    # on. Not cached: the cache serves stages that need the text only.
    token_ids: list[int] | None = field(default=None, compare=False, repr=False)
    # Per generated token, from the top-k log-probabilities of its position (sampling.top_logprobs
    # > 0): the entropy H_k and log max_v p (debatelab.estimators.tokens). None when not asked for,
    # or when the server returned no top-k. Only these summaries are cached, never the top-k lists.
    token_entropies: list[float] | None = None
    token_max_logprobs: list[float] | None = None
    # A reasoning model's chain of thought, kept apart from `text` (gpt-oss's analysis channel,
    # `chat.split_harmony`; an OpenAI-compatible server's `reasoning_content`): `text` is only what
    # the model answers (its final channel), the one text graded, stored and shown to peers; the
    # token counts include the reasoning. None for a model that does not reason apart.
    reasoning: str | None = None
    # Of `prompt_tokens`, those an API served from its prompt cache (OpenAI's
    # `usage.prompt_tokens_details.cached_tokens`, billed at the cached-input price); 0 where the
    # server says nothing and for local engines.
    cached_tokens: int = 0

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if k != "token_ids"}

    @classmethod
    def from_dict(cls, d: dict) -> Generation:
        """From a cache row; a row of a part written before a field existed reads it as None."""

        def floats(name):
            values = d.get(name)
            return None if values is None else [float(x) for x in values]

        return cls(
            text=d["text"],
            completion_tokens=int(d["completion_tokens"]),
            prompt_tokens=int(d["prompt_tokens"]),
            token_logprobs=floats("token_logprobs"),
            finish_reason=d.get("finish_reason") or "stop",
            token_entropies=floats("token_entropies"),
            token_max_logprobs=floats("token_max_logprobs"),
            reasoning=d.get("reasoning"),
            cached_tokens=int(d.get("cached_tokens") or 0),
        )


@dataclass
class ScoredText:
    """Teacher-forced log-probabilities of a given assistant reply under a chat prompt."""

    token_logprobs: list[float]
    prompt_tokens: int

    @property
    def mean_logprob(self) -> float:
        return sum(self.token_logprobs) / max(len(self.token_logprobs), 1)


ProgressCallback = Callable[[int], None]  # called with the number of generations just finished


class Backend(abc.ABC):
    """An inference engine for one model."""

    #: A stable identity of the model (path or hub id plus revision); part of every cache key.
    model_id: str

    @abc.abstractmethod
    def generate(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[list[Generation]]:
        """Return, for each request, a list of `request.n` generations, in order."""

    @abc.abstractmethod
    def score(self, prompts: Sequence[Sequence[Message]], replies: Sequence[str]) -> list[ScoredText]:
        """log P(reply | prompt) token by token, the reply placed as the assistant turn."""

    def close(self) -> None:  # noqa: B027 (optional: most backends have nothing to free)
        """Free the model (GPU memory, server connections)."""


def stable_hash(payload) -> str:
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def sample_seed(seed: int, sample_index: int, messages: Sequence[Message]) -> int:
    """A per-(request, sample) seed, so each sample is reproducible on its own."""
    digest = stable_hash({"seed": seed, "sample_index": sample_index, "messages": list(messages)})
    return int(digest[:8], 16)


class ModelFileError(ValueError):
    """A weight file of a model folder that is not whole (cut short by a killed copy or a full disk)."""


#: [CHOICE] the largest safetensors header read (the format's own limit is 100 MB; real ones are KBs)
SAFETENSORS_HEADER_MAX = 100_000_000


def safetensors_problem(path: str | os.PathLike) -> str | None:
    """What makes a .safetensors file not whole, read from its header alone (an 8-byte length, then
    JSON giving each tensor's byte range): the file must end where its last tensor does, as the
    safetensors library requires; else None."""
    path = Path(path)
    size = path.stat().st_size
    with path.open("rb") as stream:
        head = stream.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than the 8-byte length its header starts with"
        length = int.from_bytes(head, "little")
        if length > min(size - 8, SAFETENSORS_HEADER_MAX):
            return f"its header says it is {length} bytes long; the file has {size}"
        try:
            header = json.loads(stream.read(length))
            ends = [int(spec["data_offsets"][1]) for name, spec in header.items() if name != "__metadata__"]
        except (ValueError, UnicodeDecodeError, AttributeError, KeyError, TypeError, IndexError):
            return "its header is not the JSON table of tensors a safetensors file starts with"
    expected = 8 + length + max(ends, default=0)
    if size != expected:
        return f"{size} bytes where its header's tensors end at byte {expected}"
    return None


def check_model_files(path: str | os.PathLike) -> None:
    """Every .safetensors file of a model folder whole (`safetensors_problem`), else a ModelFileError
    naming the file and what to do: reading the header costs a few KB per file, where loading a cut
    file fails with safetensors' own 'incomplete metadata' and no name."""
    path = Path(path)
    if not path.is_dir():
        return
    index = path / "model.safetensors.index.json"
    if index.is_file():  # a sharded model: every shard its index names
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError):
            shards = []
            problem = "not the JSON index of a sharded model (no weight_map)"
        else:
            missing = [s for s in shards if not (path / s).is_file()]
            problem = f"names shards missing from the folder: {missing[:3]}" if missing else None
        if problem:
            raise ModelFileError(
                f"{index}: {problem}; delete the folder {path} and rerun, and the rule that writes it builds it again"
            )
    for file in sorted(path.glob("*.safetensors")):
        try:
            problem = safetensors_problem(file)
        except OSError as error:  # a folder of that name, a dangling link, no permission
            problem = f"it cannot be read ({error.strerror or error})"
        if problem:
            raise ModelFileError(
                f"{file}: not a whole safetensors file ({problem}); it was cut short or damaged (a killed download or "
                f"copy, a full disk): delete the folder {path} and rerun, and the rule that writes it builds it again"
            )


def model_fingerprint(path: str | os.PathLike) -> str:
    """Identity of a model folder: path plus weight files' sizes and mtimes (no torch import); a
    cut-off weight file is a ModelFileError naming it (`check_model_files`), before any engine loads it.

    Retraining a model into the same folder changes it, so cached generations of the old
    weights are never served for the new ones.
    """
    path = Path(path)
    if not path.is_dir():
        return str(path)  # a hub id: identity is the name
    check_model_files(path)
    stats = sorted(
        (p.name, p.stat().st_size, int(p.stat().st_mtime))
        for p in path.iterdir()
        if p.suffix in (".safetensors", ".bin", ".json") and p.is_file()
    )
    return f"{path.resolve()}#{stable_hash(stats)[:16]}"
