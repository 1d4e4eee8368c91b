"""An experiment's config: validated against `config/schema.yaml`, defaults filled, cross-references
checked, and the questions the workflow asks of it answered in one place.

`rules/common.smk` validates the config with Snakemake's `validate` (which fills the schema's
defaults) and wraps it in `Experiment`, whose constructor runs every check the schema can't
express (an agent's model is a key of `models`, a protocol's participants are agents, a pair's
debate is a protocol of exactly its two agents, ...). Each error is a `ConfigError` naming the
key and the value. Outside Snakemake, `load_experiment(path)` does the same from a YAML file.

The settings of the stage jobs are frozen dataclasses in their packages; their defaults match
the schema's (a test checks it), and `Experiment` builds them from the config.
"""

from __future__ import annotations

import copy
import functools
import importlib
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from . import prompts
from .data.registry import split_file
from .llm import SamplingParams
from .models import MODELS_DIR, model_folder_name, model_settings

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "config" / "schema.yaml"
#: The papers' published numbers, one YAML per paper; its `backbones:` are what `paper_backbone` may name.
PAPER_NUMBERS_DIR = Path(__file__).resolve().parents[2] / "config" / "paper_numbers"

TRAINED_PREFIX = "trained:"
#: Protocol keys a training run sets itself (seats, datasets, threads, rounds), not taken from its protocol.
TRAINING_PROTOCOL_OWN_KEYS = ("participants", "datasets", "threads", "rounds", "confidence")
#: The papers the evaluate stage rebuilds, with their report titles: one registry. Each has its builder
#: `evaluation/papers/<paper>.py` and its published numbers `config/paper_numbers/<paper>.yaml`; the
#: schema's paper enums list the same names (tests/test_registries.py checks all three).
PAPER_TITLES = {
    # short: the report's menu widens to the longest breadcrumb, narrowing the pane that shows tables
    "udpo": "UDPO: uncertainty against debate collapse (arXiv:2602.07186)",
    "umad": "UMAD: epistemic gain, aleatoric cost (arXiv:2603.01221)",
    "svr_mad": "SVR-MAD: posterior-guided sparse debate (arXiv:2605.23099)",
    "sdrl": "SDRL: self-debate reinforcement learning (arXiv:2601.22297)",
    "confidence": "Calibrated confidence protocols (arXiv:2606.13591)",
}
PAPERS = tuple(PAPER_TITLES)

#: Protocol kinds of synchronous rounds of every seat, which a multi-agent training run can debate on.
SYNCHRONOUS_PROTOCOL_KINDS = ("all_to_all", "ring", "centralized")


@dataclass(frozen=True)
class TrainingMethod:
    """What a training run's `method` is (`TRAINING_METHODS`). Its trainer and settings class are
    named by module and attribute and imported on use, so the config imports no training code."""

    name: str
    multi_agent: bool  # trains every agent of a debate (rule train_agents), else one policy (rule train)
    module: str  # the module of its trainer and settings class: debatelab.training.methods.<module>
    trainer: str  # its trainer class in `module`
    description: str  # one line
    spec: str  # where its paper specifies it (section / appendix of `paper`)
    paper: str
    settings: str | None = None  # its settings dataclass in `module`; None: its knobs are TrainSettings fields
    block: str | None = None  # the key of that block in `training.runs.<run>` (a preset shares its base's)
    preset: dict = field(default_factory=dict)  # the defaults the block's null values take for this method
    protocol_kinds: tuple[str, ...] = ()  # multi-agent: the debate protocol kinds it trains on

    def trainer_class(self) -> type:
        return getattr(importlib.import_module(self.module), self.trainer)

    def settings_class(self) -> type | None:
        return getattr(importlib.import_module(self.module), self.settings) if self.settings else None


def _training_method(
    name: str,
    multi_agent: bool,
    trainer: str,
    description: str,
    spec: str,
    paper: str,
    *,
    module: str | None = None,
    **more,
) -> TrainingMethod:
    return TrainingMethod(
        name, multi_agent, f"debatelab.training.methods.{module or name}", trainer, description, spec, paper, **more
    )


