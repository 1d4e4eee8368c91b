"""SDRL's evaluation (spec 003 §7-§9) on hand-made stage outputs: every value below is worked out by
hand from the fixture, so a wrong vote, average, K or method mapping fails."""
from __future__ import annotations

import yaml

from debatelab.config import Experiment, validate_config
from workflow_helpers import REPO_ROOT

import math

import numpy as np
import pandas as pd
import pytest

from debatelab.evaluation import stage
from debatelab.evaluation.papers import sdrl
from debatelab.evaluation.run import (QUESTION_COLUMNS, TURN_COLUMNS, ZERO_SHOT_COLUMNS, ProtocolInfo, RunInfo,
                                     RunOutputs)

TOY, TOY2 = "toy", "toy2"  # stand in for math500 (K = 4) and amc23 (K = 32)
# every fixture model stands for the paper's Qwen3-4B-Base (Table 5 and 6 are on it only)
BACKBONES = {"sdrl": {"m-base": "Q3-4B-Base", "m-dapo": "Q3-4B-Base", "m-sdrl": "Q3-4B-Base"}}
AGENT_MODELS = {"base": "m-base", "dapo": "m-dapo", "sdrl": "m-sdrl"}
GOLD = {"q1": "4", "q2": "7", "q3": "2"}


def protocol(name, kind, agent, model, n, runs=(), threads=1, rounds=1):
    return ProtocolInfo(name=name, kind=kind, rounds=rounds, threads=threads, template="choi",
                        participants=(agent,) * n, models=(model,) * n, adversarial=0, trained_runs=tuple(runs),
                        datasets=(TOY, TOY2))


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


def _questions() -> pd.DataFrame:
    rows = []
    for (name, dataset), threads in OUTCOMES.items():
        info = next(p for p in PROTOCOLS if p.name == name)
        qids = ["q3"] if dataset == TOY2 else ["q1", "q2"]
        for thread, outcomes in threads.items():
            for qid, (pre, correct) in zip(qids, outcomes):
                rows.append({"question_id": qid, "dataset": dataset, "protocol": name, "kind": info.kind,
                             "thread": thread, "n_agents": info.n_agents, "correct": correct, "parse_failed": False,
                             "rounds_used": 1, "ncomm": 0, "total_tokens": 0, "pre_correct": pre,
                             "pre_unanimous": False, "pre_n_correct": 0, "answers_by_round": "[]", "task_type": "math"})
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
                rows.append({"question_id": qid, "dataset": dataset, "protocol": name, "thread": thread, "round": rnd,
                             "agent": f"#{i}", "agent_index": i, "agent_config": info.participants[i], "call": 0,
                             "answer": answer, "correct": answer == GOLD[qid], "parse_failed": answer is None,
                             "completion_tokens": tokens(answer, GOLD[qid], i)})
    return pd.DataFrame(rows, columns=TURN_COLUMNS)


def _zero_shot() -> pd.DataFrame:
    rows = [{"question_id": qid, "dataset": dataset, "agent": agent, "sample": k, "answer": a,
             "correct": a == GOLD[qid], "completion_tokens": 10}
            for (dataset, agent, qid), answers in SAMPLES.items() for k, a in enumerate(answers)]
    return pd.DataFrame(rows, columns=ZERO_SHOT_COLUMNS)


def make_outputs(training: dict | None = None, backbones: dict = BACKBONES) -> RunOutputs:
    runs = {"dapo": RunInfo("dapo", "dapo", {"method": "dapo"}),
            "sdrl_freq": RunInfo("sdrl_freq", "sdrl", {"method": "sdrl", "pair_mode": "freq", "steps": 125})}
    outputs = RunOutputs(experiment="fixture", protocols={p.name: p for p in PROTOCOLS}, runs=runs,
                         paper_datasets={TOY: "math500", TOY2: "amc23"},
                         agent_runs={"base": None, "dapo": "dapo", "sdrl": "sdrl_freq"},
                         model_backbones=backbones, agent_models=AGENT_MODELS)
    outputs.__dict__["questions"] = _questions()
    outputs.__dict__["turns"] = _turns()
    outputs.__dict__["zero_shot"] = _zero_shot()
    outputs.__dict__["training"] = training if training is not None else {"sdrl_freq": pd.DataFrame({
        "step": [1, 2, 3], "accuracy": [0.2, 0.3, 0.4], "debate_accuracy": [0.5, np.nan, 0.5],
        "debate_groups": [2, 0, 2], "debate_groups_kept": [2, 0, 1]})}
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


def test_agents_map_to_the_method_of_the_run_that_trained_their_model():
    outputs = make_outputs()
    assert sdrl.agent_methods(outputs) == {"base": "Base", "dapo": "DAPO", "sdrl": "SDRL-freq"}
    # tests/configs/tiny.yaml, read the way the workflow reads it
    exp = Experiment(validate_config(yaml.safe_load((REPO_ROOT / "tests/configs/tiny.yaml").read_text())))
    tiny = RunOutputs.from_experiment(exp)
    assert sdrl.agent_methods(tiny) == {"alice": "Base", "bob": "Base", "carol": "SDRL-rand", "dave": "UDPO"}


