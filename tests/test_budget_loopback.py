"""budget_usd against the loopback OpenAI-compatible server (`vllm serve` of the tiny model), through a
recording proxy that counts the requests: the real zero_shot rule stops cleanly between generation
units, keeps every finished unit in the cache and names spent, cap and how to raise it; the rerun with
a higher cap sends only the missing requests; the dry run prints its estimate and warns past the cap."""

from __future__ import annotations

import pandas as pd
import pytest
from test_openai_backend import SERVED_NAME, FaultProxy, server  # noqa: F401 (the module's fixture)
from workflow_helpers import snakemake

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# dollars per million tokens, large so that the tiny model's few tokens cost cents
PRICE = "{input_per_mtok: 1000, output_per_mtok: 4000}"


def _config(path, url: str, cap: float) -> None:
    path.write_text(
        "experiment: budget\n"
        "datasets: {asdiv: {split: test, limit: 3}}\n"
        f"models: {{tiny-random-llama: {{source: 'bundled:tiny-random-llama', price: {PRICE}}}}}\n"
        f"agents: {{alice: {{model: tiny-random-llama, backend: openai, max_tokens: 6, backend_options: "
        f"{{base_url: '{url}/v1', served_model_name: {SERVED_NAME}, max_concurrency: 1}}}}}}\n"
        "zero_shot: {samples: 2, batch_size: 2, estimators: []}\n"
        f"budget_usd: {cap}\n"
    )


def test_a_capped_job_stops_between_units_and_a_higher_cap_sends_only_the_missing_requests(server, tmp_path):  # noqa: F811
    target = "results/budget/zero_shot/asdiv/alice.parquet"
    summary = "results/budget/summary/zero_shot.csv"
    cache = tmp_path / "results/budget/cache/tiny-random-llama"
    with FaultProxy(server) as proxy:
        config = tmp_path / "budget.yaml"
        _config(config, proxy.url, cap=0.3)
        generations = lambda: [p for p in proxy.paths if p.endswith("/chat/completions")]  # noqa: E731

        dry = snakemake(tmp_path, "--configfile", str(config), "-n", target)
        said = dry.stdout + dry.stderr
        # 3 questions × 2 samples × (200 prompt × $1,000 + 6 reply × $4,000) per million = $1.34
        assert "cost estimate" in said and "$1.34" in said and "passes the cap" in said
        assert generations() == []  # a dry run sends nothing

        failed = snakemake(tmp_path, "--configfile", str(config), "--cores", "1", target, check=False, timeout=600)
        assert failed.returncode != 0 and not (tmp_path / target).exists()
        log = (tmp_path / "logs/budget/zero_shot/asdiv/alice.log").read_text()
        assert "BudgetExceeded" in log and "of its cap budget_usd = $0.3000" in log, log[-3000:]
        assert "raise budget_usd" in log and "only the missing requests are sent" in log
        sent_first = len(generations())
        parts = list(cache.glob("part-*.parquet"))
        assert 1 <= sent_first < 6 and sent_first % 2 == 0  # whole units only, and not all three
        assert len(parts) == sent_first // 2  # every unit sent is cached
        assert all(len(pd.read_parquet(p)) == 2 for p in parts)
        stop = next(line for line in log.splitlines() if "budget: " in line)

        proxy.paths = []
        snakemake(
            tmp_path, "--configfile", str(config), "--config", "budget_usd=100", "--cores", "1", target, summary,
            timeout=600,
        )  # fmt: skip
        assert len(generations()) == 6 - sent_first  # only the missing requests
    answers = pd.read_parquet(tmp_path / target)
    assert len(answers) == 6
    table = pd.read_csv(tmp_path / summary)
    expected = (answers["prompt_tokens"].sum() * 1000 + answers["completion_tokens"].sum() * 4000) / 1e6
    assert table.loc[0, "cost_usd"] == pytest.approx(expected, rel=1e-5)
    print(f"\n{stop}\nrequests: {sent_first} before the stop, {6 - sent_first} after raising the cap")
    print(f"\nloopback cost table (n = {answers['question_id'].nunique()} questions):\n{table.to_csv(index=False)}")
