"""Debate stage throughput and SVR-MAD's token savings on a bundled model.

All three parts start from the same zero-shot (pre-debate) answers on ASDiv test questions.
Prints
  (a) stage overhead: an all_to_all debate run through `run_protocol` (engine + model pool +
      a fresh on-disk generation cache), wall time / raw backend.generate time on exactly the
      batches the stage sent (target ≤ 1.05);
  (b) engine speed-up: the same debate driven one question at a time with one request per
      backend call (as Du et al.'s reference code does) / the engine's time from (a) (target ≥ 5×);
  (c) SVR-MAD tokens / all-to-all tokens (rounds 2, early stop at 5 agreeing) with --svr-agents
      copies, with both accuracies, over all questions and over the non-unanimous ones
      (SVR-MAD's paper drops unanimous questions).

Each timed part runs --repeats times (default: 3 on a GPU, 1 on CPU) and its median is printed,
with the single runs; (a), (b) and (c) are computed from the medians. With --warmup (auto: on a
GPU only) each part first runs once untimed on the same requests, as the first CUDA calls on new
shapes cost seconds (a cold stage against a warm replay once gave (a) = 2.94 instead of ~0.97);
on CPU there is no such first-call cost and a warm-up would double a long run. Every run starts
from new debate states and an empty generation cache, and with vLLM from an empty prefix cache.

  python benchmarks/debate_throughput.py [--backend transformers|vllm] [--model smollm2-135m-instruct|tiny-random-llama]
        [--questions 16] [--agents 3] [--svr-agents 6] [--rounds 1] [--max-tokens 64] [--batch-size 16]
        [--threads N]  (on a CPU shared with other jobs, --threads 1 runs several times faster)
        [--warmup auto|on|off] [--repeats N]

The options, backend loading and `timed` are zero_shot_throughput.py's, next to this file.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import tempfile
import time
from collections.abc import Sequence

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
from debatelab.debate.engine import QuestionState, accounting, request_for, run_engine  # noqa: E402
from debatelab.debate.protocols import make_protocol  # noqa: E402
from debatelab.debate.stage import DebateSettings, ModelPool, build_states, run_protocol  # noqa: E402
from debatelab.llm import GenerationCache, GenerationRequest  # noqa: E402
from debatelab.llm.agent import AgentSpec  # noqa: E402
from debatelab.llm.base import Backend  # noqa: E402
from debatelab.zero_shot import ZeroShotSettings, run_zero_shot, select_questions  # noqa: E402


class RecordingBackend(Backend):
    """Delegates to a real backend and keeps every request list it was handed, in order."""

    def __init__(self, inner: Backend):
        self.inner, self.model_id, self.batches, self.seconds = inner, inner.model_id, [], 0.0

    def generate(self, requests, progress=None):
        self.batches.append(list(requests))
        t = time.perf_counter()
        try:
            return self.inner.generate(requests, progress=progress)
        finally:
            self.seconds += time.perf_counter() - t

    def score(self, prompts, replies):
        return self.inner.score(prompts, replies)


def debate_tokens(states: Sequence[QuestionState]) -> int:
    return sum(t.completion_tokens for s in states for t in s.turns)


def summarize(states: Sequence[QuestionState]) -> dict:
    """Mean NComm, mean total tokens (pre-debate calls included), total tokens and accuracy."""
    stats = [accounting(s) for s in states]
    n = max(len(states), 1)
    return {
        "questions": len(states),
        "ncomm": sum(a["ncomm"] for a in stats) / n,
        "tokens": sum(a["total_tokens"] for a in stats),
        "mean_tokens": sum(a["total_tokens"] for a in stats) / n,
        "accuracy": sum(s.is_correct(s.outcome.final_answer) for s in states) / n,
    }


def median_summary(summaries: Sequence[dict]) -> dict:
    """Key by key, the lower median of several runs' summaries (an actual run's value)."""
    return {key: statistics.median_low(s[key] for s in summaries) for key in summaries[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(ap)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--svr-agents", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=1, choices=[1, 2])
    args = ap.parse_args()

    backend = load_backend(args)
    device = device_of(backend)
    warmup, repeats = timing_plan(args, device)
    questions = select_questions(load_benchmark("asdiv", "test", source="offline"), args.questions, seed=0)
    agent = AgentSpec(name="bench", model=args.model, temperature=0.7, max_tokens=args.max_tokens)
    agents = {agent.name: agent}
    # Flushes four times the backend's batch: one engine step reaches the backend whole.
    settings = DebateSettings(seed=0, batch_size=args.batch_size * 4, show_progress=False)

    print(
        f"model={args.model} questions={len(questions)} agents={args.agents} rounds={args.rounds} "
        f"svr_agents={args.svr_agents} max_tokens={args.max_tokens} batch_size={args.batch_size} "
        f"backend={args.backend} device={device} threads={torch.get_num_threads()} "
        f"warmup={'on' if warmup else 'off'} repeats={repeats}",
        flush=True,
    )

    # Model warm-up: first-call allocations are no part's cost.
    sampling = agent.sampling(logprobs=True)
    backend.generate(
        [
            GenerationRequest(messages=prompts.question_messages(r), sampling=sampling)
            for r in questions.head(2).to_dict("records")
        ]
    )

    # Pre-debate answers, one zero-shot sample per seat; copy c of the agent starts from sample c.
    # Set-up of every part, run once and not compared.
    samples = max(args.agents, args.svr_agents)
    zs_settings = ZeroShotSettings(samples=samples, batch_size=settings.batch_size, estimators=(), show_progress=False)
    t = time.perf_counter()
    zero_shot = {agent.name: run_zero_shot(questions, agent, backend, GenerationCache(None), zs_settings, "asdiv")}
    print(
        f"zero-shot pre-debate  : {time.perf_counter() - t:8.2f} s  ({samples} samples per question, set-up, run once)",
        flush=True,
    )

    def fresh_states(n_agents: int) -> list[QuestionState]:
        return build_states(questions, zero_shot, [agent.name] * n_agents, agents, threads=1, seed=settings.seed)

    def cold() -> None:
        cold_prefixes(backend)

    debate = make_protocol("all_to_all", {"kind": "all_to_all", "rounds": args.rounds})

    with tempfile.TemporaryDirectory() as cache_root:
        # (a) the stage, recording what reaches the backend, then the last run's batches on the raw backend.
        def stage_inputs():
            recorder = RecordingBackend(backend)
            pool = ModelPool({args.model: recorder}, {args.model: GenerationCache(tempfile.mkdtemp(dir=cache_root))})
            cold()
            return fresh_states(args.agents), pool, recorder

        def run_stage(inputs):
            states, pool, recorder = inputs
            steps = run_protocol(debate, states, pool, settings)
            return debate_tokens(states), steps, recorder

        stage_s, stage_runs = timed(run_stage, stage_inputs, warmup=warmup, repeats=repeats)
    stage_tokens = median([tokens for tokens, _, _ in stage_runs])
    outside_s = median([s - recorder.seconds for s, (_, _, recorder) in zip(stage_s, stage_runs)])
    _, stage_steps, recorder = stage_runs[-1]
    raw_s, raw_tokens = timed(
        lambda _: sum(g[0].completion_tokens for batch in recorder.batches for g in backend.generate(batch)),
        cold,
        warmup=warmup,
        repeats=repeats,
    )
    calls = sum(len(b) for b in recorder.batches)
    print(
        f"debate stage          : {median(stage_s):8.2f} s  {stage_tokens / median(stage_s):8.1f} tok/s  "
        f"({calls} calls in {len(recorder.batches)} backend batches, {stage_steps} engine steps; {runs_note(stage_s)})"
    )
    print(
        f"raw backend.generate  : {median(raw_s):8.2f} s  {median(raw_tokens) / median(raw_s):8.1f} tok/s  "
        f"(the stage spent {outside_s:.2f} s outside backend.generate; {runs_note(raw_s)})",
        flush=True,
    )

    # (b) one question at a time, one request per backend call, no cache.
    def generate_one_by_one(state_asks):
        return [backend.generate([request_for(state, ask)])[0][0] for state, ask in state_asks]

    def loop_inputs() -> list[QuestionState]:
        states = fresh_states(args.agents)
        debate.prepare(states)
        cold()
        return states

    def run_loop(states: list[QuestionState]) -> int:
        for state in states:
            run_engine([state], debate.run, generate_one_by_one)
        return debate_tokens(states)

    loop_s, loop_tokens = timed(run_loop, loop_inputs, warmup=warmup, repeats=repeats)
    print(
        f"per-question loop     : {median(loop_s):8.2f} s  {median(loop_tokens) / median(loop_s):8.1f} tok/s  "
        f"({runs_note(loop_s)})",
        flush=True,
    )

    # (c) SVR-MAD against all-to-all on the same pre-debate answers.
    contenders = {
        "all-to-all": make_protocol(
            "all_to_all", {"kind": "all_to_all", "rounds": 2, "early_stop_agree": 5, "tie_break": "pre_debate_count"}
        ),
        "svr-mad": make_protocol("svr_mad", {"kind": "svr_mad", "challenges": 2, "accept_after": 2}),
    }

    def contender_inputs():
        pool = ModelPool({args.model: backend}, {args.model: GenerationCache(None)})
        cold()
        return fresh_states(args.svr_agents), pool

    def run_contender(protocol, inputs) -> dict:
        states, pool = inputs
        run_protocol(protocol, states, pool, settings)
        split = [s for s in states if len({turn.key for turn in s.pre}) > 1]
        return {"all": summarize(states), "non-unanimous": summarize(split)}

    results, seconds = {}, {}
    for name, protocol in contenders.items():
        seconds[name], runs = timed(
            functools.partial(run_contender, protocol), contender_inputs, warmup=warmup, repeats=repeats
        )
        results[name] = {subset: median_summary([r[subset] for r in runs]) for subset in ("all", "non-unanimous")}

    for subset in ("all", "non-unanimous"):
        for name in contenders:
            r = results[name][subset]
            print(
                f"{subset:>13} {name:<10}: {r['questions']:3d} questions  mean NComm {r['ncomm']:6.2f}  "
                f"mean tokens {r['mean_tokens']:8.1f}  accuracy {r['accuracy']:.3f}"
                + (f"  ({median(seconds[name]):.1f} s, {runs_note(seconds[name])})" if subset == "all" else "")
            )
        a2a, svr = results["all-to-all"][subset], results["svr-mad"][subset]
        if a2a["tokens"]:
            print(f"{subset:>13} SVR-MAD / all-to-all tokens = {svr['tokens'] / a2a['tokens']:.3f}")
    a2a, svr = results["all-to-all"]["all"], results["svr-mad"]["all"]
    print(f"(a) debate stage / raw backend time = {median(stage_s) / median(raw_s):.3f} (median of {repeats})")
    print(f"(b) per-question loop / engine = {median(loop_s) / median(stage_s):.2f}x (median of {repeats})")
    print(
        f"(c) SVR-MAD tokens / all-to-all tokens = {svr['tokens'] / a2a['tokens']:.3f} "
        f"(accuracy svr {svr['accuracy']:.3f} vs all-to-all {a2a['accuracy']:.3f}; median of {repeats})"
    )


if __name__ == "__main__":
    main()
