"""SDRL's evaluation (Liu et al., arXiv:2601.22297 §6, Tables 1-6) on hand-made stage outputs: every value below is worked out by
hand from the fixture, so a wrong vote, average, K or method mapping fails."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats
from workflow_helpers import REPO_ROOT

from debatelab import intervals
from debatelab.config import Experiment, validate_config
from debatelab.evaluation import stage
from debatelab.evaluation.paper_numbers import long_table
from debatelab.evaluation.papers import sdrl, sdrl_claims, sdrl_rounds, sdrl_single_agent
from debatelab.evaluation.run import (
    QUESTION_COLUMNS,
    TURN_COLUMNS,
    ZERO_SHOT_COLUMNS,
    ProtocolInfo,
    RunInfo,
    RunOutputs,
)

TOY, TOY2 = "toy", "toy2"  # stand in for math500 (K = 4) and amc23 (K = 32)
# every fixture model stands for the paper's Qwen3-4B-Base (Table 5 and 6 are on it only)
BACKBONES = {"sdrl": {"m-base": "Q3-4B-Base", "m-dapo": "Q3-4B-Base", "m-sdrl": "Q3-4B-Base"}}
AGENT_MODELS = {"base": "m-base", "dapo": "m-dapo", "sdrl": "m-sdrl"}
GOLD = {"q1": "4", "q2": "7", "q3": "2"}


def protocol(name, kind, agent, model, n, runs=(), threads=1, rounds=1):
    return ProtocolInfo(
        name=name,
        kind=kind,
        rounds=rounds,
        threads=threads,
        template="choi",
        participants=(agent,) * n,
        models=(model,) * n,
        adversarial=0,
        trained_runs=tuple(runs),
        datasets=(TOY, TOY2),
    )


PROTOCOLS = [
    protocol("base_n3", "all_to_all", "base", "m-base", 3),
    protocol("base_n5", "all_to_all", "base", "m-base", 5),
    protocol("base_n7", "all_to_all", "base", "m-base", 7),
    protocol("dapo_n5", "all_to_all", "dapo", "m-dapo", 5, ["dapo"], threads=2),
    protocol("sdrl_n5", "all_to_all", "sdrl", "m-sdrl", 5, ["sdrl_freq"], threads=2),
    protocol("dapo_hub", "centralized", "dapo", "m-dapo", 3, ["dapo"]),
]

# (protocol, dataset) -> {thread: [(pre_correct, correct) per question]}, questions q1, q2 (toy) / q3 (toy2)
OUTCOMES = {
    ("base_n3", TOY): {0: [(False, False), (False, False)]},
    ("base_n5", TOY): {0: [(True, True), (False, False)]},
    ("base_n7", TOY): {0: [(True, True), (True, True)]},
    ("dapo_n5", TOY): {0: [(True, True), (False, True)], 1: [(False, True), (False, False)]},
    ("dapo_n5", TOY2): {0: [(False, True)], 1: [(False, False)]},
    ("sdrl_n5", TOY): {0: [(True, True), (True, True)], 1: [(True, True), (False, True)]},
    ("dapo_hub", TOY): {0: [(True, True), (True, True)]},  # the plurality is right at round 0, the hub isn't on q1
}

# Answers per round (round 0 = pre-debate) for the protocols with turns; they agree with OUTCOMES.
ANSWERS = {
    ("sdrl_n5", TOY, "q1", 0): [["4", "4", "5", "4", "5"], ["4"] * 5],
    ("sdrl_n5", TOY, "q2", 0): [["7", "1", "1", "7", None], ["7", "7", "7", "1", "7"]],  # round 0: 7 / 1 tie -> 7
    ("sdrl_n5", TOY, "q1", 1): [["4", "5", "4", "5", "9"], ["4", "4", "4", "5", "5"]],  # round 0: 4 / 5 tie -> 4
    ("sdrl_n5", TOY, "q2", 1): [["1", "1", "7", None, None], ["7", "7", "1", "7", "1"]],
    ("dapo_hub", TOY, "q1", 0): [["5", "4", "4"], ["4", "4", "4"]],
    ("dapo_hub", TOY, "q2", 0): [["7", "7", "1"], ["7", "1", "1"]],  # final: hub, so right although outvoted
}

# zero-shot samples per (dataset, agent, question), in sample order
SAMPLES = {
    (TOY, "dapo", "q1"): ["5", "4", "4", "5", "5"],  # K = 4: 5 / 4 tie -> the first, 5 (wrong); mean 2/4
    (TOY, "dapo", "q2"): ["7", "7", "1", "7", "1"],  # K = 4: right; mean 3/4
    (TOY, "sdrl", "q1"): ["4", "4", "4", "5"],  # right; mean 3/4
    (TOY, "sdrl", "q2"): [None, "7", "1", "1"],  # 1 wins (invalid doesn't vote): wrong; mean 1/4
    (TOY, "base", "q1"): ["4", "4"],
    (TOY2, "dapo", "q3"): ["2", "3", "2"],  # K = 3 samples there: right; mean 2/3
}


def _questions(outcomes_by_protocol: dict = OUTCOMES) -> pd.DataFrame:
    """Question rows; the i-th outcome of a thread is question q{i+1} on toy, q{i+3} on toy2."""
    rows = []
    for (name, dataset), threads in outcomes_by_protocol.items():
        info = next(p for p in PROTOCOLS if p.name == name)
        for thread, outcomes in threads.items():
            qids = [f"q{i + (3 if dataset == TOY2 else 1)}" for i in range(len(outcomes))]
            for qid, (pre, correct) in zip(qids, outcomes):
                rows.append(
                    {
                        "question_id": qid,
                        "dataset": dataset,
                        "protocol": name,
                        "kind": info.kind,
                        "thread": thread,
                        "n_agents": info.n_agents,
                        "correct": correct,
                        "parse_failed": False,
                        "rounds_used": 1,
                        "ncomm": 0,
                        "total_tokens": 0,
                        "pre_correct": pre,
                        "pre_unanimous": False,
                        "pre_n_correct": 0,
                        "answers_by_round": "[]",
                        "task_type": "math",
                    }
                )
    return pd.DataFrame(rows, columns=QUESTION_COLUMNS)


def tokens(answer, gold, agent_index):
    """Correct replies 100 + 10·seat tokens, wrong ones 400."""
    return 100 + 10 * agent_index if answer == gold else 400


def _turns() -> pd.DataFrame:
    rows = []
    for (name, dataset, qid, thread), by_round in ANSWERS.items():
        info = next(p for p in PROTOCOLS if p.name == name)
        for rnd, answers in enumerate(by_round):
            for i, answer in enumerate(answers):
                rows.append(
                    {
                        "question_id": qid,
                        "dataset": dataset,
                        "protocol": name,
                        "thread": thread,
                        "round": rnd,
                        "agent": f"#{i}",
                        "agent_index": i,
                        "agent_config": info.participants[i],
                        "call": 0,
                        "answer": answer,
                        "correct": answer == GOLD[qid],
                        "parse_failed": answer is None,
                        "completion_tokens": tokens(answer, GOLD[qid], i),
                    }
                )
    return pd.DataFrame(rows, columns=TURN_COLUMNS)


def _zero_shot() -> pd.DataFrame:
    rows = [
        {
            "question_id": qid,
            "dataset": dataset,
            "agent": agent,
            "sample": k,
            "answer": a,
            "correct": a == GOLD[qid],
            "completion_tokens": 10,
        }
        for (dataset, agent, qid), answers in SAMPLES.items()
        for k, a in enumerate(answers)
    ]
    return pd.DataFrame(rows, columns=ZERO_SHOT_COLUMNS)


def make_outputs(training: dict | None = None, backbones: dict = BACKBONES, outcomes: dict = OUTCOMES) -> RunOutputs:
    runs = {
        "dapo": RunInfo("dapo", "dapo", {"method": "dapo"}),
        "sdrl_freq": RunInfo("sdrl_freq", "sdrl", {"method": "sdrl", "sdrl": {"pair_mode": "freq"}, "steps": 125}),
    }
    outputs = RunOutputs(
        experiment="fixture",
        protocols={p.name: p for p in PROTOCOLS},
        runs=runs,
        paper_datasets={TOY: "math500", TOY2: "amc23"},
        agent_runs={"base": None, "dapo": "dapo", "sdrl": "sdrl_freq"},
        model_backbones=backbones,
        agent_models=AGENT_MODELS,
    )
    outputs.__dict__["questions"] = _questions(outcomes)
    outputs.__dict__["turns"] = _turns()
    outputs.__dict__["zero_shot"] = _zero_shot()
    outputs.__dict__["training"] = (
        training
        if training is not None
        else {
            "sdrl_freq": pd.DataFrame(
                {
                    "step": [1, 2, 3],
                    "accuracy": [0.2, 0.3, 0.4],
                    "debate_accuracy": [0.5, np.nan, 0.5],
                    "debate_groups": [2, 0, 2],
                    "debate_groups_kept": [2, 0, 1],
                }
            )
        }
    )
    return outputs


@pytest.fixture(scope="module")
def result():
    return sdrl.evaluate(make_outputs())


def cell(result, table, metric, **keys):
    cells = result.cells[table]
    mask = cells["metric"] == metric
    for k, v in keys.items():
        mask &= cells[k].astype(str) == str(v)
    assert mask.sum() == 1, (table, metric, keys, cells[mask])
    return cells[mask].iloc[0]


def claims_of(result, number):
    return [c for c in result.claims if c.claim == number]


def test_table1_maj_debate_delta_are_thread_means(result):
    # DAPO on toy: thread 0 Maj 50 Debate 100, thread 1 Maj 0 Debate 50
    assert cell(result, "table1", "maj", dataset="math500", method="DAPO", n_agents=5)["value"] == pytest.approx(25)
    assert cell(result, "table1", "debate", dataset="math500", method="DAPO", n_agents=5)["value"] == pytest.approx(75)
    dapo = cell(result, "table1", "delta", dataset="math500", method="DAPO", n_agents=5)
    assert dapo["value"] == pytest.approx(50) and dapo["n"] == 4 and dapo["run_dataset"] == TOY
    # SDRL-freq: Maj (100 + 50) / 2, Debate 100
    sdrl_freq = dict(dataset="math500", method="SDRL-freq", n_agents=5)
    assert cell(result, "table1", "maj", **sdrl_freq)["value"] == pytest.approx(75)
    assert cell(result, "table1", "delta", **sdrl_freq)["value"] == pytest.approx(25)
    # Avg over toy and toy2, per thread: Maj (50+0)/2, (0+0)/2 -> 12.5; Debate (100+100)/2, (50+0)/2 -> 62.5
    assert cell(result, "table1", "maj", dataset="avg", method="DAPO", n_agents=5)["value"] == pytest.approx(12.5)
    assert cell(result, "table1", "debate", dataset="avg", method="DAPO", n_agents=5)["value"] == pytest.approx(62.5)
    # the base row is the N = 5 protocol, not N = 3 or 7
    assert cell(result, "table1", "maj", dataset="math500", method="Base", n_agents=5)["value"] == pytest.approx(50)
    layout = result.tables["table1"].set_index("method")
    assert layout.loc["DAPO", f"{TOY} Maj"] == f"25.0 ± {np.std([50, 0], ddof=1):.1f}"
    assert layout.loc["Base", f"{TOY} Maj"] == "50.0"  # one thread: no sd
    assert list(layout.index) == ["Base", "DAPO", "SDRL-freq"]


def test_table2_mean_and_maj_at_k_with_the_paper_k_and_first_sample_ties(result):
    # DAPO on toy (math500, K = 4): q1 mean 2/4, maj wrong (5 / 4 tie -> first); q2 mean 3/4, maj right
    assert cell(result, "table2", "mean_at_k", dataset="math500", method="DAPO")["value"] == pytest.approx(62.5)
    assert cell(result, "table2", "maj_at_k", dataset="math500", method="DAPO")["value"] == pytest.approx(50)
    # SDRL-freq: q1 3/4 right, q2 1/4 wrong (the invalid sample doesn't vote)
    assert cell(result, "table2", "mean_at_k", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(50)
    assert cell(result, "table2", "maj_at_k", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(50)
    # amc23 keeps all 3 samples; the DAPO average is over the two datasets
    assert cell(result, "table2", "mean_at_k", dataset="amc23", method="DAPO")["value"] == pytest.approx(200 / 3)
    assert cell(result, "table2", "maj_at_k", dataset="avg", method="DAPO")["value"] == pytest.approx(75)
    assert cell(result, "table2", "mean_at_k", dataset="math500", method="Base")["value"] == pytest.approx(100)
    layout = result.tables["table2"].set_index("method")
    assert layout.loc["DAPO", f"{TOY} mean@4"] == 62.5 and layout.loc["DAPO", f"{TOY2} maj@3"] == 100


def test_table2_reads_each_methods_full_budget_agents_not_its_debate_seats():
    """A debate seat of the same model with a budget cut to fit the window (sdrl.yaml's "_n5" /
    "_n7") is not Table 2's single-agent evaluation: only the largest-budget agents are read."""
    outputs = make_outputs()
    seat = pd.DataFrame(
        [
            {"question_id": q, "dataset": TOY, "agent": "dapo_n5", "sample": k, "answer": "0", "correct": False}
            for q in ("q1", "q2")
            for k in range(4)
        ]
    ).reindex(columns=ZERO_SHOT_COLUMNS)
    outputs.__dict__["zero_shot"] = pd.concat([outputs.zero_shot, seat], ignore_index=True)
    outputs.agent_runs["dapo_n5"] = "dapo"
    outputs.agent_models["dapo_n5"] = AGENT_MODELS["dapo"]
    outputs.agent_max_tokens.update({"base": 8192, "dapo": 8192, "sdrl": 8192, "dapo_n5": 5248})
    t2 = sdrl.evaluate(outputs)
    assert cell(t2, "table2", "mean_at_k", dataset="math500", method="DAPO")["value"] == pytest.approx(62.5)
    assert "dapo_n5" not in set(sdrl_single_agent.single_agent_questions(outputs)["agent"])


