#!/usr/bin/env bash
# The training engine's GPU measurements (issues 45 and 46) in one GPU window, on one GPU whose image has
# Python 3.12, torch (CUDA), transformers, peft and accelerate (docs/testing.md, "The engine window").
# All at a random-weight SmolLM2-1.7B shape in bfloat16, 8 prompts x 8 replies x 128 tokens.
#
#   tools/engine_window.sh prepare    here, first: .whl/ (tools/gpu_window_wheels.sh's trl set, plus
#                                     DeepSpeed built here and what it needs beyond the image), and
#                                     .gpu_engine/: SmolLM2's tokenizer, 64 ASDiv questions, and the
#                                     engine before issue 46 (commit dd3688d: src/ and benchmarks/)
#   tools/engine_window.sh after      carrying .whl and .gpu_engine/{tokenizer,questions.parquet,before}:
#       dapo     ours beside stock TRL GRPOTrainer, like for like and out of the box (46.1, 46.6)
#       umad     a UMAD step of 2 agents, 8 questions x 8 threads (46.6)
#       engines  full fine-tuning, one process: plain, DeepSpeed ZeRO-2, ZeRO-3, FSDP2 (45)
#   tools/engine_window.sh before     dapo (ours alone) and umad with dd3688d's engine, the "before" of
#                                     issue 46's numbers, on the same warm machine
# A device command runs at most 600 s, and every part stops by DEADLINE_S (570) after the start, a
# part that doesn't fit is skipped and named; so a window is three calls (timeout_s 600 each):
#   1. after dapo umad      2. after engines      3. before
# Each part writes $OUT/<part>.txt (its stdout and stderr) and runs under its own timeout, so a part
# that hangs leaves the next their time; nvidia-smi goes to $OUT/nvidia-smi.txt.
# On a CPU at tiny sizes (the script's own check): ENGINE_WINDOW_TINY=1 OUT=/tmp/ew tools/engine_window.sh after
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-.gpu_engine/out}
WORK=.gpu_engine
BEFORE_COMMIT=dd3688d  # the fair benchmark, right before packed updates (3f6f1f0): issue 46's "before"
DEADLINE_S=${DEADLINE_S:-570}  # every part ends by then (a device command may run 600 s)
mkdir -p "$OUT"

if [ "${ENGINE_WINDOW_TINY:-0}" = "1" ]; then  # the script's path on a CPU, in minutes
  DEVICE=cpu SHAPE=() SIZE=(--prompts 2 --group 2 --max-tokens 8 --steps 1) PART_S=900 MODEL=(--model tiny-random-llama)
else
  DEVICE=cuda SHAPE=(--random-shape smollm2-1.7b) SIZE=(--prompts 8 --group 8 --max-tokens 128 --steps 3) PART_S=330
  MODEL=()
fi
COMMON=(--device "$DEVICE" "${MODEL[@]}" "${SHAPE[@]}" --tokenizer "$WORK/tokenizer" --models-dir "$WORK/models"
  --questions "$WORK/questions.parquet" --dtype bfloat16 "${SIZE[@]}")

part() {  # part NAME COMMAND...: COMMAND's output in $OUT/NAME.txt, within PART_S seconds and the deadline
  local name=$1
  shift
  local left=$((DEADLINE_S - SECONDS - 15)) start=$SECONDS rc=0
  if [ "$left" -lt 60 ]; then
    echo "== $name: skipped, ${left} s left of the call's ${DEADLINE_S} s (run it in the next call)" | tee -a "$OUT/parts.txt"
    return
  fi
  echo "== $name: $*" | tee -a "$OUT/parts.txt"
  timeout -k 10 "$((left < PART_S ? left : PART_S))" "$@" >"$OUT/$name.txt" 2>&1 || rc=$?
  echo "== $name: exit $rc after $((SECONDS - start)) s" | tee -a "$OUT/parts.txt"
  grep -E "s/step|TRL step time|optimizer steps by|peak memory|parameters:" "$OUT/$name.txt" | tee -a "$OUT/parts.txt" || true
}

