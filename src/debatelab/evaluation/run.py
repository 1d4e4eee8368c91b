"""What the evaluation stage reads: one experiment's stage outputs, and what each protocol and
training run in it is (who debates, how long, which trained policies sit at the table).

Nothing here recomputes a stage: frames are the stages' own Parquet/CSV outputs, concatenated
over datasets and protocols. Columns are read selectively, since `turns.parquet` of a real run
holds every response text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ..confidence.streams import STREAM_COLUMNS as STREAM_SCHEMA
from ..debate import schema as debate_schema
from ..io import read_parquet_checked
from ..models import trained_source
from ..uncertainty.stage import MEASURE_COLUMNS
from ..uncertainty.stage import ROUND_COLUMNS as UNCERTAINTY_ROUNDS
from ..zero_shot import schema as zero_shot_schema

if TYPE_CHECKING:  # the config sits above the stages: an Experiment is handed in
    from ..config import Experiment


def writers_columns(schema: Sequence[str], *used: str) -> list[str]:
    """The columns of a writer's schema that the evaluation reads (`used`, in this order): each must
    be one the writer writes, so the reader's lists can't drift from the writers' (a renamed or
    dropped column fails on import, not on a run's files)."""
    unknown = [c for c in used if c not in schema]
    if unknown:
        raise ImportError(f"evaluation reads {unknown}, which the writer's schema {list(schema)} lacks")
    return list(used)


# the writers' schemas: debate.schema (questions, turns), zero_shot.schema, the uncertainty stage's
# measures and rounds, the confidence stage's streams
QUESTION_COLUMNS = writers_columns(
    debate_schema.QUESTION_COLUMNS,
    "question_id",
    "dataset",
    "protocol",
    "kind",
    "thread",
    "n_agents",
    "correct",
    "parse_failed",
    "rounds_used",
    "ncomm",
    "total_tokens",
    "pre_correct",
    "pre_unanimous",
    "pre_n_correct",
    "answers_by_round",
    "task_type",
)
TURN_COLUMNS = writers_columns(
    debate_schema.TURN_COLUMNS,
    "question_id",
    "dataset",
    "protocol",
    "thread",
    "round",
    "agent",
    "agent_index",
    "agent_config",
    "call",
    "answer",
    "correct",
    "parse_failed",
    "completion_tokens",
    "finish_reason",
)
#: the turns' columns that price their calls (`question_costs`; cached_tokens where a file has it)
TURN_COST_COLUMNS = writers_columns(
    debate_schema.TURN_COLUMNS,
    "question_id",
    "dataset",
    "protocol",
    "thread",
    "round",
    "agent_config",
    "model",
    "prompt_tokens",
    "completion_tokens",
)
#: read when a turns file has it, NaN otherwise (turns written before token entropies were recorded)
TURN_OPTIONAL_COLUMNS = writers_columns(debate_schema.TURN_COLUMNS, "mean_token_entropy")
ZERO_SHOT_COLUMNS = writers_columns(
    zero_shot_schema.ZERO_SHOT_COLUMNS,
    "question_id",
    "dataset",
    "agent",
    "sample",
    "answer",
    "correct",
    "completion_tokens",
)
UNCERTAINTY_COLUMNS = writers_columns(
    MEASURE_COLUMNS, "question_id", "dataset", "protocol", "thread", "correct", "u_intra", "u_inter", "u_sys"
)
STREAM_COLUMNS = writers_columns(
    STREAM_SCHEMA, "question_id", "agent", "stream", "correct", "conf_verbal", "conf_seqprob", "debated"
)
#: The backbone key of a run cell whose seats don't all stand for a paper backbone: it matches no published row.
NO_BACKBONE = ""
ROUND_COLUMNS = writers_columns(
    UNCERTAINTY_ROUNDS, "question_id", "dataset", "protocol", "round", "k_threads", "total", "epistemic", "aleatoric"
)


@dataclass(frozen=True)
class RunInfo:
    """A training run: its method and the settings that name its variant (ablations, baselines)."""

    name: str
    method: str
    settings: Mapping = field(default_factory=dict)


