"""The trainers' shared loop and update (every method's trainer derives from `BaseTrainer`).

* `BaseTrainer`: the run's seeded question order (`draw`), the loop of rollout steps (`train`:
  resume, `train_step`, held-out accuracy, log line, the tracker's row, checkpoint), and the clipped update of one
  policy or one agent's view of it (`update_policy`): π_old's log-probabilities first (no gradient;
  the first mini-batch takes them from its own forward), then `epochs` passes over the shuffled
  sequences in mini-batches of `mini_batch_size`, each one optimizer step on the clipped loss
  (`loss.policy_loss`), accumulated over micro-batches (packed into one row each, or padded:
  `packed_updates`) with the mini-batch's token count as normaliser. A method's trainer writes `train_step`.
* `Trainer`: one policy (`policy.Policy`, the one-agent case of `agents.AgentPolicies`) and its
  reward function. DAPO and SDRL (`methods/dapo.py`, `methods/sdrl.py`) derive from it.
* The multi-agent methods derive from `debate_trainer.DebateTrainer`.

Data parallel: with several processes (`accelerate launch`), every process updates on its own
sequences. Each trained agent (a single policy's one, or each of a multi-agent run's) has its
DeepSpeed ZeRO (`zero.py`) or FSDP2 (`fsdp.py`) engine, which also splits its optimizer state, or
its DDP wrapper (`agents.AgentPolicies.distribute`); that averages its gradients, and the loss
normaliser is the token count of all processes' mini-batch, so the update equals one process
training on the whole batch.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...llm.base import stable_hash
from ...llm.chat import chat_prompt_ids
from ...llm.transformers_backend import CPU_DECODE_SDPA, bf16_autocast
from ...tracking import Tracker, open_tracker
from . import heldout as held
from . import zero
from .checkpoint import TrainState, load_checkpoint, policy_fingerprint, save_checkpoint
from .distributed import all_reduce, barrier, pooled, rank_and_world
from .rollouts import RewardFunction, Rollout, load_grader, load_reward
from .strategy import StepStrategy
from .weights import release_host_memory

log = logging.getLogger(__name__)


def _pack(units, fits) -> list[list[list]]:
    """Consecutive units (lists) joined into batches (lists of units) while `fits(the batch's items)`;
    a unit that fits nowhere goes alone."""
    out, current = [], []
    for unit in units:
        if current and not fits([x for u in current for x in u] + list(unit)):
            out.append(current)
            current = []
        current.append(list(unit))
    return out + ([current] if current else [])


def _split(unit: Sequence) -> list[list]:
    """A unit as units of one item each."""
    return [[item] for item in unit]


@dataclass
class UpdateBatch:
    """One micro-batch's model inputs, padded (`BaseTrainer._tensors`) or packed into one row
    (`BaseTrainer._packed_tensors`); either way its log-probabilities come out (B, T) beside `mask`."""

    mask: object  # (B, T) 1 on completion tokens
    advantages: object  # (B,)
    padded: tuple | None = None  # (ids, attention, completion start) for `token_logprobs`
    packed: tuple | None = None  # (ids, position ids, keep, rows, cols, targets, attention) for `packed_token_logprobs`

    @property
    def device(self):
        return self.mask.device

    def logprobs(self, model, *, with_entropy: bool = False, temperature: float = 1.0):
        """(log-probabilities, entropy or None), each (B, T), under `model`."""
        from .loss import packed_token_logprobs, token_logprobs  # torch: not on the config's import path

        if self.packed is not None:
            ids, positions, keep, rows, cols, targets, attention = self.packed
            return packed_token_logprobs(
                model,
                ids,
                positions,
                keep,
                rows,
                cols,
                tuple(self.mask.shape),
                targets,
                attention,
                with_entropy=with_entropy,
                temperature=temperature,
            )
        return token_logprobs(model, *self.padded, with_entropy=with_entropy, temperature=temperature)


def _masked_mean(values, mask) -> float:
    """Mean of `values` over the positions `mask` marks (0 when none is)."""
    return float((values * mask).sum()) / max(float(mask.sum()), 1.0)


class BaseTrainer:
    """The loop and the update shared by every method (module docstring); `train_step` is the method's."""

    metric_columns: list[str] = []  # metrics.parquet's columns before the held-out ones
    reuse_policy_logprobs = True  # the first mini-batch takes π_old from its own forward (`update_policy`)
    whole_groups = False  # mini- and micro-batches hold whole groups (`_plan`; UMAD's advantages need them)

    def __init__(
        self,
        questions: pd.DataFrame,
        policy,
        settings,
        *,
        run: str,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        """`policy`: what is trained and checkpointed (`policy.Policy`, or `agents.AgentPolicies`).
        `heldout`: the held-out dataset whose accuracy the run measures as it trains (`heldout.py`)."""
        if questions.empty:
            raise ValueError(f"training run {run!r}: no training questions")
        self.rows = questions.to_dict("records")
        self.heldout_rows = held.heldout_questions(heldout, settings) if heldout is not None else []
        self.policy, self.settings, self.run_name = policy, settings, run
        self.checkpoint_dir, self.fingerprint = checkpoint_dir, fingerprint
        self.rank, self.world = rank_and_world()
        if settings.mini_batch_size % self.world:
            raise ValueError(
                f"training: mini_batch_size = {settings.mini_batch_size} must divide among {self.world} processes"
            )
        self.state = TrainState()
        self.check_processes()
        policy.distribute(self.world)  # each trained agent's engine or DDP wrapper (`strategy_for`)

    def check_processes(self) -> None:
        """Refuse a process count the method can't split its work over (before any wrapper is built)."""

    def train_step(self, step: int) -> dict:
        """One rollout step: its row of metrics (`metric_columns`)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no train_step: use a method's trainer (training.methods.METHODS)"
        )

    # -- what the training job builds the trainer from (`stage.train_job`) ----------------------
    @classmethod
    def prepare_job(cls, questions: pd.DataFrame, settings, *, coefficients_path=None) -> tuple[pd.DataFrame, dict]:
        """(the questions it trains on, its own constructor arguments). Default: all the questions,
        nothing more (UDPO: the warm-up's held out, and the coefficients file)."""
        return questions, {}

    @classmethod
    def load_policies(cls, bases: dict[str, str], settings, *, device: str):
        """What it trains: `bases` maps each trained agent to its base model folder."""
        raise NotImplementedError

    @classmethod
    def job_fingerprint(cls, settings, *, bases, dataset_path, questions, system_prompts, participants, own, world):
        """What a checkpoint must match to be resumed (`checkpoint.load_checkpoint` names what changed)."""
        raise NotImplementedError

    @classmethod
    def job_arguments(cls, *, system_prompts: dict, participants, reward, own: dict) -> dict:
        """Its constructor's own arguments, from the job's agents."""
        raise NotImplementedError

    def save_models(self, out_dirs: dict[str, str]) -> None:
        """Each trained agent as a plain Hugging Face folder; every process calls it (ZeRO-3 and FSDP
        gather the weights from all), rank 0 writes."""
        for agent, out in out_dirs.items():
            self.policy.save(agent, out)

    # -- data order -----------------------------------------------------------------------
    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.settings.seed, epoch]).permutation(len(self.rows))

    def draw(self, k: int) -> list[dict]:
        """The next k questions of the run's order (the same on every process), wrapping into new epochs."""
        out = []
        while len(out) < k:
            order = self._order(self.state.epoch)
            take = order[self.state.cursor : self.state.cursor + k - len(out)]
            out += [self.rows[i] for i in take]
            self.state.cursor += len(take)
            if self.state.cursor >= len(order):
                self.state.epoch, self.state.cursor = self.state.epoch + 1, 0
        return out

    # -- the loop -------------------------------------------------------------------------
    def train(self, tracking: dict | None = None) -> pd.DataFrame:
        """`tracking`: `tracking.open_tracker`'s arguments but `resumed_at`; rank 0 streams each step's
        metrics row to those trackers before the step's checkpoint (a resumed run redoes no logged step)."""
        self.resume()
        tracker = open_tracker(resumed_at=self.state.step, **tracking) if tracking and self.rank == 0 else Tracker()
        with tracker:
            return self._loop(tracker)

    def _loop(self, tracker: Tracker) -> pd.DataFrame:
        s = self.settings
        # step 0 (the base model): evaluated before the first step, recorded on its row
        base = self.evaluate_heldout(0) if self.heldout_rows and self.state.step == 0 else {}
        bar = tqdm(
            total=s.steps,
            initial=self.state.step,
            desc=f"train {self.run_name}",
            unit="step",
            disable=not s.show_progress or self.rank != 0,
            dynamic_ncols=True,
        )
        with bar:
            while self.state.step < s.steps:
                metrics = self.train_step(self.state.step)
                metrics.update(self._heldout_metrics(self.state.step + 1, base if self.state.step == 0 else {}))
                self.state.metrics.append(metrics)
                self.state.step += 1
                tracker.log_metrics(metrics, self.state.step, self.heldout_agents())
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.2f}")
                log.info(
                    "step %d/%d: %s; loss %.4f; rollout %.1f s, update %.1f s, %.0f tokens/s",
                    self.state.step,
                    s.steps,
                    self.describe(metrics),
                    metrics["loss"],
                    metrics["rollout_seconds"],
                    metrics["update_seconds"],
                    metrics["tokens_per_second"],
                )
                if self.checkpoint_dir is not None and (
                    self.state.step % s.checkpoint_every == 0 or self.state.step == s.steps
                ):
                    self.checkpoint()
                barrier(self.world)
        return pd.DataFrame(self.state.metrics, columns=self.columns())

    # -- held-out accuracy (heldout.py) ---------------------------------------------------
    def heldout_agents(self) -> list[str]:
        """The agents evaluated alone on the held-out questions, one column each (none: the one policy)."""
        return []

    def columns(self) -> list[str]:
        """metrics.parquet's columns: the method's, then the held-out ones (per agent when evaluated)."""
        per_agent = (
            [held.agent_column(c, a) for a in self.heldout_agents() for c in (held.BASE, held.AFTER)]
            if self.heldout_rows
            else []
        )
        return [*self.metric_columns, *held.HELDOUT_COLUMNS, *per_agent]

    def heldout_correct(self, step: int) -> dict[str | None, list[bool]]:
        """This process's share of the held-out questions, answered by the live policy (None: the one
        policy) or by each agent alone: {agent: right or not per question}."""
        raise NotImplementedError

    def evaluate_heldout(self, step: int) -> dict[str, float]:
        """The held-out accuracy after `step` steps: {heldout_accuracy: the mean over the agents (one
        policy: its own), heldout_accuracy_<agent>: each agent's} over every process's questions."""
        start = time.perf_counter()
        accuracy = {agent: pooled(correct) for agent, correct in self.heldout_correct(step).items()}
        out = {held.AFTER: float(np.mean(list(accuracy.values())))}
        out.update(
            {held.agent_column(held.AFTER, agent): value for agent, value in accuracy.items() if agent is not None}
        )
        log.info(
            "step %d: held-out accuracy %.3f on %d questions%s (%.1f s)",
            step,
            out[held.AFTER],
            len(self.heldout_rows),
            "".join(f", {a} {v:.3f}" for a, v in accuracy.items() if a is not None),
            time.perf_counter() - start,
        )
        return out

    def _heldout_metrics(self, steps_done: int, base: dict[str, float]) -> dict:
        """The held-out columns of the row of step `steps_done`: its evaluation when one is due, and
        `base` (step 0's evaluation, renamed heldout_base_accuracy*) on the first row."""
        out = {c: float("nan") for c in self.columns() if c.startswith(held.BASE) or c.startswith(held.AFTER)}
        out[held.COUNT] = len(self.heldout_rows)
        if not self.heldout_rows:
            return out
        out.update({held.BASE + k[len(held.AFTER) :]: v for k, v in base.items()})
        if held.evaluates_after(steps_done, self.settings):
            out.update(self.evaluate_heldout(steps_done))
        return out

    def resume(self) -> bool:
        """Continue from the newest checkpoint of these settings, if there is one."""
        if self.checkpoint_dir is None:
            return False
        restored = load_checkpoint(self.checkpoint_dir, self.policy, self.fingerprint, rank=self.rank, world=self.world)
        if restored is not None:
            self.state = restored
        return restored is not None

    def describe(self, metrics: dict) -> str:
        """The step's log line (after "step k/n: ")."""
        return f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}"

    def engines(self) -> dict:
        """The DeepSpeed or FSDP engines whose partitions a checkpoint holds, by their folder's name
        ({"": a single policy's}, a multi-agent run's {agent: its}), or none."""
        return self.policy.checkpoint_engines()

    def strategy_for(self, policy=None) -> StepStrategy:
        """How `policy`'s optimizer steps are taken across the processes (`strategy.StepStrategy`):
        `policy` (the run's single policy, or an agent's view) through its DeepSpeed / FSDP engine or
        its DDP wrapper (`agents.AgentPolicies.distribute`), or alone."""
        policy = policy or self.policy
        engine, wrapper = policy.engine, policy.wrapper
        return StepStrategy(
            model=engine or wrapper or policy.model,
            optimizer=policy.optimizer,
            trainable=[p for p in policy.model.parameters() if p.requires_grad],
            world=self.world,
            engine=engine,
            ddp=wrapper is not None,
            max_grad_norm=self.settings.max_grad_norm,
        )

    def checkpoint(self) -> None:
        """Rank 0 writes the checkpoint; under DeepSpeed or FSDP every process first saves its part of each engine."""
        partitions = None
        engines = self.engines()
        if engines:  # a killed save of this step may have left partitions (of another world size, even)
            if self.rank == 0:
                shutil.rmtree(zero.staging_dir(self.checkpoint_dir, self.state.step), ignore_errors=True)
            barrier(self.world)
        for name, engine in engines.items():
            partitions = zero.save_partition(engine, self.checkpoint_dir, self.state.step, name)
        if engines:
            barrier(self.world)
        if self.rank == 0:  # an engine's weights are in its own checkpoint: the rest is whole in every process
            save_checkpoint(
                self.checkpoint_dir, self.policy, self.state, self.fingerprint, optimizer_partitions=partitions
            )

    # -- the update -----------------------------------------------------------------------
    def _tensors(self, rollouts: Sequence[Rollout], policy=None):
        """Left-padded prompts and right-padded completions side by side, so every completion starts at
        the same column; the completion mask covers the reply tokens only."""
        import torch

        policy = policy or self.policy
        tokenizer, device = policy.tokenizer, policy.device
        pad = tokenizer.pad_token_id
        prompt_ids = [chat_prompt_ids(tokenizer, r.messages) for r in rollouts]
        width_p = max(len(p) for p in prompt_ids)
        width_c = max(max(r.length for r in rollouts), 1)
        ids, attention, completion = [], [], []
        for p, r in zip(prompt_ids, rollouts):
            c = r.token_ids
            ids.append([pad] * (width_p - len(p)) + p + c + [pad] * (width_c - len(c)))
            attention.append([0] * (width_p - len(p)) + [1] * (len(p) + len(c)) + [0] * (width_c - len(c)))
            completion.append([1] * len(c) + [0] * (width_c - len(c)))
        as_tensor = lambda x: torch.tensor(x, device=device)  # noqa: E731
        advantages = torch.tensor([r.advantage for r in rollouts], device=device, dtype=torch.float32)
        return as_tensor(ids), as_tensor(attention), as_tensor(completion), width_p, advantages

    def _packed_tensors(self, rollouts: Sequence[Rollout], policy=None):
        """The sequences (prompt + completion each) one after another in rows no longer than the longest
        sequence (first fit, longest first; a row's tail after its last sequence is one pad segment),
        position ids restarting at 0 for each; `keep` the flat indices of the positions whose logits
        predict a completion token, and where each goes in the (B, T) layout of `_tensors`' completion
        mask (`packed_token_logprobs`). Rows no longer than the longest sequence keep every row's
        attention (quadratic in its length) within the padded block's, and its tokens within its
        count; one row of all the sequences would attend over their total length.

        With `shared_prompts`, sequences of one prompt (a group's replies, a debate's threads) are one
        segment: the prompt once, then each reply, positions continuing from the prompt's, under a
        tree-shaped mask (each reply sees the prompt and its own tokens); its forward and backward
        run over the prompt once instead of once per reply. Only where the pass shares a prompt and
        the attention takes an arbitrary mask (`_shares_prompts`)."""
        import torch

        policy = policy or self.policy
        pad = policy.tokenizer.pad_token_id
        prompts = [chat_prompt_ids(policy.tokenizer, r.messages) for r in rollouts]
        members: dict[tuple, list[int]] = {}  # a segment's prompt -> its sequences, in the pass's order
        share = self._shares_prompts(policy)
        for b, prompt in enumerate(prompts):
            members.setdefault(tuple(prompt) if share else (b,), []).append(b)
        segments = list(members.values())
        tree = any(len(segment) > 1 for segment in segments)
        sizes = [len(prompts[seg[0]]) + sum(rollouts[b].length for b in seg) for seg in segments]
        capacity = max(sizes)
        rows_of: list[list[int]] = []  # each row's segments (indices into `segments`)
        room: list[int] = []
        for g in sorted(range(len(segments)), key=lambda g: -sizes[g]):
            fit = next((k for k, free in enumerate(room) if free >= sizes[g]), None)
            if fit is None:
                rows_of.append([])
                room.append(capacity)
                fit = len(room) - 1
            rows_of[fit].append(g)
            room[fit] -= sizes[g]
        width = capacity - min(room)
        ids, positions, keep, targets, rows, cols = [], [], [], [], [], []
        allowed = torch.zeros(len(rows_of), width, width, dtype=torch.bool) if tree else None
        for k, row in enumerate(rows_of):
            row_ids, row_positions = [], []
            for g in row:
                prompt = prompts[segments[g][0]]
                begin, end_of_prompt = len(row_ids), len(row_ids) + len(prompt)
                row_ids += prompt
                row_positions += range(len(prompt))
                if tree:
                    allowed[k, begin:end_of_prompt, begin:end_of_prompt] = (
                        torch.ones(len(prompt), len(prompt)).tril().bool()
                    )
                for b in segments[g]:
                    r, start = rollouts[b], len(row_ids)
                    if r.length:  # its first token is predicted at the prompt's last position, the rest at its own
                        keep += [k * width + end_of_prompt - 1] + [k * width + start + j for j in range(r.length - 1)]
                    targets += list(r.token_ids)
                    rows += [b] * r.length
                    cols += range(r.length)
                    row_ids += list(r.token_ids)
                    row_positions += range(len(prompt), len(prompt) + r.length)
                    if tree:
                        allowed[k, start : start + r.length, begin:end_of_prompt] = True
                        own = torch.ones(r.length, r.length).tril().bool()
                        allowed[k, start : start + r.length, start : start + r.length] = own
            tail = width - len(row_ids)
            if tree:  # each pad position sees itself (a row that sees nothing gives NaN)
                allowed[k, len(row_ids) :, len(row_ids) :] = torch.eye(tail, dtype=torch.bool)
            ids.append(row_ids + [pad] * tail)
            positions.append(row_positions + list(range(tail)))
        if not keep:  # no completion token: one index keeps the graph (`packed_token_logprobs`)
            keep, targets = [0], [pad]
        device = policy.device
        as_tensor = lambda x: torch.tensor(x, device=device, dtype=torch.long)  # noqa: E731
        length = max(max(r.length for r in rollouts), 1)
        mask = as_tensor([[1] * r.length + [0] * (length - r.length) for r in rollouts])
        advantages = torch.tensor([r.advantage for r in rollouts], device=device, dtype=torch.float32)
        attention = allowed[:, None].to(device) if tree else None
        packed = (as_tensor(ids), as_tensor(positions), as_tensor(keep), as_tensor(rows), as_tensor(cols))
        return UpdateBatch(mask=mask, advantages=advantages, packed=(*packed, as_tensor(targets), attention))

    def _shares_prompts(self, policy=None) -> bool:
        """Whether a packed pass holds a prompt shared by several sequences once (`shared_prompts`):
        the attention must take an arbitrary mask (SDPA, eager); flash-attention reads only sequence
        boundaries, so there each sequence is packed whole."""
        if not (self.settings.packed_updates and self.settings.shared_prompts):
            return False
        config = getattr(getattr(policy or self.policy, "model", None), "config", None)
        return getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager", CPU_DECODE_SDPA)

    def _precision(self, policy=None):
        """bf16 autocast around a forward when `autocast` is set (the backward follows its casts)."""
        return bf16_autocast((policy or self.policy).device, self.settings.autocast)

    def _batch(self, rollouts: Sequence[Rollout], policy=None) -> UpdateBatch:
        """A micro-batch's inputs: packed (`packed_updates`) or padded."""
        if self.settings.packed_updates:
            return self._packed_tensors(rollouts, policy)
        ids, attention, mask, start, advantages = self._tensors(rollouts, policy)
        return UpdateBatch(mask=mask, advantages=advantages, padded=(ids, attention, start))

    def _plan(self, sequences: list[Rollout], step: int, epoch: int, policy=None) -> list[list[list[Rollout]]]:
        """Mini-batches (of micro-batches) of this process's sequences for one pass, in a seeded shuffle.
        Every process gets the same number of mini-batches (DDP needs one synced backward each)."""
        s = self.settings
        rng = np.random.default_rng(
            int(stable_hash({"run": s.seed, "step": step, "epoch": epoch, "rank": self.rank})[:8], 16)
        )
        local = s.mini_batch_size // self.world
        if s.ratio_level == "trajectory" or self.whole_groups:  # a trajectory's ratio: all in one forward
            return self._plan_groups(sequences, rng, local, policy)
        order = [sequences[i] for i in rng.permutation(len(sequences))]
        count = int(all_reduce(-(-len(order) // local) if order else 0, "max"))
        return [self.micro_batches(order[b * local : (b + 1) * local], policy) for b in range(count)]

    def _plan_groups(self, sequences: list[Rollout], rng, local: int, policy=None) -> list[list[list[Rollout]]]:
        """Whole groups (`Rollout.group`) in a seeded shuffle: a mini-batch takes groups until it holds
        `local` sequences, a micro-batch until `micro_batch_size` sequences or `micro_batch_tokens`.
        A larger group goes alone under the trajectory ratio (it needs one forward), else it is
        split (`whole_groups`: the sizes hold; UMAD then takes that group's π_old from its pass)."""
        groups: dict[str, list[Rollout]] = {}
        for r in sequences:
            groups.setdefault(r.group, []).append(r)
        units = [groups[k] for k in sorted(groups)]
        units = [units[i] for i in rng.permutation(len(units))]
        split = self.settings.ratio_level != "trajectory"
        if split:
            units = [piece for unit in units for piece in (_split(unit) if len(unit) > local else [unit])]
        minibatches = _pack(units, lambda items: len(items) <= local)
        count = int(all_reduce(len(minibatches), "max"))
        minibatches += [[] for _ in range(count - len(minibatches))]
        widths = self._widths(sequences, policy)
        keys = self._prompt_keys(sequences, policy)
        return [self._pack_micro(mb, widths, keys, split=split) for mb in minibatches]

    def micro_batches(self, rollouts: Sequence[Rollout], policy=None) -> list[list[Rollout]]:
        """One mini-batch's sequences as forward/backward passes: `micro_batch_size` sequences each in
        the given order or, with `micro_batch_tokens`, longest first and as many as fit that many
        tokens (prompt + reply): real tokens when packed (`packed_updates`), else the padded block of
        `_tensors`. A budget bounds a pass's activations (and a packed row's attention, quadratic in
        its length) whatever the prompts: a debate's later rounds carry every agent's earlier replies.
        The split changes only the order in which gradients are summed, not the update."""
        widths = self._widths(rollouts, policy)
        units = [[r] for r in rollouts]
        if widths:
            units.sort(key=lambda unit: widths[id(unit[0])], reverse=True)
        keys = self._prompt_keys(rollouts, policy)
        if keys:  # a prompt's sequences side by side, where its first one stood
            together: dict[tuple, list] = {}
            for unit in units:
                together.setdefault(keys[id(unit[0])], []).append(unit)
            units = [unit for group in together.values() for unit in group]
        return self._pack_micro(units, widths, keys)

    def _pack_micro(
        self, units: Sequence[Sequence[Rollout]], widths: dict, keys: dict, split: bool = False
    ) -> list[list[Rollout]]:
        """Units joined into passes of at most `micro_batch_size` sequences and, with `widths`
        (`_widths`), at most `micro_batch_tokens` tokens (real ones packed, a prompt that `keys`
        (`_prompt_keys`) shows shared once; else the padded block). A unit too large for one pass
        goes alone, or with `split` as single sequences."""
        s = self.settings

        def fits(items) -> bool:
            if len(items) > s.micro_batch_size:
                return False
            if not widths:
                return True
            if keys:
                prompts = {keys[id(r)]: widths[id(r)][0] for r in items}
                return sum(prompts.values()) + sum(widths[id(r)][1] for r in items) <= s.micro_batch_tokens
            if s.packed_updates:
                return sum(sum(widths[id(r)]) for r in items) <= s.micro_batch_tokens
            return (
                len(items) * (max(widths[id(r)][0] for r in items) + max(widths[id(r)][1] for r in items))
                <= s.micro_batch_tokens
            )

        if split:
            units = [piece for unit in units for piece in (_split(unit) if not fits(unit) else [unit])]
        return [[r for unit in batch for r in unit] for batch in _pack(units, fits)]

    def _prompt_keys(self, rollouts: Sequence[Rollout], policy=None) -> dict[int, tuple]:
        """Each rollout's prompt under the policy's chat template, as a key (equal keys, one prompt);
        empty where passes don't share prompts (`_shares_prompts`)."""
        if not self._shares_prompts(policy):
            return {}
        tokenizer = (policy or self.policy).tokenizer
        return {id(r): tuple(chat_prompt_ids(tokenizer, r.messages)) for r in rollouts}

    def _widths(self, rollouts: Sequence[Rollout], policy=None) -> dict[int, tuple[int, int]]:
        """(prompt tokens, reply tokens) of each rollout under the policy's chat template; empty
        without `micro_batch_tokens` (nothing is measured then)."""
        if self.settings.micro_batch_tokens is None:
            return {}
        tokenizer = (policy or self.policy).tokenizer
        return {id(r): (len(chat_prompt_ids(tokenizer, r.messages)), max(r.length, 1)) for r in rollouts}

    def logprob_pass(self, micro_batches, policy=None, with_reference: bool = False):
        """π_old's (and the reference's) log-probabilities of each rollout, with no gradient, and the
        policy's entropy per micro-batch: ({id(rollout): (T,)}, {id(rollout): (T,)}, [entropy])."""
        import torch

        policy = policy or self.policy
        temperature = self.settings.temperature  # the rollouts' sampling policy
        old, ref, entropies = {}, {}, []
        micro_batches = self.strategy_for(policy).padded(list(micro_batches), backward=False)
        with torch.no_grad():
            for micro in micro_batches:
                if not micro:  # ZeRO-3: another process's pass, which this one joins
                    self._empty_pass(policy, policy.model, with_reference)
                    continue
                batch = self._batch(micro, policy)
                with self._precision(policy):
                    logps, entropy = batch.logprobs(policy.model, with_entropy=True, temperature=temperature)
                entropies.append(_masked_mean(entropy, batch.mask))
                self._keep(micro, old, logps)
                if with_reference:
                    self._keep(micro, ref, self._reference_logprobs(policy, batch))
        return old, ref, entropies

    def _empty_pass(self, policy, model, with_reference: bool = False):
        """The forward pass (and the reference's) a ZeRO-3 process joins without sequences of its own:
        one pad token, its loss 0 (returned, for the backward pass that joins the others')."""
        import torch

        ids = torch.tensor([[policy.tokenizer.pad_token_id]], device=policy.device)
        if with_reference:
            with torch.no_grad():
                policy.reference_logprobs(lambda m: m(input_ids=ids).logits)
        return model(input_ids=ids).logits.float().sum() * 0.0

    @staticmethod
    def _keep(micro: Sequence[Rollout], stored: dict, logps) -> None:
        """Each rollout's row of (B, T) `logps`, detached, into `stored` by id (the inverse of `_stack`)."""
        for k, r in enumerate(micro):
            stored[id(r)] = logps[k, : r.length].detach().clone()

    def _reference_logprobs(self, policy, batch: UpdateBatch):
        """The reference policy's log-probabilities of the completion tokens, at the sampling temperature."""
        import torch

        with torch.no_grad(), self._precision(policy):
            return policy.reference_logprobs(lambda m: batch.logprobs(m, temperature=self.settings.temperature)[0])

    def update_policy(
        self,
        sequences: list[Rollout],
        step: int,
        policy=None,
        kl_coef: float | None = None,
        precomputed=None,
        first_pass=None,
        reference: bool | None = None,
        first_plan=None,
    ) -> dict:
        """`epochs` clipped-loss passes over `sequences`, for `policy` (default: the run's policy; a
        multi-agent run passes one agent's view) with KL weight `kl_coef` (default: the method block's, `TrainSettings.kl_weight`).
        `precomputed`: `logprob_pass`'s result for these rollouts, taken earlier (UMAD: its turn's
        π_old, taken once for every agent before the turn's updates); with `first_pass`, only for
        the sequences after the first mini-batch, whose π_old (and reference) come from its own
        forward: `first_pass(micro, old_logps, ref_logps)` then completes those rollouts'
        advantages before their loss (UMAD's depend on π_old). `reference`: whether the
        reference's log-probabilities are taken (default: with a KL weight). `first_plan`: the first
        epoch's `_plan` of these sequences, when the caller made it already (UMAD: to find its first
        mini-batch)."""
        import torch

        from .loss import policy_loss

        s = self.settings
        policy = policy or self.policy
        strategy = self.strategy_for(policy)  # zeroes, syncs, clips and steps across the processes
        model = strategy.model
        kl_coef = s.kl_weight if kl_coef is None else kl_coef
        plans = [
            first_plan if epoch == 0 and first_plan is not None else self._plan(sequences, step, epoch, policy)
            for epoch in range(s.epochs)
        ]
        if not plans or not plans[0]:
            return {
                "loss": float("nan"),
                "kl": float("nan"),
                "clip_fraction": float("nan"),
                "entropy": float("nan"),
                "updates": 0,
            }
        # π_old is the policy before the first optimizer step, and the first mini-batch of the first
        # epoch runs before it: its own forward, detached, is π_old there (TRL's GRPOTrainer skips the
        # pass the same way when fully on-policy), so the no-gradient pass (and the reference's) covers
        # only the later mini-batches' sequences; later epochs reuse what the first stored.
        reuse = self.reuse_policy_logprobs and (precomputed is None or first_pass is not None)
        reference = bool(kl_coef) if reference is None else reference
        if precomputed is None:
            rest = [m for mb in plans[0][1 if reuse else 0 :] for m in mb]
            precomputed = self.logprob_pass(rest, policy, with_reference=reference)
        old, ref, entropies = dict(precomputed[0]), dict(precomputed[1]), list(precomputed[2])
        losses, clip_fractions, kls, tokens_seen, updates = [], [], [], [], 0
        for epoch, plan in enumerate(plans):
            for index, minibatch in enumerate(plan):
                first = reuse and epoch == 0 and index == 0  # π_old from its own forward (above)
                local_tokens = sum(r.length for micro in minibatch for r in micro)
                local_sequences = sum(len(micro) for micro in minibatch)
                if s.loss_aggregation == "token_mean":
                    normaliser = all_reduce(local_tokens)
                else:
                    normaliser = all_reduce(local_sequences)
                normaliser = max(normaliser, 1.0) / self.world  # DDP and ZeRO average the processes' gradients
                strategy.begin()
                micro_batches = strategy.padded(minibatch or [[]])
                loss_total = 0.0
                for k, micro in enumerate(micro_batches):
                    with strategy.micro(last=k == len(micro_batches) - 1):
                        if (
                            not micro
                        ):  # nothing of this process in this pass: a zero loss keeps the others' reduction in step
                            strategy.empty(lambda: self._empty_pass(policy, model, first and reference))
                            continue
                        batch = self._batch(micro, policy)
                        with self._precision(policy):
                            logps, entropy = batch.logprobs(model, with_entropy=first, temperature=s.temperature)
                        if first:
                            old_logps = logps.detach()
                            self._keep(micro, old, old_logps)
                            entropies.append(_masked_mean(entropy, batch.mask))
                            ref_logps = self._reference_logprobs(policy, batch) if reference else None
                            if reference:
                                self._keep(micro, ref, ref_logps)
                            if first_pass is not None:  # the advantages that need π_old, then the loss
                                first_pass(micro, old_logps, ref_logps)
                                batch.advantages = torch.tensor(
                                    [r.advantage for r in micro], device=batch.device, dtype=torch.float32
                                )
                            ref_logps = ref_logps if kl_coef else None
                        else:
                            old_logps = self._stack(micro, old, logps)
                            ref_logps = self._stack(micro, ref, logps) if kl_coef else None
                        group_ids = {g: k for k, g in enumerate(dict.fromkeys(r.group for r in micro))}
                        groups = torch.tensor([group_ids[r.group] for r in micro], device=batch.device)
                        parts = policy_loss(
                            logps,
                            old_logps,
                            batch.advantages,
                            batch.mask,
                            clip_low=s.clip_low,
                            clip_high=s.clip_high,
                            aggregation=s.loss_aggregation,
                            normaliser=normaliser,
                            ref_logprobs=ref_logps,
                            kl_coef=kl_coef,
                            kl_estimator=s.kl_estimator,
                            ratio_level=s.ratio_level,
                            groups=groups,
                            weights=self._sequence_weights(micro, batch.device),
                        )
                        strategy.backward(parts.loss)
                        loss_total += float(parts.loss.detach())
                        clip_fractions.append(parts.clip_fraction * parts.tokens)
                        kls.append(parts.kl * parts.tokens)
                        tokens_seen.append(parts.tokens)
                strategy.step()
                release_host_memory(policy.device)
                losses.append(loss_total / self.world)
                updates += 1
        # statistics of every process's tokens (each process's loss is its share of the mini-batch's)
        seen = max(all_reduce(sum(tokens_seen)), 1)
        return {
            "loss": all_reduce(float(np.mean(losses))),
            "kl": all_reduce(sum(kls)) / seen,
            "clip_fraction": all_reduce(sum(clip_fractions)) / seen,
            "entropy": pooled(entropies),
            "updates": updates,
        }

    @staticmethod
    def _sequence_weights(rollouts: Sequence[Rollout], device):
        """The rollouts' loss weights (`Rollout.weight`) as a (B,) tensor, or None when all are 1 (the
        loss is then computed exactly as without weights)."""
        import torch

        if all(r.weight == 1.0 for r in rollouts):
            return None
        return torch.tensor([r.weight for r in rollouts], device=device, dtype=torch.float32)

    @staticmethod
    def _stack(micro: Sequence[Rollout], stored: dict, like):
        import torch

        out = torch.zeros_like(like)
        for k, r in enumerate(micro):
            out[k, : r.length] = stored[id(r)]
        return out


class Trainer(BaseTrainer):
    """One policy (`policy.Policy`) with its reward function (`rollouts.load_reward`); several
    processes average its gradients through DDP (accelerate's wrapper), or through DeepSpeed ZeRO
    (`zero.py`) or FSDP2 (`fsdp.py`) when `accelerate launch` runs a DeepSpeed or FSDP config."""

    def __init__(
        self,
        questions: pd.DataFrame,
        policy,
        settings,
        *,
        run: str,
        system_prompt: str | None = None,
        reward: RewardFunction | None = None,
        checkpoint_dir=None,
        fingerprint: str | dict = "",
        heldout: pd.DataFrame | None = None,
    ):
        super().__init__(
            questions,
            policy,
            settings,
            run=run,
            checkpoint_dir=checkpoint_dir,
            fingerprint=fingerprint,
            heldout=heldout,
        )
        self.system_prompt = system_prompt
        self.reward = reward or load_reward(settings)

    def check_processes(self) -> None:
        own = self.settings.own
        if own.prompts_per_step % self.world:
            raise ValueError(
                f"training: {self.settings.method}.prompts_per_step = {own.prompts_per_step} must divide among "
                f"{self.world} processes"
            )

    @classmethod
    def load_policies(cls, bases: dict[str, str], settings, *, device: str):
        """The one policy (`policy.Policy`) of the job's one agent."""
        from .policy import Policy

        ((_, model_path),) = bases.items()
        return Policy(model_path, settings, device=device)

    @classmethod
    def job_fingerprint(cls, settings, *, bases, dataset_path, questions, system_prompts, participants, own, world):
        """The base weights, the dataset's questions, the prompt and the optimizer's split
        (`checkpoint.policy_fingerprint`)."""
        ((agent, model_path),) = bases.items()
        return policy_fingerprint(
            settings, str(model_path), str(dataset_path), system_prompts[agent], zero.layout(world)
        )

    @classmethod
    def job_arguments(cls, *, system_prompts: dict, participants, reward, own: dict) -> dict:
        (system_prompt,) = system_prompts.values()
        return {"system_prompt": system_prompt, "reward": reward, **own}

    def save_models(self, out_dirs: dict[str, str]) -> None:
        """The policy as a plain Hugging Face folder (LoRA merged into the base)."""
        (out,) = out_dirs.values()
        self.policy.save(out)

    def heldout_correct(self, step: int) -> dict[str | None, list[bool]]:
        """This process's share of the held-out questions answered by the live policy: {None: right or not}."""
        self.policy.model.eval()
        backend = self.policy.backend(model_id=f"policy:{self.run_name}@heldout{step}")
        correct = held.answer_heldout(
            backend,
            self.heldout_rows[self.rank :: self.world],
            self.system_prompt,
            self.settings,
            load_grader(self.settings),
        )
        self.policy.rollouts_done()
        return {None: correct}
