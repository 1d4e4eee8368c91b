"""Does a trainer make the micro model better? One run of a learning config, trained in-process from
the shipped micro model exactly as its rule trains it, then compared with its base on held-out
questions by the exact paired test.

`learning_check(experiment, run, work_dir, steps=...)` resolves the run from the experiment, which
the caller loads (`config.load_experiment`; the config is handed down, never imported here): its
method, sizes and prompts are the config's, only `steps` and the held-out curve may be overridden.
It runs UDPO's warm-up and coefficient jobs first where the method needs them, trains with
`training.stage.train_job`, and answers `questions` held-out questions with the base and the trained
model (the run's first trained agent alone, one reply each at the run's sampling, a seed fixed per
question, so the two differ only by their weights). The difference comes with its exact 95 %
interval conditional on the discordant questions and McNemar's exact p
(`intervals.paired_counts_difference`). `benchmarks/micro_learning.py` calls it.

`sabotage`: a name of `SABOTAGE`, a bug injected into the trainer for the run, to show that the check
fails on a broken trainer: the advantages' sign flipped, or the peers' replies dropped from every
debate prompt.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from ..config import Experiment

#: Bugs `learning_check` can inject, each a context manager patching the trainers while it is open.
SABOTAGE = ("flipped_advantages", "no_peers")


@dataclasses.dataclass
class LearningCheck:
    run: str
    method: str
    steps: int
    base: list[bool]  # per held-out question: the base model's reply right
    trained: list[bool]  # the trained agent's
    metrics: pd.DataFrame
    seconds: float  # all of it: data, UDPO's warm-up, training, the held-out answers
    train_seconds: float  # the training job alone
    base_replies: list[str]  # the replies graded in `base` and `trained`, for reading what was learnt
    trained_replies: list[str]
    questions: list[str]  # the held-out questions they answer

    def kinds(self) -> dict[str, dict[str, str]]:
        """What each policy does, base and trained: {"opening/reading": "right/n"}
        (`testbed.evaluate.reply_kinds`: careful or hasty, the question read as written or misread)."""
        from .evaluate import reply_kinds

        return {
            "base": reply_kinds(self.base_replies, self.questions, self.base),
            "trained": reply_kinds(self.trained_replies, self.questions, self.trained),
        }

    @property
    def estimate(self):
        """trained − base in points, exact 95 % interval and McNemar p (`intervals.paired_counts_difference`)."""
        from ..intervals import discordant_counts, paired_counts_difference

        only_trained, only_base, n = discordant_counts(self.trained, self.base)
        return paired_counts_difference(only_trained, only_base, n).scaled(100)

    @property
    def learnt(self) -> bool:
        """Better than the base with the exact interval above 0."""
        return self.estimate.low > 0

    def describe(self) -> str:
        e = self.estimate
        return (
            f"{self.run} ({self.method}, {self.steps} steps, {self.seconds:.0f} s): held-out "
            f"{100 * sum(self.base) / len(self.base):.1f} -> {100 * sum(self.trained) / len(self.trained):.1f} % "
            f"(n = {len(self.base)}), {e.value:+.1f} [{e.low:+.1f}, {e.high:+.1f}], p = {e.p:.2g}"
        )


@contextlib.contextmanager
def sabotaged(kind: str | None) -> Iterator[None]:
    """The trainers with the bug `kind` injected (module docstring), restored on exit; None: as they are."""
    if kind is None:
        yield
        return
    if kind not in SABOTAGE:
        raise ValueError(f"unknown sabotage {kind!r}; expected one of {SABOTAGE}")
    from .. import prompts

    if kind == "flipped_advantages":  # every method's loss goes through core.loss.policy_loss
        from ..training.core import loss

        original = loss.policy_loss

        def policy_loss(logprobs, old_logprobs, advantages, mask, **kwargs):
            return original(logprobs, old_logprobs, -advantages, mask, **kwargs)

        loss.policy_loss = policy_loss
        try:
            yield
        finally:
            loss.policy_loss = original
        return
    from ..debate import protocols

    original_views = protocols.RoundDebate.peer_views
    original_self_debate = prompts.self_debate_messages

    def no_peer_views(self, q, i, t, current, full, answer_only):
        return [
            dataclasses.replace(v, response="", answer=None)
            for v in original_views(self, q, i, t, current, full, answer_only)
        ]

    def self_debate_without_second(row, system_prompt, first, second, style="two_turn"):
        return original_self_debate(row, system_prompt, first, "", style)

    protocols.RoundDebate.peer_views = no_peer_views
    prompts.self_debate_messages = self_debate_without_second
    try:
        yield
    finally:
        protocols.RoundDebate.peer_views = original_views
        prompts.self_debate_messages = original_self_debate


def learning_check(
    exp: Experiment,
    run: str,
    work_dir: str | Path,
    *,
    steps: int | None = None,
    questions: int = 300,
    heldout_every: int | None = None,
    curve: bool = True,
    sabotage: str | None = None,
    model_dir: str | Path | None = None,
) -> LearningCheck:
    """Train `run` of the experiment `exp` from the micro model (`model_dir`, default the shipped
    one) in `work_dir` and compare it with its base on `questions` test questions (module docstring).
    `curve`: False leaves out the run's held-out curve during training (its accuracy every few steps)."""
    from ..data.registry import load_benchmark
    from ..io import write_parquet_atomic
    from ..llm.agent import AgentSpec
    from ..micro.shipped import SHIPPED_DIR
    from ..training import TrainSettings
    from ..training.methods import METHODS
    from ..training.multi_agent_stage import udpo_coefficients_job, udpo_warmup_job
    from ..training.settings import udpo_job_settings
    from ..training.stage import train_job

    started = time.perf_counter()
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    spec = exp.training_runs[run]
    resolved = exp.train_settings(run)
    settings = TrainSettings.from_config(resolved)
    overrides = {"show_progress": False}
    if steps is not None:
        overrides["steps"] = steps
    if heldout_every is not None:
        overrides["heldout_every"] = heldout_every
    settings = dataclasses.replace(settings, **overrides)

    def dataset_file(name: str) -> Path:
        d = exp.datasets[name]
        frame = load_benchmark(
            exp.benchmark_of(name), d["split"], source=d["source"], limit=d.get("limit"), seed=exp.seed
        )
        path = work / f"{name}.parquet"
        write_parquet_atomic(frame, path)
        return path

    dataset = dataset_file(spec["dataset"])
    heldout = exp.heldout_dataset(run)
    heldout_path = dataset_file(heldout) if heldout and curve else None
    method = METHODS[settings.method]
    base = Path(model_dir or SHIPPED_DIR)
    agents = exp.run_agents(run)
    specs = {a: AgentSpec.from_config(a, exp.agent_settings(a)) for a in agents}
    bases = {a: str(base) for a in agents}
    participants = spec.get("participants") if method.multi_agent else None
    coefficients = None
    with sabotaged(sabotage):
        if settings.method == "udpo":
            warmup = work / "warmup.parquet"
            udpo_warmup_job(
                dataset_path=dataset,
                bases=bases,
                participants=participants,
                agents=specs,
                settings=TrainSettings.from_config(udpo_job_settings(resolved, "warmup")),
                out_path=warmup,
                limit=exp.datasets[spec["dataset"]].get("limit"),
                report_to=[],
            )
            coefficients = work / "coefficients.json"
            udpo_coefficients_job(
                warmup_path=warmup,
                out_path=coefficients,
                settings=TrainSettings.from_config(udpo_job_settings(resolved, "coefficients")),
            )
        out_dirs = {a: str(work / "agents" / a) for a in agents}
        training_started = time.perf_counter()
        metrics = train_job(
            dataset_path=dataset,
            bases=bases,
            agents=specs,
            out_dirs=out_dirs,
            metrics_path=work / "metrics.parquet",
            curves_path=work / "curves.png",
            settings_path=work / "settings.json",
            checkpoint_dir=work / "checkpoint",
            run=run,
            settings=settings,
            participants=participants,
            coefficients_path=coefficients,
            limit=exp.datasets[spec["dataset"]].get("limit"),
            heldout_path=heldout_path,
            report_to=[],
            experiment=exp.name,
        )
        train_seconds = time.perf_counter() - training_started
    test = next(d for d in exp.evaluated_datasets())
    dataset_key = (exp.benchmark_of(test), exp.datasets[test]["split"], exp.datasets[test]["source"], exp.seed)
    seat = agents[0]
    sampling = (specs[seat].system_prompt, settings.temperature, settings.top_p, settings.max_tokens)
    base_replies = heldout_replies(str(base), dataset_key, questions, sampling)
    trained_replies = heldout_replies(out_dirs[seat], dataset_key, questions, sampling)
    return LearningCheck(
        run,
        settings.method,
        settings.steps,
        [right for _, _, right in base_replies],
        [right for _, _, right in trained_replies],
        metrics,
        time.perf_counter() - started,
        train_seconds,
        [text for _, text, _ in base_replies],
        [text for _, text, _ in trained_replies],
        [question for question, _, _ in base_replies],
    )