@dataclass(frozen=True)
class ProtocolInfo:
    """One debate protocol as the tables see it."""

    name: str
    kind: str
    rounds: int
    threads: int
    template: str
    participants: tuple[str, ...]  # agent config name per seat
    models: tuple[str, ...]  # model name per seat
    adversarial: int  # seats held by adversarial agents (UDPO's m)
    trained_runs: tuple[str, ...]  # training runs whose policies sit at the table, sorted
    datasets: tuple[str, ...]
    # Whether every seat started as the same agent (a trained seat counts as the agent it was trained
    # from); None: compare the seats' names
    same_origin: bool | None = None
    adversarial_seats: tuple[bool, ...] = ()  # per seat; empty: none

    @property
    def n_agents(self) -> int:
        return len(self.participants)

    @property
    def homogeneous(self) -> bool:
        """Every seat is the same agent, before training (UMAD's homogeneous pair): a trained pair is
        homogeneous when both policies were trained from agents with the same settings."""
        if self.same_origin is not None:
            return self.same_origin
        return len(set(self.participants)) == 1


def describe_runs(exp: Experiment) -> dict[str, RunInfo]:
    return {name: RunInfo(name, spec["method"], dict(spec)) for name, spec in exp.training_runs.items()}


def describe_protocols(exp: Experiment) -> dict[str, ProtocolInfo]:
    infos = {}
    for name, spec in exp.protocols.items():
        seats = exp.protocol_participants(name)
        models = tuple(exp.agents[a]["model"] for a in seats)
        runs = sorted({_trained_run(exp.models[m]["source"]) for m in models} - {None})
        infos[name] = ProtocolInfo(
            name=name,
            kind=spec["kind"],
            rounds=int(spec.get("rounds", 0) or 0),
            threads=int(spec.get("threads", 1) or 1),
            template=str(spec.get("template", "")),
            participants=tuple(seats),
            models=models,
            adversarial=sum(bool(exp.agents[a].get("adversarial")) for a in seats),
            adversarial_seats=tuple(bool(exp.agents[a].get("adversarial")) for a in seats),
            trained_runs=tuple(runs),
            datasets=tuple(exp.protocol_datasets(name)),
            same_origin=len({_agent_key(exp.agents[exp.origin_agent(a)]) for a in seats}) == 1,
        )
    return infos


def _agent_key(spec: Mapping) -> str:
    """An agent's settings, as one comparable value (two agents with the same settings are copies)."""
    return json.dumps(dict(spec), sort_keys=True, default=str)


def _trained_run(source: str) -> str | None:
    trained = trained_source(source)
    return trained[0] if trained else None


def _concat(paths: Sequence[str | Path], columns: Sequence[str], optional: Sequence[str] = ()) -> pd.DataFrame:
    """The files' `columns` (each must have them) and `optional` ones (NaN where a file lacks them)."""
    import pyarrow.parquet as pq

    every = [*columns, *optional]
    frames = []
    for p in paths:
        try:
            names = pq.read_schema(p).names
        except Exception:  # missing or corrupt: read_parquet_checked names the file
            names = []
        there = [c for c in optional if c in names]
        frame = read_parquet_checked(p, [*columns, *there], only_required=True)
        frames.append(frame.reindex(columns=every))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=every)


def _read_csvs(paths: Sequence[str | Path], tag_dataset_and_pair: bool = False) -> pd.DataFrame:
    """The CSVs concatenated (empty without any); an unreadable one fails naming the file."""
    from ..io import DataFileError

    frames = []
    for path in paths:
        try:
            frame = pd.read_csv(path)
        except (OSError, pd.errors.ParserError) as err:
            raise DataFileError(f"{path}: {err}") from err
        if tag_dataset_and_pair and not {"dataset", "pair"} <= set(frame.columns):
            frame = frame.assign(dataset=Path(path).parent.name, pair=Path(path).stem)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


