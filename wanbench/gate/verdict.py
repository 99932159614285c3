"""Verdicts: is this cell worse than its baseline, beyond its budget, for sure?

A cell is a ``regression`` only when a metric is beyond its budget AND the
one-sided Mann-Whitney test says the difference is not noise, after
correcting for the number of comparisons made in the session. A cell whose
noise hides a change of the budget's size is ``inconclusive``, and the
message says the smallest change it could have detected. Decisions happen in
two steps so a whole session can be corrected together: ``assess`` computes
the raw statistics of each check, ``correct`` adjusts the p-values over all
cells, ``decide`` turns them into a ``Verdict``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from wanbench.gate import stats
from wanbench.gate.baseline import BaselineCell, Lookup, Samples
from wanbench.gate.budgets import Budgets, CellKey, Check, format_value

PASS = "pass"
REGRESSION = "regression"
IMPROVEMENT = "improvement"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
#: the cell's status is the first of these that any of its checks has
PRIORITY = (REGRESSION, INCOMPARABLE, NO_BASELINE, INCONCLUSIVE, IMPROVEMENT, PASS)

_NAMES = {
    "qps": "QPS",
    "tps": "TPS",
    "tpmc": "tpmC",
    "latency_ms.p50": "p50 latency",
    "latency_ms.p95": "p95 latency",
    "latency_ms.p99": "p99 latency",
    "error_rate": "error rate",
}


def metric_name(metric: str) -> str:
    return _NAMES.get(metric, metric)


@dataclass(frozen=True)
class Reference:
    """What a statistical check compares against."""

    samples: Sequence[float]
    what: str  # "baseline 3158" / "level 0 (rtt=0ms)"
    detail: str  # "baseline 2026-11-20 mariadb 10.11.19" or ""
    run_medians: Sequence[float] = ()  # one per accepted run, when the baseline has several
    allow_t: bool = False  # see choose_test


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
    #: the worst median among several accepted runs: a change inside the
    #: range the accepted runs already span is run-to-run drift, not a regression
    worst_run: float = math.nan
    status: str = ""
    message: str = ""

    @property
    def statistical(self) -> bool:
        return self.check.kind != "absolute"

    def to_json(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return None if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))) else v

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
            "worst_accepted_run": num(self.worst_run),
            "message": self.message,
        }


@dataclass(frozen=True)
class Verdict:
    key: CellKey
    status: str
    message: str
    outcomes: tuple[Outcome, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: Mapping[str, Any] = field(default_factory=dict)
    alpha: float = 0.05
    comparisons: int = 1

    @property
    def label(self) -> str:
        return self.status

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "message": self.message,
            "cell": self.key.id,
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
    worst_run = math.nan
    if len(reference.run_medians) >= 2:
        worst_run = min(reference.run_medians) if hib else max(reference.run_medians)
        if additive:
            gap = worst_run - ref_med
        elif ref_med:
            gap = (1.0 - worst_run / ref_med) if hib else (worst_run / ref_med - 1.0)
        else:
            gap = math.nan
        if not math.isnan(gap):
            detectable = max(detectable, gap)
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
        worst_run=worst_run,
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
) -> Pending:
    """Raw statistics of every check of one cell. ``alpha_cell`` is this
    cell's share of the session's alpha; it is split again over the
    statistical checks that really have samples on both sides."""
    pending = Pending(key, [], incomparable=tuple(incomparable), no_rounds=not any(current.values()))
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
        elif check.kind == "baseline":
            if incomparable:
                continue
            if baseline is None:
                pending.missing_baseline = True
                if no_baseline_note and no_baseline_note not in pending.notes:
                    pending.notes.append(no_baseline_note)
                continue
            base_values = baseline.samples.get(check.metric, [])
            if not base_values:
                pending.notes.append(f"baseline has no {metric_name(check.metric)} samples")
                continue
            medians = baseline.run_medians.get(check.metric, ())
            base_ref = Reference(base_values, "baseline", baseline.describe(), medians, allow_t=len(medians) >= 2)
            todo.append((check, values, base_ref))
        elif check.kind == "level0":
            if level0 is None:
                name = metric_name(check.metric)
                pending.notes.append(f"{name} level-0 check skipped: no level-0 cell of this run seen")
                continue
            lv_values = level0.get(check.metric, [])
            if lv_values:
                what = f"level 0 ({key.family}={level0_label})" if level0_label else "level 0"
                todo.append((check, values, Reference(lv_values, what, "", allow_t=True)))
    tests = sum(1 for check, _v, _r in todo if check.kind != "absolute")
    alpha_each = alpha_cell / max(1, tests)
    for check, values, reference in todo:
        outcome = assess(check, values, reference, alpha_each=alpha_each)
        if outcome is not None:
            pending.outcomes.append(outcome)
    return pending


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
    if o.check.metric == "error_rate":
        return f"{v * 100:.2g} points"
    return f"{v * 100:.1f}%"


def _direction(o: Outcome) -> str:
    up = o.change > 0
    return "above" if up else "below"


def _context(o: Outcome, *, with_p: bool = True) -> str:
    parts = []
    budget = "degradation budget" if o.check.kind == "level0" else "budget"
    parts.append(f"{budget} {o.check.describe_limit()}")
    if with_p:
        p = _fmt_p(o.p_worse if o.worse > 0 else o.p_better)
        parts.append(p + (" (t-test)" if o.test == "welch-t" else ""))
    parts.append(f"{o.n_current} rounds vs {o.n_reference}")
    if o.ref_detail:
        parts.append(o.ref_detail)
    return ", ".join(parts)


def _within_runs(o: Outcome) -> bool:
    """Is the current median still inside the range the accepted runs span?"""
    if math.isnan(o.worst_run):
        return False
    return o.current >= o.worst_run if o.check.higher_is_better else o.current <= o.worst_run


def _judge(o: Outcome, alpha: float) -> Outcome:
    name = metric_name(o.check.metric)
    cur = _fmt(o.check.metric, o.current)
    ref = _fmt(o.check.metric, o.reference)
    if not o.statistical:
        if o.worse > 0:
            bound = "below the minimum" if o.check.higher_is_better else "above the limit"
            msg = f"{name} {cur} is {bound} {ref} (absolute budget, median of {o.n_current} rounds)"
            return replace(o, status=REGRESSION, message=msg)
        return replace(o, status=PASS, message=f"{name} {cur} within the absolute limit {o.check.describe_limit()}")
    head = f"{name} {cur} is {_fmt_change(o)} {_direction(o)} {o.ref_what} {ref}"
    limit = o.check.limit
    if math.isnan(o.worse):
        return replace(o, status=INCONCLUSIVE, message=f"{name}: the {o.ref_what} median is 0, no relative change")
    if o.worse > limit and o.p_worse_adj <= alpha and not _within_runs(o):
        return replace(o, status=REGRESSION, message=f"{head} ({_context(o)})")
    if -o.worse > limit and o.p_better_adj <= alpha:
        return replace(o, status=IMPROVEMENT, message=f"{head}: improvement ({_context(o)})")
    if o.detectable > limit or o.worse > limit:
        if o.worse > limit and o.p_worse_adj <= alpha and _within_runs(o):
            why = (
                f"but not worse than every accepted run (worst run {_fmt(o.check.metric, o.worst_run)}): "
                "the accepted runs differ this much among themselves"
            )
        elif math.isinf(o.detectable) and (o.n_current < 2 or o.n_reference < 2):
            why = (
                f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
                "(a test needs at least 2 rounds on each side): add rounds (--rounds)"
            )
        elif math.isinf(o.detectable):
            why = (
                f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
                f"(the smallest possible p is {o.min_p:.2g}; alpha is shared by all comparisons of the session): "
                "accept one more baseline run (--baseline-save) or add rounds (--rounds)"
            )
        else:
            why = (
                f"too noisy to judge a {o.check.describe_limit()} budget: the smallest "
                f"{'drop' if o.check.higher_is_better else 'rise'} this cell could detect is "
                f"{_fmt_change(o, o.detectable)}"
            )
        return replace(o, status=INCONCLUSIVE, message=f"{head}, {why} ({_context(o)})")
    return replace(
        o,
        status=PASS,
        message=f"{head} (within {_context(o, with_p=False)}; could detect {_fmt_change(o, o.detectable)})",
    )


def decide(cell: Pending, *, alpha: float, comparisons: int = 1) -> Verdict:
    outcomes = tuple(_judge(o, alpha) for o in cell.outcomes)
    statuses = {o.status for o in outcomes}
    if cell.incomparable:
        statuses.add(INCOMPARABLE)
    if cell.missing_baseline:
        statuses.add(NO_BASELINE)
    if cell.no_rounds:
        statuses.add(INCONCLUSIVE)
    status = next((s for s in PRIORITY if s in statuses), PASS)
    label = cell.key.label
    if cell.no_rounds and status == INCONCLUSIVE:
        msg = f"{label}: no rounds were measured, nothing to judge"
    elif status == INCOMPARABLE and REGRESSION not in statuses:
        msg = f"{label}: incomparable with the stored baseline: " + "; ".join(cell.incomparable)
        if cell.notes:
            msg += " (" + "; ".join(cell.notes) + ")"
    elif status == NO_BASELINE:
        msg = f"{label}: no baseline for this cell" + (f" ({'; '.join(cell.notes)})" if cell.notes else "")
        msg += "; record one with --baseline-save"
    else:
        picked = [o.message for o in outcomes if o.status == status]
        if not picked:
            picked = ["no checks apply" + (f" ({'; '.join(cell.notes)})" if cell.notes else "")]
        msg = f"{label}: " + "; ".join(picked)
    return Verdict(
        cell.key,
        status,
        msg,
        outcomes,
        tuple(cell.notes),
        cell.baseline,
        alpha,
        comparisons,
    )


# ---------------------------------------------------------------- one run


_LEVEL0_LABELS = {"0ms", "nolimit", "0%"}


def level0_group(key: CellKey) -> tuple[str, str, int, str, str]:
    return (key.family, key.scenario, key.concurrency, key.path, key.workload)


class Judge:
    """Judges the cells of one run against one store lookup and one budget.

    ``remember`` level-0 cells as they come, so degradation checks of the
    faulted cells that follow can find them.
    """

    def __init__(self, budgets: Budgets, lookup: Lookup) -> None:
        self.budgets = budgets
        self.lookup = lookup
        self.level0: dict[tuple[str, str, int, str, str], tuple[str, Samples]] = {}

    def remember(self, key: CellKey, samples: Samples, *, is_level0: bool) -> None:
        if is_level0 or key.level in _LEVEL0_LABELS:
            self.level0[level0_group(key)] = (key.level, samples)

    def pending(self, key: CellKey, samples: Samples, *, alpha_cell: float) -> Pending:
        checks = self.budgets.checks_for(key)
        lk = self.lookup
        baseline = lk.file.cell(key) if lk.file is not None else None
        found = self.level0.get(level0_group(key))
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
        )
        if lk.incomparable and lk.note:
            pending.notes.insert(0, lk.note)
        if not checks:
            pending.notes.append(f"no budget rule of {self.budgets.source} matches this cell")
        return pending
