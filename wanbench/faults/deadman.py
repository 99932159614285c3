"""Dead-man timers on a lease: a fault clears itself on its host soon after the runner stops renewing it.

Before a mechanism installs a fault it arms a timer *on the faulted host*
(a transient ``systemd-run`` service when systemd is PID 1 there, else a
detached ``setsid sh -c`` loop). Every few seconds the timer looks at the
host's state file (``/run/wanbench/<key>.json``):

- its token gone or changed (cleared normally, or re-applied): the timer exits;
- the file not touched for the lease (``--fault-lease``): the runner is dead,
  stopped or cut off, so the timer removes the state file, then runs the very
  command ``clear()`` runs;
- the hard bound passed (the level's worst-case duration plus grace): same,
  even if the runner keeps renewing.

The runner renews by touching the state file (``os.utime`` on this machine,
one ``touch`` over the open SSH connection elsewhere; SSH is never faulted),
from ``wanbench.faults.lease``. The state file also names the run and the
runner (host, PID, process start time) so that ``sweep`` can tell a dead run's
leftovers from a live run's fault; the lease length and the scope (which lab)
sit beside it in ``<key>.lease``, so that runners from before leases can still
read the state file.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wanbench.errors import FaultError
from wanbench.executors.base import Executor
from wanbench.executors.local import LocalExecutor
from wanbench.procs import proc_start_time

STATE_DIR = "/run/wanbench"
#: default of ``--fault-lease``: how long a fault outlives the runner's last renewal
DEFAULT_LEASE_S = 30.0
#: whole-second mtimes on the host: a lease counts as lapsed only this much past its length
LEASE_SLACK_S = 2.0


def check_interval(seconds: int) -> int:
    """How often the host-side timer looks at its state file: a sixth of the lease, 1..5 s."""
    return max(1, min(5, seconds // 6))


def new_run_id() -> str:
    return secrets.token_hex(4)


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
        return cls(run_id or new_run_id(), socket.gethostname(), pid, proc_start_time(pid) or 0)

    def runner_alive(self) -> bool | None:
        """True/False when the runner was on this machine; None when we cannot tell."""
        if self.runner_host != socket.gethostname():
            return None
        return proc_start_time(self.runner_pid) == self.runner_start


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
    lease_s: float = 0.0  # 0: no lease, only the hard deadline
    scope: str = ""  # who else may clear it, e.g. "lab:23300" for `lab down`
    #: seconds since the last renewal, as the host saw it when the file was read (not stored)
    idle_s: float | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The state file: exactly the fields runners before leases know, so that their sweep can
        still read it (it refuses unknown fields and would take the fault for an orphan)."""
        out = asdict(self)
        for name in _META_FIELDS:
            del out[name]
        return out

    def meta_json(self) -> dict[str, Any]:
        """The fields kept beside the state file (``<key>.lease``)."""
        return {"lease_s": self.lease_s, "scope": self.scope}

    @classmethod
    def from_json(cls, data: dict[str, Any], meta: dict[str, Any] | None = None) -> FaultState:
        known = {f.name for f in fields(cls)} - {"idle_s", "run"}
        merged = {**data, **(meta or {})}
        return cls(**{k: v for k, v in merged.items() if k in known}, run=RunInfo(**data["run"]))

    def lease_lapsed(self) -> bool:
        return bool(self.lease_s) and self.idle_s is not None and self.idle_s > self.lease_s + LEASE_SLACK_S

    def is_stale(self, now: float | None = None) -> bool:
        """A dead run's leftover: past its hard deadline, its lease lapsed, or its runner is known to be gone."""
        if (now or time.time()) > self.deadline or self.lease_lapsed():
            return True
        return self.run.runner_alive() is False

    @property
    def label(self) -> str:
        lease = f", lease {self.lease_s:g}s" + (f" renewed {self.idle_s:.0f}s ago" if self.idle_s is not None else "")
        return (f"{self.key}: {self.description or self.mechanism} of run {self.run.run_id} (runner "
                f"{self.run.runner_host} pid {self.run.runner_pid}{lease if self.lease_s else ''}, hard bound "
                f"{time.strftime('%H:%M:%S', time.localtime(self.deadline))})")


#: FaultState fields not in the state file itself (see ``FaultState.to_json``)
_META_FIELDS = ("lease_s", "scope", "idle_s")
_META_MARK = "---wanbench-lease-meta---"


