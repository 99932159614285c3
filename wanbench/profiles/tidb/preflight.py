"""Before any fault exists on a TiDB cluster: every host of a plan is reached
over SSH with a known host key (``preflight``), and each planned flow's
network interface is found on its host (``resolve_interfaces``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import HostKeyError, HostUnreachableError, InfrastructureError, WanbenchError
from wanbench.executors.base import Executor
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.plan import FaultPlan, route_commands
from wanbench.topology import Topology

# -- preflight -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreflightResult:
    host: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class PreflightReport:
    results: tuple[PreflightResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    @property
    def failed(self) -> list[PreflightResult]:
        return [r for r in self.results if not r.ok]


#: read-only commands every faulted host must answer before anything is changed anywhere
PREFLIGHT_COMMANDS: tuple[tuple[str, ...], ...] = (("tc", "-V"), ("ip", "-V"))


def preflight(
    topology: Topology,
    executors: Mapping[str, Executor],
    *,
    hosts: Iterable[str] | None = None,
    timeout: float = 15.0,
) -> PreflightReport:
    """Refuse to start unless every host answers over SSH with a known host key and has tc/ip.

    Checks every host of the topology (or ``hosts``); raises
    ``InfrastructureError`` naming each failing host, before any fault.
    """
    wanted = sorted(set(hosts) if hosts is not None else {c.host for c in topology.components})
    results = []
    for host in wanted:
        ex = executors.get(host)
        if ex is None:
            results.append(PreflightResult(host, False, "no executor for this host"))
            continue
        try:
            for argv in PREFLIGHT_COMMANDS:
                ex.run(list(argv), timeout=timeout)
        except HostKeyError as exc:
            results.append(PreflightResult(host, False, f"host key: {exc}"))
        except HostUnreachableError as exc:
            results.append(PreflightResult(host, False, f"unreachable: {exc}"))
        except WanbenchError as exc:
            results.append(PreflightResult(host, False, str(exc)))
        else:
            results.append(PreflightResult(host, True, "ssh ok, tc and ip present"))
    report = PreflightReport(tuple(results))
    if not report.ok:
        lines = "\n".join(f"  {r.host}: {r.detail}" for r in report.failed)
        raise InfrastructureError(
            f"preflight failed on {len(report.failed)} of {len(results)} host(s) of cluster {topology.name!r}; "
            f"no fault was applied:\n{lines}"
        )
    return report


def ssh_executors(topology: Topology, hosts: Iterable[str] | None = None, **overrides: Any) -> dict[str, Executor]:
    """One SSH executor per host, from the cluster settings (unknown host keys refused unless
    ``accept_new_host_keys=True`` is passed on the user's explicit request).

    Executors stay keyed by the service address (faults are scoped to it) but connect to the
    host's ``manage_host`` when tiup has one. The key is the cluster file's ``ssh.key``, else the
    key tiup generated for this cluster (``$TIUP_HOME/storage/cluster/clusters/<name>/ssh/id_rsa``),
    else whatever ``~/.ssh/config`` and the agent offer.
    ``overrides`` go to every ``SSHExecutor`` (e.g. ``ssh_config=``).
    """
    from wanbench.executors import get_executor
    from wanbench.profiles.tidb.topology import tiup_ssh_key

    s = cluster_settings(topology)
    key = s.ssh_key or tiup_ssh_key(s.name or topology.name)
    wanted = sorted(set(hosts) if hosts is not None else {c.host for c in topology.components})
    out: dict[str, Executor] = {}
    for h in wanted:
        kw: dict[str, Any] = {"user": s.ssh_user, "port": s.ssh_port_of(h), "key_filename": key,
                              "known_hosts": s.known_hosts, "connect_timeout": s.connect_timeout}
        if s.ssh_host_of(h) != h:
            kw["connect_to"] = s.ssh_host_of(h)
        # An unknown host key stops the run unless the user explicitly opted in
        # (--ssh-accept-new-hosts); a changed key is refused either way.
        kw["accept_new_host_keys"] = False
        kw.update(overrides)
        out[h] = get_executor("ssh", host=h, **kw)
    return out


_DEV = re.compile(r"\bdev\s+(\S+)")


def resolve_interfaces(plan: FaultPlan, executors: Mapping[str, Executor]) -> dict[str, dict[str, str]]:
    """host -> peer address -> the interface ``ip route get`` names there (read-only)."""
    out: dict[str, dict[str, str]] = {}
    for hp in plan.hosts:
        ex = executors[hp.host]
        found: dict[str, str] = {}
        for argv in route_commands(hp):
            res = ex.run(argv, timeout=10)  # read-only: asks the routing table, sends nothing
            m = _DEV.search(res.stdout)
            if not m:
                raise InfrastructureError(f"[{hp.host}] `{' '.join(argv)}` named no interface: {res.stdout.strip()!r}")
            found[argv[-1]] = m.group(1)
        out[hp.host] = found
    return out
