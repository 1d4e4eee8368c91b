"""prepare_model: the bundled models are real, trainable Hugging Face folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from debatelab.models import ModelSourceError, prepare_model


def test_unknown_source_names_model_and_source(tmp_path):
    with pytest.raises(ModelSourceError, match=r"'m1'.*'bundled:gpt-9'"):
        prepare_model("m1", "bundled:gpt-9", tmp_path / "m1")


def test_local_folder_without_config_is_rejected(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(ModelSourceError, match="config.json"):
        prepare_model("m2", str(tmp_path / "src"), tmp_path / "m2")


def test_local_folder_is_copied_readable(tiny_model_dir, tmp_path):
    out = tmp_path / "copy"
    prepare_model("copy", str(tiny_model_dir), out)
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    assert oct((out / "config.json").stat().st_mode)[-3:] == "644"


def test_a_failed_preparation_leaves_nothing_and_a_published_folder_has_its_source_file(
    tiny_model_dir, tmp_path, monkeypatch
):
    """The folder is built whole in a staging folder, its source file included, then published in
    one step: a copy that fails half way leaves neither the folder nor staging debris beside it, and
    the published folder never lacks the file saying what it is."""
    import shutil

    from debatelab import models

    def half_copy(source, target, *args, **kwargs):
        Path(target).mkdir()
        (Path(target) / "config.json").write_text("{}")
        raise OSError("disk full")

    monkeypatch.setattr(shutil, "copytree", half_copy)
    with pytest.raises(OSError, match="disk full"):
        prepare_model("copy", str(tiny_model_dir), tmp_path / "models" / "copy")
    assert list((tmp_path / "models").iterdir()) == []
    monkeypatch.undo()

    published = []
    real_publish = models.publish_folder

    def publish(tmp, out_dir):
        published.append(sorted(p.name for p in Path(tmp).iterdir()))
        real_publish(tmp, out_dir)

    monkeypatch.setattr(models, "publish_folder", publish)
    prepare_model("copy", str(tiny_model_dir), tmp_path / "models" / "copy")
    assert models.SOURCE_FILE in published[-1] and "config.json" in published[-1]
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["copy"]


@pytest.mark.slow
def test_smollm2_is_dequantised_into_a_plain_model_that_knows_paris(tmp_path):
    from debatelab.llm.transformers_backend import TransformersBackend

    out = tmp_path / "smollm2"
    prepare_model("smollm2-135m-instruct", "bundled:smollm2-135m-instruct", out)
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config  # a quantised flag would block saving and fine-tuning
    backend = TransformersBackend(out, device="cpu", dtype="float32")
    question = [{"role": "user", "content": "What is the capital of France?"}]
    paris, berlin = backend.score(
        [question, question], ["The capital of France is Paris.", "The capital of France is Berlin."]
    )
    assert paris.mean_logprob > berlin.mean_logprob + 0.2
    assert any(p.requires_grad for p in backend.model.parameters())


def test_a_hub_model_can_be_just_its_config_and_tokenizer(tmp_path, monkeypatch):
    """`include` reaches the Hub download as its allow patterns (the download itself needs a network)."""
    import huggingface_hub

    from debatelab.models import prepare_model

    asked = {}

    def snapshot_download(repo_id, revision, local_dir, allow_patterns):
        asked.update(repo_id=repo_id, revision=revision, allow_patterns=allow_patterns)
        (Path(local_dir) / "config.json").write_text("{}")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    prepare_model("ds", "hf:org/model@v1", tmp_path / "models/ds", include=["*.json", "*.py"])
    assert asked == {"repo_id": "org/model", "revision": "v1", "allow_patterns": ["*.json", "*.py"]}
    assert (tmp_path / "models/ds/config.json").exists()


def test_dtype_auto_on_the_bundled_gguf_is_its_float32_folder():
    """`dtype: auto` used to fail inside the model job (torch.auto); a GGUF's own dtype is what its
    blocks dequantise to, float32, so `auto` and `float32` are one folder."""
    from debatelab.models import model_folder_name, model_settings

    auto = model_settings("bundled:smollm2-135m-instruct", "auto")
    assert auto == {"source": "bundled:smollm2-135m-instruct", "dtype": "float32"}
    assert model_folder_name(auto) == model_folder_name(model_settings("bundled:smollm2-135m-instruct", "float32"))


def _converting_spy(monkeypatch, real: bool):
    """Count gguf_tokenizer's conversions from the GGUF; with real=False only the first parses the GGUF
    (5 s) and the later ones return its tokenizer again."""
    from transformers import AutoTokenizer

    from debatelab.models import smollm2_gguf_path

    conversions, load = [], AutoTokenizer.from_pretrained
    saved = None

    def from_pretrained(path, *args, **kwargs):
        nonlocal saved
        if "gguf_file" not in kwargs:
            return load(path, *args, **kwargs)
        conversions.append(kwargs["gguf_file"])
        if real or saved is None:
            tokenizer = load(path, *args, **kwargs)
            if not real:
                saved = tokenizer
            return tokenizer
        return saved

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", from_pretrained)
    return smollm2_gguf_path(), conversions


def test_a_gguf_tokenizer_is_converted_once_then_loaded_from_the_cache_as_it_was(tmp_path, monkeypatch):
    from debatelab.models import gguf_tokenizer

    monkeypatch.setenv("DEBATELAB_CACHE", str(tmp_path / "cache"))
    gguf, conversions = _converting_spy(monkeypatch, real=True)
    converted = gguf_tokenizer(gguf)
    (entry,) = (tmp_path / "cache/tokenizers").iterdir()
    assert entry.name.startswith("SmolLM2-135M-Instruct.Q4_1-") and len(conversions) == 1
    cached = gguf_tokenizer(gguf)
    assert len(conversions) == 1  # the second call parsed no GGUF
    text = [{"role": "user", "content": "What is 12 + 30? Ünïcode, emoji 🙂 and\ttabs."}]
    assert cached.apply_chat_template(text, tokenize=False) == converted.apply_chat_template(text, tokenize=False)
    assert cached(text[0]["content"])["input_ids"] == converted(text[0]["content"])["input_ids"]
    assert (cached.bos_token, cached.eos_token, len(cached)) == (
        converted.bos_token,
        converted.eos_token,
        len(converted),
    )
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    converted.save_pretrained(tmp_path / "a")
    cached.save_pretrained(tmp_path / "b")
    assert {p.name: p.read_bytes() for p in (tmp_path / "a").iterdir()} == {
        p.name: p.read_bytes() for p in (tmp_path / "b").iterdir()
    }  # so a prepared model folder is the same bytes either way


def test_a_damaged_cache_entry_is_converted_again_and_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    from debatelab.models import gguf_tokenizer

    monkeypatch.setenv("DEBATELAB_CACHE", str(tmp_path / "cache"))
    gguf, conversions = _converting_spy(monkeypatch, real=False)
    gguf_tokenizer(gguf)
    (entry,) = (tmp_path / "cache/tokenizers").iterdir()
    (entry / "tokenizer.json").write_text("{ half a fil")  # a disk that filled up
    assert len(gguf_tokenizer(gguf)) > 49000 and len(conversions) == 2
    assert json.loads((entry / "tokenizer.json").read_text())["model"]  # replaced by a whole one
    gguf_tokenizer(gguf)
    assert len(conversions) == 2
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("DEBATELAB_CACHE", str(tmp_path / "not-a-folder"))
    assert len(gguf_tokenizer(gguf)) > 49000 and len(conversions) == 3
    assert not list(tmp_path.glob("not-a-folder*/**"))
