"""SDRL (Liu et al., "Prepare Reasoning Language Models for Multi-Agent Debate with Self-Debate
Reinforcement Learning"): training (§5.1-§5.2, §6.1.1, App. A.1; D.2 for
Table 5's 125-step run) and evaluation (§6.1.2, §6.4, App. B; Tables 1-6, Fig. 1).

Left out as the paper does not give them: training temperature / top-p,
weight decay, grad clip, the schedule after the warm-up, seeds, prompt length, hardware; and
the evaluation's context window (§6.4 only says N = 7 had to fit it)."""

from __future__ import annotations

from . import Setting, at_least, runs_rows

QWEN25 = "hf:Qwen/Qwen2.5-3B"
QWEN3 = "hf:Qwen/Qwen3-4B-Base"

Q25_RUNS = ("dapo", "sdrl_rand", "sdrl_freq")
Q3_RUNS = ("q3_dapo", "q3_sdrl_rand", "q3_sdrl_freq", "q3_sdrl_freq_125")
RUNS = (*Q25_RUNS, *Q3_RUNS)
DAPO_RUNS = ("dapo", "q3_dapo")
SDRL_RUNS = tuple(r for r in RUNS if r not in DAPO_RUNS)


def _policy_source(exp, run):
    """The base checkpoint a run trains: its policy agent's model's source."""
    agent = exp.training_runs[run]["policy"]
    return exp.config["models"][exp.agents[agent]["model"]]["source"]


def _updates_per_rollout_step(exp, run):
    """Optimizer steps on the first-turn sequences of one rollout step (SDRL adds its debate ones)."""
    s = exp.run_settings(run)
    return s.own.prompts_per_step * s.own.rollouts_per_prompt * s.epochs / s.mini_batch_size


def _own(run: str) -> str:
    """The run's method's settings block (DAPO's keys sit in `sdrl:` on an SDRL run)."""
    return "dapo" if run in DAPO_RUNS else "sdrl"


def _block_rows(runs, rows):
    """`runs_rows` of keys of the runs' method blocks (`dapo.<key>` or `sdrl.<key>`)."""
    return [s for run in runs for s in runs_rows([run], [(f"{_own(run)}.{k}", v, src) for k, v, src in rows])]


def _n7_budget_cut(exp):
    """Every N = 7 agent ("<agent>_n7") replies with fewer tokens than its single-agent twin "<agent>" (§6.4)."""
    pairs = [(a, a.removesuffix("_n7")) for a in exp.agents if a.endswith("_n7")]
    return bool(pairs) and all(
        exp.agent_settings(n7)["max_tokens"] < exp.agent_settings(n5)["max_tokens"] for n7, n5 in pairs
    )


PROMPT_ALLOWANCE = 1024  # the question and Choi's template around the replies


def _debates_fit_window(exp):
    """Every Choi debate's longest round fits the vLLM window: its prompt holds all N replies of the
    round before (round 0: the seats' zero-shot budget), plus ~1k of question and template, plus the
    round's reply (`debate_max_tokens`, else the seat's budget)."""
    window = exp.config["backends"]["vllm"]["max_model_len"]
    fits = []
    for name, options in exp.protocols.items():
        if options["kind"] == "self_consistency":
            continue
        seats = exp.protocol_participants(name)
        first = max(exp.agent_settings(a)["max_tokens"] for a in seats)
        later = options.get("debate_max_tokens") or first
        before = max(first, later) if options.get("rounds", 2) > 1 else first
        fits.append(len(seats) * before + PROMPT_ALLOWANCE + later <= window)
    return bool(fits) and all(fits)


DERIVED = {
    **{f"{run}.policy_source": (lambda exp, run=run: _policy_source(exp, run)) for run in RUNS},
    **{f"{run}.updates_per_rollout_step": (lambda exp, run=run: _updates_per_rollout_step(exp, run)) for run in RUNS},
    **{
        f"{run}.first_turn_updates": (
            lambda exp, run=run: exp.train_settings(run)["steps"] * _updates_per_rollout_step(exp, run)
        )
        for run in RUNS
    },
    "n7_reply_budget_cut": _n7_budget_cut,
    "debates_fit_window": _debates_fit_window,
}

