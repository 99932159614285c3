"""CPU quotas (cgroup CFS bandwidth): read the limit a process runs under,
and put a lab process under one.

A TiDB server in Kubernetes, or a lab server given ``--lab-cpu-limit``, may
use fewer cores than its CPU affinity allows: "saturated" means busy near
min(affinity, quota), and a throttled share of CFS periods proves it.
Both cgroup v1 (``cpu`` controller, ``cpu.cfs_quota_us``) and v2
(``cpu.max``) are read; limits are set with whichever this machine mounts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from wanbench.errors import InfrastructureError

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


@dataclass(frozen=True)
class Quota:
    """A process's CPU bandwidth limit and throttling counters so far."""

    cores: float | None  # None: no quota
    periods: int = 0
    throttled: int = 0


def _cgroup_dir(pid: int) -> tuple[Path, str] | None:
    """The directory of ``pid``'s cpu cgroup and its version ("v1"/"v2")."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2: str | None = None
    for line in lines:
        _id, controllers, path = line.split(":", 2)
        if controllers == "":
            v2 = path
        elif "cpu" in controllers.split(","):
            for d in V1_DIRS:
                if (CGROUP_ROOT / d).is_dir():
                    return CGROUP_ROOT / d / path.lstrip("/"), "v1"
    if v2 is not None and (CGROUP_ROOT / "cgroup.controllers").is_file():
        return CGROUP_ROOT / v2.lstrip("/"), "v2"
    return None


def _stat(d: Path) -> tuple[int, int]:
    try:
        fields = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines() if " " in line)
        return int(fields.get("nr_periods", 0)), int(fields.get("nr_throttled", 0))
    except (OSError, ValueError):
        return 0, 0


def read_quota(pid: int) -> Quota:
    found = _cgroup_dir(pid)
    if found is None:
        return Quota(None)
    d, version = found
    try:
        if version == "v1":
            quota = int((d / "cpu.cfs_quota_us").read_text())
            period = int((d / "cpu.cfs_period_us").read_text())
            cores = quota / period if quota > 0 and period > 0 else None
        else:
            q, p = (d / "cpu.max").read_text().split()
            cores = int(q) / int(p) if q != "max" else None
    except (OSError, ValueError):
        return Quota(None)
    periods, throttled = _stat(d)
    return Quota(cores, periods, throttled)


def _controller_root() -> tuple[Path, str]:
    for d in V1_DIRS:
        if (CGROUP_ROOT / d / "cpu.cfs_quota_us").is_file():
            return CGROUP_ROOT / d, "v1"
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.is_file() and "cpu" in controllers.read_text().split():
        return CGROUP_ROOT, "v2"
    raise InfrastructureError("no cgroup cpu controller is mounted: CPU limits need cgroup v1 'cpu' or v2 'cpu'")


def cgroup_path(name: str) -> Path:
    """Where ``limit(name, ...)`` puts its cgroup (under the CPU controller's root when there is one)."""
    try:
        root = _controller_root()[0]
    except InfrastructureError:
        root = CGROUP_ROOT
    return root / name


def limit(name: str, pid: int, cores: float, *, period_us: int = 100_000) -> Path:
    """Put process ``pid`` (all its threads) into cgroup ``name`` limited to
    ``cores`` CPUs; returns the cgroup directory (``release`` undoes it)."""
    if cores <= 0:
        raise InfrastructureError(f"CPU limit must be positive, got {cores}")
    root, version = _controller_root()
    d = root / name
    d.mkdir(exist_ok=True)
    quota = max(1000, round(cores * period_us))
    try:
        if version == "v1":
            (d / "cpu.cfs_period_us").write_text(str(period_us))
            (d / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (d / "cpu.max").write_text(f"{quota} {period_us}")
        (d / "cgroup.procs").write_text(str(pid))
    except OSError as exc:
        release(d)
        raise InfrastructureError(f"cannot limit pid {pid} to {cores} CPUs in {d}: {exc}") from None
    return d


def release(d: Path) -> bool:
    """Move every process of cgroup ``d`` back to its parent and remove it."""
    if not d.is_dir():
        return False
    try:
        pids = (d / "cgroup.procs").read_text().split()
    except OSError:
        pids = []
    for pid in pids:
        try:
            (d.parent / "cgroup.procs").write_text(pid)
        except OSError:
            continue  # already gone
    try:
        os.rmdir(d)
    except OSError:
        return False
    return True
