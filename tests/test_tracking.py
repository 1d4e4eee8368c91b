"""Experiment tracking (`debatelab.tracking`): every training step's metrics row in the trackers as the
run goes, each step once across a kill and resume, the evaluation's tables, the config key, and no
credential in a tracker's config."""

from __future__ import annotations

import copy
import json
import re
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import toy_settings
from test_training import TOY, _job, _toy_dataset

from debatelab.config import SCHEMA_PATH, ConfigError, Experiment, validate_config
from debatelab.llm.agent import AgentSpec
from debatelab.tracking import RUN_IDS, TRACKERS, open_tracker, scalar_tags, tracker_names

CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


def read_scalars(folder: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}} of a folder's event files as TensorBoard shows them; a step twice fails."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    events.Reload()
    out = {}
    for tag in events.Tags()["scalars"]:
        steps = [e.step for e in events.Scalars(tag)]
        assert len(steps) == len(set(steps)), f"{tag}: steps {steps}"
        out[tag] = {e.step: e.value for e in events.Scalars(tag)}
    return out


def expected_scalars(metrics: pd.DataFrame, agents=()) -> dict[str, dict[int, float]]:
    """metrics.parquet's cells as the event files must hold them (float32, as TensorBoard stores)."""
    out: dict[str, dict[int, float]] = {}
    for row in metrics.to_dict("records"):
        for tag, value in scalar_tags(row, agents).items():
            out.setdefault(tag, {})[int(row["step"])] = float(np.float32(value))
    return out


FAST = {**TOY, "dynamic_sampling": False, "prompts_per_step": 2, "rollouts_per_prompt": 3, "mini_batch_size": 6}


# --------------------------------------------------------------------------- training runs


def test_a_two_step_run_streams_every_metrics_cell_to_tensorboard(tmp_path, char_model_dir):
    from debatelab.training.stage import train_job

    job = _job(tmp_path, char_model_dir, _toy_dataset(tmp_path / "toy.parquet"), toy_settings(steps=2, **FAST))
    metrics = train_job(**job)
    logged = read_scalars(tmp_path / "run/tensorboard")
    assert logged == expected_scalars(pd.read_parquet(job["metrics_path"]))
    assert {"train/loss", "train/reward_mean", "train/accuracy", "train/kl", "train/rollout_seconds"} <= set(logged)
    assert logged["train/loss"] == {
        1: pytest.approx(metrics["loss"].iloc[0]),
        2: pytest.approx(metrics["loss"].iloc[1]),
    }


def test_a_multi_agent_run_logs_each_agents_columns_under_its_name(tmp_path, char_model_dir):
    from debatelab.data.schema import frame_from_rows
    from debatelab.io import write_parquet_atomic
    from debatelab.training.stage import train_job

    def questions(prefix, n):
        return frame_from_rows(
            [
                {"id": f"{prefix}{i}", "question": f"{i}: answer 7.", "choices": None, "answer": "7"}
                | {"task_type": "math", "meta": {"source": "toy"}}
                for i in range(n)
            ]
        )

    write_parquet_atomic(questions("q", 6), tmp_path / "toy.parquet")
    write_parquet_atomic(questions("h", 4), tmp_path / "heldout.parquet")
    settings = toy_settings(
        method="mappo",
        steps=2,
        heldout_every=1,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=6,
        overlong_buffer=0,
        warmup_steps=0,
        show_progress=False,
        mappo={"rounds": 1, "questions_per_step": 2},
    )
    train_job(
        dataset_path=tmp_path / "toy.parquet",
        heldout_path=tmp_path / "heldout.parquet",
        bases={"alice": str(char_model_dir), "bob": str(char_model_dir)},
        participants=["alice", "bob"],
        agents={"alice": AgentSpec(name="alice", model="m"), "bob": AgentSpec(name="bob", model="m")},
        out_dirs={a: str(tmp_path / "agents" / a) for a in ("alice", "bob")},
        metrics_path=tmp_path / "run/metrics.parquet",
        curves_path=tmp_path / "run/curves.png",
        settings_path=tmp_path / "run/settings.json",
        checkpoint_dir=tmp_path / "run/checkpoint",
        run="mappo",
        settings=settings,
    )
    metrics = pd.read_parquet(tmp_path / "run/metrics.parquet")
    logged = read_scalars(tmp_path / "run/tensorboard")
    assert logged == expected_scalars(metrics, ["alice", "bob"])
    for agent in ("alice", "bob"):
        assert logged[f"agent/{agent}/heldout_accuracy"][2] == pytest.approx(metrics[f"heldout_accuracy_{agent}"][1])
        assert f"agent/{agent}/heldout_base_accuracy" in logged
    assert "train/heldout_accuracy_alice" not in logged and "train/heldout_accuracy" in logged


