"""Config validation: bad configs fail before any job runs, naming the key and the value; every
library default agrees with the schema's."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest
import yaml
from workflow_helpers import REPO_ROOT, snakemake

from debatelab.config import SCHEMA_PATH, ConfigError, Experiment, load_experiment, validate_config
from debatelab.llm.agent import AgentSpec

TINY = yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())
SCHEMA = yaml.safe_load(SCHEMA_PATH.read_text())
SHIPPED = [REPO_ROOT / "config/config.yaml", *sorted((REPO_ROOT / "config/experiments").glob("*.yaml"))]


def _mutated(mutate) -> dict:
    cfg = yaml.safe_load(yaml.safe_dump(TINY))
    mutate(cfg)
    return cfg


def _dry_run_with(tmp_path, mutate):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_mutated(mutate)))
    return snakemake(tmp_path, "--configfile", str(path), "-n", check=False)


BAD_CONFIGS = [
    (lambda c: c.update(temprature=0.7), ["temprature"]),
    (lambda c: c["agents"]["alice"].update(temprature=0.7), ["temprature"]),
    (lambda c: c["agents"]["alice"].update(temperature="hot"), ["hot", "temperature"]),
    (lambda c: c["zero_shot"].update(samples=0), ["samples", "0"]),
    (lambda c: c["agents"]["alice"].update(backend="llamacpp"), ["llamacpp", "backend"]),
    (lambda c: c.pop("agents"), ["agents"]),
    (lambda c: c["agents"]["alice"].update(model="gpt-17"), ["agents.alice.model", "gpt-17"]),
    (lambda c: c["datasets"].update(no_such_bench={"split": "test"}), ["no_such_bench"]),
    (lambda c: c["datasets"]["asdiv"].update(split="train_xyz"), ["train_xyz", "asdiv"]),
    (
        lambda c: c["debate"]["protocols"]["mad"].update(participants=["alice", "erin"]),
        ["debate.protocols.mad.participants", "'erin'"],
    ),
    (
        lambda c: c["debate"]["protocols"]["mad"].update(datasets=["gsm8k"]),
        ["debate.protocols.mad.datasets", "'gsm8k'"],
    ),
    (lambda c: c["calibration"]["pairs"]["ab"].update(agents=["alice", "carol"]), ["calibration.pairs.ab", "carol"]),
    (
        lambda c: c["calibration"]["pairs"]["ab"].update(agents=["alice", "alice"]),
        ["calibration.pairs.ab", "two different"],
    ),
    (
        lambda c: c["calibration"]["pairs"]["ab"].update(debate="mad"),
        ["calibration.pairs.ab.debate", "mad", "participants"],
    ),
    (lambda c: c["calibration"]["pairs"]["ab"].update(debate="nope"), ["calibration.pairs.ab.debate", "'nope'"]),
    (lambda c: c["debate"]["protocols"]["mad_pair"].update(confidence=["verbal"]), ["mad_pair", "seqprob"]),
    (lambda c: c["debate"]["protocols"]["mad_pair"].update(rounds=0), ["mad_pair", "at least one round"]),
    (lambda c: c["zero_shot"].update(samples=1), ["debate.protocols", "'alice'", "zero_shot.samples = 1"]),
    (lambda c: c["agents"]["alice"].update(samples=1), ["debate.protocols", "'alice'", "agents.alice.samples = 1"]),
    (
        lambda c: c["calibration"]["pairs"]["ab"].update(validation={"asdiv": "commonsense_qa"}),
        ["calibration.pairs.ab.validation", "commonsense_qa", "same benchmark"],
    ),
    (lambda c: c.update(attack={"rewriter": "gpt-17"}), ["attack.rewriter", "gpt-17"]),
    (
        lambda c: c["models"].update(policy={"source": "trained:nope"}),
        ["models.policy.source", "trained:nope", "training.runs"],
    ),
    (lambda c: c["training"]["runs"]["sdrl"].update(policy="erin"), ["training.runs.sdrl.policy", "'erin'"]),
    (lambda c: c["training"]["runs"]["sdrl"].update(dataset="gsm8k"), ["training.runs.sdrl.dataset", "'gsm8k'"]),
    (lambda c: c["training"]["runs"]["sdrl"].update(gpus=4), ["training.runs.sdrl.sdrl.prompts_per_step", "gpus = 4"]),
    (lambda c: c["training"]["runs"]["sdrl"].update(method="ppo"), ["ppo", "method"]),
    (lambda c: c["training"]["runs"]["sdrl"].update(clip_hi=0.3), ["clip_hi"]),
    (
        lambda c: c["training"]["runs"]["sdrl"].update(policy="carol"),
        ["training.runs.sdrl.policy", "'carol'", "this run trains"],
    ),
    (lambda c: c["training"]["runs"]["sdrl"].pop("policy"), ["policy"]),
    (lambda c: c["training"]["runs"]["udpo"].pop("participants"), ["participants"]),
    (
        lambda c: c["training"]["runs"]["udpo"].update(participants=["alice", "erin"]),
        ["training.runs.udpo.participants", "'erin'"],
    ),
    (
        lambda c: c["training"]["runs"]["udpo"].update(participants=["alice", "dave"]),
        ["training.runs.udpo.participants", "'dave'", "what this run trains"],
    ),
    (lambda c: c["training"]["runs"]["udpo"]["udpo"].update(ablate=["intra", "extra"]), ["extra"]),
    (
        lambda c: c["models"]["tiny-udpo-bob"].update(source="trained:udpo"),
        ["models.tiny-udpo-bob.source", "trained:udpo/<agent>"],
    ),
    (
        lambda c: c["models"]["tiny-udpo-bob"].update(source="trained:udpo/carol"),
        ["models.tiny-udpo-bob.source", "['alice', 'bob']"],
    ),
    (
        lambda c: c["models"]["tiny-trained"].update(source="trained:sdrl/alice"),
        ["models.tiny-trained.source", "one policy"],
    ),
    (lambda c: c["training"]["runs"]["umad"]["umad"].update(threads=1), ["threads"]),
    (lambda c: c.update(evaluation={"papers": ["udpo", "madness"]}), ["madness"]),
    (
        lambda c: c.update(evaluation={"paper_datasets": {"gsm_symbolic": "gsm8k"}}),
        ["evaluation.paper_datasets", "'gsm_symbolic'"],
    ),
    (
        lambda c: (c["calibration"].update(pairs={}), c.update(evaluation={"papers": ["confidence"]})),
        ["evaluation.papers", "'confidence'", "calibration.pairs"],
    ),
    (
        lambda c: c["training"]["runs"]["udpo"].update(gpus=3),
        ["training.runs.udpo.udpo.questions_per_step", "gpus = 3"],
    ),
    (
        lambda c: c["training"]["runs"]["umad"].update(gpus=3),
        ["training.runs.umad.umad.questions_per_step", "gpus = 3"],
    ),
    (
        lambda c: c["training"]["runs"]["rmaac"].update(gpus=3),
        ["training.runs.rmaac.mappo.questions_per_step", "gpus = 3"],
    ),
    (lambda c: c["training"]["runs"]["rmaac"]["mappo"].update(peer_swap_prob=2), ["peer_swap_prob"]),
    (lambda c: c["training"]["runs"]["sdrl"].update(parallelism="model"), ["training.runs.sdrl.parallelism", "'sdrl'"]),
    (
        lambda c: c["training"]["runs"]["udpo"].update(parallelism="model", rollout_backend="vllm"),
        ["training.runs.udpo.parallelism", "'vllm'"],
    ),
    (
        lambda c: (c["calibration"].update(estimators=["perplexity", "entropy"]), c["debate"].update(top_logprobs=0)),
        ["calibration.estimators ['entropy']", "debate.top_logprobs >= 1 (is 0)"],
    ),
    # an agent's backend options are its backend's settings, checked at dry run (issue 44 item 7)
    (
        lambda c: c["agents"]["alice"].update(backend_options={"batch_sise": 4}),
        ["agents.alice.backend_options", "'batch_sise'", "takes: ['batch_size'"],
    ),
    (
        lambda c: c["agents"]["alice"].update(backend_options={"batch_size": "big"}),
        ["agents.alice.backend_options.batch_size", "'big'"],
    ),
    (
        lambda c: c["agents"]["alice"].update(backend="vllm", backend_options={"gpu_memory_utilization": 1.5}),
        ["agents.alice.backend_options.gpu_memory_utilization", "1.5"],
    ),
    (
        lambda c: c["models"]["tiny-random-llama"].update(source="/no/such/model"),
        ["models.tiny-random-llama.source", "'/no/such/model'", "no such folder"],
    ),
    (
        lambda c: c["models"]["tiny-random-llama"].update(source="bundled:smollm3"),
        ["'bundled:smollm3'", "no such bundled model"],
    ),
    (
        lambda c: c["models"]["tiny-random-llama"].update(include=["*.json"]),
        ["models.tiny-random-llama.include", "hf: sources only"],
    ),
    (lambda c: c["models"]["tiny-random-llama"].update(source="hf:"), ["'hf:'", "not a Hub repo id"]),
    (lambda c: c["models"]["tiny-random-llama"].update(source="hf:../../etc@main"), ["not a Hub repo id"]),
    (lambda c: c["backends"]["transformers"].update(device="cdua"), ["backends.transformers.device", "'cdua'"]),
    (lambda c: c.update(seed=-1), ["seed", "-1"]),
    (lambda c: c.update(seed=2**32), ["seed", "4294967296"]),
    # what a protocol asks of its seats (debate.protocols.seat_problem): refused before its job fails or idles
    (
        lambda c: c["debate"]["protocols"]["mad"].update(template="umad"),
        ["debate.protocols.mad", "template 'umad'", "3 participants"],
    ),
    (
        lambda c: c["debate"]["protocols"]["trained"].update(template="umad", participants=["carol", "dave", "alice"]),
        ["debate.protocols.trained", "template 'umad'"],
    ),
    (
        lambda c: c["training"]["runs"]["umad"].update(
            participants=["alice", "bob", "carol"], protocol={"kind": "all_to_all", "template": "umad"}
        ),
        ["training.runs.umad.protocol", "template 'umad'", "3 participants"],
    ),
    (lambda c: c["debate"]["protocols"]["sid"].update(signal_agent=7), ["debate.protocols.sid", "signal_agent = 7"]),
    (
        lambda c: c["debate"]["protocols"]["s2"].update(early_stop_agree=5),
        ["debate.protocols.s2", "early_stop_agree = 5"],
    ),
    (lambda c: c["debate"]["protocols"]["ring"].update(participants=["alice"]), ["debate.protocols.ring", "has 1"]),
    (
        lambda c: (
            c["datasets"].update(train_only={"benchmark": "asdiv", "split": "test", "evaluate": False}),
            c["debate"]["protocols"]["ring"].update(datasets=["train_only"]),
        ),
        ["debate.protocols.ring", "'train_only'", "evaluate is false"],
    ),
    # each stage's settings, built at the dry run as its job builds them
    (
        lambda c: c.update(protocol_search={"ranges": {"w": [2, 0]}}),
        ["protocol_search", "ranges.w = [2, 0]", "low < high"],
    ),
    (lambda c: c.update(uncertainty={"selective_fractions": []}), ["uncertainty selective_fractions", "[]"]),
    (
        lambda c: c["calibration"].update(calibrators=["raw", "beta"], report_calibrator="isotonic"),
        ["calibration.report_calibrator = 'isotonic'", "['raw', 'beta']"],
    ),
    (
        lambda c: c["calibration"]["pairs"]["ab"].update(validation={"asdiv": "asdiv"}),
        ["calibration.pairs.ab.validation", "'asdiv' to itself"],
    ),
    (lambda c: c["zero_shot"].update(estimators=["verbal"]), ["zero_shot.estimators = ['verbal']", "['seqprob']"]),
    (lambda c: c.update(gpus={"default_type": "h8000"}), ["gpus.default_type = 'h8000'", "gpus.types"]),
    (
        lambda c: c["datasets"]["asdiv"].update(source="online"),
        ["datasets.asdiv.source = 'online'", "no online source"],
    ),
    (
        lambda c: c["training"]["runs"]["sdrl"]["sdrl"].update(reward="no_such_rewards:score"),
        ["training.runs.sdrl.sdrl.reward = 'no_such_rewards:score'", "no module 'no_such_rewards'"],
    ),
    (
        lambda c: c["training"]["runs"]["sdrl"]["sdrl"].update(reward="debatelab.grading:no_such_reward"),
        ["training.runs.sdrl.sdrl.reward", "has no function 'no_such_reward'"],
    ),
    (
        lambda c: (c["agents"]["alice"].update(backend="vllm"), c["debate"].update(top_logprobs=50)),
        ["debate.top_logprobs = 50", "'alice' runs on vllm", "at most 20"],
    ),
    (lambda c: c.update(backends={"vllm": {"dtype": "bfloat61"}}), ["backends.vllm.dtype", "'bfloat61'"]),
]


def test_token_estimators_need_no_elicitation_in_the_pairs_debate():
    # the pair's debate elicits verbal and seqprob only: the token-level ones are read off its generations
    config = _mutated(lambda c: c["calibration"].update(estimators=["seqprob", "entropy", "maxprob", "perplexity"]))
    assert Experiment(validate_config(config)).calibration["estimators"][1:] == ["entropy", "maxprob", "perplexity"]


def test_model_parallel_multi_agent_runs_need_no_share_of_questions_per_process():
    config = _mutated(lambda c: c["training"]["runs"]["udpo"].update(gpus=3, parallelism="model"))
    assert Experiment(validate_config(config)).training_runs["udpo"]["gpus"] == 3


@pytest.mark.parametrize("mutate, expected", BAD_CONFIGS)
def test_bad_config_names_key_and_value(mutate, expected):
    with pytest.raises(ConfigError) as error:
        Experiment(validate_config(_mutated(mutate)))
    for text in expected:
        assert text in str(error.value), f"{text!r} not in {error.value}"


@pytest.mark.parametrize("case", [0, 6, 17], ids=["schema", "reference", "samples"])
def test_snakemake_refuses_a_bad_config_before_any_job(tmp_path, case):
    mutate, expected = BAD_CONFIGS[case]
    proc = _dry_run_with(tmp_path, mutate)
    assert proc.returncode != 0
    for text in expected:
        assert text in proc.stdout + proc.stderr
    assert f"config ({tmp_path / 'config.yaml'}): " in proc.stdout + proc.stderr  # the file comes first
    assert not (tmp_path / "results").exists()


def test_defaults_are_filled_as_snakemake_fills_them():
    """`validate_config` (the library's, for use without Snakemake) and Snakemake's `validate` agree."""
    from snakemake.utils import validate

    for path in SHIPPED:
        raw = yaml.safe_load(path.read_text())
        ours = validate_config(raw)
        theirs = yaml.safe_load(yaml.safe_dump(raw))
        validate(theirs, str(SCHEMA_PATH), set_default=True)
        assert ours == theirs, path


def test_good_config_fills_defaults(tmp_path):
    cfg = validate_config(_mutated(lambda c: c["agents"]["alice"].pop("temperature")))
    assert cfg["agents"]["alice"]["temperature"] == 0.7
    assert cfg["debate"]["protocols"]["mad"]["template"] == "du"
    proc = _dry_run_with(tmp_path, lambda c: c["agents"]["alice"].pop("temperature"))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_evaluated_papers_default_to_what_the_experiment_has():
    assert Experiment(validate_config(_mutated(lambda c: None))).evaluated_papers() == [
        "udpo",
        "umad",
        "svr_mad",
        "sdrl",
        "confidence",
    ]
    no_pairs = _mutated(lambda c: c["calibration"].update(pairs={}))
    assert "confidence" not in Experiment(validate_config(no_pairs)).evaluated_papers()
    chosen = _mutated(lambda c: c.update(evaluation={"papers": ["svr_mad"]}))
    assert Experiment(validate_config(chosen)).evaluated_papers() == ["svr_mad"]


def test_an_agent_is_sampled_zero_shot_where_its_protocols_run():
    exp = Experiment(validate_config(_mutated(lambda c: c["agents"].update(erin={"model": "tiny-random-llama"}))))
    assert exp.agent_datasets("dave") == ["asdiv"]  # only in `trained`, which runs on asdiv
    assert exp.agent_datasets("alice") == ["asdiv", "commonsense_qa"]  # in protocols on every dataset
    assert exp.agent_datasets("erin") == ["asdiv", "commonsense_qa"]  # in no protocol: everywhere

    # a pair's agents stay everywhere: calibration reads their streams
    def pair_dave(c):
        c["calibration"]["pairs"]["ab"]["agents"] = ["dave", "bob"]
        c["debate"]["protocols"]["mad_pair"].update(participants=["dave", "bob"], datasets=["asdiv"])

    paired = Experiment(validate_config(_mutated(pair_dave)))
    assert paired.agent_datasets("dave") == ["asdiv", "commonsense_qa"]


def test_every_shipped_config_validates():
    # (test_experiment_configs and test_slurm_profile dry-run each of them through Snakemake)
    for path in SHIPPED:
        load_experiment(path)  # duplicate keys refused too


def test_experiment_answers_the_workflows_questions():
    exp = load_experiment(REPO_ROOT / "tests/configs/tiny.yaml")
    assert exp.protocol_participants("mad") == ["alice", "bob", "alice"]  # debate.participants
    assert exp.protocol_agents("mad") == ["alice", "bob"]
    assert exp.protocol_participants("mad_pair") == ["alice", "bob"]  # its own participants
    assert exp.protocol_models("sc") == [] and exp.protocol_models("mad") == ["tiny-random-llama"]
    assert re.fullmatch(r"resources/models/tiny-random-llama-[0-9a-f]{8}", exp.model_dir("tiny-random-llama"))
    assert exp.dataset_path("commonsense_qa") == "data/commonsense_qa/validation/auto.parquet"
    assert exp.agent_samples("alice") == 2
    assert exp.agent_settings("bob")["backend_options"] == {"batch_size": 8, "num_threads": 1, "device": "auto"}
    assert exp.pair_datasets("ab") == ["asdiv", "commonsense_qa"]
    assert "datasets" not in exp.protocol_options("mad")
    assert not exp.uses_attack_prompt(["alice", "bob"])


def test_trained_models_live_under_their_run():
    cfg = validate_config(TINY)
    cfg["models"]["policy"] = {"source": "trained:sdrl", "dtype": "float32"}
    exp = object.__new__(Experiment)  # the check refuses trained models until the training stage exists
    exp.models, exp.results = cfg["models"], "results/tiny"
    assert exp.model_dir("policy") == "results/tiny/train/sdrl/model"
    cfg["models"]["bob_after_udpo"] = {"source": "trained:udpo/bob"}
    assert exp.model_dir("bob_after_udpo") == "results/tiny/train/udpo/models/bob"  # one folder per trained agent


# --------------------------------------------------------------------------- one home per default


def _schema_defaults(*path: str) -> dict:
    """Defaults of a schema object: a definition (agent, protocol) or a config section, then sub-keys."""
    node = SCHEMA["definitions"].get(path[0]) or SCHEMA["properties"][path[0]]
    for key in path[1:]:
        node = node["properties"][key]
    return {k: v["default"] for k, v in node["properties"].items() if "default" in v}


def _dataclass_defaults(cls) -> dict:
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            out[f.name] = f.default_factory()
    return out


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    return a == b


def _signature_defaults(func) -> dict:
    return {
        k: p.default for k, p in inspect.signature(func).parameters.items() if p.default is not inspect.Parameter.empty
    }


def _settings_and_schema():
    from debatelab.attack import RewriteSettings
    from debatelab.confidence.search import SearchSettings
    from debatelab.confidence.stage import CalibrationSettings
    from debatelab.debate.protocols import DEFAULTS as PROTOCOL_DEFAULTS
    from debatelab.debate.stage import DebateSettings
    from debatelab.estimators import ElicitationSettings
    from debatelab.llm.openai_backend import OpenAIBackend
    from debatelab.llm.transformers_backend import TransformersBackend
    from debatelab.llm.vllm_backend import VLLMBackend
    from debatelab.training import LoraSettings, TrainSettings
    from debatelab.training.methods.dapo import DapoSettings
    from debatelab.training.methods.mappo import MappoSettings
    from debatelab.training.methods.sdrl import SdrlSettings
    from debatelab.training.methods.udpo import UdpoSettings
    from debatelab.training.methods.umad import UmadSettings
    from debatelab.uncertainty import UncertaintySettings
    from debatelab.zero_shot import ZeroShotSettings

    run_defaults = _schema_defaults("training_run")
    run_defaults.pop("seed")  # null in the schema: the workflow fills in the experiment seed

    return [
        ("AgentSpec", _dataclass_defaults(AgentSpec), _schema_defaults("agent")),
        ("ZeroShotSettings", _dataclass_defaults(ZeroShotSettings), _schema_defaults("zero_shot")),
        ("ElicitationSettings", _dataclass_defaults(ElicitationSettings), _schema_defaults("zero_shot")),
        ("DebateSettings", _dataclass_defaults(DebateSettings), _schema_defaults("debate")),
        ("protocol DEFAULTS", PROTOCOL_DEFAULTS, _schema_defaults("protocol")),
        ("UncertaintySettings", _dataclass_defaults(UncertaintySettings), _schema_defaults("uncertainty")),
        ("CalibrationSettings", _dataclass_defaults(CalibrationSettings), _schema_defaults("calibration")),
        (
            "SearchSettings",
            _dataclass_defaults(SearchSettings),
            {
                **_schema_defaults("protocol_search"),
                **{k: v for k, v in _schema_defaults("calibration").items() if k.startswith("ece_")},
            },
        ),
        (
            "TrainSettings",
            {
                k: v
                for k, v in _dataclass_defaults(TrainSettings).items()
                if k not in ("lora", "dapo", "sdrl", "udpo", "umad", "mappo")
            },
            run_defaults,
        ),
        ("LoraSettings", _dataclass_defaults(LoraSettings), _schema_defaults("training_run", "lora")),
        ("DapoSettings", _dataclass_defaults(DapoSettings), _schema_defaults("training_run", "dapo")),
        ("SdrlSettings", _dataclass_defaults(SdrlSettings), _schema_defaults("training_run", "sdrl")),
        ("UdpoSettings", _dataclass_defaults(UdpoSettings), _schema_defaults("training_run", "udpo")),
        ("UmadSettings", _dataclass_defaults(UmadSettings), _schema_defaults("training_run", "umad")),
        ("MappoSettings", _dataclass_defaults(MappoSettings), _schema_defaults("training_run", "mappo")),
        (
            "RewriteSettings",
            {**dataclasses.asdict(RewriteSettings().sampling), "attempts": RewriteSettings().attempts},
            _schema_defaults("attack"),
        ),
        ("TransformersBackend", _signature_defaults(TransformersBackend), _schema_defaults("backends", "transformers")),
        ("VLLMBackend", _signature_defaults(VLLMBackend), _schema_defaults("backends", "vllm")),
        ("OpenAIBackend", _signature_defaults(OpenAIBackend), _schema_defaults("backends", "openai")),
    ]


@pytest.mark.parametrize("name, library, schema", _settings_and_schema(), ids=lambda v: v if isinstance(v, str) else "")
def test_library_defaults_match_the_schema(name, library, schema):
    shared = sorted(set(library) & set(schema))
    assert shared, f"{name} shares no key with the schema"
    mismatched = {k: (library[k], schema[k]) for k in shared if not _same(library[k], schema[k])}
    assert not mismatched, f"{name}: library vs schema defaults differ: {mismatched}"


def test_evaluation_seeds_are_every_protocols_default_threads():
    """`evaluation.seeds: K` repeats every debate K times (threads) unless a protocol sets its own;
    too few zero-shot samples for the repeats is an error naming evaluation.seeds."""

    def seeded(c, seeds, samples):
        c.setdefault("evaluation", {})["seeds"] = seeds
        c["zero_shot"]["samples"] = samples
        for agent in c["agents"].values():
            agent.pop("samples", None)

    explicit = {name: spec["threads"] for name, spec in TINY["debate"]["protocols"].items() if spec.get("threads")}
    exp = Experiment(validate_config(_mutated(lambda c: seeded(c, 1, 6))))
    for name, spec in exp.protocols.items():
        assert spec["threads"] == explicit.get(name, 1), name
    exp = Experiment(validate_config(_mutated(lambda c: seeded(c, 2, 12))))
    for name, spec in exp.protocols.items():
        assert spec["threads"] == explicit.get(name, 2), name
    assert any(name not in explicit for name in exp.protocols)
    with pytest.raises(ConfigError, match="from evaluation.seeds"):
        Experiment(validate_config(_mutated(lambda c: seeded(c, 3, 2))))


def test_an_accelerate_config_is_found_from_the_working_directory_or_the_workflow(tmp_path, monkeypatch):
    """`config/accelerate/...` names the shipped file wherever snakemake runs (`--directory`); a
    missing file is refused naming the run's key and the path."""
    repo = REPO_ROOT
    cfg = _mutated(
        lambda c: c["training"]["runs"]["sdrl"].update(accelerate_config="config/accelerate/zero2_8gpu.yaml")
    )
    exp = Experiment(validate_config(cfg))
    monkeypatch.chdir(tmp_path)
    assert exp.accelerate_config("sdrl", repo) == str(repo / "config/accelerate/zero2_8gpu.yaml")
    (tmp_path / "mine.yaml").write_text("distributed_type: DEEPSPEED\n")
    exp.training_runs["sdrl"]["accelerate_config"] = "mine.yaml"
    assert exp.accelerate_config("sdrl", repo) == "mine.yaml"
    exp.training_runs["sdrl"]["accelerate_config"] = "config/accelerate/zero9.yaml"
    with pytest.raises(ConfigError, match=r"training\.runs\.sdrl\.accelerate_config = 'config/accelerate/zero9\.yaml'"):
        exp.accelerate_config("sdrl", repo)
    assert exp.accelerate_config("udpo", repo) is None


@pytest.mark.parametrize(
    ("fsdp_config", "refused"),
    [
        ("{fsdp_version: 1}", "fsdp_version 1"),
        ("{}", "fsdp_version 1"),  # accelerate's default
        ("{fsdp_version: 2, fsdp_offload_params: true}", "fsdp_offload_params true"),
        ("{fsdp_version: 2, fsdp_cpu_ram_efficient_loading: true}", "fsdp_cpu_ram_efficient_loading true"),
        ("{fsdp_version: 2, fsdp_state_dict_type: FULL_STATE_DICT}", "fsdp_state_dict_type FULL_STATE_DICT"),
    ],
)
def test_an_fsdp_config_the_engine_does_not_run_is_refused_at_the_dry_run(tmp_path, monkeypatch, fsdp_config, refused):
    """An FSDP accelerate config of FSDP1, parameter offload, rank-0-only loading or whole-model
    checkpoints (FULL_STATE_DICT) is refused when the
    workflow reads the config, naming the run's key, the file and the setting; the shipped FSDP2
    config passes."""
    cfg = _mutated(
        lambda c: c["training"]["runs"]["sdrl"].update(accelerate_config="config/accelerate/fsdp2_8gpu.yaml")
    )
    exp = Experiment(validate_config(cfg))
    monkeypatch.chdir(tmp_path)
    assert exp.accelerate_config("sdrl", REPO_ROOT) == str(REPO_ROOT / "config/accelerate/fsdp2_8gpu.yaml")
    (tmp_path / "mine.yaml").write_text(f"distributed_type: FSDP\nfsdp_config: {fsdp_config}\n")
    exp.training_runs["sdrl"]["accelerate_config"] = "mine.yaml"
    with pytest.raises(ConfigError, match=rf"training\.runs\.sdrl\.accelerate_config = 'mine\.yaml' .*{refused}"):
        exp.accelerate_config("sdrl", REPO_ROOT)


@pytest.mark.parametrize("config", ["zero2", "zero3", "fsdp2"])
def test_a_sharding_config_on_a_multi_agent_lora_run_is_refused(config):
    """A multi-agent run splits its agents' training state only under full fine-tuning (each agent's
    LoRA optimizer stays whole in every process): a DeepSpeed or FSDP config on a LoRA run would go
    unread, so it is refused naming the run's key and the file; with finetuning: full it is read."""
    path = f"config/accelerate/{config}_8gpu.yaml"

    def sharded(cfg, full=False):
        run = cfg["training"]["runs"]["umad"]
        run["accelerate_config"] = path
        if full:
            run.update(finetuning="full")
            del run["lora"]

    exp = Experiment(validate_config(_mutated(sharded)))
    with pytest.raises(ConfigError, match=rf"training\.runs\.umad\.accelerate_config = '{path}' .*finetuning: full"):
        exp.accelerate_config("umad", REPO_ROOT)
    exp = Experiment(validate_config(_mutated(lambda cfg: sharded(cfg, full=True))))
    assert Path(exp.accelerate_config("umad", REPO_ROOT)).resolve() == REPO_ROOT / path


def test_an_adapter_served_model_is_a_multi_agent_runs_agent_on_vllm():
    """`models.<m>.adapter: true`: the model is served as a run's LoRA adapter on its base's vLLM engine."""

    def served(cfg, source="trained:udpo/bob", backend="vllm"):
        cfg["models"]["tiny-udpo-bob"] = {"source": source, "adapter": True}
        cfg["agents"]["dave"]["backend"] = backend

    exp = Experiment(validate_config(_mutated(served)))
    assert exp.adapter_base("tiny-udpo-bob") == "tiny-random-llama"  # bob's own model, which the run trained
    assert exp.model_serving("tiny-udpo-bob") == {
        "base": exp.model_dir("tiny-random-llama"),
        "adapter": "results/tiny/train/udpo/models/bob/adapter",
    }
    assert exp.model_serving("tiny-random-llama") == exp.model_dir("tiny-random-llama")
    assert exp.model_dir("tiny-random-llama").startswith("resources/models/tiny-random-llama-")
    with pytest.raises(
        ConfigError, match=r"models\.tiny-udpo-bob\.adapter = true needs a source trained:<run>/<agent>"
    ):
        Experiment(validate_config(_mutated(lambda cfg: served(cfg, source="trained:sdrl"))))
    with pytest.raises(ConfigError, match=r"served on a vLLM engine; agents \['dave'\] use another backend"):
        Experiment(validate_config(_mutated(lambda cfg: served(cfg, backend="transformers"))))

    def fully_fine_tuned(cfg):
        served(cfg)
        cfg["training"]["runs"]["udpo"]["finetuning"] = "full"
        del cfg["training"]["runs"]["udpo"]["lora"]  # no adapter to shape

    with pytest.raises(
        ConfigError,
        match=r"models\.tiny-udpo-bob\.adapter = true, but run 'udpo' fine-tunes every weight "
        r"\(training\.runs\.udpo\.finetuning = 'full'\) and saves no adapter",
    ):
        Experiment(validate_config(_mutated(fully_fine_tuned)))


@pytest.mark.parametrize("run", ["udpo", "umad"])
def test_a_multi_agent_run_may_fine_tune_every_agent_s_full_weights(run):
    def full(cfg):
        cfg["training"]["runs"][run].update(finetuning="full")
        del cfg["training"]["runs"][run]["lora"]  # no adapter to shape

    exp = Experiment(validate_config(_mutated(full)))
    assert exp.run_settings(run).finetuning == "full"


DUPLICATE_AGENT = """\
experiment: twice
agents:
  alice: {model: smollm2-135m-instruct, temperature: 0.5}
  bob: {model: smollm2-135m-instruct}
  alice: {model: smollm2-135m-instruct, temperature: 0.9}
"""


def test_a_key_given_twice_is_an_error_naming_the_key_and_its_lines(tmp_path):
    path = tmp_path / "twice.yaml"
    path.write_text(DUPLICATE_AGENT)
    with pytest.raises(
        ConfigError, match=r"twice\.yaml: line 5: the key 'alice' is given twice in one mapping \(first on line 3\)"
    ):
        load_experiment(path)


def test_a_merge_may_override_the_keys_it_brings_in(tmp_path):
    from debatelab.config import load_yaml_config

    path = tmp_path / "merge.yaml"
    path.write_text("seat: &seat {model: m, temperature: 0.5}\nother: {<<: *seat, temperature: 0.9}\n")
    assert load_yaml_config(path)["other"] == {"model": "m", "temperature": 0.9}
    path.write_text("agents: {alice: 1, alice: 2}\n")  # twice on one line, in a flow mapping
    with pytest.raises(ConfigError, match=r"line 1: the key 'alice' is given twice"):
        load_yaml_config(path)


def test_snakemake_refuses_a_config_with_a_key_given_twice_at_dry_run(tmp_path):
    base = (REPO_ROOT / "config/config.yaml").read_text()
    first_agent = base.index("\nagents:\n") + len("\nagents:\n")
    line = base[first_agent:].splitlines()[0]  # the first agent's line, given again right after it
    path = tmp_path / "twice.yaml"
    path.write_text(base[:first_agent] + line + "\n" + base[first_agent:])
    proc = snakemake(tmp_path, "--configfile", str(path), "-n", check=False, timeout=300)
    assert proc.returncode != 0
    key = line.strip().split(":")[0]
    assert f"the key '{key}' is given twice in one mapping" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_config_file_without_an_experiment_name_is_refused_not_merged_into_the_default(tmp_path):
    """Without `experiment:` the Snakefile read config/config.yaml beneath the given file, and its
    datasets, agents and training run joined the file's, all under results/default/."""
    path = tmp_path / "unnamed.yaml"
    path.write_text(yaml.safe_dump({k: v for k, v in TINY.items() if k != "experiment"}))
    proc = snakemake(tmp_path, "--configfile", str(path), "-n", check=False, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"config ({path}): no `experiment:` name" in output
    assert not (tmp_path / "results").exists()


def test_a_bad_command_line_override_is_one_line_naming_key_and_value(tmp_path):
    proc = snakemake(tmp_path, "-n", "--config", "seed=abc", check=False, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config (" in output and "): seed: 'abc' is not of type 'integer'" in output
    assert "On instance" not in output  # not jsonschema's dump of the whole schema
