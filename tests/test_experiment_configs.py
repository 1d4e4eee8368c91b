"""The papers' reproduction configs in config/experiments/ and their CPU twins.

Every file validates and dry-runs with the SLURM profile, its GPU-heavy jobs landing on the
right partitions; every paper config has a `_cpu` twin with the same protocols, on bundled
models and offline data only, whose dry run plans a debate job for every (dataset, protocol)
the protocol runs on. The confidence paper's CPU stages (streams, calibration, TPE search,
test report) land on the CPU partition, one search per (dataset, pair, WSV/CGA/HID).
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
PAPERS = ["udpo", "svr_mad", "umad_eval", "umad", "sdrl_eval", "sdrl", "confidence"]

#: Protocols a CPU twin leaves out on purpose (named in its header comment).
CUT_ON_CPU = {
    # N = 10 and T > 2; after training, the ablations, MAPPO/RMAAC beyond N = 5 / T = 5 and m = 2, 3 (one more
    # run / debate of the same code each)
    "udpo": {
        "mad_n10",
        "mad_n5_t3",
        "mad_n5_t10",
        "udpo_wo_intra_n5",
        "udpo_wo_inter_n5",
        "udpo_wo_sys_n5",
        "udpo_attack_m2",
        "udpo_attack_m3",
        "udpo_n10",
        "udpo_n5_t3",
        "udpo_n5_t10",
        *(
            f"{run}_{cut}"
            for run in ("mappo", "rmaac")
            for cut in ("n3", "n10", "n5_t3", "n5_t10", "attack_m1", "attack_m2", "attack_m3")
        ),
        # every debate of the agents trained on TruthfulQA / CommonsenseQA (the GSM8K runs' code on
        # another dataset; neither training split is offline)
        *(
            p
            for p in yaml.safe_load((EXPERIMENTS / "udpo.yaml").read_text())["debate"]["protocols"]
            if "_tqa_" in p or "_csqa_" in p
        ),
    },
    # one more training run of the same code each: the one-term ablations, homo pair, Single-GRPO
    "umad": {
        "trained_intrinsic_only",
        "trained_nll_only",
        "trained_umad_homo",
        "trained_ippo_homo",
        "single_grpo_pair",
    },
    # the DeepSeek-V3.1 rows: the same six-seat protocols on a second (API-served) LLM
    "svr_mad": {
        "self_consistency_deepseek",
        "group_debate_deepseek",
        "sid_et_r50_deepseek",
        "sid_et_r60_deepseek",
        "s2_mad_deepseek",
        "svr_mad_deepseek",
    },
    # the second backbone (Qwen3-4B-Base: the same runs and debates on another model), and Tables 3-4's
    # N = 3 / 7 and topologies after training (sdrl_eval_cpu debates them untrained)
    "sdrl": {
        *(
            f"{m}_{cut}"
            for m in ("dapo", "sdrl_freq", "q3_dapo", "q3_sdrl_freq")
            for cut in ("mad_n3", "mad_n7", "sparse", "centralized")
        ),
        *(f"q3_{m}_{p}" for m in ("dapo", "sdrl_rand", "sdrl_freq") for p in ("maj", "mad")),
        "q3_sdrl_freq_125_mad",
        "q3_dapo_mad_t4",
        "q3_sdrl_freq_mad_t4",
    },
}

#: Paper configs of one table each, run apart from the paper's main config (no CPU twin of their own:
#: the main config's twin runs the same code): UDPO's Table 4 (homogeneous ensembles) and Table 7
#: (attack on a Qwen ensemble).
TABLE_CONFIGS = ["udpo_homogeneous", "udpo_attack_qwen"]

#: Protocols only a CPU twin has (none at present).
ONLY_ON_CPU: dict[str, set] = {}

#: Papers whose protocols are one protocol run on different agents and datasets (the confidence
#: paper's MAD round, once per model pair): the CPU twin keeps every protocol *shape* (kind, seat
#: count, options), under its own names, with its own agents.
SHAPES_ON_CPU = {"confidence"}

#: Protocol options a CPU twin keeps as the paper has them.
KEPT_OPTIONS = (
    "template",
    "final",
    "tie_break",
    "mask_peer_boxed",
    "early_stop_agree",
    "skip_if_unanimous",
    "group_size",
    "skip_rate",
    "challenges",
    "accept_after",
    "prior",
    "posterior",
    "confidence",
)

#: The confidence paper's Table 3 (Elahi & Di Eugenio, arXiv:2606.13591 §4, App. A.2, Table 3): six (M1, M2) pairs per dataset, by agent name.
CONFIDENCE_PAIRS = {
    "mmlu_college": {
        ("llama3.2-3b", "mistral-7b"),
        ("llama3.2-3b", "gemma3-4b"),
        ("gemma2-9b", "gemma3-12b"),
        ("mistral-7b", "mistral-nemo"),
        ("llama3.1-8b", "gemma3-12b"),
        ("phi4-mini", "qwen3-4b"),
    },
    "ezstance": {
        ("llama3.1-8b", "phi3-medium"),
        ("mistral-7b", "gemma2-9b"),
        ("phi4-mini", "gemma3-4b"),
        ("llama3.2-3b", "qwen2.5-14b"),
        ("ministral-8b", "qwen2.5-32b"),
        ("gemma2-9b", "gemma3-12b"),
    },
    "boolq": {
        ("llama3.1-8b", "gemma2-9b"),
        ("ministral-8b", "phi3-medium"),
        ("phi4-mini", "gemma3-12b"),
        ("mistral-7b", "qwen2.5-7b"),
        ("llama3.2-3b", "gemma3-4b"),
        ("gemma2-9b", "gemma3-4b"),
    },
    "hateval": {
        ("gemma2-9b", "gemma3-4b"),
        ("llama3.1-8b", "gemma3-4b"),
        ("llama3.2-3b", "qwen2.5-7b"),
        ("gemma3-12b", "qwen2.5-32b"),
        ("phi3-medium", "phi4-mini"),
        ("ministral-8b", "phi4-mini"),
    },
    "vast": {
        ("mistral-7b", "gemma3-12b"),
        ("qwen2.5-14b", "qwen2.5-32b"),
        ("llama3.2-3b", "llama3.1-8b"),
        ("phi4-mini", "llama3.2-3b"),
        ("phi3-medium", "gemma3-4b"),
        ("mistral-7b", "ministral-8b"),
    },
}

#: Rules of the confidence stages: pure computation on cached generations, CPU only.
CONFIDENCE_CPU_RULES = ("streams", "fit_calibrators", "search_protocol", "apply_protocol")

#: CPU twins stay small: a few minutes on 2 cores.
CPU_MAX_TOKENS = 128
CPU_MAX_LIMIT = 5
CPU_MAX_TRAINING_QUESTIONS = 64  # a dataset only training reads (evaluate: false)
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


def _protocol_datasets(cfg: dict, protocol: dict) -> list[str]:
    """The datasets a protocol runs on (null: every dataset of the experiment that is evaluated)."""
    return protocol.get("datasets") or [d for d, spec in cfg["datasets"].items() if spec.get("evaluate", True)]


def _pair_datasets(cfg: dict, pair: dict) -> list[str]:
    return pair.get("datasets") or _protocol_datasets(cfg, _protocols(cfg)[pair["debate"]])


def _shape(cfg: dict, protocol: dict) -> tuple:
    """What a protocol does, apart from which agents and datasets it runs on."""
    seats = _participants(cfg, protocol)
    options = tuple((o, yaml.safe_dump(protocol.get(o))) for o in KEPT_OPTIONS)
    return protocol["kind"], len(seats), tuple(_adversarial(cfg, seats)), options


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
    assert set(TABLE_CONFIGS) <= names, sorted(names)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_is_self_consistent(path):
    """Checks that need no Snakemake: the name, participants, samples, and one backend per model."""
    cfg = _load(path)
    assert cfg["experiment"] == path.stem
    samples = (cfg.get("zero_shot") or {}).get("samples", 1)
    for name, protocol in _protocols(cfg).items():
        seats = _participants(cfg, protocol)
        assert set(seats) <= set(cfg["agents"]), f"{name}: {seats}"
        for agent, copies in Counter(seats).items():
            need = copies * protocol.get("threads", 1)
            have = cfg["agents"][agent].get("samples") or samples
            assert have >= need, f"{name} needs {need} zero-shot samples of {agent}"
    # A debate job loads each model once, with the settings of the first agent that uses it:
    # agents sharing a model must agree on how it is served.
    served: dict[str, tuple] = {}
    for agent, spec in cfg["agents"].items():
        how = (spec.get("backend", "transformers"), yaml.safe_dump(spec.get("backend_options") or {}))
        assert served.setdefault(spec["model"], how) == how, f"agents.{agent}: {spec['model']} served differently"


#: udpo_homogeneous's trained Scout (4 GPUs each) and Mixtral (2 each) ensembles as five merged copies
#: in one debate job: no 8-GPU node holds them, so the config serves them as adapters (`adapter: true`).
MERGED_UNFIT = {f"{method}_{model}" for method in ("udpo", "mappo", "rmaac") for model in ("llama4", "mixtral")}


def _merged_copies(tmp_path) -> Path:
    """udpo_homogeneous.yaml with its trained agents as merged copies (no `adapter: true`)."""
    text = (EXPERIMENTS / "udpo_homogeneous.yaml").read_text().replace(", adapter: true}", "}")
    path = tmp_path / "udpo_homogeneous.yaml"
    path.write_text(text)
    return path


def test_trained_ensembles_fit_a_node_as_adapters_and_merged_copies_are_refused(tmp_path):
    from debatelab import gpu_plan as gp
    from debatelab.config import load_experiment

    h800 = gp.GpuType("h800", 80 * gp.GIB, 8)
    served, merged = load_experiment(EXPERIMENTS / "udpo_homogeneous.yaml"), load_experiment(_merged_copies(tmp_path))
    refused = set()
    for protocol in served.protocols:
        for dataset in served.protocol_datasets(protocol):
            job = {"dataset": dataset, "protocol": protocol}
            plan = gp.experiment_job_plan(served, "debate", job, h800)
            assert plan.gpus <= 8
            try:
                gp.experiment_job_plan(merged, "debate", job, h800)
            except gp.GpuPlanError as error:
                assert re.search(r"needs (10|20) × 80 GB h800 GPUs .*h800 nodes have 8: does not fit", str(error))
                refused.add(protocol)
    assert refused == MERGED_UNFIT
    plan = gp.experiment_job_plan(served, "debate", {"dataset": "gsm8k", "protocol": "udpo_llama4"}, h800)
    assert plan.describe().endswith("(llama-4-scout-17b-16e-instruct with 5 adapters 4); h800 nodes have 8: ok")
    # the slurm dry run stops at the first such debate, naming it, before anything is submitted
    proc = snakemake(
        tmp_path / "work", "-n", "--profile", SLURM, "--configfile", str(_merged_copies(tmp_path)), check=False
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    first = re.search(r"GpuPlanError: debate \S+?/gsm8k/(\w+) needs \d+ × 80 GB h800 GPUs", output)
    assert first and first.group(1) in MERGED_UNFIT, output[-3000:]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_dry_run_with_slurm_profile_maps_gpu_jobs(tmp_path, path):
    cfg = _load(path)
    blocks = _job_blocks(_dry_run(tmp_path, path))

    evaluated = [d for d, spec in cfg["datasets"].items() if spec.get("evaluate", True)]
    # every agent on every evaluated dataset, but an agent whose protocols all name their datasets
    # (a trained agent evaluated on one benchmark) only there
    protocols = _protocols(cfg)
    paired = {a for pair in ((cfg.get("calibration") or {}).get("pairs") or {}).values() for a in pair["agents"]}
    expected_zero_shot = 0
    for agent in cfg["agents"]:
        mine = [p for p in protocols.values() if agent in _participants(cfg, p)]
        restricted = mine and agent not in paired and all(p.get("datasets") for p in mine)
        expected_zero_shot += len({d for p in mine for d in p["datasets"]}) if restricted else len(evaluated)
    assert len(blocks.get("zero_shot", [])) == expected_zero_shot
    runs = (cfg.get("training") or {}).get("runs") or {}
    multi_agent = {run for run, spec in runs.items() if spec["method"] in ("udpo", "umad", "mappo", "rmaac")}
    assert len(blocks.get("train", [])) == len(runs) - len(multi_agent)
    assert len(blocks.get("train_agents", [])) == len(multi_agent)
    assert len(blocks.get("udpo_warmup", [])) == len([r for r in multi_agent if runs[r]["method"] == "udpo"])
    for chunk in blocks.get("train", []) + blocks.get("train_agents", []) + blocks.get("udpo_warmup", []):
        run = re.search(r"wildcards: run=([\w.-]+)", chunk).group(1)
        resources = _resources(chunk)
        assert "slurm_partition=gpu_h800" in resources and f"gpu={runs[run].get('gpus', 1)}," in resources, resources
    for chunk in blocks.get("udpo_coefficients", []):
        assert "gpu" not in _resources(chunk)
    for chunk in blocks["zero_shot"]:
        resources = _resources(chunk)
        assert "slurm_partition=gpu_a100" in resources and "gpu_model=a100" in resources, resources

    # Every GPU job's count is its printed GPU plan's, and fits an 8-GPU node of its type.
    output = "\n".join(c for chunks in blocks.values() for c in chunks)
    plans = dict(re.findall(r"GPU plan: (\S+ \S+) needs (\d+|no GPU)", output))
    for rule in ("zero_shot", "debate", "train", "train_agents", "udpo_warmup"):
        for chunk in blocks.get(rule, []):
            wildcards = re.search(r"wildcards: (.*)", chunk).group(1)
            job = f"{rule} {cfg['experiment']}/" + "/".join(v.split("=", 1)[1] for v in wildcards.split(", "))
            gpus = int(re.search(r"\bgpu=(\d+)", _resources(chunk)).group(1))
            # a job that runs no model (self-consistency) still asks for 1 GPU of its partition
            assert plans.get(job) in (str(gpus), "no GPU" if gpus == 1 else None), (job, gpus, plans.get(job))
            assert 1 <= gpus <= 8, (job, gpus)
    assert "does not fit" not in output

    if _workflow_has_rule("debate"):
        protocols = _protocols(cfg)
        expected = {(d, name) for name, p in protocols.items() for d in _protocol_datasets(cfg, p)}
        debate = blocks.get("debate", [])
        assert len(debate) == len(expected), f"{len(debate)} debate jobs planned, expected {len(expected)}"
        for chunk in debate:
            resources = _resources(chunk)
            assert "slurm_partition=gpu_h800" in resources and "gpu_model=h800" in resources, resources
        if path.stem.endswith("_cpu"):
            # The CPU twin plans a debate job for every (dataset, protocol) the protocol runs on.
            planned = {
                (m.group(1), m.group(2))
                for chunk in debate
                for m in [re.search(r"wildcards: dataset=([\w.-]+), protocol=([\w.-]+)", chunk)]
                if m
            }
            assert planned == expected


@pytest.mark.parametrize("paper", PAPERS)
def test_cpu_twin_has_the_papers_protocols(paper):
    full, cpu = _load(paper), _load(f"{paper}_cpu")
    if paper in SHAPES_ON_CPU:
        assert {_shape(cpu, p) for p in _protocols(cpu).values()} == {
            _shape(full, p) for p in _protocols(full).values()
        }
        return
    kinds = {name: p["kind"] for name, p in _protocols(full).items()}
    cpu_kinds = {name: p["kind"] for name, p in _protocols(cpu).items()}
    cut = CUT_ON_CPU.get(paper, set())
    assert cut <= set(kinds), f"CUT_ON_CPU names protocols {paper} does not have"
    extra = ONLY_ON_CPU.get(paper, set())
    assert {n: k for n, k in cpu_kinds.items() if n not in extra} == {n: k for n, k in kinds.items() if n not in cut}
    # Same seat structure: as many seats per protocol, adversarial in the same places.
    for name, protocol in _protocols(cpu).items():
        if name in extra:
            continue
        full_seats = _participants(full, _protocols(full)[name])
        cpu_seats = _participants(cpu, protocol)
        assert len(cpu_seats) == len(full_seats), name
        assert _adversarial(cpu, cpu_seats) == _adversarial(full, full_seats), name
        for option in KEPT_OPTIONS:
            assert protocol.get(option) == _protocols(full)[name].get(option), f"{name}.{option}"


@pytest.mark.parametrize("paper", PAPERS)
def test_cpu_twin_uses_bundled_models_and_offline_data_only(paper):
    from debatelab.data import BENCHMARKS

    cfg = _load(f"{paper}_cpu")
    runs = (cfg.get("training") or {}).get("runs") or {}
    for name, model in cfg["models"].items():
        trained = model["source"].startswith("trained:") and model["source"][len("trained:") :].split("/")[0] in runs
        assert model["source"].startswith("bundled:") or trained, f"models.{name}: {model['source']}"
    for name, agent in cfg["agents"].items():
        assert agent.get("backend", "transformers") == "transformers", f"agents.{name}"
        assert agent.get("max_tokens", 256) <= CPU_MAX_TOKENS, f"agents.{name}.max_tokens"
    for name, spec in cfg["datasets"].items():
        benchmark = BENCHMARKS[spec.get("benchmark") or name]
        split = spec.get("split", "test")
        # a derived split (BoolQ's val/test) is cut from a base split, which must be offline
        split = benchmark.derived[split].base if split in benchmark.derived else split
        offline = benchmark.offline
        assert offline is not None and split in offline.loaders, f"datasets.{name} is not offline"
        assert spec.get("source") == "offline", f"datasets.{name}.source"
        cap = CPU_MAX_LIMIT if spec.get("evaluate", True) else CPU_MAX_TRAINING_QUESTIONS
        assert spec.get("limit") and spec["limit"] <= cap, f"datasets.{name}.limit"
    for name, run in runs.items():
        assert run.get("max_tokens", 8192) <= CPU_MAX_TOKENS and run.get("steps", 200) <= 5, f"training.runs.{name}"
    for name, protocol in _protocols(cfg).items():
        assert protocol.get("rounds", 2) <= CPU_MAX_ROUNDS, f"debate.protocols.{name}.rounds"


def test_udpo_attacks_compromise_the_last_m_agents():
    """Untrained and each trained method's N = 5 debate: the last m seats are their agents' adversarial
    twins (same model and temperature)."""
    cfg = _load("udpo")
    protocols = cfg["debate"]["protocols"]
    natural = {
        "attack": cfg["debate"]["participants"],
        **{
            f"{run}{on}_attack": _participants(cfg, protocols[f"{run}{on}_n5"])
            for run in ("udpo", "mappo", "rmaac")
            for on in ("", "_tqa", "_csqa")  # trained on GSM8K, TruthfulQA, CommonsenseQA
        },
    }
    for prefix, base in natural.items():
        for m in (1, 2, 3):
            seats = _participants(cfg, protocols[f"{prefix}_m{m}"])
            assert _adversarial(cfg, seats) == [False] * (len(base) - m) + [True] * m, f"{prefix}_m{m}"
            for honest, seat in zip(base, seats):
                spec, twin = cfg["agents"][honest], cfg["agents"][seat]
                assert spec["model"] == twin["model"] and spec["temperature"] == twin["temperature"], seat


#: UDPO's trained methods and the (N, m, T) at which each debates on GSM8K (Tables 1, 2, 3, 5).
UDPO_TRAINED_CELLS = {
    *{(m, n, 0, 5) for m in ("UDPO", "MAPPO", "RMAAC") for n in (3, 5, 10)},
    *{(m, 5, k, 5) for m in ("UDPO", "MAPPO", "RMAAC") for k in (1, 2, 3)},
    *{(f"UDPO w/o {part}", 5, 0, 5) for part in ("intra", "inter", "sys")},
    *{(m, 5, 0, t) for m in ("UDPO", "MAPPO", "RMAAC") for t in (3, 10)},
}


def test_udpo_trained_cells_are_filled_on_every_dataset_by_agents_trained_on_it():
    """§5.1 ("the same datasets and LLMs as Section 3") and Tables 1, 2, 3, 5 report every trained method on
    GSM8K, TruthfulQA and CSQA. The evaluation's own table builders, fed one trajectory per (protocol,
    dataset) of udpo.yaml, find each trained cell on each dataset, filled by a protocol whose agents were
    trained on that dataset's training questions (never on the questions it is scored on)."""
    import pandas as pd

    from debatelab.config import load_experiment
    from debatelab.evaluation.papers import udpo
    from debatelab.evaluation.run import RunOutputs

    exp = load_experiment(EXPERIMENTS / "udpo.yaml")
    outputs = RunOutputs.from_experiment(exp)
    rows = [
        {
            "question_id": "q",
            "dataset": d,
            "protocol": p,
            "thread": 0,
            "correct": True,
            "u_intra": 0.1,
            "u_inter": 0.1,
            "u_sys": 0.1,
        }
        for p in exp.protocols
        for d in exp.protocol_datasets(p)
    ]
    outputs.uncertainty = pd.DataFrame(rows)  # the cached frame the stage would read
    frame = udpo.heterogeneous(udpo.trajectories(outputs))
    t1, t3, t5 = udpo.table1(frame, outputs.protocols), udpo.table3(frame, outputs.protocols), udpo.table5(frame)
    datasets = ("gsm8k", "truthfulqa", "commonsense_qa")
    for dataset in datasets:
        cells = {(r.method, r.n_agents, 0, 5) for r in t1[t1["dataset"] == dataset].itertuples()}
        cells |= {(r.method, r.n_agents, r.m, 5) for r in t3[t3["dataset"] == dataset].itertuples()}
        cells |= {(r.method, r.n_agents, 0, r.rounds) for r in t5[t5["dataset"] == dataset].itertuples()}
        assert UDPO_TRAINED_CELLS <= cells, (dataset, sorted(UDPO_TRAINED_CELLS - cells))
        ablations = udpo.table2(t1[t1["dataset"] == dataset])
        assert set(ablations["method"]) == {"Full", "w/o intra", "w/o inter", "w/o sys"}, dataset
    # every trained cell's agents learnt on the dataset it is scored on, and on other questions
    trained = pd.concat([t1, t3, t5])
    trained = trained[trained["method"] != "MAD"]
    assert set(trained["dataset"]) == set(datasets)
    for protocol, run_dataset in set(zip(trained["protocol"], trained["run_dataset"])):
        for run in outputs.protocols[protocol].trained_runs:
            training_set = exp.training_runs[run]["dataset"]
            assert exp.benchmark_of(training_set) == exp.benchmark_of(run_dataset), (protocol, run, run_dataset)
            assert exp.dataset_path(training_set) != exp.dataset_path(run_dataset), (protocol, run)
            assert exp.datasets[training_set]["split"] != exp.datasets[run_dataset]["split"], (protocol, run)


