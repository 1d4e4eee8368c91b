"""Experiments of one working directory share `data/` and `resources/models/`: each file there is named
by what determines its content (issue 44 item 6), so two experiments that read a split or prepare a
model alike share one file, built once, and two that read or build it otherwise never touch each
other's. Through the real Snakemake: a tiny run of three experiments, and a dry run of the paths."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import Experiment, validate_config
from debatelab.data.registry import parse_split_variant, split_file
from debatelab.data.schema import dataset_label, split_of_file
from debatelab.models import SOURCE_FILE, model_folder_name, model_settings, prepare_model

TINY = "bundled:tiny-random-llama"
SMOL = "bundled:smollm2-135m-instruct"


def experiment(name="one", seed=0, datasets=None, models=None, agents=None) -> Experiment:
    config = {
        "experiment": name,
        "seed": seed,
        "datasets": datasets or {"products": {"split": "test", "limit": 2}},
        "models": models or {"tiny": {"source": TINY}},
        "agents": agents or {"alice": {"model": next(iter(models or {"tiny": None}))}},
    }
    return Experiment(validate_config(config))


# --------------------------------------------------------------------------- the keys


def test_a_model_folder_is_named_by_what_prepare_model_builds_it_from():
    folder = lambda *args, **kw: model_folder_name(model_settings(*args, **kw))  # noqa: E731
    # readable: the source's own name, then 8 hex digits of the settings' hash
    assert re.fullmatch(r"tiny-random-llama-[0-9a-f]{8}", folder(TINY))
    assert re.fullmatch(r"Qwen2\.5-7B-Instruct-[0-9a-f]{8}", folder("hf:Qwen/Qwen2.5-7B-Instruct@main"))
    assert re.fullmatch(r"my-model-[0-9a-f]{8}", folder("models/my-model/"))
    # what the content depends on changes the folder ...
    assert folder(TINY, seed=0) != folder(TINY, seed=1)  # the random weights
    assert folder(SMOL, dtype="float32") != folder(SMOL, dtype="bfloat16")  # the dequantised weights
    assert folder("hf:org/m", include=["*.json"]) != folder("hf:org/m")  # the files kept
    assert folder("hf:org/m") != folder("hf:org/m@v2") != folder("hf:other/m")
    assert folder("models/a") != folder("models/b") != folder(TINY)
    # ... and nothing else does: a 70B model is not downloaded again for a setting it ignores
    assert folder("hf:org/m", dtype="float32", seed=0) == folder("hf:org/m", dtype="bfloat16", seed=7)
    assert folder("hf:org/m", include=["*.json", "*.py"]) == folder("hf:org/m", include=["*.py", "*.json", "*.py"])
    assert folder(TINY, dtype="float32") == folder(TINY, dtype="bfloat16")  # built in float32 whatever the dtype
    assert folder(SMOL, seed=0) == folder(SMOL, seed=3)
    assert folder("models/a") == folder("./models/a/")


def test_a_prepared_folder_says_what_it_was_prepared_from(tmp_path):
    source = tmp_path / "mine"
    source.mkdir()
    (source / "config.json").write_text("{}")
    settings = model_settings(f"{source}/", dtype="bfloat16", seed=3)
    out = tmp_path / "resources/models" / model_folder_name(settings)
    out.parent.mkdir(parents=True)
    prepare_model("mine", f"{source}/", out, dtype="bfloat16", seed=3)
    assert out.name.startswith("mine-") and (out / "config.json").exists()
    assert json.loads((out / SOURCE_FILE).read_text()) == settings == {"source": str(source)}


def test_experiments_share_a_model_folder_whatever_they_call_the_model():
    one = experiment(models={"tiny": {"source": TINY}, "again": {"source": TINY, "dtype": "bfloat16"}})
    other = experiment("other", models={"random": {"source": TINY}})
    reseeded = experiment("reseeded", seed=1)
    assert one.model_dir("tiny") == one.model_dir("again") == other.model_dir("random")
    assert reseeded.model_dir("tiny") != one.model_dir("tiny")
    assert one.prepared_models() == {one.model_dir("tiny").split("/")[-1]: {"source": TINY, "seed": 0}}
    assert one.model_dir("tiny").startswith("resources/models/tiny-random-llama-")


def test_a_split_file_is_named_by_its_source_and_the_seed_where_the_seed_picks_its_rows():
    # a generated benchmark: the seed picks the problems
    assert split_file("products", "test", "auto", 3) == "data/products/test/auto-seed3.parquet"
    assert split_file("products", "test", "offline", 0) == "data/products/test/offline-seed0.parquet"
    # files and Hub datasets ignore the seed: one file for every seed
    assert (
        split_file("asdiv", "test", "auto", 0)
        == split_file("asdiv", "test", "auto", 5)
        == "data/asdiv/test/auto.parquet"
    )
    assert split_file("gsm8k", "test", "online", 2) == "data/gsm8k/test/online.parquet"
    # an alias is the split it stands for
    assert split_file("vast", "val", "online", 0) == split_file("vast", "validation", "online", 0)
    assert parse_split_variant("auto-seed3") == ("auto", 3) and parse_split_variant("online") == ("online", 0)
    with pytest.raises(ValueError, match="no split file name"):
        parse_split_variant("elsewhere")
    assert split_of_file("data/products/test/auto-seed3.parquet") == ("products", "test")
    assert split_of_file("data/products/test.parquet") == ("products", "test")  # the layout before
    assert dataset_label("x/data/asdiv/test/auto.parquet") == "asdiv"


def test_two_dataset_entries_read_alike_share_their_file_and_read_otherwise_do_not():
    exp = experiment(
        datasets={
            "products": {"split": "test", "limit": 2},
            "prod_small": {"benchmark": "products", "split": "test", "limit": 1},  # limit: applied when read
            "prod_offline": {"benchmark": "products", "split": "test", "source": "offline"},
        }
    )
    assert exp.dataset_path("products") == exp.dataset_path("prod_small") == "data/products/test/auto-seed0.parquet"
    assert exp.dataset_path("prod_offline") == "data/products/test/offline-seed0.parquet"


# --------------------------------------------------------------------------- through Snakemake


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _config(name, *, seed=0, dataset="products", benchmark="", model="tiny", source=TINY, agent="alice") -> str:
    bench = f"benchmark: {benchmark}, " if benchmark else ""
    return (
        f"experiment: {name}\nseed: {seed}\n"
        f"datasets:\n  {dataset}: {{{bench}split: test, limit: 2}}\n"
        f"models:\n  {model}: {{source: '{source}'}}\n"
        f"agents:\n  {agent}: {{model: {model}, max_tokens: 4}}\n"
        "backends:\n  transformers: {num_threads: 1}\n"
        "zero_shot: {samples: 1, estimators: []}\n"
    )


def _inputs(workdir: Path) -> dict[str, tuple[str, int]]:
    """Every file under data/ and resources/models/: its hash and its mtime."""
    files = {}
    for root in ("data", "resources/models"):
        for path in sorted((workdir / root).rglob("*")):
            if path.is_file():
                files[str(path.relative_to(workdir))] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    path.stat().st_mtime_ns,
                )
    return files


def _planned(output: str) -> set[str]:
    table = output.split("Job stats:")[1] if "Job stats:" in output else ""
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+$", table, flags=re.M)} - {"total"}


@pytest.mark.slow
def test_experiments_in_one_directory_never_rewrite_each_others_inputs_and_share_identical_ones(
    tmp_path, tiny_model_dir
):
    work = tmp_path / "work"
    work.mkdir()
    first = _write(tmp_path / "first.yaml", _config("first"))
    # the same model name from another source, the same dataset with another seed (it picks the problems)
    second = _write(tmp_path / "second.yaml", _config("second", seed=1, source=str(tiny_model_dir)))
    # the same inputs as the first under other names: nothing to download or build
    third = _write(
        tmp_path / "third.yaml", _config("third", dataset="prod", benchmark="products", model="random", agent="bob")
    )
    target = {
        name: f"results/{name}/zero_shot/{d}/{a}.parquet"
        for name, d, a in (("first", "products", "alice"), ("second", "products", "alice"), ("third", "prod", "bob"))
    }

    snakemake(work, "--configfile", first, "--cores", "1", target["first"])
    before = _inputs(work)
    assert {Path(p).parts[:4] for p in before if p.startswith("data/")} == {
        ("data", "products", "test", "auto-seed0.parquet")
    }

    snakemake(work, "--configfile", second, "--cores", "1", target["second"])
    after_second = _inputs(work)
    assert {p: after_second[p] for p in before} == before  # byte-identical, untouched
    assert "data/products/test/auto-seed1.parquet" in after_second
    still = snakemake(work, "--configfile", first, "--cores", "1", "-n", target["first"])
    assert "Nothing to be done" in still.stdout + still.stderr, still.stdout[-3000:]

    dry = snakemake(work, "--configfile", third, "--cores", "1", "-n", target["third"])
    assert _planned(dry.stdout + dry.stderr) == {"zero_shot"}, dry.stdout[-3000:]
    snakemake(work, "--configfile", third, "--cores", "1", target["third"])
    assert _inputs(work) == after_second  # the third built nothing and touched nothing
    for config, name in ((first, "first"), (second, "second")):
        again = snakemake(work, "--configfile", config, "--cores", "1", "-n", target[name])
        assert "Nothing to be done" in again.stdout + again.stderr, (name, again.stdout[-3000:])

    # one folder per way of building the model, each saying what it is
    folders = sorted((work / "resources/models").iterdir())
    assert len(folders) == 2, folders
    sources = {json.loads((f / SOURCE_FILE).read_text())["source"]: f.name for f in folders}
    assert sources.keys() == {TINY, str(tiny_model_dir)}
    assert sources[TINY].startswith("tiny-random-llama-") and sources[str(tiny_model_dir)].startswith(
        "tiny-random-llama-"
    )
    assert json.loads((work / "resources/models" / sources[TINY] / SOURCE_FILE).read_text()) == {
        "source": TINY,
        "seed": 0,
    }


def test_a_dry_run_names_the_shared_files_as_documented(tmp_path):
    """The paths a dry run plans are those docs/files.md documents."""
    config = _write(
        tmp_path / "paths.yaml",
        "experiment: paths\nseed: 4\n"
        "datasets:\n  products: {split: test, limit: 2}\n  asdiv: {split: test, source: offline}\n"
        "models:\n  tiny: {source: 'bundled:tiny-random-llama'}\n"
        "agents:\n  alice: {model: tiny, max_tokens: 4}\n",
    )
    work = tmp_path / "work"
    work.mkdir()
    proc = snakemake(
        work,
        "--configfile",
        config,
        "-n",
        "--cores",
        "1",
        "results/paths/zero_shot/products/alice.parquet",
        "results/paths/zero_shot/asdiv/alice.parquet",
    )
    outputs = set(re.findall(r"output: ([^\n]+)", proc.stdout))
    exp = experiment("paths", seed=4)
    model = exp.model_dir("tiny")
    assert re.fullmatch(r"resources/models/tiny-random-llama-[0-9a-f]{8}", model)
    assert {"data/products/test/auto-seed4.parquet", "data/asdiv/test/offline.parquet", model} <= outputs, outputs
    assert "log: logs/data/products/test/auto-seed4.log" in proc.stdout
    files_md = (REPO_ROOT / "docs/files.md").read_text()
    assert "`data/{benchmark}/{split}/{source}[-seed{seed}].parquet`" in files_md
    assert "`resources/models/{label}-{key}/`" in files_md
