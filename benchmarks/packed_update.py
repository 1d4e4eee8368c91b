"""One update (`BaseTrainer.update_policy`) with padded passes against packed ones (`packed_updates`),
and, with `--autocast`, float32 against bf16 autocast of the same update's forward.

The batch is an SDRL step on BoolQ as the workflow builds it: `--prompts` first-turn prompts
(`prompts.question_messages`: passage and question, 80-330 tokens with SmolLM2's template), each
with one reply, and as many debate prompts (`prompts.self_debate_messages`, two_turn: both earlier
replies shown), each with one reply. Reply lengths spread uniformly over 4..`--max-tokens` (seeded;
the bundled SmolLM2 replies to BoolQ at max_tokens 48 run 3-48 tokens); their tokens are real text
(other questions' passages), not generations. LoRA r 16 on every linear layer, float32, one
mini-batch of all sequences (on-policy: no π_old pass), `--micro-batch` sequences a pass, no KL.
The modes alternate (A B A B ...) after one warm-up each; each line gives the median of `--repeats`.
tokens/s counts real tokens (prompt + reply) of the batch per second of update.

  python benchmarks/packed_update.py [--prompts 8] [--max-tokens 256] [--micro-batch 8] [--repeats 5]
        [--threads 2] [--autocast]

Measured (2026-11-27, 2 CPU cores shared with a background Snakemake run and other jobs, load
average 3-10, torch 2.13, transformers 5.19, SmolLM2-135M-Instruct, float32):
`--prompts 3 --max-tokens 96 --micro-batch 6 --repeats 3 --threads 2`: 6 sequences, prompts
137-624 tokens, replies 12-75, 2319 real tokens; padded block 4194 tokens, packed 4 rows x 636 =
2544. Wall time is dominated by the machine's load (padded 92.9, 80.7, 20.5 s; packed 74.5, 20.2,
56.9 s; median ratio 1.42x); the same pass's forward/backward under torch.profiler, run back to
back: 71.5 CPU s padded, 44.9 CPU s packed (1.59x; matmuls 38.4 -> 23.7 s, attention 8.3 -> 4.1 s),
the loss identical to 6 digits. At 4 prompts / max-tokens 128 (8 sequences) one warm-up update
each: padded 300 s, packed 194 s (1.54x). The gain follows the padding removed (4194 / 2544 = 1.65
here); with `--autocast`, float32 against bf16 autocast (both packed).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from debatelab import prompts
from debatelab.data import load_benchmark
from debatelab.llm.chat import chat_prompt_ids
from debatelab.models import prepare_model
from debatelab.training import TrainSettings
from debatelab.training.core.policy import Policy
from debatelab.training.core.rollouts import Rollout
from debatelab.training.core.trainer import Trainer
from debatelab.zero_shot import select_questions


def sdrl_batch(tokenizer, rows, max_tokens: int, seed: int = 0) -> list[Rollout]:
    """First-turn and debate rollouts of `rows` (module docstring)."""
    rng = np.random.default_rng(seed)
    filler = tokenizer(" ".join(str(r["question"]) + " " + str(r.get("meta", "")) for r in rows))["input_ids"]

    def reply(k: int) -> tuple[list[int], str]:
        n = int(rng.integers(4, max_tokens + 1))
        start = int(rng.integers(0, max(len(filler) - n, 1)))
        ids = filler[start : start + n]
        return ids, tokenizer.decode(ids)

    out = []
    for k, row in enumerate(rows):
        first, second = reply(k), reply(k)
        turns = [
            prompts.question_messages(row, None),
            prompts.self_debate_messages(row, None, first[1], second[1], "two_turn"),
        ]
        for turn, messages in enumerate(turns, 1):
            ids, text = reply(k)
            out.append(
                Rollout(
                    question_id=str(row["id"]),
                    group=f"{row['id']}#{turn}",
                    turn=turn,
                    sample=0,
                    messages=tuple(messages),
                    text=text,
                    token_ids=ids,
                    finish_reason="stop",
                    answer=None,
                    correct=False,
                    reward=0.0,
                    advantage=float(rng.normal()),
                )
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--autocast", action="store_true", help="float32 against bf16 autocast (both packed)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = Path(args.models_dir) / args.model
    if not (model_dir / "config.json").exists():
        prepare_model(args.model, f"bundled:{args.model}", model_dir)
    rows = select_questions(load_benchmark("boolq", "validation", source="offline"), args.prompts, seed=0)
    settings = TrainSettings(
        learning_rate=1e-6,
        warmup_steps=0,
        mini_batch_size=2 * args.prompts,
        micro_batch_size=args.micro_batch,
        lora={"r": 16, "alpha": 32},
        dtype="float32",
        show_progress=False,
    )
    policy = Policy(model_dir, settings, device="cpu")
    policy.model.train()
    trainer = Trainer(rows, policy, settings, run="bench")
    batch = sdrl_batch(policy.tokenizer, rows.to_dict("records"), args.max_tokens)
    prompt_lengths = [len(chat_prompt_ids(policy.tokenizer, r.messages)) for r in batch]
    real = sum(prompt_lengths) + sum(r.length for r in batch)
    modes = {"padded": {"packed_updates": False}, "packed": {"packed_updates": True}}
    if args.autocast:
        modes = {"float32": {}, "bf16 autocast": {"autocast": True}}
    state = {k: v.detach().clone() for k, v in policy.model.state_dict().items()}
    trainer.settings = dataclasses.replace(settings, packed_updates=True)
    print("packed rows per pass:", [tuple(trainer._batch(m).packed[0].shape) for m in trainer.micro_batches(batch)])
    seconds = {name: [] for name in modes}
    cpu = {name: [] for name in modes}  # process CPU seconds: steadier than wall time on a shared machine
    for rep in range(args.repeats + 1):
        for name, change in modes.items():
            policy.model.load_state_dict(state)  # the same weights for every timed update
            trainer.settings = dataclasses.replace(settings, **change)
            start, start_cpu = time.perf_counter(), time.process_time()
            out = trainer.update_policy(batch, step=0)
            wall, used = time.perf_counter() - start, time.process_time() - start_cpu
            if rep:  # the first round warms up
                seconds[name].append(wall)
                cpu[name].append(used)
            print(f"\n  {name}: {wall:.2f} s ({used:.2f} CPU s), loss {out['loss']:.6f}", end="", flush=True)
    print()
    print(
        f"{len(batch)} sequences, prompts {min(prompt_lengths)}-{max(prompt_lengths)} tokens, replies "
        f"{min(r.length for r in batch)}-{max(r.length for r in batch)}, {real} real tokens; "
        f"padded block {len(batch) * (max(prompt_lengths) + max(r.length for r in batch))} tokens in one pass of all"
    )
    medians = {name: statistics.median(s) for name, s in seconds.items()}
    for name, s in seconds.items():
        print(
            f"{name}: {medians[name]:.2f} s median ({', '.join(f'{x:.2f}' for x in s)}), {real / medians[name]:.0f} tokens/s"
        )
    first, second = list(medians)
    print(f"{second} / {first} tokens/s: {medians[first] / medians[second]:.2f}x")


if __name__ == "__main__":
    main()
