"""Bad inputs refused before any job, each naming its file, key and value (issue 72): dollars that are
no finite number and caps that could not count what they cap; accelerate configs the engine doesn't
run or can't read; configs whose YAML aliases expand past reason; names too long for a file name;
cut-off weight files; Hub ids that climb out; and no environment dump or key in the repository."""

from __future__ import annotations

import copy
import re
import subprocess
import time

import numpy as np
import pytest
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import ConfigError, Experiment, load_yaml_config, validate_config
from debatelab.config_schema import MAX_CONFIG_NODES, check_config_size
from debatelab.credentials import SECRET_VALUE
from debatelab.llm.base import ModelFileError, check_model_files, model_fingerprint
from debatelab.models import check_model_source

TINY = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())

PRICED = {
    "experiment": "priced",
    "datasets": {"boolq": {"limit": 3}},
    "models": {
        "api": {"source": "bundled:tiny-random-llama", "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}},
        "local": {"source": "bundled:tiny-random-llama"},
    },
    "agents": {"a": {"model": "api", "max_tokens": 10}, "c": {"model": "local", "max_tokens": 10}},
}
REMOTE = {"base_url": "https://api.example.com/v1", "api_key_env": "EXAMPLE_KEY"}


def _experiment(base: dict, **changes) -> Experiment:
    """`base` with `changes` ("a.b.c": value, set in place) validated and checked as the workflow does."""
    config = copy.deepcopy(base)
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        target = config
        for key in path:
            target = target.setdefault(key, {})
        target[last] = value
    return Experiment(validate_config(config))


# --------------------------------------------------------------------------- dollars


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("budget_usd", float("nan")),
        ("budget_usd", float("inf")),
        ("budget_per_job_usd", float("nan")),
        ("models.api.price.input_per_mtok", float("inf")),
        ("models.api.price.output_per_mtok", float("nan")),
        ("models.api.price.cached_input_per_mtok", float("inf")),
        ("models.local.price.gpu_hour", float("nan")),
    ],
)
def test_a_budget_or_price_that_is_no_finite_number_is_refused_naming_key_and_value(key, value):
    """NaN compares false with every cap (no cap at all), and .inf times 0 tokens is NaN (an estimate
    of $0.00): both are refused as a ConfigError, not a raw ValueError, naming the key and the value."""
    with pytest.raises(ConfigError, match=rf"^config: {re.escape(key)} = {value!r}: .*finite number"):
        _experiment(PRICED, **{key: value})


def test_a_cap_is_refused_where_a_model_is_priced_by_the_gpu_hour():
    """The cap counts tokens before each request; a GPU-hour cost is known only after the job."""
    with pytest.raises(ConfigError, match=r"budget_usd = 0\.0001 cannot cap models\.local\.price\.gpu_hour = 100000"):
        _experiment(PRICED, budget_usd=0.0001, **{"models.local.price": {"gpu_hour": 100000}})
    with pytest.raises(ConfigError, match=r"budget_per_job_usd = 1 cannot cap .*gpu_hour"):
        _experiment(PRICED, budget_per_job_usd=1, **{"models.api.price.gpu_hour": 2.0})
    _experiment(PRICED, **{"models.local.price": {"gpu_hour": 100000}})  # no cap: the summaries price it
    _experiment(PRICED, budget_usd=1.0)  # token prices only: the cap counts them


def test_a_cap_is_refused_where_agents_call_a_remote_endpoint_with_no_price():
    agents = {
        "a": {"model": "api", "max_tokens": 10},
        "r1": {"model": "local", "backend": "openai", "backend_options": REMOTE},
        "r2": {"model": "local", "backend": "openai", "backend_options": REMOTE},
    }
    with pytest.raises(ConfigError, match=r"budget_usd = 5\.0, but agents\.r1, agents\.r2 call\(s\) a remote endpoint"):
        _experiment(PRICED, agents=agents, budget_usd=5.0)
    _experiment(PRICED, agents=agents)  # no cap: nothing to enforce
    # zeros say "a server I host": the cap knows it costs nothing
    _experiment(PRICED, agents=agents, budget_usd=5.0, **{"models.local.price": {"input_per_mtok": 0}})
    loopback = {**agents, "r1": {"model": "local", "backend": "openai"}, "r2": {"model": "local", "backend": "openai"}}
    _experiment(PRICED, agents=loopback, budget_usd=5.0)  # a server on this machine: its GPUs, not a bill
    named_like_loopback = {
        "model": "local",
        "backend": "openai",
        "backend_options": {**REMOTE, "base_url": "http://127.0.0.1.example.com/v1"},
    }
    with pytest.raises(ConfigError, match=r"agents\.r1 call\(s\) a remote endpoint"):
        _experiment(PRICED, agents={"r1": named_like_loopback}, budget_usd=5.0)
    with pytest.raises(ConfigError, match=r"attack\.rewriter call\(s\) a remote endpoint"):
        _experiment(
            PRICED,
            budget_usd=5.0,
            attack={"rewriter": "local", "backend": "openai"},
            backends={"openai": {"base_url": REMOTE["base_url"], "api_key_env": "EXAMPLE_KEY"}},
        )


