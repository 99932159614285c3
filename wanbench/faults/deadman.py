"""Dead-man timers: a fault clears itself on its host even if the runner dies.

Before a mechanism installs a fault it arms a timer *on the faulted host*
(``systemd-run --on-active`` when systemd is PID 1 there, else a detached
``setsid sh -c 'sleep N; clear'``). The timer clears only if the host's state
file (``/run/wanbench/<key>.json``) still carries its token, so a timer that
outlives its fault (cleared normally, or re-applied) does nothing. A normal
clear disarms it.

The state file also names the run and the runner (host, PID, process start
time) so that ``sweep`` can tell a dead run's leftovers from a live run's fault.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import socket
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import FaultError
from wanbench.executors.base import Executor
from wanbench.faults.probe import Capabilities, probe

STATE_DIR = "/run/wanbench"


def new_run_id() -> str:
    return secrets.token_hex(4)


def _proc_start(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@dataclass(frozen=True)
class RunInfo:
    """Who installs faults: a run id plus the runner process, to detect dead runs."""

    run_id: str
    runner_host: str
    runner_pid: int
    runner_start: int

    @classmethod
    def current(cls, run_id: str | None = None) -> RunInfo:
        pid = os.getpid()
        return cls(run_id or new_run_id(), socket.gethostname(), pid, _proc_start(pid) or 0)

    def runner_alive(self) -> bool | None:
        """True/False when the runner was on this machine; None when we cannot tell."""
        if self.runner_host != socket.gethostname():
            return None
        return _proc_start(self.runner_pid) == self.runner_start


@dataclass(frozen=True)
class FaultState:
    key: str
    mechanism: str
    run: RunInfo
    token: str
    deadline: float  # epoch seconds after which the dead-man fires
    clear_script: str
    timer: str  # "setsid:<pid>" or "systemd:<unit>" or "none"
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FaultState:
        return cls(**{**data, "run": RunInfo(**data["run"])})

    def is_stale(self, now: float | None = None) -> bool:
        """A dead run's leftover: past its deadline, or its runner is known to be gone."""
        if (now or time.time()) > self.deadline:
            return True
        return self.run.runner_alive() is False


class DeadMan:
    """Arms/disarms timers and keeps state files on one host."""

    def __init__(self, ex: Executor, *, state_dir: str = STATE_DIR, systemd: bool = False) -> None:
        self.ex = ex
        self.state_dir = state_dir
        self.systemd = systemd

    def path(self, key: str) -> str:
        return f"{self.state_dir}/{key}.json"

    def arm(self, key: str, *, mechanism: str, run: RunInfo, clear_script: str, after_s: float,
            description: str = "") -> FaultState:
        """Write the state file, then start the timer; returns the state as recorded."""
        if after_s <= 0:
            raise FaultError(self.ex.host, f"dead-man delay must be positive, got {after_s!r}")
        token = f"wbdm-{run.run_id}-{secrets.token_hex(4)}"
        path = self.path(key)
        seconds = max(1, int(after_s + 0.999))
        inner = (f"sleep {seconds}; if grep -qF {shlex.quote(token)} {shlex.quote(path)} 2>/dev/null; "
                 f"then {clear_script}; rm -f {shlex.quote(path)}; fi")
        timer = f"systemd:{token}" if self.systemd else "setsid:@PID@"
        state = FaultState(key, mechanism, run, token, time.time() + after_s, clear_script, timer, description)
        # one round trip: state file first (the timer sleeps >= 1 s before it reads it), then the timer,
        # whose PID is filled into the state file
        if self.systemd:
            start = ('systemd-run --quiet --collect --unit="$5" --on-active="$6"s '
                     '--timer-property=AccuracySec=100ms sh -c "$1" || exit 1; pid=0')
        else:
            start = 'setsid sh -c "$1" wanbench-deadman </dev/null >/dev/null 2>&1 & pid=$!'
        script = ('umask 077 && mkdir -p "$2" && printf %s "$3" > "$4.tmp" && mv "$4.tmp" "$4" || exit 1; '
                  f'{start}; printf %s "$3" | sed "s/@PID@/$pid/" > "$4.tmp" && mv "$4.tmp" "$4"; echo "$pid"')
        res = self.ex.run(["sh", "-c", script, "sh", inner, self.state_dir, json.dumps(state.to_json()), path,
                           token, str(seconds)], timeout=20)
        if not self.systemd:
            state = FaultState(key, mechanism, run, token, state.deadline, clear_script,
                               f"setsid:{int(res.stdout.strip())}", description)
        return state

    def disarm(self, key: str, state: FaultState | None = None) -> None:
        """Stop the timer of ``key`` (if any) and delete its state file; tolerates nothing there.

        Pass ``state`` when the caller has just read it (saves a round trip).
        """
        state = state or self.read(key)
        self.stop_timer(state, remove=self.path(key))

    def stop_timer(self, state: FaultState | None, *, remove: str = "") -> None:
        """Stop ``state``'s timer (only if that PID/unit is still ours) and delete ``remove``."""
        kind, _, ref = state.timer.partition(":") if state else ("none", "", "")
        if kind == "systemd":
            self.ex.run(["systemctl", "stop", f"{ref}.timer", f"{ref}.service"], check=False, timeout=20)
        # the setsid timer is killed as a process group, but only if that PID still runs our token
        self.ex.run(["sh", "-c", 'if [ "$1" = setsid ] && grep -qF "$3" /proc/"$2"/cmdline 2>/dev/null; '
                     'then kill -TERM -"$2"; fi; [ -z "$4" ] || rm -f "$4"',
                     "sh", kind, ref or "0", state.token if state else "-", remove], timeout=15)

    def read(self, key: str) -> FaultState | None:
        res = self.ex.run(["cat", self.path(key)], check=False, timeout=15)
        if res.exit_status != 0:
            return None
        try:
            return FaultState.from_json(json.loads(res.stdout))
        except (ValueError, TypeError, KeyError):
            return None

    def keys(self, prefix: str) -> list[str]:
        """Keys of the state files whose key starts with ``prefix``."""
        res = self.ex.run(["sh", "-c", 'cd "$1" 2>/dev/null && ls -1 || true', "sh", self.state_dir], timeout=15)
        return sorted(n[: -len(".json")] for n in res.stdout.split() if n.startswith(prefix) and n.endswith(".json"))



class HostFaultBase:
    """What every on-host mechanism (tc, nft) shares: the host's executor,
    its capabilities (probed once, never guessed from error text) and the
    dead-man that clears the fault if the runner dies."""

    ex: Executor
    deadman: DeadMan | None
    _state_dir: str
    _caps: Capabilities | None

    @property
    def caps(self) -> Capabilities:
        if self._caps is None:
            self._caps = probe(self.ex)
        return self._caps

    def _deadman(self) -> DeadMan:
        if self.deadman is None:
            self.deadman = DeadMan(self.ex, state_dir=self._state_dir, systemd=self.caps.systemd)
        return self.deadman
