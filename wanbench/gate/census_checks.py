"""Census checks: the WAN cost census of a cell (``wanbench.census``) against
the accepted runs of the same cell, in each metric's own unit.

Round trips, bytes and work per operation are counts of the physics a fault
acts on, not speeds: separate runs on a drifting machine agree on them to a
few hundredths (docs/calibration.md), so no statistics are needed and one run
decides. A check passes when the metric grew by at most its limit over the
median of the accepted runs' values, and is a regression beyond it. A
relative limit (``10%``) also needs the change to exceed a small absolute
floor, so a link that carries a few bytes per operation (a replica link
under a read-only probe) cannot fail on a handful of heartbeat bytes.
"""

from __future__ import annotations

import fnmatch
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from wanbench.gate.budgets import Check

#: the least absolute change a relative census limit needs, by the metric's first name part
FLOOR = {"round_trips": 0.0, "bytes_per_op": 8.0, "work": 0.05}
#: ... and by its last, where it is paced by time more than by operations: the lab flushes InnoDB's
#: log once a second (innodb_flush_log_at_trx_commit=2), so at 50 operations a second fsyncs per
#: operation moved from 0.02 to 0.08 between same-code runs (2026-11-27); a release that syncs every
#: commit adds 1
FLOOR_BY_NAME = {"fsyncs": 0.25}


def check_for(name: str, checks: Sequence[Check]) -> Check | None:
    """The census check in force for metric ``name``: the last matching pattern wins."""
    found = None
    for c in checks:
        if c.kind == "census" and fnmatch.fnmatchcase(name, c.metric):
            found = c
    return found


def floor_of(name: str) -> float:
    last = name.rsplit(".", 1)[-1]
    return FLOOR_BY_NAME.get(last, FLOOR.get(name.split(".", 1)[0], 0.0))


def unsteady(check: Check, values: Sequence[float]) -> str | None:
    """Why the accepted runs' values of one census metric do not make a
    reference (they are not a count in this cell), or None when they do.

    Two values must agree within the check's limit; of three or more, at
    least two thirds must lie within it of their median, so one outlying
    accepted run is outvoted rather than followed (a first accepted run may
    judge alone: ``census_of`` keeps only values measured where they are
    counts)."""
    if len(values) < 2:
        return None
    if len(values) == 2:
        if not beyond(check, max(values), min(values)):
            return None
    else:
        med = statistics.median(values)
        near = [v for v in values if not beyond(check, v, med) and not beyond(check, med, v)]
        if 3 * len(near) >= 2 * len(values):
            return None
    return (f"{check.metric} is not steady in this cell: its {len(values)} accepted runs gave "
            f"{min(values):.3g}-{max(values):.3g}, further apart than its census budget "
            f"({check.describe_limit()}), so it is not a count here and is not gated")


def census_changes(current: Mapping[str, float], runs: Mapping[str, Sequence[float]],
                   checks: Sequence[Check], not_counts: Mapping[str, str] | None = None,
                   ) -> tuple[list[tuple[Check, float, float, int]], list[str]]:
    """``(check, current, reference, n runs)`` for every census metric of the
    cell that a check covers and the accepted runs recorded, and notes for
    those they did not record yet, those the accepted runs disagree on
    (``unsteady``) and those of this run that are not counts where they were
    measured (``not_counts``: name -> value and why; ``wanbench.census``)."""
    out: list[tuple[Check, float, float, int]] = []
    missing: list[str] = []
    notes: list[str] = []
    for name, value in sorted(current.items()):
        check = check_for(name, checks)
        if check is None:
            continue
        ref_values = [v for v in runs.get(name, ()) if math.isfinite(v)]
        if not ref_values:
            missing.append(name)
            continue
        why = unsteady(replace(check, metric=name), ref_values)
        if why:
            notes.append(f"census: {why}")
            continue
        out.append((replace(check, metric=name), value, statistics.median(ref_values), len(ref_values)))
    if missing:
        notes.insert(0, f"census: no accepted run of this cell recorded {', '.join(missing)} yet")
    notes += [f"census: {name} {why} -- not gated" for name, why in sorted((not_counts or {}).items())
              if check_for(name, checks) is not None]
    return out, notes


def change_of(check: Check, current: float, reference: float) -> float:
    """The growth of a census metric in the check's terms (relative or in its unit)."""
    if not check.relative:
        return current - reference
    if reference > 0:
        return current / reference - 1.0
    return 0.0 if current <= 0 else math.inf


def beyond(check: Check, current: float, reference: float) -> bool:
    """The census regression condition, written once."""
    grew = change_of(check, current, reference) > check.limit
    return grew and (not check.relative or current - reference > floor_of(check.metric))


# -- what the baseline store keeps of the census ------------------------------------------------------

#: how the census was counted when a run was accepted (a run without one: 1). 2: the load's teardown
#: (a COM_QUIT per connection) is always in the window; in 1 it was in or out as a race went, so
#: statements per operation of census 1 are not compared (``CENSUS_REDEFINED``)
CENSUS_VERSION = 4
#: census metrics (fnmatch patterns) whose meaning changed with each version, by the version that changed them.
#: 3: a value is stored only where it is a count (``wanbench.census``: round trips from latency where no queue
#: met the fastest operation); census 1-2 stored estimates at concurrency 500-1000 that wandered from -0.3 to 2.4.
#: 4: a window opens only once an earlier load's connections are closed (``EvidenceCollector.at_rest``); in 3
#: an unmeasured round's teardown could fall into the next window at concurrency 500-1000 (a write 1.60-1.75
#: statements instead of 1.50)
CENSUS_REDEFINED = {2: ("work.*.statements",), 3: ("round_trips",), 4: ("work.*.statements",)}


def census_only_keep(verdict: Mapping[str, Any] | None, min_runs: int) -> bool:
    """A failed cell whose accepted run still keeps its census: every check
    that failed it is a census check that fewer than ``min_runs`` accepted
    runs backed. A count the accepted code produced belongs to its baseline
    even where it disagrees with one or two earlier accepted runs: kept, the
    median of three outvotes a lone outlier (left out, that outlier would fail
    every later run of the same code, and the baseline could never recover)."""
    checks = (verdict or {}).get("checks") or []
    failed = [c for c in checks if c.get("status") == "regression"]
    if not failed or (verdict or {}).get("status") != "regression":
        return False
    return all(c.get("kind") == "census" and int(c.get("n_reference") or 0) < min_runs for c in failed)


def comparable_census(census: Mapping[str, Any], version: int) -> dict[str, Any]:
    """An accepted run's census values that mean today what they meant when
    it was recorded (a metric redefined since is left out: the gate then says
    no accepted run recorded it yet)."""
    changed = [pat for v, pats in CENSUS_REDEFINED.items() if v > version for pat in pats]
    return {k: v for k, v in census.items() if not any(fnmatch.fnmatchcase(k, pat) for pat in changed)}
