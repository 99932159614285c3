"""A/B checks: the candidate against the baseline side of the same run (``--ab``, ``wanbench.ab``).

An A/B cell ran its rounds alternately on the candidate's cluster and the
baseline's, in ABBA order, each under the cell's fault on its own cluster.
Two adjacent rounds share the machine's minute, so drift that moves both
cancels in their ratio: the *pair* is the unit of replication here, not the
run (stored baselines need runs because runs minutes apart differ by
14-21 % on this VM; docs/calibration.md).

* ``ab`` checks (QPS, latency percentiles): per pair ``d = log(candidate /
  baseline)``; a one-sided paired t-test of the pairs' mean ``d``, its noise
  estimated from every round of the cell's ABBA blocks (``pair_noise``:
  ``rounds - blocks - 1`` degrees of freedom), Bonferroni over the
  session's cells like every other check. A regression is a change beyond
  the budget AND significant; a pass needs the smallest change the pairs
  could detect within the budget; otherwise inconclusive, saying that
  smallest change. The change reported is the geometric mean ratio over the
  pairs, minus 1.
* ``census`` checks: the candidate's counts (round trips, bytes and work per
  operation) against the baseline side's counts of the same cell and run,
  in their own units, with the same budgets as against accepted runs
  (``wanbench.gate.census_checks``): one run decides.
* ``absolute`` checks as in any run. ``baseline``, ``drop`` and ``level0``
  checks are not judged: they compare with stored runs, or with blocks of
  one side minutes apart.
* The A/A guard (``AbSide.aa``): with identical sides any difference
  between them is the labs' or the machine's, so an ``ab`` check whose
  change is beyond its budget, either way, is left inconclusive ("machine
  too noisy now") instead of judged; its numbers are kept.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace

from wanbench import ab
from wanbench.gate import census_checks, stats
from wanbench.gate.assess import Pending, assess
from wanbench.gate.budgets import CellKey, Check
from wanbench.gate.outcome import Outcome, RunSummary
from wanbench.gate.samples import Samples

#: the check kinds an A/B cell is judged by
AB_KINDS = ("ab", "census", "absolute")
#: what an A/B check compares with (``Outcome.ref_what``)
AB_REFERENCE = "the baseline side"


def pair_logs(candidate: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """log(candidate / baseline) of each pair that both sides measured, in pair order."""
    return [math.log(c / b) for c, b in ab.ratios(candidate, baseline) if math.isfinite(c) and math.isfinite(b)]


def pair_noise(candidate: Sequence[float], baseline: Sequence[float]) -> tuple[float, int]:
    """How far one pair's log ratio strays from the cell's: its sd, and the degrees
    of freedom of that estimate, from every round of the cell's ABBA blocks.

    An ABBA block holds two pairs in a few seconds (A B B A). Its four rounds
    differ by the release (A against B) and by the machine's noise; the
    two rounds of one side inside a block differ by the noise alone. So the
    noise is estimated from the block model ``log y = block + delta * A +
    e``: its residuals have ``rounds - blocks - 1`` degrees of freedom
    against the ``pairs - 1`` of the pairs' own spread (11 against 7 with 8
    pairs), and the t quantile a check needs falls with them (4.4 against 6.1
    at p = 0.0007), for the same estimate of ``delta`` (the pairs' mean log
    ratio). A drift inside a block only widens the residuals: the estimate
    errs on the side of no alarm. With one pair there is no estimate (nan, 0)."""
    pairs = [(math.log(c), math.log(b)) for c, b in ab.ratios(candidate, baseline)
             if math.isfinite(c) and math.isfinite(b)]
    n = len(pairs)
    if n < 2:
        return math.nan, 0
    delta = statistics.fmean(a - b for a, b in pairs)
    rss = 0.0
    blocks = [pairs[i:i + 2] for i in range(0, n, 2)]
    for block in blocks:
        values = [(a - delta / 2) for a, _b in block] + [(b + delta / 2) for _a, b in block]
        mean = statistics.fmean(values)
        rss += sum((v - mean) ** 2 for v in values)
    df = 2 * n - len(blocks) - 1
    return math.sqrt(2.0 * rss / df), df


def assess_ab(check: Check, candidate: Sequence[float], baseline: Sequence[float], *,
              alpha_each: float) -> Outcome | None:
    """Raw statistics of one ``ab`` check: the paired t over the pairs' log
    ratios; None when no pair measured the metric."""
    logs = pair_logs(candidate, baseline)
    n = len(logs)
    if not n:
        return None
    pairs = list(ab.ratios(candidate, baseline))[:n]
    sd, df = pair_noise(candidate, baseline)
    return paired_outcome(check, statistics.fmean(logs), sd / math.sqrt(n) if n > 1 else math.nan, df,
                          n=n, current=stats.geometric_mean([c for c, _b in pairs]),
                          reference=stats.geometric_mean([b for _c, b in pairs]), alpha_each=alpha_each,
                          test=f"paired-t (ABBA blocks, df {df})" if n > 1 else "paired-t",
                          detail=f"pair sd {sd * 100:.1f}%" if math.isfinite(sd) else "")


def paired_outcome(check: Check, mean: float, se: float, df: float, *, n: int, current: float, reference: float,
                   alpha_each: float, test: str, detail: str, cells: int = 0) -> Outcome:
    """An ``ab`` check's outcome from a mean log ratio ``mean``, its standard
    error ``se`` and degrees of freedom ``df`` (nan/0: no estimate): the
    one-sided p either way and the smallest change the pairs could detect at
    ``alpha_each``. One cell's pairs (``assess_ab``) or a level's cells pooled
    (``wanbench.gate.ab_levels``, ``cells`` > 0)."""
    hib = check.higher_is_better
    change = math.expm1(mean)
    if not df or not math.isfinite(se):
        p_less = p_greater = 1.0
    elif se == 0:
        p_less = 0.5 if mean == 0 else (0.0 if mean < 0 else 1.0)
        p_greater = 0.5 if mean == 0 else 1.0 - p_less
    else:
        t = mean / se
        p_less, p_greater = stats.student_t_sf(-t, df), stats.student_t_sf(t, df)
    crit = stats.student_t_ppf(1.0 - alpha_each, df) * se if df and math.isfinite(se) else math.inf
    if not math.isfinite(crit):
        detectable = math.inf
    else:
        detectable = -math.expm1(-crit) if hib else math.expm1(min(crit, 700.0))
    p_worse, p_better = (p_less, p_greater) if hib else (p_greater, p_less)
    return Outcome(
        check, current, reference, n_current=n, n_reference=n, change=change, worse=-change if hib else change,
        p_worse=p_worse, p_better=p_better, p_worse_adj=p_worse, p_better_adj=p_better, detectable=detectable,
        min_p=0.0, alpha_each=alpha_each, test=test, ref_what=AB_REFERENCE, ref_detail=detail, cells=cells)


def with_aa_guard(o: Outcome) -> Outcome:
    """An ``ab`` outcome of identical sides, held against its budget: the shift
    between the sides is the guard's (``Outcome.guard_tripped``)."""
    if o.check.kind != "ab" or not math.isfinite(o.worse):
        return o
    return replace(o, guard_shift=o.worse, guard_allowed=o.check.limit)


