"""Confidence protocols (Elahi & Di Eugenio, "Multiagent Protocols with Aggregated Confidence Signals"): models and pairs (§4, App. Table 3), datasets and splits (§4, App. A.2 Table 2), the debate
(§3), the estimators (§3.2, §4 implementation notes), calibrators (§3.3, Table 1's caption), the
TPE search (§3.1, §3.4) and the reporting protocol (§4.1: 5 runs, t-test at P < 0.05).

Not paper settings ([CHOICE]s; the config header gives them): checkpoint
versions, the answer temperature, top-p and token budgets, the TPE trial count, patience and
ranges beyond the paper's bounds, the ECE bin count, the one-sided paired form of the t-test."""

from __future__ import annotations

import re

from debatelab.data.registry import BENCHMARKS, MMLU_COLLEGE_SUBJECTS, MMLU_SUBJECTS

from . import Check, Setting

_T2 = "App. A.2 (Table 2)"
_T3 = "App. Table 3"

# The paper's backbones (§4: "all instruction-tuned variants"), as the agent that stands for each,
# and what that agent's checkpoint must be: family and size of the paper's name, an instruct release.
BACKBONES = {
    "llama3.2-3b": ("Llama-3.2-3B", r"meta-llama/llama-3\.2-3b-instruct"),
    "llama3.1-8b": ("Llama-3.1-8B", r"meta-llama/(meta-)?llama-3\.1-8b-instruct"),
    "mistral-7b": ("Mistral-7B", r"mistralai/mistral-7b-instruct"),
    "ministral-8b": ("Ministral-8B", r"mistralai/ministral-8b-instruct"),
    "mistral-nemo": ("Mistral(Nemo-8B)", r"nemo.*8b.*instruct|8b.*nemo.*instruct"),  # Table 3 only
    "phi3-medium": ("Phi-3-Medium-14B", r"microsoft/phi-3-medium-.*instruct"),
    "phi4-mini": ("Phi-4-Mini-3.8B", r"microsoft/phi-4-mini-instruct"),
    "phi4": ("Phi-4-14B", r"microsoft/phi-4(@.*)?$"),  # phi-4 ships instruction-tuned only
    "gemma2-9b": ("Gemma-2-9B", r"google/gemma-2-9b-it"),
    "gemma3-4b": ("Gemma-3-4B", r"google/gemma-3-4b-it"),
    "gemma3-12b": ("Gemma-3-12B", r"google/gemma-3-12b-it"),
    "qwen2.5-7b": ("Qwen2.5-7B", r"qwen/qwen2\.5-7b-instruct"),
    "qwen2.5-14b": ("Qwen2.5-14B", r"qwen/qwen2\.5-14b-instruct"),
    "qwen2.5-32b": ("Qwen2.5-32B", r"qwen/qwen2\.5-32b-instruct"),
    "qwen3-4b": ("Qwen3-4B", r"qwen/qwen3-4b(?!-base)"),  # Qwen3-4B's post-trained releases
}

# App. Table 3's pairs per benchmark, (M1, M2) in the table's order; the protocol and the calibration
# pair are named "M1__M2".
PAIRS = {
    "mmlu_college": [
        ("llama3.2-3b", "mistral-7b"),
        ("llama3.2-3b", "gemma3-4b"),
        ("gemma2-9b", "gemma3-12b"),
        ("mistral-7b", "mistral-nemo"),
        ("llama3.1-8b", "gemma3-12b"),
        ("phi4-mini", "qwen3-4b"),
    ],
    "ezstance": [
        ("llama3.1-8b", "phi3-medium"),
        ("mistral-7b", "gemma2-9b"),
        ("phi4-mini", "gemma3-4b"),
        ("llama3.2-3b", "qwen2.5-14b"),
        ("ministral-8b", "qwen2.5-32b"),
        ("gemma2-9b", "gemma3-12b"),
    ],
    "boolq": [
        ("llama3.1-8b", "gemma2-9b"),
        ("ministral-8b", "phi3-medium"),
        ("phi4-mini", "gemma3-12b"),
        ("mistral-7b", "qwen2.5-7b"),
        ("llama3.2-3b", "gemma3-4b"),
        ("gemma2-9b", "gemma3-4b"),
    ],
    "hateval": [
        ("gemma2-9b", "gemma3-4b"),
        ("llama3.1-8b", "gemma3-4b"),
        ("llama3.2-3b", "qwen2.5-7b"),
        ("gemma3-12b", "qwen2.5-32b"),
        ("phi3-medium", "phi4-mini"),
        ("ministral-8b", "phi4-mini"),
    ],
    "vast": [
        ("mistral-7b", "gemma3-12b"),
        ("qwen2.5-14b", "qwen2.5-32b"),
        ("llama3.2-3b", "llama3.1-8b"),
        ("phi4-mini", "llama3.2-3b"),
        ("phi3-medium", "gemma3-4b"),
        ("mistral-7b", "ministral-8b"),
    ],
}
DATASETS = tuple(PAIRS)


