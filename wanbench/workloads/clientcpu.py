"""Client-saturation guard: is the load generator, not the database, the limit?

sysbench runs one OS thread per connection. In a closed loop each thread
alternates between client work (Lua, the MySQL client library, building and
parsing packets) and waiting for the server. The client limits throughput
when its threads have nothing left to wait for, i.e. when they are on the CPU
nearly all the time. The process can never use more cores than it has
threads, nor more than the machine (or its CPU affinity) grants, so:

    capacity  = min(threads, usable cores)
    busy      = CPU seconds of the sysbench process / wall seconds measured
    saturated = busy >= SATURATION_SHARE * capacity          (0.85)

On this project's 2-core machines with the servers on the same host, a
normal 8..128-thread run keeps sysbench well below 1.7 cores (the servers need
the rest); a run that reaches it has starved the database of CPU and its QPS
says more about the client than about the database. A lower "busy share"
above ``SHARED_MACHINE_SHARE`` (0.5) of the machine is reported as a note,
not a flag: the client then competes with local servers for CPU.

A shared machine (other jobs, or the servers themselves) may not give the
client the CPU it wants; then its CPU use stays low although the client is
still the limit. The second signal covers that: from
``/proc/<pid>/task/*/schedstat`` (time on a CPU + time waiting for one) the
share of time the ``threads`` busiest threads were *runnable* rather than
blocked waiting for the database:

    saturated = ... or runnable >= SATURATION_SHARE

A database-bound closed loop keeps its threads blocked on the network most
of the time; a client-bound one keeps them runnable.

The CPU figure comes from the kernel: ``/proc/<pid>/stat`` (utime + stime of
all threads) at the start of the measured window and the child's rusage from
``wait4`` at its end, so nothing samples inside the measured process.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wanbench.procs import thread_runnable_seconds

SATURATION_SHARE = 0.85
SHARED_MACHINE_SHARE = 0.5


def usable_cores(cpus: Collection[int] = ()) -> int:
    """Cores the load generator may run on: ``cpus`` when it is confined to
    them, else this process's affinity (not the machine total)."""
    if cpus:
        return len(set(cpus))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


class RunnableSampler:
    """Runnable time per thread between the first and the latest sample."""

    def __init__(self, pid: int, threads: int) -> None:
        self.pid = pid
        self.threads = threads
        self._first: dict[int, tuple[float, float]] = {}
        self._last: dict[int, tuple[float, float]] = {}

    def sample(self, now: float) -> None:
        for tid, runnable in thread_runnable_seconds(self.pid).items():
            self._first.setdefault(tid, (now, runnable))
            self._last[tid] = (now, runnable)

    def fraction(self) -> float | None:
        """Mean runnable share of the ``threads`` busiest threads (None when
        fewer than two samples cover them)."""
        shares = []
        for tid, (t1, r1) in self._last.items():
            t0, r0 = self._first[tid]
            if t1 - t0 > 0:
                shares.append(min(1.0, (r1 - r0) / (t1 - t0)))
        if not shares:
            return None
        shares.sort(reverse=True)
        top = shares[: max(1, self.threads)]
        return sum(top) / len(top)


@dataclass(frozen=True)
class ClientLoad:
    """CPU used by the load generator over one measured window."""

    cpu_seconds: float
    wall_seconds: float
    threads: int
    cores: int
    runnable: float | None = None  # share of time worker threads were runnable

    @property
    def busy_cores(self) -> float:
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0

    @property
    def capacity(self) -> int:
        return max(1, min(self.threads, self.cores))

    @property
    def share(self) -> float:
        """Busy cores as a share of what the client could possibly use."""
        return self.busy_cores / self.capacity

    @property
    def cpu_bound(self) -> bool:
        return self.share >= SATURATION_SHARE

    @property
    def starved(self) -> bool:
        return self.runnable is not None and self.runnable >= SATURATION_SHARE

    @property
    def saturated(self) -> bool:
        return self.cpu_bound or self.starved

    def to_json(self) -> dict[str, Any]:
        return {
            "cpu_seconds": round(self.cpu_seconds, 3),
            "wall_seconds": round(self.wall_seconds, 3),
            "busy_cores": round(self.busy_cores, 3),
            "threads": self.threads,
            "cores": self.cores,
            "share": round(self.share, 3),
            "runnable": None if self.runnable is None else round(self.runnable, 3),
            "saturated": self.saturated,
        }


def assess(loads: Iterable[ClientLoad]) -> dict[str, Any]:
    """Summary for ``WorkloadResult.client``: the busiest round decides.

    Keys: ``saturated`` (bool), ``message`` (str, empty when all is well),
    ``busy_cores`` / ``share`` of the busiest round, ``rule``, ``rounds``.
    """
    loads = list(loads)
    out: dict[str, Any] = {
        "saturated": False,
        "message": "",
        "rule": (f"saturated when client CPU >= {SATURATION_SHARE:.0%} of min(threads, usable cores) or its "
                 f"threads are runnable (not waiting for the database) >= {SATURATION_SHARE:.0%} of the time"),
        "rounds": [load.to_json() for load in loads],
    }
    if not loads:
        out["message"] = "client CPU was not measured"
        return out
    worst = max(loads, key=lambda load: load.share)
    starved = max(loads, key=lambda load: load.runnable or 0.0)
    out.update(busy_cores=round(worst.busy_cores, 3), share=round(worst.share, 3),
               cores=worst.cores, threads=worst.threads,
               runnable=None if starved.runnable is None else round(starved.runnable, 3))
    if worst.cpu_bound:
        out["saturated"] = True
        out["message"] = (
            f"client-bound: sysbench used {worst.busy_cores:.2f} of the {worst.capacity} core(s) its "
            f"{worst.threads} threads can use ({worst.share:.0%} >= {SATURATION_SHARE:.0%}); the load "
            "generator, not the database, likely limits QPS here: run the client on another machine, "
            "give it more cores, or lower --threads before calling this a database regression"
        )
    elif starved.starved:
        out["saturated"] = True
        out["message"] = (
            f"client-bound: sysbench's {starved.threads} threads were runnable {starved.runnable:.0%} of the time "
            f"(on a CPU or queued for one) instead of waiting for the database (>= {SATURATION_SHARE:.0%}), "
            f"while using {starved.busy_cores:.2f} of {starved.cores} cores: the client side (its CPU, or CPU "
            "shared with other processes) likely limits QPS; run the client on another machine or lower --threads"
        )
    elif worst.busy_cores >= SHARED_MACHINE_SHARE * worst.cores:
        out["message"] = (
            f"note: sysbench used {worst.busy_cores:.2f} of {worst.cores} cores; on a machine shared "
            "with the servers the client competes with them for CPU"
        )
    return out


def merge_client(parts: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Combine the ``client`` summaries of several rounds."""
    loads = [
        ClientLoad(r["cpu_seconds"], r["wall_seconds"], int(r["threads"]), int(r["cores"]), r.get("runnable"))
        for p in parts
        for r in p.get("rounds", ())
    ]
    return assess(loads)
