"""tc faults on one host's interface: rate caps (htb), and delay/loss where netem exists.

Layout (egress of ``interface``; handle ``1a57:`` marks it as ours)::

    root 1a57: htb default 1
      1a57:1   unshaped class: all other traffic, and SSH by an explicit prio-1 filter
      1a57:10+ one class per peer direction (rate cap, or netem child for delay/loss)

Peers are matched with u32 on destination IP and/or port. A port-only peer
(the lab on ``lo``) gets two classes, ``dport P`` and ``sport P``, so each
direction of the link is capped at R in aggregate over all its connections.

tc is egress-only: on a real host a cap/delay acts on what the host *sends*
to its peers. A delay D on a host therefore adds D to the round trip with each
peer; on ``lo`` both directions pass the same qdisc, so each gets D/2.
"""

from __future__ import annotations

import ipaddress
import json
import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wanbench.errors import CommandError, ConfigError, FaultError
from wanbench.executors.base import Executor
from wanbench.faults.base import Evidence, Fault, FaultKind, Level
from wanbench.faults.deadman import STATE_DIR, FaultState, RunInfo
from wanbench.faults.host import HostFaultBase
from wanbench.faults.probe import Capabilities

if TYPE_CHECKING:
    from wanbench.faults.lease import LeaseKeeper

HANDLE = "1a57:"
_MAJOR = "1a57"
_UNSHAPED = f"{_MAJOR}:1"
_FIRST_CLASS = 0x10
#: assumed line rate for sizing netem's queue when no rate is given (bits/s)
_ASSUMED_LINE_RATE = 10e9
#: default queue of a rate-capped class, in seconds at the cap: a WAN router's buffer. Shorter
#: queues drop more (retransmissions eat goodput, RTOs stall flows: 0.5 s lost ~3 % at 5 Mbit/s
#: with 4 flows); longer ones add more queueing delay when the link is saturated.
QUEUE_S = 1.0
#: token bucket depth of a capped class, in seconds at the cap. A bucket of a few packets loses
#: tokens whenever the qdisc watchdog wakes late (a busy host), which caps below the rate asked.
BURST_S = 0.05


@dataclass(frozen=True)
class PeerMatch:
    """Traffic to one peer: its IP, a port of the link, or both (AND)."""

    ip: str | None = None
    port: int | None = None

    def __post_init__(self) -> None:
        if self.ip is None and self.port is None:
            raise ConfigError("a peer match needs an ip, a port, or both")
        if self.ip is not None:
            try:
                addr = ipaddress.ip_address(self.ip)
            except ValueError:
                raise ConfigError(f"peer {self.ip!r} is not an IP address") from None
            if addr.version != 4:
                raise ConfigError(f"peer {self.ip}: only IPv4 peers are supported by the tc/nft mechanisms")
        if self.port is not None and not (isinstance(self.port, int) and 0 < self.port < 65536):
            raise ConfigError(f"peer port {self.port!r} is not a TCP/UDP port")

    @property
    def label(self) -> str:
        if self.ip and self.port:
            return f"{self.ip}:{self.port}"
        return self.ip or f":{self.port}"

    def directions(self) -> list[tuple[str, list[str]]]:
        """(label, u32 match arguments) for each egress direction to shape."""
        if self.ip is None:
            return [(f"dport {self.port}", ["match", "ip", "dport", str(self.port), "0xffff"]),
                    (f"sport {self.port}", ["match", "ip", "sport", str(self.port), "0xffff"])]
        dst = ["match", "ip", "dst", f"{self.ip}/32"]
        if self.port is None:
            return [(f"dst {self.ip}", dst)]
        return [(f"dst {self.ip} dport {self.port}", [*dst, "match", "ip", "dport", str(self.port), "0xffff"]),
                (f"dst {self.ip} sport {self.port}", [*dst, "match", "ip", "sport", str(self.port), "0xffff"])]

    @property
    def both_ways_here(self) -> bool:
        """Port-only matches see both directions of a link on this one interface (``lo``)."""
        return self.ip is None

    @property
    def port_fields(self) -> tuple[str, ...]:
        """The header fields ``port`` is matched in (nft): both directions of the link."""
        return ("dport", "sport")


def check_peers(peers: Sequence[PeerMatch], ssh_ports: Sequence[int]) -> tuple[PeerMatch, ...]:
    if not peers:
        raise ConfigError("a fault needs at least one peer (IP and/or port) to act on")
    for p in peers:
        if p.port is not None and p.port in ssh_ports:
            raise ConfigError(f"peer {p.label}: refusing to match SSH port {p.port}")
    return tuple(peers)


