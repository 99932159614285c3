"""Outages on a TiDB cluster (``wanbench.faults.outage``), over SSH, tiup
style: ``systemctl stop|start <role>-<port>.service``, ``kill -STOP|-CONT``
of the unit's MainPID, and nft drop scoped by the fault plan
(``wanbench.profiles.tidb.plan``); ``render`` prints them all for
``--dry-run`` and runs nothing."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import CommandError, ConfigError, FaultError, FaultVerificationError
from wanbench.executors.base import Executor
from wanbench.faults.base import Evidence, Fault
from wanbench.faults.deadman import STATE_DIR, DeadMan, RunInfo
from wanbench.faults.lease import DeadManLease, LeaseKeeper
from wanbench.faults.nft import NftMechanism
from wanbench.faults.outage import PARTITION_LEVEL, TARGET_LABEL, Outage, OutageKind
from wanbench.faults.probe import probe
from wanbench.faults.tc import PeerMatch
from wanbench.procs import stat_fields
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.plan import plan_fault
from wanbench.profiles.tidb.views import fault_components
from wanbench.topology import Component, Scenario, Topology
from wanbench.wait import wait_for


def unit_name(c: Component) -> str:
    """tiup's systemd unit of an instance: ``tikv-20160.service``, ``pd-2379.service``."""
    return f"{c.role}-{c.port}.service"


def pick_target(topology: Topology, scenario: Scenario) -> tuple[Topology, Component]:
    """The ONE instance an availability scenario faults: the first the selector names (by name).

    Stopping every TiKV at once tests nothing but an outage; one instance is
    what a failure looks like. The chosen instance gets ``TARGET_LABEL`` so the
    fault plan can select it alone.
    """
    eligible = {c.name for c in fault_components(topology)}
    found = sorted((c for c in topology.select(scenario.target) if c.name in eligible), key=lambda c: c.name)
    if not found:
        raise ConfigError(f"scenario {scenario.name}: target {scenario.target!r} selects no component of cluster "
                          f"{topology.name!r} (roles: {', '.join(topology.roles())})")
    chosen = found[0]
    marked = dataclasses.replace(chosen, labels=chosen.labels | {TARGET_LABEL})
    comps = tuple(marked if c.name == chosen.name else c for c in topology.components)
    return dataclasses.replace(topology, components=comps), marked


@dataclass(frozen=True)
class OutagePlan:
    """Everything one outage does on its host, in order, and what clears it."""

    outage: Outage
    host: str
    ssh_port: int
    unit: str
    apply: tuple[tuple[str, ...], ...]
    clear: tuple[tuple[str, ...], ...]
    peers: tuple[PeerMatch, ...] = ()
    nft_script: str = ""
    shares_host_with: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"outage": self.outage.to_json(), "host": self.host, "ssh_port": self.ssh_port, "unit": self.unit,
                "apply": [shlex.join(c) for c in self.apply], "clear": [shlex.join(c) for c in self.clear],
                "peers": [p.label for p in self.peers], "shares_host_with": list(self.shares_host_with),
                "notes": list(self.notes)}


_PAUSE_SCRIPT = ('pid=$("$2" show -p MainPID --value "$1") && [ "${pid:-0}" -gt 0 ] && '
                 'kill -STOP "$pid" && echo "$pid"')


