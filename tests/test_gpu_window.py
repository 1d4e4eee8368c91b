"""benchmarks/gpu_window.py (one GPU window: every run and seed at once within a budget, resumed by a
rerun) and the reply sample it keeps (`training.core.replies`)."""

from __future__ import annotations

import importlib.util
import json
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from debatelab.training.core.replies import REPLY_COLUMNS, append_replies, recording_replies, reply_rows
from debatelab.training.core.rollouts import Rollout

REPO = Path(__file__).resolve().parents[1]


def _window():
    spec = importlib.util.spec_from_file_location("gpu_window", REPO / "benchmarks" / "gpu_window.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rollout(i: int, turn: int = 0) -> Rollout:
    return Rollout(
        question_id=f"q{i}",
        group=f"q{i}",
        turn=turn,
        sample=i,
        messages=({"role": "system", "content": "s"}, {"role": "user", "content": f"what is {i} + 1?"}),
        text=f"\\boxed{{{i + 1}}}",
        token_ids=[1, 2, 3],
        finish_reason="stop",
        answer=str(i + 1),
        correct=i % 2 == 0,
        reward=float(i),
        advantage=0.5,
    )


# -- the reply sample ---------------------------------------------------------------------------
def test_a_step_keeps_the_first_replies_of_every_agent_and_a_redone_step_replaces_its_rows(tmp_path):
    by_agent = {"a": [_rollout(i) for i in range(12)], "b": [_rollout(i, turn=1) for i in range(3)]}
    rows = reply_rows(1, by_agent, per_agent=8)
    assert [r["agent"] for r in rows] == ["a"] * 8 + ["b"] * 3
    assert rows[0]["prompt"] == "what is 0 + 1?" and rows[0]["reply"] == "\\boxed{1}" and rows[0]["tokens"] == 3
    path = tmp_path / "replies.parquet"
    append_replies(path, 1, rows)
    append_replies(path, 2, reply_rows(2, by_agent, per_agent=2))
    frame = append_replies(path, 2, reply_rows(2, by_agent, per_agent=1))  # step 2 redone after a resume
    assert list(frame.columns) == REPLY_COLUMNS
    assert frame.groupby("step").size().to_dict() == {1: 11, 2: 2}
    assert pd.read_parquet(path).equals(frame)
    assert not list(tmp_path.glob("*.tmp*"))  # written atomically


@pytest.mark.slow
def test_the_step_hook_records_a_multi_agent_trainers_replies(char_model_dir, tmp_path):
    """UMAD on the character model for one step: the hook's file has each agent's first replies, with the
    step's rewards; outside `recording_replies` nothing is recorded."""
    import torch
    from conftest import toy_settings

    from debatelab.data.schema import frame_from_rows
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.core.debate_trainer import DebateTrainer
    from debatelab.training.methods.umad import UmadTrainer

    settings = toy_settings(
        method="umad",
        steps=1,
        lora={"r": 4, "alpha": 8},
        dtype="float32",
        max_tokens=6,
        overlong_buffer=0,
        learning_rate=1e-2,
        warmup_steps=0,
        mini_batch_size=64,
        micro_batch_size=16,
        show_progress=False,
        umad={"threads": 2, "turns": 2, "questions_per_step": 2},
    )
    torch.manual_seed(0)
    policies = AgentPolicies({"solver": char_model_dir, "critic": char_model_dir}, settings, device="cpu")
    rows = [
        {"id": f"q{i}", "question": f"{i}+1", "choices": None, "answer": str(i + 1), "task_type": "math", "meta": {}}
        for i in range(3)
    ]
    trainer = UmadTrainer(frame_from_rows(rows), policies, settings, run="umad", participants=["solver", "critic"])
    path = tmp_path / "replies.parquet"
    with recording_replies(path, per_agent=3):
        metrics = trainer.train()
    assert DebateTrainer.step_hooks == []
    frame = pd.read_parquet(path)
    assert frame.groupby(["step", "agent"]).size().to_dict() == {(1, "solver"): 3, (1, "critic"): 3}
    assert set(frame["turn"]) <= {0, 1} and frame["reply"].map(len).gt(0).any()
    assert np.isclose(metrics["step"].iloc[0], 1)


# -- the window ---------------------------------------------------------------------------------
FAKE_WORKER = textwrap.dedent(
    """
    # a trainer's checkpoints as the window reads them: every step, `latest` and step-N/metrics.parquet
    import json, signal, sys, time
    from pathlib import Path
    import pandas as pd
    folder, steps, ignore_term = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ckpt = folder / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    done = int((ckpt / "latest").read_text().split("-")[1]) if (ckpt / "latest").exists() else 0
    rows = pd.read_parquet(ckpt / f"step-{done:05d}" / "metrics.parquet").to_dict("records") if done else []
    for step in range(done + 1, steps + 1):
        time.sleep(0.2)
        with open(folder / "executed.txt", "a") as f:
            f.write(f"{step}\\n")
        rows.append({"step": step, "reward_mean": 0.1 * step, "accuracy": 0.0,
                     "rollout_seconds": 0.1, "update_seconds": 0.3})
        (ckpt / f"step-{step:05d}").mkdir()
        pd.DataFrame(rows).to_parquet(ckpt / f"step-{step:05d}" / "metrics.parquet")
        (ckpt / "latest").write_text(f"step-{step:05d}")
    pd.DataFrame(rows).to_parquet(folder / "metrics.parquet")
    """
)


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "sigkill"])
def test_the_window_stops_its_workers_at_the_budget_and_a_rerun_continues_them(tmp_path, ignore_term):
    gw = _window()
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    lines = []

    def jobs():
        return [
            gw.Job(
                1,
                run,
                tmp_path / run,
                20,
                [sys.executable, str(script), str(tmp_path / run), "20", str(int(ignore_term))],
            )
            for run in ("umad", "udpo")
        ]

    start = time.monotonic()
    first = jobs()
    gw.run_window(first, deadline=start + 2.0, grace_s=1.0, log=lines.append, poll_s=0.1)
    assert time.monotonic() - start < 6.0  # SIGTERM at the deadline, SIGKILL after the grace
    assert all(job.stopped and job.returncode != 0 for job in first)
    done = {job.run: job.seen_step for job in first}
    assert all(0 < steps < 20 for steps in done.values()), done
    assert any("step" in line and "/20" in line for line in lines)
    assert not (tmp_path / "umad" / "metrics.parquet").exists()

    second = [job for job in jobs() if job.run == "umad"]
    gw.run_window(second, deadline=time.monotonic() + 60, grace_s=1.0, log=lines.append, poll_s=0.1)
    assert second[0].returncode == 0 and not second[0].stopped
    executed = [int(x) for x in (tmp_path / "umad" / "executed.txt").read_text().split()]
    # the rerun starts after the last checkpoint: each step ran once, but one a kill cut before its checkpoint
    assert executed[-(20 - done["umad"]) :] == list(range(done["umad"] + 1, 21))
    assert sorted(set(executed)) == list(range(1, 21)) and len(executed) - 20 <= 1
    frame = pd.read_parquet(tmp_path / "umad" / "metrics.parquet")
    assert list(frame["step"]) == list(range(1, 21))