def test_a_killed_and_resumed_run_has_each_step_once_with_the_resumed_runs_values(
    tmp_path, char_model_dir, monkeypatch
):
    """The job dies after logging step 3 but before its checkpoint (the last is step 2); the rerun
    redoes step 3: TensorBoard shows steps 1-3 once each, step 3 with the rerun's values (its timings
    differ from the killed job's)."""
    from debatelab.training.core.trainer import BaseTrainer
    from debatelab.training.stage import train_job

    job = _job(tmp_path, char_model_dir, _toy_dataset(tmp_path / "toy.parquet"), toy_settings(steps=3, **FAST))
    save = BaseTrainer.checkpoint

    def killed_at_step_3(self):
        if self.state.step == 3:
            raise KeyboardInterrupt("killed")
        save(self)

    monkeypatch.setattr(BaseTrainer, "checkpoint", killed_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        train_job(**job)
    killed = read_scalars(tmp_path / "run/tensorboard")
    assert sorted(killed["train/loss"]) == [1, 2, 3]
    monkeypatch.setattr(BaseTrainer, "checkpoint", save)

    metrics = train_job(**job)
    logged = read_scalars(tmp_path / "run/tensorboard")
    assert logged == expected_scalars(metrics)
    assert all(sorted(steps) == [1, 2, 3] for tag, steps in logged.items() if not tag.startswith("train/heldout"))
    assert logged["train/rollout_seconds"][3] != killed["train/rollout_seconds"][3]  # the rerun's step 3


def test_a_fresh_start_clears_an_earlier_runs_events_and_a_resume_purges_redone_steps(tmp_path):
    folder = tmp_path / "tensorboard"
    with open_tracker("tensorboard", folder, project="p", name="r") as tracker:
        for step in (1, 2, 3, 4):
            tracker.log_metrics({"step": step, "loss": 10.0 + step}, step)
    with open_tracker("tensorboard", folder, project="p", name="r", resumed_at=2) as tracker:
        tracker.log_metrics({"step": 3, "loss": 0.5}, 3)
    assert read_scalars(folder) == {"train/loss": {1: 11.0, 2: 12.0, 3: 0.5}}  # step 4 was purged
    with open_tracker("tensorboard", folder, project="p", name="r") as tracker:
        tracker.log_metrics({"step": 1, "loss": 7.0}, 1)
    assert read_scalars(folder) == {"train/loss": {1: 7.0}}


def test_none_logs_nothing_and_the_tags_of_a_row():
    assert tracker_names("none") == () and tracker_names(["wandb", "tensorboard"]) == ("wandb", "tensorboard")
    row = {"step": 2, "loss": 0.5, "heldout_accuracy": float("nan"), "heldout_accuracy_bob_2": 0.25, "note": "x"}
    assert scalar_tags(row, ["2", "bob_2"]) == {"train/loss": 0.5, "agent/bob_2/heldout_accuracy": 0.25}


def test_the_udpo_warmup_logs_each_rounds_accuracy_per_seat(tmp_path, char_model_dir):
    from debatelab.data.schema import frame_from_rows
    from debatelab.io import write_parquet_atomic
    from debatelab.training.multi_agent_stage import udpo_warmup_job

    rows = [
        {"id": f"q{i}", "question": f"{i}: answer 7.", "choices": None, "answer": "7"}
        | {"task_type": "math", "meta": {"source": "toy"}}
        for i in range(5)
    ]
    write_parquet_atomic(frame_from_rows(rows), tmp_path / "toy.parquet")
    settings = toy_settings(
        method="udpo", lora={"r": 4, "alpha": 8}, dtype="float32", max_tokens=4, overlong_buffer=0,
        udpo={"rounds": 1, "warmup_fraction": 0.4},
    )  # fmt: skip
    warmup = udpo_warmup_job(
        dataset_path=tmp_path / "toy.parquet",
        bases={"alice": str(char_model_dir)},
        participants=["alice", "alice"],
        agents={"alice": AgentSpec(name="alice", model="m")},
        settings=settings,
        out_path=tmp_path / "run/warmup.parquet",
    )
    logged = read_scalars(tmp_path / "run/tensorboard_warmup")
    for round_, turns in warmup.groupby("round"):
        assert logged["warmup/accuracy"][round_] == pytest.approx(turns["correct"].mean())
        for seat, seat_turns in turns.groupby("seat"):
            assert logged[f"agent/{seat}/accuracy"][round_] == pytest.approx(seat_turns["correct"].mean())
    assert set(logged["agent/alice#1/accuracy"]) == {0, 1}


# --------------------------------------------------------------------------- evaluation


def test_the_evaluation_logs_its_tables_and_vs_paper_differences_as_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from test_evaluation import _udpo_outputs

    from debatelab.evaluation.stage import evaluate_paper

    evaluate_paper("udpo", _udpo_outputs(), tmp_path, report_to="tensorboard")
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    assert {"udpo/table2", "udpo/table2_vs_paper", "udpo/claims"} <= {t.removesuffix("/text_summary") for t in tags}
    tag = next(t for t in tags if t.startswith("udpo/table2_vs_paper"))
    text = events.Tensors(tag)[0].tensor_proto.string_val[0].decode()
    vs = pd.read_csv(tmp_path / "table2_vs_paper.csv")
    assert text.splitlines()[0] == "| " + " | ".join(vs.columns) + " |" and len(text.splitlines()) == len(vs) + 2
    assert "difference" in vs.columns


def test_without_report_to_the_evaluation_writes_no_tracker_folder(tmp_path):
    from test_evaluation import _udpo_outputs

    from debatelab.evaluation.stage import evaluate_paper

    evaluate_paper("udpo", _udpo_outputs(), tmp_path)
    assert not (tmp_path / "tensorboard").exists()


# --------------------------------------------------------------------------- config


def _config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


@pytest.mark.parametrize(
    "mutate, key",
    [
        (lambda c: c["training"].update(report_to="wandbb"), "training.report_to"),
        (lambda c: c["training"].update(report_to=["tensorboard", "wandbb"]), "training.report_to.1"),
        (
            lambda c: next(iter(c["training"]["runs"].values())).update(report_to="mlfow"),
            "training.runs.sdrl.report_to",
        ),
    ],
)
def test_an_unknown_tracker_is_a_config_error_naming_the_key(mutate, key):
    config = _config()
    mutate(config)
    with pytest.raises(ConfigError, match=rf"config: {re.escape(key)}: '\w+' is not one of \['tensorboard'"):
        validate_config(config)


def test_an_unknown_tracker_handed_to_the_library_names_the_setting():
    with pytest.raises(ValueError, match=r"report_to: 'wandbb' is not one of \['tensorboard', 'wandb'"):
        tracker_names(["tensorboard", "wandbb"])


def test_report_to_defaults_to_tensorboard_a_run_may_override_it_and_it_is_no_run_setting():
    config = _config()
    exp = Experiment(validate_config(config))
    run = next(iter(exp.training_runs))
    assert exp.report_to() == ["tensorboard"] and exp.report_to(run) == ["tensorboard"]
    config["training"]["report_to"] = "none"
    config["training"]["runs"][run]["report_to"] = ["wandb", "mlflow"]
    exp = Experiment(validate_config(copy.deepcopy(config)))
    assert exp.report_to() == [] and exp.report_to(run) == ["wandb", "mlflow"]
    # another tracker must not change the job's params (Snakemake would rerun a finished run)
    assert "report_to" not in exp.train_settings(run)


def test_the_schema_lists_the_registrys_trackers():
    schema = yaml.safe_load(SCHEMA_PATH.read_text())["definitions"]["report_to"]["oneOf"]
    assert schema[0]["enum"] == [*TRACKERS, "none"] and schema[1]["items"]["enum"] == list(TRACKERS)


@pytest.mark.parametrize(
    "config, where",
    [
        ({"settings": {"reward": "verifiable", "api_key": "abc"}}, "tracker config.settings.api_key"),
        ({"settings": {"note": "sk-" + "a" * 24}}, "tracker config.settings.note"),
    ],
)
def test_a_tracker_config_holding_a_credential_is_refused(tmp_path, config, where):
    with pytest.raises(ConfigError, match=where):
        open_tracker("tensorboard", tmp_path / "tb", project="p", name="r", config=config)
    assert not (tmp_path / "tb").exists()


# --------------------------------------------------------------------------- W&B, trackio, MLflow


class Recorder:
    """A stand-in for a tracker package: records every call as (name, args, kwargs)."""

    def __init__(self):
        self.calls: list[tuple[str, tuple, dict]] = []

    def record(self, name, result=None):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return result

        return call

    def named(self, name) -> list[tuple[tuple, dict]]:
        return [(a, k) for n, a, k in self.calls if n == name]


def fake_wandb(recorder: Recorder):
    module = types.ModuleType("wandb")
    run = types.SimpleNamespace(log=recorder.record("log"), finish=recorder.record("finish"))
    module.init = recorder.record("init", run)
    module.Table = lambda dataframe: ("table", dataframe.shape)
    return module


def fake_trackio(recorder: Recorder):
    module = types.ModuleType("trackio")
    module.init = recorder.record("init")
    module.log = recorder.record("log")
    module.finish = recorder.record("finish")
    module.Table = lambda dataframe: ("table", dataframe.shape)
    return module


def fake_mlflow(recorder: Recorder):
    module = types.ModuleType("mlflow")
    runs = iter(["run-1", "run-2"])

    def start_run(**kwargs):
        recorder.calls.append(("start_run", (), kwargs))
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=kwargs["run_id"] or next(runs)))

    module.start_run = start_run
    for name in ("set_experiment", "log_params", "log_dict", "log_metrics", "log_table", "end_run"):
        setattr(module, name, recorder.record(name))
    return module


