"""The lab's shape, known before any server runs: where its run directory
is, its ports (offsets from the port base), its links through Toxiproxy
and the ``Topology`` they make, and how its processes are spread over
the machine's CPUs (``CpuLayout``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.faults.toxiproxy import TOXIC_PREFIX
from wanbench.topology import Component, Link, Topology

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # wanbench/profiles/lab/servers.py -> the checkout
#: a source checkout keeps the lab's run directory and tools (bin/) in itself;
#: an installed wheel has no such place (PROJECT_ROOT is site-packages there)
IN_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file()
DEFAULT_PORT_BASE = 23300
SQL_USER = "wanbench"
HANDICAP_TOXIC = f"{TOXIC_PREFIX}handicap"

# Offsets from the port base.
P_TOXIPROXY, P_CLIENT_PROXY, P_HAPROXY, P_PROXY_PRIMARY, P_REPLICA_PRIMARY, P_CLIENT_PRIMARY = range(6)
P_PRIMARY, P_REPLICA = 6, 7
SERVICES = ("toxiproxy", "primary", "replica", "haproxy")
#: lab component -> the service (process) that is that component
COMPONENT_SERVICE = {"proxy": "haproxy", "primary": "primary", "replica": "replica"}
#: how long a commit waits for the replica's acknowledgement before the primary
#: falls back to asynchronous replication (MariaDB's rpl_semi_sync_master_timeout)
DEFAULT_SEMISYNC_TIMEOUT_MS = 30000


#: the longest path a UNIX socket can have on Linux (sun_path holds 108 bytes, its NUL included)
MAX_SOCKET_PATH = 107


def socket_path(path: Path) -> Path:
    """``path`` when a UNIX socket fits there; else a short stand-in in the temporary directory,
    named after ``path`` (the same one every time), which the lab removes when it goes down. A
    run directory deep in a CI checkout or pytest's tmp_path is longer than a socket may be."""
    if len(os.fsencode(str(path))) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(str(path))).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"wanbench-{digest}.sock"


def lab_cgroup(port_base: int, service: str) -> str:
    """The name of the cgroup that holds a lab server's CPU quota (``running.set_cpu_limit``)."""
    return f"wanbench-lab-{port_base}-{service}"


def default_run_dir(base: str | os.PathLike[str] | None = None) -> Path:
    """Where the lab lives when no directory is given: ``$WANBENCH_LAB_DIR``,
    else ``.run/lab`` in the checkout, else (installed package) ``.run/lab``
    under ``base`` (pytest's rootdir) or the current directory."""
    env = os.environ.get("WANBENCH_LAB_DIR")
    if env:
        return Path(env)
    root = PROJECT_ROOT if IN_CHECKOUT else Path(base) if base else Path.cwd()
    return root / ".run" / "lab"


def lab_links(base: int) -> tuple[Link, ...]:
    return (
        Link("client_proxy", "client", "proxy", base + P_CLIENT_PROXY),
        Link("proxy_primary", "proxy", "primary", base + P_PROXY_PRIMARY),
        Link("replica_primary", "replica", "primary", base + P_REPLICA_PRIMARY),
        Link("client_primary", "client", "primary", base + P_CLIENT_PRIMARY),
    )


def lab_topology(base: int, version: str = "") -> Topology:
    host = "127.0.0.1"
    return Topology(
        profile="lab",
        name="wanbench-lab",
        version=version,
        components=(
            Component("client", "client", host, ()),
            Component("proxy", "proxy", host, (base + P_HAPROXY,)),
            Component("primary", "primary", host, (base + P_PRIMARY,)),
            Component("replica", "replica", host, (base + P_REPLICA,)),
        ),
        links=lab_links(base),
    )


# The TiDB flavour (``wanbench.profiles.lab.tidb``): one tidb-server in the SQL tier, on the
# primary's port, its status port (``/metrics``) where the replica's would be; no replica link.
P_TIDB, P_TIDB_STATUS = P_PRIMARY, P_REPLICA
TIDB_SERVICES = ("toxiproxy", "tidb", "haproxy")
TIDB_COMPONENT_SERVICE = {"proxy": "haproxy", "tidb": "tidb"}
FLAVOURS = ("mariadb", "tidb")


