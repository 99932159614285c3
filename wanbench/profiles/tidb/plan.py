"""Fault planning for a TiDB cluster: which host gets which rules, towards whom.

A scenario names a target (``tikv``, ``pd:leader``) and peers. On real
clusters several components share a host (seed 000: PD, TiDB and TiProxy on
the same six machines), so a fault is never "the host": it is egress traffic
of the target's own flows only:

* replies from the target's listening ports to each remote peer that calls it
  (``src port`` = the target's port, ``dst`` = the peer's address), and
* the target's calls to each remote peer (``dst`` = the peer's address,
  ``dst port`` = the peer port the target's role talks to, from ``CONNECTS``).

Another component on the same host that calls the same peer port shares that
flow's rule and is named in ``collateral``; everything else on the host is
untouched and listed in ``shares_host_with``. Peers on the same host talk
over loopback and are never faulted (``local_peers``). The SSH port is never
matched: a plan that would is refused.

``render_dry_run`` prints every command per host and runs nothing;
``preflight`` refuses to start when any host cannot be reached over SSH or
its host key is unknown, before any fault exists.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError
from wanbench.faults.base import Level
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.views import fault_components
from wanbench.topology import Component, Scenario, Topology

CLIENT = "client"

#: caller role -> callee role -> indices into the callee's ports that the caller connects to
#: (port order as `tiup cluster display` prints it: pd client/peer, tidb sql/status, tikv port/status,
#: tiflash tcp/flash_service/proxy/proxy_status/metrics, tiproxy sql/status)
CONNECTS: Mapping[str, Mapping[str, tuple[int, ...]]] = {
    CLIENT: {"tiproxy": (0,), "tidb": (0,)},
    "tiproxy": {"tidb": (0, 1), "pd": (0,)},
    "tidb": {"pd": (0,), "tikv": (0,), "tiflash": (1,)},
    "tikv": {"pd": (0,), "tikv": (0,), "tiflash": (2,)},
    "tiflash": {"pd": (0,), "tikv": (0,), "tiflash": (1,)},
    "pd": {"pd": (1,)},  # etcd peer traffic; each PD's own etcd client stays on the host
    "cdc": {"pd": (0,), "tikv": (0,)},
    "tikv-cdc": {"pd": (0,), "tikv": (0,)},
    "pump": {"pd": (0,)},
    "drainer": {"pd": (0,), "pump": (0,)},
    "tso": {"pd": (0,)},
    "scheduling": {"pd": (0,), "tikv": (0,)},
}


@dataclass(frozen=True)
class Match:
    """One egress filter on a host. ``dst=None`` means any address (an unknown load host)."""

    dst: str | None
    dst_port: int | None = None
    src_port: int | None = None
    peers: tuple[str, ...] = ()
    why: str = ""

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.dst or "", self.dst_port or 0, self.src_port or 0)

    def describe(self) -> str:
        parts = [f"dst {self.dst or 'any'}"]
        if self.dst_port is not None:
            parts.append(f"dport {self.dst_port}")
        if self.src_port is not None:
            parts.append(f"sport {self.src_port}")
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"dst": self.dst, "dst_port": self.dst_port, "src_port": self.src_port,
                "peers": list(self.peers), "why": self.why}


@dataclass(frozen=True)
class HostPlan:
    """Everything one host gets for one fault, and what else lives there."""

    host: str
    ssh_port: int
    faulted: tuple[str, ...]
    ports: tuple[int, ...]
    peers: tuple[str, ...]
    matches: tuple[Match, ...]
    shares_host_with: tuple[str, ...] = ()
    collateral: tuple[str, ...] = ()
    local_peers: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def peer_ips(self) -> tuple[str, ...]:
        return tuple(p for p in self.peers if p != "any")

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ssh_port": self.ssh_port,
            "faulted": list(self.faulted),
            "ports": list(self.ports),
            "peers": list(self.peers),
            "matches": [m.to_json() for m in self.matches],
            "shares_host_with": list(self.shares_host_with),
            "collateral": list(self.collateral),
            "local_peers": list(self.local_peers),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class FaultPlan:
    scenario: str
    level: Level
    hosts: tuple[HostPlan, ...]
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.scenario}-{self.level.label}"

    def host(self, host: str) -> HostPlan:
        for h in self.hosts:
            if h.host == host:
                return h
        raise KeyError(host)

    def shared_hosts(self) -> dict[str, list[str]]:
        """Faulted host -> the other components on it: what the result should say shared the host."""
        return {h.host: list(h.shares_host_with) for h in self.hosts if h.shares_host_with}

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "level": self.level.to_json(),
            "hosts": [h.to_json() for h in self.hosts],
            "notes": list(self.notes),
        }


def plan_fault(
    scenario: Scenario,
    topology: Topology,
    level: Level,
    *,
    load_host: str | None = None,
    load_hosts: Sequence[str] = (),
) -> FaultPlan:
    """Per-host rules for ``scenario`` at ``level``; pure: reads the model only.

    Rules towards "the client" go to every address in ``load_hosts`` (the
    load hosts sysbench runs on) and to ``load_host``; with neither known,
    to any address."""
    settings = cluster_settings(topology)
    load_host = load_host or settings.load_host
    clients: tuple[str | None, ...] = tuple(dict.fromkeys(
        [*load_hosts, *([load_host] if load_host else [])])) or (None,)
    eligible = {c.name for c in fault_components(topology)}
    targets = [c for c in topology.select(scenario.target) if c.name in eligible]
    if not targets:
        raise ConfigError(
            f"scenario {scenario.name}: target {scenario.target!r} selects no component of cluster "
            f"{topology.name!r} (roles: {', '.join(topology.roles())})"
        )
    peer_sel = scenario.peers or tuple(sorted({c.role for c in fault_components(topology)} | {CLIENT}))
    peers: list[Component] = []
    with_client = False
    for sel in peer_sel:
        if sel == CLIENT:
            with_client = True
            continue
        peers.extend(c for c in topology.select(sel) if c.name in eligible and c not in peers)
    target_names = {t.name for t in targets}
    by_host: dict[str, list[Component]] = {}
    for t in targets:
        by_host.setdefault(t.host, []).append(t)
    plan_notes: list[str] = []
    both_ends = sorted({p.name for p in peers if p.name in target_names})
    if both_ends:
        plan_notes.append(
            "faulted on both ends (traffic between them crosses the fault twice): " + ", ".join(both_ends)
        )
    hosts = []
    for host, here in sorted(by_host.items()):
        hosts.append(_host_plan(host, here, peers, with_client, clients, topology, target_names, settings))
    return FaultPlan(scenario=scenario.name, level=level, hosts=tuple(hosts), notes=tuple(plan_notes))


def _host_plan(
    host: str,
    here: Sequence[Component],
    peers: Sequence[Component],
    with_client: bool,
    clients: Sequence[str | None],
    topology: Topology,
    target_names: set[str],
    settings: Any,
) -> HostPlan:
    ssh_port = settings.ssh_port_of(host)
    matches: dict[tuple[str, int, int], Match] = {}
    local_peers: list[str] = []
    notes: list[str] = []

    def add(m: Match) -> None:
        old = matches.get(m.key)
        if old is not None:
            m = dataclasses.replace(m, peers=tuple(dict.fromkeys(old.peers + m.peers)))
        matches[m.key] = m

    for t in here:
        for p in peers:
            if p.name == t.name:
                continue
            if p.host == host:
                local_peers.append(p.name)
                continue
            served = CONNECTS.get(p.role, {}).get(t.role, ())
            for idx in served:
                if idx < len(t.ports):
                    add(Match(p.host, src_port=t.ports[idx], peers=(p.name,)))
            called = CONNECTS.get(t.role, {}).get(p.role, ())
            for idx in called:
                if idx < len(p.ports):
                    add(Match(p.host, dst_port=p.ports[idx], peers=(p.name,)))
            if not served and not called:
                notes.append(f"{t.role} and {p.role} do not talk to each other: {p.name} gets no rule")
        for client in clients if with_client else ():
            if client == host:
                continue  # a load host on the target's own host talks over loopback
            for idx in CONNECTS[CLIENT].get(t.role, ()):
                if idx < len(t.ports):
                    add(Match(client, src_port=t.ports[idx], peers=(CLIENT,)))
    for key, m in matches.items():
        matches[key] = dataclasses.replace(m, why=_why(m, topology, any(clients)))
    # never the SSH port, in either direction
    for m in matches.values():
        dst_ssh = settings.ssh_port_of(m.dst) if m.dst else None
        if m.src_port == ssh_port or (m.dst_port is not None and m.dst_port == dst_ssh):
            raise ConfigError(
                f"[{host}] a rule would match the SSH port ({m.describe()}): refusing to plan a fault that "
                "could cut the connection wanbench uses to remove it"
            )
    others = [c for c in topology.components if c.host == host and c.name not in {t.name for t in here}]
    collateral = _collateral(list(matches.values()), others, topology, target_names)
    ports = tuple(sorted({p for t in here for p in t.ports}))
    peer_addrs = sorted({m.dst for m in matches.values() if m.dst}) + (
        ["any"] if any(m.dst is None for m in matches.values()) else []
    )
    if not matches:
        notes.append("no remote peer: nothing to fault on this host")
    return HostPlan(
        host=host,
        ssh_port=ssh_port,
        faulted=tuple(t.name for t in here),
        ports=ports,
        peers=tuple(peer_addrs),
        matches=tuple(sorted(matches.values(), key=lambda m: m.key)),
        shares_host_with=tuple(c.name for c in others),
        collateral=tuple(collateral),
        local_peers=tuple(dict.fromkeys(local_peers)),
        notes=tuple(dict.fromkeys(notes)),
    )


def _why(m: Match, topology: Topology, load_host: str | bool | None) -> str:
    roles = sorted({"clients" if n == CLIENT else topology.component(n).role for n in m.peers})
    if m.src_port is not None:
        text = f"replies from :{m.src_port} to {'/'.join(roles)}"
    else:
        text = f"calls to {'/'.join(roles)} :{m.dst_port}"
    if m.dst is None and not load_host:
        text += " (load host unknown: any address)"
    return text


def _collateral(
    matches: Sequence[Match], others: Sequence[Component], topology: Topology, target_names: set[str]
) -> list[str]:
    """Co-located components whose own calls share a rule (same peer address and port)."""
    found: dict[tuple[str, str, int], list[str]] = {}
    for m in matches:
        if m.dst_port is None or m.dst is None:
            continue  # a source-port rule only carries the target's own listening sockets
        peer_roles = {topology.component(n).role for n in m.peers if n != CLIENT}
        for q in others:
            if q.name in target_names:
                continue
            for role in peer_roles:
                callee = [c for c in topology.by_role(role) if c.host == m.dst]
                idx = CONNECTS.get(q.role, {}).get(role, ())
                if any(i < len(c.ports) and c.ports[i] == m.dst_port for c in callee for i in idx):
                    found.setdefault((q.name, role, m.dst_port), []).append(m.dst)
    return [
        f"{q} also calls {role} :{port} on {', '.join(dsts)}: those flows share the rule and are faulted too"
        for (q, role, port), dsts in found.items()
    ]


# -- dry run -------------------------------------------------------------------------------------------------------

#: given a host's plan, the exact command lines the mechanism would run there
CommandRenderer = Callable[[HostPlan, Level], Sequence[str]]


def route_commands(hp: HostPlan) -> list[list[str]]:
    """How the interface towards each peer is found on the host (read-only)."""
    return [["ip", "-o", "route", "get", ip] for ip in hp.peer_ips]


def render_dry_run(
    plan: FaultPlan,
    *,
    commands: CommandRenderer | None = None,
    ssh_user: str | None = None,
) -> str:
    """Every command that would run on every host, and why; runs nothing.

    ``commands`` is the fault mechanism's renderer (``tc_renderer()``: the
    exact ``tc -batch`` input); without it only the planned filters print.
    """
    lines = [f"# dry run: {plan.scenario} {plan.level.kind.value}={plan.level.label} on "
             f"{len(plan.hosts)} host(s); nothing below has been run"]
    lines += [f"# note: {n}" for n in plan.notes]
    for hp in plan.hosts:
        who = f"{ssh_user}@" if ssh_user else ""
        lines.append("")
        lines.append(f"== {hp.host} (ssh {who}{hp.host} port {hp.ssh_port}; the SSH port is never matched) ==")
        lines.append(f"# faulted: {', '.join(hp.faulted)} (ports {'/'.join(map(str, hp.ports))})")
        lines.append(f"# shares the host with: {', '.join(hp.shares_host_with) or 'nothing'}")
        for c in hp.collateral:
            lines.append(f"# collateral: {c}")
        if hp.local_peers:
            lines.append(f"# same-host peers, not faulted (loopback): {', '.join(hp.local_peers)}")
        for n in hp.notes:
            lines.append(f"# note: {n}")
        for route in route_commands(hp):
            lines.append(shlex.join(route))
        lines.append(f"# planned egress filters ({plan.level.kind.value} {plan.level.label}):")
        for m in hp.matches:
            lines.append(f"#   {m.describe():<42} {m.why}")
        if commands is not None:
            lines.extend(commands(hp, plan.level))
    return "\n".join(lines) + "\n"


