"""Verdicts: is this cell worse than its baseline, beyond its budget, for sure?

A cell is a ``regression`` only when a metric is beyond its budget AND a
one-sided test says the difference is not noise, after correcting for the
number of comparisons made in the session. A cell whose noise hides a change
of the budget's size is ``inconclusive``, and the message says the smallest
change it could have detected.

What counts as noise depends on the check. Against the stored baseline
(``baseline``) and against the baseline's drop (``drop``) the unit of
replication is the *run*: a separate invocation, with its own process,
connections and often its own lab, differs from the next one by more than
its rounds differ among themselves, so each run contributes one summary (the
median of its rounds) and the test is a t-test over run summaries
(``stats.run_t_test``). With fewer accepted runs than the policy's
``min_runs`` such a check never calls a regression. Against level 0 of the
same run (``level0``), both sides share the run, and its rounds are compared
with a rank test.

Decisions happen in two steps so a whole session can be corrected together:
``assess`` computes the raw statistics of each check, ``correct`` adjusts
the p-values over all cells, ``decide`` turns them into a ``Verdict``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wanbench.census import UNITS
from wanbench.gate import census_checks, stats
from wanbench.gate.baseline import BaselineCell, Lookup, Samples, drops_of, summary_of
from wanbench.gate.budgets import Budgets, CellKey, Check, format_value
from wanbench.gate.integrity import Problem
from wanbench.results import finite_or_none

PASS = "pass"
REGRESSION = "regression"
IMPROVEMENT = "improvement"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
#: data a fault must never cost was lost (``wanbench.gate.integrity``): fails whatever the budgets say
BROKEN = "broken"
#: the cell's status is the first of these that any of its checks has
PRIORITY = (BROKEN, REGRESSION, INCOMPARABLE, NO_BASELINE, INCONCLUSIVE, IMPROVEMENT, PASS)
#: statuses that fail a cell (pytest), the exit status of ``compare`` and the Allure test
FAILING = frozenset({BROKEN, REGRESSION})

# Reason codes: why a check or a cell ended as it did. Decisions test these,
# never the text of a message (the message is rendered from the same data).
R_WITHIN = "WITHIN_BUDGET"
R_BEYOND = "BEYOND_BUDGET"
R_BETTER = "BETTER_BEYOND_BUDGET"
R_ABSOLUTE_EXCEEDED = "ABSOLUTE_LIMIT_EXCEEDED"
R_ABSOLUTE_WITHIN = "ABSOLUTE_LIMIT_MET"
R_ZERO_REFERENCE = "ZERO_REFERENCE"
R_RUNS_MISSING = "TOO_FEW_BASELINE_RUNS"
R_RUNS_NOISY = "RUNS_TOO_NOISY"
R_ROUNDS_TOO_FEW = "TOO_FEW_ROUNDS"
R_ROUNDS_NOISY = "ROUNDS_TOO_NOISY"
R_DRIFT_RUNS_MISSING = "LEVEL0_DRIFT_RUNS_MISSING"
R_DRIFT_SPREAD = "LEVEL0_DRIFT_WITHIN_SPREAD"
R_CLIENT_SATURATED = "CLIENT_SATURATED"
R_NO_ROUNDS = "NO_ROUNDS"
R_INCOMPARABLE = "INCOMPARABLE_ENVIRONMENT"
R_NO_BASELINE = "NO_BASELINE"
R_NO_CHECKS = "NO_CHECKS"
R_CENSUS_BEYOND = "CENSUS_BEYOND_BUDGET"
R_CENSUS_WITHIN = "CENSUS_WITHIN_BUDGET"
#: undecided for a reason one more run of the cell could remove (``is_undecided``)
REPEATABLE = frozenset({R_RUNS_NOISY})

_NAMES = {
    "qps": "QPS",
    "tps": "TPS",
    "tpmc": "tpmC",
    "latency_ms.p50": "p50 latency",
    "latency_ms.p95": "p95 latency",
    "latency_ms.p99": "p99 latency",
    "error_rate": "error rate",
    "rto_s": "RTO",
    "recovery_s": "recovery after the fault",
}


def metric_name(metric: str) -> str:
    """``QPS``; YCSB's per-operation metrics read ``READ OPS``, ``READ p99 latency``."""
    if metric.startswith("ops."):
        return f"{metric[4:]} OPS"
    if metric.startswith("latency_ms.p99."):
        return f"{metric[len('latency_ms.p99.'):]} p99 latency"
    return _NAMES.get(metric, metric)


