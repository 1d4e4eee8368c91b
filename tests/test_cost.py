"""Dollar cost (debatelab.cost): prices, the budget cap between generation units, the dry run's estimate.
The cap's scheduling is checked with a scripted backend here; tests/test_openai_backend.py (its budget test) runs the
real zero_shot rule against the loopback OpenAI-compatible server."""

from __future__ import annotations

import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from debatelab.config import ConfigError, validate_config
from debatelab.cost import Budget, BudgetExceeded, Price, estimate_cost, estimate_message, model_prices, tokens_usd
from debatelab.llm import GenerationCache, GenerationRequest, SamplingParams, generate_cached
from debatelab.llm.base import Backend, Generation


class PricedBackend(Backend):
    """Every generation: 1,000 prompt tokens (400 of them cached), 500 completion tokens."""

    model_id = "priced"

    def __init__(self):
        self.sent = 0

    def generate(self, requests, progress=None):
        self.sent += len(requests)
        return [
            [
                Generation(
                    text=f"{r.messages[-1]['content']}", completion_tokens=500, prompt_tokens=1000, cached_tokens=400
                )
            ]
            for r in requests
        ]

    def score(self, prompts, replies):
        raise NotImplementedError


PRICE = Price(input_per_mtok=2.0, output_per_mtok=10.0, cached_input_per_mtok=0.5)
# one generation: 600 × 2 + 400 × 0.5 + 500 × 10 = 6,400 per million = $0.0064
ONE = 0.0064


def _requests(k):
    return [
        GenerationRequest(messages=[{"role": "user", "content": f"q{i}"}], sampling=SamplingParams(seed=1))
        for i in range(k)
    ]


def test_a_generation_costs_its_input_cached_input_and_output_at_their_prices():
    assert PRICE.tokens_usd(1000, 500, 400) == pytest.approx(ONE)
    # no cached price: cached input is billed as input
    assert Price(input_per_mtok=2.0, output_per_mtok=10.0).tokens_usd(1000, 500, 400) == pytest.approx(0.007)
    frame = pd.DataFrame(
        {"model": ["api", "local", "api"], "prompt_tokens": [1000, 1000, 10], "completion_tokens": [500, 500, 0]}
    )
    usd = tokens_usd(frame, {"api": PRICE, "local": Price()})  # no cached_tokens column: none cached
    assert usd.tolist() == pytest.approx([0.007, 0.0, 0.00002])


def test_the_cap_stops_between_units_and_a_higher_cap_sends_only_the_missing_requests(tmp_path):
    cache_root = tmp_path / "cache"
    backend = PricedBackend()
    budget = Budget({"api": PRICE}, cap_usd=0.03, cache_root=cache_root, experiment="exp")
    with pytest.raises(BudgetExceeded) as stopped:
        generate_cached(
            backend,
            _requests(10),
            GenerationCache(cache_root / "api", budget=budget, model="api"),
            batch_size=2,
            show_progress=False,
        )
    # units of 2 cost $0.0128: after 2 units ($0.0256) a third would pass $0.03
    assert backend.sent == 4
    message = str(stopped.value)
    assert "$0.0256 of its cap budget_usd = $0.0300" in message
    assert "2 of 5 units done and cached, 6 generations left" in message
    assert "raise budget_usd" in message and "--config budget_usd=" in message
    assert len(list((cache_root / "api").glob("part-*.parquet"))) == 2

    # the same cap again: nothing is sent
    again = PricedBackend()
    budget = Budget({"api": PRICE}, cap_usd=0.03, cache_root=cache_root, experiment="exp")
    with pytest.raises(BudgetExceeded):
        generate_cached(
            again,
            _requests(10),
            GenerationCache(cache_root / "api", budget=budget, model="api"),
            batch_size=2,
            show_progress=False,
        )
    assert again.sent == 0  # the cached units' mean cost says the next would pass
    # a higher cap: only the missing requests go out
    more = PricedBackend()
    budget = Budget({"api": PRICE}, cap_usd=1.0, cache_root=cache_root, experiment="exp")
    out = generate_cached(
        more,
        _requests(10),
        GenerationCache(cache_root / "api", budget=budget, model="api"),
        batch_size=2,
        show_progress=False,
    )
    assert more.sent == 6 and len(out) == 10
    assert budget.experiment_usd() == pytest.approx(10 * ONE)
    assert budget.job_usd == pytest.approx(10 * ONE) and budget.sent_usd == pytest.approx(6 * ONE)