def test_agents_map_to_the_method_of_the_run_that_trained_their_model():
    outputs = make_outputs()
    assert sdrl_single_agent.agent_methods(outputs) == {"base": "Base", "dapo": "DAPO", "sdrl": "SDRL-freq"}
    # tests/configs/tiny.yaml, read the way the workflow reads it
    exp = Experiment(validate_config(yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())))
    tiny = RunOutputs.from_experiment(exp)
    assert sdrl_single_agent.agent_methods(tiny) == {
        "alice": "Base",
        "bob": "Base",
        "carol": "SDRL-rand",
        "dave": "UDPO",
    }


def test_centralized_maj_is_the_hubs_round0_answer(result):
    # the plurality is right on both questions at round 0, the hub (agent 0) only on q2
    centralized = dict(dataset="math500", method="DAPO", topology="centralized", n_agents=3)
    assert cell(result, "table4", "maj", **centralized)["value"] == pytest.approx(50)
    assert cell(result, "table4", "delta", **centralized)["value"] == pytest.approx(50)
    assert cell(result, "table4", "maj", dataset="math500", method="DAPO", topology="decentralized", n_agents=5)[
        "value"
    ] == pytest.approx(25)


def test_table5_carries_the_runs_steps(result):
    assert cell(result, "table5", "maj", dataset="math500", method="SDRL-freq", steps=125)["value"] == pytest.approx(75)
    assert cell(result, "table5", "maj", dataset="math500", method="DAPO", steps=200)["value"] == pytest.approx(25)
    assert "Base" not in set(result.cells["table5"]["method"])


