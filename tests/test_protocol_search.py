"""The Optuna TPE protocol search: planted optimum, determinism, resume, shared studies, early stopping."""

from __future__ import annotations

import dataclasses

import numpy as np
import optuna
import pandas as pd
import pytest

from debatelab.confidence import search as S
from debatelab.confidence.streams import StreamArrays, stream_arrays, synthetic_streams


def _planted_cga(n: int = 400, seed: int = 0, thresholds=(1.0, -1.0)) -> StreamArrays:
    """Agent i's debate answer is right exactly when its logit confidence rose by more than
    thresholds[i], so CGA's best τ_i is thresholds[i]."""
    rng = np.random.default_rng(seed)
    pred = np.zeros((n, 2, 2), dtype=int)
    conf = np.zeros((n, 2, 2))
    for i, threshold in enumerate(thresholds):
        gain = rng.uniform(-3, 3, n)
        switch_is_right = gain > threshold
        pred[:, i, 0] = np.where(switch_is_right, 1, 0)  # gold is 0
        pred[:, i, 1] = np.where(switch_is_right, 0, 2 + i)
        conf[:, i, 0] = 0.6
        conf[:, i, 1] = 1 / (1 + np.exp(-(np.log(1.5) + gain)))
    return StreamArrays(
        np.array([f"q{k}" for k in range(n)]),
        np.zeros(n, dtype=int),
        pred,
        conf,
        np.full(n, 4),
        np.array(["A", "B", "C", "D"], dtype=object),
    )


def _val_arrays(n=300, seed=0) -> StreamArrays:
    frame = synthetic_streams(n, seed)
    return stream_arrays(frame, "conf_seqprob")


def test_tpe_finds_a_planted_optimum(tmp_path):
    arrays = _planted_cga()
    settings = S.SearchSettings(trials=150, patience=150, lambda_anchor=0.01)
    result = S.tpe_search("cga", arrays, settings, storage_path=tmp_path / "j.log", label="planted", seed=3)
    # Agent 1's threshold decides its answers. Agent 2's errors are outvoted by the fusion over a
    # range of τ_2, so τ_2 is only checked through the objective.
    assert result.params["tau_1"] == pytest.approx(1.0, abs=0.3)
    assert S.objective_parts("cga", arrays, result.params, settings)["accuracy"] > 0.97
    planted = S.objective_parts("cga", arrays, {"tau_1": 1.0, "tau_2": -1.0}, settings)
    neutral = S.objective_parts("cga", arrays, {"tau_1": 0.0, "tau_2": 0.0}, settings)
    assert result.value <= planted["value"] + 1e-3
    assert result.value < neutral["value"] - 0.03


def test_tpe_learns_to_down_weight_a_confidently_wrong_agent(tmp_path):
    n = 200
    pred = np.zeros((n, 2, 2), dtype=int)
    pred[:, 1, :] = 1  # agent 2 always answers B (wrong) at 0.9, agent 1 always A (right) at 0.7
    conf = np.empty((n, 2, 2))
    conf[:, 0, :], conf[:, 1, :] = 0.7, 0.9
    arrays = StreamArrays(
        np.arange(n).astype(str), np.zeros(n, dtype=int), pred, conf, np.full(n, 2), np.array(["A", "B"], dtype=object)
    )
    settings = S.SearchSettings(trials=120, patience=120)
    assert S.objective_parts("wsv", arrays, {"w_1_0": 1, "w_2_0": 1, "w_1_1": 1, "w_2_1": 1}, settings)["accuracy"] == 0
    result = S.tpe_search("wsv", arrays, settings, storage_path=tmp_path / "j.log", label="wsv", seed=0)
    w = result.params
    assert S.objective_parts("wsv", arrays, w, settings)["accuracy"] == 1.0
    logit = lambda p: np.log(p / (1 - p))  # noqa: E731
    assert (w["w_2_0"] + w["w_2_1"]) * logit(0.9) < (w["w_1_0"] + w["w_1_1"]) * logit(0.7)


def test_search_is_repeatable_for_a_seed_and_differs_across_seeds(tmp_path):
    arrays = _val_arrays()
    settings = S.SearchSettings(trials=40, patience=40)
    first = S.tpe_search("hid", arrays, settings, storage_path=tmp_path / "a.log", label="x", seed=5)
    again = S.tpe_search("hid", arrays, settings, storage_path=tmp_path / "b.log", label="x", seed=5)
    other = S.tpe_search("hid", arrays, settings, storage_path=tmp_path / "c.log", label="x", seed=6)
    assert first.params == again.params and first.value == again.value
    pd.testing.assert_frame_equal(first.trials, again.trials)
    assert not first.trials["value"].equals(other.trials["value"])


def test_theta0_is_the_first_trial_and_best_value_is_the_running_minimum(tmp_path):
    result = S.tpe_search(
        "wsv",
        _val_arrays(),
        S.SearchSettings(trials=15, patience=15),
        storage_path=tmp_path / "j.log",
        label="x",
        seed=0,
    )
    first = result.trials.iloc[0]
    assert [first[f"param_w_{i}_{s}"] for s in (0, 1) for i in (1, 2)] == [1.0] * 4
    assert first["anchor"] == 0.0
    assert (result.trials["best_value"] == result.trials["value"].cummin()).all()
    assert result.value == result.trials["value"].min()


