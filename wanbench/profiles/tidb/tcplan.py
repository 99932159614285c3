"""A fault plan as tc rules: the peers each host's rules match, the tc
mechanisms per host and interface (the SSH port always bypassed), and what
tc shows installed, read back to verify a plan.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.executors.base import Executor
from wanbench.faults.base import Level
from wanbench.faults.tc import PeerMatch
from wanbench.profiles.tidb.plan import CommandRenderer, FaultPlan, HostPlan, Match

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