run_parts() {  # run_parts TREE PARTS...: the parts with the engine of TREE (. or the before tree)
  local tree=$1
  shift
  export PYTHONPATH="$tree/src:$SITE" TQDM_DISABLE=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  local bench="$tree/benchmarks/train_throughput.py" label
  label=$([ "$tree" = . ] && echo after || echo before)
  for name in "$@"; do
    case "$name" in
      dapo)
        if [ "$label" = after ]; then part "dapo-$label" "$PY" "$bench" "${COMMON[@]}"
        else part "dapo-$label" "$PY" "$bench" "${COMMON[@]}" --no-trl; fi
        ;;
      umad) part "umad-$label" "$PY" "$bench" "${COMMON[@]}" --method umad --agents 2 --micro-batch 16 ;;
      engines)
        part "full-plain" "$PY" "$bench" "${COMMON[@]}" --finetuning full --micro-batch 16
        for config in zero2 zero3 fsdp2; do
          # one process under accelerate with the shipped config: its engine over a group of one
          part "full-$config" "$PY" -m accelerate.commands.launch --config_file "config/accelerate/${config}_8gpu.yaml" \
            --num_machines 1 --num_processes 1 --main_process_port 29631 "$bench" "${COMMON[@]}" --finetuning full \
            --micro-batch 16
        done
        ;;
      *) echo "unknown part $name (dapo, umad, engines)" >&2; exit 2 ;;
    esac
  done
}

case "${1:-}" in
  prepare)
    bash tools/gpu_window_wheels.sh
    # DeepSpeed is a source release: a wheel built here with no op compiled (it compiles what it needs on
    # first use), and what it imports beyond the GPU image (hjson, pydantic and its own; pydantic 2.12, not
    # the .venv's 2.14, which needs a typing-extensions newer than the image may hold).
    if ! ls .whl/deepspeed-0.19.8-*.whl >/dev/null 2>&1; then
      DS_BUILD_OPS=0 .venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w .whl "deepspeed==0.19.8"
    fi
    for spec in hjson==3.1.0 pydantic==2.12.5 pydantic-core==2.41.5 annotated-types==0.7.0 typing-inspection==0.4.2; do
      "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl "$spec"
    done
    mkdir -p "$WORK"
    .venv/bin/python - "$WORK" <<'PY'
import shutil, sys
from pathlib import Path
from debatelab.data import load_benchmark
from debatelab.models import prepare_model
from debatelab.zero_shot import select_questions
work = Path(sys.argv[1])
tiny = work / "models" / "tiny-random-llama"
if not (tiny / "config.json").exists():
    prepare_model("tiny-random-llama", "bundled:tiny-random-llama", tiny)
(work / "tokenizer").mkdir(exist_ok=True)
for f in tiny.iterdir():  # SmolLM2's tokenizer and chat template, without the tiny model's weights
    if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "config", "generation_config")):
        shutil.copy(f, work / "tokenizer" / f.name)
select_questions(load_benchmark("asdiv", "test", source="offline"), 64, seed=0).to_parquet(work / "questions.parquet")
PY
    rm -rf "$WORK/before" && mkdir -p "$WORK/before"
    git archive "$BEFORE_COMMIT" src benchmarks | tar -x -C "$WORK/before"
    du -sh .whl "$WORK"
    ;;
  after | before)
    which=$1
    shift
    SITE="$SITE" PYTHON="$PY" bash tools/gpu_window.sh wheels  # those of .whl/ this Python lacks, into $SITE
    nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
    parts=("$@")
    if [ "$which" = after ]; then
      [ ${#parts[@]} -gt 0 ] || parts=(dapo umad engines)
      run_parts . "${parts[@]}"
    else
      [ ${#parts[@]} -gt 0 ] || parts=(dapo umad)
      run_parts "$WORK/before" "${parts[@]}"
    fi
    ;;
  *)
    echo "usage: tools/engine_window.sh prepare | after [dapo umad engines] | before [dapo umad]" >&2
    exit 2
    ;;
esac