@dataclass
class RunOutputs:
    """One experiment's outputs, loaded on first use. Paths are the rule's inputs."""

    experiment: str
    protocols: dict[str, ProtocolInfo]
    runs: dict[str, RunInfo]
    paper_datasets: dict[str, str]  # run dataset -> the paper's name for it
    question_paths: Sequence[str | Path] = ()
    turn_paths: Sequence[str | Path] = ()
    zero_shot_paths: Sequence[str | Path] = ()
    uncertainty_paths: Sequence[str | Path] = ()
    round_paths: Sequence[str | Path] = ()
    training_paths: Mapping[str, str | Path] = field(default_factory=dict)  # run -> metrics.parquet
    confidence_lift_path: str | Path | None = None
    calibration_paths: Sequence[str | Path] = ()  # calibration/{dataset}/{pair}.csv
    confidence_metric_paths: Sequence[str | Path] = ()  # protocols/{dataset}/{pair}/metrics.csv
    confidence_stream_paths: Sequence[str | Path] = ()  # streams/{dataset}/{pair}.parquet
    settings: Mapping = field(default_factory=dict)  # the evaluation config section
    agent_runs: Mapping[str, str | None] = field(default_factory=dict)  # agent -> the run that trained its model
    # paper -> model -> the paper backbone it stands for (`Experiment.paper_backbone`; None: none)
    model_backbones: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    agent_models: Mapping[str, str] = field(default_factory=dict)  # agent -> its model
    agent_max_tokens: Mapping[str, int] = field(default_factory=dict)  # agent -> its reply budget (zero-shot)
    # model -> its `price` (the rule's params, `debatelab.cost.config_prices`; empty: no dollars), and the
    # GPU-hour-priced jobs (`debatelab.cost.jobs_gpu_usd`), as the debate summary takes them
    prices: Mapping[str, Mapping | None] = field(default_factory=dict)
    gpu_jobs: Sequence[Mapping] = ()
    zero_shot_gpu_jobs: Sequence[Mapping] = ()

    @classmethod
    def from_experiment(cls, exp: Experiment, **paths) -> RunOutputs:
        evaluation = exp.config.get("evaluation") or {}
        mapping = {d: (evaluation.get("paper_datasets") or {}).get(d, exp.benchmark_of(d)) for d in exp.datasets}
        settings = {**evaluation, "calibrator": exp.calibration.get("report_calibrator")}
        agent_runs = {a: _trained_run(exp.models[spec["model"]]["source"]) for a, spec in exp.agents.items()}
        from .papers import PAPERS  # the builders read RunOutputs

        backbones = {paper: {m: exp.paper_backbone(m, paper) for m in exp.models} for paper in PAPERS}
        return cls(
            exp.name,
            describe_protocols(exp),
            describe_runs(exp),
            mapping,
            settings=settings,
            agent_runs=agent_runs,
            model_backbones=backbones,
            agent_models={a: spec["model"] for a, spec in exp.agents.items()},
            agent_max_tokens={a: int(spec.get("max_tokens") or 0) for a, spec in exp.agents.items()},
            **paths,
        )

    @cached_property
    def questions(self) -> pd.DataFrame:
        return _concat(self.question_paths, QUESTION_COLUMNS)

    @cached_property
    def turns(self) -> pd.DataFrame:
        return _concat(self.turn_paths, TURN_COLUMNS, TURN_OPTIONAL_COLUMNS)

    @property
    def priced(self) -> bool:
        """Whether a model has a price: then the tables where a paper compares cost show dollars too."""
        from ..cost import any_price, prices_of

        return any_price(prices_of(self.prices))

    @cached_property
    def question_costs(self) -> pd.DataFrame:
        """Per (dataset, protocol, question_id, thread): `cost_usd`, the dollars of the calls in
        `total_tokens`, as the debate summary counts them (`reporting.debate.question_costs`: tokens at
        each model's price, GPU-hours where a model has a `gpu_hour` price); empty without prices."""
        from ..reporting.debate import gpu_job_costs, question_costs

        keys = ["dataset", "protocol", "question_id", "thread"]
        if not self.priced:
            return pd.DataFrame(columns=[*keys, "cost_usd"])
        turns = _concat(self.turn_paths, TURN_COST_COLUMNS, ["cached_tokens"])
        turns["cached_tokens"] = turns["cached_tokens"].fillna(0)
        gpu_usd, rates = gpu_job_costs(
            [turns], self.prices, self.gpu_jobs, self.zero_shot_gpu_jobs, self.zero_shot_paths
        )
        costs = question_costs(self.questions[keys], turns, self.prices, gpu_usd, rates)
        return costs[[*keys, "cost_usd"]]

    @cached_property
    def zero_shot(self) -> pd.DataFrame:
        return _concat(self.zero_shot_paths, ZERO_SHOT_COLUMNS)

    @cached_property
    def uncertainty(self) -> pd.DataFrame:
        return _concat(self.uncertainty_paths, UNCERTAINTY_COLUMNS)

    @cached_property
    def uncertainty_rounds(self) -> pd.DataFrame:
        return _concat(self.round_paths, ROUND_COLUMNS)

    @cached_property
    def training(self) -> dict[str, pd.DataFrame]:
        return {run: read_parquet_checked(path, ["step"]) for run, path in self.training_paths.items()}

    @cached_property
    def confidence_lift(self) -> pd.DataFrame:
        return _read_csvs([self.confidence_lift_path] if self.confidence_lift_path is not None else [])

    @cached_property
    def calibration(self) -> pd.DataFrame:
        """calibration/{dataset}/{pair}.csv; the stage's CSV names neither, so both come from the path."""
        return _read_csvs(self.calibration_paths, tag_dataset_and_pair=True)

    @cached_property
    def confidence_metrics(self) -> pd.DataFrame:
        return _read_csvs(self.confidence_metric_paths)

    @cached_property
    def confidence_streams(self) -> pd.DataFrame:
        """streams/{dataset}/{pair}.parquet, with dataset and pair from the path (a validation split
        appended from another dataset entry keeps its own name in the file)."""
        frames = [
            read_parquet_checked(p, STREAM_COLUMNS)[STREAM_COLUMNS].assign(
                dataset=Path(p).parent.name, pair=Path(p).stem
            )
            for p in self.confidence_stream_paths
        ]
        return (
            pd.concat(frames, ignore_index=True)
            if frames
            else pd.DataFrame(columns=[*STREAM_COLUMNS, "dataset", "pair"])
        )

    def paper_dataset(self, dataset: str) -> str:
        return self.paper_datasets.get(dataset, dataset)

    def backbone(self, paper: str, models: Sequence[str]) -> str:
        """The backbone key of a run cell whose seats run `models` (`paper_numbers` module docstring):
        the paper backbone when every seat stands for the same one, the seats' backbones joined by
        " + " (in seat order) when they differ, NO_BACKBONE when some seat stands for none."""
        names = [(self.model_backbones.get(paper) or {}).get(m) for m in models]
        if not names or any(n is None for n in names):
            return NO_BACKBONE
        return " + ".join(dict.fromkeys(names))

    def agent_backbone(self, paper: str, agent: str) -> str:
        """The backbone key of a single agent's cells (zero-shot samples)."""
        model = self.agent_models.get(agent)
        return self.backbone(paper, [model]) if model is not None else NO_BACKBONE

    def protocols_where(self, **conditions) -> list[ProtocolInfo]:
        """Protocols whose attributes equal every condition (a callable condition is a predicate)."""
        out = []
        for info in self.protocols.values():
            if all(c(getattr(info, k)) if callable(c) else getattr(info, k) == c for k, c in conditions.items()):
                out.append(info)
        return out


