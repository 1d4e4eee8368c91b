"""UDPO (Tang et al., "The Value of Variance"): data and models (§7), the debate (§3,
Algorithm A), the training (App. A.1, Eqs 10-15), the baselines (§8)."""

from __future__ import annotations

import math

from . import Check, Setting, runs_rows

#: Training questions per training dataset: openai/gsm8k main train, TruthfulQA's seeded train half
#: (408 of 817; the registry's `train` split), tau/commonsense_qa train.
TRAIN_QUESTIONS = {"gsm8k_train": 7473, "truthfulqa_train": 408, "commonsense_qa_train": 9741}
#: The run-name suffix of each dataset's runs and the dataset they train on (§5.1: every method is
#: trained and reported on each of Section 3's datasets, Tables 1, 2, 3, 5).
SUFFIXES = {"": "gsm8k_train", "_tqa": "truthfulqa_train", "_csqa": "commonsense_qa_train"}
UDPO_RUNS = tuple(f"{r}{x}" for x in SUFFIXES for r in ("udpo", "udpo_wo_intra", "udpo_wo_inter", "udpo_wo_sys"))
BASELINE_RUNS = tuple(f"{r}{x}" for x in SUFFIXES for r in ("mappo", "rmaac"))
FIVE = ["llama4", "qwen3", "gemma3n", "mixtral", "phi4"]


def _runs(base: str) -> list[str]:
    """`base` on every dataset: udpo, udpo_tqa, udpo_csqa."""
    return [f"{base}{x}" for x in SUFFIXES]


def _trains_on(run: str) -> str:
    return SUFFIXES["_" + run.rsplit("_", 1)[1] if run.endswith(("_tqa", "_csqa")) else ""]


def _epochs(exp, run):
    """Passes over the training questions (UDPO: the warm-up's held-out share is not trained on)."""
    s = exp.train_settings(run)
    total = TRAIN_QUESTIONS[exp.training_runs[run]["dataset"]]
    if s["method"] == "udpo":
        per_step, questions = (
            s["udpo"]["questions_per_step"],
            total - math.ceil(s["udpo"]["warmup_fraction"] * total),
        )
    else:
        per_step, questions = s["mappo"]["questions_per_step"], total
    return round(s["steps"] * per_step / questions, 1)


def _compromised(exp, protocol):
    return sum(bool(exp.agents[a].get("adversarial")) for a in exp.protocol_participants(protocol))


DERIVED = {
    **{f"{run}.epochs": (lambda exp, run=run: _epochs(exp, run)) for run in (*UDPO_RUNS, *BASELINE_RUNS)},
    **{f"attack_m{m}.compromised": (lambda exp, m=m: _compromised(exp, f"attack_m{m}")) for m in (1, 2, 3)},
}

_A1 = "App. A.1"
_TRAINING = [
    ("participants", FIVE, "§7: the heterogeneous ensemble, one model per agent"),
    ("learning_rate", 1e-5, f"{_A1}: AdamW, LR 1e-5"),
    ("warmup_steps", 500, f"{_A1}: linear warm-up 500 steps"),
    ("lr_schedule", "cosine", f"{_A1}: then cosine decay"),
    ("max_grad_norm", 1.0, f"{_A1}: grad-norm clip 1.0"),
]
_UDPO = _TRAINING + [
    ("method", "udpo", "§5.5 Algorithm 1"),
    ("udpo.rounds", 5, "§7: T = 5 (main setting)"),
    ("udpo.questions_per_step", 32, f"{_A1}: 32 trajectories per update"),
    ("udpo.kappa", 1.5, f"{_A1}: κ = 1.5"),
    ("udpo.lambda_base", 1.0, f"{_A1}: λ_base = 1"),
    ("udpo.eta_base", 0.01, f"{_A1}: η_base = 0.01"),
    ("udpo.replay", True, "§5.4 / App. A.3: uncertainty-driven replay"),
    ("ratio_level", "trajectory", "§5.3 Eq 6: ρ = exp(log π_θ(τ) − log π_ref(τ)) over the agent's tokens of τ"),
]
_BASELINES = _TRAINING + [
    ("mappo.rounds", 5, "§8: Algorithm A debates, T = 5"),
    ("mappo.questions_per_step", 32, "§8: UDPO's batch"),
]

