"""The runner's side of fault leases: renew while alive, notice when a lease was lost.

Every fault in place holds a lease on its host (a state file whose mtime is
the last renewal, see ``deadman``; in the lab, a lease file the watchdog
reads for toxics). A ``LeaseKeeper`` renews all of them from one daemon
thread every third of the lease, and stops when the last one is released.

A lease is *lost* when the host no longer holds it (its timer or watchdog
cleared the fault) or when the runner went longer than the lease without a
successful renewal (it was stopped, or could not reach the host): from then
on the fault may be gone, so ``check()`` raises ``FaultLostError`` and the
cell is reported broken instead of measured under the fault.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from wanbench.errors import FaultError, FaultLostError, WanbenchError
from wanbench.faults.deadman import DeadMan, FaultState


class Lease(Protocol):
    @property
    def label(self) -> str: ...

    def renew(self) -> bool:
        """True: renewed; False: the host no longer holds it. Raises when it cannot tell."""
        ...


@dataclass(frozen=True)
class DeadManLease:
    """The lease of a tc/nft fault: its state file on the faulted host."""

    deadman: DeadMan
    state: FaultState

    @property
    def label(self) -> str:
        return f"{self.deadman.ex.host}: {self.state.description or self.state.key}"

    def renew(self) -> bool:
        return self.deadman.renew(self.state)


@dataclass(frozen=True)
class FileLease:
    """A lease file on this machine holding ``token`` (the lab watchdog's toxics)."""

    path: Path
    token: str
    label: str

    def renew(self) -> bool:
        try:
            if self.token not in self.path.read_text():
                return False
            os.utime(self.path)
        except FileNotFoundError:
            return False
        return True


class _Held:
    def __init__(self, lease: Lease, now: float) -> None:
        self.lease = lease
        self.last_ok = now
        self.lost: str | None = None


class LeaseKeeper:
    """Renews every held lease from a daemon thread; ``check()`` says whether one was lost."""

    def __init__(self, lease_s: float, *, period_s: float | None = None) -> None:
        if lease_s <= 0:
            raise FaultError("runner", f"a fault lease must be positive, got {lease_s!r}")
        self.lease_s = float(lease_s)
        self.period_s = period_s if period_s is not None else self.lease_s / 3
        self._held: dict[str, _Held] = {}
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def hold(self, key: str, lease: Lease) -> None:
        with self._cond:
            self._held[key] = _Held(lease, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="wanbench-lease", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def release(self, key: str) -> None:
        """Stop renewing ``key`` (the fault is being cleared normally); forget whether it was lost."""
        with self._cond:
            self._held.pop(key, None)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._held.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30)

    @property
    def held(self) -> list[str]:
        with self._cond:
            return sorted(self._held)

    def lost(self) -> dict[str, str]:
        """Lease label -> why it was lost, for every held lease that was."""
        with self._cond:
            return {h.lease.label: h.lost for h in self._held.values() if h.lost}

    def check(self) -> None:
        """Renew every lease now and raise ``FaultLostError`` if any was lost (now or before)."""
        self._renew_all()
        lost = self.lost()
        if lost:
            raise FaultLostError(
                "runner", "fault lease lost, so this cell was not measured under the fault: "
                + "; ".join(f"{label}: {why}" for label, why in sorted(lost.items())))

    def _renew_all(self) -> None:
        """Renew every lease, each host in its own thread: one unreachable host must not
        delay the others' renewals past their lease."""
        with self._cond:
            items = [(key, held) for key, held in self._held.items() if not held.lost]
        if len(items) <= 1:
            for item in items:
                self._renew_one(*item)
            return
        threads = [threading.Thread(target=self._renew_one, args=item, name=f"wanbench-lease-{item[0]}", daemon=True)
                   for item in items]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _renew_one(self, key: str, held: _Held) -> None:
        ok: bool | None
        error = ""
        try:
            ok = held.lease.renew()
        except Exception as exc:  # noqa: BLE001 - any failure means "cannot tell"; the thread must live on
            ok, error = None, str(exc) if isinstance(exc, WanbenchError) else f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        gap = now - held.last_ok
        with self._cond:
            if self._held.get(key) is not held:
                return  # released meanwhile: a normal clear
            if ok is False:
                held.lost = (f"the host no longer holds the lease (its dead-man, a sweep or `faults clear` removed "
                             f"it; last renewal {gap:.1f}s before, lease {self.lease_s:g}s)")
            elif gap > self.lease_s:
                why = "the runner was stopped or too slow" if ok else f"renewing failed: {error}"
                held.lost = f"not renewed for {gap:.1f}s, longer than the {self.lease_s:g}s lease ({why})"
            elif ok:
                held.last_ok = now

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._held:
                    self._thread = None
                    return
                self._cond.wait(self.period_s)
                if not self._held:
                    self._thread = None
                    return
            self._renew_all()
