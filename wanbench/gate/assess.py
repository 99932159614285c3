"""Steps 1 and 2 of a verdict: the raw statistics of each check of a cell
(``assess_cell``), then the session's correction of their p-values
(``correct``, ``correct_online``). See ``wanbench.gate.verdict``."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wanbench.gate import census_checks, stats
from wanbench.gate.baseline import BaselineCell, Samples, drops_of, summary_of
from wanbench.gate.budgets import CellKey, Check
from wanbench.gate.outcome import Outcome, Reference, RunSummary, metric_name

# ---------------------------------------------------------------- step 1

#: a ``drop`` check's run t-test assumes this run's QPS ratio strays from the accepted runs' as
#: theirs stray from each other: an A/A guard whose |log ratio| lies beyond the two-sided t bound
#: (n - 1 degrees of freedom) of that spread at this level says the machine is noisier now than
#: the rule assumes
GUARD_LEVEL = 0.99


def _median(values: Sequence[float]) -> float:
    return stats.median(values)


def _additive(metric: str) -> bool:
    return metric == "error_rate"


def _worse_alternative(higher_is_better: bool) -> str:
    """Mann-Whitney alternative for "current is worse than reference"."""
    return "less" if higher_is_better else "greater"


def _shifted(values: Sequence[float], d: float, *, higher_is_better: bool, additive: bool) -> list[float]:
    if additive:
        return [v + d for v in values]
    factor = (1.0 - d) if higher_is_better else (1.0 + d)
    return [v * factor for v in values]


def choose_test(n_current: int, n_reference: int, alpha_each: float, *, allow_t: bool = True) -> str:
    """The rank test whenever it can reach ``alpha_each`` with these sample
    sizes; otherwise (few rounds, many cells) Welch's t on log values, if
    allowed. The choice depends on sizes and alpha only, never on the data.

    The t-test is only allowed against a baseline of several accepted runs
    (or level 0 of the same run): with one accepted run, a machine that got
    busier between the runs looks exactly like a regression to any test this
    powerful, and only the spread between accepted runs tells them apart."""
    if stats.min_attainable_p(n_current, n_reference) <= alpha_each or not allow_t:
        return "mann-whitney"
    return "welch-t"


def p_value(test: str, x: Sequence[float], y: Sequence[float], alternative: str, *, additive: bool) -> float:
    if test == "mann-whitney":
        return stats.mann_whitney(x, y, alternative).p
    return stats.welch_t(x, y, alternative, log=not additive).p


def detectable_change(
    current: Sequence[float],
    reference: Sequence[float],
    *,
    higher_is_better: bool,
    additive: bool,
    alpha_each: float,
    allow_t: bool = True,
) -> float:
    """The smallest worsening this pair of samples could have flagged.

    The current rounds are moved onto the reference's median (keeping their
    spread), then worsened by ``d`` until the one-sided test reaches
    ``alpha_each``; ``inf`` when no change at all could reach it (too few
    rounds).
    """
    if len(current) < 2 or len(reference) < 2:
        return math.inf
    test = choose_test(len(current), len(reference), alpha_each, allow_t=allow_t)
    if test == "mann-whitney" and stats.min_attainable_p(len(current), len(reference)) > alpha_each:
        return math.inf
    ref_med, cur_med = _median(reference), _median(current)
    if additive:
        centred = [v - cur_med + ref_med for v in current]
    elif cur_med:
        centred = [v * ref_med / cur_med for v in current]
    else:
        centred = list(reference)
    alt = _worse_alternative(higher_is_better)
    hi = 1.0 if additive else (0.99 if higher_is_better else 20.0)

    def significant(d: float) -> bool:
        moved = _shifted(centred, d, higher_is_better=higher_is_better, additive=additive)
        return p_value(test, moved, reference, alt, additive=additive) <= alpha_each

    if not significant(hi):
        return math.inf
    lo = 0.0
    if significant(lo):
        return 0.0
    for _ in range(20):
        mid = (lo + hi) / 2
        if significant(mid):
            hi = mid
        else:
            lo = mid
    return hi


def assess(
    check: Check,
    current: Sequence[float],
    reference: Reference | None,
    *,
    alpha_each: float,
) -> Outcome | None:
    """Raw statistics of one check; ``None`` when the cell has no samples of
    the metric (e.g. TPS of a read probe)."""
    if not current:
        return None
    hib = check.higher_is_better
    cur_med = _median(current)
    if check.kind == "absolute":
        worse = (check.limit - cur_med) if hib else (cur_med - check.limit)
        return Outcome(check, cur_med, check.limit, n_current=len(current), worse=worse, alpha_each=alpha_each)
    assert reference is not None
    ref = list(reference.samples)
    ref_med = _median(ref)
    additive = _additive(check.metric)
    if additive:
        change = cur_med - ref_med
    else:
        change = (cur_med / ref_med - 1.0) if ref_med else math.nan
    worse = -change if hib else change
    alt = _worse_alternative(hib)
    other = "greater" if alt == "less" else "less"
    allow_t = reference.allow_t
    test = choose_test(len(current), len(ref), alpha_each, allow_t=allow_t)
    p_worse = p_value(test, current, ref, alt, additive=additive)
    p_better = p_value(test, current, ref, other, additive=additive)
    detectable = detectable_change(
        current, ref, higher_is_better=hib, additive=additive, alpha_each=alpha_each, allow_t=allow_t
    )
    return Outcome(
        check,
        cur_med,
        ref_med,
        n_current=len(current),
        n_reference=len(ref),
        change=change,
        worse=worse,
        p_worse=p_worse,
        p_better=p_better,
        p_worse_adj=p_worse,
        p_better_adj=p_better,
        detectable=detectable,
        min_p=stats.min_attainable_p(len(current), len(ref)),
        alpha_each=alpha_each,
        test=test,
        ci=stats.bootstrap_ratio_ci(current, ref) if not additive else (math.nan, math.nan),
        ref_what=reference.what,
        ref_detail=reference.detail,
    )


def assess_runs(
    check: Check,
    current: Sequence[float],
    reference: Reference,
    *,
    alpha_each: float,
    min_runs: int,
    min_run_spread: float = 0.0,
) -> Outcome:
    """Raw statistics of a run-level check: one value per run on each side.
    ``min_run_spread``: the least spread between runs a ``baseline`` check
    assumes (``GatePolicy.min_run_spread``).

    ``baseline`` values are run medians, compared on the log scale (a budget
    limits a ratio); ``drop`` values are fractions of level 0 compared in
    points. A check with fewer accepted runs than ``min_runs`` keeps its
    numbers but is not statistical: it can never call a regression."""
    hib = check.higher_is_better
    ref = list(reference.samples)
    cur_mean = statistics.fmean(current)
    if check.kind == "drop":
        ref_mean = statistics.fmean(ref)
        change = cur_mean - ref_mean
        worse = change  # a larger drop is worse, whatever the metric
        test = stats.run_t_test(current, ref, log=False)
        p_worse, p_better = test.p_greater, test.p_less
        crit = test.critical(alpha_each)
        detectable = crit
    else:
        ref_mean = stats.geometric_mean(ref)
        cur_mean = stats.geometric_mean(current)
        change = (cur_mean / ref_mean - 1.0) if ref_mean else math.nan
        worse = -change if hib else change
        additive = _additive(check.metric)
        floor = 0.0 if additive else math.log1p(min_run_spread)
        test = stats.run_t_test(current, ref, log=not additive, sd_floor=floor)
        p_worse, p_better = (test.p_less, test.p_greater) if hib else (test.p_greater, test.p_less)
        crit = test.critical(alpha_each)
        if _additive(check.metric):
            detectable = crit
        elif math.isinf(crit) or (not hib and crit > 700):  # exp() of more than ~709 overflows: nothing detectable
            detectable = math.inf
        else:
            detectable = -math.expm1(-crit) if hib else math.expm1(crit)
    missing = max(0, min_runs - len(ref))
    return Outcome(
        check,
        cur_mean,
        ref_mean,
        n_current=len(current),
        n_reference=len(ref),
        change=change,
        worse=worse,
        p_worse=p_worse,
        p_better=p_better,
        p_worse_adj=p_worse,
        p_better_adj=p_better,
        detectable=detectable,
        min_p=0.0,
        alpha_each=alpha_each,
        test=f"run-t (df {test.df})" if test.df else "run-t",
        ref_what=reference.what,
        ref_detail=reference.detail,
        runs_missing=missing,
    )


@dataclass
class Pending:
    """A cell between ``assess`` and ``decide``."""

    key: CellKey
    outcomes: list[Outcome]
    missing_baseline: bool = False
    no_rounds: bool = False
    incomparable: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    #: this run of the cell, as run-level checks and the baseline store see it
    run: RunSummary = field(default_factory=lambda: RunSummary({}))
    #: why the load generator, not the database, limited this cell ("" = it did not)
    saturated: str = ""


def assess_cell(
    key: CellKey,
    current: Samples,
    checks: Sequence[Check],
    *,
    baseline: BaselineCell | None,
    level0: Samples | None,
    level0_label: str = "",
    alpha_cell: float,
    incomparable: Sequence[str] = (),
    no_baseline_note: str = "",
    earlier_runs: Sequence[RunSummary] = (),
    min_runs: int = 3,
    min_run_spread: float = 0.0,
    census: Mapping[str, float] | None = None,
    interleaved: bool = False,
    guard: Mapping[str, float] | None = None,
    not_counts: Mapping[str, str] | None = None,
) -> Pending:
    """Raw statistics of every check of one cell. ``alpha_cell`` is this
    cell's share of the session's alpha; it is split again over the
    statistical checks that really have samples on both sides.
    ``earlier_runs`` are this cell's runs from earlier invocations of the
    same gate decision (``--gate-max-runs``). ``census``: the cell's census
    values (``wanbench.census.values_of``), judged by its ``census`` checks
    against the accepted runs' census in their own units. ``interleaved``:
    ``level0`` holds the cell's own level-0 rounds, run beside its faulted
    ones, so the machine's drift between blocks minutes apart does not
    enter its ``level0`` checks. ``guard``: the A/A guard of the cell's group
    (``Judge.remember``), by metric: what its ``drop`` and ``level0`` checks
    are held against (``with_guard``). ``not_counts``: the cell's census
    values that are not counts where they were measured (name -> value and
    why, ``wanbench.census.not_counts_of``): said in the notes, never judged."""
    census_list = [c for c in checks if c.kind == "census"]
    checks = [c for c in checks if c.kind not in ("census", "ab")]  # ab: only an A/B run has a baseline side
    pending = Pending(key, [], incomparable=tuple(incomparable), no_rounds=not any(current.values()))
    summary = summary_of(current)
    pending.run = RunSummary(summary, drops_of(summary, summary_of(level0)) if level0 else {})
    runs = [*earlier_runs, pending.run]
    if baseline is not None:
        pending.baseline = {
            "accepted_at": baseline.accepted_at,
            "runs": baseline.runs,
            "versions": dict(baseline.versions),
            "release": baseline.release,
        }
    todo: list[tuple[Check, list[float], Reference | None]] = []
    for check in checks:
        values = current.get(check.metric, [])
        if not values:
            continue  # e.g. TPS of a read probe: the workload does not measure it
        if check.kind == "absolute":
            todo.append((check, values, None))
        elif check.kind == "level0":
            if level0 is None:
                name = metric_name(check.metric)
                pending.notes.append(f"{name} level-0 check skipped: no level-0 cell of this run seen")
                continue
            lv_values = level0.get(check.metric, [])
            if lv_values:
                what = f"level 0 ({key.family}={level0_label})" if level0_label else "level 0"
                todo.append((check, values, Reference(lv_values, what, "", allow_t=True)))
        else:  # run-level: baseline, drop
            if incomparable:
                continue
            if check.kind == "drop" and level0 is None:
                name = metric_name(check.metric)
                pending.notes.append(f"{name} drop check skipped: no level-0 cell of this run seen")
                continue
            if baseline is None:
                pending.missing_baseline = True
                if no_baseline_note and no_baseline_note not in pending.notes:
                    pending.notes.append(no_baseline_note)
                continue
            source = baseline.run_drops if check.kind == "drop" else baseline.run_medians
            base_values = list(source.get(check.metric, ()))
            cur_values = [v for r in runs if (v := r.values(check)) is not None]
            if not base_values or not cur_values:
                what = "drop against level 0" if check.kind == "drop" else "samples"
                pending.notes.append(f"baseline has no {metric_name(check.metric)} {what}")
                continue
            what = "baseline drop" if check.kind == "drop" else "baseline"
            todo.append((check, cur_values, Reference(base_values, what, baseline.describe())))
    tests = sum(1 for check, _v, _r in todo if check.kind != "absolute")
    alpha_each = alpha_cell / max(1, tests)
    for check, values, reference in todo:
        if check.per_run:
            assert reference is not None
            run_outcome = assess_runs(check, values, reference, alpha_each=alpha_each, min_runs=min_runs,
                                      min_run_spread=min_run_spread)
            pending.outcomes.append(with_guard(run_outcome, guard, reference.samples) if guard else run_outcome)
            continue
        outcome = assess(check, values, reference, alpha_each=alpha_each)
        if outcome is not None and check.kind == "level0" and not interleaved:
            drops = list(baseline.run_drops.get(check.metric, ())) if baseline is not None and not incomparable else []
            outcome = with_drift(outcome, drops, min_runs=min_runs)
        if outcome is not None:
            pending.outcomes.append(with_guard(outcome, guard) if guard else outcome)
    if census and census_list and baseline is not None and not incomparable:
        changes, notes = census_checks.census_changes(census, baseline.run_census, census_list, not_counts)
        pending.notes.extend(notes)
        for check, cur, ref, n in changes:
            change = census_checks.change_of(check, cur, ref)
            pending.outcomes.append(Outcome(check, cur, ref, n_current=1, n_reference=n, change=change,
                                            worse=change, ref_what="accepted runs' median"))
    return pending


def with_guard(o: Outcome, guard: Mapping[str, float], accepted_drops: Sequence[float] = ()) -> Outcome:
    """A ``drop`` or ``level0`` outcome with the A/A guard's shift of its
    metric (a worsening, as ``drops_of`` gives it) and what its rule assumes
    the machine's noise can do, as a relative change (``guard_allowed``):

    * ``level0``: its budget (the rounds beside are assumed to differ by the fault alone);
    * ``drop``: the ``GUARD_LEVEL`` prediction bound of the accepted runs'
      ratios (``accepted_drops``, at least two): |log ratio| up to
      t(df = n - 1) times their spread, since the run t-test takes that spread
      as this run's noise. With fewer accepted runs the check cannot decide
      anyway, and no guard is attached.

    Other checks are returned as they are."""
    shift = guard.get(o.check.metric)
    if o.check.kind not in ("drop", "level0") or shift is None or not math.isfinite(shift):
        return o
    if o.check.kind == "level0":
        return replace(o, guard_shift=shift, guard_allowed=o.check.limit)
    logs = [stats.log_ratio(d, o.check.higher_is_better) for d in accepted_drops]
    logs = [v for v in logs if math.isfinite(v)]
    if len(logs) < 2:
        return o
    n = len(logs)
    # the guard's own ratio is 1 with no fault: its |log| against t times the runs' spread of theirs
    bound = stats.student_t_ppf(0.5 + GUARD_LEVEL / 2, n - 1) * statistics.stdev(logs)
    return replace(o, guard_shift=shift, guard_allowed=math.expm1(bound))


def with_drift(o: Outcome, drops: Sequence[float], *, min_runs: int) -> Outcome:
    """A ``level0`` outcome with the between-block drift the accepted runs show:
    their drops of this cell (fractions of level 0, in the bad direction) give
    the spread, and this run's drop is tested against the budget with it
    (a one-sided t with len(drops) - 1 degrees of freedom, the new run's own
    variance included)."""
    n = len(drops)
    o = replace(o, drift_runs=n, drift_runs_missing=max(0, min_runs - n), drift_p=1.0)
    if n < max(2, min_runs) or math.isnan(o.worse):
        return o
    sd = statistics.stdev(drops)
    excess = o.worse - o.check.limit
    if sd == 0:
        p = 0.0 if excess > 0 else 1.0
    else:
        p = stats.student_t_sf(excess / (sd * math.sqrt(1.0 + 1.0 / n)), n - 1)
    return replace(o, drift_sd=sd, drift_p=p)


# ---------------------------------------------------------------- step 2


def correct(cells: Sequence[Pending], method: str = "holm") -> list[Pending]:
    """Adjust every statistical p-value over all cells together."""
    slots = [(ci, oi) for ci, c in enumerate(cells) for oi, o in enumerate(c.outcomes) if o.statistical]
    fn = stats.CORRECTIONS[method]
    worse = fn([cells[ci].outcomes[oi].p_worse for ci, oi in slots])
    better = fn([cells[ci].outcomes[oi].p_better for ci, oi in slots])
    for (ci, oi), pw, pb in zip(slots, worse, better, strict=True):
        cells[ci].outcomes[oi] = replace(cells[ci].outcomes[oi], p_worse_adj=pw, p_better_adj=pb)
    return list(cells)


def correct_online(cell: Pending, cells: int) -> Pending:
    """Bonferroni for a session judged cell by cell, before the other cells
    are known: ``cells`` is the number of gated cells the session collected;
    each cell's share is split over its own statistical checks."""
    m = max(1, cells) * max(1, sum(1 for o in cell.outcomes if o.statistical))
    cell.outcomes = [
        replace(o, p_worse_adj=min(1.0, o.p_worse * m), p_better_adj=min(1.0, o.p_better * m)) if o.statistical else o
        for o in cell.outcomes
    ]
    return cell
