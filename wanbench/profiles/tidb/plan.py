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
import ipaddress
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import ConfigError, HostKeyError, HostUnreachableError, InfrastructureError, WanbenchError
from wanbench.executors.base import Executor
from wanbench.faults.base import Level
from wanbench.faults.tc import PeerMatch
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


# -- the tc mechanism for a plan -----------------------------------------------------------------------------------

#: placeholder for the interface in a dry run that did not ask the hosts
DRY_RUN_DEV = "DEV"


@dataclass(frozen=True)
class DirectedPeer(PeerMatch):
    """A ``PeerMatch`` that shapes ONE direction only.

    ``PeerMatch(ip, port)`` shapes both ``dport`` and ``sport`` towards ``ip``;
    on a shared host the other direction is a co-located component's traffic
    (TiDB calling PD :2379 would also catch the local PD answering from
    :2379), so plans use exactly the direction they planned.
    """

    direction: str = "dport"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.direction not in ("dport", "sport") or self.port is None:
            raise ConfigError(f"a directed peer needs a port and direction dport|sport, not {self.direction!r}")

    @property
    def label(self) -> str:
        return f"{self.ip or 'any'} {self.direction} {self.port}"

    def directions(self) -> list[tuple[str, list[str]]]:
        match = ["match", "ip", "dst", f"{self.ip}/32"] if self.ip else []
        match += ["match", "ip", self.direction, str(self.port), "0xffff"]
        return [(self.label, match)]

    @property
    def both_ways_here(self) -> bool:
        return False  # a real NIC: only what this host sends passes here


def tc_peers(matches: Iterable[Match]) -> list[DirectedPeer]:
    """Specific peers first: u32 filters of one priority match in order, so any-address filters go last."""
    out = []
    for m in sorted(matches, key=lambda m: (m.dst is None, m.key)):
        if m.src_port is not None:
            out.append(DirectedPeer(ip=m.dst, port=m.src_port, direction="sport"))
        elif m.dst_port is not None:
            out.append(DirectedPeer(ip=m.dst, port=m.dst_port, direction="dport"))
    return out


def matches_by_interface(hp: HostPlan, interfaces: Mapping[str, str] | None) -> dict[str, list[Match]]:
    """Group a host's filters by the interface towards each peer; any-address filters go on every one."""
    if not hp.matches:
        return {}
    if interfaces is None:
        return {DRY_RUN_DEV: list(hp.matches)}
    devs = sorted(set(interfaces.values())) or [DRY_RUN_DEV]
    out: dict[str, list[Match]] = {}
    for m in hp.matches:
        for dev in ([interfaces[m.dst]] if m.dst else devs):
            out.setdefault(dev, []).append(m)
    return out


class _NoCommands:
    """The executor of a dry run: running anything is a bug, not a side effect."""

    def __init__(self, host: str, ssh_port: int) -> None:
        self.host = host
        self.ssh_port = ssh_port

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float = 30.0,
            check: bool = True) -> Any:
        raise InfrastructureError(f"[{self.host}] dry run tried to run {' '.join(argv)!r}")

    def close(self) -> None:
        return None


def tc_renderer(interfaces: Mapping[str, Mapping[str, str]] | None = None, *,
                ssh_ports: Iterable[int] = ()) -> CommandRenderer:
    """Dry-run renderer: the exact ``tc -batch`` the tc mechanism would feed each host.

    ``ssh_ports``: the run's other SSH ports (``ssh_bypass_ports``), bypassed on every host as
    ``tc_mechanisms`` does.
    """
    extra = set(ssh_ports)
    from wanbench.faults.tc import TcMechanism

    def render(hp: HostPlan, level: Level) -> list[str]:
        lines: list[str] = []
        by_dev = matches_by_interface(hp, None if interfaces is None else interfaces.get(hp.host, {}))
        for dev, matches in by_dev.items():
            tc = TcMechanism(_NoCommands(hp.host, hp.ssh_port), dev, tc_peers(matches),
                             ssh_ports=tuple(sorted({hp.ssh_port, *extra})))
            if dev == DRY_RUN_DEV:
                lines.append(f"# {DRY_RUN_DEV} = the interface `ip -o route get <peer>` names on {hp.host}")
            lines.append("tc -batch - <<'EOF'")
            lines.extend(tc.plan(level))
            lines.append("EOF")
        return lines

    return render