class DeadMan:
    """Arms/disarms timers and keeps state files on one host."""

    def __init__(self, ex: Executor, *, state_dir: str = STATE_DIR, systemd: bool = False,
                 lease_s: float | None = None) -> None:
        if lease_s is not None and lease_s <= 0:
            raise FaultError(ex.host, f"a fault lease must be positive, got {lease_s!r}")
        self.ex = ex
        self.state_dir = state_dir
        self.systemd = systemd
        self.lease_s = lease_s

    def path(self, key: str) -> str:
        return f"{self.state_dir}/{key}.json"

    def meta_path(self, key: str) -> str:
        return f"{self.state_dir}/{key}.lease"

    def arm(self, key: str, *, mechanism: str, run: RunInfo, clear_script: str, after_s: float,
            description: str = "", scope: str = "") -> FaultState:
        """Write the state file, then start the timer; returns the state as recorded.

        ``after_s`` is the hard bound; with a lease (``lease_s``) the timer fires
        as soon as the file has not been renewed for that long."""
        if after_s <= 0:
            raise FaultError(self.ex.host, f"dead-man delay must be positive, got {after_s!r}")
        token = f"wbdm-{run.run_id}-{secrets.token_hex(4)}"
        path = self.path(key)
        hard = max(1, math.ceil(after_s))
        lease = math.ceil(self.lease_s) if self.lease_s else 0
        q = shlex.quote
        # rm before the clear: a renewer that finds the file gone knows the fault is (being) removed
        inner = (f"end=$(( $(date +%s) + {hard} )); p={q(path)}; while sleep {check_interval(lease or hard)}; do "
                 f'grep -qF {q(token)} "$p" 2>/dev/null || exit 0; now=$(date +%s); '
                 f'if [ {lease} -gt 0 ]; then mt=$(stat -c %Y "$p" 2>/dev/null) || exit 0; else mt=$now; fi; '
                 f'if [ {lease} -gt 0 ] && [ $((now - mt)) -ge {lease} ] || [ "$now" -ge "$end" ]; then '
                 f'rm -f "$p" {q(self.meta_path(key))}; {clear_script}; exit 0; fi; done')
        timer = f"systemd:{token}" if self.systemd else "setsid:@PID@"
        state = FaultState(key, mechanism, run, token, time.time() + after_s, clear_script, timer, description,
                           float(self.lease_s or 0.0), scope)
        # one round trip: state file first (the timer sleeps >= 1 s before it reads it), then the timer,
        # whose PID is filled into the state file
        if self.systemd:
            start = 'systemd-run --quiet --collect --unit="$5" sh -c "$1" || exit 1; pid=0'
        else:
            start = 'setsid sh -c "$1" wanbench-deadman </dev/null >/dev/null 2>&1 & pid=$!'
        script = ('umask 077 && mkdir -p "$2" && printf %s "$7" > "$6" && printf %s "$3" > "$4.tmp" && '
                  'mv "$4.tmp" "$4" || exit 1; '
                  f'{start}; printf %s "$3" | sed "s/@PID@/$pid/" > "$4.tmp" && mv "$4.tmp" "$4"; echo "$pid"')
        res = self.ex.run(["sh", "-c", script, "sh", inner, self.state_dir, json.dumps(state.to_json()), path,
                           token, self.meta_path(key), json.dumps(state.meta_json())], timeout=20)
        if not self.systemd:
            state = replace(state, timer=f"setsid:{int(res.stdout.strip())}")
        return state

    def renew(self, state: FaultState) -> bool:
        """Touch ``state``'s file if it still carries its token: True renewed, False gone (cleared).

        Raises ``FaultError`` (or the executor's error) when it cannot tell."""
        path = self.path(state.key)
        if isinstance(self.ex, LocalExecutor):  # same filesystem (network namespaces included): no process
            try:
                if state.token not in Path(path).read_text():
                    return False
                os.utime(path)
            except FileNotFoundError:
                return False
            return True
        res = self.ex.run(["sh", "-c", 'if grep -qF "$1" "$2" 2>/dev/null; then touch -c "$2" && exit 0; exit 3; '
                           'fi; exit 1', "sh", state.token, path], check=False, timeout=10)
        if res.exit_status in (0, 1):
            return res.exit_status == 0
        raise FaultError(self.ex.host, f"could not renew the lease of {state.key}", command=res.command,
                         exit_status=res.exit_status, stderr=res.stderr)

    def clear_now(self, state: FaultState) -> None:
        """Run ``state``'s clear command (the one its ``clear()`` runs), then disarm it."""
        self.ex.run(["sh", "-c", state.clear_script], check=False, timeout=30)
        self.stop_timer(state, remove=self.path(state.key))

    def states(self, prefix: str = "") -> list[FaultState]:
        """Every readable state file of this host (whose key starts with ``prefix``)."""
        return [st for key in self.keys(prefix) if (st := self.read(key)) is not None]

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
                     'then kill -TERM -"$2"; fi; [ -z "$4" ] || rm -f "$4" "${4%.json}.lease"',
                     "sh", kind, ref or "0", state.token if state else "-", remove], timeout=15)

    def read(self, key: str) -> FaultState | None:
        """The state of ``key`` with ``idle_s`` (time since its last renewal, by the host's clock)."""
        res = self.ex.run(["sh", "-c", 'mt=$(stat -c %Y "$1" 2>/dev/null) || exit 1; echo "$(date +%s) $mt"; '
                           'cat "$1"; echo; echo "$3"; cat "$2" 2>/dev/null; true',
                           "sh", self.path(key), self.meta_path(key), _META_MARK], check=False, timeout=15)
        if res.exit_status != 0:
            return None
        head, _, rest = res.stdout.partition("\n")
        body, _, meta = rest.partition(f"\n{_META_MARK}\n")
        try:
            now, mtime = (float(x) for x in head.split())
            state = FaultState.from_json(json.loads(body), json.loads(meta) if meta.strip() else None)
            return replace(state, idle_s=max(0.0, now - mtime))
        except (ValueError, TypeError, KeyError):
            return None

    def keys(self, prefix: str) -> list[str]:
        """Keys of the state files whose key starts with ``prefix``."""
        res = self.ex.run(["sh", "-c", 'cd "$1" 2>/dev/null && ls -1 || true', "sh", self.state_dir], timeout=15)
        return sorted(n[: -len(".json")] for n in res.stdout.split() if n.startswith(prefix) and n.endswith(".json"))



def clear_states(dm: DeadMan, wanted: Callable[[FaultState], bool]) -> list[str]:
    """Clear every fault on ``dm``'s host whose state ``wanted`` picks, with its own clear command."""
    removed = []
    for state in dm.states():
        if wanted(state):
            dm.clear_now(state)
            removed.append(f"{dm.ex.host}: {state.label}")
    return removed
