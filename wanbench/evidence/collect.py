"""Server-side evidence of one cell's measurement window, from the kernel and
the servers' own counters.

A ``Probe`` takes one snapshot when the load generator's measured window
opens (sysbench's warm-up checkpoint) and one when it ends, and the evidence
is the difference. Counters that only grow (CPU ticks, ``SHOW GLOBAL
STATUS`` counters) make two reads exact, and the measured processes are not
disturbed while they run. The one thing read inside the window is the TCP
byte counters of the lab's links, once a second (``ss``), because a socket's
counters vanish when the load generator closes it; ``bench/harness_overhead``
measures that this changes nothing.

Sources on the lab:
- CPU per component: ``/proc/<pid>/stat`` utime + stime (all threads), as a
  share of the CPUs the process may run on (``sched_getaffinity``);
- CPU per CPU set (the lab's server and client halves): ``/proc/stat`` busy
  ticks of those CPUs, which also counts other processes on the machine;
- QPS per tier: ``Questions`` of each MariaDB server; commits (``Com_commit``);
- replication wait: ``Rpl_semi_sync_master_tx_wait_time`` / ``_tx_waits``
  (microseconds) and ``_net_wait_time`` / ``_net_waits``;
- network bytes per link: ``ss -tin`` ``bytes_received`` / ``bytes_acked`` of
  the established sockets on the link's Toxiproxy listen port (a socket
  that closes loses up to its last second: fine for a picture, not exact
  enough for the census, which counts the servers' ``Bytes_sent`` and
  ``Bytes_received`` instead; Toxiproxy's own byte counters are no help:
  v2.12 adds a connection's bytes only when it closes).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from wanbench.errors import InfrastructureError
from wanbench.evidence.readers import LinkBytes, ProcInfo, open_connections, read_cpu_ticks, read_proc

#: SHOW GLOBAL STATUS counters kept (all only grow, so two reads give a delta)
POLL_S = 1.0
#: how long a window waits for the replica to catch up (start) and the load's connections to close (end)
SETTLE_S = 3.0
#: a number of open connections that stands still this long is not a load closing them (``_calm``)
QUIET_S = 0.5
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


class Probe(Protocol):
    """Reads a cluster's counters. ``cpu_sets`` names groups of CPUs whose
    saturation matters (the lab's server and client halves).

    ``snapshot(full=False)`` reads only what is cheap enough to read inside
    a measured window (``/proc``: well under a millisecond); the full one
    also asks the servers and the kernel's socket table (about 13 ms of CPU
    on the lab, taken before the window opens)."""

    def snapshot(self, full: bool = True) -> Snapshot: ...

    def cpu_sets(self) -> Mapping[str, tuple[int, ...]]: ...


# -- the lab -----------------------------------------------------------------------------------------
class LabProbe:
    """Snapshots of the embedded lab: its processes by PID file, its MariaDB
    servers over their UNIX sockets, its links by Toxiproxy listen port."""

    components = {"primary": "primary", "replica": "replica", "proxy": "haproxy", "toxiproxy": "toxiproxy"}

    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.links = LinkBytes({ln.listen: ln.name for ln in lab.topology.links if ln.listen})

    def cpu_sets(self) -> dict[str, tuple[int, ...]]:
        layout = self.lab.cpu_layout
        if layout.name != "split":
            return {"machine": tuple(sorted(os.sched_getaffinity(0)))}
        return {"server": tuple(layout.server), "client": tuple(layout.client)}

    def _status(self, server: str) -> dict[str, float]:
        names = ",".join(f"'{n}'" for n in STATUS_COUNTERS)
        with self.lab.admin(server) as conn:
            cur = conn.cursor()
            cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")  # noqa: S608 - constants
            rows = cur.fetchall()
        out: dict[str, float] = {}
        for name, value in rows:
            try:
                out[str(name)] = float(value)
            except (TypeError, ValueError):
                continue
        return out

    def replica_behind(self) -> bool:
        """Whether the replica has not yet applied all the primary logged
        (its GTID position behind the primary's binlog position)."""
        with self.lab.admin("primary") as conn:
            cur = conn.cursor()
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            logged = str(cur.fetchone()[0] or "")
        with self.lab.admin("replica") as conn:
            cur = conn.cursor()
            cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
            applied = str(cur.fetchone()[0] or "")
        return logged != applied

    def clients(self) -> dict[str, int]:
        """TCP connections per server that it has not closed yet: the load
        generator's (through the proxy or not) and the replication's, never
        the admin's (a UNIX socket). Read from the kernel's socket tables, not
        asked of the servers: the end of a window polls this until the load's
        connections are closed, and a ``PROCESSLIST`` query per poll did
        handler work the census counted (+0.07 to +0.22 handler calls per
        operation in a 1000-operation window, as many as the polls)."""
        return open_connections({c.name: c.ports[0] for c in self.lab.topology.components
                                 if c.name in ("primary", "replica") and c.ports})

    def snapshot(self, full: bool = True) -> Snapshot:
        procs: dict[str, ProcInfo] = {}
        for comp, service in self.components.items():
            h = self.lab.handle(service)
            info = read_proc(h.pid) if h is not None and h.alive() else None
            if info is not None:
                procs[comp] = info
        if not full:
            return Snapshot(time.monotonic(), procs, read_cpu_ticks())
        status: dict[str, dict[str, float]] = {}
        for server in ("primary", "replica"):
            try:
                status[server] = self._status(server)
            except Exception:  # noqa: BLE001,S112 - evidence is best effort; a missing server shows as absent
                continue
        return Snapshot(time.monotonic(), procs, read_cpu_ticks(), status, self.links.poll())

    def poll(self) -> None:
        self.links.poll()


# -- the window -------------------------------------------------------------------------------------
@dataclass
class _Window:
    start: Snapshot
    end: Snapshot | None = None


class EvidenceCollector:
    """Collects the measured windows of the current cell.

    The load generator calls ``prepare`` before it starts, ``begin`` when
    its measured window opens and ``end`` when it closes (once per round);
    ``take`` returns the cell's evidence and starts the next cell. Errors
    never reach the measurement: a probe that fails leaves a note instead of
    numbers.

    Sampling must not change what is measured, and a probe's round can be
    as short as 0.4 s: so the expensive counters (server status, socket
    bytes) are read in ``prepare``, before the load starts, and ``begin``
    reads only ``/proc`` (CPU seconds, CPU ticks), at the window's true
    start. Server counters then also hold the load's connection set-up (a
    few statements per thread), divided by the measured window's length.
    At the end, when the probe can count the load's connections
    (``clients``), the end snapshot waits until the servers have seen them
    close, so the teardown (a ``COM_QUIT`` per thread, which ``Questions``
    counts) is always in the window: it crosses the faulted link, and a
    snapshot that raced it counted it in some runs and not in others.
    """

    def __init__(self, probe: Probe, *, roles: Mapping[str, str] | None = None) -> None:
        self.probe = probe
        self.roles = dict(roles or {})
        self._windows: list[_Window] = []
        self._notes: list[str] = []
        self._missed: list[str] = []
        self._lock = threading.Lock()
        self.enabled = True
        # begin() and end() may come from different threads (a load's output
        # reader and its reaper): the poller is started and stopped under a lock
        self._poll_lock = threading.Lock()
        self._poller: tuple[threading.Thread, threading.Event] | None = None
        self._pending: Snapshot | None = None
        self._clients: dict[str, int] | None = None
        #: each server's connections with no load running (``at_rest``): a window opens only at or below it
        self._rest: dict[str, int] | None = None

    def _poll_loop(self, stop: threading.Event) -> None:
        poll = getattr(self.probe, "poll", None)
        # a sampling period, not a wait for a condition: once a second is
        # enough for counters that only need a socket's last value
        while poll is not None and not stop.wait(POLL_S):
            try:
                poll()
            except (OSError, InfrastructureError, ValueError) as exc:
                self._notes.append(f"poll failed: {type(exc).__name__}: {exc}")
                return

    def _start_poller(self) -> None:
        if getattr(self.probe, "poll", None) is None:
            return
        with self._poll_lock:
            if self._poller is not None and self._poller[0].is_alive():
                return
            stop = threading.Event()
            thread = threading.Thread(target=self._poll_loop, args=(stop,), name="wanbench-evidence-poll",
                                      daemon=True)
            thread.start()
            self._poller = (thread, stop)

    def _stop_poller(self) -> None:
        with self._poll_lock:
            poller, self._poller = self._poller, None
        if poller is not None:
            thread, stop = poller
            stop.set()
            thread.join(5)

    def reset(self) -> None:
        self._stop_poller()
        with self._lock:
            self._windows, self._notes, self._missed = [], [], []

    def _safe(self, fn: Callable[[], Snapshot]) -> Snapshot | None:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - evidence never stops a measurement: the window is lost, said why
            self._notes.append(f"snapshot failed: {type(exc).__name__}: {exc}")
            return None

    def at_rest(self) -> None:
        """Count each server's connections now, with no load running (the
        replication's, a user's own): before every window the servers are
        back at this count, so an earlier load's teardown is never counted."""
        self._rest = self._count_clients()

    def prepare(self) -> None:
        """Read the expensive counters now, before the load starts."""
        if self.enabled:
            self._quiesce()
            self._calm()
            self._pending = self._safe(self.probe.snapshot)
            self._clients = self._count_clients()

    def _quiesce(self) -> None:
        """Wait (at most ``SETTLE_S``) until the replica has applied what the
        primary logged: a round just before this one (an interleaved level-0
        round, a load) must not be applied, and counted, inside this window."""
        behind = getattr(self.probe, "replica_behind", None)
        if behind is None:
            return
        try:
            self._wait_until(lambda: not behind(), lambda: "the replica was still applying earlier transactions "
                             f"{SETTLE_S:g} s before this window: its counters may hold some of them")
        except Exception as exc:  # noqa: BLE001 - evidence never stops a measurement
            self._notes.append(f"replica position unknown: {type(exc).__name__}: {exc}")

    def _calm(self) -> None:
        """Wait (at most ``SETTLE_S``) until no server has more connections
        than at rest (``at_rest``), or their number has stood still for
        ``QUIET_S``. A load that nothing measured ran just before this window
        (a warm-up, an interleaved level-0 round): its process has exited,
        but the servers may still be closing its connections, each with a
        ``COM_QUIT`` that ``Questions`` counts. At concurrency 1000 on the lab
        200-500 of an earlier round's 1000 quits fell inside the next window:
        a write cost 1.60-1.75 statements instead of 1.50 in runs of unchanged
        code (2026-11-28). Connections that stand still are not closing (a
        heartbeat's writers beside the load): their count becomes the rest."""
        rest = self._rest
        if rest is None:
            return
        now: dict[str, int] | None = None
        last: dict[str, int] | None = None
        still_since = time.monotonic()

        def calm() -> bool:
            nonlocal now, last, still_since
            now = self._count_clients()
            if now is None or all(n <= rest.get(server, 0) for server, n in now.items()):
                return True
            if now != last:
                last, still_since = now, time.monotonic()
            return time.monotonic() - still_since >= QUIET_S

        self._wait_until(calm, lambda: f"the servers were still closing connections {SETTLE_S:g} s before this "
                                       f"window ({now}, at rest {rest}): an earlier load's teardown may be counted "
                                       "in it")
        if now is not None:  # lower when a connection at rest went away, higher when one stands beside the load
            self._rest = dict(now)

    def _wait_until(self, done: Callable[[], bool], late: Callable[[], str]) -> None:
        """Poll ``done`` every 20 ms for at most ``SETTLE_S``; past that, note ``late()``."""
        deadline = time.monotonic() + SETTLE_S
        while not done():
            if time.monotonic() >= deadline:
                self._notes.append(late())
                return
            time.sleep(0.02)

    def _count_clients(self) -> dict[str, int] | None:
        clients = getattr(self.probe, "clients", None)
        if clients is None:
            return None
        try:
            return dict(clients())
        except Exception as exc:  # noqa: BLE001 - evidence never stops a measurement
            self._notes.append(f"client count failed: {type(exc).__name__}: {exc}")
            return None

    def _settle(self) -> None:
        """Wait (at most ``SETTLE_S``) until no server has more of the
        workload's connections than before the load started."""
        before, self._clients = self._clients, None
        if before is None:
            return
        now: dict[str, int] | None = None

        def closed() -> bool:
            nonlocal now
            now = self._count_clients()
            return now is None or all(n <= before.get(server, 0) for server, n in now.items())

        self._wait_until(closed, lambda: f"the load's connections were still open {SETTLE_S:g} s after it ended "
                                         f"({now}, before it {before}): the window may miss their teardown")

    def begin(self) -> None:
        if not self.enabled:
            return
        pending, self._pending = self._pending, None
        if pending is None:
            snap = self._safe(self.probe.snapshot)
        else:
            cheap = self._safe(functools.partial(self.probe.snapshot, False))
            snap = None if cheap is None else dataclasses.replace(cheap, status=pending.status, links=pending.links)
        if snap is not None:
            with self._lock:
                self._windows.append(_Window(snap))
            self._start_poller()

    def missed(self, reason: str) -> None:
        """A load's window that nothing measured: ``take`` says so."""
        with self._lock:
            self._missed.append(reason)

    def end(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            open_ = [w for w in self._windows if w.end is None]
        if not open_:
            return
        self._stop_poller()
        self._settle()
        snap = self._safe(self.probe.snapshot)
        with self._lock:
            if snap is None:
                self._windows.remove(open_[-1])
            else:
                open_[-1].end = snap

    def take(self, *, client: Mapping[str, Any] | None = None, qps: float | None = None) -> dict[str, Any] | None:
        """The evidence of the windows since the last ``take`` (None: none closed, none missed)."""
        self._stop_poller()  # a window whose end never came (its run was interrupted)
        with self._lock:
            windows = [w for w in self._windows if w.end is not None]
            notes, missed = list(self._notes), list(self._missed)
            self._windows, self._notes, self._missed = [], [], []
        if not windows:
            return {"error": "; ".join(missed)} if missed else None
        ev = evidence_from_windows([(w.start, w.end) for w in windows if w.end is not None],
                                   self.probe.cpu_sets(), client=client, qps=qps)
        if notes + missed:
            ev["notes"] = notes + missed
        return ev


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
