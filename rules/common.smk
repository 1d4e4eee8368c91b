# Config validation, wildcard constraints and every input function, in one place.
import re
from pathlib import Path

from snakemake.utils import validate

validate(config, schema="../config/schema.yaml", set_default=True)

EXPERIMENT = config["experiment"]
DATASETS = config["datasets"]
MODELS = config["models"]
AGENTS = config["agents"]
DEBATE = config["debate"]
PROTOCOLS = DEBATE["protocols"]
CALIBRATION = config["calibration"]
PAIRS = CALIBRATION["pairs"]
SEARCH = config["protocol_search"]
ATTACK = config["attack"]


def benchmark_of(dataset):
    """The registered benchmark a dataset entry reads (entries may alias one benchmark's splits)."""
    return DATASETS[dataset].get("benchmark") or dataset


def _check_references():
    """Cross-references the schema can't express: agent → model, dataset → registry."""
    from debatelab.data import BENCHMARKS

    for agent, spec in AGENTS.items():
        if spec["model"] not in MODELS:
            raise ValueError(
                f"config: agents.{agent}.model = {spec['model']!r} is not a key of `models` "
                f"(known: {sorted(MODELS)})"
            )
    for name, spec in DATASETS.items():
        benchmark = benchmark_of(name)
        if benchmark not in BENCHMARKS:
            where = f"datasets.{name}.benchmark = {benchmark!r}" if spec.get("benchmark") else f"datasets.{name}"
            raise ValueError(f"config: {where} is not a registered benchmark (known: {sorted(BENCHMARKS)})")
        splits = BENCHMARKS[benchmark].splits
        if spec["split"] not in splits:
            raise ValueError(f"config: datasets.{name}.split = {spec['split']!r}; {benchmark} offers {sorted(splits)}")
    if ATTACK["rewriter"] is not None and ATTACK["rewriter"] not in MODELS:
        raise ValueError(
            f"config: attack.rewriter = {ATTACK['rewriter']!r} is not a key of `models` (known: {sorted(MODELS)})"
        )


_check_references()


def protocol_participants(protocol):
    """Agent names of a protocol's seats, in order (a repeated name is another copy)."""
    return PROTOCOLS[protocol].get("participants") or DEBATE.get("participants") or list(AGENTS)


def protocol_datasets(protocol):
    return PROTOCOLS[protocol].get("datasets") or list(DATASETS)


def pair_datasets(pair):
    """Datasets a pair is reported on; a dataset serving as another's fixed validation split is not one."""
    validation_only = set(PAIRS[pair]["validation"].values())
    return PAIRS[pair].get("datasets") or [
        d for d in protocol_datasets(PAIRS[pair]["debate"]) if d not in validation_only
    ]


def agent_samples(agent):
    """Zero-shot samples per question of one agent: its own `samples`, else zero_shot.samples."""
    return AGENTS[agent].get("samples") or config["zero_shot"]["samples"]


def _check_debate():
    """Participants must be agents, and every copy × thread needs its own zero-shot sample."""
    from collections import Counter

    for name, spec in PROTOCOLS.items():
        where = f"debate.protocols.{name}.participants" if spec.get("participants") else "debate.participants"
        seats = protocol_participants(name)
        for agent in seats:
            if agent not in AGENTS:
                raise ValueError(f"config: {where} names {agent!r}, which is not a key of `agents` (known: {sorted(AGENTS)})")
        for dataset in spec.get("datasets") or []:
            if dataset not in DATASETS:
                raise ValueError(f"config: debate.protocols.{name}.datasets names {dataset!r}, which is not a key of `datasets`")
        for agent, copies in Counter(seats).items():
            need, have = copies * spec["threads"], agent_samples(agent)
            if need > have:
                source = f"agents.{agent}.samples" if AGENTS[agent].get("samples") else "zero_shot.samples"
                raise ValueError(
                    f"config: debate.protocols.{name} needs {need} zero-shot samples of agent {agent!r} "
                    f"({copies} copies × {spec['threads']} thread(s)); {source} = {have}"
                )


_check_debate()


