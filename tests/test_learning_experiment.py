"""config/experiments/learning_cpu.yaml and learning_gpu.yaml: each trainer against its base on
held-out questions (the single-policy trainers on a CPU, the multi-agent ones on GPUs).

The experiments take hours and are not run here (their configs dry-run in test_experiment_configs).
A tiny version of learning_cpu's DAPO part runs through the real Snakemake: train
one step, answer the same held-out questions with the base and the trained model, alone and in a
pair debate, and compare them with paired intervals.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from workflow_helpers import REPO_ROOT, TWO_TINY_JOBS_AT_ONCE, snakemake

from debatelab.config import load_experiment

CONFIG = REPO_ROOT / "config/experiments/learning_cpu.yaml"
GPU_CONFIG = REPO_ROOT / "config/experiments/learning_gpu.yaml"


def test_the_two_experiments_train_every_method_once():
    cpu, gpu = (load_experiment(c).training_runs for c in (CONFIG, GPU_CONFIG))
    assert {r["method"] for r in cpu.values()} == {"dapo", "sdrl"}
    assert {r["method"] for r in gpu.values()} == {"udpo", "mappo", "rmaac", "umad"}
    assert gpu["ippo"]["umad"]["eta"] == gpu["ippo"]["umad"]["alpha_au"] == 0.0  # IPPO: UMAD without its terms
    # the multi-agent runs learn from DAPO's count of replies to one prompt a step: 8 x 8 per agent and turn
    assert cpu["dapo"]["dapo"]["prompts_per_step"] == cpu["dapo"]["dapo"]["rollouts_per_prompt"] == 8
    for run in ("umad", "ippo"):
        assert gpu[run]["umad"]["threads"] == gpu[run]["umad"]["questions_per_step"] == 8


@pytest.mark.parametrize("config", [CONFIG, GPU_CONFIG], ids=lambda p: p.stem)
def test_every_method_is_compared_with_its_base_alone_and_in_its_debate(config):
    experiment = load_experiment(config)
    runs = experiment.training_runs
    comparisons = experiment.comparisons
    debates = {c["treatment"] for c in comparisons.values() if c["treatment"] in experiment.protocols}
    for run in runs:
        # a debate of the run's trained agents is compared with the same debate of the base model
        assert f"{run}_mad" in debates or f"{run}_pair" in debates, run
    # held-out questions are the test split, training questions the train split of the same task
    datasets = experiment.datasets
    assert datasets["chain_sum"]["split"] == "test" and datasets["chain_sum"]["limit"] >= 200
    assert {runs[r]["dataset"] for r in runs} == {"chain_train"} and datasets["chain_train"]["split"] == "train"


def _tiny(tmp_path: Path) -> Path:
    config = yaml.safe_load(CONFIG.read_text())
    config["experiment"] = "learning_tiny"
    config["datasets"]["chain_sum"]["limit"] = 6
    config["datasets"]["chain_train"]["limit"] = 8
    # the tiny random model in SmolLM2's place: the plumbing is the same, and the run ~1 min shorter
    config["models"] = {"tiny": {"source": "bundled:tiny-random-llama"}, "tiny-dapo": config["models"]["smollm2-dapo"]}
    config["backends"]["transformers"]["num_threads"] = 1  # two jobs at once (TWO_TINY_JOBS_AT_ONCE)
    config["agents"] = {
        k: {**v, "max_tokens": 16, "model": "tiny-dapo" if k.startswith("dapo") else "tiny"}
        for k, v in config["agents"].items()
        if k in ("base_a", "base_b", "dapo_a", "dapo_b")
    }
    pair = {**config["debate"]["protocols"]["base_mad"], "participants": ["base_a", "base_b"]}
    config["debate"]["protocols"] = {"base_pair": pair, "dapo_pair": {**pair, "participants": ["dapo_a", "dapo_b"]}}
    dapo = {
        **config["training"]["runs"]["dapo"],
        "steps": 1,
        "dapo": {
            **config["training"]["runs"]["dapo"]["dapo"],
            "prompts_per_step": 2,
            "rollouts_per_prompt": 2,
            "sampling_batch": 2,
        },
        "max_tokens": 8,
        "overlong_buffer": 2,
        "mini_batch_size": 4,
        "micro_batch_size": 4,
        "heldout": {"dataset": "chain_val", "every": 1, "questions": 4},
    }
    config["training"]["runs"] = {"dapo": dapo}
    config["evaluation"] = {
        "papers": [],
        "comparisons": {
            "dapo": {"treatment": "dapo_b", "control": "base_b"},
            "dapo_debate": {"treatment": "dapo_pair", "control": "base_pair"},
        },
    }
    path = tmp_path / "learning_tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_a_tiny_learning_run_compares_the_trained_model_with_its_base(tmp_path):
    config = _tiny(tmp_path)
    snakemake(
        tmp_path,
        "--profile",
        str(REPO_ROOT / "profiles/local"),
        "--configfile",
        str(config),
        "--until",
        "summarize_comparisons",
        *TWO_TINY_JOBS_AT_ONCE,
        timeout=1500,
    )
    results = tmp_path / "results/learning_tiny"
    table = pd.read_csv(results / "summary/comparisons.csv")
    assert list(zip(table["comparison"], table["kind"])) == [("dapo", "single agent"), ("dapo_debate", "debate")]
    assert (table["n"] == 6).all() and (table["low"] <= table["high"]).all()
    assert set(table["verdict"]) <= {"better", "worse", "inconclusive"}
    # the rows are the zero-shot and debate outputs re-read: the accuracies match them
    base = pd.read_parquet(results / "zero_shot/chain_sum/base_b.parquet")
    trained = pd.read_parquet(results / "zero_shot/chain_sum/dapo_b.parquet")
    single = table.set_index("comparison").loc["dapo"]
    assert single["acc_control"] == pytest.approx(100 * base["correct"].mean())
    assert single["difference"] == pytest.approx(100 * (trained["correct"].mean() - base["correct"].mean()))
    # the trained model's questions are the held-out split, none of them a training question
    (train_file,) = (tmp_path / "data/chain_sum/train").glob("*.parquet")  # <source>-seed<n>.parquet
    (test_file,) = (tmp_path / "data/chain_sum/test").glob("*.parquet")
    train_questions = set(pd.read_parquet(train_file)["question"])
    test_questions = set(pd.read_parquet(test_file)["question"])
    assert test_questions and not test_questions & train_questions
    assert (results / "summary/comparisons.png").stat().st_size > 1000
    # the training curve's held-out accuracy: the base before the step, the policy after it
    metrics = pd.read_parquet(results / "train/dapo/metrics.parquet")
    assert metrics["heldout_questions"].tolist() == [4]
    assert metrics[["heldout_base_accuracy", "heldout_accuracy"]].notna().all(axis=None)
