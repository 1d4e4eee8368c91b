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


def _generate(backend, n: int, cache_root, budget=None, model: str = "api"):
    """`n` requests through the cache folder of `model`, in units of 2, asking `budget` before each."""
    return generate_cached(
        backend,
        _requests(n),
        GenerationCache(cache_root / model, budget=budget, model=model),
        batch_size=2,
        show_progress=False,
    )


def test_the_cap_stops_between_units_and_a_higher_cap_sends_only_the_missing_requests(tmp_path):
    cache_root = tmp_path / "cache"
    backend = PricedBackend()
    budget = Budget({"api": PRICE}, cap_usd=0.03, cache_root=cache_root, experiment="exp")
    with pytest.raises(BudgetExceeded) as stopped:
        _generate(backend, 10, cache_root, budget, "api")
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
        _generate(again, 10, cache_root, budget, "api")
    assert again.sent == 0  # the cached units' mean cost says the next would pass
    # a higher cap: only the missing requests go out
    more = PricedBackend()
    budget = Budget({"api": PRICE}, cap_usd=1.0, cache_root=cache_root, experiment="exp")
    out = _generate(more, 10, cache_root, budget, "api")
    assert more.sent == 6 and len(out) == 10
    assert budget.experiment_usd() == pytest.approx(10 * ONE)
    assert budget.job_usd == pytest.approx(10 * ONE) and budget.sent_usd == pytest.approx(6 * ONE)


def test_a_reached_cap_sends_nothing_and_a_free_model_is_never_stopped(tmp_path):
    cache_root = tmp_path / "cache"
    _generate(PricedBackend(), 4, cache_root)
    budget = Budget({"api": PRICE, "local": Price()}, cap_usd=0.02, cache_root=cache_root, experiment="exp")
    backend = PricedBackend()
    with pytest.raises(BudgetExceeded, match=r"spent \$0.0256 of its cap budget_usd = \$0.0200"):
        _generate(backend, 6, cache_root, budget, "api")
    assert backend.sent == 0
    local = PricedBackend()
    _generate(local, 6, cache_root, budget, "local")
    assert local.sent == 6


def test_the_per_job_cap_counts_the_jobs_cached_units_too(tmp_path):
    cache_root = tmp_path / "cache"
    _generate(PricedBackend(), 4, cache_root)
    budget = Budget({"api": PRICE}, job_cap_usd=0.03, cache_root=cache_root)
    backend = PricedBackend()
    with pytest.raises(BudgetExceeded, match=r"this job has spent \$0.0256 of its cap budget_per_job_usd"):
        _generate(backend, 10, cache_root, budget, "api")
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
    config = _config(cost_estimate={"prompt_tokens": 300}, zero_shot={"samples": 2, "estimators": []})
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
    text, over = estimate_message(_config(budget_usd=0.01, zero_shot={"samples": 2, "estimators": []}))
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


# --- GPU-hours: a local model priced by the GPU-hour ------------------------------------------------