def _check_pairs():
    """A pair names two agents and a debate protocol of exactly those two that elicits the estimators."""
    for name, spec in PAIRS.items():
        where = f"calibration.pairs.{name}"
        for agent in spec["agents"]:
            if agent not in AGENTS:
                raise ValueError(f"config: {where}.agents names {agent!r}, which is not a key of `agents` (known: {sorted(AGENTS)})")
        if spec["agents"][0] == spec["agents"][1]:
            raise ValueError(f"config: {where}.agents = {spec['agents']}; a pair needs two different agents")
        debate = spec["debate"]
        if debate not in PROTOCOLS:
            raise ValueError(f"config: {where}.debate = {debate!r} is not a key of debate.protocols (known: {sorted(PROTOCOLS)})")
        protocol = PROTOCOLS[debate]
        for dataset in spec.get("datasets") or []:
            if dataset not in protocol_datasets(debate):
                raise ValueError(
                    f"config: {where}.datasets names {dataset!r}, where its debate protocol {debate!r} does not run "
                    f"(it runs on {protocol_datasets(debate)})"
                )
        for test, val in spec["validation"].items():
            for dataset in (test, val):
                if dataset not in protocol_datasets(debate):
                    raise ValueError(
                        f"config: {where}.validation maps {test!r} to {val!r}, but its debate protocol {debate!r} "
                        f"does not run on {dataset!r} (it runs on {protocol_datasets(debate)})"
                    )
            if benchmark_of(test) != benchmark_of(val):
                raise ValueError(
                    f"config: {where}.validation maps {test!r} ({benchmark_of(test)}) to {val!r} "
                    f"({benchmark_of(val)}); both must read the same benchmark"
                )
        if protocol_participants(debate) != list(spec["agents"]):
            raise ValueError(
                f"config: {where}.debate = {debate!r} has participants {protocol_participants(debate)}; "
                f"the pair needs exactly {spec['agents']}"
            )
        if protocol["kind"] == "self_consistency" or protocol["rounds"] < 1:
            raise ValueError(f"config: {where}.debate = {debate!r} must debate at least one round (kind {protocol['kind']!r})")
        missing = [e for e in CALIBRATION["estimators"] if e not in protocol["confidence"]]
        if missing:
            raise ValueError(
                f"config: debate.protocols.{debate}.confidence = {protocol['confidence']} lacks {missing}, "
                f"which calibration.estimators needs for pair {name!r}"
            )


_check_pairs()


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    experiment=re.escape(EXPERIMENT),
    dataset=_alternatives(set(DATASETS) | {benchmark_of(d) for d in DATASETS}),
    agent=_alternatives(AGENTS),
    model=_alternatives(MODELS),
    protocol=_alternatives(PROTOCOLS) if PROTOCOLS else "(?!)",
    pair=_alternatives(PAIRS) if PAIRS else "(?!)",
    confidence_protocol="wsv|cga|hid",
    split=r"[A-Za-z0-9_.-]+",


RESULTS = f"results/{EXPERIMENT}"
LOGS = f"logs/{EXPERIMENT}"
BENCH = f"{RESULTS}/benchmarks"


def dataset_path(dataset):
    return f"data/{benchmark_of(dataset)}/{DATASETS[dataset]['split']}.parquet"


def dataset_file(wildcards):
    return dataset_path(wildcards.dataset)


def download_source(wildcards):
    """`source` of the first dataset entry reading this benchmark."""
    return next(spec["source"] for name, spec in DATASETS.items() if benchmark_of(name) == wildcards.dataset)


def agent_model_dir(wildcards):
    return f"resources/models/{AGENTS[wildcards.agent]['model']}"


def agent_settings(wildcards):
    """The agent's config with its backend's defaults merged under its own options."""
    spec = dict(AGENTS[wildcards.agent])
    backend_defaults = dict(config["backends"].get(spec["backend"], {}))
    backend_defaults.update(spec.get("backend_options") or {})
    spec["backend_options"] = backend_defaults
    return spec


def zero_shot_files():
    return [f"{RESULTS}/zero_shot/{d}/{a}.parquet" for d in DATASETS for a in AGENTS]


def generation_cache_dir(wildcards):
    return f"{RESULTS}/cache/{AGENTS[wildcards.agent]['model']}"


def debate_agents(wildcards):
    return sorted(set(protocol_participants(wildcards.protocol)))


def debate_models(wildcards):
    """Models the protocol calls (none for self-consistency, which only votes)."""
    if PROTOCOLS[wildcards.protocol]["kind"] == "self_consistency":
        return []
    return sorted({AGENTS[a]["model"] for a in debate_agents(wildcards)})


def debate_zero_shot_paths(wildcards):
    return {a: f"{RESULTS}/zero_shot/{wildcards.dataset}/{a}.parquet" for a in debate_agents(wildcards)}


