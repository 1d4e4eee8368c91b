"""One agent of an experiment (config `agents.<name>`): a model, a backend and its sampling settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import prompts
from .base import SamplingParams


@dataclass(frozen=True)
class AgentSpec:
    """One agent of an experiment: a model, a backend and its sampling settings (config `agents.<name>`;
    defaults match config/schema.yaml)."""

    name: str
    model: str
    backend: str = "transformers"
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    system_prompt: str | None = None
    backend_options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 1:
            raise ValueError(
                f"agent {self.name!r}: temperature >= 0, top_p in (0, 1] and max_tokens >= 1 are required, got "
                f"{self.temperature}, {self.top_p}, {self.max_tokens}"
            )

    @classmethod
    def from_config(cls, name: str, cfg: dict, attack_prompt: str | None = None) -> AgentSpec:
        """`attack_prompt`: the dataset's AutoTransform rewrite for an adversarial agent (None: the fixed one)."""
        known = {
            k: cfg[k] for k in ("model", "backend", "temperature", "top_p", "max_tokens", "system_prompt") if k in cfg
        }
        if cfg.get("adversarial"):
            known["system_prompt"] = attack_prompt or prompts.ATTACK_SYSTEM_PROMPT
        return cls(name=name, backend_options=dict(cfg.get("backend_options") or {}), **known)

    def sampling(self, seed: int = 0, logprobs: bool = False, top_logprobs: int = 0) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=seed,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
        )