def _fake_run(work: Path, seed: int, run: str, steps_done: int, finished: bool) -> None:
    folder = work / str(seed) / "train" / run
    rows = [
        {
            "step": s,
            "reward_mean": 0.1 * s,
            "accuracy": 0.2,
            "rollout_seconds": 7.0,
            "update_seconds": 12.0,
            "heldout_base_accuracy_base_a": 0.1 if s == 1 else np.nan,
            "heldout_accuracy_base_a": 0.3 if s % 5 == 0 else np.nan,
        }
        for s in range(1, steps_done + 1)
    ]
    (folder / "logs").mkdir(parents=True)
    (folder / "logs" / "train.log").write_bytes(b"x" * (3 * 1024 * 1024))  # cut to its tail
    (folder / "agents" / "base_a").mkdir(parents=True)
    (folder / "agents" / "base_a" / "model.safetensors").write_bytes(b"w" * (2 * 1024 * 1024))
    latest = folder / "checkpoint" / f"step-{steps_done:05d}"
    latest.mkdir(parents=True)
    (latest / "trainable.safetensors").write_bytes(b"w" * (2 * 1024 * 1024))
    (latest / "state.json").write_text(json.dumps({"step": steps_done}))
    pd.DataFrame(rows).to_parquet(latest / "metrics.parquet")
    (folder / "checkpoint" / "latest").write_text(latest.name)
    if finished:
        pd.DataFrame(rows).to_parquet(folder / "metrics.parquet")
    append_replies(folder / "replies.parquet", 1, reply_rows(1, {"base_a": [_rollout(0)]}))
    (folder / "sessions.jsonl").write_text(
        json.dumps({"status": "finished", "gpu": "NVIDIA H100", "peak_gpu_bytes": 2**31}) + "\n"
    )


