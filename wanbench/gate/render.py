"""Step 3's wording: a verdict's sentence, rendered from its numbers and
the reason codes ``wanbench.gate.verdict`` chose (never read back, and never
choosing a code: the codes decide what is advisory and what repeats)."""

from __future__ import annotations

from collections.abc import Sequence

from wanbench.gate.assess import Pending
from wanbench.gate.budgets import format_value
from wanbench.gate.integrity import Problem
from wanbench.gate.outcome import (
    BROKEN,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    R_ADVISORY,
    R_CLIENT_SATURATED,
    R_DRIFT_RUNS_MISSING,
    R_LOOKS_WORSE,
    R_NO_ROUNDS,
    R_ROUNDS_TOO_FEW,
    R_RUNS_MISSING,
    R_RUNS_NOISY,
    REGRESSION,
    Outcome,
    metric_name,
)

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
    if v > 10:  # beyond 1000 % the digits say nothing more
        return "more than 1000%"
    return f"{v * 100:.1f}%"


def _direction(o: Outcome) -> str:
    up = o.change > 0
    return "above" if up else "below"


def _sizes(o: Outcome) -> str:
    if o.unit == "run":
        runs = "run" if o.n_current == 1 else "runs"
        return f"{o.n_current} {runs} vs {o.n_reference} accepted"
    if o.unit == "pair" and o.cells:
        return f"{o.n_current} pairs in {o.cells} cell{'s' if o.cells != 1 else ''}"
    if o.unit == "pair":
        return f"{o.n_current} pair{'s' if o.n_current != 1 else ''} of candidate and baseline rounds"
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
    if o.cells:  # a level's cells pooled: their QPS differ by scenario and concurrency, so say the ratio first
        return (f"{name} of its {o.cells} cells is {_fmt_change(o)} {_direction(o)} {o.ref_what}'s "
                f"(geometric means over the cells: {cur} vs {ref})")
    return f"{name} {cur} is {_fmt_change(o)} {_direction(o)} {o.ref_what} {ref}"


def _undecided_text(o: Outcome, reason: str) -> str:
    """What an undecided check lacks and what would let it decide, in words,
    for the reason code ``wanbench.gate.verdict`` chose."""
    if reason == R_RUNS_MISSING:
        have = o.n_reference
        return (
            f"but the baseline holds {have} accepted run{'s' if have != 1 else ''} of this cell and the gate needs "
            f"{have + o.runs_missing} to know how much separate runs differ: record {o.runs_missing} more "
            f"(--baseline-save, one invocation each, or --baseline-runs {o.runs_missing})"
        )
    if reason == R_RUNS_NOISY:
        return (
            f"too noisy to judge a {o.check.describe_limit()} budget: separate runs of this cell differ so much that "
            f"the smallest {'rise' if o.check.kind == 'drop' or not o.check.higher_is_better else 'drop'} it could "
            f"detect is {_fmt_change(o, o.detectable)}: record more baseline runs, or let the gate repeat the run "
            "(--gate-max-runs)"
        )
    if o.unit == "pair" and reason == R_ROUNDS_TOO_FEW:
        return f"with {o.n_current} pair(s) no difference can reach p <= {o.alpha_each:.2g}: add pairs (--rounds)"
    if o.unit == "pair" and o.cells:
        return (f"too noisy to judge a {o.check.describe_limit()} budget: pooled, the {o.n_current} pairs of its "
                f"{o.cells} cells could detect a {'drop' if o.check.higher_is_better else 'rise'} of "
                f"{_fmt_change(o, o.detectable)}: add pairs (--rounds), or run when the machine is quieter")
    if o.unit == "pair":
        return (f"too noisy to judge a {o.check.describe_limit()} budget: with {o.n_current} pairs the smallest "
                f"{'drop' if o.check.higher_is_better else 'rise'} they could detect is "
                f"{_fmt_change(o, o.detectable)}: add pairs (--rounds), or run when the machine is quieter")
    if reason == R_ROUNDS_TOO_FEW and (o.n_current < 2 or o.n_reference < 2):
        return (
            f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
            "(a test needs at least 2 rounds on each side): add rounds (--rounds)"
        )
    if reason == R_ROUNDS_TOO_FEW:
        return (
            f"with {o.n_current} vs {o.n_reference} rounds no difference can reach p <= {o.alpha_each:.2g} "
            f"(the smallest possible p is {o.min_p:.2g}; alpha is shared by all comparisons of the session): "
            "add rounds (--rounds)"
        )
    return (
        f"too noisy to judge a {o.check.describe_limit()} budget: the smallest "
        f"{'drop' if o.check.higher_is_better else 'rise'} this cell could detect is "
        f"{_fmt_change(o, o.detectable)}"
    )


def _guard_text(o: Outcome) -> str:
    """Why the A/A guard leaves a check undecided."""
    name = metric_name(o.check.metric)
    if o.check.kind == "ab":
        return (f"but the two sides are identical (an A/A run: no difference named, or --ab-aa on), so a "
                f"{abs(o.guard_shift) * 100:.1f} % shift in {name}, more than the {o.guard_allowed * 100:.1f} % "
                "budget, is the labs' or the machine's, not a release's: check the two sides' settings, or run "
                "again when the machine is quieter")
    rule = ("its budget" if o.check.kind == "level0"
            else "the spread of the accepted runs' drops (99 % bound)")
    return (
        f"but the machine is too noisy now: with no fault, this group's level-0 cell (its rounds alternated as "
        f"this cell's are) moved {name} by {abs(o.guard_shift) * 100:.1f} %, more than the "
        f"{o.guard_allowed * 100:.1f} % {rule} allows: run the cell again when the machine is quieter, or let "
        "the gate repeat it (--gate-max-runs)"
    )


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
    if R_LOOKS_WORSE in reasons:
        # name the checks that look worse, each in its own terms, apart from the ones merely undecided
        worse = [o for o in outcomes if o.status == INCONCLUSIVE and o.looks_worse]
        rest = [o.message for o in outcomes if o.status == INCONCLUSIVE and not o.looks_worse]
        names = ", ".join(f"{metric_name(o.check.metric)} ({o.check.kind})" for o in worse)
        return (f"{label}: its counts are within budget, but {names} look{'s' if len(worse) == 1 else ''} worse "
                "than this machine's noise explains (beyond the budget before the session's correction, not "
                "after it): " + "; ".join(o.message for o in worse)
                + (" -- also undecided: " + "; ".join(rest) if rest else ""))
    if R_ADVISORY in reasons:
        advisory = [o.message for o in outcomes if o.status == INCONCLUSIVE]
        return (f"{label}: decided by the census: " + "; ".join(picked) + " -- advisory, not decided on this "
                "machine: " + "; ".join(advisory))
    return f"{label}: " + "; ".join(picked)
