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

from wanbench.gate.budgets import Check

#: the least absolute change a relative census limit needs, by the metric's first name part
FLOOR = {"round_trips": 0.0, "bytes_per_op": 8.0, "work": 0.05}


def check_for(name: str, checks: Sequence[Check]) -> Check | None:
    """The census check in force for metric ``name``: the last matching pattern wins."""
    found = None
    for c in checks:
        if c.kind == "census" and fnmatch.fnmatchcase(name, c.metric):
            found = c
    return found


def floor_of(name: str) -> float:
    return FLOOR.get(name.split(".", 1)[0], 0.0)


def census_changes(current: Mapping[str, float], runs: Mapping[str, Sequence[float]],
                   checks: Sequence[Check]) -> tuple[list[tuple[Check, float, float, int]], list[str]]:
    """``(check, current, reference, n runs)`` for every census metric of the
    cell that a check covers and the accepted runs recorded, and notes for
    those they did not record yet."""
    out: list[tuple[Check, float, float, int]] = []
    missing: list[str] = []
    for name, value in sorted(current.items()):
        check = check_for(name, checks)
        if check is None:
            continue
        ref_values = [v for v in runs.get(name, ()) if math.isfinite(v)]
        if not ref_values:
            missing.append(name)
            continue
        out.append((replace(check, metric=name), value, statistics.median(ref_values), len(ref_values)))
    notes = [f"census: no accepted run of this cell recorded {', '.join(missing)} yet"] if missing else []
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