def test_table6_tokens_and_accuracy_by_round(result):
    # round 0: 8 right replies of seats (0,1,3), (0,3), (0,2), (2) -> mean 100 + 10 * 11 / 8; 12 wrong ones at 400
    right = cell(result, "table6", "correct_tokens", dataset="math500", method="SDRL-freq", round=0)
    assert right["value"] == pytest.approx(100 + 10 * 11 / 8) and right["n"] == 8
    wrong = cell(result, "table6", "incorrect_tokens", dataset="math500", method="SDRL-freq", round=0)
    assert wrong["value"] == pytest.approx(400) and wrong["n"] == 12
    assert cell(result, "table6", "correct_tokens", dataset="math500", method="SDRL-freq", round=1)["n"] == 15
    fig = result.tables["fig1"].set_index(["method", "round"])
    # round 0: the first-agent tie rule makes both tied votes right (3 of 4); round 1: all 4 right
    assert fig.loc[("SDRL-freq", 0), "accuracy"] == pytest.approx(75)
    assert fig.loc[("SDRL-freq", 1), "accuracy"] == pytest.approx(100)
    assert "fig1_accuracy_by_round" in result.figures


def test_claims_measure_the_directions(result):
    # the toy run has 2 questions and 2 steps with debate turns: the bootstrapped claims keep their
    # values (by hand below) without an interval, fewer units than claims.MIN_UNITS ("n/a (too few)";
    # the old percentile intervals on 2 units let the sdrl-3 gap and sdrl-6 length claims hold)
    too_few = "n/a (too few)"
    # steps 1 and 3 sampled debate turns: gaps 30 and 10 points
    training = [c for c in claims_of(result, "sdrl-3") if c.statement.startswith("debate-turn")]
    assert len(training) == 1 and training[0].value == pytest.approx(20) and training[0].verdict == too_few
    assert training[0].n == 2 and "over steps" in training[0].interval  # step 2 sampled no debate turn
    dropped = [c for c in claims_of(result, "sdrl-4") if "dropped" in c.statement][0]
    assert dropped.verdict == "n/a" and "3 steps" in dropped.detail  # 2 steps: no slope interval
    # Maj N = 7 − N = 3: both questions right vs both wrong, one thread each: paired correctness with
    # 2 discordant questions, Clopper-Pearson of 2/2 [0.025^(1/2), 1] mapped by 100 · (2/2)(2p − 1);
    # McNemar p = 0.5 (the old bootstrap gave [100, 100] and "holds")
    rises = [c for c in claims_of(result, "sdrl-5") if "Maj" in c.statement]
    assert len(rises) == 1 and rises[0].value == pytest.approx(100) and rises[0].verdict == "inconclusive"
    assert (rises[0].low, rises[0].high, rises[0].n) == (pytest.approx(100 * (2 * 0.025**0.5 - 1)), 100, 2)
    assert rises[0].p == pytest.approx(0.5) and "non-decreasing: yes" in rises[0].detail
    # round 0 of SDRL-freq: wrong replies 400 tokens; right ones q1 (100, 110, 130, 100, 120) mean 112,
    # q2 (100, 130, 120) mean 116.67, both 113.75
    longer = [c for c in claims_of(result, "sdrl-6") if "longer" in c.statement and c.scope == f"{TOY}, SDRL-freq"]
    assert longer[0].value == pytest.approx(400 - 113.75) and longer[0].verdict == too_few and longer[0].n == 2
    # Δ per question over threads: SDRL-freq q1 0, q2 0.5; DAPO q1 0.5, q2 0.5: differences −50, 0 points
    delta = [c for c in claims_of(result, "sdrl-7") if "Δ" in c.statement and c.scope == f"{TOY}, N=5"]
    assert delta[0].value == pytest.approx(25 - 50) and delta[0].verdict == too_few and delta[0].n == 2
    assert (delta[0].expect, delta[0].margin) == (">= 0", 0.0)
    # mean@4: SDRL-freq q1 3/4, q2 1/4; DAPO q1 2/4, q2 3/4: differences +25, −50 points
    single = [c for c in claims_of(result, "sdrl-8") if "single-agent" in c.statement and c.scope == TOY]
    assert single[0].value == pytest.approx(50 - 62.5) and single[0].verdict == too_few
    assert single[0].margin == 2.0  # non-inferiority: a drop of 2 points or more would fail