def _pair(m1: str, m2: str) -> str:
    return f"{m1}__{m2}"


def _pair_datasets() -> dict[str, set[str]]:
    """Each Table 3 pair -> the benchmarks it is listed on (three pairs appear on two)."""
    out: dict[str, set[str]] = {}
    for dataset, pairs in PAIRS.items():
        for m1, m2 in pairs:
            out.setdefault(_pair(m1, m2), set()).add(dataset)
    return out


PAIR_DATASETS = _pair_datasets()


def same_set(items) -> Check:
    items = frozenset(items)
    return Check(
        lambda v: isinstance(v, (list, tuple)) and len(v) == len(set(v)) and set(v) == items, f"the set {sorted(items)}"
    )


def checkpoint(backbone: str, pattern: str) -> Check:
    return Check(
        lambda v: isinstance(v, str) and re.search(pattern, v.lower()) is not None,
        f"an instruct checkpoint of {backbone} (/{pattern}/)",
    )


def _cut(exp, entry: str):
    """How the dataset entry's split is read: [base split, size, seed, sample|rest] for a split the
    registry cuts at random, else [the source split]."""
    bench = BENCHMARKS[exp.benchmark_of(entry)]
    split = bench.aliases.get(exp.datasets[entry]["split"], exp.datasets[entry]["split"])
    if split in bench.derived:
        d = bench.derived[split]
        return [d.base, d.size, d.seed, d.part]
    return [split]


# the MMLU subjects each registered MMLU benchmark reads
BENCHMARK_SUBJECTS = {"mmlu_college": MMLU_COLLEGE_SUBJECTS, "mmlu": MMLU_SUBJECTS}


def _checkpoint_of(exp, agent):
    return exp.models[exp.agents[agent]["model"]]["source"] if agent in exp.agents else None


def _protocol(exp, name, key):
    """protocols.<name>.<key> as `resolve` gives it; a derived path because `resolve` splits a protocol
    name at its dots ("llama3.2-3b__gemma3-4b")."""
    if name not in exp.protocols:
        return None
    spec = {
        **exp.protocols[name],
        "participants": exp.protocol_participants(name),
        "datasets": exp.protocol_datasets(name),
    }
    return spec.get(key)


PROTOCOL_KEYS = (
    "participants",
    "datasets",
    "kind",
    "rounds",
    "template",
    "peer_content",
    "skip_if_unanimous",
    "confidence",
)

DERIVED = {
    **{
        f"protocol.{pair}.{key}": (lambda exp, pair=pair, key=key: _protocol(exp, pair, key))
        for pair in PAIR_DATASETS
        for key in PROTOCOL_KEYS
    },
    **{f"checkpoint.{agent}": (lambda exp, agent=agent: _checkpoint_of(exp, agent)) for agent in BACKBONES},
    **{
        f"split_cut.{entry}": (lambda exp, entry=entry: _cut(exp, entry) if entry in exp.datasets else None)
        for entry in ("boolq", "boolq_dev", "hateval", "hateval_dev")
    },
    # model pairs evaluated on each benchmark (their calibration pairs)
    **{
        f"pairs_on.{d}": (
            lambda exp, d=d: sum(
                d in (spec.get("datasets") or exp.protocol_datasets(spec["debate"])) for spec in exp.pairs.values()
            )
        )
        for d in DATASETS
    },
    "mmlu_college.subjects": lambda exp: sorted(BENCHMARK_SUBJECTS.get(exp.benchmark_of("mmlu_college"), ())),
    "zero_shot.samples_per_agent": lambda exp: sorted({exp.agent_samples(a) for a in exp.agents}),
    "protocol_search.early_stopping": lambda exp: exp.search["patience"] < exp.search["trials"],
}