def _benchmark(path, seconds):
    """A Snakemake benchmark file as the `benchmark:` directive writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
        f"{seconds}\t0:30:00\t100\t200\t50\t60\t0\t0\t50\t10\n"
    )
    return str(path)


def _plan(placement, shares, held=None):
    from debatelab.gpu_plan import GIB, GpuType, JobPlan

    return JobPlan("job", GpuType("h100", 80 * GIB, 8), 0.9, {}, placement, shares, held=held)


def test_a_jobs_gpu_cost_is_its_seconds_times_the_gpus_its_plan_gives_each_engine(tmp_path):
    from debatelab.cost import benchmark_seconds, engine_gpus, gpu_groups, groups_gpu_usd

    assert benchmark_seconds(_benchmark(tmp_path / "b.tsv", 1800.0)) == 1800.0
    (tmp_path / "bad.tsv").write_text("x\n1\n")
    with pytest.raises(ValueError, match="not a Snakemake benchmark file"):
        benchmark_seconds(tmp_path / "bad.tsv")
    # big on GPUs 0-3 alone; small (0.6) and other (0.3) share GPU 4 by their memory shares
    placement = {"big": [0, 1, 2, 3], "small": [4], "other": [4]}
    held = engine_gpus(placement, {"big": 0.9, "small": 0.6, "other": 0.3})
    assert held == pytest.approx({"big": 4.0, "small": 2 / 3, "other": 1 / 3})
    assert sum(held.values()) == pytest.approx(5.0)  # every GPU the job holds is paid for once
    plan = _plan(placement, {"big": 0.9, "small": 0.6, "other": 0.3})
    groups = gpu_groups(plan, {"big": ["big"], "small": ["small"], "other": ["o1", "o2"]}, [])
    assert groups == [[["big"], 4.0], [["small"], pytest.approx(2 / 3)], [["o1", "o2"], pytest.approx(1 / 3)]]
    prices = {"big": Price(gpu_hour=2.0), "small": Price(gpu_hour=3.0), "o1": Price(gpu_hour=1.0)}
    # half an hour; o1 and o2 (adapters on one engine) split theirs by tokens: 3 : 1; o2 has no price
    usd = groups_gpu_usd(1800.0, groups, prices, {"big": 1, "small": 0, "o1": 300, "o2": 100})
    assert usd["big"] == pytest.approx(0.5 * 4 * 2.0)  # its own engine: all its GPUs, whatever it generated
    assert usd["small"] == pytest.approx(0.5 * 2 / 3 * 3.0)
    assert usd["o1"] == pytest.approx(0.5 * 1 / 3 * 0.75 * 1.0) and usd["o2"] == 0
    # the laptop fallback (no placement, one GPU held): the job's local models split it by tokens
    assert gpu_groups(_plan({}, {}, held=1), {}, ["m", "m", "n"]) == [[["m", "n"], 1.0]]
    assert gpu_groups(_plan({}, {}), {}, []) == []  # remote models only: no GPU of theirs


def _zero_shot_frame(dataset="d", agent="a", model="local", n=2):
    return pd.DataFrame(
        {
            "dataset": dataset,
            "agent": agent,
            "model": model,
            "question_id": [f"q{i}" for i in range(n)],
            "correct": True,
            "parse_failed": False,
            "finish_reason": "stop",
            "conf_verbal": 0.5,
            "conf_seqprob": 0.5,
            "extra_tokens": 0,
            "prompt_tokens": 100,
            "completion_tokens": 50,
        }
    )


def test_the_summaries_add_the_jobs_gpu_hours_where_a_model_has_a_gpu_price(tmp_path):
    from debatelab.reporting.debate import debate_summary, gpu_job_costs
    from debatelab.reporting.zero_shot import zero_shot_summary

    prices = {"local": {"gpu_hour": 4.0}, "free": None}
    zs_bench = _benchmark(tmp_path / "benchmarks/zero_shot/d/a.tsv", 900.0)  # a quarter hour
    zs_jobs = [{"benchmark": zs_bench, "dataset": "d", "agent": "a", "groups": [[["local"], 2.0]]}]
    zero = _zero_shot_frame()
    summary = zero_shot_summary([zero, _zero_shot_frame(agent="b", model="free")], prices, zs_jobs).set_index("agent")
    assert summary.loc["a", "gpu_cost_usd"] == pytest.approx(0.25 * 2 * 4.0)  # 2 GPUs for 900 s at $4
    assert summary.loc["a", "cost_usd"] == pytest.approx(2.0)
    assert summary.loc["a", "cost_usd_per_question"] == pytest.approx(1.0)
    assert summary.loc["b", "cost_usd"] == 0  # no job of its in gpu_jobs, no price
    # without gpu_jobs (no gpu_hour price given, the rule's default): tokens only, as before
    assert zero_shot_summary([zero], prices)["cost_usd"].iloc[0] == 0

    def question(qid):
        return {
            "question_id": qid, "dataset": "d", "protocol": "mad", "kind": "all_to_all", "thread": 0,
            "correct": True, "parse_failed": False, "rounds_used": 1, "stopped_early": False, "ncomm": 2,
            "debate_calls": 1, "total_tokens": 10, "pre_correct": True, "pre_unanimous": False,
        }  # fmt: skip

    questions = pd.DataFrame([question("q0"), question("q1")])
    turns = pd.DataFrame(
        {
            "question_id": ["q0", "q0", "q1", "q1"],
            "dataset": "d",
            "protocol": "mad",
            "thread": 0,
            "round": [0, 1, 0, 1],
            "agent_config": "a",
            "parse_failed": False,
            "model": "local",
            "prompt_tokens": [100, 300, 100, 100],
            "completion_tokens": [50, 100, 50, 0],
        }
    )
    debate_bench = _benchmark(tmp_path / "benchmarks/debate/d/mad.tsv", 3600.0)
    debate_jobs = [{"benchmark": debate_bench, "dataset": "d", "protocol": "mad", "groups": [[["local"], 1.0]]}]
    zs_path = tmp_path / "a.parquet"
    zero.to_parquet(zs_path)
    gpu_usd, rates = gpu_job_costs([turns], prices, debate_jobs, zs_jobs, [zs_path])
    assert gpu_usd == {("d", "mad"): pytest.approx(4.0)}  # an hour on one GPU
    assert rates == {("d", "a"): pytest.approx(2.0 / 300)}  # the zero-shot job's $2 over its 300 tokens
    row = debate_summary([questions], [turns], prices, gpu_usd, rates).iloc[0]
    # the debate job's $4 plus each question's pre-debate answer (150 tokens × $2 / 300 = $1)
    assert row["gpu_cost_usd"] == pytest.approx(4.0 + 2 * 1.0)
    assert row["cost_usd"] == pytest.approx(6.0)
    # spread by the debate calls' tokens: q0 400 of 500 -> $3.2 + $1, q1 100 -> $0.8 + $1; mean $3
    assert row["mean_cost_usd"] == pytest.approx(3.0)
    assert debate_summary([questions], [turns], prices).iloc[0]["cost_usd"] == 0  # no GPU jobs: tokens only


def test_a_gpu_hour_price_makes_the_benchmark_files_the_summaries_inputs_and_no_price_leaves_the_dag(tmp_path):
    """Dry runs of the default config: without a `gpu_hour` price the summaries read what they read
    before (no benchmark file); with one, the zero_shot and debate jobs' benchmark files (outputs of
    those jobs) are their inputs."""
    from workflow_helpers import REPO_ROOT, snakemake

    targets = ["results/default/summary/zero_shot.csv", "results/default/summary/debate.csv"]
    config = str(REPO_ROOT / "config/config.yaml")

    def summary_inputs(*configs):
        out = snakemake(tmp_path, "--configfile", config, *configs, "-n", "-p", *targets).stdout
        jobs = out.split("rule summarize_")[1:]
        return {job.split(":")[0]: job.split("input: ")[1].split("\n")[0].split(", ") for job in jobs}

    plain = summary_inputs()
    assert not any(p.endswith(".tsv") for inputs in plain.values() for p in inputs)
    assert plain["zero_shot"] == [
        f"results/default/zero_shot/boolq/{a}.parquet" for a in ("smol_a", "smol_b", "smol_c", "smol_sdrl")
    ]
    priced = tmp_path / "gpu_price.yaml"
    priced.write_text(
        "models:\n  smollm2-135m-instruct: {source: 'bundled:smollm2-135m-instruct', dtype: float32, "
        "price: {gpu_hour: 2.5}}\n  smollm2-sdrl: {source: 'trained:sdrl'}\n"
    )
    gpu = summary_inputs(str(priced))
    assert "results/default/benchmarks/zero_shot/boolq/smol_a.tsv" in gpu["zero_shot"]
    assert "results/default/benchmarks/debate/boolq/mad.tsv" in gpu["debate"]
    assert "results/default/benchmarks/zero_shot/boolq/smol_a.tsv" in gpu["debate"]  # round 0's GPU time
    assert set(plain["debate"]) < set(gpu["debate"])


# --- the papers' tables where they compare cost --------------------------------------------------


def test_svr_mad_table1_and_its_cost_accuracy_plot_show_dollars_when_a_model_has_a_price(tmp_path):
    """SVR-MAD's Table 1 compares cost (NComm, Tok): with a price a USD cell beside Tok (mean dollars per
    non-unanimous question, from the turns as the debate summary prices them) and the plot's x in dollars;
    without one the paper's layout and tokens."""
    from test_evaluation import _outputs, _svr_questions

    from debatelab.evaluation import build_paper
    from debatelab.evaluation.papers import svr_mad

    questions, protocols = _svr_questions()
    # one call per question whose prompt is all of total_tokens, at $1 per million input tokens
    turns = questions.assign(
        round=0, agent_config="a", model="m", prompt_tokens=questions["total_tokens"], completion_tokens=0
    )
    turns.to_parquet(tmp_path / "turns.parquet")

    def outputs(prices):
        out = _outputs(protocols, questions=questions)
        out.turn_paths, out.prices = [tmp_path / "turns.parquet"], prices
        return out

    priced = build_paper("svr_mad", outputs({"m": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}))
    t1 = priced.tables["table1"].set_index("method")
    assert [c for c in t1.columns if c.startswith("gsm_symbolic")] == [
        "gsm_symbolic NComm", "gsm_symbolic Tok", "gsm_symbolic USD", "gsm_symbolic Acc",
    ]  # fmt: skip
    # SVR-MAD's non-unanimous q1, q2: (1,200 + 1,400) / 2 tokens at $1 per million
    assert t1.loc["SVR-MAD", "gsm_symbolic USD"] == pytest.approx(0.0013)
    assert t1.loc["S2-MAD", "gsm_symbolic USD"] == pytest.approx(0.0025)
    assert t1.loc["SVR-MAD", "gsm_symbolic Tok"] == 1.3  # the tokens stay
    cells = svr_mad.table1_cells(outputs({"m": {"input_per_mtok": 1.0}}))
    assert cells.set_index("method").loc["Self Consistency", "USD_all"] == pytest.approx(200e-6)  # all 3
    assert svr_mad.plot_cost_accuracy(cells, "x").axes[0].get_xlabel() == "dollars per question"
    # the comparison with the paper's numbers keeps its metrics (the paper publishes no dollars)
    assert "USD" not in set(priced.cells["table1"]["metric"])

    free = build_paper("svr_mad", outputs({}))
    assert not any(c.endswith("USD") for c in free.tables["table1"].columns)
    assert list(free.tables["table1"].columns) == [
        "method",
        "gsm_symbolic NComm",
        "gsm_symbolic Tok",
        "gsm_symbolic Acc",
    ]
    cells = svr_mad.table1_cells(outputs({"m": None}))  # a model without a price: tokens
    assert "USD" not in cells and svr_mad.plot_cost_accuracy(cells, "x").axes[0].get_xlabel().startswith("tokens")