_A1 = "App. A.1"
_DAPO = [
    (
        "reward",
        "dapo_math",
        "§5.1, §6.1.1: +1 correct / -1 otherwise; App. B / verl's DAPO recipe: DAPO's verifier",
    ),
    ("prompts_per_step", 256, "§6.1.1: prompt batch 256"),
    ("rollouts_per_prompt", 8, "§6.1.1: 8 responses per prompt"),
    ("dynamic_sampling", True, "§5.1: DAPO's oversampling, prompts with zero advantage filtered out"),
    ("kl_coef", 0.0, f"{_A1}: KL coefficient 0"),
]
_TRAINING = [
    ("dataset", "dapo_math", "§6.1.1: DAPO-Math-17K"),
    ("finetuning", "full", "§6.1.1, App. A.1: verl's DAPO recipe, no adapter named"),
    ("learning_rate", 1e-6, "§6.1.1: LR 1e-6"),
    ("warmup_steps", 10, "§6.1.1: linear warm-up over the first 10 rollout steps"),
    ("clip_low", 0.2, f"{_A1}: ε_low 0.2"),
    ("clip_high", 0.28, f"{_A1}: ε_high 0.28"),
    ("max_tokens", 8196, f"{_A1}: maximum response length 8,196 (as printed)"),
    ("overlong_buffer", 2048, f"{_A1}: overlong buffer 2,048"),
    ("overlong_penalty", 1.0, f"{_A1}: overlong penalty factor 1"),
    ("mini_batch_size", 128, f"{_A1}: training mini-batch 128 (sequences: 2,048 / 128 = 16 updates)"),
    ("epochs", 1, f"{_A1}: 16 gradient updates per rollout step of 2,048 sequences = one pass"),
    ("loss_aggregation", "token_mean", "§3 Eq. 7: token-level, normalised by Σ|o_i|"),
    ("ratio_level", "token", "§3 Eq. 7: per-token ratio r_{i,t}"),
]
_SDRL = [
    ("sdrl.debate_prompts_per_step", 128, f"{_A1}: 128 prompts per step get a debate pair"),
    ("sdrl.debate_template", "two_turn", "§5.2: the pair serialised into a two-turn conversation (App. C Fig. 2)"),
]

_BENCHMARKS = ("math500", "amc23", "aime24", "aime25")
_DATASETS = [
    *[Setting(f"datasets.{d}.split", "test", "§6.1.2: MATH500, AMC 2023, AIME 2024 / 2025") for d in _BENCHMARKS],
    *[Setting(f"datasets.{d}.limit", None, "§6.1.2: the whole benchmark (500 / 40 / 30 / 30)") for d in _BENCHMARKS],
]


def _agents(names):
    return [
        Setting(f"agents.{a}.{key}", value, source)
        for a in names
        for key, value, source in [
            ("temperature", 1.0, "§6.1.2: inference temperature 1.0"),
            ("top_p", 0.9, "§6.1.2: top-p 0.9"),
        ]
    ]


def _budgets(names):
    """Single agents and N <= 5 seats: the paper's length (evaluation budget unstated; N = 7 is cut,
    `n7_reply_budget_cut`; the N = 5 seats are declared cut to fit the window)."""
    return [
        Setting(
            f"agents.{a}.max_tokens",
            8192,
            "App. A.1's 8,196 (read 8,192); Table 6: wrong answers average up to 7,121 tokens",
        )
        for a in names
    ]


_CHOI = "App. B / C: Choi et al.'s code and math template"


def _mad(name, agent, n=5, rounds=1, kind="all_to_all", final="vote", source="Table 1: decentralized, N = 5, T = 1"):
    return [
        Setting(f"protocols.{name}.kind", kind, source),
        Setting(f"protocols.{name}.template", "choi", _CHOI),
        Setting(f"protocols.{name}.rounds", rounds, source),
        Setting(f"protocols.{name}.participants", [agent] * n, f"{source}; homogeneous copies of one model (§6.1.2)"),
        Setting(
            f"protocols.{name}.final",
            final,
            "§3 Eq. 5: plurality of the last answers" if final == "vote" else f"{_CHOI}: the central agent's answer",
        ),
        # a hub's answer has no ties to break
        *(
            [Setting(f"protocols.{name}.tie_break", "random", f"{_CHOI}: plurality ties broken at random")]
            if final == "vote"
            else []
        ),
        Setting(f"protocols.{name}.threads", 5, "§6.1.2: mean of 5 independent runs"),
    ]


