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

The pieces: ``wanbench.gate.outcome`` (the data), ``wanbench.gate.assess``
(steps 1 and 2), ``wanbench.gate.render`` (the wording); this module decides
(step 3) and holds the ``Judge``, and re-exports what callers use.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from wanbench.ab import AbSide
from wanbench.census import UNITS
from wanbench.gate import ab_levels, census_checks
from wanbench.gate.ab_checks import AB_REFERENCE, assess_ab_cell
from wanbench.gate.assess import Pending, assess, assess_cell, assess_runs, correct, correct_online, with_drift
from wanbench.gate.baseline import Lookup, RunCell, Samples, drops_of, summary_of
from wanbench.gate.budgets import Budgets, CellKey
from wanbench.gate.integrity import Problem
from wanbench.gate.outcome import (
    ADVISORY_REASONS,
    BROKEN,
    FAILED,
    FAILING,
    IMPROVEMENT,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    PASS,
    PASSED,
    PRIORITY,
    R_ABSOLUTE_EXCEEDED,
    R_ABSOLUTE_WITHIN,
    R_ADVISORY,
    R_BETTER,
    R_BEYOND,
    R_CENSUS_BEYOND,
    R_CENSUS_WITHIN,
    R_CLIENT_SATURATED,
    R_DRIFT_RUNS_MISSING,
    R_DRIFT_SPREAD,
    R_INCOMPARABLE,
    R_LOOKS_WORSE,
    R_MACHINE_NOISY,
    R_NO_BASELINE,
    R_NO_CHECKS,
    R_NO_ROUNDS,
    R_ROUNDS_NOISY,
    R_ROUNDS_TOO_FEW,
    R_RUNS_MISSING,
    R_RUNS_NOISY,
    R_WITHIN,
    R_ZERO_REFERENCE,
    REGRESSION,
    REPEATABLE,
    SKIPPED,
    UNDECIDED,
    Outcome,
    Reference,
    RunSummary,
    Verdict,
    metric_name,
)
from wanbench.gate.render import _context, _drift_text, _fmt, _fmt_change, _guard_text, _head, _render, _undecided_text

__all__ = [
    "BROKEN", "FAILED", "FAILING", "IMPROVEMENT", "INCOMPARABLE", "INCONCLUSIVE", "NO_BASELINE", "PASS", "PASSED",
    "PRIORITY", "R_CENSUS_BEYOND", "REGRESSION", "SKIPPED", "Judge", "Outcome", "Pending", "Reference", "RunSummary",
    "Verdict", "assess", "assess_cell", "assess_runs", "correct", "correct_online", "decide", "ends_as", "is_undecided",
    "looks_worse", "metric_name", "repeats", "status_ends_as", "with_drift",
]


def _drift_reason(o: Outcome, alpha: float) -> str | None:
    """A ``level0`` drop beyond the budget, significant over the run's rounds,
    is still not a regression when the accepted runs cannot show that the
    machine's drift between the level's block and level 0's does not explain
    it: the reason code, or None when it is a regression."""
    if o.check.kind != "level0":
        return None
    if o.drift_runs_missing:
        return R_DRIFT_RUNS_MISSING
    if math.isnan(o.drift_p):  # interleaved: its level 0 ran beside it, no drift between blocks to excuse
        return None
    # the session's correction, as applied to the rounds' p-value, applies to this one too
    factor = o.p_worse_adj / o.p_worse if o.p_worse > 0 else 1.0
    return R_DRIFT_SPREAD if min(1.0, o.drift_p * factor) > alpha else None


def _undecided_reason(o: Outcome) -> str:
    """Why a check could not decide, as the code that sets what may repeat or
    stay advisory (``REPEATABLE``, ``ADVISORY_REASONS``): accepted runs
    missing, runs or rounds too noisy, or too few rounds for any p-value to
    reach the check's alpha."""
    if o.runs_missing:
        return R_RUNS_MISSING
    if o.unit == "run":
        return R_RUNS_NOISY
    if math.isinf(o.detectable):
        return R_ROUNDS_TOO_FEW
    return R_ROUNDS_NOISY