def test_a_reached_cap_sends_nothing_and_a_free_model_is_never_stopped(tmp_path):
    cache_root = tmp_path / "cache"
    generate_cached(
        PricedBackend(), _requests(4), GenerationCache(cache_root / "api"), batch_size=2, show_progress=False
    )
    budget = Budget({"api": PRICE, "local": Price()}, cap_usd=0.02, cache_root=cache_root, experiment="exp")
    backend = PricedBackend()
    with pytest.raises(BudgetExceeded, match=r"spent \$0.0256 of its cap budget_usd = \$0.0200"):
        generate_cached(
            backend,
            _requests(6),
            GenerationCache(cache_root / "api", budget=budget, model="api"),
            batch_size=2,
            show_progress=False,
        )
    assert backend.sent == 0
    local = PricedBackend()
    generate_cached(
        local,
        _requests(6),
        GenerationCache(cache_root / "local", budget=budget, model="local"),
        batch_size=2,
        show_progress=False,
    )
    assert local.sent == 6


def test_the_per_job_cap_counts_the_jobs_cached_units_too(tmp_path):
    cache_root = tmp_path / "cache"
    generate_cached(
        PricedBackend(), _requests(4), GenerationCache(cache_root / "api"), batch_size=2, show_progress=False
    )
    budget = Budget({"api": PRICE}, job_cap_usd=0.03, cache_root=cache_root)
    backend = PricedBackend()
    with pytest.raises(BudgetExceeded, match=r"this job has spent \$0.0256 of its cap budget_per_job_usd"):
        generate_cached(
            backend,
            _requests(10),
            GenerationCache(cache_root / "api", budget=budget, model="api"),
            batch_size=2,
            show_progress=False,
        )
    assert backend.sent == 0  # the cached units' mean says the first new one would pass


def test_cached_tokens_survive_the_cache_and_old_parts_read_zero(tmp_path):
    generate_cached(PricedBackend(), _requests(2), GenerationCache(tmp_path), batch_size=2, show_progress=False)
    assert {
        g.cached_tokens for g in GenerationCache(tmp_path).unit(next(iter(GenerationCache(tmp_path)._units))).values()
    } == {400}
    old = tmp_path / "old"
    old.mkdir()
    pq.write_table(
        pa.table({"unit": ["u"], "key": ["k"], "text": ["t"], "completion_tokens": [1], "prompt_tokens": [2]}),
        old / "part-old.parquet",
    )
    assert GenerationCache(old).unit("u")["k"].cached_tokens == 0
    # an old part (no cached_tokens column) counts at the input price
    assert Budget({"old": PRICE}, cap_usd=1, cache_root=tmp_path).experiment_usd() == pytest.approx((2 * 2 + 10) / 1e6)


def _config(**extra):
    config = {
        "experiment": "priced",
        "datasets": {"boolq": {"limit": 10}},
        "models": {
            "api": {"source": "bundled:tiny-random-llama", "price": {"input_per_mtok": 1.0, "output_per_mtok": 4.0}},
            "local": {"source": "bundled:tiny-random-llama"},
        },
        "agents": {
            "a": {"model": "api", "max_tokens": 100},
            "b": {"model": "api", "max_tokens": 100},
            "c": {"model": "local", "max_tokens": 100},
        },
        "zero_shot": {"samples": 2},
        "debate": {"protocols": {"mad": {"kind": "all_to_all", "rounds": 2, "participants": ["a", "b"]}}},
    }
    config.update(extra)
    return validate_config(config)


def test_the_estimate_is_questions_times_agents_times_rounds_times_expected_tokens():
    config = _config(cost_estimate={"prompt_tokens": 300})
    frame = estimate_cost(config).set_index(["stage", "who"])
    # zero-shot: 10 questions × 2 samples, 300 in and 100 out
    assert frame.loc[("zero_shot", "a"), "calls"] == 20
    assert frame.loc[("zero_shot", "a"), "usd"] == pytest.approx(20 * (300 * 1 + 100 * 4) / 1e6)
    assert frame.loc[("zero_shot", "c"), "usd"] == 0
    # debate: 10 questions × 1 thread × 2 rounds per seat; a call carries both seats' replies
    assert frame.loc[("debate", "mad:a"), "calls"] == 20
    assert frame.loc[("debate", "mad:a"), "prompt_tokens"] == 20 * (300 + 2 * 100)
    text, over = estimate_message(config)
    total = 2 * 20 * (300 + 400) / 1e6 + 2 * 20 * (500 + 400) / 1e6
    assert f"${total:.2f}" in text and not over
    text, over = estimate_message(_config(budget_usd=0.01))
    assert over and "passes the cap" in text and "budget_usd = $0.01" in text


