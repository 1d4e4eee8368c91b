"""The confidence paper's four streams of a pair of agents (Elahi & Di Eugenio, arXiv:2606.13591 §3; §3.2), and the val/test splits.

`results/{experiment}/streams/{dataset}/{pair}.parquet`: one row per (question, agent, stream):

==============  ========  ================================================================
column          type      meaning
==============  ========  ================================================================
question_id     str       dataset row id
dataset, pair   str       names in the config
agent           str       agent name in the config
agent_index     int       0 = M1, 1 = M2 (the order of the pair's `agents`)
stream          int       0 = zero-shot, 1 = after the pair's debate round
answer          str|null  the stream's answer (null: unparseable, graded wrong)
gold            str       reference answer
correct         bool      answer == gold
conf_verbal     float     raw self-report confidence (null: not elicited / not available)
conf_seqprob    float     raw bias-corrected sequence probability σ(C)
conf_entropy    float     exp(−mean_token_entropy) of the answer's own generation (no extra call)
conf_maxprob    float     max_token_prob, the mean max-softmax probability of its tokens
conf_perplexity float     1 / perplexity = exp(mean_logprob)
n_samples       int       stream 0: zero-shot samples aggregated (self-consistency); stream 1: 1
debated         bool      stream 1 came from a debate call (false: carried over from stream 0)
task_type       str
n_labels        int       size of the label space (options, labels; 0 = open-ended)
split           str|null  "val" / "test" with a fixed validation dataset; null: cut per run
==============  ========  ================================================================

Stream 0 aggregates an agent's zero-shot samples as we decide for the paper's self-consistency (Elahi & Di Eugenio, arXiv:2606.13591 §3.2): the answer is the
plurality of the valid samples (a tie goes to the tied answer whose best sample is the most
confident), the self-report is the mean over all samples, the sequence probability the mean over
the samples that agree with the answer, and so are the token-level confidences
(`debatelab.estimators.tokens`). Stream 1 is the agent's last call of debate round 1 of the
pair's debate protocol; questions the protocol did not debate carry stream 0 over.

Splits: the confidence paper fits on validation and reports on test. A pair may name a fixed
validation dataset for a dataset (`calibration.pairs.<pair>.validation`, e.g. VAST's dev split as
its own dataset entry): its streams are appended with split "val" and the dataset's own with
"test"; each run then draws its own bootstrap sample of either split (`resample_questions`,
`calibration.resample`), since the paper keeps its splits fixed and varies the runs' data.
Otherwise both come from the dataset's questions, cut per run by a seeded permutation
(`split_questions`). Either way repeated runs vary the data as well as the search seed.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..data import read_dataset
from ..data.schema import answer_set_size, parse_meta
from ..estimators import TOKEN_ESTIMATORS, token_confidence
from ..grading import INVALID, plurality
from ..io import DataFileError, read_parquet_checked, write_parquet_atomic

log = logging.getLogger(__name__)

STREAM_COLUMNS = [
    "question_id",
    "dataset",
    "pair",
    "agent",
    "agent_index",
    "stream",
    "answer",
    "gold",
    "correct",
    "conf_verbal",
    "conf_seqprob",
    "conf_entropy",
    "conf_maxprob",
    "conf_perplexity",
    "n_samples",
    "debated",
    "task_type",
    "n_labels",
    "split",
]

ESTIMATOR_COLUMNS = {
    "verbal": "conf_verbal",
    "seqprob": "conf_seqprob",
    **{name: f"conf_{name}" for name in TOKEN_ESTIMATORS},
}
#: the confidences averaged over the samples that agree with stream 0's answer (the self-report: over all)
_AGREEING_MEAN = [c for e, c in ESTIMATOR_COLUMNS.items() if e != "verbal"]


def with_token_confidences(frame: pd.DataFrame, estimators: Sequence[str], path) -> pd.DataFrame:
    """`frame` (zero-shot samples or debate turns read from `path`) with the `conf_{name}` column of
    each token-level estimator asked for, mapped from its recorded column (estimators.tokens)."""
    frame = frame.copy()
    for name in estimators:
        if name not in TOKEN_ESTIMATORS:
            continue
        source = TOKEN_ESTIMATORS[name][0]
        if source not in frame.columns:
            raise DataFileError(
                f"{path}: no column {source}, which estimator {name!r} reads; the file predates token-level "
                "uncertainty: rerun the stage that wrote it"
            )
        frame[ESTIMATOR_COLUMNS[name]] = [token_confidence(name, v) for v in frame[source]]
    return frame


def label_space_size(row: pd.Series) -> int:
    """`answer_set_size` of a dataset row, 0 for an open-ended question (the arrays' convention)."""
    return answer_set_size(row["task_type"], row["choices"], parse_meta(row["meta"]).get("labels")) or 0


def aggregate_samples(rows: pd.DataFrame) -> dict:
    """Self-consistency over one agent's zero-shot samples of one question (Elahi & Di Eugenio, arXiv:2606.13591 §3.2): the
    plurality answer, a tie going to the answer of the most confident sample (sequence probability,
    else self-report), then the earliest such sample."""
    rows = rows.sort_values("sample", kind="stable")
    valid = rows[rows["answer"].notna()]
    if valid.empty:
        answer = None
        agreeing = rows
    else:
        answers = valid["answer"].tolist()
        strength = valid["conf_seqprob"].fillna(valid["conf_verbal"]).fillna(0.0).tolist()
        best: dict[str, tuple[float, int]] = {}  # answer -> (highest strength, minus its first sample's position)
        for position, (text, value) in enumerate(zip(answers, strength)):
            if text not in best or value > best[text][0]:
                best[text] = (value, -position)
        vote = plurality(answers, rank=best.__getitem__)
        answer = None if vote.key == INVALID else vote.key
        agreeing = valid[valid["answer"] == answer]
    return {
        "answer": answer,
        "correct": bool(agreeing["correct"].iloc[0]) if answer is not None else False,
        "conf_verbal": float(rows["conf_verbal"].mean()) if rows["conf_verbal"].notna().any() else np.nan,
        **{
            c: float(agreeing[c].mean()) if c in agreeing and agreeing[c].notna().any() else np.nan
            for c in _AGREEING_MEAN
        },
        "n_samples": len(rows),
    }


def build_streams(
    dataset_path: str | Path,
    zero_shot_paths: Sequence[str | Path],
    turns_path: str | Path,
    *,
    dataset: str,
    pair: str,
    agents: Sequence[str],
    estimators: Sequence[str] = ("verbal", "seqprob"),
) -> pd.DataFrame:
    """The four streams of ``agents`` (M1, M2) from their zero-shot files and the pair's debate turns."""
    if len(agents) != 2 or agents[0] == agents[1]:
        raise ValueError(f"pair {pair!r}: needs two different agents, got {list(agents)}")
    questions = read_dataset(dataset_path)
    n_labels = {r["id"]: label_space_size(r) for _, r in questions.iterrows()}
    turns = read_parquet_checked(
        turns_path, ["question_id", "round", "agent", "agent_config", "call", "answer", "correct"]
    )
    turns = with_token_confidences(turns, estimators, turns_path)
    rows = []
    for index, (agent, path) in enumerate(zip(agents, zero_shot_paths)):
        zero = read_parquet_checked(path, ["question_id", "agent", "sample", "answer", "correct", "gold", "task_type"])
        zero = with_token_confidences(zero, estimators, path)
        if not (zero["agent"] == agent).all():
            raise DataFileError(f"{path}: expected agent {agent!r}, found {sorted(zero['agent'].unique())}")
        if not (turns["agent"] == agent).any():
            raise DataFileError(
                f"{turns_path}: agent {agent!r} is not a participant (agents: {sorted(turns['agent'].unique())}); "
                f"pair {pair!r} needs a debate protocol whose participants are {list(agents)}"
            )
        debate = turns[(turns["round"] == 1) & (turns["agent"] == agent)]
        if debate.empty:
            log.warning("%s: agent %r debated no question; stream 1 repeats stream 0", turns_path, agent)
        for estimator in estimators:
            column = ESTIMATOR_COLUMNS[estimator]
            # an unparseable answer has no sequence probability to score, so judge by the parsed ones
            scored = debate[debate["answer"].notna()] if estimator == "seqprob" else debate
            if len(scored) and scored[column].isna().all():
                if estimator in TOKEN_ESTIMATORS:
                    raise DataFileError(
                        f"{turns_path}: column {TOKEN_ESTIMATORS[estimator][0]} is empty, which estimator "
                        f"{estimator!r} reads (entropy and maxprob need debate.top_logprobs >= 1 and a backend that "
                        "returns top-k log-probabilities)"
                    )
                raise DataFileError(
                    f"{turns_path}: column {column} is empty; the pair's debate protocol must elicit "
                    f"`confidence: [{', '.join(e for e in estimators if e not in TOKEN_ESTIMATORS)}]`"
                )
        last_call = debate.sort_values("call", kind="stable").groupby("question_id").tail(1).set_index("question_id")
        for question_id, samples in zero.groupby("question_id", sort=False):
            first = samples.iloc[0]
            base = {
                "question_id": question_id,
                "dataset": dataset,
                "pair": pair,
                "agent": agent,
                "agent_index": index,
                "gold": first["gold"],
                "task_type": first["task_type"],
                "n_labels": n_labels.get(question_id, 0),
            }
            zero_stream = aggregate_samples(samples)
            rows.append({**base, "stream": 0, "debated": False, **zero_stream})
            if question_id in last_call.index:
                turn = last_call.loc[question_id]
                rows.append(
                    {
                        **base,
                        "stream": 1,
                        "debated": True,
                        "answer": turn["answer"],
                        "correct": bool(turn["correct"]),
                        **{c: turn[c] if c in turn.index else np.nan for c in ESTIMATOR_COLUMNS.values()},
                        "n_samples": 1,
                    }
                )
            else:
                rows.append({**base, "stream": 1, "debated": False, **zero_stream})
    frame = pd.DataFrame(rows)
    frame["split"] = None
    for estimator, column in ESTIMATOR_COLUMNS.items():
        if estimator not in estimators:
            frame[column] = np.nan
    frame = frame[STREAM_COLUMNS].sort_values(["question_id", "agent_index", "stream"], kind="stable")
    counts = frame.groupby("question_id").size()
    incomplete = counts[counts != 4]
    if len(incomplete):
        raise DataFileError(
            f"pair {pair!r} on {dataset!r}: question(s) {list(incomplete.index[:5])} lack a zero-shot answer of one agent"
        )
    return frame.reset_index(drop=True)


def streams_job(
    dataset_path, zero_shot_paths, turns_path, out_path, *, validation: dict | None = None, **kwargs
) -> pd.DataFrame:
    """Write a pair's streams; ``validation`` ({dataset_path, zero_shot_paths, turns_path, dataset})
    names a fixed validation dataset whose streams are appended with split "val"."""
    frame = build_streams(dataset_path, zero_shot_paths, turns_path, **kwargs)
    if validation:
        val = build_streams(
            validation["dataset_path"],
            validation["zero_shot_paths"],
            validation["turns_path"],
            **{**kwargs, "dataset": validation["dataset"]},
        )
        overlap = set(frame["question_id"]) & set(val["question_id"])
        if overlap:
            raise DataFileError(
                f"{validation['dataset_path']}: {len(overlap)} question(s) are also in {dataset_path} "
                f"(e.g. {sorted(overlap)[0]!r}); a validation split must not overlap the test split"
            )
        frame = pd.concat([frame.assign(split="test"), val.assign(split="val")], ignore_index=True)
    write_parquet_atomic(frame, out_path)
    log.info("%d questions, %d rows -> %s", frame["question_id"].nunique(), len(frame), out_path)
    return frame


def split_questions(question_ids: Sequence[str], seed: int, run: int, val_fraction: float) -> np.ndarray:
    """Boolean mask "in validation" for ``question_ids``: a seeded permutation per (seed, run), with
    round(val_fraction·N) questions (at least one of each split when N ≥ 2). Independent of the
    order the ids come in."""
    ids = np.asarray(question_ids, dtype=object)
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n = len(ids)
    n_val = int(round(val_fraction * n))
    if n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    digest = hashlib.sha256(f"split:{seed}:{run}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    order = np.argsort(ids, kind="stable")
    chosen = order[rng.permutation(n)[:n_val]]
    mask = np.zeros(n, dtype=bool)
    mask[chosen] = True
    return mask


def resample_questions(question_ids: Sequence[str], seed: int, run: int, split: str) -> np.ndarray:
    """A bootstrap sample of ``question_ids`` for one (seed, run, split): as many ids, drawn with
    replacement, sorted (a question drawn twice appears twice). Independent of the order the ids
    come in; empty in, empty out."""
    ids = np.sort(np.unique(np.asarray(question_ids, dtype=object)))
    digest = hashlib.sha256(f"resample:{seed}:{run}:{split}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
    return ids[np.sort(rng.integers(0, len(ids), len(ids)))] if len(ids) else ids


@dataclass
class StreamArrays:
    """A pair's streams as arrays for the protocols: ``pred[n, i, s]`` label codes (-1 invalid),
    ``conf[n, i, s]`` confidences, ``gold`` codes, ``n_labels``; ``codes`` maps code → answer."""

    question_ids: np.ndarray
    gold: np.ndarray
    pred: np.ndarray
    conf: np.ndarray
    n_labels: np.ndarray
    codes: np.ndarray

    def subset(self, mask: np.ndarray) -> StreamArrays:
        """The questions of a boolean mask, or of an index array (an index may repeat)."""
        return StreamArrays(
            self.question_ids[mask], self.gold[mask], self.pred[mask], self.conf[mask], self.n_labels[mask], self.codes
        )

    def correct(self, answer_codes: np.ndarray) -> np.ndarray:
        """Whether each answer is the gold one; an unparseable answer (-1) never is."""
        return (answer_codes == self.gold) & (answer_codes >= 0)

    def take(self, question_ids: Sequence[str]) -> StreamArrays:
        """The questions ``question_ids`` in that order, each as often as it is listed."""
        wanted = np.asarray(question_ids, dtype=object)
        index = pd.Index(self.question_ids).get_indexer(wanted)
        if (index < 0).any():
            raise DataFileError(f"question(s) {list(wanted[index < 0][:5])} are not in the streams")
        return self.subset(index)

    def decode(self, answer_codes: np.ndarray) -> np.ndarray:
        return np.array([self.codes[c] if c >= 0 else None for c in answer_codes], dtype=object)

    def __len__(self) -> int:
        return len(self.question_ids)


def stream_arrays(frame: pd.DataFrame, confidence_column: str) -> StreamArrays:
    """Arrays of a streams frame for one confidence column (raw or calibrated), questions sorted by id.

    Missing confidences (an unparseable answer has no sequence probability) become 0.5: no evidence.
    """
    frame = frame.sort_values(["question_id", "agent_index", "stream"], kind="stable")
    question_ids = frame["question_id"].to_numpy()[::4]
    values = pd.concat([frame["answer"], frame["gold"]], ignore_index=True)
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    n = len(question_ids)
    pred = codes[: len(frame)].reshape(n, 2, 2)
    gold = codes[len(frame) :].reshape(n, 4)[:, 0]
    conf = frame[confidence_column].to_numpy(dtype=float).reshape(n, 2, 2)
    missing = np.isnan(conf)
    if missing.any():
        log.info("%d of %d %s values missing: set to 0.5", int(missing.sum()), conf.size, confidence_column)
        conf = np.where(missing, 0.5, conf)
    n_labels = frame["n_labels"].to_numpy()[::4].astype(int)
    return StreamArrays(question_ids, gold, pred, conf, n_labels, np.asarray(uniques, dtype=object))


def synthetic_streams(
    n: int, seed: int = 0, *, skills: tuple[float, float] = (0.6, 0.7), debate_gain: float = 0.05, n_labels: int = 3
) -> pd.DataFrame:
    """Streams of a made-up pair for benchmarks and tests (like scikit-learn's make_classification):
    agent i is right with probability skills[i] (+ debate_gain after debate); right answers draw
    confidences from Beta(5, 2), wrong ones from Beta(3, 3); the self-report is that rounded to tenths."""
    rng = np.random.default_rng(seed)
    letters = [chr(ord("A") + k) for k in range(n_labels)]
    rows = []
    for q in range(n):
        gold = int(rng.integers(0, n_labels))
        for agent, skill in enumerate(skills):
            for stream in (0, 1):
                ok = bool(rng.random() < skill + debate_gain * stream)
                answer = gold if ok else (gold + 1 + int(rng.integers(0, n_labels - 1))) % n_labels
                c = float(np.clip(rng.beta(5, 2) if ok else rng.beta(3, 3), 0.01, 0.99))
                rows.append(
                    {
                        "question_id": f"q{q:05d}",
                        "dataset": "synthetic",
                        "pair": "ab",
                        "agent": "ab"[agent],
                        "agent_index": agent,
                        "stream": stream,
                        "answer": letters[answer],
                        "gold": letters[gold],
                        "correct": ok,
                        "conf_verbal": round(c * 10) / 10,
                        "conf_seqprob": c,
                        **{ESTIMATOR_COLUMNS[name]: np.nan for name in TOKEN_ESTIMATORS},
                        "n_samples": 1,
                        "debated": stream == 1,
                        "task_type": "multiple_choice",
                        "n_labels": n_labels,
                        "split": None,
                    }
                )
    return pd.DataFrame(rows)[STREAM_COLUMNS]
