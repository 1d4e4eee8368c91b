"""Config names become path segments (results/<experiment>/, data/<dataset>/, train/<run>/,
<pair>.parquet, ...): each map of names in the schema refuses a key that could leave the working
directory, and a new map can't be added without that check (the schema is walked, not listed)."""

from __future__ import annotations

import copy

import pytest
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import SCHEMA_PATH, ConfigError, validate_config

#: maps whose keys never reach a path, with the reason
KEYS_NEVER_IN_A_PATH = {
    "paper_choices": "keys are dotted setting paths (training.<run>.<key>), read as text only",
}
NAME_REF = {"$ref": "#/definitions/name"}
ESCAPES = ["../outside", "a/b", "/abs", ".hidden", ".."]


def name_maps(node=None, path="", definitions=None, depth=0):
    """(config path, schema node) of every map with free keys (additionalProperties a schema)."""
    if node is None:
        node = yaml.safe_load(SCHEMA_PATH.read_text())
        definitions = node.get("definitions", {})
    if not isinstance(node, dict) or depth > 6:
        return
    if "$ref" in node:
        target = node["$ref"].rsplit("/", 1)[-1]
        if target != "name":
            yield from name_maps(definitions[target], path, definitions, depth + 1)
        return
    if isinstance(node.get("additionalProperties"), dict):
        yield path, node
        yield from name_maps(node["additionalProperties"], f"{path}.<key>", definitions, depth + 1)
    for key, sub in (node.get("properties") or {}).items():
        yield from name_maps(sub, f"{path}.{key}" if path else key, definitions, depth + 1)
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in node.get(key) or []:
            yield from name_maps(sub, path, definitions, depth + 1)


def test_every_map_of_names_in_the_schema_refuses_a_path_escape():
    maps = dict(name_maps())
    assert {"datasets", "models", "agents", "debate.protocols", "calibration.pairs", "training.runs"} <= set(maps)
    for path, node in maps.items():
        if path in KEYS_NEVER_IN_A_PATH:
            continue
        names = node.get("propertyNames")
        assert names == NAME_REF or (names and "enum" in names), (
            f"schema: the keys of {path} may become a path segment but aren't checked: add "
            f'propertyNames: {{$ref: "#/definitions/name"}} (or list it in KEYS_NEVER_IN_A_PATH with why)'
        )


SHIPPED = [REPO_ROOT / "config/config.yaml", *sorted((REPO_ROOT / "config/experiments").glob("*.yaml"))]
#: an entry for a map no shipped config fills (only the key may be wrong)
FILLERS = {"gpus.types": {"a100": {"memory_gib": 80, "per_node": 8}}}


def _config_with_key(map_path: str, key: str) -> dict:
    """The first shipped config that fills the map at `map_path`, with `key` added to the map (a copy
    of one of its entries, so that only the key is wrong)."""
    for shipped in SHIPPED:
        config = yaml.safe_load(shipped.read_text())
        if map_path in FILLERS:  # put the filler in place: {gpus: {types: {...}}}
            parent, _, last = map_path.rpartition(".")
            holder = config
            for part in filter(None, parent.split(".")):
                holder = holder.setdefault(part, {})
            holder.setdefault(last, copy.deepcopy(FILLERS[map_path]))
        node = config
        for part in map_path.split("."):
            if part == "<key>":
                node = next((v for v in node.values() if isinstance(v, dict) and v), None)
            else:
                node = node.get(part)
            if not isinstance(node, dict):
                break
        if isinstance(node, dict) and node:
            node[key] = copy.deepcopy(next(iter(node.values())))
            return config
    raise AssertionError(f"no shipped config fills {map_path}: add an entry to FILLERS")


NAME_MAPS = [
    path for path, node in name_maps() if path not in KEYS_NEVER_IN_A_PATH and node.get("propertyNames") == NAME_REF
]


@pytest.mark.parametrize("map_path", NAME_MAPS)
@pytest.mark.parametrize("key", ESCAPES)
def test_a_name_with_a_path_in_it_is_refused_naming_the_map(map_path, key):
    config = _config_with_key(map_path, key)
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    message = str(error.value)
    assert repr(key) in message and "does not match" in message


@pytest.mark.parametrize("key", ["../outside", ".."])
def test_the_experiment_name_cannot_leave_results(key):
    config = yaml.safe_load((REPO_ROOT / "config/config.yaml").read_text())
    config["experiment"] = key
    with pytest.raises(ConfigError, match="experiment"):
        validate_config(config)


def test_snakemake_refuses_a_pair_named_with_dot_dot_at_dry_run(tmp_path):
    config = _config_with_key("calibration.pairs", "../../escaped")
    path = tmp_path / "escape.yaml"
    path.write_text(yaml.safe_dump(config))
    workdir = tmp_path / "work"
    workdir.mkdir()
    proc = snakemake(workdir, "--configfile", str(path), "-n", check=False, timeout=300)
    assert proc.returncode != 0
    assert "'../../escaped' does not match" in proc.stdout + proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["escape.yaml", "work"]
    assert not (workdir / "results").exists()


def test_every_wildcard_of_the_rules_is_constrained_in_common_smk():
    """A wildcard left free matches '/' and '..': each one the rules use is constrained in
    rules/common.smk, and those that come from config names match only the names the config holds."""
    import re

    common = (REPO_ROOT / "rules/common.smk").read_text()
    block = common[common.index("wildcard_constraints:") :].split("\n\n", 1)[0]
    constrained = set(re.findall(r"^\s+(\w+)=", block, re.M))
    used = set()
    for path in (REPO_ROOT / "rules").glob("*.smk"):
        text = path.read_text()
        used |= set(re.findall(r"\{\{(\w+)\}\}", text))  # wildcards inside f-strings
        used |= {
            w
            for line in re.findall(r'^\s+(?:directory\()?"([^"]*)"', text, re.M)
            for w in re.findall(r"\{(\w+)\}", line)
        }
    assert used, "no wildcard found: the parser is out of step with the rules"
    assert used - {"name"} <= constrained, f"unconstrained wildcards: {sorted(used - constrained - {'name'})}"