def test_the_packed_results_are_a_few_small_files_without_weights_or_checkpoints(tmp_path):
    gw = _window()
    work, out = tmp_path / "work", tmp_path / "out"
    _fake_run(work, 1, "umad", 10, finished=True)
    _fake_run(work, 2, "umad", 7, finished=False)
    code = gw.main(
        ["--pack-only", "--work", str(work), "--out", str(out), "--runs", "umad", "ippo", "--seeds", "1", "2"]
    )
    assert code == 0
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert len(files) <= gw.MAX_OUT_FILES and all(p.stat().st_size < gw.MAX_OUT_BYTES for p in files)
    assert {p.name for p in files} == {"summary.json", "runs.tar.gz", "progress.txt", "nvidia-smi.txt"}
    with tarfile.open(out / "runs.tar.gz") as tar:
        names = tar.getnames()
        log = tar.extractfile("1/umad/logs/train.log").read()
    assert "1/umad/metrics.parquet" in names and "2/umad/checkpoint_metrics_partial.parquet" in names
    assert "1/umad/replies.parquet" in names and "1/config.json" in names
    assert not any("safetensors" in n or "agents" in n for n in names)
    assert len(log) < gw.LOG_TAIL_BYTES + 100
    summary = json.loads((out / "summary.json").read_text())["results"]
    assert summary["1/umad"]["finished"] and summary["1/umad"]["steps_done"] == 10
    assert summary["2/umad"]["steps_done"] == 7 and not summary["2/umad"]["finished"]
    assert summary["1/umad"]["mean_step_seconds"] == pytest.approx(19.0)
    assert summary["1/umad"]["heldout"]["heldout_accuracy_base_a"] == {"step": 10, "value": 0.3}
    assert summary["1/umad"]["peak_gpu_gib"] == pytest.approx(2.0) and summary["1/umad"]["gpu"] == "NVIDIA H100"
    assert summary["1/ippo"]["steps_done"] == 0 and summary["1/ippo"]["steps"] == 40


def test_size_options_reach_every_runs_settings_through_the_configs_validation(tmp_path):
    gw = _window()
    args = gw.parser().parse_args(
        [
            "--steps",
            "3",
            "--questions-per-step",
            "2",
            "--threads",
            "2",
            "--heldout-questions",
            "4",
            "--max-tokens",
            "16",
            "--warmup-fraction",
            "0.05",
            "--set",
            "training.runs.*.learning_rate=1.0e-3",
        ]
    )
    from debatelab.config import Experiment

    exp = Experiment(gw.seed_config(args, 2))
    assert exp.name == "learning_gpu_s2" and exp.report_to("umad") == []
    for run in gw.DEFAULT_RUNS:
        settings = exp.train_settings(run)
        assert settings["seed"] == 2 and settings["steps"] == 3 and settings["max_tokens"] == 16
        assert settings["heldout"]["questions"] == 4 and settings["learning_rate"] == 1.0e-3
    assert exp.train_settings("umad")["umad"]["threads"] == 2 and exp.train_settings("ippo")["umad"]["eta"] == 0.0
    udpo = exp.train_settings("udpo")["udpo"]
    assert (udpo["rounds"], udpo["questions_per_step"], udpo["warmup_fraction"]) == (1, 2, 0.05)
    assert exp.train_settings("mappo")["mappo"]["questions_per_step"] == 2