def test_no_price_no_estimate_and_a_dataset_without_limit_is_named():
    config = _config()
    del config["models"]["api"]["price"]
    assert estimate_message(config) is None
    config = _config(datasets={"boolq": {"limit": None}})
    assert math.isnan(estimate_cost(config)["usd"].iloc[0])
    assert "datasets without a limit (boolq)" in estimate_message(config)[0]


@pytest.mark.parametrize(
    "where,value,says",
    [
        (("models", "api", "price", "input_per_mtok"), -1, "models.api.price.input_per_mtok"),
        (("models", "api", "price", "per_token"), 1, "per_token"),
        (("budget_usd",), "ten", "budget_usd"),
    ],
)
def test_a_bad_price_or_cap_is_refused_naming_the_key(where, value, says):
    config = _config()
    target = config
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with pytest.raises(ConfigError, match=says):
        validate_config(config)


def test_prices_come_from_the_config_and_default_to_free():
    prices = model_prices(_config())
    assert prices["api"] == Price(input_per_mtok=1.0, output_per_mtok=4.0)
    assert prices["local"] == Price() and not prices["local"].per_token


def test_the_summaries_show_dollars_per_question_protocol_and_in_the_paper_table():
    from debatelab.reporting.debate import debate_summary, debate_table_paper_layout
    from debatelab.reporting.zero_shot import zero_shot_summary

    prices = {"api": {"input_per_mtok": 1.0, "output_per_mtok": 4.0, "cached_input_per_mtok": 0.25}, "local": None}
    zero = pd.DataFrame(
        {
            "dataset": "d",
            "agent": ["a", "a", "c", "c"],
            "model": ["api", "api", "local", "local"],
            "question_id": ["q0", "q1", "q0", "q1"],
            "correct": True,
            "parse_failed": False,
            "finish_reason": "stop",
            "conf_verbal": 0.5,
            "conf_seqprob": 0.5,
            "extra_tokens": 0,
            "prompt_tokens": 1000,
            "completion_tokens": 100,
            "cached_tokens": [400, 0, 0, 0],
        }
    )
    summary = zero_shot_summary([zero], prices).set_index("agent")
    # q0: 600 + 400 × 0.25 + 400 = 1,100 per million; q1: 1,000 + 400 = 1,400
    assert summary.loc["a", "cost_usd"] == pytest.approx(2500 / 1e6)
    assert summary.loc["a", "cost_usd_per_question"] == pytest.approx(1250 / 1e6)
    assert summary.loc["c", "cost_usd"] == 0

    def question(qid, unanimous):
        return {
            "question_id": qid, "dataset": "d", "protocol": "mad", "kind": "all_to_all", "thread": 0,
            "correct": True, "parse_failed": False, "rounds_used": 1, "stopped_early": False, "ncomm": 2,
            "debate_calls": 2, "total_tokens": 10, "pre_correct": True, "pre_unanimous": unanimous,
        }  # fmt: skip

    questions = pd.DataFrame([question("q0", False), question("q1", True)])
    turns = pd.DataFrame(
        {
            "question_id": ["q0", "q0", "q1"],
            "dataset": "d",
            "protocol": "mad",
            "thread": 0,
            "round": [0, 1, 1],
            "parse_failed": False,
            "model": ["api", "api", "local"],
            "prompt_tokens": [1000, 2000, 5000],
            "completion_tokens": [100, 100, 100],
        }
    )
    summary = debate_summary([questions], [turns], prices)
    row = summary.iloc[0]
    # q0: (1,000 + 400) + (2,000 + 400) = 3,800 per million; q1 runs on the free local model
    assert row["cost_usd"] == pytest.approx(3800 / 1e6)
    assert row["mean_cost_usd"] == pytest.approx(1900 / 1e6)
    assert row["mean_cost_usd_non_unanimous"] == pytest.approx(3800 / 1e6)
    paper = debate_table_paper_layout(summary)
    assert paper.loc["mad", ("d", "USD")] == pytest.approx(0.0038)
    # without prices no USD column: the paper's own layout
    assert "USD" not in debate_table_paper_layout(debate_summary([questions], [turns])).columns.get_level_values(1)
