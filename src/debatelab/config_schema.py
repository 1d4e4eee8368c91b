"""Reading a config file: YAML that refuses a key given twice, the JSON schema's check with its
defaults filled in (`validate_config`, as Snakemake's `validate(..., set_default=True)`), and an
agent's backend options against its backend's settings. The experiment's cross-checks are
`config.Experiment`'s."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import yaml

from .credentials import check_no_secrets
from .errors import ConfigError

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"


def validate_config(config: dict, schema_path: str | Path = SCHEMA_PATH) -> dict:
    """A copy of `config` checked against the schema with its defaults filled in (what Snakemake's
    `validate(..., set_default=True)` does); a violation raises ConfigError naming the key. A config
    holding a credential is refused first (`check_no_secrets`)."""
    import jsonschema

    check_no_secrets(config)
    schema = yaml.safe_load(Path(schema_path).read_text())
    base = jsonschema.validators.validator_for(schema)

    def fill_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if isinstance(sub, dict) and "default" in sub:
                    instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from base.VALIDATORS["properties"](validator, properties, instance, schema)

    filled = copy.deepcopy(config)
    validator = jsonschema.validators.extend(base, {"properties": fill_defaults})(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(filled))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ConfigError(f"config: {where}: {error.message}")
    return filled


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml's safe loader, refusing a key given twice in one mapping (plain YAML keeps the last one
    silently, so a second `agents: alice:` would replace the first without a word). Keys that a
    merge (`<<: *anchor`) brings in may be overridden: that is what a merge is for."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: the safe loader refuses it itself
                    continue
                if first is not None:
                    raise ConfigError(
                        f"{key_node.start_mark.name}: line {key_node.start_mark.line + 1}: the key {key!r} is "
                        f"given twice in one mapping (first on line {first}); YAML would keep only the last"
                    )
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _without_defaults(schema):
    """A schema with its `default`s removed: an agent's backend options override the backend's
    settings only where the agent sets them, so validating them must not fill any in."""
    if isinstance(schema, dict):
        return {k: _without_defaults(v) for k, v in schema.items() if k != "default"}
    if isinstance(schema, list):
        return [_without_defaults(v) for v in schema]
    return schema


#: options an agent may give its backend beyond the backend's shared settings under `backends`
AGENT_ONLY_BACKEND_OPTIONS = {
    "openai": {
        "served_model_name": {"type": "string", "description": "the model's name at the endpoint (default: its path)"},
        "extra_body": {"type": "object", "description": "fields added to every request (e.g. reasoning_effort)"},
        "tokenizer_path": {"type": "string", "description": "a local tokenizer to count prompt tokens with"},
    },
}


@functools.lru_cache(maxsize=1)
def _backend_option_schemas() -> dict:
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
    schemas = {name: _without_defaults(sub) for name, sub in schema["properties"]["backends"]["properties"].items()}
    for name, extra in AGENT_ONLY_BACKEND_OPTIONS.items():
        schemas[name]["properties"].update(extra)
    return schemas


def check_backend_options(where: str, backend: str, options: dict) -> None:
    """An agent's `backend_options` against its backend's settings under `backends` (same names and
    types): a typo is an error at dry run naming the key, not a TypeError inside the job."""
    import jsonschema

    schema = _backend_option_schemas().get(backend)
    if schema is None:
        return
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(options))
    if error is not None:
        key = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "additionalProperties":
            known = sorted(schema.get("properties", {}))
            raise ConfigError(f"config: {where}: {error.message} (backend {backend!r} takes: {known})")
        raise ConfigError(f"config: {where}{'.' + key if key else ''}: {error.message}")


def load_yaml_config(path: str | Path) -> dict:
    """A config file read as YAML, refusing duplicate keys (`_UniqueKeyLoader`) and naming the file
    when it doesn't parse."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:
            return yaml.load(stream, Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {error}") from None


def check_config_files(paths) -> None:
    """Each config file given to Snakemake (`--configfile`), read again with duplicate keys refused:
    Snakemake's own reading keeps the last of two equal keys silently."""
    for path in paths:
        if Path(path).suffix in (".yaml", ".yml") and Path(path).is_file():
            load_yaml_config(path)


def refuse_unnamed_experiment(paths) -> None:
    """Config files given without an `experiment:` name are refused: the workflow would read the
    default config beneath them and mix its datasets, agents and runs into theirs."""
    if paths:
        raise ConfigError(
            f"config ({', '.join(map(str, paths))}): no `experiment:` name. An experiment config names itself "
            "(its results go to results/<experiment>/); without --configfile the default config/config.yaml runs"
        )


def naming_files(error: ConfigError, paths) -> ConfigError:
    """The error with the config files it is about named first ("config (a.yaml): key ...")."""
    text = str(error)
    if not paths or not text.startswith("config: "):
        return error
    return ConfigError(f"config ({', '.join(map(str, paths))}): {text.removeprefix('config: ')}")