def test_confidence_pairs_are_table_3():
    """Six pairs per dataset, exactly Elahi & Di Eugenio, arXiv:2606.13591 §4, App. A.2, Table 3's, each debating on its own dataset."""
    cfg = _load("confidence")
    # every benchmark is reported on its test entry and fitted on its `<name>_dev` entry (the confidence paper's §4, App. A.2)
    assert set(cfg["datasets"]) == set(CONFIDENCE_PAIRS) | {f"{d}_dev" for d in CONFIDENCE_PAIRS}
    per_dataset: dict[str, list[tuple[str, str]]] = {d: [] for d in CONFIDENCE_PAIRS}
    for name, pair in cfg["calibration"]["pairs"].items():
        for dataset in _pair_datasets(cfg, pair):
            per_dataset[dataset].append(tuple(pair["agents"]))
            assert pair["validation"][dataset] == f"{dataset}_dev", name
            assert cfg["datasets"][f"{dataset}_dev"]["benchmark"] == dataset
        protocol = _protocols(cfg)[pair["debate"]]
        assert _participants(cfg, protocol) == pair["agents"], name
        used = set(_pair_datasets(cfg, pair)) | set(pair["validation"].values())
        assert used <= set(_protocol_datasets(cfg, protocol)), name
    for dataset, pairs in per_dataset.items():
        assert len(pairs) == 6, f"{dataset}: {pairs}"
        assert set(pairs) == CONFIDENCE_PAIRS[dataset], dataset


