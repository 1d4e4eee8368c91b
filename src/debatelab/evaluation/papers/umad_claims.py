"""UMAD's claims (Qiao et al., arXiv:2603.01221: umad-1 to umad-14, each with the section, table or
figure that states it) as `claim_engine.ClaimSpec` rows (`SPECS`), and the functions that extract each
case's per-question data from the seats' answers, the uncertainty rounds and the training logs
(the tables are `umad`'s)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...intervals import Estimate
from ..claim_engine import (
    CORRELATION,
    DIFFERENCE,
    EXACT,
    PAIRED_ACCURACY,
    SLOPE,
    Case,
    ClaimSpec,
    Exact,
    For,
    Missing,
    Resampled,
    Rows,
    Shares,
    Untestable,
    evaluate_claims,
    only,
)
from ..claims import Claim, finite
from ..run import ProtocolInfo, RunOutputs
from .umad import AVG, SEATS, STATE_KEYS, TURNS, pair_protocols, row_labels

IDENTITY_TOLERANCE = 1e-9
WEIGHT_BOUND = 0.5  # |ln W| ≤ α_au·max|Ū| = 0.25 · 2 at the paper's defaults (claim umad-13)

# --------------------------------------------------------------------------- claims
#
# Every interval comes from the per-question data its statistic is computed from. The unit resampled
# is a question (dataset, question_id): all its threads, seats, rounds and protocols move together,
# so a comparison of two protocols, seats or rounds on the same questions is paired. Accuracies and
# flip ratios are pooled over a question's threads (hits / answers), which is the cell's mean over
# threads whenever every thread answers every question.


def _question_units(*frames: pd.DataFrame) -> pd.MultiIndex:
    """The questions (dataset, question_id) of any of the frames, in a fixed order: the bootstrap's units."""
    keys = pd.concat([f[["dataset", "question_id"]] for f in frames], ignore_index=True).drop_duplicates()
    keys = keys.astype(str).sort_values(["dataset", "question_id"], kind="stable")
    return pd.MultiIndex.from_frame(keys)


def _unit_positions(frame: pd.DataFrame, units: pd.MultiIndex) -> np.ndarray:
    if frame.empty:
        return np.zeros(0, dtype=int)
    return units.get_indexer(pd.MultiIndex.from_frame(frame[["dataset", "question_id"]].astype(str)))


def _share(hits: np.ndarray, counts: np.ndarray) -> float:
    """Pooled share hits.sum() / counts.sum(); NaN when nothing was counted."""
    total = counts.sum()
    return float(hits.sum() / total) if total > 0 else float("nan")


def _nanmean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else float("nan")


