"""Launching test helpers in several Gloo processes (torchrun) and comparing what they saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def tests_path() -> str:
    """PYTHONPATH for a test's subprocess: this folder (its helper modules), then the caller's own
    PYTHONPATH (a checkout other than the installed one stays the one imported)."""
    return os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)


tests_path.__test__ = False  # a helper, though its name starts with "test": pytest collects none of its imports


def run_multi_agent_steps(
    method: str, model_dir, out_dir, finetuning: str = "lora", accelerate_config=None, counts=(1, 2)
) -> dict[int, tuple[dict, dict]]:
    """`multi_agent_ddp_step` in one process and in two (torchrun, Gloo; or `accelerate launch` with
    `accelerate_config`, a DeepSpeed or FSDP config): {processes: (rank 0's trained weights and
    gradients, {rank: its metrics and priorities})} for each process count of `counts`;
    `finetuning`: "lora" (an adapter per agent) or "full" (every agent's own weights)."""
    from safetensors.torch import load_file

    env = {**os.environ, "PYTHONPATH": tests_path(), "OMP_NUM_THREADS": "1", "DEBATELAB_TESTS_NO_DS_SHM": "1"}
    outs = {}
    for processes in counts:
        out = Path(out_dir) / f"{method}-{finetuning}-{processes}.safetensors"
        port = 29520 + processes + {"umad": 0, "udpo": 10, "rmaac": 20}[method] + (30 if finetuning == "full" else 0)
        if accelerate_config is not None:  # one process too: its engines over a group of one
            launcher = ["accelerate.commands.launch", "--config_file", str(accelerate_config), "--num_machines", "1"]
            launcher += ["--num_processes", str(processes), "--main_process_port", str(port + 40)]
        else:
            launcher = ["torch.distributed.run", "--nproc_per_node", str(processes), "--master_port", str(port)]
        cmd = [
            sys.executable,
            "-m",
            *launcher,
            "-m",
            "multi_agent_ddp_step",
            method,
            str(model_dir),
            str(out),
            finetuning,
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs[processes] = (
            load_file(out),
            {r: json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(processes)},
        )
    return outs


def assert_same_update(one: dict, two: dict, agents: set[str]) -> None:
    """Two processes' trained weights and last gradients match one process's."""
    import torch

    grads = [k for k in one if k.startswith("grad.")]
    assert {k.split("/")[0] for k in grads} == {f"grad.{a}" for a in agents}
    assert any(float(one[k].abs().max()) > 1e-4 for k in grads), "no gradient reached the adapters"
    for key in grads:  # the same gradient, up to the order of floating-point sums
        assert torch.allclose(one[key], two[key], rtol=1e-4, atol=1e-7), key
    # Adam's steps are about lr·m/√v (lr 1e-2 in the helper): where a gradient is near zero, the order of
    # floating-point sums moves an element's step by up to ~1e-5; an update on other gradients (one
    # process's half batch) moves them by ~lr
    for key in (k for k in one if not k.startswith("grad.")):
        assert torch.allclose(one[key], two[key], rtol=0, atol=1e-4), key


def assert_each_agent_wrapped_by_ddp(one: dict, reports: dict) -> None:
    """Every process of a multi-agent run without an engine has one accelerate DDP wrapper per agent,
    reducing exactly that agent's trained weights (`one`: the trained weights, `agent/name`)."""
    trained = {}
    for key, value in one.items():
        if not key.startswith("grad.") and not key.startswith("ref_") and not key.startswith("@"):
            agent = key.split("/")[0]
            trained[agent] = trained.get(agent, 0) + value.numel()
    for rank, report in reports.items():
        assert report["engines"] == {}, (rank, report["engines"])
        assert report["wrappers"] == {a: ["DistributedDataParallel", n] for a, n in trained.items()}, (rank, trained)


def one_sharded_update(model_dir, settings, rank: int, world: int):
    """In a launched process: a `Policy` of `settings` wrapped by the sharded engine the launcher's
    config asks for (`zero.wrap`), and one update on a sequence of this rank's own. Returns (policy,
    engine, the trainable weights whole before and after it, by name, and the forward's output)."""
    import torch

    from debatelab.training.core import zero
    from debatelab.training.core.policy import Policy

    policy = Policy(model_dir, settings, device="cpu")
    engine = zero.wrap(policy.model, policy.optimizer, settings, world)
    named = {n: p for n, p in policy.model.named_parameters() if p.requires_grad}
    before = zero.full_weights(engine, named)
    ids = torch.tensor([[5, 6, 7, 8 + rank]])
    engine.set_gradient_accumulation_boundary(True)
    output = engine(input_ids=ids, labels=ids)
    engine.backward(output.loss)
    engine.step()
    return policy, engine, before, zero.full_weights(engine, named), output