def test_each_engine_of_a_plan_names_the_models_it_serves():
    """`gpu_plan.engine_models` names engines as `inference_needs` does: a model its own, the adapters
    of one base model their base's shared engine (beside the base's own engine when it debates too)."""
    from types import SimpleNamespace

    from debatelab.gpu_plan import engine_models

    agents = {"a": {"model": "base"}, "b": {"model": "lora1"}, "c": {"model": "lora2"}, "d": {"model": "lora1"}}
    exp = SimpleNamespace(agents=agents, adapter_base=lambda m: "base" if m.startswith("lora") else None)
    assert engine_models(exp, ["a", "b", "c", "d"]) == {"base": ["base"], "base with 2 adapters": ["lora1", "lora2"]}
    assert engine_models(exp, ["b"]) == {"base with 1 adapter": ["lora1"]}


class WordsBackend(Backend):
    """A token per word: every reply "The answer is \\boxed{7}." cut at max_tokens words, every score one
    log-probability per word of the reply."""

    model_id = "words"

    def generate(self, requests, progress=None):
        def words(messages):
            return sum(len(m["content"].split()) for m in messages)

        reply = "The answer is \\boxed{7}.".split()
        return [
            [
                Generation(
                    text=" ".join(reply[: r.sampling.max_tokens]),
                    prompt_tokens=words(r.messages),
                    completion_tokens=min(len(reply), r.sampling.max_tokens),
                    token_logprobs=[-0.1] * min(len(reply), r.sampling.max_tokens),
                )
                for _ in range(r.n)
            ]
            for r in requests
        ]

    def score(self, prompts, replies):
        from debatelab.llm.base import ScoredText

        return [
            ScoredText(
                token_logprobs=[-0.1] * len(reply.split()), prompt_tokens=sum(len(m["content"].split()) for m in p)
            )
            for p, reply in zip(prompts, replies)
        ]


