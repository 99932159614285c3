"""Processes wanbench starts: tracked by PID file, identified by PID *and*
start time (so a recycled PID is never mistaken for ours), ended by PID."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wanbench.errors import InfrastructureError, MissingToolError

#: Servers we started in this process, kept so they are reaped, not leaked.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks, or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":  # zombie: already dead for our purposes
        return None
    return int(fields[19])


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used by ``pid`` so far."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcessHandle:
    """Identity of a process we started; survives our own death via its file."""

    name: str
    pid: int
    start_time: int
    argv0: str

    def alive(self) -> bool:
        return proc_start_time(self.pid) == self.start_time

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "pid": self.pid, "start_time": self.start_time, "argv0": self.argv0}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> ProcessHandle:
        return cls(str(data["name"]), int(data["pid"]), int(data["start_time"]), str(data["argv0"]))  # type: ignore[call-overload]

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json()))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> ProcessHandle | None:
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, KeyError):
            return None

    def stop(self, *, timeout: float = 20.0, sig: int = signal.SIGTERM) -> bool:
        """Signal the process (only if it is still *ours*), wait, then SIGKILL.
        Returns True if it was running."""
        if not self.alive():
            return False
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            return False
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            _reap(self.pid)
            if not self.alive():
                return True
            time.sleep(0.05)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)
            kill_deadline = time.monotonic() + 5
            while self.alive() and time.monotonic() < kill_deadline:
                _reap(self.pid)
                time.sleep(0.05)
        return True


def _reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def pinned(cpus: Collection[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` that confines the child (and every thread it will
    start) to ``cpus``; None when there is nothing to confine."""
    if not cpus:
        return None
    chosen = frozenset(cpus)

    def confine() -> None:
        os.sched_setaffinity(0, chosen)

    return confine


#: prctl(2) option: the signal the kernel sends this process when its parent dies
PR_SET_PDEATHSIG = 1


def load_preexec(cpus: Collection[int] | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` for a load generator (sysbench): confined to ``cpus`` when given, and
    SIGKILLed by the kernel the moment the runner dies (``kill -9`` included), so no load keeps
    hitting a cluster whose faults are being removed.

    The parent-death signal fires when the *thread* that started the child ends: start load
    generators from a thread that outlives them (the test's own thread does)."""
    confine = pinned(cpus)
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork, not in the child

    def prepare() -> None:
        if prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(126)  # cannot promise to die with the runner: do not start at all
        if os.getppid() != parent:  # the runner died between fork and prctl
            os.kill(os.getpid(), signal.SIGKILL)
        if confine is not None:
            confine()

    return prepare


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    cpus: Collection[int] | None = None,
) -> ProcessHandle:
    """Start a server in its own session (a Ctrl-C to the runner does not
    reach it: the runner's teardown stops it in order) with a raised open-file
    limit, confined to ``cpus`` when given, and record it in ``pid_file``."""
    confine = pinned(cpus)

    def prepare() -> None:
        _raise_nofile()
        if confine is not None:
            confine()

    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(  # noqa: S603 - argv list
                list(argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=prepare,  # noqa: PLW1509 - only sets rlimits and CPU affinity
                env=dict(env) if env is not None else None,
                cwd=cwd,
            )
        except FileNotFoundError:
            raise InfrastructureError(f"cannot start {name}: {argv[0]} not found (run scripts/setup)") from None
    start = None
    for _ in range(100):
        start = proc_start_time(proc.pid)
        if start is not None:
            break
        time.sleep(0.01)
    if start is None:
        raise InfrastructureError(f"{name} exited immediately; see {log}")
    _CHILDREN[proc.pid] = proc
    handle = ProcessHandle(name, proc.pid, start, str(argv[0]))
    handle.save(pid_file)
    return handle


def log_tail(path: Path, lines: int = 8) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.strip().splitlines()[-lines:])


def find_binary(name: str, *candidates: str) -> str:
    """The first executable of ``candidates`` or ``name`` on PATH."""
    for c in (*candidates, shutil.which(name)):
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return str(c)
    raise MissingToolError(name, "run scripts/setup")


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:``port`` now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
