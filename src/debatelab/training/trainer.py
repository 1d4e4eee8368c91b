"""The training loop of DAPO and SDRL (spec 003 §2): rollouts, advantages, the clipped update.

One rollout step:
1. First turn. Draw prompts in the run's seeded question order, sample n rollouts of each (one
   backend batch per sampling round), reward them, and with dynamic sampling keep the groups with
   0 < #correct < n until `prompts_per_step` are kept (or `max_sampling_rounds` were drawn).
2. Group advantages (Eq. 6) per kept prompt.
3. SDRL: a seeded random `debate_prompts_per_step` of the kept prompts get a debate prompt built
   from two of their own rollouts (`pair_mode`), n_d second-turn rollouts each; groups whose
   rollouts are all correct or all wrong are dropped; advantages within each debate group.
4. One joint update over first-turn and debate sequences: π_old's log-probabilities first (no
   gradient), then `epochs` passes over the shuffled sequences in mini-batches of
   `mini_batch_size`, each one optimizer step on the clipped loss (`loss.policy_loss`), accumulated
   over micro-batches with the mini-batch's token count as normaliser.

Data parallel: with several processes (`accelerate launch`), every process samples its share of
each round's prompts and updates on its own sequences; gradients are averaged by DDP (or by
DeepSpeed ZeRO, which also splits the optimizer state: `zero.py`) and the loss normaliser is the
token count of all processes' mini-batch, so the update equals one process training on the whole
batch.
"""
from __future__ import annotations

import contextlib
import logging
import time
import warnings
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .. import prompts
from ..llm.base import stable_hash
from ..llm.chat import chat_prompt_ids
from . import zero
from . import heldout as held
from .checkpoint import TrainState, load_checkpoint, save_checkpoint
from .loss import policy_loss, token_logprobs
from .policy import release_host_memory
from .rewards import group_advantages, mixed
from .rollouts import Rollout, RewardFunction, load_grader, load_reward, sample_rollouts
from .sdrl import choose_pair

log = logging.getLogger(__name__)

METRIC_COLUMNS = [
    "step", "loss", "reward_mean", "reward_std", "accuracy", "kl", "clip_fraction", "entropy", "response_length",
    "prompts_sampled", "groups_kept", "debate_groups", "debate_groups_kept", "debate_groups_all_correct",
    "debate_groups_all_wrong", "debate_accuracy", "debate_pair_accuracy", "sequences",
    "updates", "learning_rate", "rollout_seconds", "update_seconds", "tokens_per_second",
]


def _world():
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _all_reduce(value: float, op: str = "sum") -> float:
    import torch
    import torch.distributed as dist

    rank, world = _world()
    if world == 1:
        return value
    tensor = torch.tensor([float(value)], dtype=torch.float64)
    if dist.get_backend() == "nccl":
        tensor = tensor.cuda()
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return float(tensor.item())


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


def average_gradients(params, world: int) -> None:
    """The processes' gradients of `params` averaged in place (one all-reduce over all of them), as
    DDP would: a multi-agent run updates one agent's adapter at a time, outside any DDP wrapper."""
    import torch
    import torch.distributed as dist

    for p in params:
        if p.grad is None:  # every process must send the same buffer
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat)
    flat /= world
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p.grad))
        offset += p.numel()


def pooled(values, *, std: bool = False):
    """The mean (and standard deviation) of `values` over every process's values."""
    values = np.asarray(values, dtype=float).ravel()
    count = _all_reduce(values.size)
    total = _all_reduce(float(values.sum()))
    mean = total / count if count else float("nan")
    if not std:
        return mean
    squares = _all_reduce(float(((values - mean) ** 2).sum()))
    return mean, (squares / count) ** 0.5 if count else float("nan")


def _masked_mean(values, mask) -> float:
    """Mean of `values` over the positions `mask` marks (0 when none is)."""
    return float((values * mask).sum()) / max(float(mask.sum()), 1.0)


