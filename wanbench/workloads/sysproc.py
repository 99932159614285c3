"""One sysbench process, supervised: the only place wanbench starts sysbench
on this machine (on load hosts, over SSH: ``loadhosts.py``).

Every engine (probes and OLTP in ``sysbench.py``, TPC-C, YCSB) runs sysbench
through ``run``, so what one engine learned the hard way holds for all:

- the password (and any other secret option) goes to sysbench in a 0600
  ``--config-file`` removed afterwards, never on its command line: any user
  of the machine can read ``/proc/PID/cmdline``;
- sysbench is pinned to the client CPUs (the lab's split layout);
- its CPU use is measured (``wait4``: exact, per process) and, from a marker
  line on, sampled for runnable-but-waiting threads (``clientcpu``);
- it is killed by PID when it outlives its timeout;
- it dies with its runner: the kernel SIGKILLs it when the runner dies, even
  by ``kill -9`` (``procs.load_preexec``: a parent-death signal), so no load
  keeps hitting a cluster whose faults are being removed;
- a Ctrl-C (``KeyboardInterrupt``) or any other exception that lands anywhere
  after ``Popen`` kills and reaps it: no sysbench survives its runner;
- it gets a scratch directory of its own (``$WB_SCRATCH``, owner-tagged so a
  runner killed with ``kill -9`` has it swept by the next run); the small
  files a Lua script leaves there (YCSB's acknowledged inserts, key counts)
  are read back into ``ProcessRun.files`` and the directory is removed.

``Popen`` is called in one function (``_start``), so a change to how
sysbench is started (e.g. a parent-death signal) is made once.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from wanbench import scratch
from wanbench.errors import InfrastructureError, MissingToolError
from wanbench.procs import load_preexec, proc_cpu_seconds, proc_state
from wanbench.redact import redactor
from wanbench.workloads.clientcpu import ClientLoad, RunnableSampler, usable_cores

#: the environment variable that names the process's scratch directory
SCRATCH_ENV = "WB_SCRATCH"
#: files larger than this in the scratch directory are not read back
MAX_FILE_BYTES = 64 * 1024 * 1024
#: how long the reaper waits for the output reader to reach the end of a
#: finished load before it closes the evidence window the reader opened
READER_DRAIN_S = 10.0


@dataclass(frozen=True)
class ProcessRun:
    """What one sysbench process did. ``text`` is stdout and stderr as they
    came, with every secret replaced by ``***``."""

    command: str
    text: str
    exit_status: int
    wall_s: float
    cpu_s: float
    client: ClientLoad | None
    files: Mapping[str, str] = field(default_factory=dict)


@contextmanager
def options_file(options: Sequence[str], *, prefix: str = "wanbench-sysbench-",
                 directory: Path | None = None) -> Iterator[Path]:
    """sysbench options (``name=value`` lines, e.g. the password) in a 0600
    file for ``--config-file``, removed afterwards. ``directory``: the run's
    scratch directory, so that a runner killed with ``kill -9`` leaves the
    file to the next run's sweep instead of in /tmp for good."""
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=".cfg", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write("".join(o + "\n" for o in options))
        yield Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def option_redactor(secrets: Sequence[str]) -> Callable[[str], str]:
    """Hide the value of every ``name=value`` secret option line."""
    return redactor(s.split("=", 1)[1] for s in secrets if "=" in s)


def _start(argv: Sequence[str], *, env: Mapping[str, str], cpus: Collection[int]) -> subprocess.Popen[str]:
    """The one ``Popen`` of sysbench: output on one pipe, line-buffered text,
    no stdin, confined to ``cpus``, SIGKILLed by the kernel when the runner dies."""
    try:
        return subprocess.Popen(  # noqa: S603 - argv list, no shell
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", bufsize=1, env=dict(env), preexec_fn=load_preexec(cpus),  # noqa: PLW1509
        )
    except FileNotFoundError:
        raise MissingToolError(str(argv[0]), "apt-get install sysbench (1.0.20) or run scripts/setup") from None



class WindowHooks(Protocol):
    """Told before the load starts, and when its measured window opens and
    closes (``wanbench.evidence``). ``begin`` runs inside the window, so it
    must be cheap; ``prepare`` does the expensive reading. ``missed`` instead
    of ``begin``: the window's start was seen only after the load had ended,
    so nothing measured it."""

    def prepare(self) -> None: ...

    def begin(self) -> None: ...

    def end(self) -> None: ...

    def missed(self, reason: str) -> None: ...