_DATASETS = [
    *[
        Setting(f"datasets.{d}.split", "test", f"{_T2}: results on the test split only")
        for d in ("vast", "ezstance", "mmlu_college")
    ],
    *[
        Setting(f"datasets.{d}_dev.benchmark", d, f"{_T2}: a held-out validation split of each benchmark")
        for d in DATASETS
    ],
    *[
        Setting(
            f"datasets.{d}_dev.split",
            "validation",
            f"{_T2}: the benchmark's dev split (sizes from undescribed filtering)",
        )
        for d in ("vast", "ezstance")
    ],
    Setting(
        "datasets.mmlu_college_dev.split",
        "validation",
        f"{_T2}: MMLU's validation split (195 / 1,984 match no MMLU split)",
    ),
    Setting(
        "derived.split_cut.boolq_dev",
        ["validation", 1000, 42, "sample"],
        f"{_T2} caption: 1,000 random items of BoolQ's labelled 'test' (HF validation), random_state=42",
    ),
    Setting("derived.split_cut.boolq", ["validation", 1000, 42, "rest"], f"{_T2}: test = the other 2,270"),
    Setting(
        "derived.split_cut.hateval_dev",
        ["test", 1000, 42, "sample"],
        f"{_T2} caption: HatEval has no val set; 1,000 random test items, random_state=42",
    ),
    Setting("derived.split_cut.hateval", ["test", 1000, 42, "rest"], f"{_T2} caption: test = the rest"),
    Setting(
        "derived.mmlu_college.subjects",
        sorted(s for s in MMLU_SUBJECTS if s.startswith("college_")),
        "§4, App. A.2: only MMLU's college sections",
    ),
]

_MODELS = [
    Setting(f"derived.checkpoint.{agent}", checkpoint(name, pattern), f"§4 / {_T3}: {name}, instruction-tuned")
    for agent, (name, pattern) in BACKBONES.items()
]

_DEBATE = [
    *[
        row
        for pair, datasets in PAIR_DATASETS.items()
        for m1, m2 in [pair.split("__")]
        for row in (
            Setting(
                f"derived.protocol.{pair}.participants",
                [m1, m2],
                f"{_T3}: pair {BACKBONES[m1][0]} / {BACKBONES[m2][0]}",
            ),
            Setting(
                f"derived.protocol.{pair}.datasets",
                same_set({*datasets, *(f"{d}_dev" for d in datasets)}),
                f"{_T3}: its benchmarks; §3.4: stream-1 calibrators and θ are fitted on val, so val is debated too",
            ),
            Setting(
                f"derived.protocol.{pair}.kind", "all_to_all", "§3: one simultaneous exchange between the two agents"
            ),
            Setting(f"derived.protocol.{pair}.rounds", 1, "§3: one round of debate (two streams per agent)"),
            Setting(
                f"derived.protocol.{pair}.template",
                "pairwise",
                "§3, App. E: own and peer's zero-shot answer and CoT in one prompt",
            ),
            Setting(
                f"derived.protocol.{pair}.peer_content", "full", "§3: the peer's zero-shot chain of thought is shown"
            ),
            Setting(
                f"derived.protocol.{pair}.skip_if_unanimous",
                False,
                "§3: MAD debates every input (MAD-D is read from it)",
            ),
            Setting(
                f"derived.protocol.{pair}.confidence",
                ["verbal", "seqprob"],
                "§3.2: both estimators on the debate stream",
            ),
            Setting(f"calibration.pairs.{pair}.agents", [m1, m2], f"{_T3}: M1, M2"),
            Setting(f"calibration.pairs.{pair}.debate", pair, "§3: the pair's own MAD round gives stream 1"),
            Setting(f"calibration.pairs.{pair}.datasets", same_set(datasets), f"{_T3}: the benchmarks it is paired on"),
            Setting(
                f"calibration.pairs.{pair}.validation",
                {d: f"{d}_dev" for d in datasets},
                f"{_T2}: calibrators and θ fitted on the validation split",
            ),
        )
    ],
    *[Setting(f"derived.pairs_on.{d}", 6, f"§4.1, {_T3}: six pairs per benchmark") for d in DATASETS],
]

