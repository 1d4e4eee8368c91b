"""UMAD (Qiao et al., "Epistemic Gain, Aleatoric Cost"): training (§4.3, §6 = the paper's
Table 2 and App. D.2; [code] = the authors' released code as the spec reads it) and evaluation (§8,
App. D.2, D.5)."""

from __future__ import annotations

from . import Setting, at_least, runs_rows

MATH_TRAIN = 7500  # MATH train questions (Qiao et al., arXiv:2603.01221 §7)

UMAD_RUNS = ("umad", "ippo", "intrinsic_only", "nll_only", "umad_homo", "ippo_homo")
GRPO_RUNS = ("grpo_a0", "grpo_a1")


def _umad_steps_per_update(exp, run="umad"):
    s = exp.train_settings(run)
    return s["umad"]["questions_per_step"] * s["umad"]["threads"] / s["mini_batch_size"]


def _epochs(exp, run, per_step):
    return exp.train_settings(run)["steps"] * per_step(exp.train_settings(run)) / MATH_TRAIN


DERIVED = {
    # verl's ppo_mini_batch_size counts prompts: 256 questions / 16 per mini-batch = 16 optimizer
    # steps per agent and turn (one PPO epoch)
    **{
        f"{run}.optimizer_steps_per_update": (lambda exp, run=run: _umad_steps_per_update(exp, run))
        for run in UMAD_RUNS
    },
    **{
        f"{run}.epochs": (lambda exp, run=run: round(_epochs(exp, run, lambda s: s["umad"]["questions_per_step"]), 1))
        for run in UMAD_RUNS
    },
    # Single-GRPO pair: 1,024 prompts x n = 5 per step, mini-batch 256 prompts -> 4 optimizer steps
    **{
        f"{run}.optimizer_steps_per_update": (
            lambda exp, run=run: (
                exp.train_settings(run)["dapo"]["prompts_per_step"]
                * exp.train_settings(run)["dapo"]["rollouts_per_prompt"]
                / exp.train_settings(run)["mini_batch_size"]
            )
        )
        for run in GRPO_RUNS
    },
    **{
        f"{run}.epochs": (lambda exp, run=run: round(_epochs(exp, run, lambda s: s["dapo"]["prompts_per_step"]), 0))
        for run in GRPO_RUNS
    },
}

_T2 = "§6 (paper Table 2)"
_COMMON = [
    ("dataset", "math_train", "§7: MATH train, 7,500"),
    ("temperature", 0.8, f"{_T2}: temperature 0.8 in training"),
    ("top_p", 0.95, f"{_T2}: top-p 0.95"),
    ("max_tokens", 2048, "App. D.2: responses of 2,048 tokens"),
    ("vllm_max_model_len", at_least(5120 + 2048), "App. D.2: prompts of 5,120 + responses of 2,048"),
    ("finetuning", "full", "§6: full fine-tuning ([code] lora_rank 0)"),
    ("learning_rate", 1e-6, f"{_T2}: LR 1e-6"),
    ("warmup_steps", 0, "§6: constant, no warm-up [code]"),
    ("lr_schedule", "constant", "§6: constant, no warm-up [code]"),
    ("weight_decay", 0.01, f"{_T2}: weight decay 0.01"),
    ("max_grad_norm", 1.0, f"{_T2}: grad-clip 1.0"),
    ("clip_low", 0.2, f"{_T2}: clip ratio 0.2"),
    ("clip_high", 0.2, f"{_T2}: clip ratio 0.2 (symmetric)"),
    ("epochs", 1, "§4.3 step 7: 1 PPO epoch per batch [code]"),
]
_UMAD = _COMMON + [
    ("umad.kl_coef", 0.001, f"{_T2}: β_KL 0.001"),
    ("method", "umad", "§4.3 Algorithm 2"),
    ("protocol.template", "umad", "§3: the paired debate prompt"),
    ("protocol.mask_peer_boxed", True, "§3: every reply's \\boxed{} masked [code: merge_prompt_response]"),
    ("kl_estimator", "k1", "§4.3 step 7: per-token k1 in the reward [code]"),
    ("umad.kl_mode", "reward", "§4.3 step 7: use_kl_in_reward [code]"),
    ("loss_aggregation", "token_mean", "§4.3 step 7: token-mean [code]"),
    ("overlong_shaping", False, "§4.3: no length shaping (so no overlong key is read: buffer 0)"),
    ("umad.threads", 5, f"{_T2}: G = 5"),
    ("umad.turns", 2, f"{_T2}: T_train = 2"),
    ("umad.questions_per_step", 256, f"{_T2}: train batch 256 questions"),
    ("umad.reward_mode", "team_sum", "§4.1, §4.3 step 3: team reward [code]"),
    ("umad.eu_mode", "sign", "§4.3 step 4: per-thread sign version [code]"),
]


def _ablation(eta, alpha):
    return [("umad.eta", eta, "§4.3 / §5.2 ablations: η"), ("umad.alpha_au", alpha, "§4.3 / §5.2 ablations: α_au")]


