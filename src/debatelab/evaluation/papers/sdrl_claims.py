"""SDRL's claims (Liu et al., arXiv:2601.22297: sdrl-1 to sdrl-8, each with the section, table or
figure that states it) as `claim_engine.ClaimSpec` rows (`SPECS`), and the functions that extract
each case's data: per question from the debate outcomes and zero-shot samples (paired: two
protocols or policies are read on the same resampled questions), per step from the training
metrics (the tables are `sdrl`'s)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..claim_engine import (
    DIFFERENCE,
    PAIRED_ACCURACY,
    SLOPE,
    Case,
    ClaimSpec,
    For,
    Resampled,
    Rows,
    Shares,
    Untestable,
    evaluate_claims,
    only,
)
from ..claims import Claim
from ..run import ProtocolInfo, RunOutputs
from .sdrl import AVG, decentralized, pick

# --------------------------------------------------------------------------- claims


def _by_question(frame: pd.DataFrame, value: str) -> pd.Series:
    """`value` per (dataset, question_id), the mean over its threads (or agents): the question is the
    unit the claims resample."""
    return frame.groupby(["dataset", "question_id"], sort=False)[value].mean().astype(float)


def _paired_question_difference(a: pd.Series, b: pd.Series, *, one_outcome: bool = False) -> tuple[Shares, list[str]]:
    """mean(a − b) on the questions both have (a, b indexed by (dataset, question_id)), as the mean
    over datasets of each dataset's mean (the tables' "avg"; one dataset: the plain mean), paired
    over questions: a resample draws questions once and reads both sides on them. A resample that
    misses a dataset averages the datasets it drew. With `one_outcome` (each side one 0/1 outcome
    per question) on one dataset it is paired correctness (exact, McNemar). Also the datasets compared."""
    joined = pd.concat({"a": a, "b": b}, axis=1, join="inner").dropna()
    d = (joined["a"] - joined["b"]).to_numpy(float)
    codes, datasets = pd.factorize(joined.index.get_level_values(0))
    k = len(datasets)

    def statistic(index: np.ndarray) -> float:
        sums = np.bincount(codes[index], weights=d[index], minlength=k)
        counts = np.bincount(codes[index], minlength=k)
        drawn = counts > 0
        return float(np.mean(sums[drawn] / counts[drawn]))

    ones = np.ones(len(d))
    a_values, b_values = joined["a"].to_numpy(float), joined["b"].to_numpy(float)
    data = Shares(a_values, ones, b_values, ones, statistic, exact_allowed=one_outcome and k == 1, groups=codes)
    return data, sorted(str(x) for x in datasets)


def _length_gap(turns: pd.DataFrame) -> Resampled:
    """Mean tokens of incorrect responses − mean tokens of correct ones (over responses, as Table 6),
    resampled over questions: each question's responses (all seats and threads) move together; a
    resample without a correct or an incorrect response is dropped."""
    right = turns["correct"].eq(True).to_numpy()
    tokens = turns["completion_tokens"].astype(float).to_numpy()
    codes, _ = pd.factorize(turns["question_id"].astype(str))
    k = int(codes.max()) + 1 if len(codes) else 0
    sums = {
        kind: np.bincount(codes[mask], weights=tokens[mask], minlength=k)
        for kind, mask in (("right", right), ("wrong", ~right))
    }
    counts = {kind: np.bincount(codes[mask], minlength=k) for kind, mask in (("right", right), ("wrong", ~right))}

    def statistic(index: np.ndarray) -> float:
        n_right, n_wrong = counts["right"][index].sum(), counts["wrong"][index].sum()
        if not (n_right and n_wrong):
            return np.nan
        return float(sums["wrong"][index].sum() / n_wrong - sums["right"][index].sum() / n_right)

    return Resampled(statistic, k)


# --------------------------------------------------------------------------- the claims as rows

FIRST_TURN = "debate-turn accuracy > first-turn accuracy during SDRL training"
GROUPS = "the share of all-correct (dropped) debate groups rises over training"
MAJ_BY_N = "round-0 majority accuracy (Maj) rises with N (base decentralized MAD)"
LENGTH = "incorrect round-0 responses are longer than correct ones"
DELTA = "SDRL's Δ = Debate − Maj ≥ DAPO's (decentralized, T = 1)"
MEAN_AT_K = "SDRL has no single-agent accuracy drop against DAPO (mean@K)"

SPECS = [
    ClaimSpec(
        "sdrl-3",
        FIRST_TURN,
        DIFFERENCE,
        only("first turn"),
        "mean over steps of debate − first-turn acc. (points; steps resampled)",
        unit="steps",
        scale=100,
        source="SDRL App. D.1, Figure 4 (Debate Accuracy Improvement)",
    ),
    ClaimSpec(
        "sdrl-4",
        GROUPS,
        SLOPE,
        only("groups"),
        "OLS slope per step of the {share} share of debate groups",
        unit="steps",
        source="SDRL App. D.1, Figure 4 (a growing fraction of debate responses with zero advantage)",
    ),
    ClaimSpec(
        "sdrl-5",
        MAJ_BY_N + " (N = {ns})",
        PAIRED_ACCURACY,
        only("N"),
        "Maj(max N) − Maj(min N), points",
        scale=100,
        source="SDRL §6.4 (Number of Agents), Table 3",
    ),
    ClaimSpec(
        "sdrl-6",
        LENGTH,
        DIFFERENCE,
        only("length"),
        "mean tokens incorrect − correct (questions resampled)",
        source="SDRL App. D.3, Table 6",
    ),
    ClaimSpec(
        "sdrl-7",
        "{method}'s Δ = Debate − Maj ≥ DAPO's (decentralized, T = 1)",
        DIFFERENCE,
        only("delta"),
        "Δ({method}) − Δ(DAPO), points (questions resampled)",
        ">=",
        margin_reason="[CHOICE] margin 0 points: the paper claims SDRL improves debate over its RLVR baseline "
        "(Liu et al., arXiv:2601.22297, Table 1's Δ), a gain, not 'no worse within δ'",
        scale=100,
        source="SDRL §6.2, Table 1 (Δ)",
    ),
    ClaimSpec(
        "sdrl-8",
        "{method} has no single-agent accuracy drop against DAPO (mean@K)",
        PAIRED_ACCURACY,
        only("mean@K"),
        "mean@K({method}) − mean@K(DAPO), points (questions resampled)",
        ">=",
        margin=2.0,
        margin_reason="[CHOICE] margin 2 points: the paper (arXiv:2601.22297, abstract, Table 2) says SDRL also "
        "strengthens single-agent accuracy but states no margin; the claim checked here is the weaker 'no "
        "drop' (non-inferiority), and 2 points (4 of 200 held-out questions) is the smallest drop we would call one",
        scale=100,
        source="SDRL §6.3, Table 2 (mean@K)",
    ),
]


def _training_contexts(outputs: RunOutputs) -> list:
    """sdrl-3 and sdrl-4 from the trainer's step metrics: `debate_accuracy` (every debate-turn rollout) against
    `debate_pair_accuracy` (the pairs the debate prompts show; older metrics: `accuracy`, every
    first-turn rollout), and the share of all-correct debate groups (older metrics: of dropped ones).
    The logs hold one row per step and nothing per question, so the step is the unit: the mean gap
    is paired over steps (both accuracies of a step move together), the trend is the OLS slope."""
    contexts = []
    runs = [r for r, info in outputs.runs.items() if info.method == "sdrl"]
    if not runs:
        return [
            Untestable(
                "no sdrl training run in this experiment",
                claim="sdrl-3..4",
                statement=FIRST_TURN,
                source="SDRL App. D.1, Figure 4",
            )
        ]
    for run in runs:
        steps = outputs.training.get(run)
        if steps is None:
            contexts.append(For("first turn", Untestable("no training metrics for this run", run)))
            continue
        missing = [c for c in ("accuracy", "debate_accuracy") if c not in steps]
        if missing:
            contexts.append(For("first turn", Untestable(f"the metrics don't log {missing}", run)))
        else:
            # the pair shown in the debate prompt (logged since this wave), else every first-turn rollout
            pair = "debate_pair_accuracy" in steps and steps["debate_pair_accuracy"].notna().any()
            first = "debate_pair_accuracy" if pair else "accuracy"
            both = steps[[first, "debate_accuracy"]].astype(float).dropna()
            what = (
                "the two first-turn answers each debate prompt shows"
                if pair
                else "every first-turn rollout sampled (kept and filtered groups; the pairs' own accuracy "
                "isn't in these metrics)"
            )
            detail = f"first-turn accuracy is over {what}; steps are resampled as if independent"
            case = (
                Untestable("no step sampled a debate turn", run)
                if both.empty
                else Case(run, Rows(both["debate_accuracy"], both[first]), detail=detail)
            )
            contexts.append(For("first turn", case))
        contexts.append(For("groups", _groups_case(run, steps)))
    return contexts


def _groups_case(run: str, steps: pd.DataFrame) -> Case | Untestable:
    if not {"debate_groups", "debate_groups_kept"} <= set(steps.columns):
        return Untestable("the metrics don't log debate_groups(_kept)", run)
    asked = steps[steps["debate_groups"].astype(float) > 0]
    if len(asked) < 3:
        return Untestable("a slope's interval needs at least 3 steps with debate groups", run)
    groups = asked["debate_groups"].astype(float)
    if "debate_groups_all_correct" in asked:
        share = asked["debate_groups_all_correct"].astype(float) / groups
        detail = (
            f"all-correct {int(asked['debate_groups_all_correct'].sum())}, all-wrong "
            f"{int(asked['debate_groups_all_wrong'].sum())} of {int(asked['debate_groups'].sum())} "
            "debate groups over training"
        )
        return Case(run, Rows(asked["step"].astype(float), share), {"share": "all-correct"}, detail)
    dropped = 1 - asked["debate_groups_kept"].astype(float) / groups
    detail = (
        "these metrics count dropped groups without splitting all-correct from all-wrong: "
        "the dropped share stands in for the all-correct share"
    )
    return Case(run, Rows(asked["step"].astype(float), dropped), {"share": "dropped"}, detail)


def training_claims(outputs: RunOutputs) -> list[Claim]:
    return evaluate_claims(SPECS, _training_contexts(outputs))


def _n_contexts(q: pd.DataFrame, cells: pd.DataFrame, outputs: RunOutputs, infos: list[ProtocolInfo]) -> list:
    """sdrl-5: round-0 majority accuracy rises with N, untrained decentralized MAD, one protocol per N.
    The statistic is Maj(max N) − Maj(min N) on the questions both answered: exact (McNemar) with one
    thread a question, else paired over questions; whether the N between are in order is in `detail`."""
    base = [p for p in decentralized(infos) if not p.trained_runs]
    chosen = pick(base, outputs, ["model", "n_agents"], order=lambda p: (p.rounds != 1, p.template != "choi", p.name))
    part = cells[cells["protocol"].isin([p.name for p in chosen]) & (cells["dataset"] != AVG)]
    if part["n_agents"].nunique() < 2:
        reason = "needs untrained decentralized protocols with ≥ 2 different N"
        return [Untestable(reason, claim="sdrl-5", statement=MAJ_BY_N)]
    contexts = []
    for (dataset, model), g in part.groupby(["run_dataset", "model"], sort=False):
        g = g.sort_values("n_agents", kind="stable")
        maj = g["maj"].to_numpy(float)
        rows = q[q["dataset"] == dataset]
        ends = [rows[rows["protocol"] == g["protocol"].iloc[i]] for i in (-1, 0)]
        one_outcome = all(e.groupby(["dataset", "question_id"]).size().eq(1).all() for e in ends)
        data, _ = _paired_question_difference(
            _by_question(ends[0], "maj"), _by_question(ends[1], "maj"), one_outcome=one_outcome
        )
        monotone = "yes" if np.all(np.diff(maj) >= 0) else "no"
        by_n = ", ".join(f"{int(n)}: {m:.1f}" for n, m in zip(g["n_agents"], maj))
        detail = f"Maj by N (%): {by_n}; non-decreasing: {monotone}; truncation not checked"
        fields = {"ns": ", ".join(str(int(n)) for n in g["n_agents"])}
        contexts.append(For("N", Case(f"{dataset}, {model}" if model else dataset, data, fields, detail)))
    return contexts


def _length_contexts(t6: pd.DataFrame, outputs: RunOutputs) -> list:
    """sdrl-6 (Table 6): incorrect round-0 responses are longer than correct ones."""
    first = t6[t6["round"] == 0]
    if first.empty:
        return [Untestable("no round-0 turns of a decentralized protocol", claim="sdrl-6", statement=LENGTH)]
    turns = outputs.turns
    turns = turns[turns["round"] == 0]
    contexts = []
    for _, r in first.iterrows():
        scope = f"{r['run_dataset']}, {r['method']}"
        if not (r["n_correct"] and r["n_incorrect"]):
            contexts.append(For("length", Untestable("needs correct and incorrect round-0 responses", scope)))
            continue
        rows = turns[(turns["protocol"] == r["protocol"]) & (turns["dataset"] == r["run_dataset"])]
        detail = f"{int(r['n_incorrect'])} incorrect and {int(r['n_correct'])} correct responses"
        contexts.append(For("length", Case(scope, _length_gap(rows), detail=detail)))
    return contexts


def _scope(dataset: str, run_dataset: str) -> str:
    return f"avg over {run_dataset}" if dataset == AVG else run_dataset


def _versus_dapo(q: pd.DataFrame, t1: pd.DataFrame, per_question: pd.DataFrame, t2: pd.DataFrame) -> list:
    """sdrl-7: SDRL's Δ ≥ DAPO's at the same N, and sdrl-8: no single-agent (mean@K) drop. Both on the questions
    the two methods answered, paired over questions; "avg" rows average the datasets as the tables do."""
    contexts = []
    sdrl_methods = sorted({m for m in t1["method"] if m.startswith("SDRL")})
    if "DAPO" not in set(t1["method"]) or not sdrl_methods:
        reason = "needs debates of both a dapo and an sdrl run"
        contexts.append(Untestable(reason, claim="sdrl-7", statement=DELTA))
    q = q.assign(delta=q["debate"].astype(float) - q["maj"].astype(float))
    for method in sdrl_methods if "DAPO" in set(t1["method"]) else []:
        for (dataset, _, n_agents), g in t1.groupby(["dataset", "model", "n_agents"], sort=False):
            by = g.set_index("method")
            if method not in by.index or "DAPO" not in by.index:
                continue
            rows = (
                q
                if dataset == AVG
                else q[q["dataset"].isin({by.loc[method, "run_dataset"], by.loc["DAPO", "run_dataset"]})]
            )
            data, shared = _paired_question_difference(
                _by_question(rows[rows["protocol"] == by.loc[method, "protocol"]], "delta"),
                _by_question(rows[rows["protocol"] == by.loc["DAPO", "protocol"]], "delta"),
            )
            detail = "on the questions both protocols answered, each question's Δ the mean over its threads"
            scope = f"{_scope(dataset, '+'.join(shared))}, N={n_agents}"
            contexts.append(For("delta", Case(scope, data, {"method": method}, detail)))
    sdrl_methods = sorted({m for m in t2["method"] if m.startswith("SDRL")})
    if "DAPO" not in set(t2["method"]) or not sdrl_methods:
        reason = "needs zero-shot samples of both a dapo and an sdrl policy"
        return [*contexts, Untestable(reason, claim="sdrl-8", statement=MEAN_AT_K)]
    for method in sdrl_methods:
        for (dataset, model), g in t2.groupby(["dataset", "model"], sort=False):
            by = g.set_index("method")
            if method not in by.index or "DAPO" not in by.index:
                continue
            rows = per_question[per_question["model"] == model]
            if dataset != AVG:
                rows = rows[rows["dataset"].isin({by.loc[method, "run_dataset"], by.loc["DAPO", "run_dataset"]})]
            sides = [rows[rows["method"] == m] for m in (method, "DAPO")]
            # one agent and one sample per question on each side: paired correctness (exact, McNemar)
            one_outcome = all(
                s["k"].eq(1).all() and s.groupby(["dataset", "question_id"]).size().eq(1).all() for s in sides
            )
            data, shared = _paired_question_difference(
                _by_question(sides[0], "mean"), _by_question(sides[1], "mean"), one_outcome=one_outcome
            )
            detail = "on the questions both policies were sampled on; margin: a drop of 2 points or more fails"
            contexts.append(For("mean@K", Case(_scope(dataset, "+".join(shared)), data, {"method": method}, detail)))
    return contexts


def paper_claims(outputs, q, cells, infos, t1, per_question, t2, t6) -> list[Claim]:
    fixed = [
        Untestable(
            "a numerical simulation of the theory, not a measure of this run's outputs",
            claim="sdrl-1",
            statement="DCM simulation: δ = 0 is a martingale, δ > 0 drifts up, higher ρ lowers MV acc.",
            source="SDRL §4, Theorem 4.4, Lemmas 4.5 and 4.7",
        ),
        Untestable(
            "unit tests of the trainer (tests/test_training.py), not a measure of this run's outputs",
            claim="sdrl-2",
            statement="pairing, dynamic sampling, dropped debate groups, advantages, overlong penalty",
            source="SDRL §5.1-5.2, Algorithm 1; App. A.1",
        ),
    ]
    contexts = [
        *_n_contexts(q, cells, outputs, infos),
        *_length_contexts(t6, outputs),
        *_versus_dapo(q, t1, per_question, t2),
    ]
    return [*evaluate_claims(SPECS, fixed), *training_claims(outputs), *evaluate_claims(SPECS, contexts)]
