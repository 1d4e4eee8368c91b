"""SVR-MAD (Jiang et al., "Bayesian-Inspired, Posterior-Guided Multi-Agent Debate"): Table 1's
two LLMs (GPT-OSS-120B, DeepSeek-V3.1) on IMO-AnswerBench and filtered HLE (§5, App. A "LLM settings",
"Dataset pre-processing"), the MAD setting (§5), the baselines' settings (App. A "GroupDebate",
"S2-MAD", "SID-ET") and SVR-MAD's hyperparameters (Algorithm 1, App. A "SVR-MAD").

Not in the table because the paper does not give them (so they are [CHOICE]s in the config): the
prior SVR-MAD's first receivers use, repeats of a challenger, tie-breaks outside SVR-MAD's fallback,
SID-ET's signal agent, GroupDebate's cross-group NComm count, S2-MAD without grouping. Not config
keys, so not here either: B_max = S(k + m) (built into the svr_mad protocol), HLE's text-only /
non-math / multiple-choice filter (the loader's, tests/test_data.py), GPT-OSS's "medium" reasoning
effort (its chat template's default; the agent sends no system prompt of ours)."""

from __future__ import annotations

from . import Check, Setting

GPT_OSS = "openai/gpt-oss-120b"
DEEPSEEK = "deepseek-ai/DeepSeek-V3.1"
BOTH = ["imo_answerbench", "hle"]

# Table 1's rows per LLM: protocol -> (its Table 1 method, the datasets it runs on)
GPT_PROTOCOLS = {
    "self_consistency": ("self_consistency", BOTH),
    "group_debate": ("group_debate", BOTH),
    "sid_et": ("sid_et", ["imo_answerbench"]),
    "sid_et_r70": ("sid_et", ["hle"]),
    "s2_mad": ("s2_mad", BOTH),
    "svr_mad": ("svr_mad", BOTH),
}
DEEPSEEK_PROTOCOLS = {
    "self_consistency_deepseek": ("self_consistency", BOTH),
    "group_debate_deepseek": ("group_debate", BOTH),
    "sid_et_r50_deepseek": ("sid_et", ["imo_answerbench"]),
    "sid_et_r60_deepseek": ("sid_et", ["hle"]),
    "s2_mad_deepseek": ("s2_mad", BOTH),
    "svr_mad_deepseek": ("svr_mad", BOTH),
}


def _seat_models(exp, protocol):
    """The model each seat of the protocol calls, as a Hugging Face repo id: an OpenAI-served agent's
    served model, else its model's `hf:` source."""
    seats = []
    for agent in exp.protocol_participants(protocol):
        spec = exp.agent_settings(agent)
        if spec["backend"] == "openai":
            seats.append(spec["backend_options"].get("served_model_name"))
        else:
            seats.append(exp.models[spec["model"]]["source"].removeprefix("hf:"))
    return seats


def _top_k(exp, agent):
    """The top-k cut the agent samples with (None: none): an OpenAI-served agent's `extra_body.top_k`
    (its server applies it), else a `top_k` of the agent's own (the config path is absent when the
    schema has no such key, and an absent path cannot be declared, hence this derived value)."""
    spec = exp.agent_settings(agent)
    if spec["backend"] == "openai":
        return (spec["backend_options"].get("extra_body") or {}).get("top_k")
    return spec.get("top_k")


DERIVED = {
    **{f"{p}.seat_models": (lambda exp, p=p: _seat_models(exp, p)) for p in (*GPT_PROTOCOLS, *DEEPSEEK_PROTOCOLS)},
    **{f"{a}.top_k": (lambda exp, a=a: _top_k(exp, a)) for a in ("gptoss", "deepseek")},
}


def _same_set(datasets) -> Check:
    """The datasets in any order (the config's `datasets` order is not a setting)."""
    return Check(lambda v: isinstance(v, list) and sorted(v) == sorted(datasets), f"{sorted(datasets)} in any order")


_MAD = '§5 "MAD setting"'
_LLM = 'App. A "LLM settings"'


