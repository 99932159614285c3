"""What every on-host mechanism (tc, nft) shares: the host's executor, its
capabilities, its dead-man timer and the lease that keeps the fault alive.
Its own module so that ``deadman`` (the timers) and ``lease`` (the runner's
renewals) need not know each other."""

from __future__ import annotations

from wanbench.executors.base import Executor
from wanbench.faults.deadman import DeadMan, RunInfo
from wanbench.faults.lease import DeadManLease, LeaseKeeper
from wanbench.faults.probe import Capabilities, probe


class HostFaultBase:
    """What every on-host mechanism (tc, nft) shares: the host's executor,
    its capabilities (probed once, never guessed from error text) and the
    dead-man that clears the fault if the runner dies."""

    ex: Executor
    deadman: DeadMan | None
    _state_dir: str
    _caps: Capabilities | None
    #: renews this mechanism's lease while the fault is in place; None: hard deadline only
    keeper: LeaseKeeper | None = None
    #: recorded in the state file, so that e.g. `lab down` finds the faults of its lab
    scope: str = ""

    @property
    def key(self) -> str:
        """Name of this fault's state file on the host."""
        raise NotImplementedError

    @property
    def caps(self) -> Capabilities:
        if self._caps is None:
            self._caps = probe(self.ex)
        return self._caps

    def _deadman(self) -> DeadMan:
        if self.deadman is None:
            self.deadman = DeadMan(self.ex, state_dir=self._state_dir, systemd=self.caps.systemd,
                                   lease_s=self.keeper.lease_s if self.keeper else None)
        return self.deadman

    @property
    def _lease_id(self) -> str:
        return f"{self.ex.host}/{self.key}"

    def _arm(self, *, mechanism: str, run: RunInfo, clear_script: str, after_s: float, description: str) -> None:
        """Arm the host's timer and, with a keeper, start renewing its lease."""
        dm = self._deadman()
        state = dm.arm(self.key, mechanism=mechanism, run=run, clear_script=clear_script, after_s=after_s,
                       description=description, scope=self.scope)
        if self.keeper is not None:
            self.keeper.hold(self._lease_id, DeadManLease(dm, state))

    def _timer_note(self, deadline_s: float) -> str:
        if self.keeper is None:
            return f"dead-man clears it after {deadline_s:g}s"
        return (f"dead-man clears it {self.keeper.lease_s:g}s after the runner's last lease renewal, "
                f"and after {deadline_s:g}s at the latest")

    def _release(self) -> None:
        """Stop renewing (before a normal clear, so the renewer does not take it for a lost lease)."""
        if self.keeper is not None:
            self.keeper.release(self._lease_id)
