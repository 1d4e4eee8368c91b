"""Reading a config file: YAML that refuses a key given twice, the JSON schema's check with its
defaults filled in (`validate_config`, as Snakemake's `validate(..., set_default=True)`), and an
agent's backend options against its backend's settings. The experiment's cross-checks are
`config.Experiment`'s."""

from __future__ import annotations

import copy
import functools
import math
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

    check_config_size(config)
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
        if error.validator == "maxLength" and error.schema.get("pattern") == NAME_PATTERN:
            raise ConfigError(
                f"config: {where}: the name {error.instance!r} is {len(error.instance)} characters; a name "
                f"becomes a file or folder name (with more appended, under the usual 255-byte limit): at most "
                f"{error.validator_value}"
            )
        raise ConfigError(f"config: {where}: {error.message}")
    return filled


#: config/schema.yaml's `name` pattern (its `maxLength` bounds the file names built from a name)
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"

#: [CHOICE] The most nodes a config may hold with every YAML alias expanded (the shipped ones hold
#: under 6,000): aliases of aliases make a file of a few lines stand for billions, and every pass
#: over it (the secret scan, the schema) would run for hours.
MAX_CONFIG_NODES = 200_000


def _expanded_nodes(root, children, limit: int = MAX_CONFIG_NODES) -> float:
    """The nodes of a tree whose shared parts (YAML aliases) count once per use, counted once per
    shared part (so in time linear in the distinct parts); past `limit` the count stops there, and
    a part holding itself counts as infinite."""
    sizes: dict[int, float] = {}
    open_: set[int] = set()

    def size(node) -> float:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_:
            return math.inf
        open_.add(key)
        total = 1.0
        for child in children(node):
            total += size(child)
            if total > limit:
                break
        open_.discard(key)
        sizes[key] = total
        return total

    return size(root)


def _yaml_children(node):
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return node.value if isinstance(node, yaml.SequenceNode) else ()


def _value_children(value):
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    return value if isinstance(value, list | tuple) else ()


def check_config_size(config, where: str = "config") -> None:
    """Refuse a config that stands for more than MAX_CONFIG_NODES values once its aliases are expanded."""
    nodes = _expanded_nodes(config, _value_children)
    if nodes > MAX_CONFIG_NODES:
        raise ConfigError(_size_message(where, nodes))


def _size_message(where: str, nodes: float) -> str:
    said = (
        "holds itself (an alias inside its own anchor)"
        if math.isinf(nodes)
        else f"expands to over {MAX_CONFIG_NODES:,} values"
    )
    return (
        f"{where}: {said} with its YAML aliases (*name) expanded; a config is a few thousand values at most, so "
        "this is an alias bomb or a mistake: write the values out, or alias only small blocks"
    )


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


def load_yaml_file(path: str | Path, what: str = "config"):
    """A YAML file's value, refusing duplicate keys (`_UniqueKeyLoader`) and more than
    MAX_CONFIG_NODES values with its aliases expanded (counted before anything is built); a file
    that doesn't read or parse is a ConfigError naming it and saying why, in one line."""
    path = Path(path)
    try:
        with path.open(encoding="utf-8") as stream:
            loader = _UniqueKeyLoader(stream)
            try:
                node = loader.get_single_node()
                if node is None:
                    return None
                nodes = _expanded_nodes(node, _yaml_children)
                if nodes > MAX_CONFIG_NODES:
                    raise ConfigError(_size_message(f"{what} {path}", nodes))
                return loader.construct_document(node)
            finally:
                loader.dispose()
    except yaml.YAMLError as error:
        said = " ".join(str(error).replace('"<unicode string>"', str(path)).split())
        raise ConfigError(f"{what} {path}: not valid YAML: {said}") from None
    except RecursionError:
        raise ConfigError(f"{what} {path}: nested too deep to read (a config nests a few levels)") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {path}: not a text file in UTF-8 ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise ConfigError(f"{what} {path}: cannot be read ({error.strerror or error})") from None


def load_yaml_config(path: str | Path) -> dict:
    """A config file read as YAML (`load_yaml_file`): a mapping of settings, else a ConfigError."""
    value = load_yaml_file(path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(
            f"config {path}: a config is a mapping of settings (experiment: ..., models: ...), not a "
            f"{type(value).__name__}"
        )
    return value


def check_config_files(paths) -> None:
    """Each config file given to Snakemake (`--configfile`), read again with duplicate keys and alias
    bombs refused (`load_yaml_file`): Snakemake's own reading keeps the last of two equal keys
    silently and leaves aliases of lists shared, for the first pass over them to expand."""
    for path in paths:
        if Path(path).suffix != ".json" and Path(path).is_file():
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