def test_the_estimate_covers_what_the_cap_counts_confidence_elicitation_included(tmp_path):
    """One zero-shot run with both confidence estimators: the cap's count of its cache (every unit it
    paid for, the self-reports and scored answers too) is under the dry run's estimate, which an
    estimate of the answers alone is not (issue 72: $4.27 estimated, $8.41 counted)."""
    from toy_questions import toy_rows

    from debatelab.llm.agent import AgentSpec
    from debatelab.zero_shot.stage import ZeroShotSettings, run_zero_shot

    def configured(prompt_tokens):
        return _config(
            datasets={"boolq": {"limit": 3}},
            agents={"a": {"model": "api", "max_tokens": 6}},
            debate={"protocols": {}},
            zero_shot={"samples": 2, "estimators": ["verbal", "seqprob"], "verbal_samples": 3},
            cost_estimate={"prompt_tokens": prompt_tokens},
        )

    config = configured(1)
    settings = ZeroShotSettings.from_config(
        {k: config["zero_shot"][k] for k in ("samples", "estimators", "verbal_samples", "verbal_max_tokens")},
        show_progress=False,
    )
    questions = pd.DataFrame(toy_rows(3))
    cache = GenerationCache(tmp_path / "cache" / "api", model="api")
    answers = run_zero_shot(
        questions, AgentSpec(name="a", model="api", max_tokens=6), WordsBackend(), cache, settings, "boolq"
    )
    config = configured(int(answers["prompt_tokens"].max()))  # the estimate's prompt: the run's longest
    counted = Budget(model_prices(config), cap_usd=100, cache_root=tmp_path / "cache").experiment_usd()
    estimate = estimate_cost(config)
    answers_only = estimate.loc[estimate["who"] == "a", "usd"].sum()
    assert answers_only < counted <= estimate["usd"].sum()
    text, _ = estimate_message(config)
    assert f"${estimate['usd'].sum():.2f}" in text
