"""An experiment's config: validated against `config/schema.yaml`, defaults filled, cross-references
checked, and the questions the workflow asks of it answered in one place.

`rules/common.smk` validates the config with Snakemake's `validate` (which fills the schema's
defaults) and wraps it in `Experiment`, whose constructor runs every check the schema can't
express (an agent's model is a key of `models`, a protocol's participants are agents, a pair's
debate is a protocol of exactly its two agents, ...). Each error is a `ConfigError` naming the
key and the value. Outside Snakemake, `load_experiment(path)` does the same from a YAML file.

The settings of the stage jobs are frozen dataclasses in their packages; their defaults match
the schema's (a test checks it), and `Experiment` builds them from the config. Reading the file and
the schema's check are `config_schema`'s; the registries the checks read live with the packages
that own them (`training.methods.METHODS`, `evaluation.papers.PAPERS`); the backends' names
(`llm.BACKENDS`) are the schema's enum, which a test keeps equal to the registry.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from .config_schema import (
    SCHEMA_PATH,
    check_backend_options,
    check_config_files,
    load_yaml_config,
    validate_config,
)
from .credentials import check_no_secrets
from .data.registry import split_file
from .debate.protocols import seat_problem
from .errors import ConfigError
from .evaluation.paper_numbers import paper_backbones
from .evaluation.papers import PAPERS
from .gpu_plan import accelerate_config_fields
from .models import MODELS_DIR, check_model_source, model_folder_name, model_settings, trained_source
from .training.core.fsdp import unsupported as fsdp_unsupported
from .training.methods import METHODS
from .training.settings import TrainSettings, custom_reward_problem

# the entry points a workflow or a script needs, whichever module holds them
__all__ = [
    "ConfigError",
    "Experiment",
    "SCHEMA_PATH",
    "check_config_files",
    "check_no_secrets",
    "load_experiment",
    "load_yaml_config",
    "validate_config",
]

#: The most top log-probabilities vLLM (its default max_logprobs) and the OpenAI API return a token.
MAX_SERVED_LOGPROBS = 20

#: Protocol keys a training run sets itself (seats, datasets, threads, rounds), not taken from its protocol.
TRAINING_PROTOCOL_OWN_KEYS = ("participants", "datasets", "threads", "rounds", "confidence")


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
        if spec.get("protocol") is not None and METHODS[spec["method"]].multi_agent:
            spec["protocol"] = self.train_protocol(run)
        # where its metrics go is no setting of the run: another tracker must not rerun a finished job
        workflow_keys = ("policy", "participants", "dataset", "gpus", "nodes", "accelerate_config", "report_to")
        return {k: v for k, v in spec.items() if k not in workflow_keys}

    def run_settings(self, run: str) -> TrainSettings:
        """A run's `TrainSettings`, built as its job builds them; a setting its method doesn't read or a
        value out of range is a ConfigError naming the run (at the dry run, not in the job)."""
        try:
            return TrainSettings.from_config(self.train_settings(run))
        except ValueError as exc:  # "training: <key> ..." names the key within the run
            message = str(exc)
            where = f"training.runs.{run}." if message.startswith("training: ") else f"training.runs.{run}: "
            raise ConfigError(f"config: {where}{message.removeprefix('training: ')}") from None

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
                try:
                    fields = accelerate_config_fields(str(candidate))
                except ConfigError as error:  # "accelerate config <file>: what is wrong"
                    raise ConfigError(f"config: training.runs.{run}.accelerate_config = {path!r}: {error}") from None
                distributed = str(fields.get("distributed_type", "")).upper()
                if distributed == "FSDP":  # what the FSDP engine runs
                    fsdp = fields.get("fsdp_config") or {}
                    why = fsdp_unsupported(
                        fsdp.get("fsdp_version", 1),
                        bool(fsdp.get("fsdp_offload_params", False)),
                        bool(fsdp.get("fsdp_cpu_ram_efficient_loading", False)),
                        fsdp.get("fsdp_state_dict_type", "SHARDED_STATE_DICT"),  # accelerate's FSDP2 default
                    )
                    if why:
                        raise ConfigError(
                            f"config: training.runs.{run}.accelerate_config = {path!r} ({candidate}): {why}"
                        )
                multi_agent = METHODS[self.training_runs[run]["method"]].multi_agent
                if distributed in ("DEEPSPEED", "FSDP") and multi_agent and self.run_settings(run).finetuning != "full":
                    raise ConfigError(  # its LoRA adapters' optimizers stay whole: the config would go unread
                        f"config: training.runs.{run}.accelerate_config = {path!r} ({candidate}) is a {distributed} "
                        f"config, which a multi-agent run reads only with finetuning: full (each agent's LoRA "
                        "optimizer stays whole in every process); drop it, or set finetuning: full"
                    )
                return str(candidate)
        raise ConfigError(
            f"config: training.runs.{run}.accelerate_config = {path!r}: no such file (looked in the "
            f"working directory and in {workflow_dir})"
        )

    def check_model_files(self) -> None:
        """Each model folder there already (resources/models/..., a trained policy, a local source)
        whole (`llm.base.check_model_files`): Snakemake sees a built folder and would not rebuild it,
        so a cut-off weight file stops the dry run, not the first job that loads it."""
        from .llm.base import ModelFileError, check_model_files

        for model, spec in self.models.items():
            folders = [self.model_dir(model)]
            if not spec["source"].startswith(("hf:", "bundled:", "trained:")):
                folders.append(spec["source"])
            for folder in folders:
                try:
                    check_model_files(Path(folder).expanduser())
                except ModelFileError as error:
                    raise ConfigError(f"config: models.{model} ({spec['source']}): {error}") from None

    def multi_agent_runs(self) -> list[str]:
        """Runs that train every participant of a debate (one output folder per agent)."""
        return [run for run, spec in self.training_runs.items() if METHODS[spec["method"]].multi_agent]

    def runs_of(self, method: str) -> list[str]:
        return [run for run, spec in self.training_runs.items() if spec["method"] == method]

    def run_agents(self, run: str) -> list[str]:
        """The agents a run trains: its policy, or its participants' distinct agents in seat order."""
        spec = self.training_runs[run]
        if METHODS[spec["method"]].multi_agent:
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
        self._check_stage_settings()
        self._check_training()
        self._check_evaluation()
        self._check_costs()

    # -- the stages' own settings, as their jobs build them --------------------------------
    def uncertainty_settings(self) -> dict:
        """The uncertainty job's settings (`uncertainty.UncertaintySettings`)."""
        return dict(self.config["uncertainty"])

    def calibration_settings(self) -> dict:
        """The calibration job's settings (`confidence.CalibrationSettings`)."""
        keys = ("runs", "val_fraction", "resample", "estimators", "calibrators", "ece_bins", "ece_weighting")
        return {k: self.calibration[k] for k in keys}

    def search_settings(self) -> dict:
        """The protocol search's settings (`confidence.SearchSettings`)."""
        own = {k: v for k, v in self.search.items() if k not in ("protocols", "alpha")}
        return {**own, "ece_bins": self.calibration["ece_bins"], "ece_weighting": self.calibration["ece_weighting"]}

    def _check_stage_settings(self) -> None:
        """Each stage's settings check themselves when built; built here, a value they refuse stops the
        dry run instead of its job."""
        from .confidence.search import SearchSettings
        from .confidence.stage import CalibrationSettings
        from .uncertainty import UncertaintySettings

        checks = [("uncertainty", UncertaintySettings, self.uncertainty_settings)]
        if self.pairs:  # the calibration and search jobs run for pairs only
            checks += [
                ("calibration", CalibrationSettings, self.calibration_settings),
                ("protocol_search", SearchSettings, self.search_settings),
            ]
        for section, settings, values in checks:
            try:
                settings(**values())
            except ValueError as error:  # its message names its key, mostly after the section's name
                said = str(error)
                raise ConfigError(
                    f"config: {said}" if said.startswith(section) else f"config: {section}: {said}"
                ) from None
        report = self.calibration["report_calibrator"]
        if self.pairs and report not in self.calibration["calibrators"]:
            raise ConfigError(
                f"config: calibration.report_calibrator = {report!r} is not one of calibration.calibrators "
                f"{self.calibration['calibrators']}: the plots and tables would show another"
            )
        gpus = self.config.get("gpus") or {}
        default_type = gpus.get("default_type")
        if default_type is not None and default_type not in (gpus.get("types") or {}):
            raise ConfigError(
                f"config: gpus.default_type = {default_type!r} is not a key of gpus.types "
                f"(known: {sorted(gpus.get('types') or {})})"
            )

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

    def _check_costs(self) -> None:
        """Prices and caps are finite dollars >= 0, and a cap is enforceable: it counts token prices
        before each request, so it refuses models it cannot count (`debatelab.cost`)."""
        from .cost import Price, is_dollars

        prices = {}
        for name, spec in self.models.items():
            try:
                prices[name] = Price.from_config(spec.get("price"), f"models.{name}.price")
            except ValueError as error:
                raise ConfigError(f"config: {error}") from None
        caps = {k: self.config.get(k) for k in ("budget_usd", "budget_per_job_usd") if self.config.get(k) is not None}
        for key, cap in caps.items():
            if not is_dollars(cap):
                raise ConfigError(f"config: {key} = {cap!r}: a cap is a finite number of dollars >= 0 (null: no cap)")
        if not caps:
            return
        key, cap = next(iter(caps.items()))
        for name, price in prices.items():
            if price.gpu_hour:
                raise ConfigError(
                    f"config: {key} = {cap!r} cannot cap models.{name}.price.gpu_hour = {price.gpu_hour!r}: the cap "
                    "counts each request's tokens before it is sent, while a GPU-hour cost is known only from a "
                    "finished job's measured seconds (the summaries' gpu_cost_usd); drop the cap or the gpu_hour price"
                )
        unpriced = {
            who: model for who, model in self._remote_callers().items() if self.models[model].get("price") is None
        }
        if unpriced:
            who, model = next(iter(unpriced.items()))
            raise ConfigError(
                f"config: {key} = {cap!r}, but {', '.join(unpriced)} call(s) a remote endpoint with no price "
                f"(models.{model}.price is absent), so their requests would never count to the cap: give each "
                "model its price (input_per_mtok, output_per_mtok; zeros for a server you host), or drop the cap"
            )

    def _remote_callers(self) -> dict[str, str]:
        """{"agents.<name>" or "attack.rewriter": its model} of what sends requests to a server off this machine."""
        from .llm.openai_backend import is_loopback

        callers = {}
        for agent, spec in self.agents.items():
            options = self.agent_settings(agent)["backend_options"]
            if spec.get("backend") == "openai" and not is_loopback(options["base_url"]):
                callers[f"agents.{agent}"] = spec["model"]
        rewriter = self.attack["rewriter"]
        if rewriter is not None and self.attack.get("backend") == "openai":
            if not is_loopback((self.config["backends"].get("openai") or {})["base_url"]):
                callers["attack.rewriter"] = rewriter
        return callers

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
            if spec.get("backend") in ("vllm", "openai"):  # both cap the top log-probabilities at 20
                for section in ("zero_shot", "debate"):
                    k = self.config[section]["top_logprobs"]
                    if k > MAX_SERVED_LOGPROBS:
                        raise ConfigError(
                            f"config: {section}.top_logprobs = {k}, but agent {agent!r} runs on {spec['backend']}, "
                            f"which returns at most {MAX_SERVED_LOGPROBS} (vLLM's max_logprobs, the OpenAI API's limit)"
                        )
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
            if not METHODS[self.training_runs[run]["method"]].multi_agent and agent:
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
            source, offered = spec.get("source", "auto"), BENCHMARKS[benchmark].sources_for(spec["split"])
            if source != "auto" and source not in offered:
                raise ConfigError(
                    f"config: datasets.{name}.source = {source!r}: {benchmark}'s split {spec['split']!r} has no "
                    f"{source} source (it has: {sorted(offered)}); use source: auto or another split"
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
            problem = seat_problem(spec, len(seats))
            if problem:
                raise ConfigError(f"config: debate.protocols.{name}: {problem}")
            for dataset in self.protocol_datasets(name):
                if not self.datasets[dataset].get("evaluate", True):
                    raise ConfigError(
                        f"config: debate.protocols.{name} runs on {dataset!r}, whose datasets.{dataset}.evaluate is "
                        "false (training questions only: no zero-shot answers or debates); name its datasets"
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
            key = "participants" if METHODS[spec["method"]].multi_agent else "policy"
            other = "policy" if key == "participants" else "participants"
            if other in spec:
                readers = [m for m in METHODS if METHODS[m].multi_agent == (other == "participants")]
                raise ConfigError(
                    f"config: {where}.{other} is read by {', '.join(readers)} only; method "
                    f"{spec['method']!r} trains its {key} ({where}.{key})"
                )
            # the schema fills in `every` and `questions`: only a value off their defaults shows it was written
            defaults = {"every": TrainSettings.heldout_every, "questions": TrainSettings.heldout_questions}
            unread = sorted(k for k, v in (spec.get("heldout") or {}).items() if k in defaults and v != defaults[k])
            if unread and self.heldout_dataset(run) is None:
                raise ConfigError(
                    f"config: {where}.heldout.{unread[0]} is read only with {where}.heldout.dataset (the "
                    "questions the held-out accuracy is measured on): name one, or drop the heldout block"
                )
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
            method = METHODS[spec["method"]]
            if method.multi_agent:
                self._check_train_protocol(run, spec)
            settings = self.run_settings(run)
            problem = custom_reward_problem(getattr(settings.own, "reward", None))
            if problem:
                raise ConfigError(f"config: {where}.{method.block}.reward = {settings.own.reward!r}: {problem}")
            if settings.finetuning == "full":  # no adapter is saved: the agents' folders are their own weights
                served = sorted(
                    name
                    for name, model in self.models.items()
                    if model.get("adapter") and (trained_source(model["source"]) or ("",))[0] == run
                )
                if served:
                    raise ConfigError(
                        f"config: models.{served[0]}.adapter = true, but run {run!r} fine-tunes every weight "
                        f"({where}.finetuning = 'full') and saves no adapter; drop adapter: true"
                    )
            if settings.parallelism == "model" and settings.rollout_backend == "vllm":
                raise ConfigError(
                    f"config: {where}.parallelism = 'model' places the bases of a multi-agent run on GPUs of "
                    f"their own and rolls out on transformers; rollout_backend is {settings.rollout_backend!r}"
                )
            nodes = spec.get("nodes", 1)
            if nodes > 1 and settings.parallelism == "model":
                raise ConfigError(
                    f"config: {where}.nodes = {nodes}: parallelism 'model' runs one process on one node's GPUs; "
                    "several nodes train data parallel (parallelism: data)"
                )
            if settings.parallelism == "data":  # each process takes its share of a step
                per_step = "questions_per_step" if method.multi_agent else "prompts_per_step"
                shares = {f"{method.block}.{per_step}": getattr(settings.own, per_step)}
                shares["mini_batch_size"] = settings.mini_batch_size
                processes = spec["gpus"] * nodes
                among = f"gpus = {spec['gpus']}" if nodes == 1 else f"nodes × gpus = {nodes} × {spec['gpus']}"
                for name, value in shares.items():
                    if value % processes:
                        raise ConfigError(f"config: {where}.{name} = {value} must divide among {among} processes")
        for model, spec in self.models.items():  # trained:<run>/<agent> names an agent the run trains
            run, agent = trained_source(spec["source"]) or (None, None)
            if (
                run is not None
                and METHODS[self.training_runs[run]["method"]].multi_agent
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
        options, participants = self.train_protocol(run), self.run_agents(run)
        problem = seat_problem(options, len(participants))
        if problem:
            raise ConfigError(f"config: {where} with the run's participants {participants}: {problem}")
        kind = options["kind"]
        allowed = METHODS[spec["method"]].protocol_kinds
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
            elicited = self.config["zero_shot"]["estimators"]
            missing = [e for e in asked if e not in elicited]
            if missing:
                raise ConfigError(
                    f"config: zero_shot.estimators = {elicited} lacks {missing}, which calibration.estimators "
                    f"needs for the pre-debate confidences (stage 0) of pair {name!r}"
                )
            for test, val in spec["validation"].items():
                if test == val:
                    raise ConfigError(
                        f"config: {where}.validation maps {test!r} to itself: its calibrators and search would "
                        "be fitted on the questions they are tested on; name another dataset of the same benchmark"
                    )