@dataclass(frozen=True)
class Reference:
    """What a statistical check compares against: rounds of level 0 of the
    same run, or one summary per accepted baseline run."""

    samples: Sequence[float]
    what: str  # "baseline" / "level 0 (rtt=0ms)" / "baseline drop"
    detail: str  # "baseline 2026-11-20 mariadb 10.11.19" or ""
    allow_t: bool = False  # see choose_test


@dataclass(frozen=True)
class RunSummary:
    """One run of a cell, as the run-level checks see it: the median of its
    rounds per metric and, for a faulted cell, its drop against the run's own
    level 0. ``--gate-max-runs`` carries earlier runs of the same cell over to
    the next invocation in this shape."""

    summary: Mapping[str, float]
    drop: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"summary": dict(self.summary), "drop": dict(self.drop)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        return cls({k: float(v) for k, v in (data.get("summary") or {}).items()},
                   {k: float(v) for k, v in (data.get("drop") or {}).items()})

    def values(self, check: Check) -> float | None:
        source = self.drop if check.kind == "drop" else self.summary
        return source.get(check.metric)


@dataclass(frozen=True)
class Outcome:
    """One check of one cell: raw statistics, then (after ``decide``) a status."""

    check: Check
    current: float
    reference: float
    n_current: int = 0
    n_reference: int = 0
    change: float = math.nan  # signed: relative (cur/ref - 1), error_rate in points
    worse: float = math.nan  # the change in the bad direction (> 0 is worse)
    p_worse: float = 1.0
    p_better: float = 1.0
    p_worse_adj: float = 1.0
    p_better_adj: float = 1.0
    detectable: float = math.nan  # smallest worse change this cell could flag
    min_p: float = 0.0
    alpha_each: float = 0.05
    test: str = ""  # mann-whitney | welch-t (when ranks cannot reach alpha_each)
    ci: tuple[float, float] = (math.nan, math.nan)
    ref_what: str = ""
    ref_detail: str = ""
    #: accepted runs this run-level check still needs before it may judge
    runs_missing: int = 0
    #: a ``level0`` check: its level and level 0 are blocks of one run, measured
    #: minutes apart, and the machine drifts between blocks as it does between
    #: runs. The accepted runs' drops of this cell show by how much; with fewer
    #: than the policy's ``min_runs`` (``drift_runs_missing`` > 0) a drop beyond
    #: the budget is not called a regression. ``drift_p``: one-sided p that this
    #: run's drop is beyond the budget, given the spread of the accepted runs' drops.
    drift_runs: int = 0
    drift_runs_missing: int = 0
    drift_sd: float = math.nan
    drift_p: float = 1.0
    status: str = ""
    message: str = ""
    #: the reason code behind ``status`` (``R_*``)
    reason: str = ""

    @property
    def statistical(self) -> bool:
        return self.check.kind not in ("absolute", "census") and self.runs_missing == 0

    @property
    def unit(self) -> str:
        return "run" if self.check.per_run else "round"

    def to_json(self) -> dict[str, Any]:
        num = finite_or_none
        return {
            "kind": self.check.kind,
            "metric": self.check.metric,
            "limit": self.check.limit,
            "budget_line": self.check.line,
            "status": self.status,
            "current": num(self.current),
            "reference": num(self.reference),
            "n_current": self.n_current,
            "n_reference": self.n_reference,
            "change": num(self.change),
            "p": num(self.p_worse) if self.statistical else None,
            "p_adjusted": num(self.p_worse_adj) if self.statistical else None,
            "p_better": num(self.p_better) if self.statistical else None,
            "test": self.test or None,
            "detectable_change": num(self.detectable),
            "ratio_ci95": [num(self.ci[0]), num(self.ci[1])],
            "unit": self.unit,
            "runs_missing": self.runs_missing,
            **({"drift": {"runs": self.drift_runs, "runs_missing": self.drift_runs_missing,
                          "sd_points": num(self.drift_sd * 100), "p": num(self.drift_p)}}
               if self.check.kind == "level0" else {}),
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class Verdict:
    """A cell's decision as data: ``status``, the ``reasons`` (codes) behind
    it, each check with its numbers (``outcomes``) and the integrity
    ``problems``; ``message`` is rendered from them."""

    key: CellKey
    status: str
    message: str
    outcomes: tuple[Outcome, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: Mapping[str, Any] = field(default_factory=dict)
    alpha: float = 0.05
    comparisons: int = 1
    reasons: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()

    @property
    def label(self) -> str:
        return self.status

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reasons": list(self.reasons),
            "message": self.message,
            "cell": self.key.id,
            "integrity": [p.to_json() for p in self.problems],
            "checks": [o.to_json() for o in self.outcomes],
            "notes": list(self.notes),
            "baseline": dict(self.baseline),
            "alpha": self.alpha,
            "comparisons": self.comparisons,
        }


# ---------------------------------------------------------------- step 1


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
        elif math.isinf(crit):
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
) -> Pending:
    """Raw statistics of every check of one cell. ``alpha_cell`` is this
    cell's share of the session's alpha; it is split again over the
    statistical checks that really have samples on both sides.
    ``earlier_runs`` are this cell's runs from earlier invocations of the
    same gate decision (``--gate-max-runs``). ``census``: the cell's census
    values (``wanbench.census.values_of``), judged by its ``census`` checks
    against the accepted runs' census in their own units."""
    census_list = [c for c in checks if c.kind == "census"]
    checks = [c for c in checks if c.kind != "census"]
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
            pending.outcomes.append(assess_runs(check, values, reference, alpha_each=alpha_each, min_runs=min_runs,
                                                min_run_spread=min_run_spread))
            continue
        outcome = assess(check, values, reference, alpha_each=alpha_each)
        if outcome is not None and check.kind == "level0":
            drops = list(baseline.run_drops.get(check.metric, ())) if baseline is not None and not incomparable else []
            outcome = with_drift(outcome, drops, min_runs=min_runs)
        if outcome is not None:
            pending.outcomes.append(outcome)
    if census and census_list and baseline is not None and not incomparable:
        changes, notes = census_checks.census_changes(census, baseline.run_census, census_list)
        pending.notes.extend(notes)
        for check, cur, ref, n in changes:
            change = census_checks.change_of(check, cur, ref)
            pending.outcomes.append(Outcome(check, cur, ref, n_current=1, n_reference=n, change=change,
                                            worse=change, ref_what="accepted runs' median"))
    return pending