def test_confidence_dry_run_plans_cpu_stages_per_pair(tmp_path):
    """streams / calibration / search / test report run on the CPU partition, once per (dataset, pair),
    the search once per (dataset, pair, WSV/CGA/HID): 30 pairs x 3 = 90."""
    cfg = _load("confidence")
    blocks = _job_blocks(_dry_run(tmp_path, EXPERIMENTS / "confidence.yaml"))
    searched = (cfg.get("protocol_search") or {}).get("protocols", ["wsv", "cga", "hid"])
    assert sorted(searched) == ["cga", "hid", "wsv"]
    pairs = {(d, name) for name, pair in cfg["calibration"]["pairs"].items() for d in _pair_datasets(cfg, pair)}
    assert len(pairs) == 30
    validation = {name: pair.get("validation") or {} for name, pair in cfg["calibration"]["pairs"].items()}
    dev_sets = {v for mapping in validation.values() for v in mapping.values()}
    assert Counter(d for d, _ in pairs) == {d: 6 for d in cfg["datasets"] if d not in dev_sets}

    for rule in CONFIDENCE_CPU_RULES:
        chunks = blocks.get(rule, [])
        for chunk in chunks:
            resources = _resources(chunk)
            assert "slurm_partition=cpu" in resources and "gpu" not in resources, f"{rule}: {resources}"
        planned = [
            m.groups()
            for chunk in chunks
            for m in [re.search(r"wildcards: dataset=([\w.-]+), pair=([\w.-]+)(?:, confidence_protocol=(\w+))?", chunk)]
            if m
        ]
        assert len(planned) == len(chunks), f"{rule}: a job without dataset/pair wildcards"
        if rule == "streams":
            # a pair with a fixed validation dataset reads that dataset's zero-shot and debate files too
            for chunk in chunks:
                dataset, pair = re.search(r"wildcards: dataset=([\w.-]+), pair=([\w.-]+)", chunk).groups()
                inputs = re.search(r"input: (.*)", chunk).group(1)
                val = validation[pair].get(dataset)
                assert val == f"{dataset}_dev", (dataset, pair)
                if val:
                    assert f"debate/{val}/{pair}/turns.parquet" in inputs and f"zero_shot/{val}/" in inputs
        if rule == "search_protocol":
            assert len(chunks) == 90
            assert set(planned) == {(d, p, c) for d, p in pairs for c in searched}
        else:
            assert len(chunks) == len(pairs), f"{rule}: {len(chunks)} jobs"
            assert {(d, p) for d, p, _ in planned} == pairs, rule
    assert len(blocks.get("summarize_confidence", [])) == 1