class TcMechanism(HostFaultBase):
    """Rate caps (and delay/loss where the kernel has netem) on one host's interface."""

    name = "tc"

    def __init__(
        self,
        ex: Executor,
        interface: str,
        peers: Sequence[PeerMatch],
        *,
        run: RunInfo | None = None,
        ssh_ports: Sequence[int] = (22,),
        state_dir: str = STATE_DIR,
        capabilities: Capabilities | None = None,
        queue_s: float = QUEUE_S,
        keeper: LeaseKeeper | None = None,
        scope: str = "",
    ) -> None:
        if queue_s <= 0:
            raise ConfigError(f"queue_s must be positive, got {queue_s!r}")
        self.ex = ex
        self.interface = interface
        self.queue_s = queue_s
        ports = {22, *ssh_ports, getattr(ex, "ssh_port", 22)}
        self.ssh_ports = tuple(sorted(ports))
        self.peers = check_peers(peers, self.ssh_ports)
        self.run = run or RunInfo.current()
        self.deadman = None
        self._state_dir = state_dir
        self._caps = capabilities
        self.keeper = keeper
        self.scope = scope

    @property
    def key(self) -> str:
        return f"tc-{self.interface}"

    def supports(self, kind: FaultKind) -> bool:
        if kind is FaultKind.RATE:
            return self.caps.htb and self.caps.u32
        return self.caps.netem and self.caps.htb and self.caps.u32

    # -- inspection --
    def qdiscs(self, interface: str | None = None) -> list[dict[str, Any]]:
        argv = ["tc", "-j", "qdisc", "show"] + (["dev", interface] if interface else [])
        res = self.ex.run(argv, timeout=15, check=False)
        if res.exit_status != 0 and interface and not self._exists(interface):
            return []  # no such interface: nothing of ours can be on it
        return json.loads(res.check().stdout or "[]")

    def _exists(self, interface: str) -> bool:
        return self.ex.run(["ip", "link", "show", "dev", interface], check=False, timeout=15).exit_status == 0

    def root_qdisc(self) -> dict[str, Any] | None:
        for q in self.qdiscs(self.interface):
            if q.get("root"):
                return q
        return None

    def installed(self) -> bool:
        """Is our qdisc the root of the interface? (decided from ``tc -j`` output, not error text)"""
        return self._is_ours(self.root_qdisc())

    # -- plan --
    def _mtu(self) -> int:
        res = self.ex.run(["ip", "-j", "link", "show", "dev", self.interface], check=False, timeout=15)
        if res.exit_status != 0:
            raise FaultError(self.ex.host, f"no network interface {self.interface!r} on this host",
                             command=res.command, exit_status=res.exit_status, stderr=res.stderr)
        return int(json.loads(res.stdout)[0].get("mtu", 1500))

    def plan(self, level: Level, mtu: int = 1500) -> list[str]:
        """The ``tc -batch`` lines for ``level`` (no ``tc`` prefix)."""
        dev = self.interface
        lines = [
            f"qdisc add dev {dev} root handle {HANDLE} htb default 1",
            f"class add dev {dev} parent {HANDLE} classid {_UNSHAPED} htb rate 100gbit quantum 200000",
        ]
        for port in self.ssh_ports:
            for field in ("sport", "dport"):
                lines.append(f"filter add dev {dev} parent {HANDLE} protocol ip prio 1 u32 "
                             f"match ip protocol 6 0xff match ip {field} {port} 0xffff flowid {_UNSHAPED}")
        minor = _FIRST_CLASS
        for peer in self.peers:
            for _label, match in peer.directions():
                cls = f"{_MAJOR}:{minor:x}"
                lines.append(f"class add dev {dev} parent {HANDLE} classid {cls} htb " + self._class_args(level, mtu))
                lines.append(f"qdisc add dev {dev} parent {cls} handle {minor:x}: "
                             + self._leaf(level, peer, mtu, self.queue_s))
                lines.append(f"filter add dev {dev} parent {HANDLE} protocol ip prio 2 u32 "
                             f"{' '.join(match)} flowid {cls}")
                minor += 1
        return lines

    @staticmethod
    def _class_args(level: Level, mtu: int) -> str:
        if level.kind is FaultKind.RATE:
            burst = max(mtu, int(level.value * 1e6 / 8 * BURST_S))
            return f"rate {level.value:g}mbit ceil {level.value:g}mbit burst {burst} cburst {burst}"
        return "rate 100gbit quantum 200000"

    @staticmethod
    def _leaf(level: Level, peer: PeerMatch, mtu: int, queue_s: float) -> str:
        if level.kind is FaultKind.RATE:
            # a bounded queue, so a cap does not turn into seconds of bufferbloat
            limit = max(8 * mtu, int(level.value * 1e6 / 8 * queue_s))
            return f"bfifo limit {limit}"
        if level.kind is FaultKind.LOSS:
            return f"netem loss {level.value:g}%"
        share = 2.0 if peer.both_ways_here else 1.0
        delay, jitter = level.value / share, level.jitter / share
        # netem's default limit (1000 packets) drops at high rate x delay: size it from both
        packets = math.ceil(1.5 * _ASSUMED_LINE_RATE * (delay + jitter) / 1000 / (8 * min(mtu, 1500)))
        args = f"netem delay {delay:g}ms"
        if jitter:
            args += f" {jitter:g}ms distribution normal"
        return args + f" limit {max(1000, packets)}"

    # -- Mechanism protocol --
    def apply(self, fault: Fault, *, deadline_s: float) -> Evidence:
        level = fault.level
        if level.is_baseline:
            self.clear(fault)
            return Evidence(self.name, notes=("baseline: no fault installed",), verified=True)
        if level.kind is not FaultKind.RATE and not self.caps.netem:
            other = "toxiproxy" if level.kind is FaultKind.DELAY else "nft"
            raise FaultError(
                self.ex.host,
                f"cannot apply {level.kind.value} {level.label} with tc: this kernel has no sch_netem "
                f"(the capability probe could not add a netem qdisc on a throwaway device); "
                f"use the {other} mechanism for {level.kind.value} on this host",
            )
        if not (self.caps.htb and self.caps.u32):
            raise FaultError(self.ex.host, "cannot shape with tc: the kernel lacks the htb qdisc or u32 filter "
                                           f"(probe: {self.caps.label})")
        mtu = self._mtu()
        root, state = self.root_qdisc(), self._deadman().read(self.key)
        self._refuse_foreign(root, state)
        self._clear(state, ours=self._is_ours(root))
        lines = self.plan(level, mtu)
        clear_script = shlex.join(["tc", "qdisc", "del", "dev", self.interface, "root", "handle", HANDLE])
        self._arm(mechanism=self.name, run=self.run, clear_script=clear_script, after_s=deadline_s,
                  description=f"{fault.label} on {self.interface}")
        try:
            self.ex.run(["tc", "-batch", "-"], input="\n".join(lines) + "\n", timeout=30)
        except CommandError as exc:
            self.clear(fault)
            raise FaultError(self.ex.host, f"tc refused {fault.label} on {self.interface}", command="tc -batch -",
                             exit_status=exc.exit_status, stderr=exc.stderr) from None
        if not self.installed():
            self.clear(fault)
            raise FaultError(self.ex.host, f"tc accepted {fault.label} but {HANDLE} is not the root qdisc of "
                                           f"{self.interface}")
        return Evidence(
            self.name,
            applied=tuple(f"tc {ln}" for ln in lines),
            notes=(f"egress of {self.interface} on {self.ex.host}; peers {', '.join(p.label for p in self.peers)}",
                   f"SSH ports {', '.join(map(str, self.ssh_ports))} go to the unshaped class",
                   self._timer_note(deadline_s)),
        )

    @staticmethod
    def _is_ours(root: dict[str, Any] | None) -> bool:
        return bool(root and root.get("handle") == HANDLE and root.get("kind") == "htb")

    def _refuse_foreign(self, root: dict[str, Any] | None, state: FaultState | None) -> None:
        if root is None or root.get("handle") == "0:":
            return  # the kernel's default root
        if not self._is_ours(root):
            raise FaultError(self.ex.host, f"{self.interface} already has a root qdisc {root.get('kind')} "
                                           f"{root.get('handle')} that is not wanbench's; refusing to replace it")
        if state is not None and state.run.run_id != self.run.run_id and not state.is_stale():
            raise FaultError(self.ex.host, f"{self.interface} is shaped by another live wanbench run "
                                           f"{state.run.run_id} (runner {state.run.runner_host} pid "
                                           f"{state.run.runner_pid}) until its dead-man at {state.deadline:.0f}")

    def clear(self, fault: Fault | None = None) -> None:
        """Remove our qdisc and disarm our dead-man; nothing there is fine."""
        self._clear(self._deadman().read(self.key), ours=self.installed())

    def _clear(self, state: FaultState | None, *, ours: bool) -> None:
        """``ours``: our qdisc is the interface's root right now (as just read from ``tc -j``)."""
        self._release()
        if state is not None and state.run.run_id != self.run.run_id and not state.is_stale():
            return  # another live run's fault: not ours to clear
        if ours:
            self.ex.run(["tc", "qdisc", "del", "dev", self.interface, "root", "handle", HANDLE], timeout=15)
        self._deadman().disarm(self.key, state)
        if ours and self.installed():
            raise FaultError(self.ex.host, f"{HANDLE} still on {self.interface} after clearing it")

    def sweep(self) -> list[str]:
        """Remove qdiscs and state files of dead runs on any interface of this host."""
        dm = self._deadman()
        removed: list[str] = []
        ours = {q["dev"] for q in self.qdiscs()
                if q.get("root") and q.get("handle") == HANDLE and q.get("kind") == "htb"}
        keys = set(dm.keys("tc-")) | {f"tc-{dev}" for dev in ours}
        for key in sorted(keys):
            dev = key[len("tc-"):]
            state = dm.read(key)
            if state is not None and not state.is_stale():
                continue
            if dev in ours:
                self.ex.run(["tc", "qdisc", "del", "dev", dev, "root", "handle", HANDLE], check=False, timeout=15)
                who = f"run {state.run.run_id}" if state else "unknown run (no state file)"
                removed.append(f"{self.ex.host}: tc qdisc {HANDLE} on {dev} of {who}")
            dm.disarm(key, state)
        return removed
