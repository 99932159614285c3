"""What a cell's windows say: the difference of two snapshots per window
(``Snapshot``, read by ``wanbench.evidence.collect``) turned into the cell's
evidence (``evidence_from_windows``). Counters that only grow make two reads
exact: CPU seconds and ticks, ``SHOW GLOBAL STATUS`` counters, link bytes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.evidence.readers import ProcInfo

#: SHOW GLOBAL STATUS counters kept (all only grow, so two reads give a delta)
STATUS_COUNTERS = (
    "Questions", "Com_commit", "Com_select", "Com_insert", "Com_update", "Com_delete",
    "Bytes_sent", "Bytes_received",
    "Rpl_semi_sync_master_tx_wait_time", "Rpl_semi_sync_master_tx_waits",
    "Rpl_semi_sync_master_net_wait_time", "Rpl_semi_sync_master_net_waits",
    "Rpl_semi_sync_master_yes_tx", "Rpl_semi_sync_master_no_tx",
    # work counters (wanbench.census: per operation, gated in their own units)
    "Innodb_rows_read", "Innodb_rows_inserted", "Innodb_rows_updated", "Innodb_rows_deleted",
    "Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next", "Handler_read_prev",
    "Handler_read_rnd", "Handler_read_rnd_next", "Handler_write", "Handler_update", "Handler_delete",
    "Innodb_data_fsyncs", "Innodb_os_log_fsyncs",
)
#: the counters of ``STATUS_COUNTERS`` the evidence reports as rates (``counters_per_s``) for the census
WORK_COUNTERS = STATUS_COUNTERS[STATUS_COUNTERS.index("Innodb_rows_read"):] + (
    "Questions", "Com_commit", "Rpl_semi_sync_master_yes_tx", "Bytes_sent", "Bytes_received")


@dataclass(frozen=True)
class Snapshot:
    """Everything a probe read at one instant (``t``: time.monotonic())."""

    t: float
    procs: Mapping[str, ProcInfo] = field(default_factory=dict)
    cpu_ticks: Mapping[int, tuple[int, int]] = field(default_factory=dict)  # cpu -> (busy, total)
    status: Mapping[str, Mapping[str, float]] = field(default_factory=dict)  # server -> counter -> value
    links: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # link -> (bytes in, bytes out)


def _delta(pairs: Sequence[tuple[Snapshot, Snapshot]], get: Callable[[Snapshot], float | None]) -> float | None:
    total = 0.0
    for a, b in pairs:
        va, vb = get(a), get(b)
        if va is None or vb is None:
            return None
        total += max(0.0, vb - va)
    return total


def _proc_cpu(name: str, s: Snapshot) -> float:
    return s.procs[name].cpu_seconds


def _proc_attr(name: str, attr: str, s: Snapshot) -> float:
    return float(getattr(s.procs[name], attr))


def _ticks(cpus: tuple[int, ...], which: int, s: Snapshot) -> float | None:
    if not all(c in s.cpu_ticks for c in cpus):
        return None
    return float(sum(s.cpu_ticks[c][which] for c in cpus))


def _link(name: str, which: int, s: Snapshot) -> float:
    return float(s.links[name][which])


def _status(server: str, name: str, s: Snapshot) -> float | None:
    return s.status[server].get(name)


def evidence_from_windows(pairs: Sequence[tuple[Snapshot, Snapshot]], cpu_sets: Mapping[str, Sequence[int]], *,
                          client: Mapping[str, Any] | None = None, qps: float | None = None) -> dict[str, Any]:
    """Turn (start, end) snapshot pairs (one per round) into the cell's evidence.

    Shape (all rates per second over the summed window):
    ``window_s``; ``components``: name -> {cpu_cores, cpus, cpu_pct (of the
    CPUs it may use)}; ``cpu_sets``: name -> {cpus, busy_pct (all processes),
    ours_pct (lab components), members}; ``qps``: tier -> QPS; ``commits``;
    ``latency_ms``: replication waits; ``links``: name -> {in_bps, out_bps}.
    """
    wall = sum(b.t - a.t for a, b in pairs)
    ev: dict[str, Any] = {"window_s": round(wall, 3), "windows": len(pairs), "source": "proc+status"}
    if wall <= 0:
        return ev
    comps: dict[str, Any] = {}
    names = sorted(set.intersection(*(set(a.procs) & set(b.procs) for a, b in pairs)))
    for name in names:
        sec = _delta(pairs, functools.partial(_proc_cpu, name))
        last = pairs[-1][1].procs[name]
        cores = sec / wall if sec is not None else 0.0
        comps[name] = {"cpu_cores": round(cores, 3), "cpus": list(last.cpus),
                       "cpu_pct": round(100.0 * cores / last.capacity, 1)}
        if last.quota_cores:
            periods = _delta(pairs, functools.partial(_proc_attr, name, "periods"))
            throttled = _delta(pairs, functools.partial(_proc_attr, name, "throttled"))
            comps[name]["cpu_limit_cores"] = last.quota_cores
            if periods:
                comps[name]["throttled_pct"] = round(100.0 * (throttled or 0.0) / periods, 1)
    if client and client.get("busy_cores") is not None:
        ccpus = int(client.get("cores") or 1)
        comps["client"] = {"cpu_cores": round(float(client["busy_cores"]), 3), "cpus": [],
                           "cpu_pct": round(100.0 * float(client["busy_cores"]) / max(1, ccpus), 1),
                           "cores": ccpus}
    ev["components"] = comps

    sets: dict[str, Any] = {}
    for set_name, set_cpus in cpu_sets.items():
        busy = _delta(pairs, functools.partial(_ticks, tuple(set_cpus), 0))
        total = _delta(pairs, functools.partial(_ticks, tuple(set_cpus), 1))
        members = [n for n, c in comps.items() if c["cpus"] and set(c["cpus"]) <= set(set_cpus)]
        if set_name == "client" or set_name == "machine":
            members += ["client"] if "client" in comps else []
        ours = sum(comps[n]["cpu_cores"] for n in members)
        sets[set_name] = {
            "cpus": list(set_cpus),
            "busy_pct": round(100.0 * busy / total, 1) if busy is not None and total else None,
            "ours_pct": round(100.0 * ours / max(1, len(set_cpus)), 1),
            "members": members,
        }
    ev["cpu_sets"] = sets

    tiers: dict[str, float] = {}
    commits: dict[str, float] = {}
    lat: dict[str, float] = {}
    servers = set.intersection(*(set(a.status) & set(b.status) for a, b in pairs)) if pairs else set()
    for server in sorted(servers):
        def counter(name: str, server: str = server) -> float | None:
            return _delta(pairs, functools.partial(_status, server, name))

        q = counter("Questions")
        if q is not None:
            tiers[server] = round(q / wall, 1)
        c = counter("Com_commit")
        if c is not None:
            commits[server] = round(c / wall, 1)
        for what in ("tx", "net"):
            t_us, n = counter(f"Rpl_semi_sync_master_{what}_wait_time"), counter(f"Rpl_semi_sync_master_{what}_waits")
            if t_us and n:  # MariaDB keeps the net wait counters at 0: skip them then
                lat[f"{server}.semi_sync_{what}_wait"] = round(t_us / n / 1000.0, 3)
    if qps is not None:
        tiers["client"] = round(qps, 1)
    ev["qps"] = tiers
    if commits:
        ev["commits_per_s"] = commits
    ev["latency_ms"] = lat
    rates: dict[str, dict[str, float]] = {}
    totals: dict[str, dict[str, float]] = {}
    for server in sorted(servers):
        for name in WORK_COUNTERS:
            v = _delta(pairs, functools.partial(_status, server, name))
            if v is not None:
                rates.setdefault(server, {})[name] = round(v / wall, 3)
                totals.setdefault(server, {})[name] = v
    if rates:
        ev["counters_per_s"] = rates
        # the census divides these by the operations of the same rounds: the server
        # counters are read before the load starts (``prepare``), the window opens when
        # its first line is out, so a rate over the window is inflated when that line
        # comes late (a busy machine), a total never is
        ev["counters"] = totals
    links: dict[str, Any] = {}
    names_l = sorted(set.intersection(*(set(a.links) & set(b.links) for a, b in pairs)))
    for name in names_l:
        rx = _delta(pairs, functools.partial(_link, name, 0))
        tx = _delta(pairs, functools.partial(_link, name, 1))
        links[name] = {"in_bytes_per_s": round((rx or 0.0) / wall), "out_bytes_per_s": round((tx or 0.0) / wall)}
    ev["links"] = links
    return ev
