"""Held-out accuracy during training (`training.runs.<run>.heldout`, `training/heldout.py`): measured
on the live policy before the first step and every `every` steps, equal to an independent re-grading
of the saved models' answers; kept across a resume; per agent in a multi-agent run; in the curves."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch
import yaml
from conftest import toy_settings
from toy_questions import toy_rows
from workflow_helpers import REPO_ROOT

from debatelab import grading, prompts
from debatelab.config import SCHEMA_PATH, ConfigError, Experiment, validate_config
from debatelab.data.schema import frame_from_rows
from debatelab.io import write_parquet_atomic
from debatelab.llm import GenerationRequest, SamplingParams
from debatelab.llm.agent import AgentSpec
from debatelab.training import TrainSettings

TINY = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())

# The toy task of test_training (the random character-level model answers "7" now and then).
TOY = dict(
    prompts_per_step=4,
    rollouts_per_prompt=6,
    sampling_batch=8,
    max_sampling_rounds=3,
    max_tokens=8,
    overlong_buffer=0,
    learning_rate=3e-3,
    warmup_steps=0,
    mini_batch_size=24,
    micro_batch_size=24,
    finetuning="full",
    show_progress=False,
)


def _rows(prefix: str, n: int) -> list[dict]:
    return toy_rows(n, wording="question {id}: answer with the number {gold}.", prefix=prefix)


def _dataset(path, prefix: str, n: int):
    write_parquet_atomic(frame_from_rows(_rows(prefix, n)), path)
    return path


def _hand_accuracy(model_dir, rows, settings, system_prompt=None) -> float:
    """The model folder's one reply per question, regenerated with the run's sampling and each
    question's held-out seed, graded by the workflow's grader (extract the answer, compare)."""
    from debatelab.llm.transformers_backend import TransformersBackend
    from debatelab.training.core.heldout import heldout_seed

    backend = TransformersBackend(model_dir, device="cpu", dtype="float32")
    requests = [
        GenerationRequest(
            messages=prompts.question_messages(row, system_prompt),
            sampling=SamplingParams(
                temperature=settings.temperature,
                top_p=settings.top_p,
                max_tokens=settings.max_tokens,
                seed=heldout_seed(settings.seed, row["id"]),
            ),
        )
        for row in rows
    ]
    texts = [g[0].text for g in backend.generate(requests)]
    right = [grading.is_correct(grading.extract_answer(t, "math"), "7", "math") for t in texts]
    return sum(right) / len(rows)


def test_heldout_accuracy_from_the_base_model_on_equals_a_regrading_and_survives_a_resume(
    tmp_path, char_model_dir, monkeypatch
):
    """A 1-step run, then resumed to 2 steps: heldout_base_accuracy (step 0) and heldout_accuracy
    after steps 1 and 2 are the accuracies of the base folder and of the two saved models on the
    same 60 of the 80 held-out questions, regenerated with the same seeds; the resumed run evaluates
    step 2 only and keeps step 0's and step 1's values."""
    from debatelab.training.core.trainer import Trainer
    from debatelab.training.stage import train_job
    from debatelab.zero_shot import select_questions

    train = _dataset(tmp_path / "toy.parquet", "q", 24)
    heldout = _dataset(tmp_path / "heldout.parquet", "h", 80)
    out = tmp_path / "run"
    job = dict(
        dataset_path=str(train),
        heldout_path=str(heldout),
        bases={"toy": str(char_model_dir)},
        agents={"toy": AgentSpec(name="toy", model="tiny")},
        metrics_path=str(out / "metrics.parquet"),
        curves_path=str(out / "curves.png"),
        settings_path=str(out / "settings.json"),
        checkpoint_dir=str(out / "checkpoint"),
        run="run",
    )
    settings = toy_settings(steps=1, heldout_every=1, heldout_questions=60, **TOY)
    first = train_job(**job, out_dirs={"toy": str(out / "model1")}, settings=settings)

    evaluated = []
    evaluate = Trainer.evaluate_heldout
    monkeypatch.setattr(Trainer, "evaluate_heldout", lambda self, step: evaluated.append(step) or evaluate(self, step))
    metrics = train_job(**job, out_dirs={"toy": str(out / "model2")}, settings=replace(settings, steps=2))
    assert evaluated == [2]  # steps 0 and 1 come from the checkpoint
    assert list(metrics["step"]) == [1, 2] and list(metrics["heldout_questions"]) == [60, 60]
    assert metrics.iloc[:1].equals(first)  # the resumed run's first row is the first run's

    rows = select_questions(frame_from_rows(_rows("h", 80)), 60, settings.seed).to_dict("records")
    hand = [_hand_accuracy(folder, rows, settings) for folder in (char_model_dir, out / "model1", out / "model2")]
    assert max(hand) > 0  # the random model gets a few right: the comparison is not of zeros
    assert metrics["heldout_base_accuracy"].iloc[0] == hand[0]
    assert np.isnan(metrics["heldout_base_accuracy"].iloc[1])
    assert list(metrics["heldout_accuracy"]) == hand[1:]


def test_heldout_evaluations_fall_every_k_steps_and_after_the_last():
    from debatelab.training.core.heldout import evaluates_after

    settings = toy_settings(steps=7, heldout_every=3)
    assert [k for k in range(8) if evaluates_after(k, settings)] == [0, 3, 6, 7]


def test_without_a_heldout_set_the_columns_are_empty(tmp_path, char_model_dir):
    from debatelab.training.core.policy import Policy
    from debatelab.training.methods.dapo import DapoTrainer

    settings = toy_settings(steps=1, **TOY)
    trainer = DapoTrainer(
        frame_from_rows(_rows("q", 8)), Policy(char_model_dir, settings, device="cpu"), settings, run="r"
    )
    metrics = trainer.train()
    assert metrics["heldout_accuracy"].isna().all() and metrics["heldout_base_accuracy"].isna().all()
    assert list(metrics["heldout_questions"]) == [0]


def test_each_agent_of_a_multi_agent_run_is_evaluated_alone_with_its_system_prompt(char_model_dir):
    """MAPPO on alice and bob (bob with a system prompt): one column per agent, their mean as
    heldout_accuracy; at step 0 each agent is its base model (LoRA B starts at zero), so each
    agent's value is the base folder's re-graded accuracy with that agent's prompt."""
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.mappo import MappoTrainer

    torch.manual_seed(0)
    settings = toy_settings(
        method="mappo",
        steps=1,
        heldout_every=1,
        heldout_questions=40,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=8,
        overlong_buffer=0,
        learning_rate=1e-2,
        warmup_steps=0,
        show_progress=False,
        mappo={"rounds": 1, "questions_per_step": 2},
    )
    policies = AgentPolicies({"alice": char_model_dir, "bob": char_model_dir}, settings, device="cpu")
    prompts_ = {"alice": None, "bob": "be brief."}
    heldout = frame_from_rows(_rows("h", 40))
    trainer = MappoTrainer(
        frame_from_rows(_rows("q", 4)),
        policies,
        settings,
        run="mappo",
        participants=["alice", "bob"],
        system_prompts=prompts_,
        heldout=heldout,
    )
    metrics = trainer.train()
    for column in ("heldout_base_accuracy", "heldout_accuracy"):
        each = metrics[[f"{column}_alice", f"{column}_bob"]].iloc[0]
        assert metrics[column].iloc[0] == pytest.approx(each.mean())
    rows = heldout.to_dict("records")
    assert metrics[["heldout_base_accuracy_alice", "heldout_base_accuracy_bob"]].iloc[0].max() > 0  # not all zeros
    for agent, system_prompt in prompts_.items():
        assert metrics[f"heldout_base_accuracy_{agent}"].iloc[0] == _hand_accuracy(
            char_model_dir, rows, settings, system_prompt
        )