def ssh_bypass_ports(executors: Mapping[str, Any]) -> tuple[int, ...]:
    """Every SSH port any connection of this run relies on, jump hosts' included.

    SSH is never shaped: not a host's own port, and not one a jump host in the cluster forwards
    to (its connections to the other hosts' SSH ports leave through the faulted interface).
    Building executors connects nowhere, so a dry run can ask too.
    """
    ports: set[int] = set()
    for ex in executors.values():
        ports.update(getattr(ex, "bypass_ports", None) or (getattr(ex, "ssh_port", 22),))
    return tuple(sorted(ports))


def tc_mechanisms(
    plan: FaultPlan,
    executors: Mapping[str, Executor],
    interfaces: Mapping[str, Mapping[str, str]],
    *,
    state_dir_for: Callable[[str], str] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """One ``TcMechanism`` per (host, interface) of the plan, ready for ``apply``/``clear``.

    ``kwargs`` go to every ``TcMechanism`` (``run=`` so they share one run id);
    ``state_dir_for(host)`` gives a per-host dead-man directory where hosts
    share a filesystem (namespace test hosts).
    """
    from wanbench.faults.tc import TcMechanism

    bypass = ssh_bypass_ports(executors)
    out = []
    for hp in plan.hosts:
        ssh_ports = tuple(sorted({hp.ssh_port, *bypass}))
        extra = dict(kwargs)
        if state_dir_for is not None:
            extra["state_dir"] = state_dir_for(hp.host)
        for dev, matches in matches_by_interface(hp, interfaces[hp.host]).items():
            out.append(TcMechanism(executors[hp.host], dev, tc_peers(matches), ssh_ports=ssh_ports, **extra))
    return out


# -- reading back what tc installed ----------------------------------------------------------------------------------

FilterKey = tuple[str | None, int | None, int | None]  # (dst, sport, dport)
_U32_MATCH = re.compile(r"match ([0-9a-f]{8})/([0-9a-f]{8}) at (\d+)")


def installed_filters(ex: Executor, dev: str) -> tuple[str | None, set[FilterKey], set[int]]:
    """(root qdisc handle, shaping filters as (dst, sport, dport), ports of the SSH bypass) of ``dev``.

    Read from ``tc`` itself so verification does not trust what was sent.
    """
    qd = ex.run(["tc", "qdisc", "show", "dev", dev], timeout=15).stdout
    root = re.search(r"qdisc \S+ (\S+) root", qd)
    text = ex.run(["tc", "filter", "show", "dev", dev], timeout=15).stdout
    shaped: set[FilterKey] = set()
    bypass: set[int] = set()
    for block in re.split(r"\n(?=filter .*fh \S+::\S+ order)", text):
        pref = re.search(r"pref (\d+)", block)
        if "flowid" not in block or pref is None:
            continue
        dst: str | None = None
        sport: int | None = None
        dport: int | None = None
        for value, mask, off in _U32_MATCH.findall(block):
            if off == "16" and mask == "ffffffff":
                dst = str(ipaddress.IPv4Address(int(value, 16)))
            elif off == "20" and mask == "ffff0000":
                sport = int(value[:4], 16)
            elif off == "20" and mask == "0000ffff":
                dport = int(value[4:], 16)
        if pref.group(1) == "1":
            bypass.update(p for p in (sport, dport) if p)
        else:
            shaped.add((dst, sport, dport))
    return (root.group(1) if root else None), shaped, bypass


def planned_filters(matches: Iterable[Match]) -> set[FilterKey]:
    return {(m.dst, m.src_port, m.dst_port) for m in matches}