class Trainer:
    metric_columns = METRIC_COLUMNS
    wraps_model = True  # data parallel through DDP or DeepSpeed; a multi-agent run averages by hand
    reuse_policy_logprobs = True  # a fully on-policy update takes π_old from its own forward (`_update`)

    def __init__(self, questions: pd.DataFrame, policy, settings, *, run: str, system_prompt: str | None = None,
                 reward: RewardFunction | None = None, checkpoint_dir=None, fingerprint: str | dict = "",
                 heldout: pd.DataFrame | None = None):
        """`heldout`: the held-out dataset whose accuracy the run measures as it trains (`heldout.py`)."""
        if questions.empty:
            raise ValueError(f"training run {run!r}: no training questions")
        self.rows = questions.to_dict("records")
        self.heldout_rows = held.heldout_questions(heldout, settings) if heldout is not None else []
        self.policy, self.settings, self.run_name = policy, settings, run
        self.system_prompt = system_prompt
        self.reward = reward or load_reward(settings)
        self.checkpoint_dir, self.fingerprint = checkpoint_dir, fingerprint
        self.rank, self.world = _world()
        for name in ("prompts_per_step", "mini_batch_size"):
            if getattr(settings, name) % self.world:
                raise ValueError(f"training: {name} = {getattr(settings, name)} must divide among {self.world} processes")
        self.model, self.engine = policy.model, None
        if self.world > 1 and self.wraps_model and zero.requested():
            self.model = self.engine = zero.wrap(policy.model, policy.optimizer, settings, self.world)
        elif self.world > 1 and self.wraps_model:
            from torch.nn.parallel import DistributedDataParallel

            self.model = DistributedDataParallel(policy.model, find_unused_parameters=False)
        self.state = TrainState()

    # -- data order -----------------------------------------------------------------------
    def _order(self, epoch: int) -> np.ndarray:
        return np.random.default_rng([self.settings.seed, epoch]).permutation(len(self.rows))

    def _draw(self, k: int) -> list[dict]:
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
    def train(self) -> pd.DataFrame:
        s = self.settings
        self.resume()
        # step 0 (the base model): evaluated before the first step, recorded on its row
        base = self.evaluate_heldout(0) if self.heldout_rows and self.state.step == 0 else {}
        bar = tqdm(total=s.steps, initial=self.state.step, desc=f"train {self.run_name}", unit="step",
                   disable=not s.show_progress or self.rank != 0, dynamic_ncols=True)
        with bar:
            while self.state.step < s.steps:
                metrics = self.train_step(self.state.step)
                metrics.update(self._heldout_metrics(self.state.step + 1, base if self.state.step == 0 else {}))
                self.state.metrics.append(metrics)
                self.state.step += 1
                bar.update(1)
                bar.set_postfix(reward=f"{metrics['reward_mean']:.3f}", acc=f"{metrics['accuracy']:.2f}")
                log.info("step %d/%d: %s; loss %.4f; rollout %.1f s, update %.1f s, %.0f tokens/s", self.state.step,
                         s.steps, self._describe(metrics), metrics["loss"], metrics["rollout_seconds"],
                         metrics["update_seconds"], metrics["tokens_per_second"])
                if self.checkpoint_dir is not None and (
                        self.state.step % s.checkpoint_every == 0 or self.state.step == s.steps):
                    self._checkpoint()
                self._barrier()
        return pd.DataFrame(self.state.metrics, columns=self.columns())

    # -- held-out accuracy (heldout.py) ---------------------------------------------------
    def heldout_agents(self) -> list[str]:
        """The agents evaluated alone on the held-out questions, one column each (none: the one policy)."""
        return []

    def columns(self) -> list[str]:
        """metrics.parquet's columns: the method's, then the held-out ones (per agent when evaluated)."""
        per_agent = [held.agent_column(c, a) for a in self.heldout_agents() for c in (held.BASE, held.AFTER)] \
            if self.heldout_rows else []
        return [*self.metric_columns, *held.HELDOUT_COLUMNS, *per_agent]

    def heldout_correct(self, step: int) -> dict[str | None, list[bool]]:
        """This process's share of the held-out questions answered by the live policy: {None: right or not}."""
        self.policy.model.eval()
        backend = self.policy.backend(model_id=f"policy:{self.run_name}@heldout{step}")
        correct = held.answer_heldout(backend, self.heldout_rows[self.rank :: self.world], self.system_prompt,
                                      self.settings, load_grader(self.settings))
        self.policy.rollouts_done()
        return {None: correct}

    def evaluate_heldout(self, step: int) -> dict[str, float]:
        """The held-out accuracy after `step` steps: {heldout_accuracy: the mean over the agents (one
        policy: its own), heldout_accuracy_<agent>: each agent's} over every process's questions."""
        start = time.perf_counter()
        accuracy = {agent: pooled(correct) for agent, correct in self.heldout_correct(step).items()}
        out = {held.AFTER: float(np.mean(list(accuracy.values())))}
        out.update({held.agent_column(held.AFTER, agent): value for agent, value in accuracy.items() if agent is not None})
        log.info("step %d: held-out accuracy %.3f on %d questions%s (%.1f s)", step, out[held.AFTER],
                 len(self.heldout_rows), "".join(f", {a} {v:.3f}" for a, v in accuracy.items() if a is not None),
                 time.perf_counter() - start)
        return out

    def _heldout_metrics(self, steps_done: int, base: dict[str, float]) -> dict:
        """The held-out columns of the row of step `steps_done`: its evaluation when one is due, and
        `base` (step 0's evaluation, renamed heldout_base_accuracy*) on the first row."""
        out = {c: float("nan") for c in self.columns() if c.startswith(held.BASE) or c.startswith(held.AFTER)}
        out[held.COUNT] = len(self.heldout_rows)
        if not self.heldout_rows:
            return out
        out.update({held.BASE + k[len(held.AFTER):]: v for k, v in base.items()})
        if held.evaluates_after(steps_done, self.settings):
            out.update(self.evaluate_heldout(steps_done))
        return out

    def resume(self) -> bool:
        """Continue from the newest checkpoint of these settings, if there is one."""
        if self.checkpoint_dir is None:
            return False
        restored = load_checkpoint(self.checkpoint_dir, self.policy, self.fingerprint, engine=self.engine,
                                   rank=self.rank, world=self.world)
        if restored is not None:
            self.state = restored
        return restored is not None

    def _describe(self, metrics: dict) -> str:
        return (f"reward {metrics['reward_mean']:.3f}, accuracy {metrics['accuracy']:.3f}, {metrics['groups_kept']} of "
                f"{metrics['prompts_sampled']} groups kept, {metrics['debate_groups_kept']} debate groups kept")

    def _checkpoint(self) -> None:
        """Rank 0 writes the checkpoint; under ZeRO every process first saves its optimizer partition."""
        partitions = None
        if self.engine is not None:
            partitions = zero.save_partition(self.engine, self.checkpoint_dir, self.state.step, self.rank)
            self._barrier()
        if self.rank == 0:
            save_checkpoint(self.checkpoint_dir, self.policy, self.state, self.fingerprint,
                            optimizer_partitions=partitions)

    def _barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def train_step(self, step: int) -> dict:
        s = self.settings
        start = time.perf_counter()
        self.policy.model.eval()
        backend = self.policy.backend(model_id=f"policy:{self.run_name}@step{step}")
        first, kept, sampled = self._first_turn(backend, step)
        sequences = [r for _, group in kept for r in group]
        debate_groups, debate_kept, debate_rollouts, debate_counts = (
            self._debate_turn(backend, step, kept) if s.method == "sdrl" else (0, [], [], {}))
        sequences += [r for group in debate_kept for r in group]
        self.policy.rollouts_done()
        rollout_seconds = time.perf_counter() - start
        generated = sum(r.length for group in first for r in group) + sum(r.length for r in debate_rollouts)

        self.policy.model.train()
        update_start = time.perf_counter()
        update = self._update(sequences, step)
        update_seconds = time.perf_counter() - update_start
        learning_rate = self.policy.scheduler.get_last_lr()[0]
        with warnings.catch_warnings():  # a step whose groups were all filtered made no optimizer step
            warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step()`")
            self.policy.scheduler.step()

        rewards = np.array([r.reward for group in first for r in group])
        correct = np.array([r.correct for group in first for r in group])
        return {
            "step": step + 1, "loss": update["loss"],
            "reward_mean": float(rewards.mean()) if rewards.size else float("nan"),
            "reward_std": float(rewards.std()) if rewards.size else float("nan"),
            "accuracy": float(correct.mean()) if correct.size else float("nan"),
            "kl": update["kl"], "clip_fraction": update["clip_fraction"], "entropy": update["entropy"],
            "response_length": float(np.mean([r.length for group in first for r in group])) if first else float("nan"),
            "prompts_sampled": sampled, "groups_kept": len(kept), "debate_groups": debate_groups,
            "debate_groups_kept": len(debate_kept),
            "debate_groups_all_correct": debate_counts.get("debate_groups_all_correct", 0),
            "debate_groups_all_wrong": debate_counts.get("debate_groups_all_wrong", 0),
            "debate_pair_accuracy": debate_counts.get("debate_pair_accuracy", float("nan")),
            "debate_accuracy": float(np.mean([r.correct for r in debate_rollouts])) if debate_rollouts else float("nan"),
            "sequences": len(sequences), "updates": update["updates"], "learning_rate": learning_rate,
            "rollout_seconds": rollout_seconds, "update_seconds": update_seconds,
            "tokens_per_second": generated / max(rollout_seconds + update_seconds, 1e-9),
        }

    # -- rollouts -------------------------------------------------------------------------
    def _question_prompt(self, row: dict) -> tuple[dict, str, list]:
        return row, str(row["id"]), prompts.question_messages(row, self.system_prompt)

    def _first_turn(self, backend, step: int):
        """(every first-turn group sampled, the kept (row, group) pairs, prompts sampled) of this process."""
        s = self.settings
        quota = s.prompts_per_step // self.world
        draw = s.sampling_batch or s.prompts_per_step
        sampled_groups, kept, sampled = [], [], 0
        for _ in range(s.max_sampling_rounds if s.dynamic_sampling else 1):
            rows = self._draw(draw)[self.rank :: self.world]
            groups = sample_rollouts(backend, [self._question_prompt(r) for r in rows], n=s.rollouts_per_prompt,
                                     turn=1, step=step, settings=s, reward=self.reward)
            sampled += len(rows)
            sampled_groups += groups
            for row, group in zip(rows, groups):
                if not s.dynamic_sampling or mixed([r.correct for r in group]):
                    kept.append((row, group))
            if not s.dynamic_sampling or _all_reduce(min(len(kept), quota)) >= s.prompts_per_step:
                break
        kept = kept[:quota]
        for _, group in kept:
            for r, a in zip(group, group_advantages([r.reward for r in group], s.advantage_eps)):
                r.advantage = float(a)
        return sampled_groups, kept, sampled

    def _debate_turn(self, backend, step: int, kept):
        """SDRL's second turn: (debate prompts, kept debate groups, every debate rollout) of this process."""
        s = self.settings
        if not kept or not s.debate_prompts_per_step:
            return 0, [], [], {}
        rng = np.random.default_rng(int(stable_hash({"run": s.seed, "step": step, "rank": self.rank, "what": "debate"})[:8], 16))
        count = min(max(s.debate_prompts_per_step // self.world, 1), len(kept))
        chosen = sorted(rng.choice(len(kept), size=count, replace=False).tolist())
        prompts_, pair_correct = [], []
        for index in chosen:
            row, group = kept[index]
            first, second = choose_pair(group, s.pair_mode, rng, row["task_type"])
            pair_correct += [first.correct, second.correct]
            messages = prompts.self_debate_messages(row, self.system_prompt, first.text, second.text, s.debate_template)
            prompts_.append((row, f"{row['id']}#debate", messages))
        groups = sample_rollouts(backend, prompts_, n=s.debate_rollouts, turn=2, step=step, settings=s, reward=self.reward)
        kept_groups, all_correct, all_wrong = [], 0, 0
        for group in groups:
            # All correct or all wrong: dropped, decided on correctness as the paper's filter (spec 003
            # §2), not on rewards, which the overlong penalty makes unequal; SDRL does not resample.
            if not mixed([r.correct for r in group]):
                all_correct += all(r.correct for r in group)
                all_wrong += not any(r.correct for r in group)
                continue
            for r, a in zip(group, group_advantages([r.reward for r in group], s.advantage_eps)):
                r.advantage = float(a)
            kept_groups.append(group)
        # §9.3's quantities: the pair's own accuracy (the two first-turn answers shown) and why groups were dropped
        counts = {"debate_groups_all_correct": all_correct, "debate_groups_all_wrong": all_wrong,
                  "debate_pair_accuracy": float(np.mean(pair_correct)) if pair_correct else float("nan")}
        return len(prompts_), kept_groups, [r for group in groups for r in group], counts

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

    def _plan(self, sequences: list[Rollout], step: int, epoch: int, policy=None) -> list[list[list[Rollout]]]:
        """Mini-batches (of micro-batches) of this process's sequences for one pass, in a seeded shuffle.
        Every process gets the same number of mini-batches (DDP needs one synced backward each)."""
        s = self.settings
        rng = np.random.default_rng(int(stable_hash({"run": s.seed, "step": step, "epoch": epoch, "rank": self.rank})[:8], 16))
        local = s.mini_batch_size // self.world
        if s.ratio_level == "trajectory":  # a trajectory's ratio needs all its sequences in one forward
            return self._plan_groups(sequences, rng, local, policy)
        order = [sequences[i] for i in rng.permutation(len(sequences))]
        count = int(_all_reduce(-(-len(order) // local) if order else 0, "max"))
        return [self.micro_batches(order[b * local : (b + 1) * local], policy) for b in range(count)]

    def _plan_groups(self, sequences: list[Rollout], rng, local: int, policy=None) -> list[list[list[Rollout]]]:
        """Whole groups (`Rollout.group`) in a seeded shuffle: a mini-batch takes groups until it holds
        `local` sequences, a micro-batch until `micro_batch_size` sequences or `micro_batch_tokens`
        (a larger group goes alone)."""
        groups: dict[str, list[Rollout]] = {}
        for r in sequences:
            groups.setdefault(r.group, []).append(r)
        units = [groups[k] for k in sorted(groups)]
        units = [units[i] for i in rng.permutation(len(units))]
        minibatches = _pack(units, lambda items: len(items) <= local)
        count = int(_all_reduce(len(minibatches), "max"))
        minibatches += [[] for _ in range(count - len(minibatches))]
        widths = self._widths(sequences, policy)
        return [self._pack_micro(mb, widths) for mb in minibatches]

    def micro_batches(self, rollouts: Sequence[Rollout], policy=None) -> list[list[Rollout]]:
        """One mini-batch's sequences as forward/backward passes: `micro_batch_size` sequences each in
        the given order or, with `micro_batch_tokens`, longest first and as many as fit that many
        padded tokens (prompt + reply columns of `_tensors`). A budget bounds a pass's activations
        whatever the prompts: a debate's later rounds carry every agent's earlier replies. The
        split changes only the order in which gradients are summed, not the update."""
        widths = self._widths(rollouts, policy)
        units = [[r] for r in rollouts]
        if widths:
            units.sort(key=lambda unit: widths[id(unit[0])], reverse=True)
        return self._pack_micro(units, widths)

    def _pack_micro(self, units: Sequence[Sequence[Rollout]], widths: dict) -> list[list[Rollout]]:
        """Units joined into passes of at most `micro_batch_size` sequences and, with `widths`
        (`_widths`), at most `micro_batch_tokens` padded tokens."""
        s = self.settings

        def fits(items) -> bool:
            if len(items) > s.micro_batch_size:
                return False
            if not widths:
                return True
            return len(items) * (max(widths[id(r)][0] for r in items) + max(widths[id(r)][1] for r in items)) \
                <= s.micro_batch_tokens

        return [[r for unit in batch for r in unit] for batch in _pack(units, fits)]

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
        with torch.no_grad():
            for micro in micro_batches:
                ids, attention, mask, start, _ = self._tensors(micro, policy)
                logps, entropy = token_logprobs(policy.model, ids, attention, start, with_entropy=True,
                                                temperature=temperature)
                entropies.append(_masked_mean(entropy, mask))
                if with_reference:
                    ref_logps = self._reference_logprobs(policy, ids, attention, start)
                for k, r in enumerate(micro):
                    old[id(r)] = logps[k, : r.length].clone()
                    if with_reference:
                        ref[id(r)] = ref_logps[k, : r.length].clone()
        return old, ref, entropies

    def _reference_logprobs(self, policy, ids, attention, start):
        """The reference policy's log-probabilities of the completion tokens, at the sampling temperature."""
        import torch

        with torch.no_grad():
            return policy.reference_logprobs(
                lambda m: token_logprobs(m, ids, attention, start, temperature=self.settings.temperature)[0])

    def _update(self, sequences: list[Rollout], step: int, policy=None, kl_coef: float | None = None,
                precomputed=None) -> dict:
        """`epochs` clipped-loss passes over `sequences`, for `policy` (default: the run's policy; a
        multi-agent run passes one agent's view) with KL weight `kl_coef` (default: the setting).
        `precomputed`: `logprob_pass`'s result for these rollouts, taken earlier (UMAD keeps the
        rollout policy's log-probabilities across its turn-by-turn updates)."""
        import torch

        s = self.settings
        policy = policy or self.policy
        model = self.model if policy is self.policy else policy.model
        kl_coef = s.kl_coef if kl_coef is None else kl_coef
        plans = [self._plan(sequences, step, epoch, policy) for epoch in range(s.epochs)]
        if not plans or not plans[0]:
            return {"loss": float("nan"), "kl": float("nan"), "clip_fraction": float("nan"),
                    "entropy": float("nan"), "updates": 0}
        # One mini-batch of one epoch is fully on-policy: π_old is the policy of the update's own
        # forward, detached (TRL's GRPOTrainer skips the pass the same way), which saves a forward.
        on_policy = precomputed is None and self.reuse_policy_logprobs and len(plans) == 1 and len(plans[0]) == 1
        # π_old (and the reference) on exactly the first pass's micro-batches, before any update.
        if precomputed is None and not on_policy:
            precomputed = self.logprob_pass([m for mb in plans[0] for m in mb], policy, with_reference=bool(kl_coef))
        old, ref, entropies = precomputed if not on_policy else ({}, {}, [])
        losses, clip_fractions, kls, tokens_seen, updates = [], [], [], [], 0
        trainable = [p for p in policy.model.parameters() if p.requires_grad]
        engine = self.engine if policy is self.policy else None  # DeepSpeed steps, clips and syncs itself
        by_hand = self.world > 1 and policy is not self.policy  # a multi-agent view: no DDP wrapper to sync it
        for plan in plans:
            for minibatch in plan:
                local_tokens = sum(r.length for micro in minibatch for r in micro)
                local_sequences = sum(len(micro) for micro in minibatch)
                if s.loss_aggregation == "token_mean":
                    normaliser = _all_reduce(local_tokens)
                else:
                    normaliser = _all_reduce(local_sequences)
                normaliser = max(normaliser, 1.0) / self.world  # DDP and ZeRO average the processes' gradients
                if engine is None:
                    policy.optimizer.zero_grad(set_to_none=True)  # DeepSpeed zeroes them in its step
                micro_batches = minibatch or [[]]
                loss_total = 0.0
                for k, micro in enumerate(micro_batches):
                    sync = k == len(micro_batches) - 1
                    if engine is not None:
                        engine.set_gradient_accumulation_boundary(sync)  # reduce the gradients after the last
                    context = contextlib.nullcontext() if sync or self.world == 1 or engine is not None or by_hand \
                        else model.no_sync()
                    with context:
                        if not micro:  # nothing of this process in this mini-batch: a zero loss keeps DDP in step
                            self._backward(sum(p.sum() for p in trainable) * 0.0, engine)
                            continue
                        ids, attention, mask, start, advantages = self._tensors(micro, policy)
                        logps, entropy = token_logprobs(model, ids, attention, start, with_entropy=on_policy,
                                                        temperature=s.temperature)
                        if on_policy:
                            old_logps = logps.detach()
                            entropies.append(_masked_mean(entropy, mask))
                            ref_logps = self._reference_logprobs(policy, ids, attention, start) if kl_coef else None
                        else:
                            old_logps = self._stack(micro, old, logps)
                            ref_logps = self._stack(micro, ref, logps) if kl_coef else None
                        group_ids = {g: k for k, g in enumerate(dict.fromkeys(r.group for r in micro))}
                        groups = torch.tensor([group_ids[r.group] for r in micro], device=ids.device)
                        parts = policy_loss(logps, old_logps, advantages, mask, clip_low=s.clip_low, clip_high=s.clip_high,
                                            aggregation=s.loss_aggregation, normaliser=normaliser,
                                            ref_logprobs=ref_logps, kl_coef=kl_coef, kl_estimator=s.kl_estimator,
                                            ratio_level=s.ratio_level, groups=groups,
                                            weights=self._sequence_weights(micro, ids.device))
                        self._backward(parts.loss, engine)
                        loss_total += float(parts.loss.detach())
                        clip_fractions.append(parts.clip_fraction * parts.tokens)
                        kls.append(parts.kl * parts.tokens)
                        tokens_seen.append(parts.tokens)
                if by_hand:
                    average_gradients(trainable, self.world)
                if engine is not None:
                    engine.step()
                else:
                    if s.max_grad_norm:
                        torch.nn.utils.clip_grad_norm_(trainable, s.max_grad_norm)
                    policy.optimizer.step()
                release_host_memory(policy.device)
                losses.append(loss_total / self.world)
                updates += 1
        # statistics of every process's tokens (each process's loss is its share of the mini-batch's)
        seen = max(_all_reduce(sum(tokens_seen)), 1)
        return {"loss": _all_reduce(float(np.mean(losses))), "kl": _all_reduce(sum(kls)) / seen,
                "clip_fraction": _all_reduce(sum(clip_fractions)) / seen, "entropy": pooled(entropies),
                "updates": updates}

    @staticmethod
    def _sequence_weights(rollouts: Sequence[Rollout], device):
        """The rollouts' loss weights (`Rollout.weight`) as a (B,) tensor, or None when all are 1 (the
        loss is then computed exactly as without weights)."""
        import torch

        if all(r.weight == 1.0 for r in rollouts):
            return None
        return torch.tensor([r.weight for r in rollouts], device=device, dtype=torch.float32)

    @staticmethod
    def _backward(loss, engine=None) -> None:
        if engine is not None:
            engine.backward(loss, scale_wrt_gas=False)  # the loss carries its own normaliser
        else:
            loss.backward()

    @staticmethod
    def _stack(micro: Sequence[Rollout], stored: dict, like):
        import torch

        out = torch.zeros_like(like)
        for k, r in enumerate(micro):
            out[k, : r.length] = stored[id(r)]
        return out