def test_udpo_homogeneous_ensembles_are_five_copies_of_each_model():
    """Table 4 (App. C.1): per model, MAD on its five zero-shot samples on the three datasets and each
    method's five trained agents on GSM8K, every seat on that model; each run trains five seats (the
    agent and four copies with its settings) and names the debate its agents are evaluated on."""
    cfg = _load("udpo_homogeneous")
    protocols, runs, agents = _protocols(cfg), cfg["training"]["runs"], cfg["agents"]
    assert len(runs) == 15 and cfg["zero_shot"]["samples"] == 5
    for base in ("llama4", "qwen3", "gemma3n", "mixtral", "phi4"):
        assert _participants(cfg, protocols[f"mad_{base}"]) == [base] * 5
        assert _protocol_datasets(cfg, protocols[f"mad_{base}"]) == ["gsm8k", "truthfulqa", "commonsense_qa"]
        assert cfg["models"][agents[base]["model"]].get("paper_backbone")
        for method in ("udpo", "mappo", "rmaac"):
            run = runs[f"{method}_{base}"]
            assert run["method"] == method and run["protocol"] == f"{method}_{base}"
            seats = run["participants"]
            assert len(set(seats)) == 5 and seats[0] == base
            for seat in seats:  # the copies are the agent: same model, sampling and prompt
                assert {k: v for k, v in agents[seat].items() if k != "samples"} == {
                    k: v for k, v in agents[base].items() if k != "samples"
                }, seat
            trained = _participants(cfg, protocols[f"{method}_{base}"])
            assert len(trained) == 5 and protocols[f"{method}_{base}"]["datasets"] == ["gsm8k"]
            for agent, seat in zip(trained, seats):
                assert cfg["models"][agents[agent]["model"]]["source"] == f"trained:{method}_{base}/{seat}", agent


