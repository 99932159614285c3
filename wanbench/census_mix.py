"""Where a mixed workload's work per operation is a count: its window ran the mix.

TPC-C and YCSB mix operations of very different cost. On the lab a TPC-C
Delivery or Stock-Level costs about 418 handler calls, a New-Order 32, a
Payment 36, an Order-Status 8 (fitted over 18 cells of two runs,
2026-11-28; the fit left at most 1.6 % unexplained in every cell). Work,
statements and bytes per transaction are then a weighted mean over the
types' shares in the window, and they move with those shares: at 100
terminals of about 10 transactions each, two runs of unchanged code ran
2.3 % and 3.4 % Deliveries and read 51.4 and 59.7 handler calls per
transaction (+16 %, past a 10 % budget).

Whatever each type costs (every cost is at least 0), the window's value
differs from the value at the workload's own mix by at most the largest
relative error of a type's share: the value is a mean of the shares'
ratios to their targets, weighted by cost. So where every type's share lies
within ``MIX_TOLERANCE`` of its target, a value is at most that far from
the mix's own value, half the default 10 % budget; elsewhere it is shown,
not judged. The engines report both shares (``workload_extra``: ``mix``,
the window's, and ``mix_target``, in percent).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: a type's share of the window's operations may differ from its target by this much (relative)
MIX_TOLERANCE = 0.05


def mix_why_not(cell: Mapping[str, Any]) -> str | None:
    """None where the window ran the workload's mix (or the workload has no
    mix: every operation alike), else why work and bytes per operation are
    not counts in it."""
    extra = cell.get("workload_extra") or {}
    target, seen = extra.get("mix_target"), extra.get("mix")
    if not isinstance(target, Mapping) or not isinstance(seen, Mapping) or len(target) < 2:
        return None
    worst: tuple[float, str, float, float] | None = None
    for name, want in target.items():
        want = float(want)
        if not want > 0:
            continue
        got = float(seen.get(name, 0.0) or 0.0)
        error = got / want - 1.0 if math.isfinite(got) else math.inf
        if worst is None or abs(error) > abs(worst[0]):
            worst = (error, str(name), got, want)
    if worst is None or abs(worst[0]) <= MIX_TOLERANCE:
        return None
    error, name, got, want = worst
    return (f"the window did not run the workload's mix: {name} was {got:.1f} % of its operations against "
            f"{want:g} % ({abs(error):.0%} off; operations of other costs move work and bytes per operation "
            f"by up to as much, and a count needs every share within {MIX_TOLERANCE:.0%} of its target)")
