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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from wanbench.errors import InfrastructureError
from wanbench.evidence.deltas import STATUS_COUNTERS, Snapshot, evidence_from_windows
from wanbench.evidence.readers import LinkBytes, ProcInfo, open_connections, read_cpu_ticks, read_proc

#: how often a window reads the links' byte counters (a closing socket loses at most this much)
POLL_S = 1.0
#: how long a window waits for the replica to catch up (start) and the load's connections to close (end)
SETTLE_S = 3.0
#: a number of open connections that stands still this long is not a load closing them (``_calm``)
QUIET_S = 0.5


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
        now = self._wait_for_clients(rest, lambda now: f"the servers were still closing connections {SETTLE_S:g} s "
                                     f"before this window ({now}, at rest {rest}): an earlier load's teardown may "
                                     "be counted in it", quiet=True)
        if now is not None:  # lower when a connection at rest went away, higher when one stands beside the load
            self._rest = dict(now)

    def _wait_for_clients(self, limit: Mapping[str, int], late: Callable[[dict[str, int] | None], str], *,
                          quiet: bool = False) -> dict[str, int] | None:
        """Poll the servers' connections (at most ``SETTLE_S``) until none has
        more than ``limit``, or with ``quiet`` until their number has stood
        still for ``QUIET_S``; past that, note ``late(last count)``. The last
        count (None: the probe cannot count them)."""
        now: dict[str, int] | None = None
        last: dict[str, int] | None = None
        still_since = time.monotonic()

        def done() -> bool:
            nonlocal now, last, still_since
            now = self._count_clients()
            if now is None or all(n <= limit.get(server, 0) for server, n in now.items()):
                return True
            if now != last:
                last, still_since = now, time.monotonic()
            return quiet and time.monotonic() - still_since >= QUIET_S

        self._wait_until(done, lambda: late(now))
        return now

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
        self._wait_for_clients(before, lambda now: f"the load's connections were still open {SETTLE_S:g} s after "
                               f"it ended ({now}, before it {before}): the window may miss their teardown")

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
