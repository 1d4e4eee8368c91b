"""benchmarks/train_throughput.py's FLOP count of an update (`--flops`): torch's own formulas, every
matmul and attention once, with no module tracking."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from unittest import mock

import torch

REPO = Path(__file__).resolve().parents[1]


def _benchmark():
    spec = importlib.util.spec_from_file_location("train_throughput", REPO / "benchmarks" / "train_throughput.py")
    module = importlib.util.module_from_spec(spec)
    with mock.patch.dict(os.environ):  # its HF_HUB_OFFLINE=1 stays with it, not with the tests after this one
        spec.loader.exec_module(module)
    return module


def test_an_updates_flops_are_torchs_matmul_count_plus_cpu_attention(tiny_model_dir):
    """A forward and backward of the tiny model: the counter gives FlopCounterMode's matmul FLOPs
    (which has no formula for CPU attention's kernel) plus, for every layer, torch's SDPA forward and
    backward formulas at the pass's shapes; `wrap` records one count per update and passes its result on."""
    from torch.utils import flop_counter
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32, attn_implementation="sdpa")
    batch, length = 2, 24
    ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=torch.Generator().manual_seed(0))

    def update():
        model.zero_grad()
        model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float().logsumexp(-1).sum().backward()
        return "updated"

    class Trainer:
        pass

    trainer, counts = Trainer(), []
    trainer.update = update
    _benchmark().UpdateFlops().wrap(trainer, "umad", counts)
    assert trainer.update() == "updated" and trainer.update() == "updated"
    with flop_counter.FlopCounterMode(display=False) as matmuls:
        update()

    config = model.config
    heads, head_dim = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    shape = (batch, heads, length, head_dim)
    attention = config.num_hidden_layers * (
        flop_counter.sdpa_flop_count(shape, shape, shape) + flop_counter.sdpa_backward_flop_count(shape, *[shape] * 3)
    )
    assert len(counts) == 2 and counts[0] == counts[1]
    assert attention > 0 and counts[0] == matmuls.get_total_flops() + attention