def test_centralized_maj_is_the_hubs_round0_answer(result):
    # the plurality is right on both questions at round 0, the hub (agent 0) only on q2
    centralized = dict(dataset="math500", method="DAPO", topology="centralized", n_agents=3)
    assert cell(result, "table4", "maj", **centralized)["value"] == pytest.approx(50)
    assert cell(result, "table4", "delta", **centralized)["value"] == pytest.approx(50)
    assert cell(result, "table4", "maj", dataset="math500", method="DAPO", topology="decentralized",
                n_agents=5)["value"] == pytest.approx(25)


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
    training = [c for c in claims_of(result, "§9.3") if c.statement.startswith("debate-turn")]
    assert len(training) == 1 and training[0].value == pytest.approx(20) and training[0].holds is True
    assert training[0].n == 2  # step 2 sampled no debate turn
    dropped = [c for c in claims_of(result, "§9.3") if "dropped" in c.statement][0]
    assert dropped.value == pytest.approx(0.25) and dropped.holds is None
    rises = [c for c in claims_of(result, "§9.4") if "Maj" in c.statement]
    assert len(rises) == 1 and rises[0].value == pytest.approx(100) and rises[0].holds is True and rises[0].n == 6
    longer = [c for c in claims_of(result, "§9.4") if "longer" in c.statement and c.scope == f"{TOY}, SDRL-freq"]
    assert longer[0].value == pytest.approx(400 - 113.75) and longer[0].holds is True
    delta = [c for c in claims_of(result, "§9.5") if "Δ" in c.statement and c.scope == f"{TOY}, N=5"]
    assert delta[0].value == pytest.approx(25 - 50) and delta[0].holds is False
    single = [c for c in claims_of(result, "§9.5") if "single-agent" in c.statement and c.scope == TOY]
    assert single[0].value == pytest.approx(50 - 62.5) and single[0].holds is False


def test_training_claims_say_why_when_untestable():
    outputs = make_outputs(training={"sdrl_freq": pd.DataFrame({"step": [1, 2], "accuracy": [0.1, 0.2]})})
    training = [c for c in sdrl._training_claims(outputs) if c.statement.startswith("debate-turn")][0]
    assert training.holds is None and math.isnan(training.value) and "debate_accuracy" in training.detail


def test_evaluate_paper_writes_tables_comparisons_and_claims(tmp_path):
    out = tmp_path / "out"
    stage.evaluate_paper("sdrl", make_outputs(), out)
    for name in ("table1.csv", "table1_vs_paper.csv", "table2_vs_paper.csv", "table6_vs_paper.csv", "claims.csv",
                 "fig1_accuracy_by_round.png"):
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
    assert budget.loc[(budget["method"] == "SDRL-freq") & (budget["steps"] == 125) & (budget["dataset"] == "math500")
                      & (budget["metric"] == "maj"), "run_value"].tolist() == [75.0]
    claims = pd.read_csv(out / "claims.csv", keep_default_na=False)
    assert {"yes", "no", "n/a"} <= set(claims["holds"])


def test_a_reduced_budget_run_fills_table5_beside_the_full_run_and_stays_out_of_table1():
    """Table 5 (App. D.2): SDRL-freq trained 125 and 200 steps, both at N = 5. Table 1 takes the
    200-step run (its name sorts last, so a name order would pick the 125-step one); Table 5 keeps both."""
    outputs = make_outputs(backbones={"sdrl": {**BACKBONES["sdrl"], "m-sdrl200": "Q3-4B-Base"}})
    full = protocol("sdrl_z200_n5", "all_to_all", "sdrl200", "m-sdrl200", 5, ["sdrl_freq_200"])
    outputs.protocols[full.name] = full
    outputs.runs["sdrl_freq_200"] = RunInfo("sdrl_freq_200", "sdrl", {"method": "sdrl", "pair_mode": "freq",
                                                                       "steps": 200})
    extra = pd.DataFrame([{**outputs.questions.iloc[0].to_dict(), "question_id": qid, "dataset": TOY,
                           "protocol": full.name, "thread": 0, "pre_correct": False, "correct": True}
                          for qid in ("q1", "q2")])
    outputs.__dict__["questions"] = pd.concat([outputs.questions, extra], ignore_index=True)
    result = sdrl.evaluate(outputs)
    # the 200-step run: Maj 0 / 2, Debate 2 / 2 on toy (math500); the 125-step run: Maj (100 + 50) / 2 = 75
    assert cell(result, "table1", "maj", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(0)
    assert cell(result, "table1", "debate", dataset="math500", method="SDRL-freq")["value"] == pytest.approx(100)
    assert cell(result, "table5", "maj", dataset="math500", method="SDRL-freq", steps=200)["value"] == pytest.approx(0)
    assert cell(result, "table5", "maj", dataset="math500", method="SDRL-freq", steps=125)["value"] == pytest.approx(75)