def test_the_curves_show_heldout_accuracy_from_step_0_with_n():
    import pandas as pd

    from debatelab.reporting.training import plot_training_curves

    metrics = pd.DataFrame(
        {
            "step": [1, 2, 3],
            "reward_mean": [0.1, 0.2, 0.3],
            "reward_std": [0.1] * 3,
            "accuracy": [0.5] * 3,
            "response_length": [5.0] * 3,
            "groups_kept": [1] * 3,
            "prompts_sampled": [2] * 3,
            "debate_groups_kept": [0] * 3,
            "rollout_seconds": [1.0] * 3,
            "update_seconds": [1.0] * 3,
            "heldout_base_accuracy": [0.25, np.nan, np.nan],
            "heldout_accuracy": [np.nan, 0.5, 0.75],
            "heldout_questions": [40] * 3,
        }
    )
    fig = plot_training_curves(metrics, "t")
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    line = lines["held-out accuracy (n = 40)"]
    assert list(line.get_xdata()) == [0, 2, 3] and list(line.get_ydata()) == [0.25, 0.5, 0.75]
    assert fig.axes[0].get_xlim()[0] < 0  # step 0 is on the plot


# --------------------------------------------------------------------------- config


def _experiment(**heldout) -> Experiment:
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    cfg["datasets"]["asdiv_again"] = {"benchmark": "asdiv", "split": "test", "limit": 2}
    cfg["training"]["runs"]["sdrl"]["heldout"] = heldout
    return Experiment(validate_config(cfg))