def with_drift(o: Outcome, drops: Sequence[float], *, min_runs: int) -> Outcome:
    """A ``level0`` outcome with the between-block drift the accepted runs show:
    their drops of this cell (fractions of level 0, in the bad direction) give
    the spread, and this run's drop is tested against the budget with it
    (a one-sided t with len(drops) - 1 degrees of freedom, the new run's own
    variance included)."""
    n = len(drops)
    o = replace(o, drift_runs=n, drift_runs_missing=max(0, min_runs - n))
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


# ---------------------------------------------------------------- step 3


def _fmt(metric: str, value: float) -> str:
    return format_value(metric, value)


def _fmt_p(p: float) -> str:
    if p < 0.001:
        return f"p={p:.1e}"
    return f"p={p:.3f}" if p < 0.1 else f"p={p:.2f}"


def _fmt_change(o: Outcome, value: float | None = None) -> str:
    v = abs(o.worse if value is None else value)
    if o.check.metric == "error_rate" or o.check.kind == "drop":
        return f"{v * 100:.2g} points" if v < 0.1 else f"{v * 100:.1f} points"
    return f"{v * 100:.1f}%"


def _direction(o: Outcome) -> str:
    up = o.change > 0
    return "above" if up else "below"


def _sizes(o: Outcome) -> str:
    if o.unit == "run":
        runs = "run" if o.n_current == 1 else "runs"
        return f"{o.n_current} {runs} vs {o.n_reference} accepted"
    return f"{o.n_current} rounds vs {o.n_reference}"


def _context(o: Outcome, *, with_p: bool = True) -> str:
    parts = []
    budget = "degradation budget" if o.check.kind == "level0" else "budget"
    parts.append(f"{budget} {o.check.describe_limit()}")
    if with_p and o.statistical:
        p = _fmt_p(o.p_worse if o.worse > 0 else o.p_better)
        parts.append(p + (" (t-test)" if o.test == "welch-t" else ""))
    parts.append(_sizes(o))
    if o.ref_detail:
        parts.append(o.ref_detail)
    return ", ".join(parts)


def _head(o: Outcome) -> str:
    name = metric_name(o.check.metric)
    if o.check.kind == "drop":
        word = "drop" if o.check.higher_is_better else "rise"
        return (f"{name} {word} against level 0 is {o.current * 100:.1f}% vs {o.reference * 100:.1f}% in the "
                f"baseline runs ({'+' if o.change >= 0 else '-'}{_fmt_change(o)})")
    cur = _fmt(o.check.metric, o.current)
    ref = _fmt(o.check.metric, o.reference)
    return f"{name} {cur} is {_fmt_change(o)} {_direction(o)} {o.ref_what} {ref}"


