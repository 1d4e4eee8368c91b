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
        if name not in BENCHMARKS:
            raise ValueError(f"config: datasets.{name} is not a registered benchmark (known: {sorted(BENCHMARKS)})")
        splits = BENCHMARKS[name].splits
        if spec["split"] not in splits:
            raise ValueError(f"config: datasets.{name}.split = {spec['split']!r}; {name} offers {sorted(splits)}")


_check_references()


def protocol_participants(protocol):
    """Agent names of a protocol's seats, in order (a repeated name is another copy)."""
    return PROTOCOLS[protocol].get("participants") or DEBATE.get("participants") or list(AGENTS)


def _check_debate():
    """Participants must be agents, and every copy × thread needs its own zero-shot sample."""
    from collections import Counter

    samples = config["zero_shot"]["samples"]
    for name, spec in PROTOCOLS.items():
        where = f"debate.protocols.{name}.participants" if spec.get("participants") else "debate.participants"
        seats = protocol_participants(name)
        for agent in seats:
            if agent not in AGENTS:
                raise ValueError(f"config: {where} names {agent!r}, which is not a key of `agents` (known: {sorted(AGENTS)})")
        copies = max(Counter(seats).values())
        need = copies * spec["threads"]
        if need > samples:
            raise ValueError(
                f"config: debate.protocols.{name} needs zero_shot.samples >= {need} "
                f"({copies} copies of one agent × {spec['threads']} thread(s)); zero_shot.samples = {samples}"
            )


_check_debate()


def _alternatives(names):
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))


wildcard_constraints:
    experiment=re.escape(EXPERIMENT),
    dataset=_alternatives(DATASETS),
    agent=_alternatives(AGENTS),
    model=_alternatives(MODELS),
    protocol=_alternatives(PROTOCOLS) if PROTOCOLS else "(?!)",
    split=r"[A-Za-z0-9_.-]+",


RESULTS = f"results/{EXPERIMENT}"
LOGS = f"logs/{EXPERIMENT}"
BENCH = f"{RESULTS}/benchmarks"


def dataset_file(wildcards):
    return f"data/{wildcards.dataset}/{DATASETS[wildcards.dataset]['split']}.parquet"


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
    }


def debate_agent_settings(wildcards):
    return {a: agent_settings(type("W", (), {"agent": a})) for a in debate_agents(wildcards)}


def debate_files(kind):
    return [f"{RESULTS}/debate/{d}/{p}/{kind}.parquet" for d in DATASETS for p in PROTOCOLS]


def debate_question_files():
    return debate_files("questions")


def debate_turn_files():
    return debate_files("turns")


def uncertainty_files():
    return [
        f"{RESULTS}/uncertainty/{d}/{p}{suffix}"
        for d in DATASETS
        for p in PROTOCOLS
        for suffix in (".parquet", ".rounds.parquet", ".diagnostics.csv", ".selective.csv", ".selective.png")
    ]


def all_targets():
    targets = [f"{RESULTS}/summary/zero_shot.csv", f"{RESULTS}/summary/zero_shot.png"]
    if PROTOCOLS:
        targets += [
            f"{RESULTS}/summary/debate.csv",
            f"{RESULTS}/summary/debate_paper.csv",
            f"{RESULTS}/summary/debate_cost_accuracy.png",
            *uncertainty_files(),
        ]
    return targets