SETTINGS = {"run": "r1", "settings": {"steps": 2, "learning_rate": 1e-6}}


def _log_two_steps_then_resume(folder, name):
    options = dict(project="exp", name="r1", tags=["exp", "dapo"], config=SETTINGS)
    with open_tracker(name, folder, **options) as tracker:
        tracker.log_metrics({"step": 1, "loss": 0.5}, 1)
        tracker.log_metrics({"step": 2, "loss": 0.25}, 2)
    first_ids = json.loads((folder / RUN_IDS).read_text()) if (folder / RUN_IDS).exists() else {}
    with open_tracker(name, folder, resumed_at=1, **options) as tracker:
        tracker.log_metrics({"step": 2, "loss": 0.125}, 2)
        tracker.log_tables({"t": pd.DataFrame({"a": [1, 2]})}, 0)
    return first_ids


def test_wandb_gets_the_settings_the_names_and_each_step_and_resumes_its_run(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(recorder))
    ids = _log_two_steps_then_resume(tmp_path / "tracker", "wandb")
    (_, first), (_, second) = recorder.named("init")
    assert first["project"] == "exp" and first["name"] == "r1" and first["tags"] == ["exp", "dapo"]
    assert first["config"] == SETTINGS and first["resume"] == "allow" and first["dir"] == str(tmp_path / "tracker")
    assert first["id"] == second["id"] == ids["wandb"]  # the resumed job continues the same run
    assert [(a[0], k["step"]) for a, k in recorder.named("log")] == [
        ({"train/loss": 0.5}, 1),
        ({"train/loss": 0.25}, 2),
        ({"train/loss": 0.125}, 2),
        ({"t": ("table", (2, 1))}, 0),
    ]
    assert len(recorder.named("finish")) == 2


