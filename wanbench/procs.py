"""Processes wanbench starts: tracked by PID file, identified by PID *and*
start time (so a recycled PID is never mistaken for ours), ended by PID.

Also the one reader of this machine's ``/proc`` for processes and the CPU
(``/proc/PID/stat``, ``/proc/PID/task``, ``/proc/cpuinfo``): the lab, the
dead-man timers, outages, the client-saturation guard and the evidence all
ask here, so a parsing detail (the command name may hold spaces and
parentheses; a zombie is not alive) is right once for all of them."""

from __future__ import annotations

import ctypes
import json
import os
import platform
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
from wanbench.results import write_json_atomic

#: Servers we started in this process, kept so they are reaped, not leaked.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def stat_fields(text: str) -> list[str] | None:
    """The fields of a ``/proc/PID/stat`` line that follow the command name:
    ``[0]`` is the state (field 3 in proc(5)), ``[11]``/``[12]`` utime and
    stime, ``[19]`` the start time. The command name may hold spaces and
    parentheses, so the split is after the *last* ')'. None for text that is
    no stat line (a process that ended while it was read). Also parses the
    text read from another host (``cat /proc/PID/stat`` over SSH)."""
    head, sep, rest = text.rpartition(")")
    fields = rest.split()
    return fields if sep and head and len(fields) > 19 else None


def read_stat(pid: int) -> list[str] | None:
    """``stat_fields`` of a process of this machine; None when it is gone
    (or not ours to read)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # FileNotFoundError, ProcessLookupError (ESRCH mid-read), PermissionError
        return None
    return stat_fields(text)


def proc_state(pid: int) -> str | None:
    """The kernel's one-letter state of ``pid`` (R, S, D, T, t, Z, ...), or None if it is gone."""
    fields = read_stat(pid)
    return fields[0] if fields else None


def proc_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks, or None if it is gone."""
    fields = read_stat(pid)
    if fields is None or fields[0] == "Z":  # zombie: already dead for our purposes
        return None
    return int(fields[19])


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds used by every thread of ``pid`` so far; None when it is gone."""
    fields = read_stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


def proc_threads(pid: int) -> list[int]:
    """The thread ids of ``pid`` (``/proc/PID/task``); empty when it is gone."""
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return []


def thread_runnable_seconds(pid: int) -> dict[int, float]:
    """tid -> seconds each thread of ``pid`` was runnable (on a CPU or
    waiting in a run queue) so far (``/proc/PID/task/TID/schedstat``);
    empty when the process is gone."""
    out: dict[int, float] = {}
    for tid in proc_threads(pid):
        try:
            run_ns, wait_ns, *_ = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        out[tid] = (int(run_ns) + int(wait_ns)) / 1e9
    return out


def cpu_model() -> str:
    """This machine's CPU model name (``/proc/cpuinfo``), else what the
    platform says (``uname -p``; empty when it knows nothing)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


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
        write_json_atomic(path, self.to_json())

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


def stop_child(proc: subprocess.Popen[bytes] | subprocess.Popen[str], *, timeout: float = 30.0,
               kill_timeout: float = 10.0) -> bool:
    """End a child this process started and still holds: SIGTERM, wait up to ``timeout``,
    then SIGKILL and wait up to ``kill_timeout``. Only ``proc``, by its PID (a reaped child is
    never signalled, so its PID cannot be a stranger's). Returns True if it was running."""
    if proc.poll() is not None:
        return False
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=kill_timeout)
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
