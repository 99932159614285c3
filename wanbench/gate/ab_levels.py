"""The level verdict of an A/B run: each fault level's cells pooled into one
question, "is the candidate's QPS at this level lower than the baseline's?".

A release that costs CPU per statement slows every level-0 cell a little.
One cell's few pairs rarely show it on this VM: with 4 pairs a cell could
detect a drop of 17-59 %, and a candidate about 10 % slower passed every
cell of its run; its level's cells pooled showed it at p = 4e-5
(docs/calibration.md, 2026-11-28). So an A/B run judges each level as a
whole too, beside its cells:

* **What is pooled.** Every A/B cell of one family and level (all its
  scenarios and concurrencies) that measured at least 2 pairs. Per cell
  ``i``: its pairs' mean log(QPS ratio) ``m_i`` and its noise ``s_i`` with
  ``df_i`` degrees of freedom, from its ABBA blocks
  (``ab_checks.pair_noise``, as the cell's own check).
* **The statistic.** The level's change ``D = mean(m_i)``: every cell
  weighs the same, whatever its pairs (an early-stopped cell is no less a
  part of the level). Its standard error ``sqrt(sum(s_i^2 / n_i)) / k``,
  with each cell's own noise (c=10 and c=100, level 0 and a faulted level
  differ), and a one-sided t with Welch-Satterthwaite degrees of freedom
  ``(sum v_i)^2 / sum(v_i^2 / df_i)``, ``v_i = s_i^2 / n_i``.
* **The budget.** The cells' ``ab`` QPS check (the loosest of them when
  rules give the cells different limits): a regression is a change beyond
  it AND significant, a pass needs the smallest change the pooled pairs
  could detect within it, as for a cell (``wanbench.gate.verdict.decide``).
  The A/A guard holds as for a cell.
* **Alpha.** Each level is one more comparison in the session's Bonferroni:
  the session's alpha is split over its cells and its levels
  (``planned_levels``).
* **When.** At the end of the run, from the pairs the cells measured; it
  changes no cell's verdict and no early stop. A level with fewer than two
  cells has none (its cell's verdict is the level's).

A level verdict is a ``Verdict`` whose key is the level's
(``CellKey.pooled``: scenario ``*``, concurrency 0, ``rtt=0ms, its cells
pooled``); pytest, ``compare`` and Allure read the same data
(``Judge.level_verdicts``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from wanbench import ab
from wanbench.gate import stats
from wanbench.gate.ab_checks import pair_logs, pair_noise, paired_outcome, with_aa_guard
from wanbench.gate.assess import Pending
from wanbench.gate.baseline import RunCell
from wanbench.gate.budgets import POOLED, Budgets, CellKey, Check

#: the metric a level pools
METRIC = "qps"


def level_key(key: CellKey) -> CellKey:
    """The key of the level ``key``'s cell belongs to."""
    return CellKey(key.family, POOLED, key.level, 0)


def planned_levels(keys: Iterable[tuple[str, str]]) -> int:
    """How many level verdicts a run of these cells (family, level label) gives:
    the levels with at least two cells."""
    counts: dict[tuple[str, str], int] = {}
    for k in keys:
        counts[k] = counts.get(k, 0) + 1
    return sum(1 for n in counts.values() if n >= 2)


def levels_of(cells: Sequence[RunCell]) -> list[tuple[CellKey, list[RunCell]]]:
    """The A/B cells by level, in the order the levels were first measured;
    only levels of at least two cells."""
    by: dict[CellKey, list[RunCell]] = {}
    for c in cells:
        if c.ab is not None:
            by.setdefault(level_key(c.key), []).append(c)
    return [(k, members) for k, members in by.items() if len(members) >= 2]


def _check(cells: Sequence[RunCell], budgets: Budgets) -> Check | None:
    """The level's QPS budget: the cells' ``ab`` QPS check, the loosest when they differ."""
    found = [c for cell in cells for c in budgets.checks_for(cell.key) if c.kind == "ab" and c.metric == METRIC]
    return max(found, key=lambda c: c.limit) if found else None


def pooled_stats(sides: Sequence[tuple[Sequence[float], Sequence[float]]]) -> tuple[float, float, float, int, int]:
    """``D``, its standard error, the Welch-Satterthwaite df, the cells pooled
    and their pairs, from each cell's (candidate, baseline) QPS rounds; cells
    with fewer than 2 pairs are left out (nan, nan, 0, 0, 0 when none is left)."""
    means, variances, dfs, pairs = [], [], [], 0
    for candidate, baseline in sides:
        logs = pair_logs(candidate, baseline)
        sd, df = pair_noise(candidate, baseline)
        if len(logs) < 2 or df < 1 or not math.isfinite(sd):
            continue
        means.append(statistics.fmean(logs))
        variances.append(sd * sd / len(logs))
        dfs.append(df)
        pairs += len(logs)
    k = len(means)
    if not k:
        return math.nan, math.nan, 0.0, 0, 0
    total = sum(variances)
    spread = sum(v * v / df for v, df in zip(variances, dfs, strict=True))
    df_welch = total * total / spread if spread > 0 else float(sum(dfs))
    return statistics.fmean(means), math.sqrt(total) / k, df_welch, k, pairs


def level_pending(level: CellKey, cells: Sequence[RunCell], budgets: Budgets, *, alpha_each: float) -> Pending | None:
    """Raw statistics of a level's pooled QPS check (``pooled_stats``);
    None when no cell of the level has an ``ab`` QPS check."""
    check = _check(cells, budgets)
    if check is None:
        return None
    sides = [(c.samples.get(METRIC, []), c.ab.samples.get(METRIC, [])) for c in cells if c.ab is not None]
    mean, se, df, k, pairs = pooled_stats(sides)
    pending = Pending(level, [], no_rounds=not k)
    if not k:
        pending.notes.append(f"none of its {len(cells)} cells measured 2 pairs")
        return pending
    pooled = [c for c in cells if c.ab is not None and len(pair_logs(*_side(c))) >= 2]
    current = stats.geometric_mean([stats.geometric_mean([a for a, _b in _pairs(c)]) for c in pooled])
    reference = stats.geometric_mean([stats.geometric_mean([b for _a, b in _pairs(c)]) for c in pooled])
    o = paired_outcome(check, mean, se, df, n=pairs, current=current, reference=reference, alpha_each=alpha_each,
                       test=f"pooled paired-t (Welch df {df:.1f})",
                       detail=f"each cell's mean log ratio weighs the same, Welch df {df:.1f}", cells=k)
    if all(c.ab is not None and c.ab.aa for c in cells):
        o = with_aa_guard(o)
    pending.outcomes.append(o)
    if k < len(cells):
        pending.notes.append(f"{len(cells) - k} of its {len(cells)} cells measured fewer than 2 pairs")
    return pending


def _side(cell: RunCell) -> tuple[list[float], list[float]]:
    assert cell.ab is not None
    return list(cell.samples.get(METRIC, [])), list(cell.ab.samples.get(METRIC, []))


def _pairs(cell: RunCell) -> list[tuple[float, float]]:
    return [(a, b) for a, b in ab.ratios(*_side(cell)) if math.isfinite(a) and math.isfinite(b)]


__all__ = ["METRIC", "level_key", "level_pending", "levels_of", "planned_levels", "pooled_stats"]