def run(
    argv: Sequence[str],
    *,
    what: str,
    timeout: float,
    threads: int,
    secrets: Sequence[str] = (),
    cpus: Collection[int] = (),
    env: Mapping[str, str] | None = None,
    window_marker: str | None = None,
    redact: Callable[[str], str] | None = None,
    on_output: Callable[[str], None] | None = None,
    window: WindowHooks | None = None,
) -> ProcessRun:
    """Run sysbench ``argv`` to its end or until ``timeout`` seconds.

    ``secrets`` are option lines (``mysql-password=...``) passed in the
    options file. ``window_marker``: client CPU is measured from the first
    output line containing it (e.g. ``Threads started!``) to the end; None
    measures the whole process. ``on_output`` (optional) gets the redacted
    output before a timeout error is raised, e.g. to keep it as a report.
    ``window`` (optional) is told when the measured window opens (the marker)
    and closes (sysbench ended): the server-side evidence is read then.
    Raises ``InfrastructureError`` when sysbench had to be killed; a non-zero
    exit is returned, for the engine to explain.
    """
    hide = redact or option_redactor(secrets)
    work = scratch.make_scratch()
    try:
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env[SCRATCH_ENV] = str(work)
        if secrets:
            with options_file(secrets, directory=work) as cfg:
                full = [argv[0], f"--config-file={cfg}", *argv[1:]]
                result = _supervise(full, what=what, timeout=timeout, threads=threads, cpus=cpus, env=full_env,
                                    window_marker=window_marker, redact=hide, on_output=on_output, window=window)
        else:
            result = _supervise(argv, what=what, timeout=timeout, threads=threads, cpus=cpus, env=full_env,
                                window_marker=window_marker, redact=hide, on_output=on_output, window=window)
        files = _read_files(work)
        return ProcessRun(result.command, result.text, result.exit_status, result.wall_s, result.cpu_s,
                          result.client, files)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_files(work: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(work.iterdir()):
        if path.name == scratch.OWNER_FILE or not path.is_file() or path.stat().st_size > MAX_FILE_BYTES:
            continue
        out[path.name] = path.read_text(errors="replace")
    return out


def _supervise(argv: Sequence[str], *, what: str, timeout: float, threads: int, cpus: Collection[int],
               env: Mapping[str, str], window_marker: str | None, redact: Callable[[str], str],
               on_output: Callable[[str], None] | None, window: WindowHooks | None = None) -> ProcessRun:
    shown = redact(shlex.join(argv))
    if window is not None:
        window.prepare()  # before the load: what it costs is not measured
    start = time.monotonic()
    proc = _start(argv, env=env, cpus=cpus)
    lines: list[str] = []
    mark: list[tuple[float, float]] = []
    reaped: list[tuple[int, Any, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    threads_started: list[threading.Thread] = []
    reaper: threading.Thread | None = None
    killed = False
    sampler: RunnableSampler | None = None
    try:  # from here on, also on a Ctrl-C that lands before the wait: never leave a sysbench behind
        sampler = RunnableSampler(proc.pid, threads)
        if window_marker is None:
            mark.append((start, 0.0))
            if window is not None:
                window.begin()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if not mark and window_marker is not None and window_marker in line:
                    cpu = proc_cpu_seconds(proc.pid)
                    with lock:
                        ended = bool(reaped) or proc_state(proc.pid) in (None, "Z", "X")
                    if ended:  # this thread ran late: a window opened now would hold none of the load
                        if window is not None:
                            window.missed(f"{what}: its output reader reached {window_marker!r} only after the "
                                          "load had ended (the machine was too busy): no window measured it")
                        continue
                    if cpu is not None:
                        now = time.monotonic()
                        assert sampler is not None
                        sampler.sample(now)
                        mark.append((now, cpu))
                        if window is not None:
                            window.begin()

        def sample() -> None:
            # a sampling period, not a wait for a condition: /proc is read
            # twice a second (less at high thread counts) so the measured
            # process is not disturbed
            period = max(0.5, min(2.0, threads / 250))
            while not stop.wait(period):
                with lock:
                    if reaped:
                        return
                    if mark and sampler is not None:
                        sampler.sample(time.monotonic())

        def reap() -> None:
            _pid, status, usage = os.wait4(proc.pid, 0)
            with lock:
                reaped.append((status, usage, time.monotonic()))
            if window is not None:
                # the reader opens the window when it sees the marker: let it
                # reach the end of the output first, so a short load's begin()
                # never runs after (or during) this end()
                reader.join(READER_DRAIN_S)
                window.end()  # closes the window begin() opened, if any

        reader = threading.Thread(target=read, name=f"sysbench-out-{proc.pid}", daemon=True)
        reaper = threading.Thread(target=reap, name=f"sysbench-wait-{proc.pid}", daemon=True)
        sampler_thread = threading.Thread(target=sample, name=f"sysbench-sched-{proc.pid}", daemon=True)
        for t in (reader, reaper, sampler_thread):
            t.start()
            threads_started.append(t)
        reaper.join(timeout)
    finally:
        with lock:
            if not reaped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                killed = True
        if killed and reaper is not None and reaper.is_alive():
            reaper.join(10)
        elif killed:  # interrupted before the reaper ran: reap sysbench here
            with contextlib.suppress(ChildProcessError):
                os.waitpid(proc.pid, 0)
        # reaped by hand, so Popen never learns it: tell it (or it warns that
        # the process is "still running" when it is garbage-collected)
        proc.returncode = os.waitstatus_to_exitcode(reaped[0][0]) if reaped else -signal.SIGKILL
        stop.set()
        for t in threads_started:
            if t is not reaper:
                t.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
    _status, usage, end = reaped[0] if reaped else (0, None, time.monotonic())
    text = redact("".join(lines))
    if killed:
        if on_output is not None:
            on_output(text)
        tail = " | ".join(ln.strip() for ln in text.strip().splitlines()[-8:]) or "(no output)"
        raise InfrastructureError(
            f"{what}: no result after {timeout:.0f}s, sysbench (pid {proc.pid}) was killed; last output: {tail}")
    cpu_s = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
    client = None
    if usage is not None:
        cores = usable_cores(cpus)
        if mark and window_marker is not None:
            t0, cpu0 = mark[0]
            client = ClientLoad(max(0.0, cpu_s - cpu0), max(1e-6, end - t0), threads, cores,
                                sampler.fraction() if sampler is not None else None)
        elif window_marker is None:
            client = ClientLoad(cpu_s, max(1e-6, end - start), threads, cores,
                                sampler.fraction() if sampler is not None else None)
        else:
            client = ClientLoad(cpu_s, max(1e-6, end - start), threads, cores)
    return ProcessRun(shown, text, proc.returncode, end - start, cpu_s, client)
