"""Readers of the machine's own counters for the evidence: a process's CPU
seconds and cgroup throttling (``/proc``, through ``wanbench.procs``), CPU
ticks per CPU, and TCP bytes per socket from ``ss`` (kept past a socket's
close by ``LinkBytes``).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from wanbench.cpulimit import read_quota
from wanbench.procs import proc_cpu_seconds


@dataclass(frozen=True)
class ProcInfo:
    """A component process: its CPU seconds so far, the CPUs it may use and
    its cgroup CPU quota (cores; None = none) with CFS throttling counters."""

    cpu_seconds: float
    cpus: tuple[int, ...]
    quota_cores: float | None = None
    periods: int = 0
    throttled: int = 0

    @property
    def capacity(self) -> float:
        """Cores this process can use at most: min(affinity, quota)."""
        n = float(max(1, len(self.cpus)))
        return min(n, self.quota_cores) if self.quota_cores else n


# -- readers ------------------------------------------------------------------------------------
def read_proc(pid: int) -> ProcInfo | None:
    cpu_seconds = proc_cpu_seconds(pid)
    try:
        cpus = tuple(sorted(os.sched_getaffinity(pid)))
    except OSError:
        return None
    if cpu_seconds is None:
        return None
    quota = read_quota(pid)
    return ProcInfo(cpu_seconds, cpus, quota.cores, quota.periods, quota.throttled)


def read_cpu_ticks(text: str | None = None) -> dict[int, tuple[int, int]]:
    """Per CPU (busy, total) ticks from /proc/stat; busy excludes idle and iowait."""
    if text is None:
        with open("/proc/stat") as fh:
            text = fh.read()
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        m = re.match(r"cpu(\d+)\s+(.*)", line)
        if not m:
            continue
        vals = [int(v) for v in m.group(2).split()]
        # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
        total = sum(vals[:8])
        out[int(m.group(1))] = (total - vals[3] - vals[4], total)
    return out


#: with a state filter ss drops the State column: Recv-Q Send-Q Local:Port Peer:Port
_SS_SOCKET = re.compile(r"^(?:[A-Z-]+\s+)?\d+\s+\d+\s+(\S+):(\d+)\s+(\S+):(\d+)")


SocketKey = tuple[str, int, str, int]  # link, local port, peer address, peer port


def parse_ss(text: str, ports: Mapping[int, str]) -> dict[SocketKey, tuple[int, int]]:
    """``bytes_received`` / ``bytes_acked`` of each ``ss -tinH`` socket whose
    local port is one of ``ports`` (listen port -> link name)."""
    out: dict[SocketKey, tuple[int, int]] = {}
    current: SocketKey | None = None
    for line in text.splitlines():
        m = _SS_SOCKET.match(line.strip()) if not line.startswith((" ", "\t")) else None
        if m:
            link = ports.get(int(m.group(2)))
            current = (link, int(m.group(2)), m.group(3), int(m.group(4))) if link else None
        if current is None:
            continue
        rx = re.search(r"\bbytes_received:(\d+)", line)
        tx = re.search(r"\bbytes_acked:(\d+)", line)
        if rx or tx:
            out[current] = (int(rx.group(1)) if rx else 0, int(tx.group(1)) if tx else 0)
            current = None
    return out


def read_sockets(ports: Mapping[int, str]) -> dict[SocketKey, tuple[int, int]]:
    if not ports:
        return {}
    try:
        # the kernel filters by port: less to print and parse on a machine with many sockets
        only = "( " + " or ".join(f"sport = :{p}" for p in sorted(ports)) + " )"
        res = subprocess.run(["ss", "-tinH", "state", "established", only], capture_output=True,  # noqa: S607
                             text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return parse_ss(res.stdout, ports) if res.returncode == 0 else {}


#: /proc/net/tcp states of a connection its server side has not closed: ESTABLISHED, CLOSE_WAIT
_NOT_CLOSED = ("01", "08")
TCP_TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def parse_proc_tcp(text: str, ports: Mapping[str, int]) -> dict[str, int]:
    """Per server (name -> its listening port), the connections to that port
    its side has not closed yet, in one ``/proc/net/tcp`` table's text."""
    by_port = {port: name for name, port in ports.items()}
    out = dict.fromkeys(ports, 0)
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or ":" not in fields[1]:
            continue
        name = by_port.get(int(fields[1].rsplit(":", 1)[1], 16))
        if name is not None and fields[3] in _NOT_CLOSED:
            out[name] += 1
    return out


def open_connections(ports: Mapping[str, int], tables: tuple[str, ...] = TCP_TABLES) -> dict[str, int]:
    """Per server, the TCP connections it has not closed yet, read from the
    kernel's socket tables: unlike asking the server (a ``PROCESSLIST``
    query does handler work, which the census counts), it costs the server
    nothing."""
    out = dict.fromkeys(ports, 0)
    for table in tables:
        try:
            with open(table, encoding="ascii") as fh:
                text = fh.read()
        except OSError:
            continue
        for name, n in parse_proc_tcp(text, ports).items():
            out[name] += n
    return out


class LinkBytes:
    """Bytes through each link since this object was made, as a counter that
    only grows: TCP counters die with their socket (sysbench closes its
    connections before its window's end is read), so each socket's last
    value seen is kept when it closes. ``poll`` once a second inside a window
    loses at most the last second of a socket that closes."""

    def __init__(self, ports: Mapping[int, str]) -> None:
        self.ports = dict(ports)
        self._open: dict[SocketKey, tuple[int, int]] = {}
        self._closed: dict[str, tuple[int, int]] = {name: (0, 0) for name in self.ports.values()}
        self._lock = threading.Lock()

    def poll(self) -> dict[str, tuple[int, int]]:
        now = read_sockets(self.ports)
        with self._lock:
            for key, last in self._open.items():
                if key not in now:
                    r, t = self._closed[key[0]]
                    self._closed[key[0]] = (r + last[0], t + last[1])
            self._open = now
            totals = dict(self._closed)
            for key, (r, t) in now.items():
                r0, t0 = totals[key[0]]
                totals[key[0]] = (r0 + r, t0 + t)
        return totals