#: The training methods, one registry: a run's `method` names one. Everything that lists or
#: dispatches on methods reads it: the checks below (which runs train every agent of a debate, the
#: block whose `questions_per_step` divides among GPUs, the protocol kinds a run may debate on),
#: `TrainSettings` (its `method` and blocks), the stage jobs (`training.stage`,
#: `training.multi_agent_stage`: the trainer class) and `MappoSettings.resolved` (a preset's
#: defaults). The schema's method enums list the same names (tests/test_registries.py checks them). A
#: new method is its module in `training/methods/` and its entry here, plus its name in the schema's
#: two method enums (a settings block of its own: also a field of `TrainSettings` and of the schema).
TRAINING_METHODS: dict[str, TrainingMethod] = {
    m.name: m
    for m in (
        _training_method(
            "dapo",
            False,
            "DapoTrainer",
            "DAPO: group advantages, clip-higher, token-mean loss, dynamic sampling, soft overlong punishment",
            "§3-5, §6.1.1, App. A.1",
            "DAPO, the RL algorithm SDRL builds on (Liu et al., arXiv:2601.22297)",
        ),
        _training_method(
            "sdrl",
            False,
            "SdrlTrainer",
            "SDRL: DAPO plus a second turn debating two of the prompt's own rollouts, updated together",
            "§3-5, §6.1.1, App. A.1",
            "Liu et al., arXiv 2601.22297 (SDRL)",
        ),
        _training_method(
            "udpo",
            True,
            "UdpoTrainer",
            "UDPO: uncertainty-weighted trajectory rewards per seat, batch-mean advantages, uncertainty-driven replay",
            "§4, App. A",
            "Tang et al., arXiv 2602.07186 (UDPO)",
            settings="UdpoSettings",
            block="udpo",
            protocol_kinds=SYNCHRONOUS_PROTOCOL_KINDS,
        ),
        _training_method(
            "umad",
            True,
            "UmadTrainer",
            "UMAD: team reward, epistemic-influence reward, group advantages over G threads, aleatoric "
            "weights, turns updated in sequence; eta = alpha_au = 0 is IPPO",
            "§4.2, App. C.2 (Algorithm 2)",
            "Qiao et al., arXiv 2603.01221 (UMAD)",
            settings="UmadSettings",
            block="umad",
            protocol_kinds=SYNCHRONOUS_PROTOCOL_KINDS,
        ),
        _training_method(
            "mappo",
            True,
            "MappoTrainer",
            "MAPPO (approximation): shared terminal reward r_task + w_c (1 - D), a centralized critic over "
            "agreement features",
            "Tang et al., arXiv 2602.07186 §5.1 (UDPO's baselines, approximated)",
            "Yu et al. 2022, MAPPO",
            settings="MappoSettings",
            block="mappo",
            preset={"consensus_weight": 1.0, "peer_swap_prob": 0.0},
            protocol_kinds=("all_to_all",),
        ),
        _training_method(
            "rmaac",
            True,
            "MappoTrainer",
            "RMAAC (approximation): MAPPO's trainer on r_task alone, shown peers swapped for wrong replies",
            "Tang et al., arXiv 2602.07186 §5.1 (UDPO's baselines, approximated)",
            "He et al. 2023, RMAAC",
            module="mappo",
            settings="MappoSettings",
            block="mappo",
            preset={"consensus_weight": 0.0, "peer_swap_prob": 0.2},
            protocol_kinds=("all_to_all",),
        ),
    )
}


def training_method(name: str) -> TrainingMethod:
    """The training method `name`, or a ValueError naming the known ones."""
    try:
        return TRAINING_METHODS[name]
    except KeyError:
        raise ValueError(f"training: unknown method {name!r} (known: {list(TRAINING_METHODS)})") from None


def multi_agent_methods() -> tuple[str, ...]:
    """The training methods that train every agent of a debate."""
    return tuple(name for name, m in TRAINING_METHODS.items() if m.multi_agent)


def trained_source(source: str) -> tuple[str, str] | None:
    """`trained:<run>` -> (run, ""), `trained:<run>/<agent>` -> (run, agent); None for other sources."""
    if not source.startswith(TRAINED_PREFIX):
        return None
    run, _, agent = source[len(TRAINED_PREFIX) :].partition("/")
    return run, agent


class ConfigError(ValueError):
    """A config that the schema accepts but that does not hold together."""


@functools.cache
def paper_backbones(paper: str) -> tuple[str, ...]:
    """The backbones a paper's published numbers name (`backbones:` of config/paper_numbers/<paper>.yaml),
    spelled as there; empty where the file lists none."""
    doc = yaml.safe_load((PAPER_NUMBERS_DIR / f"{paper}.yaml").read_text()) or {}
    return tuple(str(b) for b in doc.get("backbones") or ())


@dataclass(frozen=True)
class AgentSpec:
    """One agent of an experiment: a model, a backend and its sampling settings (config `agents.<name>`;
    defaults match config/schema.yaml)."""

    name: str
    model: str
    backend: str = "transformers"
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    system_prompt: str | None = None
    backend_options: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.max_tokens < 1:
            raise ValueError(
                f"agent {self.name!r}: temperature >= 0, top_p in (0, 1] and max_tokens >= 1 are required, got "
                f"{self.temperature}, {self.top_p}, {self.max_tokens}"
            )

    @classmethod
    def from_config(cls, name: str, cfg: dict, attack_prompt: str | None = None) -> AgentSpec:
        """`attack_prompt`: the dataset's AutoTransform rewrite for an adversarial agent (None: the fixed one)."""
        known = {
            k: cfg[k] for k in ("model", "backend", "temperature", "top_p", "max_tokens", "system_prompt") if k in cfg
        }
        if cfg.get("adversarial"):
            known["system_prompt"] = attack_prompt or prompts.ATTACK_SYSTEM_PROMPT
        return cls(name=name, backend_options=dict(cfg.get("backend_options") or {}), **known)

    def sampling(self, seed: int = 0, logprobs: bool = False, top_logprobs: int = 0) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=seed,
            logprobs=logprobs,
            top_logprobs=top_logprobs,
        )


# --------------------------------------------------------------------------- schema


#: fields that would hold a credential; a config names the environment variable instead
SECRET_FIELDS = {
    "api_key",
    "apikey",
    "token",
    "hf_token",
    "access_token",
    "auth_token",
    "password",
    "secret",
    "secret_key",
    "authorization",
}
#: credentials of OpenAI-style APIs (sk-...), the Hub (hf_...), a bearer header or a URL's password
#: (scheme://user:password@host), found anywhere inside a string: a key pasted into a URL or a longer
#: value ends up in .snakemake/metadata and the logs as surely as a bare one
SECRET_VALUE = re.compile(
    r"(?<![A-Za-z0-9])(?P<kind>sk-)[A-Za-z0-9_-]{16,}"
    r"|(?<![A-Za-z0-9])(?P<hub>hf_)[A-Za-z0-9]{20,}"
    r"|(?P<bearer>Bearer)\s+\S{8,}"
    r"|(?P<userinfo>[A-Za-z][A-Za-z0-9+.-]*://)[^\s/@:]*:[^\s/@]+@"
)


