"""The papers' reproduction configs in config/experiments/ and their CPU twins.

Every file validates and dry-runs with the SLURM profile, its GPU-heavy jobs landing on the
right partitions; every paper config has a `_cpu` twin with the same protocols, on bundled
models and offline data only, whose dry run plans a debate job for every protocol.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from workflow_helpers import REPO_ROOT, snakemake

EXPERIMENTS = REPO_ROOT / "config/experiments"
SLURM = str(REPO_ROOT / "profiles/slurm")
CONFIGS = sorted(EXPERIMENTS.glob("*.yaml"))
PAPERS = ["udpo", "svr_mad", "umad_eval", "sdrl_eval"]

#: Protocols a CPU twin leaves out on purpose (named in its header comment).
CUT_ON_CPU = {
    "udpo": {"mad_n10", "mad_n5_t3", "mad_n5_t10"},  # N = 10 and T > 2
}

#: CPU twins stay small: a few minutes on 2 cores.
CPU_MAX_TOKENS = 128
CPU_MAX_LIMIT = 5
CPU_MAX_ROUNDS = 2


def _load(name_or_path) -> dict:
    path = name_or_path if isinstance(name_or_path, Path) else EXPERIMENTS / f"{name_or_path}.yaml"
    return yaml.safe_load(path.read_text())


def _protocols(cfg: dict) -> dict:
    return (cfg.get("debate") or {}).get("protocols") or {}


def _participants(cfg: dict, protocol: dict) -> list[str]:
    return protocol.get("participants") or (cfg.get("debate") or {}).get("participants") or list(cfg["agents"])


def _adversarial(cfg: dict, seats: list[str]) -> list[bool]:
    return [bool(cfg["agents"][a].get("adversarial")) for a in seats]


def _job_blocks(output: str) -> dict[str, list[str]]:
    """Rule name → the text of each planned job in a dry run (as tests/test_slurm_profile.py splits it)."""
    blocks: dict[str, list[str]] = {}
    for chunk in re.split(r"\n(?=(?:localrule|rule) \w+:)", output):
        m = re.match(r"(?:localrule|rule) (\w+):", chunk)
        if m:
            blocks.setdefault(m.group(1), []).append(chunk)
    return blocks


def _resources(chunk: str) -> str:
    m = re.search(r"resources: (.*)", chunk)
    return m.group(1) if m else ""


def _workflow_has_rule(rule: str) -> bool:
    """Whether the workflow defines `rule` (the debate rule arrived after the zero-shot stage)."""
    sources = [REPO_ROOT / "Snakefile", *sorted((REPO_ROOT / "rules").glob("*.smk"))]
    return any(re.search(rf"^rule {rule}:", p.read_text(), re.M) for p in sources)


def _dry_run(tmp_path, path: Path) -> str:
    proc = snakemake(tmp_path, "-n", "--profile", SLURM, "--configfile", str(path), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{path.name}: dry run failed ({proc.returncode}):\n{output[-4000:]}"
    return output


def test_the_paper_configs_and_their_cpu_twins_are_shipped():
    names = {p.stem for p in CONFIGS}
    for paper in PAPERS:
        assert paper in names and f"{paper}_cpu" in names, sorted(names)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_is_self_consistent(path):
    """Checks that need no Snakemake: the name, participants, samples, and one backend per model."""
    cfg = _load(path)
    assert cfg["experiment"] == path.stem
    samples = (cfg.get("zero_shot") or {}).get("samples", 1)
    for name, protocol in _protocols(cfg).items():
        seats = _participants(cfg, protocol)
        assert set(seats) <= set(cfg["agents"]), f"{name}: {seats}"
        need = max(Counter(seats).values()) * protocol.get("threads", 1)
        assert samples >= need, f"{name} needs zero_shot.samples >= {need}"
    # A debate job loads each model once, with the settings of the first agent that uses it:
    # agents sharing a model must agree on how it is served.
    served: dict[str, tuple] = {}
    for agent, spec in cfg["agents"].items():
        how = (spec.get("backend", "transformers"), yaml.safe_dump(spec.get("backend_options") or {}))
        assert served.setdefault(spec["model"], how) == how, f"agents.{agent}: {spec['model']} served differently"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_dry_run_with_slurm_profile_maps_gpu_jobs(tmp_path, path):
    cfg = _load(path)
    blocks = _job_blocks(_dry_run(tmp_path, path))

    assert len(blocks.get("zero_shot", [])) == len(cfg["datasets"]) * len(cfg["agents"])
    for chunk in blocks["zero_shot"]:
        resources = _resources(chunk)
        assert "slurm_partition=gpu_a100" in resources and "gpu_model=a100" in resources, resources

    if _workflow_has_rule("debate"):
        protocols = _protocols(cfg)
        debate = blocks.get("debate", [])
        assert len(debate) == len(cfg["datasets"]) * len(protocols), f"{len(debate)} debate jobs planned"
        for chunk in debate:
            resources = _resources(chunk)
            assert "slurm_partition=gpu_h800" in resources and "gpu_model=h800" in resources, resources
        if path.stem.endswith("_cpu"):
            # The CPU twin plans a debate job for every (dataset, protocol).
            planned = {(m.group(1), m.group(2)) for chunk in debate
                       for m in [re.search(r"wildcards: dataset=([\w.-]+), protocol=([\w.-]+)", chunk)] if m}
            assert planned == {(d, p) for d in cfg["datasets"] for p in protocols}


@pytest.mark.parametrize("paper", PAPERS)
def test_cpu_twin_has_the_papers_protocols(paper):
    full, cpu = _load(paper), _load(f"{paper}_cpu")
    kinds = {name: p["kind"] for name, p in _protocols(full).items()}
    cpu_kinds = {name: p["kind"] for name, p in _protocols(cpu).items()}
    cut = CUT_ON_CPU.get(paper, set())
    assert cut <= set(kinds), f"CUT_ON_CPU names protocols {paper} does not have"
    assert cpu_kinds == {n: k for n, k in kinds.items() if n not in cut}
    # Same seat structure: as many seats per protocol, adversarial in the same places.
    for name, protocol in _protocols(cpu).items():
        full_seats = _participants(full, _protocols(full)[name])
        cpu_seats = _participants(cpu, protocol)
        assert len(cpu_seats) == len(full_seats), name
        assert _adversarial(cpu, cpu_seats) == _adversarial(full, full_seats), name
        for option in ("template", "final", "tie_break", "mask_peer_boxed", "early_stop_agree", "skip_if_unanimous",
                       "group_size", "skip_rate", "challenges", "accept_after", "prior", "posterior"):
            assert protocol.get(option) == _protocols(full)[name].get(option), f"{name}.{option}"


@pytest.mark.parametrize("paper", PAPERS)
def test_cpu_twin_uses_bundled_models_and_offline_data_only(paper):
    from debatelab.data import BENCHMARKS

    cfg = _load(f"{paper}_cpu")
    for name, model in cfg["models"].items():
        assert model["source"].startswith("bundled:"), f"models.{name}: {model['source']}"
    for name, agent in cfg["agents"].items():
        assert agent.get("backend", "transformers") == "transformers", f"agents.{name}"
        assert agent.get("max_tokens", 256) <= CPU_MAX_TOKENS, f"agents.{name}.max_tokens"
    for name, spec in cfg["datasets"].items():
        offline = BENCHMARKS[name].offline
        assert offline is not None and spec.get("split", "test") in offline.loaders, f"datasets.{name} is not offline"
        assert spec.get("source") == "offline", f"datasets.{name}.source"
        assert spec.get("limit") and spec["limit"] <= CPU_MAX_LIMIT, f"datasets.{name}.limit"
    for name, protocol in _protocols(cfg).items():
        assert protocol.get("rounds", 2) <= CPU_MAX_ROUNDS, f"debate.protocols.{name}.rounds"


def test_udpo_attacks_compromise_the_last_m_agents():
    cfg = _load("udpo")
    base = cfg["debate"]["participants"]
    for m in (1, 2, 3):
        seats = _participants(cfg, cfg["debate"]["protocols"][f"attack_m{m}"])
        assert _adversarial(cfg, seats) == [False] * (len(base) - m) + [True] * m
        for honest, seat in zip(base, seats):
            spec, twin = cfg["agents"][honest], cfg["agents"][seat]
            assert spec["model"] == twin["model"] and spec["temperature"] == twin["temperature"]
