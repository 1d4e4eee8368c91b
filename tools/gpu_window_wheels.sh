#!/usr/bin/env bash
# The wheels benchmarks/gpu_window.py needs on a GPU machine whose image has torch (CUDA), transformers,
# peft, accelerate, pandas, pyarrow and scikit-learn but not these (Python 3.12 there), into .whl/ (ignored).
# tools/gpu_window.sh installs into /tmp/site only those the machine lacks. The set: what a worker
# imported on CPU (its sessions.jsonl "distributions") beyond that image, plus the orchestrator's config
# validation and the GGUF conversion:
#   trl (training/core/loss.py) -> datasets -> multiprocess, dill, xxhash;
# Not matplotlib (train_and_record's curves.png, drawn last): with its own it is 17 MB of the 27, so a
# worker without it logs that curves.png was not drawn and counts the run finished (metrics.parquet and
# the agents are written before it); draw the curves here from the metrics brought back.
#   gguf (models.convert_gguf: transformers reads the bundled GGUF through it);
#   jsonschema and its own (config.validate_config);
#   math-verify and its own (grading: every reward and held-out answer; the first window on an H100
#   failed every worker without it: the import check below now grades one answer).
# Versions: those of this repository's .venv (tools/setup.sh), one each.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=(
  trl==1.16.0 datasets==5.2.0 multiprocess==0.70.19 dill==0.4.1 xxhash==4.1.0
  gguf==0.19.0
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0
  math-verify==0.9.0 latex2sympy2_extended==1.11.0 antlr4-python3-runtime==4.13.2
)
rm -f .whl/sympy-* .whl/mpmath-*  # the image has them (torch needs sympy)
rm -f .whl/matplotlib-* .whl/contourpy-* .whl/cycler-* .whl/fonttools-* .whl/kiwisolver-* .whl/pyparsing-* .whl/pillow-*
mkdir -p .whl
for spec in "${WHEELS[@]}"; do
  name=${spec%%==*}
  if ls .whl/ 2>/dev/null | grep -qi "^$(echo "$name" | tr - _)-${spec##*==}-"; then continue; fi
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl "$spec"
done
du -cb .whl/*.whl | tail -1
