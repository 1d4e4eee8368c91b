"""Outputs as a user on a shared cluster expects them: the modes their umask gives any file, a model
folder replaced in one step, no scratch folder left behind by a killed run (issue 44 item 8)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pandas as pd
import pytest

from debatelab.io import write_parquet_atomic, write_text_atomic
from debatelab.models import publish_folder
from debatelab.training.core.vllm_rollouts import ADAPTERS_PREFIX, adapters_folder, remove_orphaned_adapters


@pytest.fixture
def umask():
    def set_to(mask):
        previous.append(os.umask(mask))

    previous: list[int] = []
    yield set_to
    if previous:
        os.umask(previous[0])


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_outputs_get_the_mode_the_umask_gives_any_file(tmp_path, umask, mask, mode):
    umask(mask)
    write_parquet_atomic(pd.DataFrame({"a": [1]}), tmp_path / "x.parquet")
    write_text_atomic("hi", tmp_path / "x.txt")
    for name in ("x.parquet", "x.txt"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode


def test_a_model_folder_is_swapped_whole_with_the_users_modes(tmp_path, umask):
    umask(0o002)
    target = tmp_path / "models/m"
    target.mkdir(parents=True)
    (target / "old.bin").write_text("old")
    fresh = tmp_path / "models/.m.tmp"
    fresh.mkdir()
    os.chmod(fresh, 0o700)  # as mkdtemp makes it
    (fresh / "config.json").write_text("{}")
    publish_folder(fresh, target)
    assert sorted(p.name for p in target.iterdir()) == ["config.json"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o775
    assert stat.S_IMODE((target / "config.json").stat().st_mode) == 0o664
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m"]  # no old copy, no scratch left


def test_the_adapter_folders_of_a_killed_run_are_removed_by_the_next_one(tmp_path):
    import socket

    host = socket.gethostname()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f"{ADAPTERS_PREFIX}{host}@{int(dead.stdout)}-0-abc"
    (orphan / "v3").mkdir(parents=True)
    alive = tmp_path / f"{ADAPTERS_PREFIX}{host}@{os.getpid()}-1-def"  # a running process's: kept
    alive.mkdir()
    # another node's on a shared temp folder: its pid is not a process here, so it is kept
    elsewhere = tmp_path / f"{ADAPTERS_PREFIX}other-node.cluster@{int(dead.stdout)}-0-ghi"
    elsewhere.mkdir()
    unrelated = tmp_path / "debatelab-other"
    unrelated.mkdir()
    fresh = adapters_folder(0, tmp_path)
    assert not orphan.exists() and alive.exists() and elsewhere.exists() and unrelated.exists()
    assert fresh.name.startswith(f"{ADAPTERS_PREFIX}{host}@{os.getpid()}-0-")
    assert remove_orphaned_adapters(tmp_path) == []