def test_a_cut_off_run_ids_file_starts_new_runs_instead_of_stopping_the_resumed_job(tmp_path, monkeypatch, caplog):
    """tracker_runs.json is not an output: cut off by a full disk, it made every resumed training
    job stop in json.loads before its first step. It is written atomically now, and an unreadable one
    starts new tracker runs with a warning."""
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(recorder))
    folder = tmp_path / "tracker"
    open_tracker("wandb", folder, project="exp", name="r1").close()
    first = json.loads((folder / RUN_IDS).read_text())["wandb"]
    (folder / RUN_IDS).write_text('{"wandb": "ab')
    with caplog.at_level("WARNING"):
        open_tracker("wandb", folder, project="exp", name="r1", resumed_at=1).close()
    second = recorder.named("init")[1][1]["id"]
    assert second != first and "does not read as the runs' ids" in caplog.text
    assert json.loads((folder / RUN_IDS).read_text()) == {"wandb": second}


def test_a_fresh_wandb_run_gets_a_new_id(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(recorder))
    for _ in range(2):
        open_tracker("wandb", tmp_path / "tracker", project="exp", name="r1").close()
    first, second = (k["id"] for _, k in recorder.named("init"))
    assert first != second


def test_trackio_gets_the_settings_and_each_step_and_resumes_by_name(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "trackio", fake_trackio(recorder))
    _log_two_steps_then_resume(tmp_path / "tracker", "trackio")
    (_, first), (_, second) = recorder.named("init")
    assert first == {"project": "exp", "name": "r1", "config": {**SETTINGS, "tags": ["exp", "dapo"]}, "resume": "never"}
    assert second == {**first, "resume": "allow"}
    assert [(a[0], k["step"]) for a, k in recorder.named("log")][:3] == [
        ({"train/loss": 0.5}, 1),
        ({"train/loss": 0.25}, 2),
        ({"train/loss": 0.125}, 2),
    ]