def check_no_secrets(config, where: str = "") -> None:
    """Refuse a config that holds an API key or token. Snakemake stores every job's params in plain
    text under .snakemake/metadata, and configs get committed: credentials come from environment
    variables only (`api_key_env`, HF_TOKEN), read inside the job."""
    items = config.items() if isinstance(config, dict) else enumerate(config) if isinstance(config, list) else ()
    for key, value in items:
        path = f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and key.lower() in SECRET_FIELDS and value not in (None, ""):
            raise ConfigError(
                f"config: {path} holds a credential; keys and tokens never go in a config (Snakemake "
                f"stores job params in plain text under .snakemake/metadata). {_secret_hint(path)}"
            )
        found = SECRET_VALUE.search(value) if isinstance(value, str) else None
        if found:  # the error names the kind of credential, never a character of its value
            kind = {"kind": "sk-...", "hub": "hf_...", "bearer": "Bearer ...", "userinfo": "a password in a URL"}[
                found.lastgroup
            ]
            raise ConfigError(
                f"config: {path} looks like a key or token ({kind}); keys never go in a config. {_secret_hint(path)}"
            )
        check_no_secrets(value, path)


def _secret_hint(path: str) -> str:
    if "token" in path.lower().rsplit(".", 1)[-1]:
        return "Hugging Face reads its token from the environment: `export HF_TOKEN=...` (or `hf auth login`)."
    return (
        "Export the key before running snakemake (`export OPENAI_API_KEY=...`; SLURM jobs inherit the environment) "
        "and, for another variable, name it with `api_key_env: MY_KEY_VARIABLE` in the backend's options."
    )


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


#: the bundled model sources `models.prepare_model` builds
BUNDLED_MODELS = ("smollm2-135m-instruct", "tiny-random-llama")


def check_model_source(where: str, source: str) -> None:
    """A model source a job can build: bundled:<known>, hf:<repo>, trained:<run>, or a local Hugging
    Face folder that exists now (relative to the working directory), so a typo stops the dry run
    rather than the model job."""
    if source.startswith("hf:"):
        repo = source[len("hf:") :].partition("@")[0]
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", repo):
            raise ConfigError(f"config: {where} = {source!r}: not a Hub repo id (hf:<org>/<name>[@revision])")
        return
    if source.startswith("trained:"):
        return
    if source.startswith("bundled:"):
        if source[len("bundled:") :] not in BUNDLED_MODELS:
            raise ConfigError(f"config: {where} = {source!r}: no such bundled model (known: {list(BUNDLED_MODELS)})")
        return
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise ConfigError(
            f"config: {where} = {source!r}: no such folder (from {Path.cwd()}); a local model is a Hugging "
            "Face folder, else use bundled:<name>, hf:<repo id> or trained:<run>"
        )
    if not (folder / "config.json").is_file():
        raise ConfigError(f"config: {where} = {source!r} has no config.json: not a Hugging Face model folder")


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


def load_experiment(path: str | Path) -> Experiment:
    """An experiment from a YAML config file, validated and checked as the workflow does."""
    return Experiment(validate_config(load_yaml_config(path)))


# --------------------------------------------------------------------------- the experiment