_GRPO = [row for row in _COMMON if row[0] != "temperature"] + [
    ("method", "dapo", "§4.3 baselines: single-agent GRPO (the DAPO loop with GRPO's settings)"),
    ("temperature", 0.6, "§4.3 baselines: Single-GRPO temperature 0.6 [code]"),
    ("dapo.kl_coef", 0.001, f"{_T2}: β_KL 0.001"),
    ("dapo.rollouts_per_prompt", 5, "§4.3 baselines: n = 5 [code]"),
    ("dapo.prompts_per_step", 1024, "§4.3 baselines: batch 1,024 [code]"),
    ("dapo.dynamic_sampling", False, "§4.3 baselines: standard GRPO, no filtering"),
    ("kl_estimator", "k3", "§4.3 baselines: KL loss low_var_kl 0.001 [code]"),
    ("overlong_buffer", 0, "§4.3 baselines: standard GRPO, no length shaping"),
]

_EVAL_AGENTS = ("qwen25_3b", "qwen3_4b")
_EVALUATION = [
    Setting("models.qwen2.5-3b-instruct.source", "hf:Qwen/Qwen2.5-3B-Instruct", "§7: A0 = Qwen2.5-3B-Instruct"),
    Setting(
        "models.qwen3-4b-instruct-2507.source", "hf:Qwen/Qwen3-4B-Instruct-2507", "§7: A1 = Qwen3-4B-Instruct-2507"
    ),
    Setting("datasets.math500.split", "test", "§7: MATH500 (500)"),
    Setting("datasets.gsm8k.split", "test", "§7: GSM8K test (1,319)"),
    Setting("datasets.amc23.split", "test", "§7: AMC23 (40)"),
    Setting("datasets.aime24.split", "test", "§7: AIME24 (30)"),
    Setting("datasets.aime25.split", "test", "§7: AIME25 (30)"),
    *[
        Setting(f"agents.{a}.{key}", value, source)
        for a in _EVAL_AGENTS
        for key, value, source in [
            ("temperature", 0.6, "§6, §8: inference temperature 0.6"),
            ("top_p", 0.95, "§8: top-p 0.95"),
            ("max_tokens", 2048, "App. D.2: 2,048-token responses"),
        ]
    ],
    *[
        Setting(f"agents.{a}@{d}.max_tokens", 4096, "App. D.2: AIME responses of 4,096 tokens")
        for a in _EVAL_AGENTS
        for d in ("aime24", "aime25")
    ],
    *[
        Setting(
            f"agents.{a}@{d}.backend_options.max_model_len", at_least(9216 + 4096), "App. D.2: AIME prompts of 9,216"
        )
        for a in _EVAL_AGENTS
        for d in ("aime24", "aime25")
    ],
    Setting("agents.qwen25_3b_t1.temperature", 1.0, "App. D.5: uncertainty analysis at temperature 1.0"),
    Setting("agents.qwen3_4b_t1.temperature", 1.0, "App. D.5: uncertainty analysis at temperature 1.0"),
    Setting("protocols.umad.rounds", 4, "§6: T_test = 5 turns = round 0 + 4 debate rounds"),
    Setting("protocols.umad.template", "umad", "§3: the paired debate prompt"),
    Setting("protocols.umad.mask_peer_boxed", True, "§3: every reply's \\boxed{} masked [code: merge_prompt_response]"),
    Setting("protocols.umad.participants", ["qwen25_3b", "qwen3_4b"], "§7: heterogeneous pair A0, A1"),
    Setting("protocols.umad_homo.participants", ["qwen25_3b", "qwen25_3b"], "§7: Qwen2.5-3B-Instruct x 2"),
    Setting("protocols.umad.threads", 5, "§8: 5 evaluation seeds"),
    Setting("protocols.umad_uq.threads", 16, "§3.2 / App. D.5: K = 16 paths"),
    Setting("evaluation.seeds", 5, "§8: mean ± std over 5 evaluation seeds"),
]

TABLES = {
    "umad": [
        *runs_rows(UMAD_RUNS, _UMAD),
        *runs_rows(["umad", "umad_homo"], _ablation(0.25, 0.25)),
        *runs_rows(["ippo", "ippo_homo"], _ablation(0.0, 0.0)),
        *runs_rows(["intrinsic_only"], _ablation(0.25, 0.0)),
        *runs_rows(["nll_only"], _ablation(0.0, 0.25)),
        *runs_rows(
            ["umad", "ippo", "intrinsic_only", "nll_only"], [("participants", ["qwen25_3b", "qwen3_4b"], "§7: A0, A1")]
        ),
        *runs_rows(GRPO_RUNS, _GRPO),
        *[
            Setting(
                f"derived.{run}.optimizer_steps_per_update",
                256 / 16,
                f"{_T2}: batch 256, mini-batch 16 prompts (verl) -> 16 steps per agent and turn",
            )
            for run in UMAD_RUNS
        ],
        *[Setting(f"derived.{run}.epochs", 2.0, f"{_T2}: 2 epochs over MATH train") for run in UMAD_RUNS],
        *[
            Setting(
                f"derived.{run}.optimizer_steps_per_update",
                1024 / 256,
                "§4.3 baselines: batch 1,024, mini-batch 256 prompts [code]",
            )
            for run in GRPO_RUNS
        ],
        *[Setting(f"derived.{run}.epochs", 15.0, "§4.3 baselines: 15 epochs") for run in GRPO_RUNS],
        *_EVALUATION,
    ],
    "umad_eval": _EVALUATION,
}

DECLARED = {
    "umad": set(),
    "umad_eval": set(),
}