def test_mlflow_gets_the_settings_and_each_step_and_reopens_its_run(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setitem(sys.modules, "mlflow", fake_mlflow(recorder))
    ids = _log_two_steps_then_resume(tmp_path / "tracker", "mlflow")
    assert ids == {"mlflow": "run-1"}
    (_, first), (_, second) = recorder.named("start_run")
    assert first["run_id"] is None and first["run_name"] == "r1" and second["run_id"] == "run-1"
    assert recorder.named("set_experiment")[0][0] == ("exp",)
    # parameters once (MLflow refuses to change one), the whole config each time
    assert [a[0] for a, _ in recorder.named("log_params")] == [
        {"run": '"r1"', "settings.steps": "2", "settings.learning_rate": "1e-06"}
    ]
    assert [a for a, _ in recorder.named("log_dict")] == [(SETTINGS, "config.json")] * 2
    assert [(a[0], k["step"]) for a, k in recorder.named("log_metrics")] == [
        ({"train/loss": 0.5}, 1),
        ({"train/loss": 0.25}, 2),
        ({"train/loss": 0.125}, 2),
    ]
    assert recorder.named("log_table")[0][1]["artifact_file"] == "tables/t.json"


@pytest.mark.parametrize("name, package", [("wandb", "wandb"), ("trackio", "trackio"), ("mlflow", "mlflow-skinny")])
def test_a_tracker_that_is_not_installed_says_what_to_install(tmp_path, monkeypatch, name, package):
    monkeypatch.setitem(sys.modules, name, None)  # import fails
    with pytest.raises(ImportError, match=rf"report_to names '{name}'.*pip install {package}"):
        open_tracker(["tensorboard", name], tmp_path / "tracker", project="p", name="r")


def test_the_workflow_hands_each_job_the_runs_trackers():
    """The rule scripts pass report_to and the experiment from the config (not params: no rerun)."""
    scripts = Path(__file__).resolve().parents[1] / "workflow_scripts"
    for script in ("train/train.py", "train/train_agents.py", "train/udpo_warmup.py"):
        text = (scripts / script).read_text()
        assert "report_to=exp.report_to(snakemake.wildcards.run)" in text and "experiment=exp.name" in text, script
    assert "report_to=exp.report_to()" in (scripts / "evaluation/evaluate.py").read_text()
