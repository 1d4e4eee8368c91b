"""The training methods: one entry per name a run's `method` may take, and what it is.

Everything that lists or dispatches on methods reads this table: `TrainSettings`'s check of
`method`, the config checks (`debatelab.config`: which runs train every agent of a debate, the
settings block whose `questions_per_step` divides among GPUs, the protocol kinds a run may debate
on), the stage jobs (`stage.train_job`, `multi_agent_stage.train_agents_job`: the trainer class)
and `MappoSettings.resolved` (a preset's defaults). `config/schema.yaml` lists the names twice
(the `method` enum and the multi-agent `if`); a test checks them against this table.

Pure data: importing it loads no method and no torch (the config imports it). A method's trainer
and settings class are named by module and attribute and imported on use (`Method.trainer_class`).

Adding a method: a module in `methods/` (its settings dataclass, formulas and trainer class, a
`DebateTrainer` or single-policy `Trainer` subclass), an entry here, its name in the schema's
enums (and, with a settings block, that block in the schema and a field of `TrainSettings`).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field

#: Protocol kinds of synchronous rounds of every seat, which a multi-agent run can train on.
SYNCHRONOUS_KINDS = ("all_to_all", "ring", "centralized")


@dataclass(frozen=True)
class Method:
    name: str
    multi_agent: bool  # trains every agent of a debate (rule train_agents), else one policy (rule train)
    module: str  # the module holding its trainer (and settings class), under debatelab.training.methods
    trainer: str  # its trainer class in `module`
    description: str  # one line
    spec: str  # where the method is specified (../shared/specs/)
    paper: str
    settings: str | None = None  # its settings dataclass in `module`; None: its knobs are TrainSettings fields
    block: str | None = None  # the key of that block in `training.runs.<run>` (a preset shares its base's)
    preset: dict = field(default_factory=dict)  # defaults the block's null values take for this method
    protocol_kinds: tuple[str, ...] = ()  # multi-agent: the debate protocol kinds it trains on

    def trainer_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.trainer)

    def settings_class(self) -> type | None:
        return getattr(importlib.import_module(self.module), self.settings) if self.settings else None


def _module(name: str) -> str:
    return f"debatelab.training.methods.{name}"


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("dapo", False, _module("dapo"), "DapoTrainer",
           "DAPO: group advantages, clip-higher, token-mean loss, dynamic sampling, soft overlong punishment",
           "spec 003 §2-3, §6", "DAPO (the base of SDRL, spec 003)"),
    Method("sdrl", False, _module("sdrl"), "SdrlTrainer",
           "SDRL: DAPO plus a second turn debating two of the prompt's own rollouts, updated together",
           "spec 003 §2-3, §6", "Liu et al., arXiv 2601.22297 (SDRL)"),
    Method("udpo", True, _module("udpo"), "UdpoTrainer",
           "UDPO: uncertainty-weighted trajectory rewards per seat, batch-mean advantages, "
           "uncertainty-driven replay",
           "spec 000 §5", "Tang et al., The Value of Variance (UDPO)", settings="UdpoSettings", block="udpo",
           protocol_kinds=SYNCHRONOUS_KINDS),
    Method("umad", True, _module("umad"), "UmadTrainer",
           "UMAD: team reward, epistemic-influence reward, group advantages over G threads, aleatoric weights, "
           "turns updated in sequence; eta = alpha_au = 0 is IPPO",
           "spec 001 §4.3", "Qiao et al., arXiv 2603.01221 (UMAD)", settings="UmadSettings", block="umad",
           protocol_kinds=SYNCHRONOUS_KINDS),
    Method("mappo", True, _module("mappo"), "MappoTrainer",
           "MAPPO (approximation): shared terminal reward r_task + w_c (1 - D), a centralized critic over agreement "
           "features", "spec 000 §8", "Yu et al. 2022, MAPPO", settings="MappoSettings", block="mappo",
           preset={"consensus_weight": 1.0, "peer_swap_prob": 0.0}, protocol_kinds=("all_to_all",)),
    Method("rmaac", True, _module("mappo"), "MappoTrainer",
           "RMAAC (approximation): MAPPO's trainer on r_task alone, shown peers swapped for wrong replies (p 0.2)",
           "spec 000 §8", "He et al. 2023, RMAAC", settings="MappoSettings", block="mappo",
           preset={"consensus_weight": 0.0, "peer_swap_prob": 0.2}, protocol_kinds=("all_to_all",)),
)}


def method(name: str) -> Method:
    """The method `name`, or a ValueError naming the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"training: unknown method {name!r} (known: {list(METHODS)})") from None


def multi_agent_methods() -> tuple[str, ...]:
    """The methods that train every agent of a debate."""
    return tuple(name for name, m in METHODS.items() if m.multi_agent)


def blocks() -> dict[str, Method]:
    """Settings block -> the first method holding it (its `settings_class` builds the block)."""
    out: dict[str, Method] = {}
    for m in METHODS.values():
        if m.block is not None:
            out.setdefault(m.block, m)
    return out
