"""Dollars: a price per model, what generations cost, the budget cap, and the dry run's estimate.

Prices
  `models.<name>.price` in the config (`input_per_mtok`, `output_per_mtok`, `cached_input_per_mtok`:
  dollars per million tokens; `gpu_hour`: dollars per GPU-hour). A generation costs
  (prompt − cached) × input + cached × cached input + completion × output; cached input is billed at
  the input price where no cached price is given, and only an API that reports
  `usage.prompt_tokens_details.cached_tokens` has cached tokens. A model without a price costs 0
  (a local model: its GPUs cost nothing unless `gpu_hour` is given; then a job's cost is its measured
  seconds × the GPUs its plan holds × `gpu_hour`, `gpu_job_usd`; the summaries apply it per job from its
  benchmark file and plan, `jobs_gpu_usd`, below).

Budget (`Budget`)
  `budget_usd` caps what the experiment spends on priced models, `budget_per_job_usd` what one
  job's requests cost. The experiment's spending is read from its generation cache
  (`results/{experiment}/cache/{model}/part-*.parquet`: every unit there was paid for once), so it
  survives kills and reruns and counts the units of jobs running beside this one as soon as they are
  written; a job's spending is the cost of the units its requests need, cached or sent. Before each
  unit it would send, the cache asks `Budget.before_unit`: a unit that would pass a cap (spent +
  the mean cost per generation of the model's units this job has needed so far, cached or sent, ×
  the unit's size; [CHOICE] with no such unit yet the first is let through unless a cap is already
  reached, so a job can pass a cap by at most one unit) raises `BudgetExceeded`, whose message says
  what was spent, the cap and how to raise it. Units of a model that costs nothing always run.

Estimate (`estimate_cost`, printed by every dry run that names a price)
  questions × samples of every agent (zero-shot) plus questions × threads × rounds × participants of
  every protocol (debate), each call `cost_estimate.prompt_tokens` of prompt (a debate call also
  carries its peers' replies) and the agent's `max_tokens` of reply unless
  `cost_estimate.completion_tokens` is set, plus what the cap counts besides: the confidences elicited
  on every zero-shot sample (`zero_shot.estimators`) and every seat's last debate turn (a protocol's
  `confidence`), and the attack rewriter's attempts. An upper bound for the replies, which ignores
  early stops and unanimous questions a protocol skips.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .prompts import CONFIDENCE_PROMPT

log = logging.getLogger(__name__)

MTOK = 1_000_000


@dataclass(frozen=True)
class Price:
    """Dollars per million input / output / cached-input tokens, and per GPU-hour."""

    input_per_mtok: float = 0.0
    output_per_mtok: float = 0.0
    cached_input_per_mtok: float | None = None  # None: cached input is billed at the input price
    gpu_hour: float = 0.0

    def __post_init__(self):
        for name in ("input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "gpu_hour"):
            value = getattr(self, name)
            if value is not None and not is_dollars(value):
                # .inf would price every call at inf or, times 0 tokens, NaN: an estimate of $0.00
                raise ValueError(f"{name} = {value!r}: a price is a finite number of dollars >= 0")

    @property
    def per_token(self) -> bool:
        """Whether any token is priced (a budget counts only such models)."""
        return bool(self.input_per_mtok or self.output_per_mtok or self.cached_input_per_mtok)

    @property
    def cached_rate(self) -> float:
        return self.input_per_mtok if self.cached_input_per_mtok is None else self.cached_input_per_mtok

    def tokens_usd(self, prompt_tokens: float, completion_tokens: float, cached_tokens: float = 0) -> float:
        cached = min(cached_tokens, prompt_tokens)
        return (
            (prompt_tokens - cached) * self.input_per_mtok
            + cached * self.cached_rate
            + completion_tokens * self.output_per_mtok
        ) / MTOK

    @classmethod
    def from_config(cls, spec: Mapping | None, where: str = "price") -> Price:
        if spec is None:
            return cls()
        unknown = set(spec) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"{where}: unknown field(s) {sorted(unknown)}; expected {sorted(cls.__dataclass_fields__)}"
            )
        try:
            return cls(**{k: v for k, v in spec.items() if v is not None or k == "cached_input_per_mtok"})
        except ValueError as error:
            raise ValueError(f"{where}.{error}") from None


def is_dollars(value) -> bool:
    """Whether a price or a cap is a finite number >= 0 (NaN compares false with every cap: no cap at all)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def model_prices(config: Mapping) -> dict[str, Price]:
    """{model name: its Price} from the config's `models` (no price: all zero)."""
    return {
        name: Price.from_config(spec.get("price"), f"models.{name}.price") for name, spec in config["models"].items()
    }


