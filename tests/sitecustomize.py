"""Imported at the start of every Python process whose path holds this folder (the tests'
subprocesses: `distributed_helpers.tests_path`). With DEBATELAB_TESTS_NO_DS_SHM=1, DeepSpeed's
shared-memory all-reduce kernel is declared unusable before anything starts DeepSpeed, so test
jobs on CPUs reduce over Gloo instead of compiling the kernel first (minutes on a fresh machine)."""

import os

if os.environ.get("DEBATELAB_TESTS_NO_DS_SHM") == "1":
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