def _undecided_why(o: Outcome) -> tuple[str, str]:
    """Why a check could not decide (its reason code), and what would let it."""
    if o.runs_missing:
        have = o.n_reference
        return R_RUNS_MISSING, (
            f"but the baseline holds {have} accepted run{'s' if have != 1 else ''} of this cell and the gate needs "
            f"{have + o.runs_missing} to know how much separate runs differ: record {o.runs_missing} more "
            f"(--baseline-save, one invocation each, or --baseline-runs {o.runs_missing})"
        )
    if o.unit == "run":
        return R_RUNS_NOISY, (
            f"too noisy to judge a {o.check.describe_limit()} budget: separate runs of this cell differ so much that "
            f"the smallest {'rise' if o.check.kind == 'drop' or not o.check.higher_is_better else 'drop'} it could "
            f"detect is {_fmt_change(o, o.detectable)}: record more baseline runs, or let the gate repeat the run "
            "(--gate-max-runs)"
        )
    if math.isinf(o.detectable) and (o.n_current < 2 or o.n_reference < 2):
        return R_ROUNDS_TOO_FEW, (
            f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
            "(a test needs at least 2 rounds on each side): add rounds (--rounds)"
        )
    if math.isinf(o.detectable):
        return R_ROUNDS_TOO_FEW, (
            f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
            f"(the smallest possible p is {o.min_p:.2g}; alpha is shared by all comparisons of the session): "
            "add rounds (--rounds)"
        )
    return R_ROUNDS_NOISY, (
        f"too noisy to judge a {o.check.describe_limit()} budget: the smallest "
        f"{'drop' if o.check.higher_is_better else 'rise'} this cell could detect is "
        f"{_fmt_change(o, o.detectable)}"
    )


def _drift_reason(o: Outcome, alpha: float) -> str | None:
    """A ``level0`` drop beyond the budget, significant over the run's rounds,
    is still not a regression when the accepted runs cannot show that the
    machine's drift between the level's block and level 0's does not explain
    it: the reason code, or None when it is a regression."""
    if o.check.kind != "level0":
        return None
    if o.drift_runs_missing:
        return R_DRIFT_RUNS_MISSING
    # the session's correction, as applied to the rounds' p-value, applies to this one too
    factor = o.p_worse_adj / o.p_worse if o.p_worse > 0 else 1.0
    return R_DRIFT_SPREAD if min(1.0, o.drift_p * factor) > alpha else None


def _drift_text(o: Outcome, reason: str) -> str:
    if reason == R_DRIFT_RUNS_MISSING:
        have = o.drift_runs
        return (
            f"beyond the {o.check.describe_limit()} degradation budget over this run's rounds, but a level and its "
            f"level 0 are blocks measured apart, and this machine drifts between blocks as between runs; the "
            f"baseline holds {have} accepted run{'s' if have != 1 else ''} of this cell and the gate needs "
            f"{have + o.drift_runs_missing} to know by how much: record {o.drift_runs_missing} more "
            f"(--baseline-save, one invocation each, or --baseline-runs {o.drift_runs_missing})"
        )
    return (
        f"beyond the {o.check.describe_limit()} degradation budget over this run's rounds, but the drops of "
        f"the {o.drift_runs} accepted runs of this cell spread by {o.drift_sd * 100:.1f} points, so this one is "
        f"not clearly beyond it (p={o.drift_p:.2g} across runs)"
    )


def _judge_census(o: Outcome) -> Outcome:
    """One run decides: the census metric grew beyond its limit over the accepted runs' median, or not."""
    unit = UNITS.get(o.check.metric.split(".", 1)[0], "")
    change = f"{o.change * 100:+.1f}%" if o.check.relative else f"{o.change:+.3g}"
    runs = f"{o.n_reference} accepted run{'s' if o.n_reference != 1 else ''}"
    head = (f"{o.check.metric} {o.current:.3g} vs {o.reference:.3g} in the {runs} ({change}; {unit}; "
            f"census budget {o.check.describe_limit()})")
    if census_checks.beyond(o.check, o.current, o.reference):
        return replace(o, status=REGRESSION, reason=R_CENSUS_BEYOND, message=head)
    return replace(o, status=PASS, reason=R_CENSUS_WITHIN, message=head)


