#!/usr/bin/env bash
# The bundled model for a GPU machine that a call can carry only 64 MiB to: the GGUF itself (what
# rule prepare_model converts, `models.convert_gguf`; the GPU machine converts it the same way, with
# the gguf wheel of tools/gpu_window_wheels.sh), cut into two parts under .gpu_model/ (ignored):
#   .gpu_model/a/part-0  .gpu_model/b/part-1  and .gpu_model/{a,b}/SHA256 of the whole file.
# Why the GGUF and not the converted folder: the folder holds float32 weights (517 MB); the Q4_1 and
# Q8_0 blocks dequantise to d*q + m products that neither bfloat16 nor float16 holds exactly, so the
# only lossless small form is the GGUF (98.4 MB; zstd -19 makes it 89.9 MB, still two calls, and the
# machine may have no zstd: not used). tools/gpu_window.sh joins the parts and checks the hash.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
GGUF=$("$PY" -c 'from debatelab.models import smollm2_gguf_path; print(smollm2_gguf_path())')
NAME=$(basename "$GGUF")
rm -rf .gpu_model && mkdir -p .gpu_model/a .gpu_model/b
split -n 2 -d -a 1 "$GGUF" .gpu_model/part-
mv .gpu_model/part-0 .gpu_model/a/part-0
mv .gpu_model/part-1 .gpu_model/b/part-1
(cd "$(dirname "$GGUF")" && sha256sum "$NAME") | tee .gpu_model/a/SHA256 > .gpu_model/b/SHA256
ls -l .gpu_model/a .gpu_model/b
