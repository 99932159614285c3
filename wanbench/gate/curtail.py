"""Early stop inside an interleaved cell: stochastic curtailment.

An interleaved cell (``wanbench.interleave``) runs ``--rounds`` faulted
rounds, each beside a level-0 round, in ABBA order. After each whole ABBA
block (two pairs), while pairs are left, the gate asks whether the pairs
still to come could change the cell's verdict, and stops the cell when they
could not.

A run's value of a metric is the median of its rounds. How far the rounds
left can still move it is known from the accepted runs: one round strays
from its own run's mean by ``sd_w`` on a log scale (the pooled within-run
spread of the accepted runs, ``BaselineCell.within``, with its degrees of
freedom), so after ``k`` of ``K`` rounds the final value lies within
``t(0.995, df) * sd_w * sqrt(1/k - 1/K)`` of the current one, 99 times in
100 (means stand in for medians). The cell is judged three times, with the
rules the session judges it by at its end (``Judge.verdict``, census aside:
counts per operation do not depend on how many rounds ran): as measured,
with every metric moved that far the bad way (its level-0 rounds the good
way), and the good way. The cell stops only when each of its QPS and
latency checks stands the same in all three (status, reason, and whether it
"looks worse"), and none of them is a check of rounds against rounds left
undecided (more rounds could decide that one). A check of runs left
undecided (too few accepted runs, runs too noisy) stands: rounds do not add
runs. Every cell of a run with no accepted runs to judge against runs all
its rounds (a run being accepted keeps its full rounds).

The verdict the cell then gets is made from the rounds it ran, like any
other. What the early stop costs is the chance that the rounds it skipped
would have moved a check: about 1 % per metric under the rule above, whose
spread comes from the accepted runs, not from the two pairs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from wanbench.gate import stats
from wanbench.gate.budgets import METRICS
from wanbench.gate.outcome import INCONCLUSIVE

#: how sure the rule is that the rounds left would not move a metric further
LEVEL = 0.99

Samples = dict[str, list[float]]


@dataclass(frozen=True)
class Standing:
    """Where one QPS or latency check of a cell stands."""

    check: str  # "drop qps"
    status: str
    reason: str = ""
    #: beyond its budget with p < LOOKS_WORSE_P before correction (``verdict.looks_worse``)
    looks_worse: bool = False
    #: a check of runs (one value per run) rather than of rounds against rounds
    per_run: bool = True


#: (samples, level-0 rounds beside them) -> where each QPS and latency check stands
StandingsOf = Callable[[Samples, Samples], Sequence[Standing]]


def margins(within: Mapping[str, tuple[float, int]], done: int, planned: int, level: float = LEVEL
            ) -> dict[str, float]:
    """Per metric, how far (on a log scale) the ``planned - done`` rounds
    left can move the run's value, at ``level``; {} when none are left."""
    if done <= 0 or planned <= done:
        return {}
    left = math.sqrt(1.0 / done - 1.0 / planned)
    q = 0.5 + level / 2
    return {m: stats.student_t_ppf(q, df) * sd * left
            for m, (sd, df) in within.items() if df >= 1 and math.isfinite(sd)}


def moved(samples: Mapping[str, list[float]], margin: Mapping[str, float], *, worse: bool) -> Samples:
    """``samples`` with every metric that has a margin moved by it, the bad
    way (``worse``: less QPS, more latency) or the good way."""
    out: Samples = {}
    for metric, values in samples.items():
        d = margin.get(metric, 0.0)
        higher_is_better = METRICS.get(metric)
        if not d or higher_is_better is None:
            out[metric] = list(values)
            continue
        sign = -1.0 if higher_is_better == worse else 1.0
        out[metric] = [v * math.exp(sign * d) for v in values]
    return out


@dataclass(frozen=True)
class Settled:
    """A cell whose verdict the rounds left cannot change."""

    standings: tuple[Standing, ...]
    pairs: int
    planned: int
    #: the move tried of the cell's throughput metric (qps, else tps, tpmc or
    #: the first one), on a log scale, and that metric's name
    margin: float
    metric: str

    def why(self) -> str:
        counts: dict[str, int] = {}
        for s in self.standings:
            key = f"{s.status} ({s.reason})" if s.reason else s.status
            counts[key] = counts.get(key, 0) + 1
        stand = ", ".join(f"{n} {k}" for k, n in counts.items())
        return (f"its QPS and latency checks stand ({stand}) whatever the {self.planned - self.pairs} "
                f"pair(s) left do ({self.metric} moved both ways by {math.expm1(self.margin) * 100:.1f} %)")

    def to_json(self) -> dict[str, object]:
        return {"pairs": self.pairs, "planned_pairs": self.planned, "metric": self.metric,
                "margin_pct": round(math.expm1(self.margin) * 100, 2),
                "checks": {s.check: s.status for s in self.standings}}


def settled(standings_of: StandingsOf, samples: Mapping[str, list[float]], reference: Mapping[str, list[float]],
            *, within: Mapping[str, tuple[float, int]], reference_within: Mapping[str, tuple[float, int]],
            done: int, planned: int) -> Settled | None:
    """Where the cell's QPS and latency checks stand, when the ``planned -
    done`` rounds left cannot change it (see the module's text), else None.
    ``reference``: the level-0 rounds beside the faulted ones, moved the
    other way with their own spread (``reference_within``; the cell's own
    when empty)."""
    margin = margins(within, done, planned)
    if not margin:
        return None
    ref_margin = margins(reference_within or within, done, planned)
    now = tuple(standings_of(dict(samples), dict(reference)))
    if not now or any(s.status == INCONCLUSIVE and not s.per_run for s in now):
        return None
    for worse in (True, False):
        if tuple(standings_of(moved(samples, margin, worse=worse),
                              moved(reference, ref_margin, worse=not worse))) != now:
            return None
    metric = next((m for m in ("qps", "tps", "tpmc") if m in margin), next(iter(margin)))
    return Settled(now, done, planned, margin[metric], metric)
