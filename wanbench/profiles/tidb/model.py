"""The TiDB profile's cluster model: roles and labels, component names, and the
settings wanbench needs beyond the shape (SQL login, SSH, load hosts). The
readers of tiup's files (``display``, ``topology``) build it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError
from wanbench.topology import Component, Topology

PROFILE = "tidb"

#: roles a fault may target or be scoped towards
FAULT_ROLES = frozenset(
    {"pd", "tidb", "tikv", "tiflash", "tiproxy", "cdc", "tikv-cdc", "tso", "scheduling", "pump", "drainer",
     "tidb-dashboard"}
)
#: kept in the model (they share hosts with the cluster) but never faulted
MONITORING_ROLES = frozenset({"prometheus", "grafana", "alertmanager"})

LABEL_LEADER = "leader"
LABEL_DASHBOARD = "dashboard"
LABEL_MONITORING = "monitoring"
LABEL_UNKNOWN = "unknown"
#: labels that describe the cluster's state at one moment, not its shape
RUNTIME_LABELS = frozenset({LABEL_LEADER, LABEL_DASHBOARD})
_STATUS_FLAGS = {"L": LABEL_LEADER, "UI": LABEL_DASHBOARD}


def component_name(role: str, host: str, port: int) -> str:
    """``tikv-10.160.152.24:20160``: the role and tiup's instance ID."""
    return f"{role}-{host}:{port}"


def labels_for(role: str, flags: Iterable[str] = ()) -> frozenset[str]:
    labels = {_STATUS_FLAGS[f] for f in flags if f in _STATUS_FLAGS}
    if role in MONITORING_ROLES:
        labels.add(LABEL_MONITORING)
    elif role not in FAULT_ROLES:
        labels.add(LABEL_UNKNOWN)
    return frozenset(labels)


def sorted_components(components: Iterable[Component]) -> tuple[Component, ...]:
    return tuple(sorted(components, key=lambda c: (c.role, c.host, c.ports)))


# -- settings ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSettings:
    """What wanbench needs beyond the shape: how to log in, where to load from.

    ``password_env`` names an environment variable; the password itself is
    read only when a connection is made (``password()``) and never stored.
    """

    name: str = ""
    source: str = ""
    source_format: str = ""
    deploy_user: str = ""
    ssh_user: str = "tidb"
    ssh_port: int = 22
    ssh_ports: Mapping[str, int] = dataclasses.field(default_factory=dict)
    ssh_key: str | None = None
    #: host -> the address tiup (and wanbench) uses for SSH when it differs (tiup's ``manage_host``)
    manage_hosts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    known_hosts: str | None = None
    connect_timeout: float = 10.0
    sql_user: str = "root"
    password_env: str | None = None
    database: str = "sbtest"
    endpoints: str | tuple[str, ...] = "tiproxy"
    load_host: str | None = None
    #: hosts that run sysbench over SSH (``NAME`` or ``NAME=SQL_HOST``, as ``--load-hosts`` takes them)
    load_hosts: tuple[str, ...] = ()
    pd_urls: tuple[str, ...] = ()

    def ssh_port_of(self, host: str) -> int:
        return int(self.ssh_ports.get(host, self.ssh_port))

    def ssh_host_of(self, host: str) -> str:
        """Where to SSH to for ``host``: its ``manage_host`` if it has one. Faults stay scoped to ``host``."""
        return str(self.manage_hosts.get(host, host))

    def password(self) -> str:
        """The SQL password from the environment ('' when no variable is named)."""
        if not self.password_env:
            return ""
        value = os.environ.get(self.password_env)
        if value is None:
            raise ConfigError(
                f"cluster {self.name!r}: environment variable {self.password_env} (the SQL password) is not set"
            )
        return value

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ssh_ports"] = dict(self.ssh_ports)
        out["manage_hosts"] = dict(self.manage_hosts)
        out["pd_urls"] = list(self.pd_urls)
        out["load_hosts"] = list(self.load_hosts)
        out["endpoints"] = self.endpoints if isinstance(self.endpoints, str) else list(self.endpoints)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("pd_urls", "load_hosts"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        if isinstance(kwargs.get("endpoints"), list):
            kwargs["endpoints"] = tuple(kwargs["endpoints"])
        return cls(**kwargs)


def cluster_settings(topology: Topology) -> ClusterSettings:
    return ClusterSettings.from_json(topology.settings)