def test_udpo_attack_qwen_compromises_one_of_five_qwen_agents():
    """Table 7 (App. C.3): five Qwen3 agents, the last one the adversarial twin of its seat, natural and
    attacked, untrained on GSM8K and TruthfulQA and each method's trained agents on GSM8K."""
    cfg = _load("udpo_attack_qwen")
    protocols, agents = _protocols(cfg), cfg["agents"]
    assert set(cfg["datasets"]) - {"gsm8k_train"} == {"gsm8k", "truthfulqa"}
    pairs = {
        "mad_qwen3": "attack_qwen3_m1",
        **{f"{m}_qwen3": f"{m}_attack_qwen3_m1" for m in ("udpo", "mappo", "rmaac")},
    }
    for natural, attacked in pairs.items():
        base, seats = _participants(cfg, protocols[natural]), _participants(cfg, protocols[attacked])
        assert len(seats) == 5 and _adversarial(cfg, seats) == [False] * 4 + [True], attacked
        assert seats[:4] == base[:4] and agents[seats[4]]["model"] == agents[base[4]]["model"], attacked
        assert {agents[a]["model"] for a in seats} <= {m for m in cfg["models"] if m.startswith("qwen3-8b")}
        assert protocols[attacked].get("datasets") == protocols[natural].get("datasets")
    for method in ("udpo", "mappo", "rmaac"):
        assert cfg["training"]["runs"][f"{method}_qwen3"]["protocol"] == f"{method}_qwen3"


def test_a_laptop_profile_warns_about_a_plan_no_node_holds_and_runs_on(tmp_path):
    """The local profile names no GPU type: nothing is submitted, so an unfit plan is a warning there."""
    path = _merged_copies(tmp_path)
    proc = snakemake(
        tmp_path / "work", "-n", "--profile", str(REPO_ROOT / "profiles/local"), "--configfile", str(path), check=False
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    warned = set(
        re.findall(r"GPU plan \(for h800 GPUs; this profile names none\): debate \S+?/gsm8k/(\w+) needs", output)
    )
    assert warned == MERGED_UNFIT
