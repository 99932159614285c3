"""Packet loss with nftables random drop, for kernels without sch_netem.

Everything lives in one table of our own, ``inet wanbench_<run>_<interface>``,
replaced atomically (one ``nft -f`` transaction) on apply and deleted on
clear. Egress only (the ``output`` hook): on ``lo`` both directions of a link
pass it, on a real host only what the host sends to its peers. SSH ports are
accepted before any loss rule. Counters in the ``loss`` chain give the
packets that met the rule and the packets dropped: the verification evidence.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from wanbench.errors import CommandError, ConfigError, FaultError
from wanbench.executors.base import Executor
from wanbench.faults.base import Evidence, Fault, FaultKind
from wanbench.faults.deadman import STATE_DIR, RunInfo
from wanbench.faults.host import HostFaultBase
from wanbench.faults.probe import Capabilities
from wanbench.faults.tc import PeerMatch, check_peers

if TYPE_CHECKING:
    from wanbench.faults.lease import LeaseKeeper

TABLE_PREFIX = "wanbench_"
PROBE_TABLE_PREFIX = f"{TABLE_PREFIX}probe_"  # faults/probe.py's table, named in its script
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


def loss_fraction(pct: float) -> tuple[int, int]:
    """``1`` -> (1, 100); ``0.1`` -> (1, 1000); ``0.25`` -> (25, 10000): drop when ``random mod M < K``."""
    if not 0 < pct <= 100:
        raise ConfigError(f"loss {pct!r}% must be more than 0% and at most 100%")
    for digits in range(5):
        scaled = pct * 10**digits
        if abs(scaled - round(scaled)) < 1e-9:
            return int(round(scaled)), 100 * 10**digits
    raise ConfigError(f"loss {pct!r}%: at most 4 decimals are supported (resolution 0.0001%)")


class NftMechanism(HostFaultBase):
    name = "nft"

    def __init__(
        self,
        ex: Executor,
        peers: Sequence[PeerMatch],
        *,
        interface: str | None = None,
        run: RunInfo | None = None,
        ssh_ports: Sequence[int] = (22,),
        state_dir: str = STATE_DIR,
        capabilities: Capabilities | None = None,
        keeper: LeaseKeeper | None = None,
        scope: str = "",
    ) -> None:
        if interface is not None and not _IFNAME.match(interface):
            raise ConfigError(f"{interface!r} is not a network interface name")
        self.ex = ex
        self.interface = interface
        self.ssh_ports = tuple(sorted({22, *ssh_ports, getattr(ex, "ssh_port", 22)}))
        self.peers = check_peers(peers, self.ssh_ports)
        self.run = run or RunInfo.current()
        self._state_dir = state_dir
        self._caps = capabilities
        self.deadman = None
        self.keeper = keeper
        self.scope = scope

    @property
    def table(self) -> str:
        suffix = re.sub(r"[^A-Za-z0-9_]", "_", self.interface or "all")
        return f"{TABLE_PREFIX}{self.run.run_id}_{suffix}"

    @property
    def key(self) -> str:
        return f"nft-{self.table}"

    def supports(self, kind: FaultKind) -> bool:
        return kind is FaultKind.LOSS and self.caps.nft and self.caps.nft_numgen

    # -- plan --
    def _matches(self) -> list[str]:
        oif = f'oifname "{self.interface}" ' if self.interface else ""
        out: list[str] = []
        for p in self.peers:
            dst = f"ip daddr {p.ip} " if p.ip else ""
            if p.port is None:
                out.append(f"{oif}{dst}".strip())
            else:
                for field in p.port_fields:
                    out.append(f"{oif}{dst}meta l4proto {{ tcp, udp }} th {field} {p.port}")
        return out

    def plan(self, pct: float) -> str:
        k, m = loss_fraction(pct)
        drop = "counter drop" if k == m else f"numgen random mod {m} < {k} counter drop"
        ssh = ", ".join(map(str, self.ssh_ports))
        t = self.table
        rules = "\n".join(f"    {match} jump loss" for match in self._matches())
        return (
            f"table inet {t}\n"
            f"delete table inet {t}\n"
            f"table inet {t} {{\n"
            f"  chain loss {{\n"
            f"    counter\n"
            f"    {drop}\n"
            f"  }}\n"
            f"  chain out {{\n"
            f"    type filter hook output priority filter; policy accept;\n"
            f"    meta l4proto tcp th sport {{ {ssh} }} accept\n"
            f"    meta l4proto tcp th dport {{ {ssh} }} accept\n"
            f"{rules}\n"
            f"  }}\n"
            f"}}\n"
        )

    # -- inspection --
    def tables(self) -> list[str]:
        res = self.ex.run(["nft", "-j", "list", "tables"], timeout=15)
        data = json.loads(res.stdout or "{}").get("nftables", [])
        return [d["table"]["name"] for d in data if "table" in d and d["table"].get("family") == "inet"]

    def installed(self) -> bool:
        return self.table in self.tables()

    def counters(self) -> tuple[int, int]:
        """(packets that met a loss rule, packets dropped) since apply."""
        res = self.ex.run(["nft", "-j", "list", "chain", "inet", self.table, "loss"], timeout=15)
        found: list[int] = []
        for item in json.loads(res.stdout).get("nftables", []):
            rule: dict[str, Any] = item.get("rule") or {}
            for expr in rule.get("expr", []):
                if "counter" in expr:
                    found.append(int(expr["counter"]["packets"]))
        if len(found) != 2:
            raise FaultError(self.ex.host, f"unexpected counters in table {self.table}: {found}")
        return found[0], found[1]

    # -- Mechanism protocol --
    def apply(self, fault: Fault, *, deadline_s: float) -> Evidence:
        level = fault.level
        if level.is_baseline:
            self.clear(fault)
            return Evidence(self.name, notes=("baseline: no fault installed",), verified=True)
        if level.kind is not FaultKind.LOSS:
            raise FaultError(self.ex.host, f"the nft mechanism only does packet loss, not {level.kind.value}; "
                                           "use tc for rate and toxiproxy (or tc with netem) for delay")
        if not (self.caps.nft and self.caps.nft_numgen):
            raise FaultError(self.ex.host, f"nftables with numgen is not usable here (probe: {self.caps.label})")
        script = self.plan(level.value)
        self.clear(fault)
        self._arm(mechanism=self.name, run=self.run,
                  clear_script=shlex.join(["nft", "delete", "table", "inet", self.table]),
                  after_s=deadline_s, description=f"{fault.label} via {self.table}")
        try:
            self.ex.run(["nft", "-f", "-"], input=script, timeout=30)
        except CommandError as exc:
            self.clear(fault)
            raise FaultError(self.ex.host, f"nft refused {fault.label}", command="nft -f -",
                             exit_status=exc.exit_status, stderr=exc.stderr) from None
        if not self.installed():
            self.clear(fault)
            raise FaultError(self.ex.host, f"nft accepted {fault.label} but table {self.table} is not there")
        return Evidence(
            self.name,
            applied=tuple(script.splitlines()),
            notes=(f"egress (output hook) of {self.interface or 'every interface'} on {self.ex.host}; "
                   f"peers {', '.join(p.label for p in self.peers)}",
                   f"SSH ports {', '.join(map(str, self.ssh_ports))} accepted before the loss rule",
                   self._timer_note(deadline_s)),
        )

    def clear(self, fault: Fault | None = None) -> None:
        self._release()
        if self.installed():
            self.ex.run(["nft", "delete", "table", "inet", self.table], timeout=15)
        self._deadman().disarm(self.key)
        if self.installed():
            raise FaultError(self.ex.host, f"table {self.table} still there after deleting it")

    def sweep(self) -> list[str]:
        """Delete ``wanbench_*`` tables (and state files) of dead runs on this host."""
        dm = self._deadman()
        removed: list[str] = []
        # The capability probe's throwaway table (wanbench_probe_*) lives for a
        # few milliseconds inside one shell call of another run: never ours to sweep.
        ours = {t for t in self.tables() if t.startswith(TABLE_PREFIX) and not t.startswith(PROBE_TABLE_PREFIX)}
        keys = set(dm.keys(f"nft-{TABLE_PREFIX}")) | {f"nft-{t}" for t in ours}
        for key in sorted(keys):
            table = key[len("nft-"):]
            state = dm.read(key)
            if state is not None and not state.is_stale():
                continue
            if table in ours:
                self.ex.run(["nft", "delete", "table", "inet", table], check=False, timeout=15)
                who = f"run {state.run.run_id}" if state else "unknown run (no state file)"
                removed.append(f"{self.ex.host}: nft table inet {table} of {who}")
            dm.disarm(key, state)
        return removed