class TidbOutages:
    """Availability faults on a tiup-deployed cluster, over SSH.

    ``systemctl`` is the service-control command on the hosts (an argv
    prefix: ``("sudo", "systemctl")`` for a non-root SSH user with sudo
    rights; self-tests pass a stand-in with systemctl's command line).
    """

    def __init__(
        self,
        topology: Topology,
        *,
        executors: Mapping[str, Executor] | None = None,
        dry_run: bool = False,
        load_host: str | None = None,
        grace_s: float = 60.0,
        run: RunInfo | None = None,
        systemctl: Sequence[str] = ("systemctl",),
        state_dir_for: Callable[[str], str] | None = None,
        keeper: LeaseKeeper | None = None,
    ) -> None:
        self.topology = topology
        self.executors = executors
        self.dry_run = dry_run
        self.settings = cluster_settings(topology)
        self.load_host = load_host or self.settings.load_host
        self.grace_s = grace_s
        self.run = run or RunInfo.current()
        self.systemctl = tuple(systemctl)
        self.state_dir_for = state_dir_for
        self.keeper = keeper
        self._plans: dict[Outage, OutagePlan] = {}
        self._nft: dict[Outage, NftMechanism] = {}
        self._paused: dict[Outage, int] = {}
        self._leased: dict[Outage, DeadMan] = {}

    def plan(self, scenario: Scenario, kind: OutageKind, hold_s: float,
             topology: Topology | None = None) -> OutagePlan:
        """Pure: which instance, which host, which commands (``topology``: the live one, PD leader known)."""
        topo, target = pick_target(topology or self.topology, scenario)
        outage = Outage(kind, target.name, hold_s)
        unit = unit_name(target)
        ssh_port = self.settings.ssh_port_of(target.host)
        others = tuple(c.name for c in topo.components if c.host == target.host and c.name != target.name)
        sc = self.systemctl
        peers: tuple[PeerMatch, ...] = ()
        script = ""
        notes: list[str] = []
        if kind is OutageKind.RESTART:
            apply_cmds: tuple[tuple[str, ...], ...] = ((*sc, "stop", unit),)
            clear_cmds: tuple[tuple[str, ...], ...] = ((*sc, "start", unit),)
        elif kind is OutageKind.PAUSE:
            apply_cmds = (("sh", "-c", _PAUSE_SCRIPT, "sh", unit, shlex.join(sc)),)
            clear_cmds = (("kill", "-CONT", "<MainPID>"),)
            if len(sc) > 1:
                raise ConfigError("pause needs a single-word service-control command (run as root for pause)")
        else:
            scoped = dataclasses.replace(scenario, target=f"{target.role}:{TARGET_LABEL}")
            fplan = plan_fault(scoped, topo, PARTITION_LEVEL, load_host=self.load_host)
            hp = fplan.host(target.host)
            peers = tuple(dict.fromkeys(PeerMatch(ip=m.dst, port=m.src_port or m.dst_port) for m in hp.matches))
            if not peers:
                raise ConfigError(f"{target.name}: no remote peer to partition it from")
            nft = NftMechanism(_Refuse(target.host), peers, run=self.run, ssh_ports=(ssh_port,))
            script = nft.plan(PARTITION_LEVEL.value)
            apply_cmds = (("nft", "-f", "-"),)
            clear_cmds = (("nft", "delete", "table", "inet", nft.table),)
            notes += list(fplan.notes) + list(hp.collateral)
            notes.append("egress of the host (output hook): the target's replies and calls to its peers are "
                         "dropped, so no TCP exchange with them completes in either direction")
        plan = OutagePlan(outage, target.host, ssh_port, unit, apply_cmds, clear_cmds, peers, script, others,
                          tuple(notes))
        self._plans[outage] = plan
        return plan

    def render(self, plan: OutagePlan) -> str:
        """The dry run: every command on the host, and why; runs nothing."""
        o = plan.outage
        who = f"{self.settings.ssh_user}@" if self.settings.ssh_user else ""
        lines = [f"# dry run: availability {o.kind.value} of {o.component} for {o.hold_s:g}s; nothing below has "
                 f"been run",
                 f"== {plan.host} (ssh {who}{plan.host} port {plan.ssh_port}; the SSH port is never matched) ==",
                 f"# unit: {plan.unit}",
                 f"# shares the host with: {', '.join(plan.shares_host_with) or 'nothing'} (not touched)"]
        lines += [f"# note: {n}" for n in plan.notes]
        lines.append(f"# lease: a timer on {plan.host} runs the clear commands if the runner stops renewing it, "
                     f"{o.hold_s + self.grace_s:g}s later at the latest")
        lines.append("# apply:")
        for cmd in plan.apply:
            lines.append(shlex.join(cmd) + (" <<'EOF'" if plan.nft_script and cmd[:2] == ("nft", "-f") else ""))
            if plan.nft_script and cmd[:2] == ("nft", "-f"):
                lines += [*plan.nft_script.rstrip("\n").splitlines(), "EOF"]
        lines.append(f"# hold {o.hold_s:g}s, then clear:")
        lines += [shlex.join(cmd) for cmd in plan.clear]
        return "\n".join(lines) + "\n"

    # -- running -----------------------------------------------------------------------------------------
    def _ex(self, host: str) -> Executor:
        if self.dry_run or self.executors is None:
            raise FaultError(host, "dry run: no host is contacted")
        return self.executors[host]

    def _state_dir(self, host: str) -> str:
        return self.state_dir_for(host) if self.state_dir_for else STATE_DIR

    def _lease(self, plan: OutagePlan, clear_script: str) -> None:
        ex = self._ex(plan.host)
        dm = DeadMan(ex, state_dir=self._state_dir(plan.host), systemd=probe(ex).systemd,
                     lease_s=self.keeper.lease_s if self.keeper else None)
        key = self._key(plan.outage)
        state = dm.arm(key, mechanism=f"outage-{plan.outage.kind.value}", run=self.run,
                       clear_script=clear_script, after_s=plan.outage.hold_s + self.grace_s,
                       description=f"{plan.outage.label} on {plan.host}")
        self._leased[plan.outage] = dm
        if self.keeper is not None:
            self.keeper.hold(key, DeadManLease(dm, state))

    def _key(self, outage: Outage) -> str:
        safe = "".join(ch if ch.isalnum() else "_" for ch in outage.component)
        return f"outage-{self.run.run_id}-{outage.kind.value}-{safe}"

    def apply(self, outage: Outage) -> Evidence:
        plan = self._plans[outage]
        ex = self._ex(plan.host)
        try:
            if outage.kind is OutageKind.PARTITION:
                nft = NftMechanism(ex, plan.peers, run=self.run, ssh_ports=(plan.ssh_port,),
                                   state_dir=self._state_dir(plan.host), keeper=self.keeper)
                self._nft[outage] = nft
                ev = nft.apply(Fault(outage.component, PARTITION_LEVEL), deadline_s=outage.hold_s + self.grace_s)
                return dataclasses.replace(ev, measured={"plan": plan.to_json(), "table": nft.table},
                                           verified=nft.installed())
            if outage.kind is OutageKind.RESTART:
                self._lease(plan, shlex.join((*self.systemctl, "start", plan.unit)))
                ex.run(list(plan.apply[0]), timeout=120)
                if self._active(ex, plan.unit):
                    raise FaultVerificationError(plan.host, f"{plan.unit} is still active after stop")
                return Evidence("systemctl", applied=tuple(shlex.join(c) for c in plan.apply),
                                measured={"plan": plan.to_json(), "active": False}, verified=True)
            res = ex.run(list(plan.apply[0]), timeout=30)
            pid = int(res.stdout.strip().splitlines()[-1])
            self._paused[outage] = pid
            self._lease(plan, shlex.join(["kill", "-CONT", str(pid)]))
            state = self._pid_state(ex, pid)
            if state not in ("T", "t"):
                raise FaultVerificationError(plan.host, f"{plan.unit} MainPID {pid} is in state {state!r}, not stopped")
            return Evidence("signal", applied=(f"kill -STOP {pid} (MainPID of {plan.unit})",),
                            measured={"plan": plan.to_json(), "pid": pid, "state": state}, verified=True)
        except BaseException:
            self.clear(outage, Evidence("none"))
            raise

    def clear(self, outage: Outage, evidence: Evidence) -> Evidence:
        plan = self._plans[outage]
        ex = self._ex(plan.host)
        note = ""
        if outage.kind is OutageKind.PARTITION:
            nft = self._nft.pop(outage, None)
            if nft is not None:
                nft.clear(Fault(outage.component, PARTITION_LEVEL))
                note = f"nft table {nft.table} removed"
        elif outage.kind is OutageKind.RESTART:
            if not self._active(ex, plan.unit):
                ex.run([*self.systemctl, "start", plan.unit], timeout=180)
            wait_for(lambda: self._active(ex, plan.unit), what=f"{plan.unit} to be active", timeout=60,
                     transient=(CommandError,))
            note = f"{plan.unit} active again"
        else:
            pid = self._paused.pop(outage, None)
            if pid is not None:
                ex.run(["kill", "-CONT", str(pid)], check=False, timeout=30)
                state = self._pid_state(ex, pid)
                if state in ("T", "t"):
                    raise FaultVerificationError(plan.host, f"pid {pid} still stopped after SIGCONT")
                note = f"SIGCONT to {pid}"
        dm = self._leased.pop(outage, None)
        if dm is not None:
            if self.keeper is not None:
                self.keeper.release(self._key(outage))
            dm.disarm(self._key(outage))
        return dataclasses.replace(evidence, notes=(*evidence.notes, f"cleared: {note}" if note else "cleared"))

    def _active(self, ex: Executor, unit: str) -> bool:
        res = ex.run([*self.systemctl, "is-active", unit], check=False, timeout=30)
        return res.exit_status == 0 and res.stdout.strip() == "active"

    @staticmethod
    def _pid_state(ex: Executor, pid: int) -> str | None:
        res = ex.run(["cat", f"/proc/{pid}/stat"], check=False, timeout=15)
        fields = stat_fields(res.stdout) if res.exit_status == 0 else None
        return fields[0] if fields else None


class _Refuse:
    """Executor of a plan that must not run anything (rendering the nft script)."""

    def __init__(self, host: str) -> None:
        self.host = host

    def run(self, argv: Sequence[str], **_: Any) -> Any:
        raise FaultError(self.host, f"planning tried to run {' '.join(argv)!r}")

    def close(self) -> None:
        return None


