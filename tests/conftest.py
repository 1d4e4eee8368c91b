"""Shared fixtures: real bundled models built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO_ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(condition: bool, reason: str) -> None:
    """Skip on a laptop that lacks an optional part; in CI a missing part is a failure."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"required in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny random Llama with SmolLM2's real tokenizer (what `prepare_model` builds)."""
    from debatelab.models import build_tiny_random_llama

    out = tmp_path_factory.mktemp("models") / "tiny-random-llama"
    build_tiny_random_llama(out, seed=0)
    return out


@pytest.fixture(scope="session")
def hf(tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return tok, model


def hf_reply_logprobs(tok, model, prompt, reply) -> tuple[list[float], int]:
    """Teacher-forced log P(reply tokens | prompt), computed directly with transformers: the reference
    every backend's `score` is checked against."""
    import torch

    prefix = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=False)
    full = tok.apply_chat_template(
        list(prompt) + [{"role": "assistant", "content": reply}],
        add_generation_prompt=False,
        tokenize=True,
        return_dict=False,
    )
    assert full[: len(prefix)] == prefix
    with torch.no_grad():
        logits = model(torch.tensor([full])).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[i - 1, full[i]]) for i in range(len(prefix), len(full))], len(prefix)


def build_char_model(out: Path, seed: int = 0) -> Path:
    """A 0.1M-parameter random Llama over a character vocabulary (letters, digits, punctuation) with a
    chat template: its random replies hold digits often, so a toy verifiable task ("answer 7") has
    right and wrong rollouts from the first step, which RL tests need."""
    import string

    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from debatelab.models import save_model_folder

    special = ["<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
    vocab = {t: i for i, t in enumerate(special + list(string.ascii_lowercase + string.digits + " .,:;?!+-*/=(){}\\$"))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|end|>",
        additional_special_tokens=special[2:],
    )
    fast.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] | lower }}<|end|>{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=vocab["<|end|>"],
        pad_token_id=vocab["<pad>"],
    )
    save_model_folder(LlamaForCausalLM(config), fast, out)
    return out


@pytest.fixture(scope="session")
def char_model_dir(tmp_path_factory) -> Path:
    return build_char_model(tmp_path_factory.mktemp("models") / "tiny-char-llama")


def adapter_keys(finetuning: str) -> dict:
    """The tests' small adapter as a run's `lora` block where it has one (finetuning lora); a run
    that trains every weight takes none."""
    return {"lora": {"r": 4, "alpha": 8}} if finetuning == "lora" else {}


def toy_settings(method: str = "dapo", **keys):
    """`TrainSettings` from keys written flat, as the tests write them: the keys of the method's own
    settings class go into its block (the config nests them: `training.runs.<run>.<block>`)."""
    from dataclasses import fields

    from debatelab.training.methods import METHODS
    from debatelab.training.settings import TrainSettings

    spec = METHODS[method]
    own_keys = {f.name for f in fields(spec.settings)}
    block = dict(keys.pop(spec.block, None) or {})
    block.update({k: keys.pop(k) for k in list(keys) if k in own_keys})
    return TrainSettings(method=method, **keys, **{spec.block: block})


def at_ratio_level(settings, ratio_level: str):
    """`settings` at `ratio_level`. "trajectory" is set past the settings' check, which allows it for
    UDPO only: tests of the core update (plans, packed passes, π_old) that UDPO's agent views run,
    driven through the one-policy trainer."""
    if ratio_level != "trajectory":
        from dataclasses import replace

        return replace(settings, ratio_level=ratio_level)
    object.__setattr__(settings, "ratio_level", "trajectory")
    return settings


def folder_weights(folder) -> dict:
    """A model folder's weights by name, from its safetensors files."""
    from safetensors.torch import load_file

    return {k: v for f in sorted(Path(folder).glob("*.safetensors")) for k, v in load_file(f).items()}
