"""A sample of a multi-agent run's training replies, step by step: what the agents learnt to write.

The trainers keep no replies (metrics.parquet holds their statistics only). `recording_replies(path)`
registers a step hook on `debate_trainer.DebateTrainer` for the duration of a job: after each step's
update (rewards and advantages final, UMAD's turn by turn included) rank 0 appends the first
`per_agent` rollouts of every agent to `path` (`replies.parquet` beside metrics.parquet), one row
each with the columns `REPLY_COLUMNS`:

    step           int    the step's number, 1-based as metrics.parquet's `step`
    agent          str    the agent the reply trains
    question_id    str    the training question
    turn           int    the debate round of the reply (0: the independent answer)
    sample         int    the rollout's sample index in its group (a UMAD thread, ...)
    prompt         str    the last message of the reply's prompt chat (question, and the peers' replies
                          in later rounds), cut to `PROMPT_CHARS`
    reply          str    the sampled reply
    answer         str    the answer parsed from it (None: none found)
    correct        bool   graded right
    reward         float  the method's reward of the reply
    advantage      float  its advantage
    tokens         int    its length in tokens
    finish_reason  str    "stop" or "length"

The file is rewritten atomically at every step (`io.write_parquet_atomic`) with any rows of this step
or later dropped first, so a run killed between the replies and its checkpoint and resumed redoes
the step's rows rather than duplicating them. 8 replies per agent and step over 40 steps of three
agents is about 1,000 rows (well under a megabyte).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pandas as pd

from ...io import write_parquet_atomic

REPLY_COLUMNS = [
    "step",
    "agent",
    "question_id",
    "turn",
    "sample",
    "prompt",
    "reply",
    "answer",
    "correct",
    "reward",
    "advantage",
    "tokens",
    "finish_reason",
]
PROMPT_CHARS = 4000


def reply_rows(step: int, by_agent: dict, per_agent: int = 8) -> list[dict]:
    """The first `per_agent` rollouts of every agent (`DebateBatch.by_agent`) as rows of `REPLY_COLUMNS`."""
    rows = []
    for agent, rollouts in by_agent.items():
        for r in rollouts[:per_agent]:
            last = r.messages[-1] if r.messages else {}
            content = last.get("content", "") if isinstance(last, dict) else str(last)
            rows.append(
                {
                    "step": int(step),
                    "agent": str(agent),
                    "question_id": str(r.question_id),
                    "turn": int(r.turn),
                    "sample": int(r.sample),
                    "prompt": str(content)[:PROMPT_CHARS],
                    "reply": r.text,
                    "answer": None if r.answer is None else str(r.answer),
                    "correct": bool(r.correct),
                    "reward": float(r.reward),
                    "advantage": float(r.advantage),
                    "tokens": int(r.length),
                    "finish_reason": str(r.finish_reason),
                }
            )
    return rows


def append_replies(path: str | Path, step: int, rows: list[dict]) -> pd.DataFrame:
    """`path`'s rows before `step`, then `rows` (step `step`), written atomically; the whole frame."""
    path = Path(path)
    old = pd.read_parquet(path) if path.exists() else pd.DataFrame(columns=REPLY_COLUMNS)
    old = old[old["step"] < step] if len(old) else old
    new = pd.DataFrame(rows, columns=REPLY_COLUMNS)
    frame = pd.concat([f for f in (old, new) if len(f)], ignore_index=True) if len(old) or len(new) else new
    frame = frame.reindex(columns=REPLY_COLUMNS)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet_atomic(frame, path)
    return frame


class ReplySample:
    """A step hook of `DebateTrainer` (`step_hooks`): rank 0 appends each step's sample to `path`."""

    def __init__(self, path: str | Path, per_agent: int = 8):
        self.path, self.per_agent = Path(path), per_agent

    def __call__(self, trainer, batch) -> None:
        if trainer.rank != 0:
            return
        step = batch.step + 1
        append_replies(self.path, step, reply_rows(step, batch.by_agent, self.per_agent))


@contextlib.contextmanager
def recording_replies(path: str | Path, per_agent: int = 8):
    """Every multi-agent trainer of this process keeps a reply sample in `path` while inside."""
    from .debate_trainer import DebateTrainer

    hook = ReplySample(path, per_agent)
    DebateTrainer.step_hooks.append(hook)
    try:
        yield hook
    finally:
        DebateTrainer.step_hooks.remove(hook)
