"""Views of a TiDB topology: the components a fault may target, the PD leader
and PD's client URLs, the SQL endpoints, and the TiDB-aware workload
settings (warm-up statements, one endpoint per TiDB or TiProxy).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError
from wanbench.profiles.tidb.model import LABEL_LEADER, LABEL_MONITORING, LABEL_UNKNOWN, RUNTIME_LABELS, cluster_settings
from wanbench.topology import Component, Topology

# -- views of the model ------------------------------------------------------------------------------------------


def fault_components(topology: Topology) -> list[Component]:
    """Components a fault may target or be scoped towards (not monitoring, not unknown roles)."""
    return [c for c in topology.components if not c.labels & {LABEL_MONITORING, LABEL_UNKNOWN}]


def static_view(topology: Topology) -> tuple[Component, ...]:
    """The shape without run-time state (status, leader, dashboard): equal for display and YAML input."""
    return tuple(
        dataclasses.replace(c, status="", labels=c.labels - RUNTIME_LABELS) for c in topology.components
    )


def pd_leader(topology: Topology) -> Component | None:
    leaders = topology.select(f"pd:{LABEL_LEADER}")
    return leaders[0] if leaders else None


def with_pd_leader(topology: Topology, address: str) -> Topology:
    """A copy with the ``leader`` label on the PD whose client address is ``host:port``."""
    pds = topology.by_role("pd")
    if not any(c.address == address for c in pds):
        known = ", ".join(c.address for c in pds)
        raise ConfigError(f"PD leader {address} is not a PD of cluster {topology.name!r} (PDs: {known})")
    comps = []
    for c in topology.components:
        if c.role == "pd":
            labels = (c.labels | {LABEL_LEADER}) if c.address == address else (c.labels - {LABEL_LEADER})
            c = dataclasses.replace(c, labels=frozenset(labels))
        comps.append(c)
    return dataclasses.replace(topology, components=tuple(comps))


def parse_pd_urls(text: str) -> list[str]:
    """``--pd-url``: comma-separated ``http(s)://host:port`` URLs."""
    urls = [u.strip().rstrip("/") for u in str(text).split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"{text!r}: give at least one PD URL such as http://10.0.0.1:2379")
    for u in urls:
        if not re.fullmatch(r"https?://[^/\s:]+(:\d+)?", u):
            raise ConfigError(f"{u!r} is not a PD client URL (example: http://10.0.0.1:2379)")
    return urls


def parse_load_host(text: str) -> str:
    """``--load-host``: an address or host name, nothing else."""
    host = str(text).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", host):
        raise ConfigError(f"{text!r} is not a host name or address")
    return host


def pd_client_urls(topology: Topology, override: str | Sequence[str] | None = None) -> list[str]:
    """PD client URLs to try, the last-known leader first; ``override`` (``--pd-url``) wins."""
    if override:
        return parse_pd_urls(override if isinstance(override, str) else ",".join(override))
    settings = cluster_settings(topology)
    if settings.pd_urls:
        return list(settings.pd_urls)
    pds = sorted(topology.by_role("pd"), key=lambda c: LABEL_LEADER not in c.labels)
    return [f"http://{c.host}:{c.port}" for c in pds]


# -- TiDB-aware workload settings ----------------------------------------------------------------------------------

#: retryable TiDB errors (8002 SELECT FOR UPDATE cannot retry, 8022 txn retry, 8028 schema changed,
#: 9007 write conflict) plus MySQL deadlock / lock-wait and the PD/TiKV/region timeouts that a
#: degraded network produces; sysbench counts ignored errors, so they stay visible in the results.
SYSBENCH_IGNORE_ERRORS: tuple[int, ...] = (1020, 1205, 1213, 8002, 8022, 8028, 9001, 9002, 9005, 9007)


@dataclass(frozen=True)
class WorkloadSettings:
    """How to load TiDB: endpoints (round robin), sysbench flags, warm-up statements."""

    endpoints: tuple[tuple[str, int], ...]
    ignore_errors: tuple[int, ...] = SYSBENCH_IGNORE_ERRORS
    ps_mode: str = "auto"
    database: str = "sbtest"
    user: str = "root"

    def sysbench_args(self) -> list[str]:
        """sysbench 1.0 spreads connections round robin over comma-separated hosts/ports."""
        return [
            "--mysql-host=" + ",".join(h for h, _ in self.endpoints),
            "--mysql-port=" + ",".join(str(p) for _, p in self.endpoints),
            "--mysql-user=" + self.user,
            "--mysql-db=" + self.database,
            "--mysql-ignore-errors=" + ",".join(str(e) for e in self.ignore_errors),
            "--db-ps-mode=" + self.ps_mode,
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoints": [f"{h}:{p}" for h, p in self.endpoints],
            "ignore_errors": list(self.ignore_errors),
            "ps_mode": self.ps_mode,
            "database": self.database,
            "user": self.user,
        }


def warmup_statements(tables: int) -> list[str]:
    """Seed 003's warm-up: read every table through its secondary index once."""
    if tables <= 0:
        raise ConfigError(f"tables must be positive, not {tables}")
    return [f"SELECT COUNT(pad) FROM sbtest{n} USE INDEX(k_{n})" for n in range(1, tables + 1)]


def sql_endpoints(topology: Topology, path: str = "proxy") -> list[tuple[str, int]]:
    """Where clients connect: TiProxy instances for ``path="proxy"`` (TiDB if there is none), TiDB for "direct".

    An explicit ``sql.endpoints`` list in the wanbench YAML wins.
    """
    settings = cluster_settings(topology)
    if not isinstance(settings.endpoints, str):
        return [_host_port(e) for e in settings.endpoints]
    if path not in ("proxy", "direct"):
        raise ConfigError(f"unknown SQL path {path!r} (known: proxy, direct)")
    role = "tidb" if path == "direct" or settings.endpoints == "tidb" else "tiproxy"
    comps = topology.by_role(role) or topology.by_role("tidb")
    if not comps:
        raise ConfigError(f"cluster {topology.name!r} has no tidb or tiproxy instance to send SQL to")
    return [(c.host, c.port) for c in comps]


def workload_settings(topology: Topology, path: str = "proxy") -> WorkloadSettings:
    settings = cluster_settings(topology)
    return WorkloadSettings(
        endpoints=tuple(sql_endpoints(topology, path)), database=settings.database, user=settings.sql_user
    )


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"SQL endpoint {text!r} is not host:port")
    return host, int(port)