def debate_inputs(wildcards):
    return {
        "dataset": dataset_file(wildcards),
        "zero_shot": list(debate_zero_shot_paths(wildcards).values()),
        "models": [f"resources/models/{m}" for m in debate_models(wildcards)],
        **attack_input(wildcards.dataset, debate_agents(wildcards)),
    }


def attack_input(dataset, agents):
    """{"attack": the dataset's AutoTransform prompt} when a rewriter is set and one of `agents` is adversarial."""
    if ATTACK["rewriter"] is None or not any(AGENTS[a].get("adversarial") for a in agents):
        return {}
    return {"attack": f"{RESULTS}/attack/{dataset}.json"}


def zero_shot_inputs(wildcards):
    return {
        "dataset": dataset_file(wildcards),
        "model": agent_model_dir(wildcards),
        **attack_input(wildcards.dataset, [wildcards.agent]),
    }


def debate_agent_settings(wildcards):
    return {a: agent_settings(type("W", (), {"agent": a})) for a in debate_agents(wildcards)}


def debate_files(kind):
    return [f"{RESULTS}/debate/{d}/{p}/{kind}.parquet" for p in PROTOCOLS for d in protocol_datasets(p)]


def debate_question_files():
    return debate_files("questions")


def debate_turn_files():
    return debate_files("turns")


def uncertainty_files():
    return [
        f"{RESULTS}/uncertainty/{d}/{p}{suffix}"
        for p in PROTOCOLS
        for d in protocol_datasets(p)
        for suffix in (".parquet", ".rounds.parquet", ".diagnostics.csv", ".selective.csv", ".selective.png")
    ]


def pair_validation_dataset(wildcards):
    """The dataset holding this dataset's fixed validation split for the pair, or None (cut per run)."""
    return PAIRS[wildcards.pair]["validation"].get(wildcards.dataset)


def pair_inputs(wildcards):
    """A pair's streams come from the dataset, both agents' zero-shot answers and the pair's debate;
    with a fixed validation dataset, from its files too (the `val_*` inputs)."""
    spec = PAIRS[wildcards.pair]

    def files(dataset, prefix=""):
        return {
            f"{prefix}dataset": dataset_path(dataset),
            f"{prefix}zero_shot": [f"{RESULTS}/zero_shot/{dataset}/{a}.parquet" for a in spec["agents"]],
            f"{prefix}turns": f"{RESULTS}/debate/{dataset}/{spec['debate']}/turns.parquet",
        }

    inputs = files(wildcards.dataset)
    val = pair_validation_dataset(wildcards)
    if val:
        inputs.update(files(val, "val_"))
    return inputs


def search_files(wildcards):
    return [f"{RESULTS}/search/{wildcards.dataset}/{wildcards.pair}/{p}.json" for p in SEARCH["protocols"]]


def confidence_metric_files():
    return [f"{RESULTS}/protocols/{d}/{p}/metrics.csv" for p in PAIRS for d in pair_datasets(p)]


def confidence_targets():
    per_pair = [
        f"{RESULTS}/{kind}/{d}/{p}{suffix}"
        for p in PAIRS
        for d in pair_datasets(p)
        for kind, suffix in (("calibration", ".json"), ("calibration", ".csv"))
    ]
    per_pair += [
        f"{RESULTS}/protocols/{d}/{p}/{name}"
        for p in PAIRS
        for d in pair_datasets(p)
        for name in ("reliability.png", "accuracy_rejection.png")
    ]
    per_pair += [
        f"{RESULTS}/search/{d}/{p}/{c}.history.png"
        for p in PAIRS
        for d in pair_datasets(p)
        for c in SEARCH["protocols"]
    ]
    summary = [
        f"{RESULTS}/summary/{name}"
        for name in ("confidence.csv", "confidence_lift.csv", "confidence_paper.csv", "confidence_lift.png")
    ]
    return per_pair + summary


def all_targets():
    targets = [f"{RESULTS}/summary/zero_shot.csv", f"{RESULTS}/summary/zero_shot.png"]
    if PROTOCOLS:
        targets += [
            f"{RESULTS}/summary/debate.csv",
            f"{RESULTS}/summary/debate_paper.csv",
            f"{RESULTS}/summary/debate_cost_accuracy.png",
            *uncertainty_files(),
        ]
    if PAIRS:
        targets += confidence_targets()
    return targets