def _maj(name, agent):
    return [
        Setting(f"protocols.{name}.kind", "self_consistency", "Table 1: Maj, the plurality of the round-0 answers"),
        Setting(f"protocols.{name}.participants", [agent] * 5, "Table 1: N = 5"),
        Setting(f"protocols.{name}.tie_break", "random", f"{_CHOI}: plurality ties broken at random"),
        Setting(f"protocols.{name}.threads", 5, "§6.1.2: mean of 5 independent runs"),
    ]


def _ablations(prefix, agent, agent_n5, agent_n7, t4=None):
    """Tables 3 and 4 (and Fig. 1 / Table 6 with `t4`) for one model: `prefix` + the protocol suffix;
    N = 3 seats the single agent (`agent`), N = 5 its "_n5" seats, N = 7 its "_n7" ones."""
    n3 = f"{prefix}mad_n3" if prefix else "decentralized_n3"
    rows = [
        *_mad(n3, agent, n=3, source="Table 3: N = 3, T = 1"),
        Setting(f"protocols.{n3}.debate_max_tokens", 8192, "App. A.1's length for the debate round too"),
        *_mad(f"{prefix}mad_n7" if prefix else "decentralized_n7", agent_n7, n=7, source="Table 3: N = 7, T = 1"),
        *_mad(f"{prefix}sparse", agent_n5, kind="ring", source="Table 4 / §6.4: sparse MAD, N = 5, T = 1"),
        *_mad(
            f"{prefix}centralized",
            agent_n5,
            kind="centralized",
            final="hub",
            source="Table 4 / §6.4: centralized MAD, N = 5, T = 1",
        ),
    ]
    if t4:
        rows += _mad(t4, agent_n5, rounds=4, source="Fig. 1 / Table 6: rounds 1 to 4, N = 5")
    return rows


# Table 1's rows: the agent of each trained checkpoint, and its protocols "<agent>_maj" / "<agent>_mad"
_TABLE1 = ("dapo", "sdrl_rand", "sdrl_freq", "q3_dapo", "q3_sdrl_rand", "q3_sdrl_freq")
_CHECKPOINTS = {
    "qwen2.5-3b-dapo": "dapo",
    "qwen2.5-3b-sdrl-rand": "sdrl_rand",
    "qwen2.5-3b-sdrl-freq": "sdrl_freq",
    "qwen3-4b-base-dapo": "q3_dapo",
    "qwen3-4b-base-sdrl-rand": "q3_sdrl_rand",
    "qwen3-4b-base-sdrl-freq": "q3_sdrl_freq",
    "qwen3-4b-base-sdrl-freq-125": "q3_sdrl_freq_125",
}
# the single agents (Table 2, N = 3) and the N = 5 seats ("<agent>_n5": Tables 1, 4, 5, Fig. 1)
_SDRL_AGENTS = ("base", "dapo", "sdrl_rand", "sdrl_freq", "q3_base", "q3_dapo", "q3_sdrl_rand", "q3_sdrl_freq")
_SDRL_N5_AGENTS = (*(f"{a}_n5" for a in _TABLE1), "base_n5", "q3_sdrl_freq_125_n5")
_SDRL_N7_AGENTS = ("dapo_n7", "sdrl_freq_n7", "q3_dapo_n7", "q3_sdrl_freq_n7")

_EVAL_COMMON = [
    *_DATASETS,
    Setting("derived.n7_reply_budget_cut", True, "§6.4: N = 7's max response tokens reduced to fit the context window"),
    Setting("derived.debates_fit_window", True, "§6.4: the debate sequence kept within the model context window"),
    Setting("zero_shot.samples", at_least(32), "§6.1.2: K = 32 samples (AMC, AIME; K = 4 on MATH500)"),
    Setting("evaluation.seeds", 5, "§6.1.2: mean of 5 independent runs"),
]