# --------------------------------------------------------------------------- method labels


def run_label(run: RunInfo) -> str:
    """The paper's name for what a training run trains: UDPO and its ablations, UMAD, IPPO and
    UMAD's one-term ablations, SDRL-rand / SDRL-freq, DAPO."""
    settings = run.settings
    if run.method == "udpo":
        ablate = list((settings.get("udpo") or {}).get("ablate") or [])
        return "UDPO" if not ablate else "UDPO w/o " + "+".join(ablate)
    if run.method == "umad":
        umad = settings.get("umad") or {}
        eta, alpha = float(umad.get("eta", 0.25)), float(umad.get("alpha_au", 0.25))
        return {(True, True): "IPPO", (False, True): "Intrinsic-only", (True, False): "NLL-only"}.get(
            (eta == 0, alpha == 0), "UMAD"
        )
    if run.method == "sdrl":
        return f"SDRL-{(settings.get('sdrl') or {}).get('pair_mode', 'rand')}"
    return run.method.upper()


def protocol_method(info: ProtocolInfo, runs: Mapping[str, RunInfo], base: str = "base") -> str:
    """`base` for untrained agents, else the label of the run(s) whose policies debate."""
    if not info.trained_runs:
        return base
    return " + ".join(run_label(runs[r]) for r in info.trained_runs)


SEAT_KEYS = ["protocol", "dataset", "question_id", "thread", "agent_index"]


def seat_rounds(turns: pd.DataFrame, values: Sequence[str], last_round: Mapping[str, int]) -> pd.DataFrame:
    """Each seat's state after every round 0..last_round[protocol]: `values` of its last call in that
    round, carried forward over rounds in which it made no call (a sparse protocol's idle seats);
    NaN before its first call. One row per (SEAT_KEYS, round)."""
    columns = [*SEAT_KEYS, "round", *values]
    if turns.empty:
        return pd.DataFrame(columns=columns)
    last = turns.sort_values([*SEAT_KEYS, "round", "call"], kind="stable").drop_duplicates(
        [*SEAT_KEYS, "round"], keep="last"
    )
    frames = []
    for protocol, part in last.groupby("protocol", sort=False):
        rounds = list(range(last_round[protocol] + 1))
        wide = {}
        for value in values:
            table = part.pivot(index=SEAT_KEYS, columns="round", values=value).reindex(columns=rounds).ffill(axis=1)
            table.columns.name = "round"
            wide[value] = table.stack(future_stack=True)
        frames.append(pd.DataFrame(wide).reset_index())
    out = pd.concat(frames, ignore_index=True)
    out["round"] = out["round"].astype(int)
    return out[columns]
