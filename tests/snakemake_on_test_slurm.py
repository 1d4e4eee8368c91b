"""Snakemake for the tests' SLURM runs: the real CLI and the real SLURM executor plugin, with the
plugin's two fixed waits shortened for a one-node test cluster. Its logic (what it submits, how it
reads squeue, requeues and retries) is untouched.

- The plugin sleeps 5 s before every `sbatch`, to spare a busy slurmctld: 95 s of a 19-job DAG.
- It polls job states at an interval that grows by 10 s with every poll that sees no job end, so
  a job that ends after 30 s is seen up to 20 s late.

Usage is the `snakemake` command's: `python tests/snakemake_on_test_slurm.py ARGS...`.
"""

from __future__ import annotations

import asyncio
import sys
import time

import snakemake_executor_plugin_slurm as slurm_plugin
from snakemake.cli import main

PAUSE_BEFORE_SBATCH_S = 0.2
LONGEST_STATUS_POLL_S = 2.0


class _ShortSleeps:
    """The `time` module as the plugin sees it: every sleep at most PAUSE_BEFORE_SBATCH_S."""

    def __getattr__(self, name):
        return getattr(time, name)

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, PAUSE_BEFORE_SBATCH_S))


async def _poll_sleep(executor) -> None:
    await asyncio.sleep(min(executor.next_seconds_between_status_checks, LONGEST_STATUS_POLL_S))


def shorten_the_plugins_waits() -> None:
    # Fail loudly if a new plugin version moved what is patched: a silent no-op would only be slow.
    assert isinstance(getattr(slurm_plugin, "time", None), type(time)), "the SLURM plugin no longer imports time"
    assert hasattr(slurm_plugin.Executor, "sleep"), "the SLURM plugin's Executor has no sleep() to shorten"
    slurm_plugin.time = _ShortSleeps()
    slurm_plugin.Executor.sleep = _poll_sleep


if __name__ == "__main__":
    shorten_the_plugins_waits()
    sys.argv[0] = "snakemake"
    sys.exit(main())