def census_outcomes(current: Mapping[str, float], side: ab.AbSide, checks: Sequence[Check],
                    not_counts: Mapping[str, str] | None = None) -> tuple[list[Outcome], list[str]]:
    """The candidate's census counts against the baseline side's, in each metric's
    own unit (``census_checks``), and notes for what one side did not count."""
    out: list[Outcome] = []
    notes: list[str] = []
    missing: list[str] = []
    for name, value in sorted(current.items()):
        check = census_checks.check_for(name, checks)
        if check is None:
            continue
        ref = side.census.get(name)
        if ref is None or not math.isfinite(ref):
            missing.append(name if name not in side.not_counts else f"{name} ({side.not_counts[name]})")
            continue
        c = replace(check, metric=name)
        out.append(Outcome(c, value, ref, n_current=1, n_reference=1, change=census_checks.change_of(c, value, ref),
                           worse=census_checks.change_of(c, value, ref), ref_what=AB_REFERENCE))
    if missing:
        notes.append(f"census: the baseline side did not count {', '.join(missing)}")
    notes += [f"census: {name} {why} -- not gated" for name, why in sorted((not_counts or {}).items())
              if census_checks.check_for(name, checks) is not None]
    return out, notes


def assess_ab_cell(key: CellKey, current: Samples, checks: Sequence[Check], side: ab.AbSide, *,
                   alpha_cell: float, census: Mapping[str, float] | None = None,
                   not_counts: Mapping[str, str] | None = None) -> Pending:
    """Raw statistics of every check of one A/B cell: ``ab`` checks pair by
    pair against the baseline side, ``census`` against its counts,
    ``absolute`` as always (``alpha_cell`` split over the statistical ones)."""
    pending = Pending(key, [], no_rounds=not any(current.values()))
    pending.run = RunSummary({m: statistics.median(v) for m, v in current.items() if v})
    todo = [c for c in checks if c.kind in ("ab", "absolute") and current.get(c.metric)]
    tests = sum(1 for c in todo if c.kind == "ab" and side.samples.get(c.metric))
    alpha_each = alpha_cell / max(1, tests)
    for check in todo:
        if check.kind == "absolute":
            o = assess(check, current[check.metric], None, alpha_each=alpha_each)
        else:
            o = assess_ab(check, current[check.metric], side.samples.get(check.metric, []), alpha_each=alpha_each)
            o = with_aa_guard(o) if o is not None and side.aa else o
        if o is not None:
            pending.outcomes.append(o)
    census_list = [c for c in checks if c.kind == "census"]
    if census and census_list:
        outcomes, notes = census_outcomes(census, side, census_list, not_counts)
        pending.outcomes.extend(outcomes)
        pending.notes.extend(notes)
    return pending


def pair_spread(current: Samples, side: ab.AbSide) -> dict[str, tuple[float, int]]:
    """Per metric, the sd of the pairs' log ratios and its degrees of freedom:
    how far the pairs still to come may move the mean (``wanbench.gate.curtail``)."""
    out = {}
    for metric, values in current.items():
        sd, df = pair_noise(values, side.samples.get(metric, []))
        if df >= 1:
            out[metric] = (sd, df)
    return out


__all__ = ["AB_KINDS", "AB_REFERENCE", "assess_ab", "assess_ab_cell", "census_outcomes", "pair_logs", "pair_noise",
           "pair_spread", "paired_outcome", "with_aa_guard"]