TABLES = {
    "sdrl": [
        *runs_rows(RUNS, _TRAINING),
        *_block_rows(RUNS, _DAPO),
        *runs_rows(SDRL_RUNS, [("method", "sdrl", "§5.2 Algorithm 1"), *_SDRL]),
        *runs_rows(DAPO_RUNS, [("method", "dapo", "§6.1.1: the DAPO baseline")]),
        *runs_rows(["sdrl_rand", "q3_sdrl_rand"], [("sdrl.pair_mode", "rand", "§5.2: random pairing (SDRL-rand)")]),
        *runs_rows(
            ["sdrl_freq", "q3_sdrl_freq", "q3_sdrl_freq_125"],
            [("sdrl.pair_mode", "freq", "§5.2: frequency-based pairing (SDRL-freq)")],
        ),
        *runs_rows(["sdrl_rand", "sdrl_freq"], [("sdrl.debate_rollouts", 4, "§6.1.1: n_d = 4 for Qwen2.5-3B")]),
        *runs_rows(
            ["q3_sdrl_rand", "q3_sdrl_freq", "q3_sdrl_freq_125"],
            [("sdrl.debate_rollouts", 8, "§6.1.1: n_d = 8 for Qwen3-4B-Base")],
        ),
        *runs_rows(
            [r for r in RUNS if r != "q3_sdrl_freq_125"], [("steps", 200, f"{_A1}: 200 prompt-generation steps")]
        ),
        *runs_rows(["q3_sdrl_freq_125"], [("steps", 125, "App. D.2 / Table 5: SDRL-freq with 125 steps")]),
        *[Setting(f"derived.{run}.policy_source", QWEN25, "§6.1.1: Qwen2.5-3B (base)") for run in Q25_RUNS],
        *[Setting(f"derived.{run}.policy_source", QWEN3, "§6.1.1: Qwen3-4B-Base") for run in Q3_RUNS],
        *[
            Setting(f"derived.{run}.updates_per_rollout_step", 16, f"{_A1}: 16 gradient updates per rollout step")
            for run in RUNS
        ],
        *[
            Setting(f"derived.{run}.first_turn_updates", 3200, f"{_A1}: 3,200 policy updates for DAPO (200 x 16)")
            for run in RUNS
            if run != "q3_sdrl_freq_125"
        ],
        Setting("derived.q3_sdrl_freq_125.first_turn_updates", 2000, "App. D.2: 125 steps x 16 (A.1)"),
        Setting("datasets.dapo_math.split", "train", "§6.1.1: DAPO-Math-17K"),
        Setting("models.qwen2.5-3b.source", QWEN25, "§6.1.1: Qwen2.5-3B"),
        Setting("models.qwen3-4b-base.source", QWEN3, "§6.1.1: Qwen3-4B-Base"),
        *[
            Setting(
                f"models.{m}.source",
                f"trained:{run}",
                "Tables 1-5: the DAPO / SDRL rows evaluate the trained checkpoints",
            )
            for m, run in _CHECKPOINTS.items()
        ],
        *_agents((*_SDRL_AGENTS, *_SDRL_N5_AGENTS, *_SDRL_N7_AGENTS)),
        *_budgets((*_SDRL_AGENTS, *_SDRL_N5_AGENTS)),
        *[row for a in _TABLE1 for row in _maj(f"{a}_maj", f"{a}_n5") + _mad(f"{a}_mad", f"{a}_n5")],
        *_mad("q3_sdrl_freq_125_mad", "q3_sdrl_freq_125_n5", source="Table 5: SDRL-125, decentralized, N = 5, T = 1"),
        *_ablations("dapo_", "dapo", "dapo_n5", "dapo_n7"),
        *_ablations("sdrl_freq_", "sdrl_freq", "sdrl_freq_n5", "sdrl_freq_n7"),
        *_ablations("q3_dapo_", "q3_dapo", "q3_dapo_n5", "q3_dapo_n7", t4="q3_dapo_mad_t4"),
        *_ablations("q3_sdrl_freq_", "q3_sdrl_freq", "q3_sdrl_freq_n5", "q3_sdrl_freq_n7", t4="q3_sdrl_freq_mad_t4"),
        *_EVAL_COMMON,
    ],
    "sdrl_eval": [
        Setting("models.qwen3-4b-base.source", QWEN3, "§6.1.1: Qwen3-4B-Base"),
        *_agents(("qwen3_4b_base", "qwen3_4b_base_n5", "qwen3_4b_base_n7")),
        *_budgets(("qwen3_4b_base", "qwen3_4b_base_n5")),
        *_maj("self_consistency", "qwen3_4b_base_n5"),
        *_mad("decentralized", "qwen3_4b_base_n5"),
        *_ablations("", "qwen3_4b_base", "qwen3_4b_base_n5", "qwen3_4b_base_n7", t4="decentralized_t4"),
        *_EVAL_COMMON,
    ],
}

DECLARED = {
    "sdrl": {"training.*.max_tokens", "agents.*.max_tokens", "protocols.*.debate_max_tokens", "protocols.*.tie_break"},
    "sdrl_eval": {"agents.*.max_tokens", "protocols.*.debate_max_tokens", "protocols.*.tie_break"},
}
