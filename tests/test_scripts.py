"""Every Python script under tools/ and benchmarks/ imports and answers --help (a helper module imports), so a moved function
can't break one silently (issue 71: tools/recompute_paired_intervals.py failed on import); every shell
script parses (`bash -n`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYTHON_SCRIPTS = sorted([*ROOT.glob("tools/*.py"), *ROOT.glob("benchmarks/*.py")])
SHELL_SCRIPTS = sorted(ROOT.glob("tools/*.sh"))

# One interpreter runs every script's --help in turn (the imports are shared, so this takes seconds,
# not a second start of torch per script) and reports each one's exit status and output.
HELP_ALL = """
import contextlib, io, json, pathlib, runpy, sys
results = {}
for path in sys.argv[1:]:
    out = io.StringIO()
    sys.argv = [path, "--help"]
    sys.path.insert(0, str(pathlib.Path(path).parent))  # as `python path` would: its folder first
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            runpy.run_path(path, run_name="__main__")
        code = "returned without exiting"
    except SystemExit as stop:
        code = stop.code or 0
    except BaseException as error:  # noqa: BLE001 (reported per script)
        code = f"{type(error).__name__}: {error}"
    sys.path.pop(0)
    text = out.getvalue()
    results[path] = {"code": code, "usage": "usage:" in text, "output": text[-2000:]}
print(json.dumps(results))
"""


def test_there_are_scripts_to_check():
    assert len(PYTHON_SCRIPTS) >= 10 and len(SHELL_SCRIPTS) >= 5


def test_every_python_script_imports_and_answers_help():
    run = subprocess.run(
        [sys.executable, "-c", HELP_ALL, *map(str, PYTHON_SCRIPTS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.strip().splitlines()[-1])
    # A helper module (no __main__ block, e.g. benchmarks/timing.py) only has to import.
    helpers = {str(path) for path in PYTHON_SCRIPTS if '__name__ == "__main__"' not in path.read_text()}
    broken = {
        Path(path).relative_to(ROOT).as_posix(): result
        for path, result in results.items()
        if (
            result["code"] != "returned without exiting"
            if path in helpers
            else (result["code"] != 0 or not result["usage"])
        )
    }
    assert not broken, json.dumps(broken, indent=1)


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda path: path.name)
def test_every_shell_script_parses(script):
    run = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