@pytest.mark.parametrize(
    "dataset, expected",
    [
        ("gsm8k", ["training.runs.sdrl.heldout.dataset", "'gsm8k'", "not a key of `datasets`"]),
        ("asdiv", ["training.runs.sdrl.heldout.dataset", "'asdiv'", "training questions"]),
        ("asdiv_again", ["training.runs.sdrl.heldout.dataset", "'asdiv_again'", "training questions"]),  # the same file
    ],
)
def test_a_heldout_dataset_is_another_key_of_datasets(dataset, expected):
    with pytest.raises(ConfigError) as error:
        _experiment(dataset=dataset)
    for text in expected:
        assert text in str(error.value), f"{text!r} not in {error.value}"


def test_heldout_settings_reach_the_trainer_and_default_as_the_schema_says():
    schema = yaml.safe_load(SCHEMA_PATH.read_text())["definitions"]["training_run"]["properties"]["heldout"]
    defaults = {k: v["default"] for k, v in schema["properties"].items()}
    assert defaults["dataset"] is None  # off unless asked for
    library = toy_settings()
    assert (library.heldout_every, library.heldout_questions) == (defaults["every"], defaults["questions"])

    exp = _experiment(dataset="commonsense_qa", every=3)
    assert exp.heldout_dataset("sdrl") == "commonsense_qa" and exp.heldout_dataset("udpo") is None
    settings = TrainSettings.from_config(exp.train_settings("sdrl"))
    assert (settings.heldout_every, settings.heldout_questions) == (3, defaults["questions"])


def test_heldout_settings_do_not_invalidate_a_checkpoint(char_model_dir, tmp_path):
    from debatelab.training.core.checkpoint import policy_fingerprint

    data = _dataset(tmp_path / "toy.parquet", "q", 4)
    policy = AgentSpec(name="toy", model="tiny")
    fingerprint = lambda s: policy_fingerprint(s, str(char_model_dir), str(data), policy.system_prompt)  # noqa: E731
    assert fingerprint(toy_settings()) == fingerprint(toy_settings(heldout_every=2, heldout_questions=7))
    assert fingerprint(toy_settings()) != fingerprint(toy_settings(learning_rate=1e-5))


def test_the_train_rules_read_the_heldout_dataset_only_when_a_run_has_one(tmp_path):
    """Snakemake's dry run of the tiny config with a held-out dataset on the sdrl and udpo runs: their
    train and train_agents jobs read the held-out file; without one, they do not."""
    from workflow_helpers import snakemake

    def train_inputs(heldout):
        cfg = yaml.safe_load(yaml.safe_dump(TINY))
        if heldout:
            cfg["training"]["runs"]["sdrl"]["heldout"] = {"dataset": "commonsense_qa"}
            cfg["training"]["runs"]["udpo"]["heldout"] = {"dataset": "commonsense_qa"}
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
        proc = snakemake(
            tmp_path,
            "--configfile",
            str(tmp_path / "config.yaml"),
            "-n",
            "--forceall",
            "results/tiny/train/sdrl/metrics.parquet",
            "results/tiny/train/udpo/metrics.parquet",
        )
        return dict(re.findall(r"rule (\w+):\n\s+input: ([^\n]*)", proc.stdout))

    with_heldout, without = train_inputs(True), train_inputs(False)
    for rule in ("train", "train_agents"):
        assert "data/commonsense_qa/validation/auto.parquet" in with_heldout[rule], with_heldout[rule]
        assert "commonsense_qa" not in without[rule], without[rule]
