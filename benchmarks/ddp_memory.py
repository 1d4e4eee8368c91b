"""Memory of data-parallel full fine-tuning: each process's peak after two AdamW steps of a model
through torch's DistributedDataParallel as DDP makes it by default (its reduction buckets beside the
gradients: a second copy of them) and as training makes it (`distributed.data_parallel`,
accelerate's wrapper with `gradient_as_bucket_view`: the gradients are views into the buckets).
`gpu_plan.training_state_bytes` counts one copy of the gradients.

Each wrapper runs in a launch of its own (`--processes` Gloo or NCCL processes, torchrun), as a
process's peak is a high-water mark: CUDA's max allocated, or the process's peak RSS on CPU. Prints
each process's peak, the model's weight bytes and the difference between the two.

  python benchmarks/ddp_memory.py [--model smollm2-135m-instruct|tiny-random-llama] [--processes 2]
        [--sequences 4] [--tokens 64] [--models-dir resources/models]

Measured (2026-11-28, 2 CPU cores, alone, torch 2.13, accelerate 1.15, SmolLM2-135M float32, 0.501
GiB of weights, 2 Gloo processes, 4 sequences x 64 tokens each, two runs): DDP's default peaks at
3.586 / 3.563 GiB (ranks 0 / 1; second run 3.599 / 3.567), training's wrapper at 3.183 / 3.172
(3.187 / 3.177): 0.39-0.41 GiB less a process, 0.78-0.82 x the weights, where a second copy of the
gradients would be 1 x (the rest of the peak, activations and transients, is common to both).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def peak_bytes(device: str) -> int:
    import resource

    import torch

    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def worker(args) -> None:
    """One process of a launch: two AdamW steps through the `--wrapper` DDP wrapper."""
    import torch
    from transformers import AutoModelForCausalLM

    from debatelab.training.core.distributed import data_parallel, default_device, init_process_group

    rank = init_process_group()
    device = default_device(rank)
    torch.manual_seed(rank)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    if args.wrapper == "ours":
        wrapped = data_parallel(model)
    else:
        wrapped = torch.nn.parallel.DistributedDataParallel(model)
    vocabulary = model.config.vocab_size
    for _ in range(2):  # DDP's gradients become bucket views from the second step on
        ids = torch.randint(0, vocabulary, (args.sequences, args.tokens), device=device)
        wrapped(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    print(json.dumps({"rank": rank, "peak": peak_bytes(device), "weights": weights}), flush=True)
    torch.distributed.destroy_process_group()


def launch(args, wrapper: str) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(args.processes)]
    cmd += ["--master_port", str(29650 + (wrapper == "ours")), __file__, "--worker", "--wrapper", wrapper]
    cmd += ["--model-dir", str(args.model_dir), "--sequences", str(args.sequences), "--tokens", str(args.tokens)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    return sorted(
        (json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")), key=lambda r: r["rank"]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", choices=["smollm2-135m-instruct", "tiny-random-llama"])
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--sequences", type=int, default=4, help="sequences per process and step")
    ap.add_argument("--tokens", type=int, default=64, help="tokens per sequence")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--wrapper", choices=["default", "ours"], help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    from debatelab.models import prepare_model

    args.model_dir = Path(args.models_dir) / args.model
    if not (args.model_dir / "config.json").exists():
        prepare_model(args.model, f"bundled:{args.model}", args.model_dir)
    runs = {wrapper: launch(args, wrapper) for wrapper in ("default", "ours")}
    gib = 2**30
    weights = runs["ours"][0]["weights"]
    print(f"{args.model}, float32 weights {weights / gib:.3f} GiB, {args.processes} processes, two AdamW steps")
    for wrapper, rows in runs.items():
        peaks = ", ".join(f"rank {r['rank']} {r['peak'] / gib:.3f}" for r in rows)
        print(f"  DDP {'default' if wrapper == 'default' else 'as training makes it (bucket views)'}: peak GiB {peaks}")
    saved = [d["peak"] - o["peak"] for d, o in zip(runs["default"], runs["ours"])]
    print("  saved per process: " + ", ".join(f"{s / gib:.3f} GiB ({s / weights:.2f} x the weights)" for s in saved))


if __name__ == "__main__":
    main()