def _correct_counts(
    states: pd.DataFrame, protocol: str, units: pd.MultiIndex, rounds: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per question of `units`, seat and round 0..rounds: (correct answers, answers) over the threads."""
    hits = np.zeros((len(units), len(SEATS), rounds + 1))
    counts = np.zeros_like(hits)
    part = states[(states["protocol"] == protocol) & (states["round"] <= rounds) & (states["agent_index"] < len(SEATS))]
    at = _unit_positions(part, units)
    keep = at >= 0
    index = (at[keep], part["agent_index"].to_numpy(int)[keep], part["round"].to_numpy(int)[keep])
    np.add.at(hits, index, part["correct"].to_numpy(float)[keep])
    np.add.at(counts, index, 1.0)
    return hits, counts


def _flip_counts(states: pd.DataFrame, protocol: str, units: pd.MultiIndex) -> tuple[np.ndarray, np.ndarray]:
    """Per question of `units` and seat: (answers whose correctness changed from round 0 to round 1,
    transitions), over the threads: the flip ratio's numerator and denominator (App. D.4)."""
    flips = np.zeros((len(units), len(SEATS)))
    counts = np.zeros_like(flips)
    part = states[(states["protocol"] == protocol) & (states["agent_index"] < len(SEATS))]
    by_round = {r: part[part["round"] == r].set_index(STATE_KEYS)["correct"] for r in (0, 1)}
    pairs = pd.concat({"was": by_round[0], "now": by_round[1]}, axis=1, join="inner").reset_index()
    at = _unit_positions(pairs, units)
    keep = at >= 0
    index = (at[keep], pairs["agent_index"].to_numpy(int)[keep])
    np.add.at(flips, index, (pairs["was"] != pairs["now"]).to_numpy(float)[keep])
    np.add.at(counts, index, 1.0)
    return flips, counts


def _round_values(rounds: pd.DataFrame, protocol: str, units: pd.MultiIndex, column: str, at_round: int) -> np.ndarray:
    """`column` of each question of `units` at one round of `protocol` (NaN where the question has none)."""
    part = rounds[(rounds["protocol"] == protocol) & (rounds["round"] == at_round)]
    values = np.full(len(units), np.nan)
    at = _unit_positions(part, units)
    keep = at >= 0
    values[at[keep]] = part[column].to_numpy(float)[keep]
    return values


def _identity_contexts(outputs: RunOutputs) -> list:
    rounds = outputs.uncertainty_rounds
    if rounds.empty:
        reason = "no uncertainty rounds output"
        return [
            Untestable(
                reason,
                claim="umad-1..2",
                statement="TU = Sys-EU + Sys-AU; 0 ≤ Sys-EU ≤ log N",
                source="UMAD §3.2, Proposition 3.2, Eq. 3; App. B.2",
            )
        ]
    deviation = float((rounds["total"] - rounds["epistemic"] - rounds["aleatoric"]).abs().max())
    contexts = [For("identity", Case("all protocols", Exact(deviation, len(rounds))))]
    n_agents = rounds["protocol"].map(lambda p: outputs.protocols[p].n_agents if p in outputs.protocols else np.nan)
    known = n_agents.notna().to_numpy()
    eu = rounds["epistemic"].to_numpy(float)
    excess = np.maximum(-eu, eu - np.log(n_agents.to_numpy(float)))[known]
    if excess.size:
        contexts.append(For("bound", Case("all protocols", Exact(float(excess.max()), int(known.sum())))))
    else:
        contexts.append(For("bound", Case("all protocols", Missing(0), detail="no row of a protocol in this config")))
    return contexts


def _eu_falls_contexts(outputs: RunOutputs) -> list:
    rounds = outputs.uncertainty_rounds
    claims = []
    for protocol, (setting, method) in row_labels(outputs).items():
        part = rounds[rounds["protocol"] == protocol]
        if part.empty or part["round"].max() < 1:
            claims.append(For("EU falls", Untestable("no uncertainty rounds after round 0", protocol)))
            continue
        curve = part.groupby("round")["epistemic"].mean().sort_index()
        monotone = bool(np.all(np.diff(curve.to_numpy()) <= IDENTITY_TOLERANCE))
        units = _question_units(part)
        first = _round_values(part, protocol, units, "epistemic", int(curve.index[0]))
        last = _round_values(part, protocol, units, "epistemic", int(curve.index[-1]))
        data = Resampled(lambda i, first=first, last=last: _nanmean(last[i]) - _nanmean(first[i]), len(units), True)
        fields = {"first": curve.index[0], "last": curve.index[-1]}
        detail = f"per round: {', '.join(f'{v:.3f}' for v in curve)}; monotone: {'yes' if monotone else 'no'}"
        claims.append(For("EU falls", Case(f"{protocol} ({setting}, {method})", data, fields, detail)))
    return claims


def _untrained(outputs: RunOutputs, homogeneous: bool) -> list[ProtocolInfo]:
    return [p for p in pair_protocols(outputs).values() if not p.trained_runs and p.homogeneous == homogeneous]


def _matching_hetero(homo: ProtocolInfo, heteros: list[ProtocolInfo]) -> ProtocolInfo | None:
    """The hetero debate to set beside a homo one: same threads (K) and template if there is one."""
    for same in (
        lambda h: h.threads == homo.threads and h.template == homo.template,
        lambda h: h.threads == homo.threads,
        lambda h: True,
    ):
        found = [h for h in heteros if same(h)]
        if found:
            return found[0]
    return None


def _initial_eu_contexts(outputs: RunOutputs) -> list:
    statement = INITIAL_EU
    homos, heteros = _untrained(outputs, True), _untrained(outputs, False)
    if not homos or not heteros:
        reason = "needs an untrained homo and an untrained hetero pair protocol"
        return [Untestable(reason, claim="umad-4", statement=statement)]
    rounds = outputs.uncertainty_rounds
    initial = rounds[rounds["round"] == 0]
    claims = []
    for homo in homos:
        hetero = _matching_hetero(homo, heteros)
        for dataset in sorted(set(homo.datasets) & set(hetero.datasets)):
            scope = f"{dataset}: {hetero.name} vs {homo.name}"
            here = initial[initial["dataset"] == dataset]
            both = here[here["protocol"].isin([hetero.name, homo.name])]
            if set(both["protocol"]) != {hetero.name, homo.name}:
                claims.append(For("initial EU", Untestable("no round-0 uncertainty of both protocols", scope)))
                continue
            units = _question_units(both)
            mixed = _round_values(both, hetero.name, units, "epistemic", 0)
            same = _round_values(both, homo.name, units, "epistemic", 0)
            data = Resampled(lambda i, a=mixed, b=same: _nanmean(a[i]) - _nanmean(b[i]), len(units), True)
            detail = f"K = {hetero.threads} vs {homo.threads} threads"
            claims.append(For("initial EU", Case(scope, data, detail=detail)))
    return claims or [Untestable("the homo and hetero pairs share no dataset", claim="umad-4", statement=statement)]


def _cell(cells: pd.DataFrame, protocol: str, dataset: str, turn: int) -> pd.Series | None:
    hit = cells[(cells["protocol"] == protocol) & (cells["run_dataset"] == dataset) & (cells["turn"] == turn)]
    return hit.iloc[0] if len(hit) else None


def _weaker_gain_contexts(cells: pd.DataFrame, states: pd.DataFrame, outputs: RunOutputs) -> list:
    homos, heteros = _untrained(outputs, True), _untrained(outputs, False)
    if not heteros:
        return [Untestable("no untrained hetero pair protocol", claim="umad-5..6", statement=GAIN, source=GAIN_SOURCE)]
    hetero = heteros[0]
    claims = []
    for dataset in hetero.datasets:
        t1, t2 = _cell(cells, hetero.name, dataset, 1), _cell(cells, hetero.name, dataset, 2)
        scope = f"{dataset}: {hetero.name}"
        if t1 is None or t2 is None:
            claims.append(For("gain", Untestable("no accuracy at both T = 1 and T = 2 (rounds ≥ 1)", scope)))
            continue
        if t1["A0"] == t1["A1"]:
            claims.append(For("gain", Untestable(f"both seats {t1['A0']:.1f}% at T = 1: no weaker agent", scope)))
            continue
        weak = SEATS.index("A0" if t1["A0"] < t1["A1"] else "A1")
        weak_agent = hetero.participants[weak]
        own = [h for h in homos if set(h.participants) == {weak_agent} and dataset in h.datasets]
        homo = own[0] if own else next((h for h in homos if dataset in h.datasets), None)
        here = states[
            (states["dataset"] == dataset) & states["protocol"].isin([hetero.name] + ([homo.name] if homo else []))
        ]
        units = _question_units(here)
        hits, counts = _correct_counts(here, hetero.name, units, 1)

        def gain(i, hits=hits, counts=counts, seat=weak):
            """Points gained by `seat` from round 0 (T = 1) to round 1 (T = 2) on questions i."""
            return 100 * (_share(hits[i, seat, 1], counts[i, seat, 1]) - _share(hits[i, seat, 0], counts[i, seat, 0]))

        data = Shares(hits[:, weak, 1], counts[:, weak, 1], hits[:, weak, 0], counts[:, weak, 0], gain, scale=100)
        claims.append(For("gain", Case(scope, data, {"seat": SEATS[weak], "agent": weak_agent})))
        h1, h2 = (_cell(cells, homo.name, dataset, 1), _cell(cells, homo.name, dataset, 2)) if homo else (None, None)
        if h1 is None or h2 is None:
            reason = "no untrained homo pair with T = 1 and T = 2 here"
            claims.append(Untestable(reason, scope, claim="umad-6", statement=GAIN_HOMO))
            continue
        homo_hits, homo_counts = _correct_counts(here, homo.name, units, 1)

        def gain_over_homo(i, gain=gain, homo_hits=homo_hits, homo_counts=homo_counts):
            homo_gain = np.mean([gain(i, homo_hits, homo_counts, seat) for seat in range(len(SEATS))])
            return gain(i) - homo_gain

        note = "" if own else f"no homo pair of {weak_agent}; compared with {homo.name} ({homo.participants[0]})"
        scope = f"{dataset}: {hetero.name} vs {homo.name}"
        claims.append(For("gain over homo", Case(scope, Resampled(gain_over_homo, len(units), True), detail=note)))
    return claims


def _flip_contexts(flips: pd.DataFrame, states: pd.DataFrame, outputs: RunOutputs) -> list:
    first = flips[flips["from_round"] == 0]
    heteros = _untrained(outputs, False)
    if first.empty or not heteros:
        reason = "needs an untrained hetero pair protocol with a debate round"
        return [Untestable(reason, claim="umad-7..8", statement=FLIPS, source=FLIPS_SOURCE)]
    initial = states[states["round"] == 0].groupby(["protocol", "agent_index"])["correct"].mean()
    homos = _untrained(outputs, True)
    claims = []
    for hetero in heteros:
        seats = set(first.loc[first["protocol"] == hetero.name, "seat"])
        if len(seats) < 2:
            claims.append(For("flips", Untestable("no round 0 → 1 transitions of both seats", hetero.name)))
            continue
        acc = [initial.get((hetero.name, i), np.nan) for i in range(2)]
        if not all(finite(a) for a in acc) or acc[0] == acc[1]:
            reason = "the seats are equally accurate at T = 1: no weaker agent"
            claims.append(For("flips", Untestable(reason, hetero.name)))
            continue
        weak, strong = (0, 1) if acc[0] < acc[1] else (1, 0)
        own = {
            seat: [h for h in homos if set(h.participants) == {hetero.participants[seat]}] for seat in (weak, strong)
        }
        homo_of = {seat: found[0].name for seat, found in own.items() if found}
        mine = states[states["protocol"].isin([hetero.name, *homo_of.values()])]
        units = _question_units(mine)
        changed, transitions = _flip_counts(mine, hetero.name, units)

        def rate(i, seat, changed=changed, transitions=transitions):
            """Flip ratio (%) of `seat` on questions i."""
            return 100 * _share(changed[i, seat], transitions[i, seat])

        # a flip is a 0/1 outcome per (question, thread) and seat: with one thread the two seats'
        # flips are paired outcomes on the same questions (exact, McNemar), else pooled shares
        data = Shares(
            changed[:, weak],
            transitions[:, weak],
            changed[:, strong],
            transitions[:, strong],
            lambda i, rate=rate, weak=weak, strong=strong: rate(i, weak) - rate(i, strong),
            scale=100,
        )
        detail = f"weaker = lower T=1 accuracy ({100 * acc[weak]:.1f}% vs {100 * acc[strong]:.1f}%)"
        claims.append(For("flips", Case(hetero.name, data, {"weak": SEATS[weak], "strong": SEATS[strong]}, detail)))
        homo_counts = {seat: _flip_counts(mine, name, units) for seat, name in homo_of.items()}
        if len(homo_counts) < 2 or not all(c[1].sum() > 0 for c in homo_counts.values()):
            reason = "needs untrained homo pairs of both agents"
            claims.append(Untestable(reason, hetero.name, claim="umad-8", statement=BETWEEN))
            continue

        def margin(i, rate=rate, homo_counts=homo_counts):
            """How far inside [lower, upper homo flip ratio] the hetero one lies (points; < 0: outside)."""
            mixed = np.mean([rate(i, seat) for seat in range(len(SEATS))])
            homo = [np.mean([rate(i, seat, *pair) for seat in range(len(SEATS))]) for pair in homo_counts.values()]
            return min(mixed - min(homo), max(homo) - mixed)

        everything = np.arange(len(units))
        mixed = np.mean([rate(everything, seat) for seat in range(len(SEATS))])
        ends = sorted(
            np.mean([rate(everything, seat, *pair) for seat in range(len(SEATS))]) for pair in homo_counts.values()
        )
        detail = f"hetero {mixed:.1f}%; homo pairs {ends[0]:.1f}% to {ends[1]:.1f}%"
        claims.append(For("between", Case(hetero.name, Resampled(margin, len(units), True), detail=detail)))
    return claims


def question_token_entropy(turns: pd.DataFrame, protocol: str, units: pd.MultiIndex, at_round: int) -> np.ndarray:
    """Per question of `units`: the mean over its replies in one round of `protocol` (every thread, seat
    and call) of their mean token entropy; NaN where it has no reply there or none with an entropy."""
    part = turns[(turns["protocol"] == protocol) & (turns["round"] == at_round)]
    sums, counts = np.zeros(len(units)), np.zeros(len(units))
    values = part["mean_token_entropy"].to_numpy(float)
    at = _unit_positions(part, units)
    keep = (at >= 0) & np.isfinite(values)
    np.add.at(sums, at[keep], values[keep])
    np.add.at(counts, at[keep], 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def token_entropy_contexts(outputs: RunOutputs) -> list:
    """umad-10 (Fig. 1): per question, the mean token entropy of its replies in the last round minus
    round 0 (the zero-shot answers), paired over questions."""
    if not row_labels(outputs):
        reason = "no pair protocol (two agents, all-to-all) in this config"
        return [Untestable(reason, claim="umad-10", statement=TOKEN_ENTROPY)]
    turns = outputs.turns
    contexts = []
    for protocol, (setting, method) in row_labels(outputs).items():
        part = turns[turns["protocol"] == protocol]
        if part.empty or part["round"].max() < 1:
            contexts.append(For("entropy", Untestable("no debate round after round 0", protocol)))
            continue
        last_round = int(part["round"].max())
        units = _question_units(part)
        first = question_token_entropy(part, protocol, units, 0)
        last = question_token_entropy(part, protocol, units, last_round)
        detail = ""
        if not (np.isfinite(first) & np.isfinite(last)).any():
            detail = (
                "no question has a mean token entropy in both rounds (turns.parquet's mean_token_entropy is "
                "empty: zero_shot.top_logprobs / debate.top_logprobs 0, a backend without top-k, or turns written "
                "before it was recorded)"
            )
        case = Case(f"{protocol} ({setting}, {method})", Rows(last, first), {"last": last_round}, detail)
        contexts.append(For("entropy", case))
    return contexts


def _au_accuracy_contexts(states: pd.DataFrame, outputs: RunOutputs) -> list:
    """umad-9: per (protocol, question) point, Δaccuracy and ΔSys-AU from round 0 to the last round."""
    rounds = outputs.uncertainty_rounds
    if rounds.empty:
        return [Untestable("no uncertainty rounds output", claim="umad-9", statement=AU_ACCURACY)]
    rounds = rounds[rounds["protocol"].isin(list(pair_protocols(outputs))) & (rounds["k_threads"] > 1)]
    if rounds.empty:
        reason = "needs a pair protocol with K > 1 threads (with K = 1 Sys-AU is 0 in every round)"
        return [Untestable(reason, claim="umad-9", statement=AU_ACCURACY)]
    keys = ["protocol", "dataset", "question_id"]
    ends = rounds.groupby(keys)["round"].max().rename("last").reset_index()
    au = rounds.merge(ends, on=keys)
    au_first = au[au["round"] == 0].set_index(keys)["aleatoric"]
    au_last = au[au["round"] == au["last"]].set_index(keys)["aleatoric"]
    acc = states.merge(ends, on=keys)
    acc_first = acc[acc["round"] == 0].groupby(keys)["correct"].mean()
    acc_last = acc[acc["round"] == acc["last"]].groupby(keys)["correct"].mean()
    joined = pd.concat({"d_au": au_last - au_first, "d_acc": 100 * (acc_last - acc_first)}, axis=1).dropna()
    joined = joined.reset_index()
    units = _question_units(joined)
    # a question's points (several protocols) are resampled together
    data = Rows(joined["d_acc"].to_numpy(float), joined["d_au"].to_numpy(float), _unit_positions(joined, units))
    scope = ", ".join(sorted(joined["protocol"].unique())) or "no question"
    detail = (
        f"{len(joined)} (protocol, question) points on {len(units)} questions; a question's points are "
        "resampled together"
    )

    def described(estimate: Estimate) -> str:
        return detail if estimate.finite else detail + "; fewer than 2 questions, or Δacc or ΔSys-AU constant"

    return [For("AU", Case(scope, data, detail=described))]


def _training_contexts(outputs: RunOutputs) -> list:
    """umad-12 and umad-13 from the trainer's step metrics: the team reward's slope over steps, and the largest
    |ln W| over the logged steps (computed on every step)."""
    runs = [name for name, run in outputs.runs.items() if run.method == "umad"]
    if not runs:
        return [
            Untestable(
                "no umad training run",
                claim="umad-12..13",
                statement=REWARD_RISES,
                source="UMAD §4.1-4.2, Eq. 4; App. C.2, Algorithm 2",
            )
        ]
    training = outputs.training
    contexts = []
    for run in runs:
        steps = training.get(run)
        if steps is None:
            contexts.append(For("reward", Untestable("no metrics.parquet of this run", run)))
            continue
        if len(steps) < 3 or "reward_mean" not in steps:
            contexts.append(For("reward", Untestable(f"needs at least 3 logged steps, has {len(steps)}", run)))
        else:
            contexts.append(For("reward", Case(run, Rows(steps["step"], steps["reward_mean"]))))
        if "weight_mean" not in steps or steps["weight_mean"].isna().all():
            contexts.append(For("weight", Untestable("no weight_mean logged", run)))
            continue
        logged = steps["weight_mean"].dropna().to_numpy(float)
        contexts.append(For("weight", Case(run, Exact(float(np.abs(np.log(logged)).max()), len(logged)))))
    return contexts


def _gpu_contexts(cells: pd.DataFrame, states: pd.DataFrame) -> list:
    """UMAD above IPPO for the weaker agent A0 of the hetero pair (Table 1's headline; not expected on CPU)."""
    avg = cells[(cells["setting"] == "hetero") & (cells["dataset"] == AVG)].set_index(["method", "turn"])
    turns = [t for t in TURNS if ("UMAD", t) in avg.index and ("IPPO", t) in avg.index]
    if not turns:
        return []
    t = turns[-1]
    trained = avg.loc[("UMAD", t), "protocol"], avg.loc[("IPPO", t), "protocol"]
    mine = states[states["protocol"].isin(trained)]
    units = _question_units(mine)
    datasets, dataset_of_unit = np.unique(units.get_level_values("dataset"), return_inverse=True)
    seat_a0 = [_correct_counts(mine, protocol, units, t - 1) for protocol in trained]

    def avg_difference(i):
        """Avg A0(UMAD) − Avg A0(IPPO) in points on questions i: each dataset's accuracy, then their mean."""
        by_protocol = []
        for hits, counts in seat_a0:
            h = np.bincount(dataset_of_unit[i], weights=hits[i, 0, t - 1], minlength=len(datasets))
            n = np.bincount(dataset_of_unit[i], weights=counts[i, 0, t - 1], minlength=len(datasets))
            by_protocol.append(_nanmean(np.divide(h, n, out=np.full(len(datasets), np.nan), where=n > 0)))
        return 100 * (by_protocol[0] - by_protocol[1])

    (hits_u, counts_u), (hits_i, counts_i) = seat_a0
    data = Shares(
        hits_u[:, 0, t - 1],
        counts_u[:, 0, t - 1],
        hits_i[:, 0, t - 1],
        counts_i[:, 0, t - 1],
        avg_difference,
        exact_allowed=len(datasets) == 1,
        scale=100,
        groups=dataset_of_unit,
    )
    return [For("GPU", Case(f"hetero: {trained[0]} vs {trained[1]}", data, {"t": t}))]


INITIAL_EU = "initial Sys-EU is higher in the heterogeneous pair than in the homogeneous one"
GAIN = "zero-shot debate raises the weaker agent's accuracy from T = 1 to T = 2"
GAIN_HOMO = "... and by more in the hetero pair than in the homo pair"
GAIN_SOURCE = "UMAD §5.1, Table 1 (Zero-Shot rows, T = 1 and T = 2)"
FLIPS = "the weaker agent flips more than the stronger one (initial answer → round 1)"
BETWEEN = "the hetero pair's flip ratio lies between the two agents' homo pairs"
FLIPS_SOURCE = "UMAD App. D.4, Figure 5"
AU_ACCURACY = "over questions, Δaccuracy (last round − round 0) correlates negatively with ΔSys-AU"
TOKEN_ENTROPY = "mean token entropy rises over rounds"
REWARD_RISES = "UMAD/IPPO training: the team reward rises over steps"
IDENTITY = "an identity or bound computed on every row: it holds at equality, within IDENTITY_TOLERANCE"

SPECS = [
    ClaimSpec(
        "umad-1",
        "TU = Sys-EU + Sys-AU in every (question, round)",
        EXACT,
        only("identity"),
        "max |TU − Sys-EU − Sys-AU| over (question, round) rows, nats (an identity: computed on every row, no interval)",
        "<=",
        IDENTITY_TOLERANCE,
        margin_reason=IDENTITY,
        source="UMAD §3.2, Proposition 3.2, Eq. 3 (proof: App. B.2)",
    ),
    ClaimSpec(
        "umad-2",
        "0 ≤ Sys-EU ≤ log N",
        EXACT,
        only("bound"),
        "max(−Sys-EU, Sys-EU − log N) over rows, nats (a bound: computed on every row, no interval)",
        "<=",
        IDENTITY_TOLERANCE,
        margin_reason=IDENTITY,
        source="UMAD §3.2, Eq. 3; App. B.2, Eq. 11 (Sys-EU is the JSD of N distributions; the bound is the JSD's)",
    ),
    ClaimSpec(
        "umad-3",
        "mean Sys-EU falls from the first to the last round",
        DIFFERENCE,
        only("EU falls"),
        "Sys-EU(round {last}) − Sys-EU(round {first}), mean over questions, nats",
        "<",
        source="UMAD §3.2, Figure 2; App. D.5, Figure 6",
    ),
    ClaimSpec(
        "umad-4",
        INITIAL_EU,
        DIFFERENCE,
        only("initial EU"),
        "Sys-EU(hetero, round 0) − Sys-EU(homo, round 0), mean over questions, nats",
        source="UMAD §3.2; App. D.5 (The Heterogeneous Advantage), Figure 6",
    ),
    ClaimSpec(
        "umad-5",
        GAIN,
        PAIRED_ACCURACY,
        only("gain"),
        "{seat} ({agent}) acc(T=2) − acc(T=1), points",
        source=GAIN_SOURCE,
    ),
    ClaimSpec(
        "umad-6",
        GAIN_HOMO,
        DIFFERENCE,
        only("gain over homo"),
        "gain(hetero weaker) − gain(homo, mean of seats), points",
        source=GAIN_SOURCE + "; §3.3, Theorem 3.4",
    ),
    ClaimSpec(
        "umad-7",
        FLIPS,
        PAIRED_ACCURACY,
        only("flips"),
        "flip(weaker {weak}) − flip(stronger {strong}), points",
        source=FLIPS_SOURCE,
    ),
    ClaimSpec(
        "umad-8",
        BETWEEN,
        DIFFERENCE,
        only("between"),
        "min(flip(hetero) − lower homo flip, upper homo flip − flip(hetero)), points (≥ 0: between); "
        "flip of a pair = mean of its seats",
        ">=",
        margin_reason="[CHOICE] margin 0 points: 'between' means inside both homo pairs' flip ratios (the paper, "
        "'Epistemic Gain, Aleatoric Cost', arXiv:2603.01221, App. D.4), so the interval must clear both ends; the "
        "paper states no tolerance",
        source=FLIPS_SOURCE,
    ),
    ClaimSpec(
        "umad-9",
        AU_ACCURACY,
        CORRELATION,
        only("AU"),
        "Pearson r(Δacc, ΔSys-AU) over (protocol, question) points",
        "<",
        source="UMAD §3.2; App. D.5 (The Aleatoric Barrier), Figure 6",
    ),
    ClaimSpec(
        "umad-10",
        TOKEN_ENTROPY,
        DIFFERENCE,
        only("entropy"),
        "mean token entropy(round {last}) − (round 0), per question over its replies, "
        "mean over questions, nats (top-k entropy: a lower bound of the full one)",
        source="UMAD §1, Figure 1",
    ),
    ClaimSpec(
        "umad-12",
        REWARD_RISES,
        SLOPE,
        only("reward"),
        "OLS slope of reward_mean per step",
        unit="steps",
        source="UMAD §4.1 (the team reward), App. C.2, Algorithm 2",
    ),
    ClaimSpec(
        "umad-13",
        "UMAD/IPPO training: the mean confidence weight W stays within [e^-0.5, e^0.5]",
        EXACT,
        only("weight"),
        "max |ln weight_mean| over logged steps (computed on every step, no interval)",
        "<=",
        WEIGHT_BOUND + IDENTITY_TOLERANCE,
        margin_reason=IDENTITY,
        source="UMAD §4.2, Eq. 4; App. D.2, Table 2 (α_au = 0.25)",
    ),
    ClaimSpec(
        "umad-14",
        "hetero A0 (weaker) Avg: UMAD > IPPO at T = {t} (not expected on CPU)",
        PAIRED_ACCURACY,
        only("GPU"),
        "Avg A0(UMAD) − Avg A0(IPPO), points",
        source="UMAD §5.2-5.3, Table 1 (heterogeneous A0, Average)",
    ),
]


def token_entropy_claims(outputs: RunOutputs) -> list[Claim]:
    """umad-10's rows alone."""
    return evaluate_claims(SPECS, token_entropy_contexts(outputs))


def paper_claims(cells: pd.DataFrame, flips: pd.DataFrame, states: pd.DataFrame, outputs: RunOutputs) -> list[Claim]:
    reward_shaping = Untestable(
        "unit tests of the trainer (tests/test_umad.py), not a run output",
        claim="umad-11",
        statement="reward shaping: W falls in Ū, mean Ū = 0, r^eu ∈ {−η, 0, η}, IPPO = UMAD at α = η = 0",
        source="UMAD §4.2, Eqs. 4-5; App. C.2, Algorithm 2",
    )
    contexts = [
        *_identity_contexts(outputs),
        *_eu_falls_contexts(outputs),
        *_initial_eu_contexts(outputs),
        *_weaker_gain_contexts(cells, states, outputs),
        *_flip_contexts(flips, states, outputs),
        *_au_accuracy_contexts(states, outputs),
        *token_entropy_contexts(outputs),
        reward_shaping,
        *_training_contexts(outputs),
        *_gpu_contexts(cells, states),
    ]
    return evaluate_claims(SPECS, contexts)
