"""Config validation: bad configs fail before any job runs, naming the key and the value."""
from __future__ import annotations

import pytest
import yaml

from workflow_helpers import REPO_ROOT, snakemake

TINY = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())


def _dry_run_with(tmp_path, mutate):
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    mutate(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return snakemake(tmp_path, "--configfile", str(path), "-n", check=False)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c.update(temprature=0.7), ["temprature"]),
        (lambda c: c["agents"]["alice"].update(temprature=0.7), ["temprature"]),
        (lambda c: c["agents"]["alice"].update(temperature="hot"), ["hot", "temperature"]),
        (lambda c: c["zero_shot"].update(samples=0), ["samples", "0"]),
        (lambda c: c["agents"]["alice"].update(backend="llamacpp"), ["llamacpp", "backend"]),
        (lambda c: c["agents"]["alice"].update(model="gpt-17"), ["agents.alice.model", "gpt-17"]),
        (lambda c: c["datasets"].update(no_such_bench={"split": "test"}), ["no_such_bench"]),
        (lambda c: c["datasets"]["asdiv"].update(split="train_xyz"), ["train_xyz", "asdiv"]),
        (lambda c: c.pop("agents"), ["agents"]),
        (lambda c: c["calibration"]["pairs"]["ab"].update(agents=["alice", "carol"]), ["calibration.pairs.ab", "carol"]),
        (lambda c: c["calibration"]["pairs"]["ab"].update(debate="mad"), ["calibration.pairs.ab.debate", "mad", "participants"]),
        (lambda c: c["debate"]["protocols"]["mad_pair"].update(confidence=["verbal"]), ["mad_pair", "seqprob"]),
        (lambda c: c["zero_shot"].update(samples=1), ["debate.protocols", "'alice'", "zero_shot.samples = 1"]),
        (lambda c: c["agents"]["alice"].update(samples=1), ["debate.protocols", "'alice'", "agents.alice.samples = 1"]),
        (lambda c: c["calibration"]["pairs"]["ab"].update(validation={"asdiv": "commonsense_qa"}),
         ["calibration.pairs.ab.validation", "commonsense_qa", "same benchmark"]),
    ],
)
def test_bad_config_names_key_and_value(tmp_path, mutate, expected):
    proc = _dry_run_with(tmp_path, mutate)
    assert proc.returncode != 0
    message = proc.stdout + proc.stderr
    for text in expected:
        assert text in message, f"{text!r} not in error output:\n{message[-3000:]}"
    assert not (tmp_path / "results").exists()


def test_good_config_fills_defaults(tmp_path):
    proc = _dry_run_with(tmp_path, lambda c: c["agents"]["alice"].pop("temperature"))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_every_shipped_config_validates(tmp_path):
    configs = [REPO_ROOT / "config/config.yaml", *sorted((REPO_ROOT / "config/experiments").glob("*.yaml"))]
    for path in configs:
        proc = snakemake(tmp_path, "--configfile", str(path), "-n", check=False)
        assert proc.returncode == 0, f"{path}:\n{proc.stderr[-3000:]}"