def prices_of(prices: Mapping | None) -> dict[str, Price]:
    """{model: Price} from a rule's params (each model's `price` mapping, or None) or Prices already."""
    return {
        name: p if isinstance(p, Price) else Price.from_config(p, f"models.{name}.price")
        for name, p in (prices or {}).items()
    }


def config_prices(config: Mapping) -> dict[str, dict | None]:
    """Each model's `price` as the summary rules' params carry it (plain data)."""
    return {name: spec.get("price") for name, spec in config["models"].items()}


def usd_text(frame: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """A copy with the dollar `columns` written to 6 significant digits (a CSV's %.4f would print a
    loopback run's cents as 0.0000)."""
    out = frame.copy()
    for column in columns:
        out[column] = [("" if pd.isna(v) else f"{v:.6g}") for v in out[column]]
    return out


def any_price(prices: Mapping[str, Price]) -> bool:
    return any(p.per_token or p.gpu_hour for p in prices.values())


def tokens_usd(frame: pd.DataFrame, prices: Mapping[str, Price], model_column: str = "model") -> pd.Series:
    """Each row's dollars from its `prompt_tokens`, `completion_tokens` and `cached_tokens` (0 when the
    column is absent, as in files written before it existed) at its model's price."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=float)
    cached = frame["cached_tokens"] if "cached_tokens" in frame.columns else pd.Series(0, index=frame.index)
    prompt = frame["prompt_tokens"].astype(float)
    cached = cached.fillna(0).astype(float).clip(upper=prompt)
    model = frame[model_column]

    def rate(attribute):
        return model.map(lambda m: getattr(prices.get(m) or Price(), attribute)).astype(float)

    return (
        (prompt - cached) * rate("input_per_mtok")
        + cached * rate("cached_rate")
        + frame["completion_tokens"].astype(float) * rate("output_per_mtok")
    ) / MTOK


def gpu_job_usd(seconds: float, gpus: float, price: Price) -> float:
    """A local job's cost: its measured wall time × the GPUs its plan holds × the model's `gpu_hour`."""
    return float(seconds) / 3600.0 * float(gpus) * price.gpu_hour


# --- the budget ------------------------------------------------------------------------------


class BudgetExceeded(RuntimeError):
    """A job stopped before a generation unit that would pass `budget_usd` or `budget_per_job_usd`."""


def _part_usd(path: Path, price: Price) -> float:
    import pyarrow.parquet as pq

    names = set(pq.ParquetFile(path).schema_arrow.names)
    columns = [c for c in ("prompt_tokens", "completion_tokens", "cached_tokens") if c in names]
    table = pq.read_table(path, columns=columns).to_pydict()
    cached = table.get("cached_tokens") or [0] * len(table["prompt_tokens"])
    return sum(
        price.tokens_usd(p or 0, c or 0, k or 0)
        for p, c, k in zip(table["prompt_tokens"], table["completion_tokens"], cached)
    )


class Budget:
    """The caps of one job and what has been spent against them (module docstring)."""

    def __init__(
        self,
        prices: Mapping[str, Price],
        *,
        cap_usd: float | None = None,
        job_cap_usd: float | None = None,
        cache_root: str | Path | None = None,
        experiment: str = "",
    ):
        for name, value in (("budget_usd", cap_usd), ("budget_per_job_usd", job_cap_usd)):
            if value is not None and not is_dollars(value):
                raise ValueError(f"{name} = {value!r}: a cap is a finite number of dollars >= 0 (null: no cap)")
        self.prices = dict(prices)
        self.cap_usd = cap_usd
        self.job_cap_usd = job_cap_usd
        self.cache_root = Path(cache_root) if cache_root is not None else None
        self.experiment = experiment
        self.job_usd = 0.0  # the cost of the units this job's requests needed so far, cached or sent
        self.sent_usd = 0.0  # of which this run sent
        self._parts: dict[Path, float] = {}
        self._mean: dict[str, tuple[float, int]] = {}  # model -> (dollars, generations) of this job's units so far

    @classmethod
    def from_config(cls, config: Mapping, cache_root: str | Path | None = None) -> Budget:
        """The budget of a job of this (validated) experiment config; the cache under results/{experiment}/cache."""
        experiment = config["experiment"]
        return cls(
            model_prices(config),
            cap_usd=config.get("budget_usd"),
            job_cap_usd=config.get("budget_per_job_usd"),
            cache_root=cache_root if cache_root is not None else Path("results") / experiment / "cache",
            experiment=experiment,
        )

    @property
    def active(self) -> bool:
        return (self.cap_usd is not None or self.job_cap_usd is not None) and any(
            p.per_token for p in self.prices.values()
        )

    def price(self, model: str | None) -> Price:
        return (self.prices.get(model) or Price()) if model is not None else Price()

    def experiment_usd(self) -> float:
        """Dollars of every unit in the experiment's cache (read once per part, new parts as they appear)."""
        if self.cache_root is None or not self.cache_root.is_dir():
            return sum(self._parts.values())
        for model, price in self.prices.items():
            if not price.per_token:
                continue
            for part in (self.cache_root / model).glob("part-*.parquet"):
                if part not in self._parts:
                    try:
                        self._parts[part] = _part_usd(part, price)
                    except Exception as error:  # a part moved aside or cut off: the cache says so when it loads
                        log.warning("budget: cache part %s does not read (%s); not counted", part, error)
                        self._parts[part] = 0.0
        return sum(self._parts.values())

    def served(self, model: str | None, generations: Iterable) -> None:
        """Units of this job's requests that the cache already held: they count to the job's spending."""
        price = self.price(model)
        if price.per_token:
            generations = list(generations)
            usd = sum(price.tokens_usd(g.prompt_tokens, g.completion_tokens, g.cached_tokens) for g in generations)
            self.job_usd += usd
            self._count(model, usd, len(generations))

    def sent(self, model: str | None, generations: list) -> float:
        """A unit this job generated: its cost counts to the job (the experiment reads it from the cache)."""
        price = self.price(model)
        usd = sum(price.tokens_usd(g.prompt_tokens, g.completion_tokens, g.cached_tokens) for g in generations)
        self.job_usd += usd
        self.sent_usd += usd
        self._count(model, usd, len(generations))
        return usd

    def _count(self, model, usd: float, generations: int) -> None:
        spent, n = self._mean.get(model, (0.0, 0))
        self._mean[model] = (spent + usd, n + generations)

    def projected(self, model: str | None, size: int) -> float:
        spent, n = self._mean.get(model, (0.0, 0))
        return spent / n * size if n else 0.0

    def before_unit(self, model: str | None, size: int, *, desc: str, done: int, total: int, left: int) -> None:
        """Raise BudgetExceeded when the next unit of `size` generations of `model` would pass a cap.

        `done` / `total`: this step's units finished (cached or sent) and all; `left`: its generations to do."""
        if not self.price(model).per_token or not self.active:
            return
        next_usd = self.projected(model, size)
        checks = []
        if self.cap_usd is not None:
            checks.append(("budget_usd", f"the experiment {self.experiment!r}", self.experiment_usd(), self.cap_usd))
        if self.job_cap_usd is not None:
            checks.append(("budget_per_job_usd", "this job", self.job_usd, self.job_cap_usd))
        for key, who, spent, cap in checks:
            if spent >= cap or spent + next_usd > cap:
                raise BudgetExceeded(
                    f"budget: {who} has spent ${spent:.4f} of its cap {key} = ${cap:.4f}"
                    + (
                        f", and the next unit ({size} generations of {model}) would cost about ${next_usd:.4f}"
                        if next_usd
                        else ""
                    )
                    + f". Stopped before it: {desc}: {done} of {total} units done and cached, {left} generations "
                    f"left (this run sent ${self.sent_usd:.4f}). To go on, raise {key} in the config (or "
                    f"`snakemake --config {key}=<dollars>`) and rerun: the finished units come from the cache and only "
                    "the missing requests are sent"
                )


# --- the dry run's estimate --------------------------------------------------------------------


#: [CHOICE] prompt tokens the self-report question adds after the reply: its text at 2 characters a
#: token and the chat template's turn markers, more than any tokenizer of English makes of it
CONFIDENCE_PROMPT_TOKENS = len(CONFIDENCE_PROMPT) // 2 + 16


def _dataset_questions(config: Mapping, dataset: str) -> int | None:
    return config["datasets"][dataset].get("limit")


def estimate_cost(config: Mapping) -> pd.DataFrame:
    """Upper-bound calls, tokens and dollars of the zero-shot and debate stages (module docstring), one
    row per (stage, dataset, agent or protocol, model); `usd` is NaN where a dataset has no `limit`
    (its size is known only once downloaded)."""
    prices = model_prices(config)
    guess = config.get("cost_estimate") or {}
    prompt = int(guess.get("prompt_tokens") or 200)
    completion_override = guess.get("completion_tokens")
    agents = config["agents"]
    zero_shot = config.get("zero_shot") or {}
    debate = config.get("debate") or {}
    seeds = (config.get("evaluation") or {}).get("seeds") or 1

    def reply(agent: str, dataset: str) -> int:
        if completion_override:
            return int(completion_override)
        return int(config["datasets"][dataset].get("max_tokens") or agents[agent].get("max_tokens") or 256)

    verbal_samples = zero_shot.get("verbal_samples", 3)
    verbal_reply = zero_shot.get("verbal_max_tokens", 8)

    def confidence(stage, dataset, who, model, items, chat, answer, estimators):
        """Rows of the confidences elicited on `items` replies of `answer` tokens to a `chat`: the
        self-report asks again after the reply (`verbal_samples` calls), sequence probability scores
        the answer after the chat and after its content-free twin (2 calls, no reply generated)."""
        if "verbal" in estimators:
            calls = None if items is None else items * verbal_samples
            context = chat + answer + CONFIDENCE_PROMPT_TOKENS
            rows.append((stage, dataset, f"{who} verbal", model, calls, context, verbal_reply))
        if "seqprob" in estimators:  # the answer is scored as reply tokens (the cache bills it so)
            rows.append((stage, dataset, f"{who} seqprob", model, None if items is None else items * 2, chat, answer))

    rows = []
    for dataset, spec in config["datasets"].items():
        if spec.get("evaluate") is False:
            continue
        questions = _dataset_questions(config, dataset)
        for agent, a in agents.items():
            samples = a.get("samples") or zero_shot.get("samples") or 1
            calls = None if questions is None else questions * samples
            rows.append(("zero_shot", dataset, agent, a["model"], calls, prompt, reply(agent, dataset)))
            estimators = zero_shot.get("estimators") or ()
            confidence("zero_shot", dataset, agent, a["model"], calls, prompt, reply(agent, dataset), estimators)
        for name, p in (debate.get("protocols") or {}).items():
            if p.get("kind") == "self_consistency" or (p.get("datasets") and dataset not in p["datasets"]):
                continue
            seats = p.get("participants") or debate.get("participants") or list(agents)
            rounds = p.get("rounds", 2)
            threads = p.get("threads") or seeds
            for agent in seats:
                calls = None if questions is None else questions * threads * rounds
                out = p.get("debate_max_tokens") or reply(agent, dataset)
                context = prompt + len(seats) * reply(agent, dataset)  # the question and every seat's last reply
                rows.append(("debate", dataset, f"{name}:{agent}", agents[agent]["model"], calls, context, out))
                last_turns = None if questions is None else questions * threads  # each seat's last turn
                model = agents[agent]["model"]
                confidence(
                    "debate", dataset, f"{name}:{agent}", model, last_turns, context, out, p.get("confidence") or ()
                )
        attack = config.get("attack") or {}
        if attack.get("rewriter") and any(a.get("adversarial") for a in agents.values()):
            # one rewrite of the dataset's system prompt per attempt at most
            rows.append(
                (
                    "attack",
                    dataset,
                    "rewriter",
                    attack["rewriter"],
                    attack.get("attempts", 4),
                    prompt,
                    attack.get("max_tokens", 400),
                )
            )
    frame = pd.DataFrame(
        rows, columns=["stage", "dataset", "who", "model", "calls", "prompt_per_call", "reply_per_call"]
    )
    frame = frame.groupby(["stage", "dataset", "who", "model"], sort=False, as_index=False).agg(
        calls=("calls", lambda c: c.sum(min_count=len(c))),
        prompt_per_call=("prompt_per_call", "first"),
        reply_per_call=("reply_per_call", "first"),
    )
    frame["prompt_tokens"] = frame["calls"] * frame["prompt_per_call"]
    frame["completion_tokens"] = frame["calls"] * frame["reply_per_call"]
    frame["usd"] = [
        prices.get(m, Price()).tokens_usd(p, c) if not (pd.isna(p) or pd.isna(c)) else math.nan
        for m, p, c in zip(frame["model"], frame["prompt_tokens"], frame["completion_tokens"])
    ]
    return frame


def estimate_message(config: Mapping) -> tuple[str, bool] | None:
    """The dry run's lines on cost and whether the estimate passes `budget_usd`; None where no model has
    a token price (nothing to say)."""
    prices = model_prices(config)
    if not any(p.per_token for p in prices.values()):
        return None
    frame = estimate_cost(config)
    priced = frame[frame["model"].map(lambda m: prices[m].per_token)]
    unknown = sorted(set(priced.loc[priced["usd"].isna(), "dataset"]))
    total = float(priced["usd"].sum())
    by_stage = priced.groupby("stage", sort=False)["usd"].sum()
    parts = ", ".join(f"{stage} ${usd:.2f}" for stage, usd in by_stage.items())
    text = (
        f"cost estimate (upper bound: questions × agents × rounds × expected tokens, replies at max_tokens unless "
        f"cost_estimate.completion_tokens is set): ${total:.2f} ({parts})"
    )
    if unknown:
        text += f"; not counted: datasets without a limit ({', '.join(unknown)}), whose size is known once downloaded"
    cap = config.get("budget_usd")
    over = cap is not None and total > cap
    if cap is not None:
        text += f"; budget_usd = ${cap:.2f}"
        if over:
            text += (
                ": the estimate passes the cap, so the run may stop before it is done (finished units stay cached; "
                "raise budget_usd and rerun to go on)"
            )
    return text, over


# --- GPU-hours ---------------------------------------------------------------------------------
# A local model priced by the GPU-hour costs what its jobs held GPUs for: each zero_shot / debate job's
# measured wall seconds (its Snakemake benchmark file, `s`) × the GPUs its plan gives the model's
# engine (`debatelab.gpu_plan`) × the model's `gpu_hour`. The summary rules receive, per job, its
# benchmark file and its GPU groups (`gpu_job_spec`): which models share which GPUs.


def benchmark_seconds(path: str | Path) -> float:
    """A job's measured wall seconds: the `s` column of its Snakemake benchmark file, summed over its rows
    (a rule with `repeat` runs the job once per row; the workflow's rules run once)."""
    frame = pd.read_csv(path, sep="\t")
    if "s" not in frame.columns or frame.empty:
        raise ValueError(f"{path}: not a Snakemake benchmark file (no `s` column or no row)")
    return float(pd.to_numeric(frame["s"], errors="raise").sum())


def engine_gpus(placement: Mapping[str, Sequence[int]], shares: Mapping[str, float]) -> dict[str, float]:
    """GPUs each engine of a plan holds: a GPU one engine has alone counts whole to it; a GPU several
    engines share is split by their memory shares (`JobPlan.shares`, each engine's
    gpu_memory_utilization; equal parts where none is known). The parts sum to the job's GPUs."""
    on_gpu: dict[int, list[str]] = {}
    for name, gpus in placement.items():
        for g in gpus:
            on_gpu.setdefault(g, []).append(name)
    held = dict.fromkeys(placement, 0.0)
    for names in on_gpu.values():
        weights = {n: float(shares.get(n) or 0.0) for n in names}
        total = sum(weights.values())
        for n in names:
            held[n] += weights[n] / total if total > 0 else 1.0 / len(names)
    return held


def gpu_groups(plan, engine_models: Mapping[str, Sequence[str]], local_models: Sequence[str]) -> list[list]:
    """[[models, GPUs], ...] of one job: per engine of the plan, the models it serves (an engine serving
    adapters serves several) and the GPUs it holds (`engine_gpus`). A plan without placement that still
    holds GPUs (the laptop fallback of `rules/common.smk`, when a model's size is unknown) is one group:
    the job's local models on all of them. A job whose models are all remote holds none for them."""
    if plan.placement:
        held = engine_gpus(plan.placement, plan.shares)
        return [[sorted(engine_models.get(name) or [name]), held[name]] for name in plan.placement]
    if plan.held and local_models:
        return [[sorted(set(local_models)), float(plan.held)]]
    return []


def groups_gpu_usd(
    seconds: float, groups: Sequence[Sequence], prices: Mapping[str, Price], tokens: Mapping[str, float] | None = None
) -> dict[str, float]:
    """{model: dollars} of one job of `seconds` with GPU `groups` (`gpu_groups`): each group's
    GPU-seconds are split among its models by `tokens` ({model: tokens it generated in the job}; equal
    parts when none has any), each part at `gpu_job_usd` with its model's `gpu_hour`. [CHOICE] A
    group of one model (an engine of its own) pays for its GPUs whatever it generated: the plan held
    them for the whole job. Only models on one engine (adapters on their base) or the fallback group
    share by tokens, since there the plan gives no slice per model."""
    tokens = tokens or {}
    out: dict[str, float] = {}
    for models, count in groups:
        weights = {m: float(tokens.get(m, 0) or 0) for m in models}
        total = sum(weights.values())
        for m in models:
            part = weights[m] / total if total > 0 else 1.0 / len(models)
            out[m] = out.get(m, 0.0) + gpu_job_usd(seconds, float(count) * part, prices.get(m) or Price())
    return out


def any_gpu_price(prices: Mapping[str, Price | Mapping | None]) -> bool:
    """Whether a model has a `gpu_hour` price (then the summaries read the jobs' benchmark files)."""
    return any(p.gpu_hour for p in prices_of(prices).values())


def jobs_gpu_usd(
    jobs: Sequence[Mapping], key: Sequence[str], tokens: pd.DataFrame, prices: Mapping[str, Price]
) -> dict[tuple, float]:
    """{job key: dollars} of GPU-hour-priced jobs. `jobs`: the summary rule's `gpu_jobs` param, one
    mapping per job with its `benchmark` file, its key columns (`key`, e.g. dataset and agent) and
    `groups` (`gpu_groups`); `tokens`: rows with the key columns, `model`, `prompt_tokens` and
    `completion_tokens` (the job's generations) to split a shared engine's GPUs by."""
    out = {}
    for job in jobs:
        k = tuple(job[c] for c in key)
        mine = tokens
        for c, v in zip(key, k):
            mine = mine[mine[c] == v]
        per_model = (
            (mine["prompt_tokens"].astype(float) + mine["completion_tokens"].astype(float)).groupby(mine["model"]).sum()
        )
        usd = groups_gpu_usd(benchmark_seconds(job["benchmark"]), job["groups"], prices, per_model.to_dict())
        out[k] = out.get(k, 0.0) + sum(usd.values())
    return out