class Experiment:
    """A validated config (schema defaults filled) with its cross-references checked."""

    def __init__(self, config: dict):
        self.config = config
        self.name: str = config["experiment"]
        self.seed: int = config["seed"]
        self.datasets: dict = config["datasets"]
        self.models: dict = config["models"]
        self.agents: dict = config["agents"]
        self.debate: dict = config["debate"]
        self.protocols: dict = self.debate["protocols"]
        self.calibration: dict = config["calibration"]
        self.pairs: dict = self.calibration["pairs"]
        self.search: dict = config["protocol_search"]
        self.attack: dict = config["attack"]
        self.training_runs: dict = config["training"]["runs"]
        self.evaluation: dict = config.get("evaluation") or {}
        seeds = self.evaluation.get("seeds") or 1
        self._explicit_threads = {name: spec.get("threads") is not None for name, spec in self.protocols.items()}
        for spec in self.protocols.values():  # a protocol's repeats default to the evaluation's seeds
            if spec.get("threads") is None:
                spec["threads"] = seeds
        self.results = f"results/{self.name}"
        self.check()

    # -- datasets -------------------------------------------------------------------------
    def benchmark_of(self, dataset: str) -> str:
        """The registered benchmark a dataset entry reads (entries may alias one benchmark's splits)."""
        return self.datasets[dataset].get("benchmark") or dataset

    def dataset_path(self, dataset: str) -> str:
        """`data/<benchmark>/<split>/<source>[-seed<n>].parquet` (`data.registry.split_file`): named by
        what its rows depend on, so that experiments of one working directory share it when they read
        the split alike and never rewrite each other's."""
        spec = self.datasets[dataset]
        return split_file(self.benchmark_of(dataset), spec["split"], spec["source"], self.seed)

    # -- models and agents ----------------------------------------------------------------
    def model_dir(self, model: str) -> str:
        """The Hugging Face folder of a model: `resources/models/<label>-<key>` as `prepare_model`
        builds it (`prepared_model_settings`), or the trained policy of a training run (source
        `trained:<run>`), which stays under this experiment's results."""
        trained = trained_source(self.models[model]["source"])
        if trained:
            run, agent = trained
            return f"{self.results}/train/{run}/models/{agent}" if agent else f"{self.results}/train/{run}/model"
        return f"{MODELS_DIR}/{model_folder_name(self.prepared_model_settings(model))}"

    def prepared_model_settings(self, model: str) -> dict:
        """What `prepare_model`'s folder of a (not trained) model depends on (`models.model_settings`):
        the folder's name comes from these, and rule prepare_model's params are these, so that
        experiments sharing the folder agree on its params too."""
        spec = self.models[model]
        return model_settings(spec["source"], spec.get("dtype", "float32"), self.seed, spec.get("include"))

    def prepared_models(self) -> dict[str, dict]:
        """{folder name under resources/models: its `prepared_model_settings`} of the models this
        experiment prepares (every one but the trained); models built alike are one folder."""
        return {
            self.model_dir(m).rsplit("/", 1)[1]: self.prepared_model_settings(m)
            for m, spec in self.models.items()
            if not trained_source(spec["source"])
        }

    def agent_model_dir(self, agent: str) -> str:
        return self.model_dir(self.agents[agent]["model"])

    def adapter_base(self, model: str) -> str | None:
        """The base model whose engine serves `model` as a LoRA adapter (`adapter: true`), else None."""
        if not self.models[model].get("adapter"):
            return None
        run, agent = trained_source(self.models[model]["source"])
        return self.agents[self.origin_agent(agent)]["model"]

    def model_serving(self, model: str) -> str | dict:
        """What a job loads for `model`: its folder, or for an adapter-served model its base's folder
        and the adapter that the training run saved beside the merged weights."""
        base = self.adapter_base(model)
        if base is None:
            return self.model_dir(model)
        return {"base": self.model_dir(base), "adapter": f"{self.model_dir(model)}/adapter"}

    def model_input_dirs(self, models) -> list[str]:
        """The folders jobs of `models` read: each model's, and the bases of adapter-served ones."""
        dirs = [self.model_dir(m) for m in models]
        dirs += [self.model_dir(b) for m in models if (b := self.adapter_base(m)) is not None]
        return list(dict.fromkeys(dirs))

    def agent_settings(self, agent: str, dataset: str | None = None) -> dict:
        """The agent's config with its backend's defaults merged under its own backend options; on
        `dataset`, with that dataset's reply budget and context length where it sets them."""
        spec = dict(self.agents[agent])
        options = dict(self.config["backends"].get(spec["backend"], {}))
        options.update(spec.get("backend_options") or {})
        on = (self.datasets.get(dataset) or {}) if dataset is not None else {}
        if on.get("max_tokens") is not None:
            spec["max_tokens"] = on["max_tokens"]
        if on.get("max_model_len") is not None and spec["backend"] == "vllm":
            options["max_model_len"] = on["max_model_len"]
        spec["backend_options"] = options
        return spec

    def agent_samples(self, agent: str) -> int:
        """Zero-shot samples per question of one agent: its own `samples`, else zero_shot.samples."""
        return self.agents[agent].get("samples") or self.config["zero_shot"]["samples"]

    def uses_attack_prompt(self, agents) -> bool:
        """Whether jobs of `agents` read the AutoTransform prompt: a rewriter is set and one is adversarial."""
        return self.attack["rewriter"] is not None and any(self.agents[a].get("adversarial") for a in agents)

    # -- debate protocols -----------------------------------------------------------------
    def protocol_participants(self, protocol: str) -> list[str]:
        """Agent names of a protocol's seats, in order (a repeated name is another copy)."""
        return self.protocols[protocol].get("participants") or self.debate.get("participants") or list(self.agents)

    def evaluated_datasets(self) -> list[str]:
        """Datasets the zero-shot and debate stages run on (not those only training reads)."""
        return [name for name, spec in self.datasets.items() if spec.get("evaluate", True)]

    def protocol_datasets(self, protocol: str) -> list[str]:
        return self.protocols[protocol].get("datasets") or self.evaluated_datasets()

    def agent_datasets(self, agent: str) -> list[str]:
        """Datasets an agent is sampled zero-shot on: those of the protocols it sits in when every one of
        them names its `datasets` (a trained agent evaluated on one benchmark), else every evaluated one."""
        protocols = [p for p in self.protocols if agent in self.protocol_participants(p)]
        if (
            not protocols
            or any(not self.protocols[p].get("datasets") for p in protocols)
            or any(agent in spec["agents"] for spec in self.pairs.values())
        ):
            return self.evaluated_datasets()
        wanted = {d for p in protocols for d in self.protocol_datasets(p)}
        return [d for d in self.evaluated_datasets() if d in wanted]

    def protocol_agents(self, protocol: str) -> list[str]:
        return sorted(set(self.protocol_participants(protocol)))

    def protocol_models(self, protocol: str) -> list[str]:
        """Models the protocol calls (none for self-consistency, which only votes)."""
        if self.protocols[protocol]["kind"] == "self_consistency":
            return []
        return sorted({self.agents[a]["model"] for a in self.protocol_agents(protocol)})

    def protocol_options(self, protocol: str) -> dict:
        """The protocol's own options (`datasets` says where the workflow runs it, not how)."""
        return {k: v for k, v in self.protocols[protocol].items() if k != "datasets"}

    # -- confidence pairs -----------------------------------------------------------------
    def pair_datasets(self, pair: str) -> list[str]:
        """Datasets a pair is reported on; a dataset serving as another's fixed validation split is not one."""
        spec = self.pairs[pair]
        validation_only = set(spec["validation"].values())
        return spec.get("datasets") or [d for d in self.protocol_datasets(spec["debate"]) if d not in validation_only]

    def pair_validation_dataset(self, pair: str, dataset: str) -> str | None:
        """The dataset holding this dataset's fixed validation split for the pair, or None (cut per run)."""
        return self.pairs[pair]["validation"].get(dataset)

    # -- training -------------------------------------------------------------------------
    def train_settings(self, run: str) -> dict:
        """A run's settings with the experiment seed filled in (`training.settings.TrainSettings` keys);
        a multi-agent run's `protocol` resolved to its options (`train_protocol`)."""
        spec = dict(self.training_runs[run])
        spec["seed"] = self.seed if spec.get("seed") is None else spec["seed"]
        if spec.get("protocol") is not None:
            spec["protocol"] = self.train_protocol(run)
        # where its metrics go is no setting of the run: another tracker must not rerun a finished job
        workflow_keys = ("policy", "participants", "dataset", "gpus", "accelerate_config", "report_to")
        return {k: v for k, v in spec.items() if k not in workflow_keys}

    def report_to(self, run: str | None = None) -> list[str]:
        """The trackers a job logs to (`tracking.TRACKERS`; [] for none): the run's `report_to`, else
        `training.report_to` (also the evaluate stage's)."""
        block = self.config.get("training") or {}
        value = (self.training_runs[run].get("report_to") if run is not None else None) or block.get("report_to")
        names = [value] if isinstance(value, str) else list(value if value is not None else ["tensorboard"])
        return [n for n in names if n != "none"]

    def heldout_dataset(self, run: str) -> str | None:
        """The dataset a run's held-out accuracy is measured on during training (`heldout.dataset`), or None."""
        return (self.training_runs[run].get("heldout") or {}).get("dataset")

    def train_protocol(self, run: str) -> dict | None:
        """The options a multi-agent run's training debates use: those of the `debate.protocols` entry
        it names (the prompts the trained agents are evaluated on), or the options it gives. Who sits,
        where it runs, how many threads and rounds are the run's own (`participants`, its method's
        rounds / turns), so those keys are left out."""
        protocol = self.training_runs[run].get("protocol")
        if protocol is None:
            return None
        options = dict(self.protocols[protocol]) if isinstance(protocol, str) else dict(protocol)
        return {k: v for k, v in options.items() if k not in TRAINING_PROTOCOL_OWN_KEYS}

    def accelerate_config(self, run: str, workflow_dir: str | Path) -> str | None:
        """A run's accelerate config file (`accelerate_config`): the path as given when it exists (from
        the working directory), else from the workflow's folder, where `config/accelerate/` ships."""
        path = self.training_runs[run].get("accelerate_config")
        if path is None:
            return None
        for candidate in (Path(path), Path(workflow_dir) / path):
            if candidate.is_file():
                return str(candidate)
        raise ConfigError(
            f"config: training.runs.{run}.accelerate_config = {path!r}: no such file (looked in the "
            f"working directory and in {workflow_dir})"
        )

    def multi_agent_runs(self) -> list[str]:
        """Runs that train every participant of a debate (one output folder per agent)."""
        return [run for run, spec in self.training_runs.items() if TRAINING_METHODS[spec["method"]].multi_agent]

    def runs_of(self, method: str) -> list[str]:
        return [run for run, spec in self.training_runs.items() if spec["method"] == method]

    def run_agents(self, run: str) -> list[str]:
        """The agents a run trains: its policy, or its participants' distinct agents in seat order."""
        spec = self.training_runs[run]
        if TRAINING_METHODS[spec["method"]].multi_agent:
            return list(dict.fromkeys(spec["participants"]))
        return [spec["policy"]]

    def origin_agent(self, agent: str) -> str:
        """The untrained agent an agent's policy comes from: itself, or the agent a training run trained
        into its model (`trained:<run>/<agent>`, or the run's policy for `trained:<run>`)."""
        seen = set()
        while agent not in seen:
            seen.add(agent)
            trained = trained_source(self.models[self.agents[agent]["model"]]["source"])
            if trained is None:
                break
            run, trained_agent = trained
            agent = trained_agent or self.training_runs[run]["policy"]
        return agent

    def origin_model(self, model: str) -> str:
        """The untrained model whose weights (merged, the same size) a model has: itself, or the model
        of the agent its training run started from (`origin_agent`)."""
        trained = trained_source(self.models[model]["source"])
        if trained is None:
            return model
        run, agent = trained
        return self.agents[self.origin_agent(agent or self.training_runs[run]["policy"])]["model"]

    # -- evaluation -----------------------------------------------------------------------
    def paper_backbone(self, model: str, paper: str) -> str | None:
        """The backbone of `paper`'s published numbers a model stands for (`models.<name>.paper_backbone`,
        one name or {paper: name}); a trained model without its own stands for the model its run trained."""
        seen = set()
        while model not in seen:
            seen.add(model)
            spec = self.models[model]
            claim = spec.get("paper_backbone")
            if claim is not None:
                return claim.get(paper) if isinstance(claim, dict) else claim
            trained = trained_source(spec["source"])
            if trained is None:
                return None
            run, agent = trained
            model = self.agents[agent or self.training_runs[run]["policy"]]["model"]
        return None

    def evaluated_papers(self) -> list[str]:
        """`evaluation.papers`, or every paper this experiment has outputs for: the confidence paper
        needs calibration pairs, the other four debate protocols."""
        papers = self.evaluation.get("papers")
        if papers is not None:
            return list(papers)
        return [p for p in PAPERS if (self.pairs if p == "confidence" else self.protocols)]

    # -- checks ---------------------------------------------------------------------------
    def check(self) -> None:
        """Every cross-reference the schema can't express; ConfigError names the key and the value."""
        self._check_models_and_datasets()
        self._check_debate()
        self._check_pairs()
        self._check_training()
        self._check_evaluation()

    def _check_evaluation(self) -> None:
        self._check_paper_backbones()
        for dataset in self.evaluation.get("paper_datasets") or {}:
            if dataset not in self.datasets:
                raise ConfigError(
                    f"config: evaluation.paper_datasets names {dataset!r}, which is not a key of `datasets` "
                    f"(known: {sorted(self.datasets)})"
                )
        for paper in self.evaluation.get("papers") or []:
            needs, has = (
                ("calibration.pairs", self.pairs) if paper == "confidence" else ("debate.protocols", self.protocols)
            )
            if not has:
                raise ConfigError(
                    f"config: evaluation.papers lists {paper!r}, whose tables need {needs}; this config has none"
                )
        for name, spec in self.comparisons.items():
            kinds = {
                side: (
                    "agents"
                    if spec[side] in self.agents
                    else "debate.protocols"
                    if spec[side] in self.protocols
                    else None
                )
                for side in ("treatment", "control")
            }
            for side, kind in kinds.items():
                if kind is None:
                    raise ConfigError(
                        f"config: evaluation.comparisons.{name}.{side} is {spec[side]!r}, which is neither "
                        f"an agent nor a debate protocol (agents: {sorted(self.agents)}; "
                        f"protocols: {sorted(self.protocols)})"
                    )
            if kinds["treatment"] != kinds["control"]:
                raise ConfigError(
                    f"config: evaluation.comparisons.{name} compares {spec['treatment']!r} (of "
                    f"{kinds['treatment']}) with {spec['control']!r} (of {kinds['control']}); "
                    "compare two agents or two protocols"
                )

    @property
    def comparisons(self) -> dict[str, dict[str, str]]:
        """`evaluation.comparisons`: name -> {treatment, control}, paired accuracy comparisons."""
        return dict(self.evaluation.get("comparisons") or {})

    def _check_paper_backbones(self) -> None:
        """`paper_backbone` names a backbone of the papers' numbers: a {paper: name} entry one of that
        paper's, a single name one of some evaluated paper's."""
        papers = self.evaluated_papers() or list(PAPERS)
        for name, spec in self.models.items():
            claim, where = spec.get("paper_backbone"), f"models.{name}.paper_backbone"
            if claim is None:
                continue
            for paper, backbone in claim.items() if isinstance(claim, dict) else [(None, claim)]:
                if paper is not None and paper not in PAPERS:
                    raise ConfigError(f"config: {where} names paper {paper!r} (known: {list(PAPERS)})")
                known = {p: paper_backbones(p) for p in ([paper] if paper else papers)}
                if not any(backbone in names for names in known.values()):
                    listed = "; ".join(f"{p}: {list(names)}" for p, names in known.items())
                    raise ConfigError(
                        f"config: {where if paper is None else f'{where}.{paper}'} = {backbone!r} names no "
                        f"backbone of the published numbers (config/paper_numbers `backbones`, {listed})"
                    )

    def _check_api_key_named(self, agent: str) -> None:
        """A server off this machine gets a key only from the variable named for it (`api_key_env`)."""
        from .llm.openai_backend import DEFAULT_API_KEY_ENV, is_loopback

        options = self.agent_settings(agent)["backend_options"]
        if not options.get("api_key_env") and not is_loopback(options["base_url"]):
            raise ConfigError(
                f"config: agents.{agent}: its server {options['base_url']} is not on this machine and no "
                f"api_key_env names the variable holding its key: set backend_options.api_key_env (e.g. "
                f"{DEFAULT_API_KEY_ENV}); a key is sent only to the endpoint it is named for"
            )

    def _check_models_and_datasets(self) -> None:
        from .data import BENCHMARKS

        for agent, spec in self.agents.items():
            if spec["model"] not in self.models:
                raise ConfigError(
                    f"config: agents.{agent}.model = {spec['model']!r} is not a key of `models` (known: {sorted(self.models)})"
                )
            check_backend_options(
                f"agents.{agent}.backend_options",
                spec.get("backend", "transformers"),
                spec.get("backend_options") or {},
            )
            if spec.get("backend") == "openai":
                self._check_api_key_named(agent)
        for name, spec in self.models.items():
            check_model_source(f"models.{name}.source", spec["source"])
            if spec.get("include") and not spec["source"].startswith("hf:"):
                raise ConfigError(
                    f"config: models.{name}.include applies to hf: sources only (source is {spec['source']!r})"
                )
        for name, spec in self.models.items():
            trained = trained_source(spec["source"])
            if trained is None:
                continue
            run, agent = trained
            if run not in self.training_runs:
                raise ConfigError(
                    f"config: models.{name}.source = {spec['source']!r} names no run of training.runs "
                    f"(known: {sorted(self.training_runs)})"
                )
            if not TRAINING_METHODS[self.training_runs[run]["method"]].multi_agent and agent:
                raise ConfigError(
                    f"config: models.{name}.source = {spec['source']!r}: run {run!r} trains one policy, "
                    f"name it trained:{run}"
                )
        for name, spec in self.models.items():
            if not spec.get("adapter"):
                continue
            trained = trained_source(spec["source"])
            if trained is None or not trained[1]:
                raise ConfigError(
                    f"config: models.{name}.adapter = true needs a source trained:<run>/<agent> (a LoRA "
                    f"adapter of a multi-agent run), not {spec['source']!r}"
                )
            users = {a: s["backend"] for a, s in self.agents.items() if s["model"] == name}
            if any(backend != "vllm" for backend in users.values()):
                raise ConfigError(
                    f"config: models.{name}.adapter = true is served on a vLLM engine; agents "
                    f"{sorted(a for a, b in users.items() if b != 'vllm')} use another backend"
                )
        for name, spec in self.datasets.items():
            benchmark = self.benchmark_of(name)
            if benchmark not in BENCHMARKS:
                where = f"datasets.{name}.benchmark = {benchmark!r}" if spec.get("benchmark") else f"datasets.{name}"
                raise ConfigError(f"config: {where} is not a registered benchmark (known: {sorted(BENCHMARKS)})")
            splits = BENCHMARKS[benchmark].splits
            if spec["split"] not in splits:
                raise ConfigError(
                    f"config: datasets.{name}.split = {spec['split']!r}; {benchmark} offers {sorted(splits)}"
                )
        rewriter = self.attack["rewriter"]
        if rewriter is not None and rewriter not in self.models:
            raise ConfigError(
                f"config: attack.rewriter = {rewriter!r} is not a key of `models` (known: {sorted(self.models)})"
            )

    def _check_debate(self) -> None:
        """Participants must be agents, and every copy × thread needs its own zero-shot sample."""
        for name, spec in self.protocols.items():
            where = f"debate.protocols.{name}.participants" if spec.get("participants") else "debate.participants"
            seats = self.protocol_participants(name)
            for agent in seats:
                if agent not in self.agents:
                    raise ConfigError(
                        f"config: {where} names {agent!r}, which is not a key of `agents` (known: {sorted(self.agents)})"
                    )
            for dataset in spec.get("datasets") or []:
                if dataset not in self.datasets:
                    raise ConfigError(
                        f"config: debate.protocols.{name}.datasets names {dataset!r}, which is not a key of `datasets`"
                    )
            for agent, copies in Counter(seats).items():
                need, have = copies * spec["threads"], self.agent_samples(agent)
                if need > have:
                    source = f"agents.{agent}.samples" if self.agents[agent].get("samples") else "zero_shot.samples"
                    threads = (
                        f"{spec['threads']} thread(s)"
                        if self._explicit_threads.get(name)
                        else f"{spec['threads']} thread(s) from evaluation.seeds"
                    )
                    raise ConfigError(
                        f"config: debate.protocols.{name} needs {need} zero-shot samples of agent {agent!r} "
                        f"({copies} copies × {threads}); {source} = {have}"
                    )

    def _check_training(self) -> None:
        """A run names an agent and a dataset; its policy is not trained by itself (a cycle)."""
        for run, spec in self.training_runs.items():
            where = f"training.runs.{run}"
            key = "participants" if TRAINING_METHODS[spec["method"]].multi_agent else "policy"
            for agent in self.run_agents(run):
                if agent not in self.agents:
                    raise ConfigError(
                        f"config: {where}.{key} names {agent!r}, which is not a key of `agents` "
                        f"(known: {sorted(self.agents)})"
                    )
                trained = trained_source(self.models[self.agents[agent]["model"]]["source"])
                if trained is not None and trained[0] == run:
                    raise ConfigError(f"config: {where}.{key} names {agent!r}, whose model is what this run trains")
            if spec["dataset"] not in self.datasets:
                raise ConfigError(
                    f"config: {where}.dataset = {spec['dataset']!r} is not a key of `datasets` (known: {sorted(self.datasets)})"
                )
            heldout = self.heldout_dataset(run)
            if heldout is not None and heldout not in self.datasets:
                raise ConfigError(
                    f"config: {where}.heldout.dataset = {heldout!r} is not a key of `datasets` "
                    f"(known: {sorted(self.datasets)})"
                )
            if heldout is not None and self.dataset_path(heldout) == self.dataset_path(spec["dataset"]):
                raise ConfigError(
                    f"config: {where}.heldout.dataset = {heldout!r} reads the run's training questions "
                    f"({self.dataset_path(heldout)}); name another dataset"
                )
            if TRAINING_METHODS[spec["method"]].multi_agent:
                self._check_train_protocol(run, spec)
            if TRAINING_METHODS[spec["method"]].multi_agent and spec.get("finetuning", "lora") != "lora":
                raise ConfigError(
                    f"config: {where}.finetuning = {spec['finetuning']!r}: {spec['method']} trains one LoRA "
                    f"adapter per agent"
                )
            if spec.get("parallelism", "data") == "model" and (
                not TRAINING_METHODS[spec["method"]].multi_agent or spec.get("rollout_backend") == "vllm"
            ):
                raise ConfigError(
                    f"config: {where}.parallelism = 'model' places the bases of a multi-agent run "
                    f"({', '.join(multi_agent_methods())}) on GPUs of their own and rolls out on transformers; "
                    f"method {spec['method']!r}, rollout_backend {spec.get('rollout_backend', 'auto')!r}"
                )
            if (
                TRAINING_METHODS[spec["method"]].multi_agent and spec.get("parallelism", "data") == "data"
            ):  # each process debates its share
                block = TRAINING_METHODS[spec["method"]].block
                per_step = (spec.get(block) or {}).get("questions_per_step", 1)
                if per_step % spec["gpus"]:
                    raise ConfigError(
                        f"config: {where}.{block}.questions_per_step = {per_step} must divide among "
                        f"gpus = {spec['gpus']} processes"
                    )
            for name in ("prompts_per_step", "mini_batch_size"):
                if spec.get("parallelism", "data") == "data" and spec[name] % spec["gpus"]:
                    raise ConfigError(
                        f"config: {where}.{name} = {spec[name]} must divide among gpus = {spec['gpus']} processes"
                    )
        for model, spec in self.models.items():  # trained:<run>/<agent> names an agent the run trains
            run, agent = trained_source(spec["source"]) or (None, None)
            if (
                run is not None
                and TRAINING_METHODS[self.training_runs[run]["method"]].multi_agent
                and agent not in self.run_agents(run)
            ):
                raise ConfigError(
                    f"config: models.{model}.source = {spec['source']!r}: run {run!r} trains one model per agent; name one "
                    f"as trained:{run}/<agent> (agents: {self.run_agents(run)})"
                )

    def _check_train_protocol(self, run: str, spec: dict) -> None:
        """A multi-agent run debates on a protocol: a key of debate.protocols, or its options, of a kind
        its method can train on."""
        where = f"training.runs.{run}.protocol"
        protocol = spec.get("protocol")
        if protocol is None:
            raise ConfigError(
                f"config: {where} is missing: a {spec['method']} run debates on a protocol, the name of a "
                f"debate.protocols entry (the prompts its agents are evaluated on; known: "
                f"{sorted(self.protocols)}) or its options"
            )
        if isinstance(protocol, str) and protocol not in self.protocols:
            raise ConfigError(
                f"config: {where} = {protocol!r} is not a key of debate.protocols (known: {sorted(self.protocols)})"
            )
        kind = self.train_protocol(run)["kind"]
        allowed = TRAINING_METHODS[spec["method"]].protocol_kinds
        if kind not in allowed:
            raise ConfigError(
                f"config: {where}: kind {kind!r} is not one {spec['method']} trains on (allowed: {list(allowed)})"
            )

    def _check_pairs(self) -> None:
        """A pair names two agents and a debate protocol of exactly those two that elicits the estimators."""
        for name, spec in self.pairs.items():
            where = f"calibration.pairs.{name}"
            for agent in spec["agents"]:
                if agent not in self.agents:
                    raise ConfigError(
                        f"config: {where}.agents names {agent!r}, which is not a key of `agents` (known: {sorted(self.agents)})"
                    )
            if spec["agents"][0] == spec["agents"][1]:
                raise ConfigError(f"config: {where}.agents = {spec['agents']}; a pair needs two different agents")
            debate = spec["debate"]
            if debate not in self.protocols:
                raise ConfigError(
                    f"config: {where}.debate = {debate!r} is not a key of debate.protocols (known: {sorted(self.protocols)})"
                )
            protocol = self.protocols[debate]
            runs_on = self.protocol_datasets(debate)
            for dataset in spec.get("datasets") or []:
                if dataset not in runs_on:
                    raise ConfigError(
                        f"config: {where}.datasets names {dataset!r}, where its debate protocol {debate!r} does not run "
                        f"(it runs on {runs_on})"
                    )
            for test, val in spec["validation"].items():
                for dataset in (test, val):
                    if dataset not in runs_on:
                        raise ConfigError(
                            f"config: {where}.validation maps {test!r} to {val!r}, but its debate protocol {debate!r} "
                            f"does not run on {dataset!r} (it runs on {runs_on})"
                        )
                if self.benchmark_of(test) != self.benchmark_of(val):
                    raise ConfigError(
                        f"config: {where}.validation maps {test!r} ({self.benchmark_of(test)}) to {val!r} "
                        f"({self.benchmark_of(val)}); both must read the same benchmark"
                    )
            if self.protocol_participants(debate) != list(spec["agents"]):
                raise ConfigError(
                    f"config: {where}.debate = {debate!r} has participants {self.protocol_participants(debate)}; "
                    f"the pair needs exactly {spec['agents']}"
                )
            if protocol["kind"] == "self_consistency" or protocol["rounds"] < 1:
                raise ConfigError(
                    f"config: {where}.debate = {debate!r} must debate at least one round (kind {protocol['kind']!r})"
                )
            from .estimators import TOKEN_ESTIMATORS

            # token-level estimators are read off the generations: nothing to elicit, but k > 0 to record
            asked = [e for e in self.calibration["estimators"] if e not in TOKEN_ESTIMATORS]
            needs_k = [e for e in self.calibration["estimators"] if e in ("entropy", "maxprob")]
            for section in ("zero_shot", "debate"):
                k = self.config[section]["top_logprobs"]
                if needs_k and k < 1:
                    raise ConfigError(
                        f"config: calibration.estimators {needs_k} need {section}.top_logprobs >= 1 (is {k}): "
                        f"the token entropy and max probability come from each position's top-k"
                    )
            missing = [e for e in asked if e not in protocol["confidence"]]
            if missing:
                raise ConfigError(
                    f"config: debate.protocols.{debate}.confidence = {protocol['confidence']} lacks {missing}, "
                    f"which calibration.estimators needs for pair {name!r}"
                )
