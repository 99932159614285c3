"""The finding: where a workload's throughput stops growing, and why.

Per workload and path (per scenario and fault level for the fault families),
over the cells measured at increasing concurrency:

- **knee**: the first concurrency after which QPS grows less than
  ``KNEE_GAIN`` (10 %) while latency keeps rising;
- **saturated resource** at and after the knee: a CPU set (the lab's server
  or client half, or one component's own CPUs) busy at least
  ``SATURATED_PCT`` (85 %) of its cores; the component using most of it is
  named, with the tier it plays (SQL, storage/replica, proxy, load generator);
- when nothing is saturated the limit is **latency-bound concurrency**: in a
  closed loop QPS = threads / latency (Little's law), and an added RTT r caps
  it at threads / r; the sentence shows that arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

KNEE_GAIN = 0.10
SATURATED_PCT = 85.0
#: a process under a CPU quota that is throttled in this share of its CFS
#: periods is at its limit even when other load keeps it below SATURATED_PCT
THROTTLED_PCT = 50.0

#: component name (or TiDB role) -> the tier it plays, for the sentence
TIERS = {
    "primary": "the SQL tier", "tidb": "the SQL tier",
    "replica": "the replica (storage) tier", "tikv": "the storage tier (TiKV)",
    "proxy": "the proxy tier", "tiproxy": "the proxy tier",
    "toxiproxy": "the fault proxy (Toxiproxy)", "pd": "PD",
    "client": "the load generator (client)",
}


@dataclass(frozen=True)
class Point:
    """One cell as the finding sees it."""

    concurrency: int
    qps: float
    latency_ms: float  # p95 (avg when there is no p95)
    avg_ms: float
    evidence: Mapping[str, Any] = field(default_factory=dict)
    client: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Finding:
    group: str  # e.g. "oltp_read_write (proxy)" or "rtt primary_write 50ms"
    sentence: str
    knee: int | None
    bottleneck: str | None  # component name, or "latency" / None
    saturated: tuple[str, ...]  # saturated CPU sets / components
    numbers: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "sentence": self.sentence, "knee": self.knee, "bottleneck": self.bottleneck,
                "saturated": list(self.saturated), "numbers": dict(self.numbers)}


def find_knee(points: Sequence[Point]) -> int | None:
    """The concurrency after which QPS grows < KNEE_GAIN while latency rises;
    else the first from which one of the cluster's own components stays at its
    CPU limit at every higher concurrency (``saturated_from``): there QPS
    cannot grow, and what it still seems to gain is the machine's noise (seen in
    CI: a primary under a 0.1-core quota "grew" 4 -> 16 threads in 3-second
    rounds while the other self-test lane loaded the machine)."""
    pts = sorted(points, key=lambda p: p.concurrency)
    for a, b in zip(pts, pts[1:], strict=False):
        if a.qps > 0 and b.qps < a.qps * (1 + KNEE_GAIN) and b.latency_ms > a.latency_ms:
            return a.concurrency
    return saturated_from(pts)


def saturated_from(pts: Sequence[Point]) -> int | None:
    """The lowest concurrency from which, at it and every higher one (two points at least), the same
    component of the cluster is at its CPU limit."""
    limited = [{s.component for s in saturation(p) if s.kind == "component"} for p in pts]
    for i in range(len(pts) - 1):
        if set.intersection(*limited[i:]):
            return pts[i].concurrency
    return None


def _grows_less(pts: Sequence[Point], knee: int) -> bool:
    """QPS itself stopped growing after ``knee`` (the first rule of ``find_knee``)."""
    i = [p.concurrency for p in pts].index(knee)
    a, b = pts[i], pts[i + 1]
    return a.qps > 0 and b.qps < a.qps * (1 + KNEE_GAIN) and b.latency_ms > a.latency_ms


#: which saturated resource names the bottleneck first: a component at its
#: own limit, then the load generator, then a CPU set the lab fills, and
#: last CPUs that other processes keep busy
_PRIORITY = {"component": 0, "client": 1, "set": 2, "other": 3}


@dataclass(frozen=True)
class Saturated:
    resource: str
    busy_pct: float
    component: str  # the lab component (or TiDB instance) using it most, or "other"
    kind: str  # component | client | set | other
    ours_pct: float | None = None  # share of the resource the cluster's own processes used


def _limit_text(c: Mapping[str, Any]) -> str:
    if c.get("cpu_limit_cores"):
        text = f"limit {c['cpu_limit_cores']:g} cores"
        if c.get("throttled_pct") is not None:
            text += f", throttled in {c['throttled_pct']:.0f} % of periods"
        return text
    if c.get("cpus"):
        return f"CPU {','.join(str(x) for x in c['cpus'])}"
    if c.get("host_cores"):
        return f"{c['host_cores']} cores"
    return ""


def saturation(p: Point) -> list[Saturated]:
    """Saturated resources of one cell, best explanation first."""
    ev = p.evidence or {}
    comps: Mapping[str, Any] = ev.get("components", {})
    out: list[Saturated] = []
    for name, c in comps.items():
        pct = c.get("cpu_pct")
        throttled = c.get("throttled_pct")
        if name != "client" and pct is not None and (pct >= SATURATED_PCT or (throttled or 0) >= THROTTLED_PCT):
            out.append(Saturated(f"{name} CPU ({_limit_text(c)})", float(pct), name, "component"))
    if p.client.get("saturated"):
        out.append(Saturated("client CPU", float(p.client.get("share", 1.0)) * 100.0, "client", "client"))
    for name, cs in (ev.get("cpu_sets") or {}).items():
        busy, ours = cs.get("busy_pct"), cs.get("ours_pct")
        busy = ours if busy is None else busy
        members = [m for m in cs.get("members", ()) if m in comps]
        if busy is None or busy < SATURATED_PCT or not members:
            continue
        cpus = ",".join(str(c) for c in cs.get("cpus", ()))
        if ours is not None and ours >= 0.5 * busy:
            top = max(members, key=lambda m: comps[m]["cpu_cores"])
            out.append(Saturated(f"{name} CPUs {cpus}", float(busy), top, "set"))
        else:
            out.append(Saturated(f"{name} CPUs {cpus}", float(busy), "other", "other", ours))
    out.sort(key=lambda s: (_PRIORITY[s.kind], -s.busy_pct))
    return out


def _cpu_phrase(ev: Mapping[str, Any]) -> str:
    comps = ev.get("components", {})
    by_role: dict[str, list[float]] = {}
    for name, c in comps.items():
        if c.get("cpu_pct") is not None:
            by_role.setdefault(name.split("@")[0], []).append(float(c["cpu_pct"]))
    parts = []
    for role, pcts in sorted(by_role.items(), key=lambda kv: -max(kv[1])):
        if max(pcts) < 1.0:
            continue
        # a TiDB cluster has many instances per role: the busiest one speaks for them
        parts.append(f"{role} CPU {max(pcts):.0f} %" + (f" (busiest of {len(pcts)})" if len(pcts) > 1 else ""))
    for name, cs in (ev.get("cpu_sets") or {}).items():
        if cs.get("busy_pct") is not None:
            parts.append(f"{name} CPUs {','.join(str(c) for c in cs['cpus'])} busy {cs['busy_pct']:.0f} %")
    return ", ".join(parts)


def _fmt(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}"


def finding_for(group: str, points: Sequence[Point], *, added_rtt_ms: float = 0.0) -> Finding | None:
    pts = sorted((p for p in points if math.isfinite(p.qps)), key=lambda p: p.concurrency)
    if not pts:
        return None
    knee = find_knee(pts)
    at = next(p for p in pts if p.concurrency == knee) if knee is not None else pts[-1]
    after = [p for p in pts if p.concurrency >= at.concurrency]
    sat: list[Saturated] = []
    for p in after:
        sat += saturation(p)
    sat.sort(key=lambda x: (_PRIORITY[x.kind], -x.busy_pct))
    numbers: dict[str, Any] = {"points": [{"concurrency": p.concurrency, "qps": round(p.qps, 1),
                                           "latency_ms": round(p.latency_ms, 3)} for p in pts]}
    by_limit = knee is not None and knee == saturated_from(pts) and not _grows_less(pts, knee)
    where = f"QPS stops growing at {knee} threads" if knee is not None else (
        f"QPS still grows up to {pts[-1].concurrency} threads" if len(pts) > 1 else f"at {at.concurrency} threads")
    if knee is not None:
        nxt = pts[pts.index(at) + 1]
        where += (f" ({_fmt(at.qps)} -> {_fmt(nxt.qps)} QPS at {nxt.concurrency}, "
                  f"p95 {at.latency_ms:.3g} -> {nxt.latency_ms:.3g} ms"
                  + ("; a component stays at its CPU limit from here on, so what QPS still gains is noise)"
                     if by_limit else ")"))
    cpu = _cpu_phrase(at.evidence)
    own = [x for x in sat if x.kind != "other"]
    others = [x for x in sat if x.kind == "other"]
    caveat = ""
    if others:
        o = others[0]
        caveat = (f" Note: {o.resource} were {o.busy_pct:.0f} % busy while the lab used {o.ours_pct or 0:.0f} %: "
                  "other processes on this machine may have disturbed these numbers.")
        numbers["other_load"] = [x.resource for x in others]
    if own:
        top = own[0]
        numbers.update(saturated_resource=top.resource, busy_pct=top.busy_pct, component=top.component,
                       kind=top.kind)
        tier = TIERS.get(top.component.split("@")[0], top.component)
        sentence = (f"{group}: {where}; {cpu}: {top.resource} {top.busy_pct:.0f} % busy"
                    f"{'' if top.kind == 'component' else ', mostly ' + top.component}: {tier} is the bottleneck."
                    + caveat)
        return Finding(group, sentence, knee, top.component, tuple(dict.fromkeys(x.resource for x in own)),
                       numbers)
    if not at.evidence:
        sentence = f"{group}: {where}; no server-side evidence was recorded, so the saturated resource is unknown."
        return Finding(group, sentence, knee, None, (), numbers)
    # nothing saturated: Little's law
    avg = at.avg_ms if math.isfinite(at.avg_ms) and at.avg_ms > 0 else at.latency_ms
    little = at.concurrency / (avg / 1000.0) if avg > 0 else math.nan
    numbers.update(little_qps=little, avg_ms=avg)
    arith = (f"{at.concurrency} threads / {avg:.3g} ms average latency = {_fmt(little)} QPS "
             f"(measured {_fmt(at.qps)})")
    if added_rtt_ms > 0:
        cap = at.concurrency / (added_rtt_ms / 1000.0)
        numbers["rtt_cap_qps"] = cap
        arith += f"; the added RTT alone caps it at {at.concurrency} / {added_rtt_ms:g} ms = {_fmt(cap)} QPS"
    sentence = (f"{group}: {where}; nothing of the cluster is saturated ({cpu}): latency-bound concurrency, "
                f"{arith}. More concurrency, not more CPU, raises QPS here." + caveat)
    return Finding(group, sentence, knee, "latency", (), numbers)


def point_of(cell: Mapping[str, Any]) -> Point | None:
    """A results-JSON cell as a Point (None without QPS)."""
    qps = cell.get("qps")
    if qps is None:
        return None
    lat = cell.get("latency_ms") or {}
    p95 = lat.get("p95")
    avg = lat.get("avg")
    return Point(int(cell["concurrency"]), float(qps), float(p95 if p95 is not None else (avg or math.nan)),
                 float(avg if avg is not None else math.nan), (cell.get("extra") or {}).get("evidence") or {},
                 cell.get("client") or {})


def _added_rtt_ms(cell: Mapping[str, Any]) -> float:
    """The rtt family's level value is the added round-trip time in ms."""
    level = cell.get("level") or {}
    if cell.get("family") == "rtt" and level.get("kind") == "delay":
        return float(level.get("value") or 0.0)
    return 0.0


def group_name(cell: Mapping[str, Any]) -> str:
    if cell.get("family") == "sysbench":
        return f"{cell['scenario']} ({cell.get('path') or '-'})"
    level = (cell.get("level") or {}).get("label", "-")
    return f"{cell.get('family')} {cell['scenario']} {level}"


def findings(cells: Iterable[Mapping[str, Any]]) -> list[Finding]:
    """One finding per workload and path (per scenario and level for fault families)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in cells:
        groups.setdefault(group_name(c), []).append(c)
    out = []
    for name, members in groups.items():
        pts = [p for c in members if (p := point_of(c)) is not None]
        f = finding_for(name, pts, added_rtt_ms=_added_rtt_ms(members[0]))
        if f is not None:
            out.append(f)
    return out