TABLES = {
    "udpo": [
        *runs_rows(UDPO_RUNS, _UDPO),
        *runs_rows(_runs("udpo"), [("udpo.ablate", [], "Table 2: full UDPO")]),
        *runs_rows(_runs("udpo_wo_intra"), [("udpo.ablate", ["intra"], "Table 2: w/o intra")]),
        *runs_rows(_runs("udpo_wo_inter"), [("udpo.ablate", ["inter"], "Table 2: w/o inter")]),
        *runs_rows(_runs("udpo_wo_sys"), [("udpo.ablate", ["sys"], "Table 2: w/o sys")]),
        *runs_rows(_runs("mappo"), [("method", "mappo", "§8: MAPPO")]),
        *runs_rows(_runs("rmaac"), [("method", "rmaac", "§8: RMAAC")]),
        # §5.1 "We use the same datasets and LLMs as Section 3", and Tables 1, 2, 3, 5 report every trained
        # method on GSM8K, TruthfulQA and CSQA: each dataset's runs train on its training questions
        *[
            Setting(f"training.{run}.dataset", _trains_on(run), "§5.1 / Tables 1-3, 5: trained on each dataset")
            for run in (*UDPO_RUNS, *BASELINE_RUNS)
        ],
        Setting("datasets.gsm8k_train.split", "train", "§7: GSM8K train (7,473)"),
        Setting("datasets.commonsense_qa_train.split", "train", "§7: CommonsenseQA train (9,741)"),
        *runs_rows(BASELINE_RUNS, _BASELINES),
        *[Setting(f"derived.{run}.epochs", 10.0, f"{_A1}: 10 epochs") for run in (*UDPO_RUNS, *BASELINE_RUNS)],
        Setting("datasets.gsm8k.split", "test", "§7: GSM8K test (1,319)"),
        Setting("datasets.commonsense_qa.split", "validation", "§7: CommonsenseQA validation (test has no labels)"),
        Setting("datasets.truthfulqa.split", "validation", "§7: TruthfulQA, validation split only (817)"),
        # the paper's only TruthfulQA split: a seeded half trains the TruthfulQA runs (declared: the other half is evaluated)
        Setting("datasets.truthfulqa_train.split", "train", "§5.1: TruthfulQA's runs train on TruthfulQA"),
        Setting(
            "models.llama-4-scout-17b-16e-instruct.source",
            Check(lambda v: "Llama-4-Scout-17B-16E" in v, "Llama-4-Scout 17B-16E"),
            "§7",
        ),
        Setting("models.qwen3-8b.source", Check(lambda v: "Qwen3-8B" in v, "Qwen-3-8B"), "§7"),
        Setting("models.gemma-3n-e4b-it.source", Check(lambda v: "gemma-3n-E4B" in v, "Gemma-3n-E4B"), "§7"),
        Setting("models.mixtral-8x7b-instruct-v0.1.source", Check(lambda v: "Mixtral-8x7B" in v, "Mixtral-8x7B"), "§7"),
        Setting("models.phi-4.source", Check(lambda v: "phi-4" in v, "Phi-4 (14B)"), "§7"),
        Setting("debate.participants", FIVE, "§7: N = 5, one model per agent"),
        Setting("protocols.mad_n5.rounds", 5, "§7: T = 5 (Table 1)"),
        Setting(
            "protocols.mad_n5.kind", "all_to_all", "§3 Algorithm A: every agent sees every other's previous answer"
        ),
        Setting("protocols.mad_n5.threads", 1, "§7: one debate per question at evaluation"),
        Setting("protocols.mad_n3.participants", Check(lambda v: len(v) == 3, "N = 3"), "Table 1: N = 3"),
        Setting("protocols.mad_n10.participants", Check(lambda v: len(v) == 10, "N = 10"), "Table 1: N = 10"),
        Setting("protocols.mad_n5_t3.rounds", 3, "Table 5: T = 3"),
        Setting("protocols.mad_n5_t10.rounds", 10, "Table 5: T = 10"),
        *[
            Setting(f"derived.attack_m{m}.compromised", m, f"Table 3: m = {m} of 5 agents compromised")
            for m in (1, 2, 3)
        ],
        Setting("protocols.udpo_n5.rounds", 5, "Table 1: the trained agents debate at T = 5"),
        *[
            Setting(f"protocols.{method}{suffix}_n5_t{t}.rounds", t, f"Table 5: T = {t}")
            for method in ("udpo", "mappo", "rmaac")
            for suffix in ("", "_tqa", "_csqa")
            for t in (3, 10)
        ],
    ],
}

DECLARED = {
    "udpo": {"training.udpo*.ratio_level", "datasets.truthfulqa.split", "training.*_tqa.warmup_steps"},
}
