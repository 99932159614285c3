"""The availability numbers of a heartbeat: which writes were acknowledged
within the SLO, the recovery time (RTO: the longest stretch without an
acknowledged write around the outage), the recovery point (RPO: acknowledged
writes missing from the database afterwards), latency, and the summary line.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wanbench.families import OUTAGE, Family, Integrity, Metric, Section
from wanbench.gate.integrity import LOST_WRITES
from wanbench.heartbeat import FAILED, OK, OUTCOMES, SKIPPED, UNKNOWN, Attempt, Heartbeat

# -- the numbers -------------------------------------------------------------------------------------------------


def acknowledged(attempts: Iterable[Attempt], slo_s: float) -> list[Attempt]:
    """Attempts that count as an acknowledged write: ok, within the SLO of their planned time."""
    return [a for a in attempts if a.outcome == OK and a.latency_s <= slo_s]


def rto(attempts: Sequence[Attempt], *, slo_s: float, start: float = 0.0, end: float | None = None,
        removed_at: float | None = None) -> dict[str, Any]:
    """Longest stretch without an acknowledged write, and recovery after the fault's removal.

    The stretch runs between the answers of consecutive acknowledged writes
    (any writer), bounded by ``start`` and ``end``; with no fault it is the
    heartbeat's resolution plus the write latency's jitter.
    """
    end = end if end is not None else max((a.ended for a in attempts), default=start)
    acks = sorted(a.ended for a in acknowledged(attempts, slo_s))
    points = [start, *[t for t in acks if start <= t <= end], end]
    longest, at = 0.0, (start, start)
    for a, b in zip(points, points[1:], strict=False):
        if b - a > longest:
            longest, at = b - a, (a, b)
    out: dict[str, Any] = {"rto_s": round(longest, 4), "longest_gap": [round(at[0], 4), round(at[1], 4)]}
    if removed_at is not None:
        after = [t for t in acks if t >= removed_at]
        out["recovery_s"] = round(after[0] - removed_at, 4) if after else None
    return out


def rpo(attempts: Sequence[Attempt], present: set[tuple[int, int]], *, acked_before: float | None = None,
        source: str = "") -> dict[str, Any]:
    """Acknowledged rows missing from ``present`` (one server's rows of this run).

    Only attempts whose acknowledgement arrived before ``acked_before`` are
    expected (a read taken while writes go on cannot see later ones). Any
    ``ok`` attempt counts, whatever its latency: a slow commit is still a
    commit the application was told about.
    """
    expected = [a for a in attempts if a.outcome == OK and (acked_before is None or a.ended <= acked_before)]
    missing = sorted((a for a in expected if (a.writer, a.seq) not in present), key=lambda a: a.planned)
    unknown = [a for a in attempts if a.outcome == UNKNOWN and (acked_before is None or a.ended <= acked_before)]
    failed_present = [a for a in attempts if a.outcome in (FAILED, SKIPPED) and (a.writer, a.seq) in present]
    out: dict[str, Any] = {
        "source": source,
        "acknowledged": len(expected),
        "lost": len(missing),
        "span_s": round(missing[-1].planned - missing[0].planned, 4) if missing else 0.0,
        "first_lost_at": round(missing[0].planned, 4) if missing else None,
        "last_lost_at": round(missing[-1].planned, 4) if missing else None,
        "unknown_committed": sum(1 for a in unknown if (a.writer, a.seq) in present),
        "unknown_absent": sum(1 for a in unknown if (a.writer, a.seq) not in present),
        # a "failed" attempt whose row exists would be a classification error: reported, never hidden
        "failed_but_present": len(failed_present),
    }
    if acked_before is not None:
        out["acked_before_s"] = round(acked_before, 4)
    return out


def latency_summary(attempts: Iterable[Attempt]) -> dict[str, float | None]:
    lat = sorted(a.latency_s * 1000 for a in attempts if a.outcome == OK)
    if not lat:
        return {"p50": None, "p95": None, "p99": None, "max": None}

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(math.ceil(q * len(lat))) - 1)], 3)

    return {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99), "max": round(lat[-1], 3)}


def summarize(hb: Heartbeat, attempts: Sequence[Attempt], rpo_checks: Sequence[Mapping[str, Any]],
              *, fault_window: tuple[float, float | None] | None = None) -> dict[str, Any]:
    """The per-cell heartbeat result: configuration, counts, RTO, RPO per source, and the attempts."""
    cfg = hb.config
    counts = {o: sum(1 for a in attempts if a.outcome == o) for o in OUTCOMES}
    over = sum(1 for a in attempts if a.outcome == OK and a.latency_s > cfg.slo_s)
    end = hb.stopped_at if hb.stopped_at is not None else hb.now()
    removed = fault_window[1] if fault_window else None
    numbers = rto(attempts, slo_s=cfg.slo_s, start=0.0, end=end, removed_at=removed)
    final = [c for c in rpo_checks if not c.get("during_fault")]
    return {
        "run": hb.run_id,
        "config": cfg.to_json(),
        "duration_s": round(end, 3),
        "counts": counts,
        "over_slo": over,
        "latency_ms": latency_summary(attempts),
        **numbers,
        "fault_window": [round(fault_window[0], 4), None if fault_window[1] is None else round(fault_window[1], 4)]
        if fault_window else None,
        "marks": {k: round(v, 4) for k, v in hb.marks.items()},
        "rpo": list(rpo_checks),
        "lost_writes": sum(int(c["lost"]) for c in final),
        "at_risk_writes": max((int(c["lost"]) for c in rpo_checks if c.get("during_fault")), default=0),
        "attempts": [a.to_json() for a in attempts],
    }


def summary_line(label: str, s: Mapping[str, Any]) -> str:
    """One terminal line per cell: ``replica partition: RTO 2.03 s (recovery 0.05 s), ...``."""
    rec = s.get("recovery_s")
    c = s.get("counts", {})
    parts = [f"{label}: RTO {s['rto_s']:.2f} s"]
    if "recovery_s" in s:
        parts[0] += f" (first ack {rec:.2f} s after removal)" if rec is not None else " (no ack after removal)"
    parts.append(f"lost {s.get('lost_writes', 0)}")
    for check in s.get("rpo", []):
        when = "during fault" if check.get("during_fault") else "after"
        parts.append(f"{check['source']} {when}: {check['lost']} missing"
                     + (f" over {check['span_s']:.2f} s" if check["lost"] else ""))
    parts.append(f"{c.get(OK, 0)} ok / {c.get(FAILED, 0)} failed / {c.get(UNKNOWN, 0)} unknown"
                 + (f" / {c.get(SKIPPED)} skipped" if c.get(SKIPPED) else "")
                 + f", {s.get('over_slo', 0)} over SLO {s['config']['slo_s']:g} s")
    return "; ".join(parts)


# -- the availability family -------------------------------------------------------------------------------------


def _heartbeat(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    hb = (cell.get("extra") or {}).get("heartbeat")
    return hb if isinstance(hb, Mapping) else {}


def heartbeat_samples(cell: Mapping[str, Any]) -> dict[str, list[float]]:
    """RTO and recovery: one heartbeat per cell, one sample each."""
    hb = _heartbeat(cell)
    out: dict[str, list[float]] = {}
    for metric in ("rto_s", "recovery_s"):
        v = hb.get(metric)
        if v is not None and math.isfinite(float(v)):
            out[metric] = [float(v)]
    return out


def lost_writes(cell: Mapping[str, Any]) -> str | None:
    """Acknowledged heartbeat writes missing after recovery, named with when they were sent."""
    hb = _heartbeat(cell)
    lost = int(hb.get("lost_writes", 0) or 0)
    if not lost:
        return None
    where = "; ".join(
        f"{c['source']}: {c['lost']} rows sent between {float(c['first_lost_at']):.2f} s and "
        f"{float(c['last_lost_at']):.2f} s"
        for c in hb.get("rpo", []) or []
        if c.get("lost") and not c.get("during_fault")
    )
    label = str(cell.get("test_id") or "cell")
    return f"{label}: {lost} acknowledged heartbeat writes are missing after recovery ({where})"


def availability_summary(cells: Sequence[Mapping[str, Any]]) -> list[Section]:
    lines = tuple(summary_line(f"{c['scenario']} {(c.get('level') or {}).get('label', '-')}", _heartbeat(c))
                  for c in cells if _heartbeat(c))
    return [Section("wanbench availability: RTO, recovery and lost writes per cell", lines)] if lines else []


FAMILY = Family(
    "availability",
    "partition, pause or restart of one component under a heartbeat: RTO and RPO (tests/availability)",
    OUTAGE,
    fixtures="wanbench.fixtures.availability",
    workloads=("*",),  # with --heartbeat, a heartbeat rides beside the cells of every family
    metrics=(Metric("rto_s", False, "RTO", "s", seconds=True, allure=False),
             Metric("recovery_s", False, "recovery", "s", seconds=True, allure=False)),
    samples=heartbeat_samples,
    integrity=Integrity(LOST_WRITES, failures=lost_writes),
    load_hosts=True,  # it draws no load: nothing to skip
    summary=availability_summary,
)