# --------------------------------------------------------------------------- accelerate configs


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("distributed_type: DEEP_SPEED\n", r"distributed_type = 'DEEP_SPEED' is not one the training engine runs"),
        ("distributed_type: XLA\n", r"distributed_type = 'XLA' is not one"),
        ("distributed_type: deepspeed\n", r"distributed_type = 'deepspeed' is not one .*in capitals"),
        ("num_processes: 2\n", r"no distributed_type"),
        ("", r"but an empty file"),
        ("distributed_type: [DEEPSPEED]\n", r"distributed_type = \['DEEPSPEED'\] is not one"),
        ("- distributed_type: DEEPSPEED\n", r"not an accelerate config .* but a list"),
        ("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n", r"but a str"),
        ("distributed_type: DEEPSPEED\n  zero_stage: [2\n", r"not valid YAML: .*mine\.yaml"),
        ("distributed_type: DEEPSPEED\ndeepspeed_config: {zero_stage: 4}\n", r"zero_stage = 4 is not a ZeRO stage"),
        ("distributed_type: FSDP\nfsdp_config: [1]\n", r"fsdp_config = \[1\] is not a mapping"),
    ],
)
def test_an_accelerate_config_the_engine_cannot_run_or_read_is_refused_in_one_line(tmp_path, monkeypatch, text, says):
    """Not an AttributeError or a ParserError about "<unicode string>": a ConfigError naming the run's
    key, the file and what is wrong."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(text)
    exp = _experiment(TINY, **{"training.runs.sdrl.accelerate_config": "mine.yaml"})
    with pytest.raises(ConfigError) as error:
        exp.accelerate_config("sdrl", REPO_ROOT)
    said = str(error.value)
    assert "\n" not in said and "<unicode string>" not in said
    assert said.startswith("config: training.runs.sdrl.accelerate_config = 'mine.yaml': accelerate config mine.yaml: ")
    assert re.search(says, said), said


# --------------------------------------------------------------------------- YAML alias bombs


def _alias_bomb(levels: int, mapping: bool) -> str:
    """`levels` anchors, each holding 10 aliases of the one before: 10**levels values once expanded."""
    lines = ["experiment: bomb"]
    for i in range(levels):
        items = [f"*a{i - 1}" if i else "1"] * 10
        body = "{" + ", ".join(f"k{j}: {v}" for j, v in enumerate(items)) + "}" if mapping else f"[{', '.join(items)}]"
        lines.append(f"x{i}: &a{i} {body}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("mapping", [False, True])
def test_an_alias_bomb_is_refused_within_a_second(tmp_path, mapping):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(9, mapping))
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=rf"config {re.escape(str(path))}: expands to over {MAX_CONFIG_NODES:,}"):
        load_yaml_config(path)
    assert time.perf_counter() - start < 1.0
    path.write_text("experiment: loop\nx: &a [1, *a]\n")  # an alias inside its own anchor
    with pytest.raises(ConfigError, match="holds itself"):
        load_yaml_config(path)
    path.write_text(_alias_bomb(4, mapping))  # 10,000 values: a big config, not a bomb
    assert load_yaml_config(path)["experiment"] == "bomb"


def test_a_config_built_of_shared_values_is_refused_before_the_secret_scan():
    """What Snakemake hands over (`--config`, a merged file) is counted too, before any pass over it."""
    leaf: list = [1] * 10
    for _ in range(8):
        leaf = [leaf] * 10
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="expands to over"):
        validate_config({"experiment": "bomb", "x": leaf})
    assert time.perf_counter() - start < 1.0
    check_config_size(TINY)


# --------------------------------------------------------------------------- names and sources


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("experiment", lambda c: c.update(experiment="e" * 301)),
        ("debate.protocols", lambda c: c["debate"]["protocols"].update({"p" * 251: {"kind": "all_to_all"}})),
        ("agents", lambda c: c["agents"].update({"a" * 101: {"model": "tiny-random-llama"}})),
        ("training.runs", lambda c: c["training"]["runs"].update({"r" * 200: c["training"]["runs"]["sdrl"]})),
    ],
)
def test_a_name_too_long_for_a_file_name_is_refused(where, change):
    """A name becomes a path component with more appended (`<run>.<agent>.log`): past 100 characters
    the run would die of 'File name too long' after the stages before it ran."""
    config = copy.deepcopy(TINY)
    change(config)
    with pytest.raises(
        ConfigError, match=rf"^config: {re.escape(where)}: the name '\w+' is \d+ characters.*at most 100"
    ):
        validate_config(config)
    config = copy.deepcopy(TINY)
    config["experiment"] = "e" * 100
    validate_config(config)


@pytest.mark.parametrize(
    "source",
    ["hf:a/..", "hf:../b", "hf:a/b/..", "hf:a/.b", "hf:a--b/c", "hf:a/b.git", "hf:a/b@", "hf:a/b@../../x", "hf:a/ b"],
)
def test_a_hub_source_that_is_no_repo_id_is_refused(source):
    with pytest.raises(ConfigError, match=rf"config: models\.m\.source = {re.escape(repr(source))}"):
        check_model_source("models.m.source", source)


def test_real_hub_sources_pass():
    for source in ("hf:Qwen/Qwen2.5-7B-Instruct", "hf:gpt2", "hf:org/name@main", "hf:org/name@refs/pr/1", "hf:a_b/c.d"):
        check_model_source("models.m.source", source)


# --------------------------------------------------------------------------- cut-off weight files


def _model_folder(path, tensors=2):
    from safetensors.numpy import save_file

    path.mkdir()
    (path / "config.json").write_text("{}")
    save_file({f"w{i}": np.ones((64, 64), dtype=np.float32) for i in range(tensors)}, str(path / "model.safetensors"))
    return path


def test_a_cut_off_safetensors_file_is_named_with_what_to_do(tmp_path):
    folder = _model_folder(tmp_path / "m")
    check_model_files(folder)
    weights = folder / "model.safetensors"
    whole = weights.read_bytes()
    for cut in (len(whole) - 1, 200, 5):
        weights.write_bytes(whole[:cut])
        with pytest.raises(
            ModelFileError, match=rf"{re.escape(str(weights))}: not a whole safetensors file .*delete the folder"
        ):
            model_fingerprint(folder)  # what every engine computes before it loads the weights
    weights.unlink()
    weights.mkdir()  # a folder where the file should be
    with pytest.raises(ModelFileError, match=r"not a whole safetensors file \(it cannot be read"):
        check_model_files(folder)
    weights.rmdir()
    weights.write_bytes(whole)
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {"w0": "model-00002-of-00002.safetensors"}}')
    with pytest.raises(ModelFileError, match=r"index\.json: names shards missing from the folder"):
        check_model_files(folder)


def test_the_dry_run_names_the_model_whose_folder_holds_a_cut_off_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _model_folder(tmp_path / "mine")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    exp = _experiment(PRICED, **{"models.local.source": "mine"})
    with pytest.raises(ConfigError, match=r"^config: models\.local \(mine\): mine/model\.safetensors: not a whole"):
        exp.check_model_files()


# --------------------------------------------------------------------------- the dry run


def test_the_dry_run_refuses_an_alias_bomb_and_an_unreadable_accelerate_config_naming_the_files(tmp_path):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_alias_bomb(9, mapping=False))
    # before: the secret scan alone walked its 10**9 values (400 s), past this timeout
    proc = snakemake(tmp_path, "--configfile", str(bomb), "-n", check=False, timeout=300)
    assert proc.returncode != 0 and f"config {bomb}: expands to over" in proc.stdout + proc.stderr
    config = copy.deepcopy(TINY)
    config["training"]["runs"]["sdrl"]["accelerate_config"] = "list.yaml"
    (tmp_path / "list.yaml").write_text("- distributed_type: DEEPSPEED\n")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = snakemake(tmp_path, "--configfile", str(path), "-n", check=False, timeout=120)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "AttributeError" not in said
    assert f"config ({path}): training.runs.sdrl.accelerate_config = 'list.yaml': accelerate config list.yaml: " in said
    assert not (tmp_path / "results").exists()


# --------------------------------------------------------------------------- what the repository carries

#: names a process's environment is dumped under (accelerate's multi-node DeepSpeed launch writes the first)
ENVIRONMENT_FILES = (".deepspeed_env", ".env", ".envrc")
#: variables every shell has: three of them at line starts make a file an environment dump
SHELL_VARIABLES = ("HOME", "PATH", "PWD", "SHELL", "SHLVL", "TERM", "LANG", "USER", "HOSTNAME", "OLDPWD")
#: the stand-ins tests/test_openai_api_key_env.py and its kin feed the secret checks (a real key has none)
PLACEHOLDERS = ("abcdefgh", "{", "user:password@", "sk-default-variable", "hunter2secret")


def test_no_tracked_file_is_an_environment_dump_or_holds_a_key():
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    dumps, keys = [], []
    for name in filter(None, files.stdout.split("\0")):
        path = REPO_ROOT / name
        if path.name in ENVIRONMENT_FILES or path.suffix == ".env":
            dumps.append(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):  # binary, or deleted in the working tree
            continue
        shell = set(re.findall(r"(?m)^(?:export |declare -x )?([A-Z_]+)=", text)) & set(SHELL_VARIABLES)
        if len(shell) >= 3:
            dumps.append(name)
        keys += [
            f"{name}: {m.group(0)[:6]}..."
            for m in SECRET_VALUE.finditer(text)
            if not any(p in m.group(0) for p in PLACEHOLDERS)
        ]
    assert not dumps, f"environment dumps are tracked (git rm --cached them; .gitignore lists them): {dumps}"
    assert not keys, f"key-like values are tracked: {keys}"