def _judge(o: Outcome, alpha: float) -> Outcome:
    """A check's status and reason code, decided from its numbers; its message rendered from them."""
    if o.check.kind == "census":
        return _judge_census(o)
    name = metric_name(o.check.metric)
    if o.check.kind == "absolute":
        cur = _fmt(o.check.metric, o.current)
        ref = _fmt(o.check.metric, o.reference)
        if o.worse > 0:
            bound = "below the minimum" if o.check.higher_is_better else "above the limit"
            msg = f"{name} {cur} is {bound} {ref} (absolute budget, median of {o.n_current} rounds)"
            return replace(o, status=REGRESSION, reason=R_ABSOLUTE_EXCEEDED, message=msg)
        return replace(o, status=PASS, reason=R_ABSOLUTE_WITHIN,
                       message=f"{name} {cur} within the absolute limit {o.check.describe_limit()}")
    if math.isnan(o.worse):
        return replace(o, status=INCONCLUSIVE, reason=R_ZERO_REFERENCE,
                       message=f"{name}: the {o.ref_what} median is 0, no relative change")
    head = _head(o)
    limit = o.check.limit
    beyond = o.statistical and o.worse > limit and o.p_worse_adj <= alpha  # the regression condition, once
    if beyond:
        drift = _drift_reason(o, alpha)
        if drift:
            return replace(o, status=INCONCLUSIVE, reason=drift, message=f"{head}, {_drift_text(o, drift)} "
                                                                           f"({_context(o)})")
        return replace(o, status=REGRESSION, reason=R_BEYOND, message=f"{head} ({_context(o)})")
    if o.statistical and -o.worse > limit and o.p_better_adj <= alpha:
        return replace(o, status=IMPROVEMENT, reason=R_BETTER, message=f"{head}: improvement ({_context(o)})")
    if not o.statistical or o.detectable > limit or o.worse > limit:
        reason, why = _undecided_why(o)
        return replace(o, status=INCONCLUSIVE, reason=reason, message=f"{head}, {why} ({_context(o)})")
    return replace(
        o,
        status=PASS,
        reason=R_WITHIN,
        message=f"{head} (within {_context(o, with_p=False)}; could detect {_fmt_change(o, o.detectable)})",
    )


def _status_and_reasons(cell: Pending, outcomes: Sequence[Outcome],
                        problems: Sequence[Problem]) -> tuple[str, list[str]]:
    """The one place a cell's status is decided, from its checks' statuses and the cell's facts."""
    statuses = {o.status for o in outcomes}
    reasons = [p.code for p in problems]
    if problems:
        statuses.add(BROKEN)
    if cell.incomparable:
        statuses.add(INCOMPARABLE)
        reasons.append(R_INCOMPARABLE)
    if cell.missing_baseline:
        statuses.add(NO_BASELINE)
        reasons.append(R_NO_BASELINE)
    if cell.no_rounds:
        statuses.add(INCONCLUSIVE)
        reasons.append(R_NO_ROUNDS)
    status = next((s for s in PRIORITY if s in statuses), PASS)
    if status == REGRESSION and cell.saturated:
        status = INCONCLUSIVE  # the load generator, not the database, was the bottleneck
        reasons.append(R_CLIENT_SATURATED)
    if not outcomes and not reasons:
        reasons.append(R_NO_CHECKS)
    for o in outcomes:
        if o.reason and o.reason not in reasons and (o.status == status or R_CLIENT_SATURATED in reasons):
            reasons.append(o.reason)
    return status, reasons


def _render(cell: Pending, status: str, reasons: Sequence[str], outcomes: Sequence[Outcome],
            problems: Sequence[Problem]) -> str:
    """The verdict's sentence, rendered from the decision (never read back)."""
    label = cell.key.label
    notes = f" ({'; '.join(cell.notes)})" if cell.notes else ""
    if status == BROKEN:
        return f"{label}: " + "; ".join(p.message for p in problems)
    if R_NO_ROUNDS in reasons and status == INCONCLUSIVE:
        return f"{label}: no rounds were measured, nothing to judge"
    if status == INCOMPARABLE:
        return f"{label}: incomparable with the stored baseline: " + "; ".join(cell.incomparable) + notes
    if status == NO_BASELINE:
        return f"{label}: no baseline for this cell{notes}; record one with --baseline-save"
    if R_CLIENT_SATURATED in reasons:
        picked = [o.message for o in outcomes if o.status == REGRESSION]
        return (f"{label}: " + "; ".join(picked) + f" -- but the client was saturated ({cell.saturated}): "
                "not a database regression")
    picked = [o.message for o in outcomes if o.status == status] or [f"no checks apply{notes}"]
    return f"{label}: " + "; ".join(picked)