def _dropped_share_claim(kept: list[int], groups: int = 4):
    steps = list(range(1, len(kept) + 1))
    outputs = make_outputs(
        training={
            "sdrl_freq": pd.DataFrame(
                {
                    "step": steps,
                    "accuracy": [0.2] * len(steps),
                    "debate_accuracy": [0.5] * len(steps),
                    "debate_groups": [groups] * len(steps),
                    "debate_groups_kept": kept,
                }
            )
        }
    )
    return [c for c in sdrl_claims.training_claims(outputs) if "dropped" in c.statement][0]


def test_dropped_share_trend_is_the_ols_slope_bootstrapped_over_steps():
    # dropped share 0, .25, .25, .5 over steps 1..4: slope Sxy / Sxx = 0.75 / 5 = 0.15; 4 steps are
    # fewer than claims.MIN_UNITS: the point value rises, no interval
    claim = _dropped_share_claim([4, 3, 3, 2])
    assert claim.value == pytest.approx(0.15) and claim.n == 4
    assert math.isnan(claim.low) and claim.verdict == "n/a (too few)"
    # 12 steps, one more group of 12 dropped every step: an exact line, every resample's slope is 1/12
    rising = _dropped_share_claim(list(range(12, 0, -1)), groups=12)
    assert rising.value == pytest.approx(1 / 12) and rising.low > 0 and rising.verdict == "holds"


def test_training_claims_use_the_pairs_accuracy_and_the_all_correct_share_when_logged():
    # pairs shown 0.25 right, debate replies 0.5: +25 points every step, but 4 steps: no interval;
    # all-correct share 0, .25, .25, .5 of 4 groups: the slope of the dropped-share test above, 0.15
    outputs = make_outputs(
        training={
            "sdrl_freq": pd.DataFrame(
                {
                    "step": [1, 2, 3, 4],
                    "accuracy": [0.9] * 4,
                    "debate_accuracy": [0.5] * 4,
                    "debate_pair_accuracy": [0.25] * 4,
                    "debate_groups": [4] * 4,
                    "debate_groups_kept": [0] * 4,
                    "debate_groups_all_correct": [0, 1, 1, 2],
                    "debate_groups_all_wrong": [4, 3, 3, 2],
                }
            )
        }
    )
    claims = sdrl_claims.training_claims(outputs)
    gap = [c for c in claims if c.statement.startswith("debate-turn")][0]
    assert (gap.value, gap.verdict) == (pytest.approx(25), "n/a (too few)")
    assert "the two first-turn answers each debate prompt shows" in gap.detail
    share = [c for c in claims if "all-correct" in c.statement][0]
    assert share.value == pytest.approx(0.15) and "all-correct 4, all-wrong 12 of 16" in share.detail
    assert "all-correct share" in share.statistic