def _judge_census(o: Outcome) -> Outcome:
    """One run decides: the census metric grew beyond its limit over the accepted runs' median, or not."""
    unit = UNITS.get(o.check.metric.split(".", 1)[0], "")
    change = f"{o.change * 100:+.1f}%" if o.check.relative else f"{o.change:+.3g}"
    runs = (o.ref_what if o.ref_what == AB_REFERENCE else
            f"the {o.n_reference} accepted run{'s' if o.n_reference != 1 else ''}")
    head = (f"{o.check.metric} {o.current:.3g} vs {o.reference:.3g} in {runs} ({change}; {unit}; "
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
    if o.statistical and o.guard_tripped:
        return replace(o, status=INCONCLUSIVE, reason=R_MACHINE_NOISY, message=f"{head}, {_guard_text(o)}")
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
        reason = _undecided_reason(o)
        return replace(o, status=INCONCLUSIVE, reason=reason,
                       message=f"{head}, {_undecided_text(o, reason)} ({_context(o)})")
    return replace(
        o,
        status=PASS,
        reason=R_WITHIN,
        message=f"{head} (within {_context(o, with_p=False)}; could detect {_fmt_change(o, o.detectable)})",
    )


def _status_and_reasons(cell: Pending, outcomes: Sequence[Outcome], problems: Sequence[Problem],
                        advisory: frozenset[str] = ADVISORY_REASONS) -> tuple[str, list[str]]:
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
    counted = any(o.status == REGRESSION and o.check.kind == "census" for o in outcomes)
    if status == REGRESSION and cell.saturated and not counted:
        # the load generator, not the database, was the bottleneck: its speeds say nothing. Counts per
        # operation (the census) do not depend on who was the bottleneck, so they still decide.
        status = INCONCLUSIVE
        reasons.append(R_CLIENT_SATURATED)
    census = [o for o in outcomes if o.check.kind == "census"]
    undecided = [o for o in outcomes if o.status == INCONCLUSIVE]
    if (status == INCONCLUSIVE and census and all(o.status == PASS for o in census) and not cell.no_rounds
            and all(o.reason in advisory for o in undecided)):
        if any(looks_worse(o) for o in undecided):
            # counted and within budget, but slower than the machine's noise explains (a server
            # 60 % slower at level 0 changes no count): not a pass, not sure enough to fail
            reasons.append(R_LOOKS_WORSE)
        else:
            # What the fault acts on was counted and is within budget: the cell is decided. The
            # throughput checks this machine's noise leaves undecided are kept, as advisory.
            status = PASS
            reasons.append(R_ADVISORY)
    if not outcomes and not reasons:
        reasons.append(R_NO_CHECKS)
    for o in outcomes:
        if o.reason and o.reason not in reasons and (o.status == status or R_CLIENT_SATURATED in reasons):
            reasons.append(o.reason)
    return status, reasons


def looks_worse(o: Outcome) -> bool:
    """``Outcome.looks_worse``: beyond its budget at p < ``LOOKS_WORSE_P`` before the session's correction."""
    return o.looks_worse


def decide(cell: Pending, *, alpha: float, comparisons: int = 1, problems: Sequence[Problem] = (),
           repeating: bool = False) -> Verdict:
    """``repeating``: the session repeats undecided cells (``--gate-max-runs``),
    so a check that one more run could decide is not made advisory."""
    outcomes = tuple(_judge(o, alpha) for o in cell.outcomes)
    advisory = ADVISORY_REASONS - REPEATABLE if repeating else ADVISORY_REASONS
    status, reasons = _status_and_reasons(cell, outcomes, problems, advisory)
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


def repeats(v: Verdict, *, look: int, looks: int) -> bool:
    """Whether a chain of ``looks`` runs (``--gate-max-runs``) measures this
    cell again after run ``look``: its verdict there is not its last."""
    return look < looks and is_undecided(v)


def ends_as(v: Verdict, *, strict: bool = False, repeated: bool = False) -> str:
    """How a verdict ends its test, one rule for every edge: pytest's outcome,
    Allure's test status, and whether ``compare`` exits 1 (``status_ends_as``).
    An A/B run's level verdict (``CellKey.pooled``) fails the run only by a
    regression: ``--gate-strict`` asks that every cell be decided, and a
    level's cells are judged each on its own; the level is one more chance
    to see a change no cell could, not one more cell to decide."""
    return status_ends_as(v.status, strict=strict and not v.key.pooled, repeated=repeated)


def status_ends_as(status: str, *, strict: bool = False, repeated: bool = False) -> str:
    """A regression or a broken cell fails; an undecided one is skipped, and
    fails under ``--gate-strict`` unless the chain measures it again
    (``repeated``): strict judges a cell's last verdict, not a look that a
    repeat may decide. Everything else measured: it passes."""
    if status in FAILING:
        return FAILED
    if status in UNDECIDED:
        return FAILED if strict and not repeated else SKIPPED
    return PASSED


# ---------------------------------------------------------------- one run


class Judge:
    """Judges the cells of one run against one store lookup and one budget,
    with the same rules wherever the verdict is made (pytest, ``compare``).

    ``remember`` level-0 cells as they come, so the ``level0`` and ``drop``
    checks of the faulted cells that follow can find them, and the A/A guard
    an interleaved run's level-0 cell holds (its rounds in two alternating
    halves, as a faulted cell's are, with no fault to toggle). ``earlier`` holds
    each cell's runs from earlier invocations of one gate decision
    (``--gate-max-runs``), by cell id.
    """

    def __init__(self, budgets: Budgets, lookup: Lookup,
                 earlier: Mapping[str, Sequence[RunSummary]] | None = None) -> None:
        self.budgets = budgets
        self.lookup = lookup
        self.earlier = dict(earlier or {})
        self.level0: dict[tuple[str, str, int, str, str], tuple[str, Samples]] = {}
        #: by group: how far the level-0 cell's two halves differ, by metric (``drops_of``)
        self.guards: dict[tuple[str, str, int, str, str], dict[str, float]] = {}

    def remember(self, key: CellKey, samples: Samples, *, is_level0: bool, reference: Samples | None = None) -> None:
        """``reference``: the level-0 cell's other half when it was interleaved (its A/A guard)."""
        if is_level0 or key.is_level0:
            self.level0[key.level0_group] = (key.level, samples)
            if reference:
                self.guards[key.level0_group] = drops_of(summary_of(samples), summary_of(reference))

    def pending(self, key: CellKey, samples: Samples, *, alpha_cell: float,
                client: Mapping[str, Any] | None = None, census: Mapping[str, float] | None = None,
                reference: Samples | None = None, not_counts: Mapping[str, str] | None = None,
                ab: AbSide | None = None) -> Pending:
        """``reference``: an interleaved cell's own level-0 rounds, its level 0
        (else the level-0 cell of this run that ``remember`` saw); ``not_counts``:
        census values that are not counts where measured (only said, never judged);
        ``ab``: an A/B cell's baseline side, which it is judged against
        (``wanbench.gate.ab_checks``) instead of stored runs."""
        checks = self.budgets.checks_for(key)
        if ab is not None:
            pending = assess_ab_cell(key, samples, checks, ab, alpha_cell=alpha_cell, census=census,
                                     not_counts=not_counts)
            return self._finish(pending, checks, client)
        lk = self.lookup
        baseline = lk.file.cell(key) if lk.file is not None else None
        found = None if key.is_level0 else self.level0.get(key.level0_group)
        if reference and not key.is_level0:
            found = ("0, interleaved", reference)
        note = lk.note
        if lk.file is not None and baseline is None:
            note = lk.file.missing_why(key)
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
            interleaved=bool(reference),
            guard=None if key.is_level0 else self.guards.get(key.level0_group),
            not_counts=not_counts,
        )
        if lk.incomparable and lk.note:
            pending.notes.insert(0, lk.note)
        return self._finish(pending, checks, client)

    def _finish(self, pending: Pending, checks: Sequence[Any], client: Mapping[str, Any] | None) -> Pending:
        if not checks:
            pending.notes.append(f"no budget rule of {self.budgets.source} matches this cell")
        client = client or {}
        if client.get("saturated"):
            pending.saturated = str(client.get("message") or "load generator at its CPU limit")
        return pending

    def verdict(self, key: CellKey, samples: Samples, *, cells: int, looks: int = 1, look: int = 1,
                client: Mapping[str, Any] | None = None,
                problems: Sequence[Problem] = (),
                census: Mapping[str, float] | None = None,
                reference: Samples | None = None,
                not_counts: Mapping[str, str] | None = None,
                ab: AbSide | None = None) -> tuple[Verdict, Pending]:
        """One cell's verdict as the session decides it: the session's alpha
        split over ``cells`` gated cells and ``looks`` runs of a chain
        (Bonferroni), each cell's share over its own checks; ``look``: which
        run of the chain this is. pytest calls this as each test ends;
        ``compare`` calls it for every cell of a results file, so the two
        always agree on the same data."""
        m = max(1, cells) * max(1, looks)
        alpha = self.budgets.policy.alpha
        pending = self.pending(key, samples, alpha_cell=alpha / m, client=client, census=census,
                               reference=reference, not_counts=not_counts, ab=ab)
        correct_online(pending, m)
        verdict = decide(pending, alpha=alpha, comparisons=m, problems=problems, repeating=looks > 1)
        if look > 1:
            verdict = replace(verdict, message=f"{verdict.message} [run {look} of at most {looks}]")
        return verdict, pending

    def level_verdicts(self, cells: Sequence[RunCell], *, comparisons: int) -> list[Verdict]:
        """An A/B run's level verdicts (``wanbench.gate.ab_levels``): each level of
        at least two A/B cells, its cells' QPS pairs pooled, judged with the
        session's alpha split over ``comparisons`` (its cells and its levels).
        pytest calls this at the end of the run, ``compare`` for a stored one."""
        alpha = self.budgets.policy.alpha
        m = max(1, comparisons)
        out = []
        for level, members in ab_levels.levels_of(cells):
            pending = ab_levels.level_pending(level, members, self.budgets, alpha_each=alpha / m)
            if pending is None:
                continue
            correct_online(pending, m)
            out.append(decide(pending, alpha=alpha, comparisons=m))
        return out
