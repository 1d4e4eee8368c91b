"""Recompute the paired accuracy differences that README.md and docs/experiments.md quote with the
old paired percentile bootstrap, as the exact interval conditional on the discordant questions
(`debatelab.intervals.paired_counts_difference`, issue 43).

The cached run outputs are not needed: a quoted row gives n, both accuracies (so each side's number
of right answers), the difference and the exact McNemar p to its printed digits. With b = questions
only the treatment got right and c = only the control, b − c = n · difference / 100, and b ≤ right
answers of the treatment, c ≤ those of the control (the questions both got right are the rest of
each side's). Every (b, c) that fits and whose binomial test p (b of b + c at 1/2) rounds to the
printed p is a candidate; one candidate recovers the counts, several are reported as ambiguous with
the range of their intervals. Run: `python tools/recompute_paired_intervals.py` (prints a Markdown
table: before, after, verdict before and after).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from scipy import stats

from debatelab.intervals import ALPHA, paired_counts_difference


@dataclass(frozen=True)
class Quoted:
    where: str  # the file and table row that quote it
    label: str
    n: int
    treatment_pct: float
    control_pct: float
    difference: float  # points, as printed
    p: str  # exact McNemar p as printed
    old: str  # the old interval as printed


QUOTED = [
    Quoted(
        "learning_cpu, the 2026-11-26 runs (README and docs/experiments quote the 2026-11-27 rerun)",
        "DAPO, middle seat",
        200,
        21.5,
        10.5,
        11.0,
        "0.0009",
        "[5.0, 17.5]",
    ),
    Quoted(
        "learning_cpu, the 2026-11-26 runs (README and docs/experiments quote the 2026-11-27 rerun)",
        "DAPO, the three seats' debate",
        200,
        23.5,
        11.5,
        12.0,
        "0.0004",
        "[6.0, 18.5]",
    ),
    Quoted(
        "learning_cpu, the 2026-11-26 runs (README and docs/experiments quote the 2026-11-27 rerun)",
        "SDRL, middle seat",
        200,
        18.5,
        10.5,
        8.0,
        "0.017",
        "[2.0, 14.0]",
    ),
    Quoted(
        "learning_cpu, the 2026-11-26 runs (README and docs/experiments quote the 2026-11-27 rerun)",
        "SDRL, the three seats' debate",
        200,
        21.5,
        11.5,
        10.0,
        "0.0017",
        "[4.5, 16.0]",
    ),
    Quoted(
        "learning_cpu, the 2026-11-26 runs (README and docs/experiments quote the 2026-11-27 rerun)",
        "SDRL's debate vs DAPO's",
        200,
        21.5,
        23.5,
        -2.0,
        "0.52",
        "[-6.5, 2.5]",
    ),
    Quoted(
        "README, docs/experiments (multi-agent on CPU)", "UMAD, seat a", 200, 10.0, 12.5, -2.5, "0.44", "[-7.5, 2.5]"
    ),
    Quoted("docs/experiments (multi-agent on CPU)", "UMAD, seat b", 200, 11.0, 10.5, 0.5, "1.0", "[-5.0, 6.0]"),
    Quoted(
        "docs/experiments (multi-agent on CPU)", "UMAD, the pair's debate", 200, 11.0, 10.5, 0.5, "1.0", "[-4.5, 5.5]"
    ),
]


def printed(p: float, text: str) -> bool:
    """p rounds to `text` at the number of decimals `text` shows."""
    decimals = len(text.split(".")[1]) if "." in text else 0
    return round(p, decimals) == float(text)


def candidates(row: Quoted) -> list[tuple[int, int]]:
    """Every (b, c) consistent with the row (module docstring)."""
    right_t, right_c = round(row.n * row.treatment_pct / 100), round(row.n * row.control_pct / 100)
    gap = round(row.n * row.difference / 100)
    found = []
    for c in range(0, right_c + 1):
        b = c + gap
        if b < 0 or b > right_t or right_t - b != right_c - c:
            continue
        p = 1.0 if b + c == 0 else stats.binomtest(b, b + c, 0.5).pvalue
        if printed(p, row.p):
            found.append((b, c))
    return found


def verdict(low: float, high: float, p: float) -> str:
    return "better" if low > 0 and p < ALPHA else "worse" if high < 0 and p < ALPHA else "inconclusive"


def old_verdict(old: str) -> str:
    low, high = (float(x) for x in old.strip("[]").split(","))
    return "better" if low > 0 else "worse" if high < 0 else "inconclusive"


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(
        "| where | comparison | n | b, c (recovered) | old interval (paired percentile bootstrap) | p | new exact interval | verdict old → new |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in QUOTED:
        found = candidates(row)
        if not found:
            counts, new, p_text, after = "none fits", "–", row.p, "–"
        else:
            estimates = [paired_counts_difference(b, c, row.n).scaled(100) for b, c in found]
            lows, highs = [e.low for e in estimates], [e.high for e in estimates]
            ps = [e.p for e in estimates]
            verdicts = {verdict(e.low, e.high, e.p) for e in estimates}
            if len(found) == 1:
                (b, c), e = found[0], estimates[0]
                counts, new, p_text = f"{b}, {c}", f"{e.value:+.1f} [{e.low:+.1f}, {e.high:+.1f}]", f"{e.p:.2g}"
            else:
                # the old interval's width hints at m: a paired bootstrap's is about 2 · 1.96 · 100 · sqrt(m) / n
                low_old, high_old = (float(x) for x in row.old.strip("[]").split(","))
                implied = ((high_old - low_old) * row.n / (100 * 2 * 1.96)) ** 2
                nearest = min(range(len(found)), key=lambda i: abs(sum(found[i]) - implied))
                near = estimates[nearest]
                m_range = f"{sum(found[0])}..{sum(found[-1])}"
                counts = f"ambiguous: {len(found)} pairs with b − c = {found[0][0] - found[0][1]}, m = {m_range}"
                new = (
                    f"{near.value:+.1f}, low {min(lows):+.1f} .. {max(lows):+.1f}, high {min(highs):+.1f} .. "
                    f"{max(highs):+.1f}; at m ≈ {implied:.0f} (the old width's): [{near.low:+.1f}, {near.high:+.1f}]"
                )
                p_text = f"{min(ps):.2g} .. {max(ps):.2g}"
            after = " / ".join(sorted(verdicts))
        print(
            f"| {row.where} | {row.label} | {row.n} | {counts} | {row.difference:+.1f} {row.old} | {p_text} | {new} "
            f"| {old_verdict(row.old)} → {after} |"
        )


if __name__ == "__main__":
    main()