def _many_questions(n: int, pattern: list[tuple[bool, bool]]) -> dict:
    return {0: [pattern[i % len(pattern)] for i in range(n)]}


def test_a_large_delta_gain_over_dapo_on_many_questions_holds():
    # 60 shared questions: SDRL's debate fixes 40 round-0 errors (Δ 66.7 points), DAPO's fixes none (Δ 0)
    outcomes = {
        ("sdrl_n5", TOY): _many_questions(60, [(False, True), (False, True), (True, True)]),
        ("dapo_n5", TOY): _many_questions(60, [(True, True)]),
    }
    result = sdrl.evaluate(make_outputs(outcomes=outcomes))
    delta = [c for c in claims_of(result, "sdrl-7") if "Δ" in c.statement and c.scope == f"{TOY}, N=5"][0]
    assert delta.value == pytest.approx(200 / 3) and delta.n == 60
    # the paired SE is sqrt(2/9)/sqrt(60) = 6.1 points: the interval is about 66.7 ± 12
    assert 66.7 - 20 < delta.low < 66.7 - 6 and 66.7 + 6 < delta.high <= 100
    assert delta.verdict == "holds"


def test_a_rise_with_n_on_three_questions_is_inconclusive():
    # Maj N = 3 / 5 / 7: 1, 1, 2 of 3 right: a rise of 33.3 points (before: holds = yes), but per question
    # N = 7 − N = 3 is (+1, +1, −1) and a resample drawing two −1s (7 / 27 of them) is ≤ 0
    outcomes = {
        ("base_n3", TOY): {0: [(False, False), (False, False), (True, True)]},
        ("base_n5", TOY): {0: [(True, True), (False, False), (False, False)]},
        ("base_n7", TOY): {0: [(True, True), (True, True), (False, False)]},
    }
    rises = [c for c in claims_of(sdrl.evaluate(make_outputs(outcomes=outcomes)), "sdrl-5") if "Maj" in c.statement][0]
    assert rises.value == pytest.approx(100 / 3) and rises.n == 3
    assert rises.low < 0 < rises.high and rises.verdict == "inconclusive" and rises.holds is None


def test_training_claims_say_why_when_untestable():
    outputs = make_outputs(training={"sdrl_freq": pd.DataFrame({"step": [1, 2], "accuracy": [0.1, 0.2]})})
    training = [c for c in sdrl_claims.training_claims(outputs) if c.statement.startswith("debate-turn")][0]
    assert training.verdict == "n/a" and training.holds is None and math.isnan(training.value)
    assert "debate_accuracy" in training.detail


def test_evaluate_paper_writes_tables_comparisons_and_claims(tmp_path):
    out = tmp_path / "out"
    stage.evaluate_paper("sdrl", make_outputs(), out)
    for name in (
        "table1.csv",
        "table1_vs_paper.csv",
        "table2_vs_paper.csv",
        "table6_vs_paper.csv",
        "claims.csv",
        "fig1_accuracy_by_round.png",
    ):
        assert (out / name).exists(), name
    vs = pd.read_csv(out / "table1_vs_paper.csv")
    cell = (vs["dataset"] == "math500") & (vs["method"] == "DAPO") & (vs["metric"] == "maj")
    row = vs[cell & (vs["model"] == "Q3-4B-Base")]
    assert row["paper_value"].tolist() == [86.9]
    assert row["run_value"].tolist() == [25.0] and row["run_dataset"].tolist() == [TOY]
    assert row["difference"].iloc[0] == pytest.approx(25.0 - 86.9)
    # the same cell on the other backbone (70.9) is not this run's: its models stand for Qwen3-4B-Base
    other = vs[cell & (vs["model"] == "Q2.5-3B")]
    assert other["paper_value"].tolist() == [70.9] and other["run_value"].isna().all()
    assert vs.loc[vs["dataset"] == "aime24", "run_value"].isna().all()  # the run has no aime24
    budget = pd.read_csv(out / "table5_vs_paper.csv")
    assert budget.loc[
        (budget["method"] == "SDRL-freq")
        & (budget["steps"] == 125)
        & (budget["dataset"] == "math500")
        & (budget["metric"] == "maj"),
        "run_value",
    ].tolist() == [75.0]
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False)
    assert {"inconclusive", "n/a", "n/a (too few)"} <= set(claims["verdict"])
    measured = claims[~claims["verdict"].isin(["n/a", "n/a (too few)"])]
    assert (measured["low"].astype(float) <= measured["value"].astype(float)).all()
    assert (measured["value"].astype(float) <= measured["high"].astype(float)).all()
    assert (measured["n"] >= 2).all() and measured["interval"].str.len().gt(0).all()


