"""Zero-shot stage throughput on a bundled model.

Prints
  (a) stage overhead: the zero-shot stage's wall time / raw backend.generate time on exactly the
      batches the stage sends;
  (b) batching speed-up: a one-request-at-a-time loop on the same backend / the batched stage;
and tokens per second of each.

Each timed part runs --repeats times (default: 3 on a GPU, 1 on CPU) and its median is printed,
with the single runs. With --warmup (auto: on a GPU only) each part first runs once untimed on
the same requests, as the first CUDA calls on new shapes cost seconds; on CPU there is no such
first-call cost and a warm-up would double a long run. Every stage run starts from an empty
generation cache, and with vLLM every timed run starts from an empty prefix cache.

  python benchmarks/zero_shot_throughput.py [--backend transformers|vllm] [--model smollm2-135m-instruct|tiny-random-llama]
        [--questions 16] [--max-tokens 64] [--batch-size 16] [--threads N]
        [--warmup auto|on|off] [--repeats N]

Options, backend and timing helpers are shared with debate_throughput.py (`timing.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from timing import (  # noqa: E402  (the script's folder is on sys.path)
    add_common_args,
    cold_prefixes,
    device_of,
    load_backend,
    median,
    runs_note,
    timed,
    timing_plan,
)

from debatelab import prompts  # noqa: E402
from debatelab.data import load_benchmark  # noqa: E402
from debatelab.llm import GenerationCache, GenerationRequest  # noqa: E402
from debatelab.llm.agent import AgentSpec  # noqa: E402
from debatelab.llm.base import sample_seed  # noqa: E402
from debatelab.zero_shot import ZeroShotSettings, run_zero_shot, select_questions  # noqa: E402

# --------------------------------------------------------------------------- the benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    args = ap.parse_args()

    backend = load_backend(args)
    device = device_of(backend)
    warmup, repeats = timing_plan(args, device)
    questions = select_questions(load_benchmark("asdiv", "test", source="offline"), args.questions, seed=0)
    agent = AgentSpec(name="bench", model=args.model, temperature=0.7, max_tokens=args.max_tokens)
    settings = ZeroShotSettings(samples=1, batch_size=args.batch_size * 4, estimators=(), show_progress=False)

    # The exact units the stage sends (one sample per request, with the stage's derived seed), in
    # the batches `generate_cached` cuts them into.
    sampling = agent.sampling(seed=settings.seed, logprobs=True)
    chats = [prompts.question_messages(r, agent.system_prompt) for r in questions.to_dict("records")]
    units = [
        GenerationRequest(messages=c, sampling=dataclasses.replace(sampling, seed=sample_seed(settings.seed, 0, c)))
        for c in chats
    ]
    batches = [units[i : i + settings.batch_size] for i in range(0, len(units), settings.batch_size)]

    print(
        f"model={args.model} questions={len(units)} max_tokens={args.max_tokens} batch_size={args.batch_size} "
        f"backend={args.backend} device={device} threads={torch.get_num_threads()} "
        f"warmup={'on' if warmup else 'off'} repeats={repeats}",
        flush=True,
    )

    backend.generate(units[:2])  # model warm-up: first-call allocations are no part's cost

    def cold() -> None:
        cold_prefixes(backend)

    raw_s, raw_tokens = timed(
        lambda _: sum(g[0].completion_tokens for batch in batches for g in backend.generate(batch)),
        cold,
        warmup=warmup,
        repeats=repeats,
    )
    print(
        f"raw backend.generate : {median(raw_s):8.2f} s  {median(raw_tokens) / median(raw_s):8.1f} tok/s  "
        f"({runs_note(raw_s)})",
        flush=True,
    )

    with tempfile.TemporaryDirectory() as cache_root:

        def empty_cache() -> GenerationCache:
            cold()
            return GenerationCache(tempfile.mkdtemp(dir=cache_root))

        stage_s, stage_tokens = timed(
            lambda cache: int(
                run_zero_shot(questions, agent, backend, cache, settings, "asdiv")["completion_tokens"].sum()
            ),
            empty_cache,
            warmup=warmup,
            repeats=repeats,
        )
    print(
        f"zero-shot stage      : {median(stage_s):8.2f} s  {median(stage_tokens) / median(stage_s):8.1f} tok/s  "
        f"({runs_note(stage_s)})",
        flush=True,
    )

    loop_s, loop_tokens = timed(
        lambda _: sum(backend.generate([unit])[0][0].completion_tokens for unit in units),
        cold,
        warmup=warmup,
        repeats=repeats,
    )
    print(
        f"one request at a time: {median(loop_s):8.2f} s  {median(loop_tokens) / median(loop_s):8.1f} tok/s  "
        f"({runs_note(loop_s)})"
    )

    print(f"(a) stage / raw backend time      = {median(stage_s) / median(raw_s):.3f} (median of {repeats})")
    print(f"(b) sequential loop / batched stage = {median(loop_s) / median(stage_s):.2f}x (median of {repeats})")


if __name__ == "__main__":
    main()
