"""The training methods, one registry (`METHODS`): a run's `method` names one. One module per method
holds its settings dataclass, its formulas and its trainer class (the map: `training/README.md`).

Everything that lists or dispatches on methods reads this registry: the config's checks (which runs
train every agent of a debate, the block whose `questions_per_step` divides among GPUs, the protocol
kinds a run may debate on), `TrainSettings` (its `method` and blocks), the stage jobs (the trainer
class) and `MappoSettings.resolved` (a preset's defaults). The schema's method enums list the same
names (tests/test_registries.py checks them). A new method is its module here and its entry below,
plus its name in the schema's two method enums (a settings block of its own: also a field of
`TrainSettings` and of the schema)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .dapo import DapoSettings, DapoTrainer
from .mappo import MappoSettings, MappoTrainer
from .sdrl import SdrlSettings, SdrlTrainer
from .udpo import UdpoSettings, UdpoTrainer
from .umad import UmadSettings, UmadTrainer

#: Protocol kinds of synchronous rounds of every seat, which a multi-agent training run can debate on.
SYNCHRONOUS_PROTOCOL_KINDS = ("all_to_all", "ring", "centralized")


@dataclass(frozen=True)
class TrainingMethod:
    """What a training run's `method` is: its trainer, its settings block and how the workflow runs it."""

    name: str
    multi_agent: bool  # trains every agent of a debate (rule train_agents), else one policy (rule train)
    trainer: type  # its trainer class
    settings: type  # its settings dataclass (its block of `training.runs.<run>`)
    block: str  # the key of that block in `training.runs.<run>` (a preset shares its base's)
    description: str  # one line
    spec: str  # where its paper specifies it (section / appendix of `paper`)
    paper: str
    preset: dict = field(default_factory=dict)  # the defaults the block's null values take for this method
    protocol_kinds: tuple[str, ...] = ()  # multi-agent: the debate protocol kinds it trains on
    # the importance-ratio levels its update has (`loss.RATIO_LEVELS`): "trajectory", one ratio over an
    # agent's turns of one debate, only where a rollout group is such a trajectory (UDPO's)
    ratio_levels: tuple[str, ...] = ("token", "sequence")


METHODS: dict[str, TrainingMethod] = {
    m.name: m
    for m in (
        TrainingMethod(
            "dapo",
            False,
            DapoTrainer,
            DapoSettings,
            "dapo",
            "DAPO: group advantages, clip-higher, token-mean loss, dynamic sampling, soft overlong punishment",
            "§3-5, §6.1.1, App. A.1",
            "DAPO, the RL algorithm SDRL builds on (Liu et al., arXiv:2601.22297)",
        ),
        TrainingMethod(
            "sdrl",
            False,
            SdrlTrainer,
            SdrlSettings,
            "sdrl",
            "SDRL: DAPO plus a second turn debating two of the prompt's own rollouts, updated together",
            "§3-5, §6.1.1, App. A.1",
            "Liu et al., arXiv 2601.22297 (SDRL)",
        ),
        TrainingMethod(
            "udpo",
            True,
            UdpoTrainer,
            UdpoSettings,
            "udpo",
            "UDPO: uncertainty-weighted trajectory rewards per seat, batch-mean advantages, uncertainty-driven replay",
            "§4, App. A",
            "Tang et al., arXiv 2602.07186 (UDPO)",
            protocol_kinds=SYNCHRONOUS_PROTOCOL_KINDS,
            ratio_levels=("token", "sequence", "trajectory"),
        ),
        TrainingMethod(
            "umad",
            True,
            UmadTrainer,
            UmadSettings,
            "umad",
            "UMAD: team reward, epistemic-influence reward, group advantages over G threads, aleatoric "
            "weights, turns updated in sequence; eta = alpha_au = 0 is IPPO",
            "§4.2, App. C.2 (Algorithm 2)",
            "Qiao et al., arXiv 2603.01221 (UMAD)",
            protocol_kinds=SYNCHRONOUS_PROTOCOL_KINDS,
        ),
        TrainingMethod(
            "mappo",
            True,
            MappoTrainer,
            MappoSettings,
            "mappo",
            "MAPPO (approximation): shared terminal reward r_task + w_c (1 - D), a centralized critic over "
            "agreement features",
            "Tang et al., arXiv 2602.07186 §5.1 (UDPO's baselines, approximated)",
            "Yu et al. 2022, MAPPO",
            preset={"consensus_weight": 1.0, "peer_swap_prob": 0.0},
            protocol_kinds=("all_to_all",),
        ),
        TrainingMethod(
            "rmaac",
            True,
            MappoTrainer,
            MappoSettings,
            "mappo",
            "RMAAC (approximation): MAPPO's trainer on r_task alone, shown peers swapped for wrong replies",
            "Tang et al., arXiv 2602.07186 §5.1 (UDPO's baselines, approximated)",
            "He et al. 2023, RMAAC",
            preset={"consensus_weight": 0.0, "peer_swap_prob": 0.2},
            protocol_kinds=("all_to_all",),
        ),
    )
}


def training_method(name: str) -> TrainingMethod:
    """The training method `name`, or a ValueError naming the known ones."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"training: unknown method {name!r} (known: {list(METHODS)})") from None


def multi_agent_methods() -> tuple[str, ...]:
    """The training methods that train every agent of a debate."""
    return tuple(name for name, m in METHODS.items() if m.multi_agent)