def decide(cell: Pending, *, alpha: float, comparisons: int = 1, problems: Sequence[Problem] = ()) -> Verdict:
    outcomes = tuple(_judge(o, alpha) for o in cell.outcomes)
    status, reasons = _status_and_reasons(cell, outcomes, problems)
    return Verdict(
        cell.key,
        status,
        _render(cell, status, reasons, outcomes, problems),
        outcomes,
        tuple(cell.notes),
        cell.baseline,
        alpha,
        comparisons,
        tuple(reasons),
        tuple(problems),
    )


def is_undecided(v: Verdict) -> bool:
    """Inconclusive, and one more run could decide it: a run-level check that
    is statistical but not yet sure. Missing baseline runs, too few rounds or
    a saturated client are not fixed by repeating."""
    if v.status != INCONCLUSIVE or R_CLIENT_SATURATED in v.reasons:
        return False
    return any(o.status == INCONCLUSIVE and o.reason in REPEATABLE for o in v.outcomes)


# ---------------------------------------------------------------- one run


class Judge:
    """Judges the cells of one run against one store lookup and one budget,
    with the same rules wherever the verdict is made (pytest, ``compare``).

    ``remember`` level-0 cells as they come, so the ``level0`` and ``drop``
    checks of the faulted cells that follow can find them. ``earlier`` holds
    each cell's runs from earlier invocations of one gate decision
    (``--gate-max-runs``), by cell id.
    """

    def __init__(self, budgets: Budgets, lookup: Lookup,
                 earlier: Mapping[str, Sequence[RunSummary]] | None = None) -> None:
        self.budgets = budgets
        self.lookup = lookup
        self.earlier = dict(earlier or {})
        self.level0: dict[tuple[str, str, int, str, str], tuple[str, Samples]] = {}

    def remember(self, key: CellKey, samples: Samples, *, is_level0: bool) -> None:
        if is_level0 or key.is_level0:
            self.level0[key.level0_group] = (key.level, samples)

    def pending(self, key: CellKey, samples: Samples, *, alpha_cell: float,
                client: Mapping[str, Any] | None = None, census: Mapping[str, float] | None = None) -> Pending:
        checks = self.budgets.checks_for(key)
        lk = self.lookup
        baseline = lk.file.cell(key) if lk.file is not None else None
        found = None if key.is_level0 else self.level0.get(key.level0_group)
        note = lk.note
        if lk.file is not None and baseline is None:
            note = f"{lk.file.path.name} has no rounds of this cell"
        pending = assess_cell(
            key,
            samples,
            checks,
            baseline=baseline,
            level0=found[1] if found else None,
            level0_label=found[0] if found else "",
            alpha_cell=alpha_cell,
            incomparable=lk.incomparable,
            no_baseline_note=note,
            earlier_runs=self.earlier.get(key.id, ()),
            min_runs=self.budgets.policy.min_runs,
            min_run_spread=self.budgets.policy.min_run_spread,
            census=census,
        )
        if lk.incomparable and lk.note:
            pending.notes.insert(0, lk.note)
        if not checks:
            pending.notes.append(f"no budget rule of {self.budgets.source} matches this cell")
        client = client or {}
        if client.get("saturated"):
            pending.saturated = str(client.get("message") or "load generator at its CPU limit")
        return pending

    def verdict(self, key: CellKey, samples: Samples, *, cells: int, looks: int = 1,
                client: Mapping[str, Any] | None = None,
                problems: Sequence[Problem] = (),
                census: Mapping[str, float] | None = None) -> tuple[Verdict, Pending]:
        """One cell's verdict as the session decides it: the session's alpha
        split over ``cells`` gated cells and ``looks`` runs of a chain
        (Bonferroni), each cell's share over its own checks. pytest calls this
        as each test ends; ``compare`` calls it for every cell of a results
        file, so the two always agree on the same data."""
        m = max(1, cells) * max(1, looks)
        alpha = self.budgets.policy.alpha
        pending = self.pending(key, samples, alpha_cell=alpha / m, client=client, census=census)
        correct_online(pending, m)
        return decide(pending, alpha=alpha, comparisons=m, problems=problems), pending