@functools.lru_cache(maxsize=8)
def heldout_replies(folder: str, dataset: tuple, questions: int, sampling: tuple) -> tuple[tuple[str, str, bool], ...]:
    """(question, reply, right) of the model in `folder` to each of the first `questions` questions of `dataset`
    (benchmark, split, source, seed), one reply each at `sampling` (system prompt, temperature, top_p,
    max_tokens) with a seed fixed per question, so two models differ only by their weights. Cached: the
    base is answered once for every run sampled alike."""
    from ..data.registry import load_benchmark
    from ..grading import extract_answer, is_correct
    from ..llm.transformers_backend import TransformersBackend
    from ..training.core.heldout import heldout_requests

    benchmark, split, source, seed = dataset
    system_prompt, temperature, top_p, max_tokens = sampling
    rows = load_benchmark(benchmark, split, source=source, limit=questions, seed=seed).to_dict("records")[:questions]
    settings = types.SimpleNamespace(temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed)
    backend = TransformersBackend(folder, device="cpu", batch_size=100)
    try:
        generations = backend.generate(heldout_requests(rows, system_prompt, settings))
    finally:
        backend.close()
    out = []
    for row, g in zip(rows, generations):
        answer = extract_answer(g[0].text, row["task_type"])
        out.append((row["question"], g[0].text, bool(is_correct(answer, str(row["answer"]), row["task_type"]))))
    return tuple(out)
