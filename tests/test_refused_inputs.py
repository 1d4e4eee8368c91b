"""Bad inputs refused before any job, each naming its file, key and value (issue 72): dollars that are
no finite number and caps that could not count what they cap; accelerate configs the engine doesn't
run or can't read; configs whose YAML aliases expand past reason; names too long for a file name;
cut-off weight files; Hub ids that climb out; and no environment dump or key in the repository."""

from __future__ import annotations

import copy
import re
import subprocess

import yaml
from workflow_helpers import REPO_ROOT

from debatelab.config import Experiment, validate_config
from debatelab.credentials import SECRET_VALUE

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