def _protocol_rows(protocols, model, llm, svr_sc, skip_rates):
    """Every Table 1 row of one LLM; `svr_sc` is its S = C, `skip_rates` SID-ET's rate per dataset."""
    rows = []
    for name, (kind, datasets) in protocols.items():
        rows += [
            Setting(f"protocols.{name}.kind", kind, '§5 "Baselines" / Table 1'),
            Setting(
                f"protocols.{name}.datasets",
                _same_set(datasets),
                "Table 1: every method on IMO-AnswerBench and HLE"
                + (" (SID-ET's skip rate is tuned per <LLM, dataset>, App. A)" if kind == "sid_et" else ""),
            ),
            Setting(
                f"derived.{name}.seat_models",
                [model] * 6,
                f"{_MAD}: 6 agents per problem; §5: {llm}, one model sampled six times",
            ),
            Setting(f"protocols.{name}.threads", 1, "Table 1: one debate per question (single numbers, no seeds)"),
        ]
        if kind == "self_consistency":
            rows.append(Setting(f"protocols.{name}.final", "vote", '§5 "Baselines": majority vote without debate'))
            continue
        rows.append(
            Setting(
                f"protocols.{name}.skip_if_unanimous",
                True,
                '§5 / App. A "Dataset pre-processing": questions with a unanimous pre-debate answer are skipped',
            )
        )
        if kind in ("group_debate", "sid_et", "s2_mad"):
            rows += [
                Setting(f"protocols.{name}.rounds", 2, f"{_MAD}: at most two debate rounds"),
                Setting(
                    f"protocols.{name}.early_stop_agree", 5, f"{_MAD}: stop after round one when >= 5 agents agree"
                ),
                Setting(
                    f"protocols.{name}.template", "du", '§2 "MAD preliminary": Du et al.\'s context and DebateFormat'
                ),
                Setting(
                    f"protocols.{name}.peer_content", "full", '§2 / §5 "Baselines": full peer outputs are exchanged'
                ),
            ]
        if kind == "group_debate":
            rows.append(
                Setting(f"protocols.{name}.group_size", 3, 'App. A "GroupDebate": two groups of three (3-3) in Table 1')
            )
        if kind == "sid_et":
            (dataset,) = datasets
            rows.append(
                Setting(
                    f"protocols.{name}.skip_rate",
                    skip_rates[dataset],
                    f'App. A "SID-ET": selected skip rate {skip_rates[dataset]:.0%} for {llm} on {dataset}',
                )
            )
        if kind == "svr_mad":
            rows += [
                Setting(f"protocols.{name}.challenges", svr_sc, f'App. A "SVR-MAD": S = {svr_sc} for {llm}'),
                Setting(f"protocols.{name}.accept_after", svr_sc, f'App. A "SVR-MAD": C = {svr_sc} for {llm}'),
                Setting(f"protocols.{name}.posterior", "svr", "§4: posterior-dominant rule, SVR = (r - c)/D"),
                Setting(f"protocols.{name}.posterior_threshold", 1.0, 'App. A "SVR-MAD": accept at 100 % SVR (τ)'),
                Setting(f"protocols.{name}.budget_rule", "per_iteration", "Algorithm 1 line 16: B -= S per iteration"),
                Setting(
                    f"protocols.{name}.tie_break",
                    "pre_debate_count",
                    '§4 "Fallback majority-voting": ties broken by the pre-debate majority',
                ),
            ]
    return rows


def _agent_rows(agent):
    rows = []
    for on in ("", "@imo_answerbench", "@hle"):
        rows += [
            Setting(f"agents.{agent}{on}.temperature", 1.0, f"{_LLM}: temperature 1.0"),
            Setting(f"agents.{agent}{on}.top_p", 0.95, f"{_LLM}: top-p 0.95"),
            Setting(f"agents.{agent}{on}.max_tokens", 16384, f"{_LLM}: at most 16,384 output tokens per response"),
        ]
    return rows + [Setting(f"derived.{agent}.top_k", 40, f"{_LLM}: top-k 40")]


TABLES = {
    "svr_mad": [
        Setting("models.gpt-oss-120b.source", f"hf:{GPT_OSS}", '§5 "LLMs and datasets": GPT-OSS-120B'),
        Setting("agents.deepseek.backend_options.served_model_name", DEEPSEEK, '§5 "LLMs and datasets": DeepSeek-V3.1'),
        Setting("datasets.imo_answerbench.split", "test", "§5: IMO-AnswerBench, all 400 problems (one split)"),
        Setting("datasets.imo_answerbench.limit", None, "§5 / App. A Table 2: all problems (297 / 299 non-unanimous)"),
        Setting(
            "datasets.hle.split", "test", "§5: HLE (cais/hle test), filtered to text-only, non-math, multiple choice"
        ),
        Setting("datasets.hle.limit", None, "§5 / App. A Table 2: the whole filtered subset (267 / 276 non-unanimous)"),
        Setting("zero_shot.samples", 6, f"{_MAD}: 6 agents; §5: all methods share the same pre-debate responses"),
        # the conf prior (§3's self-reported confidence) is an LLM response like any other
        Setting("zero_shot.verbal_temperature", 1.0, f"{_LLM}: temperature 1.0 for all settings"),
        Setting("zero_shot.verbal_max_tokens", 16384, f"{_LLM}: at most 16,384 output tokens per response"),
        *_agent_rows("gptoss"),
        *_agent_rows("deepseek"),
        Setting(
            "agents.deepseek.backend_options.extra_body.chat_template_kwargs.thinking",
            True,
            f"{_LLM}: reasoning effort medium for both LLMs (DeepSeek-V3.1's only reasoning switch is thinking mode)",
        ),
        *_protocol_rows(GPT_PROTOCOLS, GPT_OSS, "GPT-OSS-120B", 2, {"imo_answerbench": 0.6, "hle": 0.7}),
        *_protocol_rows(DEEPSEEK_PROTOCOLS, DEEPSEEK, "DeepSeek-V3.1", 3, {"imo_answerbench": 0.5, "hle": 0.6}),
    ],
}

DECLARED = {
    "svr_mad": {"derived.gptoss.top_k", "zero_shot.verbal_temperature", "zero_shot.verbal_max_tokens"},
}