_ESTIMATION = [
    Setting("zero_shot.estimators", ["verbal", "seqprob"], "§3.2: self-report and sequence probability"),
    Setting(
        "derived.zero_shot.samples_per_agent", [3], "§4 implementation notes: self-consistency, three prompts per model"
    ),
    Setting("zero_shot.verbal_samples", 3, "§3.2: self-report averaged over three repetitions"),
    Setting("zero_shot.verbal_temperature", 0.3, "§3.2: self-report at temperature 0.3"),
    Setting("zero_shot.seqprob_target", "answer", "§3.2: C(x, ŷ) scores the answer ŷ"),
]

_CALIBRATION = [
    Setting("calibration.estimators", ["verbal", "seqprob"], "§3.2, Table 1: both estimators"),
    Setting(
        "calibration.calibrators", ["raw", "beta", "polynomial", "isotonic"], "§3.3, Fig. 1: raw, Beta, cubic, isotonic"
    ),
    Setting("calibration.report_calibrator", "beta", "Table 1 caption: Beta as the default calibration"),
    Setting("calibration.runs", 5, "§4.1: 5 runs per pair for the t-test"),
    Setting(
        "calibration.resample",
        Check(lambda v: v == "regenerate", "'regenerate': new generations per run on the fixed splits"),
        "§4.1, App. A.1: the 5 runs are counted in the 18 GPU-days, so each re-generates; App. A.2: fixed splits",
    ),
    Setting("calibration.ece_weighting", "uniform", "§2.1: ECE 'the mean over n confidence bins' of |acc − conf|"),
]

_SEARCH = [
    Setting("protocol_search.protocols", ["wsv", "cga", "hid"], "§3.1: WSV, CGA, HID"),
    Setting("protocol_search.objective", "nll", "§3.4: NLL as the performance term"),
    Setting("protocol_search.lambda_ece", 0.1, "§3.4: λ_ECE = 0.1"),
    Setting("protocol_search.lambda_anchor", 0.1, "§3.4: λ_anchor = 0.1"),
    Setting("derived.protocol_search.early_stopping", True, "§3.4 fn. 4: Optuna TPE with early stopping"),
    Setting(
        "protocol_search.ranges.w",
        Check(lambda v: v is not None and 0 <= v[0] < v[1], "w in [>= 0, ...]"),
        "§3.1: w_{i,s} >= 0",
    ),
    Setting(
        "protocol_search.ranges.delta",
        Check(lambda v: v is not None and 0 <= v[0] < v[1] <= 1, "within [0, 1]"),
        "§3.1: δ_i is a threshold on a confidence",
    ),
    Setting(
        "protocol_search.wsv_softmax_support",
        "present",
        "§3.1: scores for 'every candidate label that appears among the four predictions', softmax over them",
    ),
    Setting("protocol_search.alpha", 0.05, "§4.1: t-test, P < 0.05"),
]

TABLES = {
    "confidence": [*_DATASETS, *_MODELS, *_DEBATE, *_ESTIMATION, *_CALIBRATION, *_SEARCH],
}

DECLARED = {
    "confidence": {
        "calibration.resample",
        "calibration.ece_weighting",
        "protocol_search.wsv_softmax_support",
        "derived.split_cut.hateval*",
        "derived.checkpoint.mistral-nemo",
    },
}