def test_at_most_max_procs_workers_run_at_once_and_none_starts_after_the_deadline(tmp_path):
    gw = _window()
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    lines = []
    jobs = [
        gw.Job(1, run, tmp_path / run, 2, [sys.executable, str(script), str(tmp_path / run), "2", "0"])
        for run in ("a", "b", "c")
    ]
    gw.run_window(jobs, deadline=time.monotonic() + 60, grace_s=1.0, log=lines.append, poll_s=0.05, max_procs=2)
    events = [
        line.split()[0] + " " + line.split()[1].rstrip(":") for line in lines if line.startswith(("started", "ended"))
    ]
    running, most = 0, 0
    for event in events:
        running += 1 if event.startswith("started") else -1
        most = max(most, running)
    assert most == 2 and all(job.returncode == 0 for job in jobs), events
    late = [gw.Job(1, "d", tmp_path / "d", 2, [sys.executable, str(script), str(tmp_path / "d"), "2", "0"])]
    gw.run_window(late, deadline=time.monotonic() - 1, grace_s=1.0, log=lines.append, poll_s=0.05)
    assert late[0].proc is None and lines[-1] == "not started 1/d: no time left"


def test_data_seed_keeps_the_experiments_questions_and_varies_only_the_runs_seeds():
    gw = _window()
    from debatelab.config import Experiment

    fixed = [Experiment(gw.seed_config(gw.parser().parse_args(["--data-seed", "0"]), s)) for s in (1, 2)]
    assert [e.seed for e in fixed] == [0, 0]  # learning_cpu's data
    assert [e.dataset_path("chain_train") for e in fixed] == [fixed[0].dataset_path("chain_train")] * 2
    assert [e.train_settings("umad")["seed"] for e in fixed] == [1, 2]
    assert [e.name for e in fixed] == ["learning_gpu_s1", "learning_gpu_s2"]
    followed = Experiment(gw.seed_config(gw.parser().parse_args([]), 2))
    assert followed.seed == 2 and followed.train_settings("umad")["seed"] == 2


def test_workers_start_while_their_measured_gpu_memory_fits_the_card(tmp_path):
    """15 workers at once ran an 80 GiB H100 out of memory: admission by the measured peaks."""
    gw = _window()
    script = tmp_path / "worker.py"
    script.write_text(FAKE_WORKER)
    lines = []
    needs = {"a": 13.0, "b": 13.0, "c": 4.0, "d": 13.0}
    jobs = [
        gw.Job(1, run, tmp_path / run, 2, [sys.executable, str(script), str(tmp_path / run), "2", "0"], need)
        for run, need in needs.items()
    ]
    gw.run_window(jobs, deadline=time.monotonic() + 60, grace_s=1.0, log=lines.append, poll_s=0.05, memory_gib=30.0)
    alive, most = set(), 0.0
    for line in lines:
        if line.startswith(("started", "ended")):
            run = line.split()[1].rstrip(":").split("/")[1]
            (alive.add if line.startswith("started") else alive.discard)(run)
            most = max(most, sum(needs[r] for r in alive))
    assert most <= 30.0 and all(job.returncode == 0 for job in jobs), lines
    assert gw.MEASURED_PEAK_GIB["udpo"] > gw.MEASURED_PEAK_GIB["umad"]