def test_a_rerun_continues_the_study_instead_of_redoing_trials(tmp_path):
    arrays = _val_arrays()
    journal = tmp_path / "j.log"
    short = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=12, patience=100), storage_path=journal, label="x", seed=1
    )
    longer = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=25, patience=100), storage_path=journal, label="x", seed=1
    )
    assert short.study_name == longer.study_name  # the budget is not part of the study's identity
    assert longer.n_trials == 25
    pd.testing.assert_frame_equal(
        longer.trials.iloc[:12].drop(columns="best_value"), short.trials.drop(columns="best_value")
    )
    # and the continued study is the one a single search of 25 draws (the sampler's state used to
    # start again at the seed on the rerun, so trials 13-25 and sometimes the best θ differed)
    fresh = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=25, patience=100), storage_path=tmp_path / "f.log", label="x", seed=1
    )
    pd.testing.assert_frame_equal(longer.trials, fresh.trials)
    assert (longer.params, longer.value) == (fresh.params, fresh.value)
    again = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=25, patience=100), storage_path=journal, label="x", seed=1
    )
    assert again.n_trials == 25  # nothing left to do


def test_a_journal_whose_last_line_was_cut_off_resumes_from_its_whole_trials(tmp_path):
    """A full disk or a node crash can cut the journal's last line. Optuna skipped it, appended the
    next trial onto it, and no later read of the study parsed (JSONDecodeError on every rerun). The
    journal is cut back to its last whole line: the 6 whole trials stay, the rerun adds the rest."""
    arrays = _val_arrays()
    journal = tmp_path / "j.log"
    six = S.tpe_search("cga", arrays, S.SearchSettings(trials=6, patience=100), storage_path=journal, label="x", seed=1)
    whole = journal.read_bytes()
    journal.write_bytes(whole + b'{"op_code": 5, "worker_id": "w", "trial_id": 6, "sta')  # a cut-off write
    longer = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=10, patience=100), storage_path=journal, label="x", seed=1
    )
    assert longer.n_trials == 10
    pd.testing.assert_frame_equal(
        longer.trials.iloc[:6].drop(columns="best_value"), six.trials.drop(columns="best_value")
    )
    again = S.tpe_search(
        "cga", arrays, S.SearchSettings(trials=10, patience=100), storage_path=journal, label="x", seed=1
    )
    assert again.n_trials == 10 and journal.read_bytes().startswith(whole)


def test_changed_data_or_objective_starts_a_new_study(tmp_path):
    journal = tmp_path / "j.log"
    base = S.tpe_search("cga", _val_arrays(seed=0), S.SearchSettings(trials=5), storage_path=journal, label="x", seed=1)
    data = S.tpe_search("cga", _val_arrays(seed=1), S.SearchSettings(trials=5), storage_path=journal, label="x", seed=1)
    objective = S.tpe_search(
        "cga",
        _val_arrays(seed=0),
        S.SearchSettings(trials=5, objective="f1_auarc"),
        storage_path=journal,
        label="x",
        seed=1,
    )
    assert len({base.study_name, data.study_name, objective.study_name}) == 3
    assert len(optuna.get_all_study_names(S.storage(journal))) == 3


def test_two_workers_share_one_study(tmp_path):
    result = S.tpe_search(
        "wsv",
        _val_arrays(),
        S.SearchSettings(trials=30, patience=1000, workers=2),
        storage_path=tmp_path / "j.log",
        label="x",
        seed=0,
    )
    study = optuna.load_study(study_name=result.study_name, storage=S.storage(tmp_path / "j.log"))
    numbers = [t.number for t in study.trials]
    assert len(numbers) == len(set(numbers))
    # each worker stops once the shared budget is reached: at most one trial in flight per worker beyond it
    assert 30 <= result.n_trials <= 31


def test_early_stopping_after_patience_trials_without_gain():
    assert not S.stalled([3.0, 2.0, 1.0], patience=2, min_delta=0.0)
    assert S.stalled([1.0, 2.0, 3.0], patience=2, min_delta=0.0)
    assert S.stalled([1.0, 0.99995, 0.99990], patience=2, min_delta=1e-4)  # gains below min_delta don't count


def test_search_stops_early_on_a_flat_objective(tmp_path):
    arrays = _val_arrays()
    # the debate changed nothing: no θ can change the outcome, and the anchor is off
    pred = arrays.pred.copy()
    pred[:, :, 1] = pred[:, :, 0]
    arrays = dataclasses.replace(arrays, pred=pred, conf=np.full_like(arrays.conf, 0.5))
    result = S.tpe_search(
        "cga",
        arrays,
        S.SearchSettings(trials=100, patience=10, lambda_anchor=0.0),
        storage_path=tmp_path / "j.log",
        label="x",
        seed=0,
    )
    assert result.stopped_early and result.n_trials == 11


def test_f1_auarc_objective_rewards_discrimination():
    arrays = _val_arrays()
    settings = S.SearchSettings(objective="f1_auarc", lambda_ece=0.0, lambda_anchor=0.0)
    parts = S.objective_parts("wsv", arrays, {"w_1_0": 1, "w_2_0": 1, "w_1_1": 1, "w_2_1": 1}, settings)
    assert parts["value"] == pytest.approx(-(parts["f1"] + parts["auarc"]))
    with pytest.raises(ValueError, match="objective must be one of"):
        S.SearchSettings(objective="accuracy")
