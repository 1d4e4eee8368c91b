"""Logging for rule scripts: everything a job prints (progress bars included) goes to its log file."""

from __future__ import annotations

import contextlib
import logging
import os


@contextlib.contextmanager
def job_log(path: str | os.PathLike | None):
    """Send logging, stdout and stderr to `path` for the duration of a job (console if None)."""
    if not path:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        yield
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a", buffering=1) as handle:
        root = logging.getLogger()
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stdout(handle), contextlib.redirect_stderr(handle):
            _log_where_we_run()
            try:
                yield
            except BaseException:
                logging.getLogger("debatelab").exception("job failed")
                raise
            finally:
                root.removeHandler(handler)


def _log_where_we_run() -> None:
    """Host, SLURM job and visible GPUs: what a researcher checks first when a job misbehaves."""
    import socket

    keys = ("SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")
    facts = " ".join(f"{k}={os.environ.get(k, '')}" for k in keys)
    logging.getLogger("debatelab").info("host=%s %s", socket.gethostname(), facts)
