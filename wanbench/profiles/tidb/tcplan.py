"""A fault plan as rules on each host: the peers each host's rules match, the
mechanism each host's kernel allows for the fault's kind (``choose_mechanisms``:
tc, or nft for loss where the kernel has no netem), the mechanisms per host
and interface (the SSH port always bypassed), and what tc and nft show
installed, read back to verify a plan.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError, FaultError, InfrastructureError
from wanbench.executors.base import Executor
from wanbench.faults.base import FaultKind, Level
from wanbench.faults.probe import Capabilities, choose_mechanism
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

    @property
    def port_fields(self) -> tuple[str, ...]:
        return (self.direction,)


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


#: what a dry run says about the kinds a kernel without netem cannot do with tc
_NETEM_NOTE = {
    FaultKind.DELAY: ("# delay needs sch_netem in this host's kernel: a capability probe of every host checks it "
                      "when the run starts, and without it the run stops there, before anything is applied"),
    FaultKind.LOSS: ("# loss: tc netem (below) where this host's kernel has sch_netem, else the nft table after it "
                     "(a capability probe of every host decides when the run starts)"),
}


def tc_renderer(interfaces: Mapping[str, Mapping[str, str]] | None = None, *,
                ssh_ports: Iterable[int] = (), run: Any = None) -> CommandRenderer:
    """Dry-run renderer: the exact ``tc -batch`` the tc mechanism would feed each host, and for
    loss the ``nft -f`` input the nft mechanism would feed a host whose kernel has no netem.

    ``ssh_ports``: the run's other SSH ports (``ssh_bypass_ports``), bypassed on every host as
    ``fault_mechanisms`` does; ``run`` (``RunInfo``): the run whose id names the nft table.
    """
    extra = set(ssh_ports)
    from wanbench.faults.nft import NftMechanism
    from wanbench.faults.tc import TcMechanism

    def render(hp: HostPlan, level: Level) -> list[str]:
        lines: list[str] = []
        by_dev = matches_by_interface(hp, None if interfaces is None else interfaces.get(hp.host, {}))
        if by_dev and level.kind in _NETEM_NOTE:
            lines.append(_NETEM_NOTE[level.kind])
        ports = tuple(sorted({hp.ssh_port, *extra}))
        for dev, matches in by_dev.items():
            ex = _NoCommands(hp.host, hp.ssh_port)
            if dev == DRY_RUN_DEV:
                lines.append(f"# {DRY_RUN_DEV} = the interface `ip -o route get <peer>` names on {hp.host}")
            lines.append("tc -batch - <<'EOF'")
            lines.extend(TcMechanism(ex, dev, tc_peers(matches), ssh_ports=ports).plan(level))
            lines.append("EOF")
            if level.kind is FaultKind.LOSS:
                nft = NftMechanism(ex, tc_peers(matches), interface=dev, ssh_ports=ports, run=run)
                lines.append("nft -f - <<'EOF'")
                lines.extend(nft.plan(level.value).splitlines())
                lines.append("EOF")
        return lines

    return render


def choose_mechanisms(plan: FaultPlan, caps: Mapping[str, Capabilities], level: Level) -> dict[str, str]:
    """host -> the mechanism that puts ``level`` in place there ("tc", or "nft" for loss on a kernel
    without netem), decided by each host's capability probe. A host that cannot take the fault stops
    it for every host: ``FaultError`` naming each such host and what its kernel lacks, raised before
    anything is applied anywhere."""
    chosen: dict[str, str] = {}
    refused: list[tuple[str, str]] = []
    for hp in plan.hosts:
        c = caps[hp.host]
        try:
            mech = choose_mechanism(level.kind, c)
        except FaultError as exc:
            refused.append((hp.host, str(exc)))
            continue
        if mech == "toxiproxy":  # delay without netem: a userspace proxy, which a TiDB host does not run
            refused.append((hp.host, "the kernel has no sch_netem (the capability probe could not add a netem "
                                      "qdisc on a throwaway device there)"))
            continue
        chosen[hp.host] = mech
    if refused:
        why = {w for _, w in refused}
        hosts = ", ".join(h for h, _ in refused)
        reason = why.pop() if len(why) == 1 else "; ".join(f"{h}: {w}" for h, w in refused)
        how = ""
        if level.kind is FaultKind.DELAY:
            how = (" The TiDB profile adds delay with tc netem on the faulted hosts and has no other way to "
                   "delay their traffic: load the module there (`modprobe sch_netem`; Debian and Ubuntu ship it "
                   "in linux-modules-extra-$(uname -r), RHEL in kernel-modules-extra), or run the rtt family "
                   "against hosts whose kernel has it.")
        where = "this host" if len(refused) == 1 else f"these {len(refused)} hosts"
        raise FaultError(hosts, f"cannot add {level.kind.value} {level.label} ({plan.scenario}) on {where}: "
                                f"{reason}.{how} Nothing was applied on any host.")
    return chosen


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


def fault_mechanisms(
    plan: FaultPlan,
    executors: Mapping[str, Executor],
    interfaces: Mapping[str, Mapping[str, str]],
    *,
    chosen: Mapping[str, str] | None = None,
    capabilities: Mapping[str, Capabilities] | None = None,
    state_dir_for: Callable[[str], str] | None = None,
    **kwargs: Any,
) -> list[Any]:
    """One mechanism per (host, interface) of the plan, ready for ``apply``/``clear``: a
    ``TcMechanism``, or an ``NftMechanism`` where ``chosen`` (``choose_mechanisms``) says "nft".

    ``kwargs`` go to every mechanism (``run=`` so they share one run id, ``keeper=``);
    ``capabilities``: each host's probe, so a mechanism does not probe again;
    ``state_dir_for(host)`` gives a per-host dead-man directory where hosts
    share a filesystem (namespace test hosts).
    """
    from wanbench.faults.nft import NftMechanism
    from wanbench.faults.tc import TcMechanism

    bypass = ssh_bypass_ports(executors)
    out: list[Any] = []
    for hp in plan.hosts:
        ssh_ports = tuple(sorted({hp.ssh_port, *bypass}))
        extra = dict(kwargs)
        if state_dir_for is not None:
            extra["state_dir"] = state_dir_for(hp.host)
        if capabilities is not None:
            extra["capabilities"] = capabilities[hp.host]
        nft = (chosen or {}).get(hp.host) == "nft"
        for dev, matches in matches_by_interface(hp, interfaces[hp.host]).items():
            peers = tc_peers(matches)
            out.append(NftMechanism(executors[hp.host], peers, interface=dev, ssh_ports=ssh_ports, **extra) if nft
                       else TcMechanism(executors[hp.host], dev, peers, ssh_ports=ssh_ports, **extra))
    return out


def tc_mechanisms(plan: FaultPlan, executors: Mapping[str, Executor], interfaces: Mapping[str, Mapping[str, str]],
                  **kwargs: Any) -> list[Any]:
    """``fault_mechanisms`` with tc on every host (rate caps; delay and loss where netem exists)."""
    return fault_mechanisms(plan, executors, interfaces, **kwargs)


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


def installed_nft(ex: Executor, table: str) -> tuple[bool, set[FilterKey], set[int]]:
    """(the table exists, its loss rules as (dst, sport, dport), ports of its SSH accept rules), read
    from ``nft -j`` itself (the rules ``NftMechanism`` writes: one match per planned filter)."""
    res = ex.run(["nft", "-j", "list", "chain", "inet", table, "out"], check=False, timeout=15)
    if res.exit_status != 0:
        return False, set(), set()
    shaped: set[FilterKey] = set()
    bypass: set[int] = set()
    for item in json.loads(res.stdout or "{}").get("nftables", []):
        expr = (item.get("rule") or {}).get("expr") or []
        dst: str | None = None
        ports: dict[str, Any] = {}
        for e in expr:
            left = (e.get("match") or {}).get("left") or {}
            right = (e.get("match") or {}).get("right")
            payload = left.get("payload") or {}
            if payload.get("field") == "daddr":
                dst = str(right)
            elif payload.get("field") in ("sport", "dport"):
                ports[payload["field"]] = right
        if any("jump" in e for e in expr):
            shaped.add((dst, _port(ports.get("sport")), _port(ports.get("dport"))))
        elif any("accept" in e for e in expr):
            for value in ports.values():
                bypass.update(value["set"] if isinstance(value, dict) and "set" in value else [value])
    return True, shaped, {int(p) for p in bypass}


def _port(value: Any) -> int | None:
    return int(value) if isinstance(value, int) else None
