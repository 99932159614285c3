"""Outages on the lab (``wanbench.faults.outage``): a partition is an nftables
drop on the component's Toxiproxy ports (the nft mechanism, with its dead-man
lease), a pause a signal to the PID the lab recorded (leased by a local
dead-man that sends SIGCONT), a restart ``Lab.restart_component``."""

from __future__ import annotations

import dataclasses
import os
import shlex
import signal
import socket
from collections.abc import Callable
from typing import Any

from wanbench.errors import FaultError, FaultVerificationError
from wanbench.executors.local import LocalExecutor
from wanbench.faults.base import Evidence, Fault, FaultKind
from wanbench.faults.deadman import DeadMan, RunInfo
from wanbench.faults.lease import DeadManLease, LeaseKeeper
from wanbench.faults.outage import PARTITION_LEVEL, Outage, OutageKind
from wanbench.faults.probe import Capabilities
from wanbench.procs import proc_state
from wanbench.profiles.lab.faults import lab_link_mechanism, lab_scope
from wanbench.profiles.lab.servers import Lab
from wanbench.topology import Scenario
from wanbench.wait import wait_for


def _port_answers(port: int, timeout: float = 0.5) -> bool:
    """Does a TCP connect to 127.0.0.1:port complete? (a black hole times out)"""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True
    except OSError:
        return False


class LabOutages:
    """Partition, pause and restart of one lab component (proxy, primary, replica):
    the lab's ``Outages`` (``wanbench.profiles.capabilities``), which ``LabCluster``
    makes with its own tag, leases and kernel probe (``kernel``: asked on first use)."""

    def __init__(self, lab: Lab, *, tag: str, keeper: LeaseKeeper, kernel: Callable[[], Capabilities],
                 grace_s: float) -> None:
        self.lab = lab
        self.topology = lab.topology
        self.tag = tag
        self.kernel = kernel
        self.grace_s = grace_s
        self.run = RunInfo.current(f"lab{tag}")
        self.keeper = keeper
        self._deadman = DeadMan(LocalExecutor("localhost"), state_dir=str(self.lab.run_dir / "deadman"),
                                lease_s=self.keeper.lease_s)
        self._partition: dict[Outage, Any] = {}
        self._paused: dict[Outage, int] = {}

    def outage_for(self, scenario: Scenario, kind: OutageKind, hold_s: float) -> Outage:
        targets = self.topology.select(scenario.target)
        if len(targets) != 1:
            raise FaultError("lab", f"scenario {scenario.name!r} selects {len(targets)} components, expected 1")
        return Outage(kind, targets[0].name, hold_s)

    def ports(self, outage: Outage) -> list[int]:
        return [ln.listen for ln in self.topology.links_of(outage.component) if ln.listen]

    def render(self, outage: Outage) -> str:
        """What apply would do (the lab has no dry run; this is for the evidence and docs)."""
        if outage.kind is OutageKind.PARTITION:
            return (f"nft drop on lo, ports {', '.join(map(str, self.ports(outage)))} "
                    f"(links of {outage.component}), both directions")
        if outage.kind is OutageKind.PAUSE:
            return f"kill -STOP {self.lab.pid_of(outage.component)}; hold {outage.hold_s:g}s; kill -CONT"
        return f"stop {self.lab.service_of(outage.component)} (SIGTERM); hold {outage.hold_s:g}s; start, wait ready"

    def apply(self, outage: Outage) -> Evidence:
        try:
            if outage.kind is OutageKind.PARTITION:
                return self._apply_partition(outage)
            if outage.kind is OutageKind.PAUSE:
                return self._apply_pause(outage)
            old = self.lab.stop_component(outage.component)
            return Evidence("lab restart", applied=(f"stopped {outage.component} pid {old} (SIGTERM)",),
                            measured={"old_pid": old}, verified=True,
                            notes=("no lease: a runner killed now leaves it stopped; "
                                   "`python -m wanbench lab up` restarts the lab",))
        except BaseException:
            self.clear(outage, Evidence("none"))
            raise

    def clear(self, outage: Outage, evidence: Evidence) -> Evidence:
        if outage.kind is OutageKind.PARTITION:
            mech = self._partition.pop(outage, None)
            if mech is not None:
                fault = Fault(outage.component, PARTITION_LEVEL)
                mech.clear(fault)
                if mech.inner(fault).installed():
                    raise FaultVerificationError("lab", f"partition of {outage.component} still in nft after clear")
            notes = "cleared: nft table removed"
        elif outage.kind is OutageKind.PAUSE:
            pid = self._paused.pop(outage, None)
            if pid is not None:
                self.keeper.release(self._lease_key(outage))
                os.kill(pid, signal.SIGCONT)
                self._deadman.disarm(self._lease_key(outage))
                wait_for(lambda: proc_state(pid) not in ("T", "t"), what=f"pid {pid} to run again", timeout=10)
            notes = "cleared: SIGCONT sent, process running"
        else:
            h = self.lab.handle(self.lab.service_of(outage.component))
            if h is not None and h.alive():
                return dataclasses.replace(evidence, notes=(*evidence.notes, "already running"))
            new = self.lab.start_component(outage.component)
            measured = {**evidence.measured, "new_pid": new}
            return dataclasses.replace(evidence, measured=measured,
                                       notes=(*evidence.notes, f"started again as pid {new}, lab ready"))
        return dataclasses.replace(evidence, notes=(*evidence.notes, notes))

    def _lease_key(self, outage: Outage) -> str:
        return f"pause-{self.run.run_id}-{outage.component}"

    def _apply_partition(self, outage: Outage) -> Evidence:
        kernel = self.kernel()
        if not (kernel.nft and kernel.nft_numgen):
            raise FaultError("lab", f"a partition needs nftables here (probe: {kernel.label})")
        mech = lab_link_mechanism(FaultKind.LOSS, self.topology, tag=self.tag, mechanism="nft",
                                  keeper=self.keeper, scope=lab_scope(self.lab.port_base))
        fault = Fault(outage.component, PARTITION_LEVEL)
        self._partition[outage] = mech
        ev = mech.apply(fault, deadline_s=outage.hold_s + self.grace_s)
        ports = mech.ports(fault)
        # A connect through every partitioned link must time out (a drop, not a refusal).
        answered = [p for p in ports if _port_answers(p)]
        if answered:
            raise FaultVerificationError("lab", f"partition of {outage.component}: ports {answered} still answer")
        return dataclasses.replace(ev, measured={"ports": ports, "connect_timed_out": ports}, verified=True)

    def _apply_pause(self, outage: Outage) -> Evidence:
        pid = self.lab.pid_of(outage.component)
        key = self._lease_key(outage)
        state = self._deadman.arm(key, mechanism="pause", run=self.run,
                                  clear_script=shlex.join(["kill", "-CONT", str(pid)]),
                                  after_s=outage.hold_s + self.grace_s, description=f"SIGSTOP of {outage.component}")
        self.keeper.hold(key, DeadManLease(self._deadman, state))
        os.kill(pid, signal.SIGSTOP)
        self._paused[outage] = pid
        wait_for(lambda: proc_state(pid) in ("T", "t"), what=f"pid {pid} to stop", timeout=10)
        return Evidence("signal", applied=(f"kill -STOP {pid} ({outage.component})",),
                        measured={"pid": pid, "state": proc_state(pid)}, verified=True,
                        notes=(f"lease: kill -CONT {pid} {self.keeper.lease_s:g}s after the runner stops renewing "
                               f"it, {outage.hold_s + self.grace_s:g}s at the latest",))


# -- TiDB over SSH ---------------------------------------------------------------------------------------------------


