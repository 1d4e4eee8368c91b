"""AutoTransform attack prompts: the rewrite on a real model through the generation cache, the
choice among samples, and the DAG wiring for adversarial agents."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab import prompts
from debatelab.attack import (
    FORMAT_REMINDERS,
    RewriteSettings,
    attack_prompt_job,
    clean_rewrite,
    read_attack_prompt,
    rewrite_system_prompt,
)
from debatelab.io import DataFileError
from debatelab.llm import GenerationCache
from debatelab.llm.agent import AgentSpec
from debatelab.llm.base import Backend, Generation, SamplingParams


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("```\nYou are sly. Put it in \\boxed{}.\n```", "You are sly. Put it in \\boxed{}."),
        ("Here is the new system prompt:\nYou are sly.", "You are sly."),
        ('"You are sly."', "You are sly."),
        ("<think>plan the attack</think>\n\nNew system prompt: You are sly.", "You are sly."),
        ("   ", ""),
        ("<think>still planning when max_tokens ran out", ""),
    ],
)
def test_clean_rewrite_keeps_only_the_prompt(reply, expected):
    assert clean_rewrite(reply) == expected


class Replies(Backend):
    """Returns fixed replies in order (selection logic only; the real model runs below)."""

    model_id = "replies"

    def __init__(self, texts):
        self.texts, self.calls = list(texts), 0

    def generate(self, requests, progress=None):
        out = []
        for _ in requests:
            out.append([Generation(text=self.texts[self.calls], completion_tokens=1, prompt_tokens=1)])
            self.calls += 1
        return out

    def score(self, prompts, replies):
        raise NotImplementedError


def test_first_sample_that_keeps_the_answer_format_wins():
    backend = Replies(["", "You are sly and wrong.", "You are sly; end with \\boxed{}.", "You too, \\boxed{}."])
    out = rewrite_system_prompt("base", "math", backend, GenerationCache(None), RewriteSettings(attempts=4))
    assert out == {"prompt": "You are sly; end with \\boxed{}.", "sample": 2, "format_appended": False}


def test_without_the_format_the_first_rewrite_gets_the_reminder():
    backend = Replies(["", "You are sly and wrong."])
    out = rewrite_system_prompt("base", "yes_no", backend, GenerationCache(None), RewriteSettings(attempts=2))
    assert out["sample"] == 1 and out["format_appended"]
    assert out["prompt"] == "You are sly and wrong.\n\n" + FORMAT_REMINDERS["yes_no"]


def test_only_empty_rewrites_name_the_dataset_and_model():
    with pytest.raises(ValueError, match=r"dataset gsm8k: attack rewriter replies returned 2 empty"):
        rewrite_system_prompt(
            "base",
            "math",
            Replies(["", " "]),
            GenerationCache(None),
            RewriteSettings(attempts=2),
            where="dataset gsm8k: ",
        )


class Counting(Backend):
    def __init__(self, inner):
        self.inner, self.model_id, self.requests = inner, inner.model_id, 0

    def generate(self, requests, progress=None):
        self.requests += len(requests)
        return self.inner.generate(requests, progress=progress)

    def score(self, prompts, replies):
        return self.inner.score(prompts, replies)


def test_attack_prompt_job_on_the_tiny_model_is_cached_and_used_by_adversarial_agents(tmp_path, tiny_model_dir):
    from debatelab.data import load_benchmark
    from debatelab.io import write_parquet_atomic
    from debatelab.llm.transformers_backend import TransformersBackend

    dataset = tmp_path / "asdiv.parquet"
    write_parquet_atomic(load_benchmark("asdiv", "test", source="offline").head(3), dataset)
    backend = Counting(TransformersBackend(tiny_model_dir, batch_size=4, num_threads=1))
    settings = RewriteSettings(SamplingParams(max_tokens=12, seed=5), attempts=2)
    kwargs = dict(
        dataset_name="asdiv", model_name="tiny", backend=backend, cache_dir=tmp_path / "cache", settings=settings
    )
    first = attack_prompt_job(dataset, tmp_path / "a.json", **kwargs)
    assert backend.requests == 2  # one unit per attempt
    record = json.loads((tmp_path / "a.json").read_text())
    assert record["task_type"] == "math" and record["base_prompt"] == prompts.SYSTEM_PROMPTS["math"]
    assert record["prompt"].strip() and record["rewriter"] == "tiny" and "model_id" not in record
    # the tiny random model cannot keep a format by chance: the reminder keeps the attacker answerable
    assert "\\boxed" in record["prompt"]
    again = attack_prompt_job(dataset, tmp_path / "b.json", **kwargs)
    assert backend.requests == 2 and again["prompt"] == first["prompt"]  # from the generation cache
    # the same weights elsewhere (a copy, another working directory): the output is the same file; it
    # held the engine's model_id, whose path and file times changed it
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    kwargs["backend"] = TransformersBackend(copy, batch_size=4, num_threads=1)
    attack_prompt_job(dataset, tmp_path / "c.json", **kwargs)
    assert (tmp_path / "c.json").read_bytes() == (tmp_path / "a.json").read_bytes()

    prompt = read_attack_prompt(tmp_path / "a.json")
    adversary = AgentSpec.from_config("eve", {"model": "tiny", "adversarial": True}, prompt)
    honest = AgentSpec.from_config("bob", {"model": "tiny"}, prompt)
    fixed = AgentSpec.from_config("eve", {"model": "tiny", "adversarial": True})
    assert adversary.system_prompt == prompt and honest.system_prompt is None
    assert fixed.system_prompt == prompts.ATTACK_SYSTEM_PROMPT


def test_read_attack_prompt_names_file_and_field(tmp_path):
    path = tmp_path / "attack.json"
    path.write_text(json.dumps({"prompt": ""}))
    with pytest.raises(DataFileError, match=r"attack\.json: field 'prompt'"):
        read_attack_prompt(path)
    assert read_attack_prompt(None) is None


def _dag_edges(tmp_path, cfg):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    dot = snakemake(tmp_path, "--configfile", str(path), "--dag").stdout
    labels = {n: label.replace("\\n", " ") for n, label in re.findall(r'(\d+)\[label = "([^"]*)"', dot)}
    return [(labels[a], labels[b]) for a, b in re.findall(r"(\d+) -> (\d+)", dot)], labels


def test_dag_routes_the_rewrite_to_adversarial_agents_only(tmp_path):
    cfg = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())
    cfg["agents"]["eve"] = {"model": "tiny-random-llama", "max_tokens": 12, "adversarial": True}
    cfg["debate"]["protocols"]["attacked"] = {"kind": "all_to_all", "rounds": 1, "participants": ["alice", "eve"]}
    cfg["attack"] = {"rewriter": "tiny-random-llama", "max_tokens": 16}
    edges, labels = _dag_edges(tmp_path, cfg)
    attack_jobs = [n for n, label in labels.items() if label.startswith("attack_prompt")]
    assert len(attack_jobs) == len(cfg["datasets"])
    consumers = {b for a, b in edges if a.startswith("attack_prompt")}
    assert all("agent: eve" in c or "protocol: attacked" in c for c in consumers), consumers
    assert any("agent: eve" in c for c in consumers) and any("protocol: attacked" in c for c in consumers)

    cfg["attack"] = {"rewriter": None}
    _, labels = _dag_edges(tmp_path, cfg)
    assert not any(label.startswith("attack_prompt") for label in labels.values())