def tidb_lab_links(base: int) -> tuple[Link, ...]:
    return (
        Link("client_proxy", "client", "proxy", base + P_CLIENT_PROXY),
        Link("proxy_tidb", "proxy", "tidb", base + P_PROXY_PRIMARY),
        Link("client_tidb", "client", "tidb", base + P_CLIENT_PRIMARY),
    )


def tidb_lab_topology(base: int, version: str = "") -> Topology:
    """The TiDB lab: client -> HAProxy -> tidb-server, and client -> tidb-server, each link through
    Toxiproxy. Its storage is in-process (unistore): no PD, no TiKV, nothing behind TiDB to fault."""
    host = "127.0.0.1"
    return Topology(
        profile="tidb-lab",
        name="wanbench-tidb-lab",
        version=version,
        components=(
            Component("client", "client", host, ()),
            Component("proxy", "proxy", host, (base + P_HAPROXY,)),
            Component("tidb", "tidb", host, (base + P_TIDB, base + P_TIDB_STATUS)),
        ),
        links=tidb_lab_links(base),
    )


def haproxy_config(base: int) -> str:
    """HAProxy in TCP mode: the proxy tier's port forwards to the link towards the SQL tier."""
    return ("global\n    maxconn 8000\n\n"
            "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n\n"
            f"frontend sql\n    bind 127.0.0.1:{base + P_HAPROXY}\n    default_backend sql\n\n"
            f"backend sql\n    server sql 127.0.0.1:{base + P_PROXY_PRIMARY} maxconn 4000\n")


CPU_LAYOUTS = ("split", "shared")
#: Separate invocations on a fresh lab each, write probe at level 0 (2026-11-23 and the
#: measurements in issue 18): invocation medians spread 5-15 % with ``shared`` and 22-34 %
#: with ``split``, whose commits cross the two CPU sets several times each. The gate's
#: unit is the run, so the steadier run wins; docs/calibration.md has the numbers.
DEFAULT_CPU_LAYOUT = "shared"


def check_layout_name(name: str) -> str:
    if name not in CPU_LAYOUTS:
        raise InfrastructureError(f"unknown lab CPU layout {name!r} (known: {', '.join(CPU_LAYOUTS)})")
    return name


@dataclass(frozen=True)
class CpuLayout:
    """Which CPUs the lab's processes may run on.

    ``split`` keeps the SQL servers on the upper half of the CPUs and the
    load generator and the fault points (Toxiproxy, HAProxy) on the lower
    half: read rounds inside one lab wander less from one minute to the
    next, but every commit crosses the two CPU sets several times and write
    throughput swings between separate runs. ``shared`` (the default) leaves
    placement to the scheduler. ``bench/lab_noise`` measures both, inside one
    lab and (``--invocations``) between separate runs.
    """

    name: str
    server: tuple[int, ...] = ()  # () = wherever the scheduler likes
    client: tuple[int, ...] = ()

    @classmethod
    def plan(cls, name: str, available: Collection[int]) -> CpuLayout:
        cpus = sorted(available)
        if check_layout_name(name) == "shared" or len(cpus) < 2:
            return cls("shared")
        half = len(cpus) // 2
        return cls("split", tuple(cpus[half:]), tuple(cpus[:half]))

    def to_json(self) -> dict[str, Any]:
        return {"layout": self.name, "server": list(self.server), "client": list(self.client)}

    @classmethod
    def from_json(cls, data: Any) -> CpuLayout:
        if not isinstance(data, dict):
            return cls("shared")
        return cls(str(data.get("layout", "shared")), tuple(int(c) for c in data.get("server", ())),
                   tuple(int(c) for c in data.get("client", ())))

    def describe(self) -> str:
        if self.name != "split":
            return "shared (no CPU pinning)"
        return (f"split: SQL servers on CPU {_cpu_list(self.server)}, "
                f"clients and fault points on CPU {_cpu_list(self.client)}")


def _cpu_list(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)
