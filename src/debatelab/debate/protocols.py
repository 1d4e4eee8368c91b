"""Debate protocols, each a per-question generator driven by the engine.

Every protocol starts from the shared pre-debate answers (`QuestionState.pre`, round 0 of
the zero-shot stage) and never regenerates them. Kinds (config `debate.protocols.*.kind`):

=================  =======================================================================
self_consistency   plurality of the pre-debate answers; no debate (Wang et al.)
all_to_all         Du et al.: every agent sees every other agent's previous response
mad_d              all_to_all, but only on questions whose pre-debate answers disagree
ring               each agent sees its neighbours i−1 and i+1 (sparse MAD)
centralized        agent 0 sees everyone, the others see agent 0 only
group_debate       random groups: full responses inside a group, answers only across groups
s2_mad             an agent sees only peers whose current answer differs from its own, and
                   makes no call when there is none
sid_et             unanimous questions never debate; of the rest, skip debate on the share (a skip
                   rate) where one agent's pre-debate minimum token log-likelihood is highest;
                   all_to_all on the others
svr_mad            SVR-MAD Algorithm 1: posterior-guided pairwise challenges (Jiang et al., arXiv:2605.23099 §4, Algorithm 1)
=================  =======================================================================

Votes are `grading.plurality`: invalid answers never vote; ties go to the first agent in order
(`first_agent`, Du et al. and UDPO) or to the answer with more pre-debate votes, then the first
agent (`pre_debate_count`, as SVR-MAD's fallback vote, arXiv:2605.23099 §4).

"The same answer" is one rule for every protocol: the question's `QuestionState.classes`
(`grading.AnswerClasses`: canonical keys, then the grader's math equivalence, so "2^{n}-1" and
"2^n-1", or "\\frac{\\sqrt2}{2}" and "\\frac{1}{\\sqrt2}", are one answer). Votes (self-consistency's
too), early-stop agreement counts, unanimity (MAD-D, SID-ET), S2-MAD's link pruning and SVR-MAD's
clusters, disagreement, retention and votes (Jiang et al., arXiv:2605.23099 §5 `eq`) all compare answer classes, so no
baseline counts one answer written two ways as two.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from .. import prompts
from ..grading import AnswerClasses, plurality, vote_answer
from .engine import Ask, Outcome, ProtocolRun, QuestionState, Turn

DEFAULTS = {
    "rounds": 2,
    "template": "du",
    "peer_content": "full",
    "mask_peer_boxed": False,
    "early_stop_agree": None,
    "skip_if_unanimous": False,
    "final": "vote",
    "tie_break": "first_agent",
    "threads": None,
    "debate_max_tokens": None,
    "confidence": [],
    "group_size": 3,
    "cross_group_ncomm": "agent_pair",
    "skip_rate": 0.5,
    "signal_agent": 0,
    "challenges": 2,
    "accept_after": 2,
    "prior": "min_ll",
    "posterior": "svr",
    "posterior_threshold": 1.0,
    "budget_rule": "per_iteration",
    "allow_repeats": True,
}


# --------------------------------------------------------------------------- votes


def vote_turns(q: QuestionState, turns: Sequence[Turn], tie_break: str) -> str | None:
    """The plurality answer of `turns` by answer class, ties settled by `tie_break` (with the
    pre-debate answers `q.pre`)."""
    eq = q.classes
    return vote_answer(
        [t.answer for t in turns], [eq(t.key) for t in turns], tie_break=tie_break, pre_keys=[eq(t.key) for t in q.pre]
    )


def largest_agreement(q: QuestionState, turns: Sequence[Turn]) -> int:
    """How many valid answers of `turns` share the largest answer class."""
    counts = Counter(q.classes(t.key) for t in turns if t.valid)
    return max(counts.values(), default=0)


def unanimous(q: QuestionState, turns: Sequence[Turn]) -> bool:
    """Every answer is in one answer class (INVALID is one value, as in `pre_unanimous`)."""
    return len({q.classes(t.key) for t in turns}) <= 1


# --------------------------------------------------------------------------- protocols


class Protocol:
    kind = "base"

    def __init__(self, name: str, options: dict | None = None):
        self.name = name
        unknown = set(options or {}) - set(DEFAULTS) - {"kind", "participants"}
        if unknown:
            raise ValueError(f"protocol {name!r}: unknown options {sorted(unknown)}")
        self.options = {**DEFAULTS, **{k: v for k, v in (options or {}).items() if k not in ("kind", "participants")}}
        if self.options["threads"] is None:  # the experiment fills in evaluation.seeds; alone, one thread
            self.options["threads"] = 1

    def prepare(self, states: Sequence[QuestionState]) -> None:
        """Cross-question set-up before any question runs (SID-ET's threshold)."""

    def run(self, q: QuestionState) -> ProtocolRun:
        raise NotImplementedError

    def _pre_vote(self, q: QuestionState) -> str | None:
        return vote_turns(q, q.pre, self.options["tie_break"])


class SelfConsistency(Protocol):
    kind = "self_consistency"

    def run(self, q):
        return Outcome(self._pre_vote(q), "no_debate", 0, [[t.answer for t in q.pre]])
        yield  # a generator that asks for nothing


class RoundDebate(Protocol):
    """Synchronous rounds; subclasses choose who hears whom."""

    kind = "all_to_all"

    def peers(self, q: QuestionState, i: int, current: list[Turn], t: int) -> tuple[list[int], list[int]] | None:
        """(full-response peers, answer-only peers) of agent i in round t; None: no call this round."""
        others = [j for j in range(q.n) if j != i]
        return (others, []) if self.options["peer_content"] == "full" else ([], others)

    def start_round(self, q: QuestionState, t: int) -> None:
        """Hook before a round's peers are chosen (group_debate draws its groups)."""

    def run(self, q: QuestionState) -> ProtocolRun:
        o = self.options
        current = list(q.pre)
        by_round = [[t.answer for t in current]]
        skip_unanimous = o["skip_if_unanimous"] or self.kind in ("mad_d", "sid_et")
        if skip_unanimous and unanimous(q, current):
            return Outcome(self._final(q, current), "unanimous", 0, by_round, stopped_early=o["rounds"] > 0)
        if o["rounds"] == 0 or q.n < 2:
            return Outcome(self._final(q, current), "no_debate", 0, by_round)
        ended_by, rounds_used = "rounds", 0
        for t in range(1, o["rounds"] + 1):
            self.start_round(q, t)
            asks = []
            for i in range(q.n):
                chosen = self.peers(q, i, current, t)
                if chosen is None:
                    continue
                full, answer_only = chosen
                asks.append(self._ask(q, i, t, current, full, answer_only))
            if not asks:  # nobody has anyone to hear from (s2_mad after consensus)
                ended_by = "consensus"
                break
            replies = yield asks
            for ask, turn in zip(asks, replies):
                current[ask.agent] = turn
            rounds_used = t
            by_round.append([c.answer for c in current])
            k = o["early_stop_agree"]
            if k is not None and t < o["rounds"] and largest_agreement(q, current) >= k:
                ended_by = "consensus"
                break
        stopped = ended_by != "rounds"
        return Outcome(self._final(q, current), ended_by, rounds_used, by_round, stopped_early=stopped)

    def _final(self, q: QuestionState, current: list[Turn]) -> str | None:
        if self.options["final"] == "hub":
            return current[0].answer
        return vote_turns(q, current, self.options["tie_break"])

    def peer_views(self, q, i, t, current, full, answer_only) -> list[prompts.PeerView]:
        """What agent i is shown of its peers in round t (a training protocol may perturb it)."""
        views = [prompts.PeerView(j, current[j].response, current[j].answer, True) for j in full]
        views += [prompts.PeerView(j, current[j].response, current[j].answer, False) for j in answer_only]
        return sorted(views, key=lambda v: v.index)

    def _ask(self, q, i, t, current, full, answer_only) -> Ask:
        views = self.peer_views(q, i, t, current, full, answer_only)
        me = q.participants[i]
        messages, null = prompts.debate_turn(
            self.options["template"],
            q.row,
            me.system_prompt,
            own_conversation=current[i].conversation,
            own_response=current[i].response,
            own_index=i,
            peers=views,
            mask_boxed=self.options["mask_peer_boxed"],
        )
        return Ask(
            agent=i,
            round=t,
            messages=messages,
            null_messages=null,
            sources=tuple(full),
            answer_sources=tuple(answer_only),
        )


class AllToAll(RoundDebate):
    kind = "all_to_all"


class MadD(RoundDebate):
    kind = "mad_d"


class Ring(RoundDebate):
    kind = "ring"

    def peers(self, q, i, current, t):
        n = q.n
        neighbours = sorted({(i - 1) % n, (i + 1) % n} - {i})
        return (neighbours, []) if self.options["peer_content"] == "full" else ([], neighbours)


class Centralized(RoundDebate):
    kind = "centralized"

    def peers(self, q, i, current, t):
        hears = [j for j in range(1, q.n)] if i == 0 else [0]
        return (hears, []) if self.options["peer_content"] == "full" else ([], hears)


class GroupDebate(RoundDebate):
    """GroupDebate (Liu et al. 2025) as used by SVR-MAD (Jiang et al., arXiv:2605.23099 App. A): groups drawn once per question."""

    kind = "group_debate"

    def groups(self, q: QuestionState) -> list[int]:
        """Group id of every agent: a seeded random split into groups of `group_size`."""
        order = q.rng("groups").permutation(q.n)
        size = self.options["group_size"]
        group_of = [0] * q.n
        for pos, agent in enumerate(order):
            group_of[int(agent)] = pos // size
        return group_of

    def start_round(self, q, t):
        if t == 1:
            self._group_of[(q.question_id, q.thread)] = self.groups(q)

    def peers(self, q, i, current, t):
        g = self._group_of[(q.question_id, q.thread)]
        mates = [j for j in range(q.n) if j != i and g[j] == g[i]]
        others = [j for j in range(q.n) if g[j] != g[i]]
        return mates, others

    def prepare(self, states):
        self._group_of: dict[tuple[str, int], list[int]] = {}

    def run(self, q):
        outcome = yield from super().run(q)
        groups = self._group_of.get((q.question_id, q.thread))
        if self.options["cross_group_ncomm"] == "group_pair" and groups is not None:
            # Jiang et al., arXiv:2605.23099 App. A: one cross-group answer list per ordered (sender group, receiver group) per round.
            outcome.ncomm_answers = len(
                {(t.round, groups[j], groups[t.agent]) for t in q.turns for j in t.answer_sources}
            )
        return outcome


class S2Mad(RoundDebate):
    """S2-MAD (Zeng et al. 2025), answer-equivalence mode (Jiang et al., arXiv:2605.23099 App. A): a link is pruned when
    both ends hold the same answer class."""

    kind = "s2_mad"

    def peers(self, q, i, current, t):
        eq = q.classes
        differing = [j for j in range(q.n) if j != i and eq(current[j].key) != eq(current[i].key)]
        if not differing:
            return None  # conditional participation: keeps its answer, makes no call
        return (differing, []) if self.options["peer_content"] == "full" else ([], differing)


class SidEt(RoundDebate):
    """SID-ET (Chen et al. 2025), early termination only (Jiang et al., arXiv:2605.23099 App. A, Algorithm 2).

    The SVR-MAD paper drops unanimous questions before anything else (§4 "We skip questions where
    all six agents share a unanimous answer"), so its skip rate is a share of the contested ones:
    unanimous questions always end "unanimous" without debate and never count towards the rate.
    """

    kind = "sid_et"

    def prepare(self, states):
        """Per thread, skip round(skip_rate × contested questions) of the contested questions with the
        highest signal (Python's round: nearest, halves to even; signal ties: dataset order)."""
        a = self.options["signal_agent"]
        if any(a >= s.n for s in states):
            raise ValueError(f"protocol {self.name!r}: signal_agent {a} but only {states[0].n} participants")
        self.skipped: set[tuple[str, int]] = set()
        for thread in sorted({s.thread for s in states}):
            contested = [s for s in states if s.thread == thread and not unanimous(s, s.pre)]
            signal = [self.signal(s) for s in contested]
            order = sorted(range(len(contested)), key=lambda k: -signal[k])
            n_skip = int(round(self.options["skip_rate"] * len(contested)))
            self.skipped |= {(contested[k].question_id, thread) for k in order[:n_skip]}

    def signal(self, q: QuestionState) -> float:
        value = q.pre[self.options["signal_agent"]].min_logprob
        return -math.inf if value is None or math.isnan(value) else value

    def run(self, q):
        a = self.options["signal_agent"]
        if (q.question_id, q.thread) in self.skipped:  # never a unanimous question: those end in RoundDebate.run
            return Outcome(q.pre[a].answer, "skip", 0, [[t.answer for t in q.pre]], stopped_early=True, pre_used=(a,))
        return (yield from super().run(q))


class SvrMad(Protocol):
    """SVR-MAD, Algorithm 1 of Jiang et al. (arXiv:2605.23099 §4, Algorithm 1, with our defaults where it is silent)."""

    kind = "svr_mad"

    def prior(self, turn: Turn) -> float:
        """A pre-debate signal mapped into [0, 1], so SVR = 1 beats any prior and SVR ≤ 0 loses."""
        kind = self.options["prior"]
        if kind == "uniform":
            return 0.5
        if kind == "min_ll":
            value = math.exp(turn.min_logprob) if not math.isnan(turn.min_logprob) else 0.0
        elif kind == "ppl":
            value = math.exp(turn.mean_logprob) if not math.isnan(turn.mean_logprob) else 0.0  # 1/PPL
        else:
            value = turn.conf_verbal if not math.isnan(turn.conf_verbal) else 0.0
        return min(max(value, 0.0), 1.0)

    def posterior_signal(self, turn: Turn, rating: float | None) -> float:
        kind = self.options["posterior"]
        if kind == "min_ll":
            return math.exp(turn.min_logprob) if not math.isnan(turn.min_logprob) else 0.0
        if kind == "ppl":
            return math.exp(turn.mean_logprob) if not math.isnan(turn.mean_logprob) else 0.0
        return (rating if rating is not None else 5.0) / 10.0  # conf: an unparsed rating is 0.5, as in zero-shot

    def run(self, q: QuestionState) -> ProtocolRun:
        o = self.options
        S, C, tau = o["challenges"], o["accept_after"], o["posterior_threshold"]
        pre, n = q.pre, q.n
        eq = q.classes  # clusters, Dis, retention and votes all use one equivalence (SVR-MAD, §4)
        y = [eq(t.key) for t in pre]
        prior = [self.prior(t) for t in pre]
        valid = [i for i in range(n) if pre[i].valid]
        clusters = Counter(y[i] for i in valid)
        if len(clusters) <= 1:  # unanimous (or no valid answer): nothing to debate
            final = vote_answer([t.answer for t in pre], y, tie_break=o["tie_break"], pre_keys=y)
            return Outcome(final, "unanimous", 0, [[t.answer for t in pre]])
        k, m = len(clusters), max(clusters.values())
        budget = S * (k + m)
        corr = list(prior)
        debates = [0] * n
        retained = [0] * n
        signals: list[list[float]] = [[] for _ in range(n)]
        post: list[list[Turn]] = [[] for _ in range(n)]
        pairs = Counter()
        exhausted: set[int] = set()
        by_round = [[t.answer for t in pre]]
        iteration = 0

        def rank(i: int) -> tuple:
            return (corr[i], prior[i], -i)

        while budget > 0:
            candidates = [i for i in valid if i not in exhausted]
            if not candidates:
                break
            receiver = max(candidates, key=rank)
            dis = [j for j in valid if y[j] != y[receiver]]
            if not o["allow_repeats"]:
                dis = [j for j in dis if pairs[(j, receiver)] == 0]
                if len(dis) == 0:
                    exhausted.add(receiver)
                    continue
            challengers = sorted(dis, key=rank, reverse=True)[:S]
            iteration += 1
            for s in challengers:  # one at a time: acceptance is checked after every debate
                ask = self._challenge(q, s, receiver, iteration, pairs[(s, receiver)])
                pairs[(s, receiver)] += 1
                (turn,) = yield [ask]
                rating = None
                if o["posterior"] == "conf":
                    (rated,) = yield [self._rating_ask(q, receiver, iteration, turn)]
                    rating = rated.rating
                post[receiver].append(turn)
                debates[receiver] += 1
                retained[receiver] += int(eq(turn.key) == y[receiver])
                if o["posterior"] == "svr":
                    corr[receiver] = (2 * retained[receiver] - debates[receiver]) / debates[receiver]  # (r − c)/D
                else:
                    signals[receiver].append(self.posterior_signal(turn, rating))
                    corr[receiver] = float(np.mean(signals[receiver]))
                if o["budget_rule"] == "per_challenge":
                    budget -= 1
                if debates[receiver] >= C and corr[receiver] >= tau:
                    by_round.append(self._votes(q, post, eq))
                    return Outcome(pre[receiver].answer, "acceptance", iteration, by_round, stopped_early=True)
            if o["budget_rule"] == "per_iteration":
                budget -= S
            by_round.append(self._votes(q, post, eq))
        final = self._fallback(q, post, eq)
        return Outcome(final, "fallback", iteration, by_round)

    def _challenge(self, q, sender, receiver, iteration, repeat) -> Ask:
        """Debate(s → R): the receiver's own pre-debate conversation plus the sender's pre-debate output."""
        s_turn, r_turn = q.pre[sender], q.pre[receiver]
        full = self.options["peer_content"] == "full"
        view = prompts.PeerView(sender, s_turn.response, s_turn.answer, full)
        messages, null = prompts.debate_turn(
            self.options["template"],
            q.row,
            q.participants[receiver].system_prompt,
            own_conversation=r_turn.conversation,
            own_response=r_turn.response,
            own_index=receiver,
            peers=[view],
            mask_boxed=self.options["mask_peer_boxed"],
        )
        return Ask(
            agent=receiver,
            round=iteration,
            messages=messages,
            null_messages=null,
            sources=(sender,) if full else (),
            answer_sources=() if full else (sender,),
            sample=repeat,
        )

    def _rating_ask(self, q, receiver, iteration, turn: Turn) -> Ask:
        return Ask(
            agent=receiver,
            round=iteration,
            messages=prompts.confidence_messages(list(turn.messages), turn.response),
            purpose="confidence",
        )

    def _agent_vote(
        self, q: QuestionState, i: int, post: list[list[Turn]], eq: AnswerClasses
    ) -> tuple[str | None, str]:
        """Agent i's vote (an answer and its `eq` class): the plurality of its post-debate answers,
        its pre-debate answer breaking ties."""
        own = q.pre[i]
        own_class = eq(own.key)
        vote = plurality([eq(t.key) for t in post[i]], rank=lambda key: key == own_class)
        if vote.position is None or vote.key == own_class:
            return own.answer, own_class
        return post[i][vote.position].answer, vote.key

    def _votes(self, q, post, eq: AnswerClasses) -> list[str | None]:
        return [self._agent_vote(q, i, post, eq)[0] for i in range(q.n)]

    def _fallback(self, q, post, eq: AnswerClasses) -> str | None:
        votes = [self._agent_vote(q, i, post, eq) for i in range(q.n)]
        return vote_answer(
            [a for a, _ in votes],
            [k for _, k in votes],
            tie_break="pre_debate_count",
            pre_keys=[eq(t.key) for t in q.pre],
        )


#: The registry of protocol kinds (config `debate.protocols.*.kind`), in the order of the module
#: docstring's table; the schema's `kind` enum lists the same names (tests/test_registries.py).
PROTOCOLS = {
    cls.kind: cls for cls in (SelfConsistency, AllToAll, MadD, Ring, Centralized, GroupDebate, S2Mad, SidEt, SvrMad)
}


def seat_problem(options: dict, seats: int) -> str | None:
    """What a protocol's options ask of its seats that `seats` participants can't give, in words (None:
    nothing). Read at the dry run (`config.Experiment`), so a debate that would fail on its first
    question, or do nothing, is refused before any job runs."""
    o = {**DEFAULTS, **options}
    kind = o.get("kind")
    if kind == "self_consistency":
        return None
    if seats < 2:
        return f"kind {kind!r} debates among its participants, and it has {seats}: a debate needs at least 2"
    if o["template"] == "umad" and seats != 2:
        return f"template 'umad' is the UMAD authors' two-agent prompt ('We have two answers'); it has {seats} participants"
    if kind == "sid_et" and o["signal_agent"] >= seats:
        return f"signal_agent = {o['signal_agent']} names a seat past its {seats} participants (seats count from 0)"
    if o["early_stop_agree"] is not None and o["early_stop_agree"] > seats:
        return (
            f"early_stop_agree = {o['early_stop_agree']} agents can never agree among its {seats} participants: "
            "the debate would never stop early"
        )
    return None


def make_protocol(name: str, options: dict) -> Protocol:
    kind = options.get("kind")
    if kind not in PROTOCOLS:
        raise ValueError(f"protocol {name!r}: unknown kind {kind!r}; expected one of {sorted(PROTOCOLS)}")
    return PROTOCOLS[kind](name, options)
