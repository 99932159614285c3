"""The A/B table (``--ab``): per cell, the candidate against the baseline of
the same minutes, pair by pair (``wanbench.ab``)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from wanbench import ab


def _latency(rounds: Sequence[Mapping[str, Any]], p: str) -> list[float]:
    return [float((r.get("latency_ms") or {}).get(p) or math.nan) for r in rounds]


def change(candidate: Sequence[float], baseline: Sequence[float]) -> tuple[float, float, int]:
    """The geometric mean change over the pairs (candidate / baseline - 1), the sd
    of log(ratio) between pairs (nan with one pair) and the number of pairs."""
    logs = [math.log(c / b) for c, b in ab.ratios(candidate, baseline)
            if math.isfinite(c) and math.isfinite(b)]
    if not logs:
        return math.nan, math.nan, 0
    sd = statistics.stdev(logs) if len(logs) > 1 else math.nan
    return math.expm1(statistics.fmean(logs)), sd, len(logs)


def _pct(v: float) -> str:
    return "-" if not math.isfinite(v) else f"{v * 100:+.1f}%"


def ab_rows(cells: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    """One row per A/B cell: pairs, median QPS of each side, the QPS change
    with the spread of log(QPS ratio) between pairs, the p95 and p99 changes,
    and the cell's verdict."""
    rows = []
    for c in cells:
        if not ab.is_ab(c):
            continue
        cand, base = list(c.get("rounds") or []), ab.baseline_rounds(c)
        qc = [float(r.get("qps") or 0) for r in cand]
        qb = [float(r.get("qps") or 0) for r in base]
        qps, sd, n = change(qc, qb)
        p95 = change(_latency(cand, "p95"), _latency(base, "p95"))[0]
        p99 = change(_latency(cand, "p99"), _latency(base, "p99"))[0]
        med = f"{statistics.median(qc):.0f} / {statistics.median(qb):.0f}" if qc and qb else "-"
        spread = f" ({sd:.3f})" if math.isfinite(sd) else ""
        rows.append([str(c.get("test_id")), str(n), med, _pct(qps) + spread, _pct(p95), _pct(p99),
                     str((c.get("verdict") or {}).get("status", "-"))])
    return rows


__all__ = ["ab_rows", "change"]