def test_a_reduced_budget_run_fills_table5_beside_the_full_run_and_stays_out_of_table1():
    """Table 5 (App. D.2): SDRL-freq trained 125 and 200 steps, both at N = 5. Table 1 takes the
    200-step run (its name sorts last, so a name order would pick the 125-step one); Table 5 keeps both."""
    outputs = make_outputs(backbones={"sdrl": {**BACKBONES["sdrl"], "m-sdrl200": "Q3-4B-Base"}})
    full = protocol("sdrl_z200_n5", "all_to_all", "sdrl200", "m-sdrl200", 5, ["sdrl_freq_200"])
    outputs.protocols[full.name] = full
    outputs.runs["sdrl_freq_200"] = RunInfo(
        "sdrl_freq_200", "sdrl", {"method": "sdrl", "sdrl": {"pair_mode": "freq"}, "steps": 200}
    )
    extra = pd.DataFrame(
        [
            {
                **outputs.questions.iloc[0].to_dict(),
                "question_id": qid,
                "dataset": TOY,
                "protocol": full.name,
                "thread": 0,
                "pre_correct": False,
                "correct": True,
            }
            for qid in ("q1", "q2")
        ]
    )
    outputs.__dict__["questions"] = pd.concat([outputs.questions, extra], ignore_index=True)
    result = sdrl.evaluate(outputs)
    # the 200-step run: Maj 0 / 2, Debate 2 / 2 on toy (math500); the 125-step run: Maj (100 + 50) / 2 = 75
    assert cell(result, "table1", "maj", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(0)
    assert cell(result, "table1", "debate", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(100)
    assert cell(result, "table5", "maj", dataset="math500", method="SDRL-freq", steps=200)["value"] == pytest.approx(0)
    assert cell(result, "table5", "maj", dataset="math500", method="SDRL-freq", steps=125)["value"] == pytest.approx(75)


# --------------------------------------------------------------------------- 95 % intervals of the cells


def _cycle(n: int, maj_wrong: set[int], debate_wrong: set[int], period: int = 10) -> list[tuple[bool, bool]]:
    """n questions; question i's Maj is wrong where i % period is in `maj_wrong`, its Debate likewise."""
    return [(i % period not in maj_wrong, i % period not in debate_wrong) for i in range(n)]


# enough questions for the bootstrap (intervals.MIN_UNITS = 10): DAPO two threads on toy (30) and toy2 (12),
# SDRL-freq two threads covering 24 and 16 questions (the thread mean is not the mean over rows), Base one thread
WIDE = {
    ("dapo_n5", TOY): {0: _cycle(30, {3}, {1, 4, 7, 8}), 1: _cycle(30, {2, 5}, {0, 3, 6})},
    ("dapo_n5", TOY2): {0: _cycle(12, {0, 1, 2, 3}, {0, 1}), 1: _cycle(12, {4, 5, 6}, {4})},
    ("sdrl_n5", TOY): {0: _cycle(24, {1, 2}, {1}), 1: _cycle(16, {0, 1, 2, 3, 4, 5}, {0, 7})},
    ("base_n5", TOY): {0: _cycle(20, {0, 1, 2, 3, 4, 5, 6}, {0, 1, 2, 3})},
}


@pytest.fixture(scope="module")
def wide():
    outputs = make_outputs(outcomes=WIDE)
    return outputs, sdrl.evaluate(outputs), sdrl.question_outcomes(outputs, sdrl.debate_infos(outputs))


def _by_hand_interval(rows: pd.DataFrame, column: str, thread: str | None = "thread"):
    """The tables' statistic written out (per (dataset, thread) the mean over the rows, averaged over
    the datasets, then the threads) and bootstrapped one resample at a time over (dataset, question)
    units in sorted order, as `paper_numbers.dataset_average_statistic` numbers them; in points."""
    unit_of = {u: i for i, u in enumerate(sorted(set(zip(rows["dataset"], rows["question_id"]))))}
    unit = np.array([unit_of[u] for u in zip(rows["dataset"], rows["question_id"])])
    x = rows[column].to_numpy(float)
    threads = rows[thread] if thread else pd.Series(0, index=rows.index)
    masks = {
        t: [(rows["dataset"] == d).to_numpy() & (threads == t).to_numpy() for d in set(rows["dataset"])]
        for t in set(threads)
    }

    def statistic(index):
        weight = np.bincount(index, minlength=len(unit_of))[unit].astype(float)
        per_thread = []
        for cells in masks.values():
            means = [(weight * x)[m].sum() / weight[m].sum() for m in cells if weight[m].sum() > 0]
            if means:
                per_thread.append(np.mean(means))
        return round(float(np.mean(per_thread)), 12)  # sdrl._tied: fractions equal to the value tie with it

    return intervals.bootstrap(statistic, len(unit_of)).scaled(100)


def _exact_percent(successes: int, n: int) -> tuple[float, float]:
    ci = stats.binomtest(successes, n).proportion_ci(0.95, method="exact")
    return 100 * ci.low, 100 * ci.high


def test_one_thread_cells_carry_the_exact_interval_and_two_questions_no_bootstrap(result):
    # Base N = 5 on toy: one thread, Maj 1 of 2 right: Clopper-Pearson of 1/2, whatever the count of questions
    base = cell(result, "table1", "maj", dataset="math500", method="Base", n_agents=5)
    assert (base["low"], base["high"]) == pytest.approx(_exact_percent(1, 2))
    # no question changed its answer: the exact conditional (McNemar) interval of Δ is the point 0
    delta = cell(result, "table1", "delta", dataset="math500", method="Base", n_agents=5)
    assert (delta["value"], delta["low"], delta["high"]) == (0, 0, 0)
    # DAPO: two threads on two questions, fewer than MIN_UNITS for the bootstrap: no interval
    dapo = cell(result, "table1", "maj", dataset="math500", method="DAPO", n_agents=5)
    assert math.isnan(dapo["low"]) and math.isnan(dapo["high"])
    # maj@4 of DAPO on toy, 1 of 2 questions, one agent: exact; mean@4 is no 0/1 share: bootstrap, too few
    maj_at_k = cell(result, "table2", "maj_at_k", dataset="math500", method="DAPO")
    assert (maj_at_k["low"], maj_at_k["high"]) == pytest.approx(_exact_percent(1, 2))
    assert math.isnan(cell(result, "table2", "mean_at_k", dataset="math500", method="DAPO")["low"])


def test_debate_cells_bootstrap_questions_with_their_threads(wide):
    outputs, result, q = wide
    dapo = q[(q["protocol"] == "dapo_n5") & (q["dataset"] == TOY)]
    # every question in both threads: the thread mean is the mean over rows, so the interval is
    # intervals.mean_estimate's over questions (clusters), and Δ its paired difference
    for metric in ("maj", "debate"):
        expected = intervals.mean_estimate(dapo[metric].astype(float), clusters=dapo["question_id"]).scaled(100)
        got = cell(result, "table1", metric, dataset="math500", method="DAPO", n_agents=5)
        assert (got["low"], got["high"]) == pytest.approx((expected.low, expected.high), rel=1e-9)
        assert got["low"] < got["value"] < got["high"]
    expected = intervals.paired_difference(
        dapo["debate"].astype(float), dapo["maj"].astype(float), clusters=dapo["question_id"]
    ).scaled(100)
    delta = cell(result, "table1", "delta", dataset="math500", method="DAPO", n_agents=5)
    assert delta["value"] == pytest.approx(expected.value)
    assert (delta["low"], delta["high"]) == pytest.approx((expected.low, expected.high), rel=1e-9)
    # Base: one thread, one answer per question: Clopper-Pearson (6 of 20 right) and the exact paired Δ,
    # 6 questions fixed, none broken: the interval of 6/6 discordant ones, [0.025^(1/6), 1], mapped by 6/20 (2p − 1)
    base = q[(q["protocol"] == "base_n5") & (q["dataset"] == TOY)]
    maj = cell(result, "table1", "maj", dataset="math500", method="Base", n_agents=5)
    assert maj["value"] == pytest.approx(30) and (maj["low"], maj["high"]) == pytest.approx(_exact_percent(6, 20))
    exact = intervals.paired_accuracy_difference(base["debate"], base["maj"]).scaled(100)
    delta = cell(result, "table1", "delta", dataset="math500", method="Base", n_agents=5)
    assert (delta["low"], delta["high"]) == pytest.approx((exact.low, exact.high))
    assert (delta["low"], delta["value"], delta["high"]) == pytest.approx((30 * (2 * 0.025 ** (1 / 6) - 1), 30, 30))
    # every cell of every debate table: an interval around its value
    for table in ("table1", "table3", "table4", "table5"):
        cells = result.cells[table]
        assert cells[["low", "high"]].notna().all().all(), table
        assert (cells["low"] <= cells["value"] + 1e-9).all() and (cells["value"] <= cells["high"] + 1e-9).all()


def test_the_interval_is_the_printed_statistics_own_where_threads_or_datasets_differ(wide):
    outputs, result, q = wide
    # SDRL-freq's threads cover 24 and 16 questions: Maj = (18/24 + 4/16) / 2 = 50, not 22/40 over rows
    sdrl_rows = q[q["protocol"] == "sdrl_n5"]
    maj = cell(result, "table1", "maj", dataset="math500", method="SDRL-freq", n_agents=5)
    assert maj["value"] == pytest.approx(50)
    pooled = intervals.mean_estimate(sdrl_rows["maj"].astype(float), clusters=sdrl_rows["question_id"]).scaled(100)
    assert pooled.value != pytest.approx(maj["value"])
    by_hand = _by_hand_interval(sdrl_rows, "maj")
    assert (maj["low"], maj["high"]) == pytest.approx((by_hand.low, by_hand.high), rel=1e-9)
    # DAPO's avg: per thread the mean of toy's (30 questions) and toy2's (12) accuracy, then over threads,
    # bootstrapped over all 42 questions
    dapo = q[q["protocol"] == "dapo_n5"]
    for metric in ("maj", "debate"):
        avg = cell(result, "table1", metric, dataset="avg", method="DAPO", n_agents=5)
        by_hand = _by_hand_interval(dapo, metric)
        assert avg["value"] == pytest.approx(by_hand.value)
        assert (avg["low"], avg["high"]) == pytest.approx((by_hand.low, by_hand.high), rel=1e-9)
        assert avg["low"] < avg["value"] < avg["high"]


def test_table2_intervals_bootstrap_questions_and_average_datasets():
    outputs = make_outputs()
    # DAPO's one agent: toy 15 questions (mean@4 cycling 0..4 of 4, maj right where 3 or 4), toy2 12 (K = 32)
    per_question = pd.DataFrame(
        [
            {
                "dataset": dataset,
                "agent": "dapo",
                "question_id": f"{dataset}-{i}",
                "mean": share,
                "k": k,
                "maj": share > 0.5,
                "method": "DAPO",
                "model": "Q3-4B-Base",
            }
            for dataset, n, k, period in ((TOY, 15, 4, 5), (TOY2, 12, 32, 3))
            for i in range(n)
            for share in [(i % period) / (period - 1)]
        ]
    )
    t2 = sdrl.single_agent_intervals(sdrl_single_agent.single_agent(outputs, per_question), per_question)
    toy = t2[t2["run_dataset"] == TOY].iloc[0]
    part = per_question[per_question["dataset"] == TOY]
    expected = intervals.mean_estimate(part["mean"], clusters=part["question_id"]).scaled(100)
    assert toy["mean_at_k"] == pytest.approx(50)
    assert (toy["mean_at_k_low"], toy["mean_at_k_high"]) == pytest.approx((expected.low, expected.high), rel=1e-9)
    assert (toy["maj_at_k_low"], toy["maj_at_k_high"]) == pytest.approx(_exact_percent(6, 15))
    avg = t2[t2["dataset"] == sdrl.AVG].iloc[0]
    by_hand = _by_hand_interval(per_question, "mean", thread=None)
    assert avg["mean_at_k"] == pytest.approx(by_hand.value)
    assert (avg["mean_at_k_low"], avg["mean_at_k_high"]) == pytest.approx((by_hand.low, by_hand.high), rel=1e-9)
    long = long_table(t2, ["model", "dataset", "method"], ["mean_at_k", "maj_at_k"])
    assert long[["low", "high"]].notna().all().all()
    assert (long["low"] < long["value"]).all() and (long["value"] < long["high"]).all()


def test_table6_token_means_bootstrap_the_questions_with_such_a_reply():
    outputs = make_outputs()
    # SDRL-freq (N = 5) on 12 questions, two threads, rounds 0 and 1: seat s of question i is right
    # where (i + s + round) % 3 > 0, its reply 100 + 7 i + s tokens when right, 300 + i when wrong
    outputs.__dict__["turns"] = pd.DataFrame(
        [
            {
                "question_id": f"q{i}",
                "dataset": TOY,
                "protocol": "sdrl_n5",
                "thread": thread,
                "round": rnd,
                "agent": f"#{s}",
                "agent_index": s,
                "agent_config": "sdrl",
                "call": 0,
                "answer": "x",
                "correct": (i + s + rnd) % 3 > 0,
                "parse_failed": False,
                "completion_tokens": 100 + 7 * i + s if (i + s + rnd) % 3 > 0 else 300 + i,
            }
            for i in range(12)
            for thread in (0, 1)
            for rnd in (0, 1)
            for s in range(5)
        ],
        columns=TURN_COLUMNS,
    )
    t6 = sdrl_rounds.table6(outputs, sdrl.debate_infos(outputs))
    turns = outputs.turns[outputs.turns["round"] == 0]
    for kind, right in (("correct", turns["correct"]), ("incorrect", ~turns["correct"])):
        expected = intervals.mean_estimate(
            turns.loc[right, "completion_tokens"].astype(float), clusters=turns.loc[right, "question_id"]
        )
        row = t6[t6["round"] == 0].iloc[0]
        assert row[f"{kind}_tokens"] == pytest.approx(expected.value)
        assert (row[f"{kind}_tokens_low"], row[f"{kind}_tokens_high"]) == pytest.approx((expected.low, expected.high))
    cells = sdrl_rounds.table6_cells(t6)
    assert cells[["low", "high"]].notna().all().all() and len(cells) == 4
    assert (cells["low"] < cells["value"]).all() and (cells["value"] < cells["high"]).all()


def test_vs_paper_rows_carry_the_run_interval(wide, tmp_path):
    outputs, result, _ = wide
    stage.evaluate_paper("sdrl", outputs, tmp_path)
    vs = pd.read_csv(tmp_path / "table1_vs_paper.csv")
    dapo = vs[(vs["model"] == "Q3-4B-Base") & (vs["dataset"] == "math500") & (vs["method"] == "DAPO")]
    dapo = dapo.set_index("metric")
    for metric in ("maj", "debate", "delta"):
        run = cell(result, "table1", metric, dataset="math500", method="DAPO", n_agents=5)
        run_interval = (dapo.loc[metric, "run_low"], dapo.loc[metric, "run_high"])
        assert run_interval == pytest.approx((run["low"], run["high"]), abs=0.006)  # the CSV keeps 2 decimals
    # the paper's Maj 86.9 lies in the run's interval, its Debate 83.1 far above the run's 61.7
    assert dapo.loc["maj", "run_low"] < 86.9 < dapo.loc["maj", "run_high"] and dapo.loc["maj", "paper_in_interval"]
    assert dapo.loc["debate", "run_high"] < 83.1 and not dapo.loc["debate", "paper_in_interval"]
    # a cell the run lacks (aime24) has neither a value nor an interval
    assert vs.loc[vs["dataset"] == "aime24", ["run_value", "run_low", "run_high"]].isna().all().all()
    mean_at_k = pd.read_csv(tmp_path / "table2_vs_paper.csv")
    dapo_k = mean_at_k[(mean_at_k["model"] == "Q3-4B-Base") & (mean_at_k["dataset"] == "math500")]
    dapo_k = dapo_k[dapo_k["method"] == "DAPO"].set_index("metric")
    maj_at_k = (dapo_k.loc["maj_at_k", "run_low"], dapo_k.loc["maj_at_k", "run_high"])
    assert maj_at_k == pytest.approx(_exact_percent(1, 2), abs=0.006)


def test_threads_that_agree_on_every_question_make_a_count_of_questions_with_the_exact_interval():
    """Two threads answering alike on 12 questions: Maj right on 9 and Debate on all 12 are counts of
    questions (Clopper-Pearson: never [100, 100] at 100 %), and Δ the exact paired interval (3
    discordant questions); once a thread differs on a question, the bootstrap over questions."""
    maj = np.arange(12) % 4 != 0
    rows = pd.DataFrame(
        {
            "dataset": TOY,
            "question_id": np.tile([f"q{i:02d}" for i in range(12)], 2),
            "thread": np.repeat([0, 1], 12),
            "maj": np.tile(maj, 2),
            "debate": True,
        }
    )
    estimates = sdrl.cell_estimates(rows, ["maj", "debate"], thread="thread")
    assert (estimates["maj"].low, estimates["maj"].high) == pytest.approx(_exact_percent(9, 12))
    assert (estimates["debate"].low, estimates["debate"].high) == pytest.approx(_exact_percent(12, 12))
    assert estimates["debate"].low < 100
    delta = sdrl.difference_estimate(rows, "debate", "maj", thread="thread")
    exact = intervals.paired_accuracy_difference(np.ones(12, bool), maj).scaled(100)
    assert (delta.value, delta.low, delta.high) == pytest.approx((25.0, exact.low, exact.high))
    differ = rows.assign(maj=rows["maj"] & ~((rows["thread"] == 1) & (rows["question_id"] == "q01")))
    bootstrapped = sdrl.cell_estimates(differ, ["maj"], thread="thread")["maj"]
    assert "bootstrap" in bootstrapped.method
