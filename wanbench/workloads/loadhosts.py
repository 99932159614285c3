"""Load from several hosts: one cell's threads split over K load hosts over SSH.

At high concurrency one machine cannot drive the cluster, and clients in two
data centres see two different RTTs. With ``--load-hosts h1,h2`` (or
``load_hosts:`` in the cluster file) every round of a cell runs one sysbench
per load host, with ``threads / K`` threads each, all released together:

- **Shipping.** Each round is one SSH channel per host running a small POSIX
  ``sh`` wrapper (``WRAPPER``). Through the channel's stdin the runner sends
  wanbench's Lua scripts and a 0600 sysbench ``--config-file`` holding the
  password (never on a command line, never in a log); the wrapper keeps them
  in a private ``mktemp -d`` directory that it removes when it ends. The host's
  own ``sysbench`` runs them; OLTP rounds use the host's bundled scripts.
- **Barrier.** Every wrapper starts its sysbench at once; each sysbench
  thread connects, prints ``WBARMED`` and blocks opening a FIFO
  (``$WB_GO``, see ``wb_hooks.lua``). When every thread of every host is
  armed the runner writes ``GO`` to each channel back to back; the wrapper
  opens the FIFO, which releases all its threads, and sysbench starts its
  clock ("Threads started!"). Connection setup and script loading happen
  before the barrier, so the start skew is what is left: the spread of the
  instants those lines reach the runner, recorded per round
  (``start_skew_ms``); every host then runs the same ``--time`` window.
- **Merging.** sysbench's latency histogram has fixed buckets, so the hosts'
  bucket counts add up and the cell's percentiles come from the summed
  histogram, never from averaging percentiles. A round's QPS is the sum of
  the hosts' QPS, each over its own window.
- **Per host.** QPS, latency, the host's own histogram and client CPU
  (sysbench's ``utime + stime`` read over SSH from ``/proc`` when its window
  opens, and its reaped CPU at the end) are kept in the cell's record under
  ``load_hosts``.
- **Safety.** sysbench runs under ``timeout -s KILL`` (its own process
  group) with the round's time limit. A watcher in the wrapper kills that
  group as soon as the channel's stdin ends: when the runner closes the
  channel (normal teardown, Ctrl-C, an error) and when it dies (``kill -9``
  closes its TCP connection, sshd ends the session). A runner cut off
  without its connection closing is bounded by the ``timeout``.
"""

from __future__ import annotations

import math
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError, WanbenchError
from wanbench.results import Round, WorkloadResult
from wanbench.topology import LoadHost
from wanbench.workloads.clientcpu import ClientLoad
from wanbench.workloads.loadhosts_merge import HostRun, RoundSpec, combine_hosts
from wanbench.workloads.sysbench import LUA_DIR
from wanbench.workloads.sysbench_output import merge_results
from wanbench.workloads.sysproc import WindowHooks

#: how long a host may take to receive its files and connect its threads (at least)
READY_TIMEOUT_S = 60.0
#: the name of the options file on the load host (in the wrapper's private directory)
CONFIG_NAME = "wb.cfg"
_PASSWORD_OPTION = "--mysql-password="
_CUMULATIVE = re.compile(r'WBJSON \{"type"\s*:\s*"cumulative"')

#: The remote side of one round on one load host (POSIX sh; dash and bash).
#: $1 = time limit in seconds, $2 = bundled sysbench script name or "-", then sysbench's argv.
WRAPPER = r"""
set -u
limit=$1 bundled=$2
shift 2
umask 077
trap '' PIPE
d=$(mktemp -d "${TMPDIR:-/tmp}/wanbench-load.XXXXXXXX") || exit 111
pg=
w=
cleanup() {
  if [ -n "$pg" ]; then kill -KILL -"$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null; fi
  if [ -n "$w" ]; then kill "$w" 2>/dev/null; fi
  rm -rf "$d"
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM
sb=$(command -v sysbench) || { echo "WBERR sysbench is not installed (not in PATH)"; exit 127; }
command -v timeout >/dev/null || { echo "WBERR timeout (coreutils) is not installed"; exit 127; }
while read -r n name; do
  [ "$n" = END ] && break
  case $name in ''|*/*|.*) echo "WBERR bad file name"; exit 112;; esac
  if [ "$n" -eq 0 ]; then : > "$d/$name"
  elif ! dd iflag=fullblock bs="$n" count=1 of="$d/$name" status=none 2>/dev/null; then
    echo "WBERR cannot receive $name"; exit 113
  fi
done
if [ "$bundled" != - ]; then
  for s in "${sb%/bin/*}/share/sysbench" /usr/share/sysbench /usr/local/share/sysbench; do
    if [ -f "$s/$bundled" ]; then WB_SYSBENCH_SCRIPT=$s/$bundled; export WB_SYSBENCH_SCRIPT; break; fi
  done
  [ -n "${WB_SYSBENCH_SCRIPT:-}" ] || { echo "WBERR $bundled is not installed next to $sb"; exit 114; }
fi
ticks() { read -r st < /proc/$$/stat; set -- $st; t=$(( ${16} + ${17} )); }
mkfifo "$d/go" || { echo "WBERR cannot make a fifo in $d"; exit 116; }
WB_GO=$d/go; export WB_GO
cd "$d" || exit 115
exec 3<&0
echo "WBREADY $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN) $(getconf CLK_TCK)"
ticks; t0=$t
timeout -s KILL "$limit" "$sb" "$@" &
pg=$!
echo "WBPID $pg"
( while read -r l <&3; do if [ "$l" = GO ]; then exec 4<>"$d/go"; fi; done
  kill -KILL -"$pg" 2>/dev/null || kill -KILL "$pg" 2>/dev/null ) &
w=$!
wait "$pg"; rc=$?
ticks
pg=
echo "WBCPU $((t - t0))"
exit "$rc"
"""

#: reads utime + stime of sysbench (the child of ``timeout``) on the host
_CPU_PROBE = 'for c in $(cat /proc/"$1"/task/"$1"/children); do cat /proc/"$c"/stat; done'


def split_threads(total: int, hosts: int) -> list[int]:
    """``total`` threads over ``hosts`` hosts, as even as possible (the first get one more)."""
    if hosts < 1:
        raise ConfigError("no load host to split the threads over")
    if total < hosts:
        raise ConfigError(f"concurrency {total} cannot be split over {hosts} load hosts (each needs a thread)")
    base, extra = divmod(total, hosts)
    return [base + (1 if i < extra else 0) for i in range(hosts)]


# ----------------------------------------------------------------------------------------------------------------
# One remote sysbench
# ----------------------------------------------------------------------------------------------------------------


class _Remote:
    """One wrapper on one host: its channel, a reader thread, what it said."""

    def __init__(self, ex: Any, host: LoadHost, address: str, argv: Sequence[str], *, bundled: str | None,
                 limit_s: float, threads: int, marker: str, redact: Callable[[str], str],
                 on_marker: Callable[[], None] | None = None) -> None:
        self.ex = ex
        self.run = HostRun(host, address, threads, redact(shlex.join(["sysbench", *argv])))
        self.argv = list(argv)
        self.bundled = bundled
        self.limit_s = limit_s
        self.marker = marker
        self.redact = redact
        self.on_marker = on_marker
        self.ready = threading.Event()
        self.done = threading.Event()
        self.cores = 1
        self.clk_tck = 100
        self.pid: int | None = None
        self.cpu_at_marker: float | None = None
        self.cpu_total: float | None = None
        self._armed = 0
        self._lines: list[str] = []
        self._chan: Any = None
        self._reader: threading.Thread | None = None

    def start(self, files: Mapping[str, bytes]) -> None:
        self._chan = self.ex.start(["sh", "-c", WRAPPER, "wanbench-load", str(math.ceil(self.limit_s)),
                                    self.bundled or "-", *self.argv])
        self._reader = threading.Thread(target=self._read, name=f"load-{self.run.host.name}", daemon=True)
        self._reader.start()
        payload = b"".join(f"{len(data)} {name}\n".encode() + data for name, data in files.items()) + b"END\n"
        self._chan.sendall(payload)

    def go(self) -> None:
        self._chan.sendall(b"GO\n")

    @property
    def armed(self) -> int:
        return self._armed

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                data = self._chan.recv(65536)
                if not data:
                    break
                buf += data
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    self._line(raw.decode(errors="replace") + "\n")
            if buf:
                self._line(buf.decode(errors="replace"))
            self.run.exit_status = self._chan.recv_exit_status()
        except Exception as exc:  # noqa: BLE001 - a broken connection is reported as the host's error
            self.run.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.run.text = self.redact("".join(self._lines))
            self.done.set()
            self.ready.set()  # never leave a waiter hanging on a host that ended early

    def _line(self, line: str) -> None:
        now = time.monotonic()
        if line.startswith("WBREADY "):
            parts = line.split()
            with suppress(ValueError, IndexError):
                self.cores, self.clk_tck = max(1, int(parts[1])), max(1, int(parts[2]))
            return
        if line.startswith("WBGO "):  # released, by the host's own clock
            with suppress(ValueError, IndexError):
                self.run.released_at = float(line.split()[1])
            return
        if line.startswith("WBARMED "):  # one sysbench thread connected and waiting for GO
            self._armed += 1
            if self._armed >= self.run.threads:
                self.ready.set()
            return
        if line.startswith("WBPID "):
            with suppress(ValueError):
                self.pid = int(line.split()[1])
            return
        if line.startswith("WBCPU "):
            with suppress(ValueError):
                self.cpu_total = int(line.split()[1]) / self.clk_tck
            return
        if line.startswith("WBERR "):
            self.run.error = line[6:].strip()
        self._lines.append(line)
        if self.run.marker_at is None and self.marker in line:
            self.run.marker_at = now
            self.cpu_at_marker = self._sample_cpu()
            if self.on_marker is not None:
                self.on_marker()
        if _CUMULATIVE.search(line):
            self.run.end_at = now

    def _sample_cpu(self) -> float | None:
        """sysbench's CPU seconds so far, read on the host from ``/proc``."""
        if self.pid is None:
            return None
        try:
            res = self.ex.run(["sh", "-c", _CPU_PROBE, "sh", str(self.pid)], timeout=10, check=False)
        except WanbenchError:
            return None
        total = 0
        for line in res.stdout.splitlines():
            fields = line.rsplit(")", 1)[-1].split()
            if len(fields) > 12:
                total += int(fields[11]) + int(fields[12])
        return total / self.clk_tck if res.stdout.strip() else None

    def close(self) -> None:
        """End the remote side (closing stdin makes the wrapper kill sysbench's process group)."""
        if self._chan is not None:
            self._chan.close()
        if self._reader is not None:
            self._reader.join(15)

    def finish(self) -> HostRun:
        run = self.run
        if (self.cpu_total is not None and self.cpu_at_marker is not None and run.marker_at is not None
                and run.end_at is not None):
            run.client = ClientLoad(max(0.0, self.cpu_total - self.cpu_at_marker),
                                    max(1e-6, run.end_at - run.marker_at), run.threads, self.cores)
        return run


# ----------------------------------------------------------------------------------------------------------------
# The session's load hosts
# ----------------------------------------------------------------------------------------------------------------


class LoadHosts:
    """The session's load hosts: one SSH connection each, opened on first use."""

    def __init__(self, hosts: Sequence[LoadHost], *, accept_new_host_keys: bool = False,
                 executor: Callable[[LoadHost], Any] | None = None) -> None:
        if not hosts:
            raise ConfigError("LoadHosts needs at least one load host")
        self.hosts = tuple(hosts)
        self.accept_new_host_keys = accept_new_host_keys
        self._make = executor or self._ssh
        self._executors: dict[str, Any] = {}

    def _ssh(self, host: LoadHost) -> Any:
        from wanbench.executors.ssh import SSHExecutor  # paramiko only when load hosts are used

        return SSHExecutor(host.name, accept_new_host_keys=self.accept_new_host_keys)

    def executor(self, host: LoadHost) -> Any:
        if host.name not in self._executors:
            self._executors[host.name] = self._make(host)
        return self._executors[host.name]

    def address(self, host: LoadHost) -> str:
        """The address the cluster sees this host's connections come from (its SSH HostName)."""
        return str(getattr(self.executor(host), "hostname", host.name))

    def labels(self) -> list[str]:
        return [h.label for h in self.hosts]

    def close(self) -> None:
        for ex in self._executors.values():
            with suppress(Exception):
                ex.close()
        self._executors.clear()

    # -- one round ---------------------------------------------------------------------------------------------
    def run_round(self, spec: RoundSpec, *, password: str, redact: Callable[[str], str],
                  window: WindowHooks | None = None) -> list[HostRun]:
        """Run ``spec`` once on every host, released together; the hosts' runs.

        Raises ``InfrastructureError`` naming the host when one cannot start,
        does not finish within the limit, or fails; every remote sysbench is
        ended before this returns or raises."""
        counts = split_threads(spec.threads, len(self.hosts))
        files = {p.name: p.read_bytes() for p in sorted(LUA_DIR.glob("*.lua"))}
        files[CONFIG_NAME] = f"mysql-password={password}\n".encode() if password else b""
        opened: list[bool] = []
        lock = threading.Lock()

        def opened_once() -> None:  # the first host's window opens the measured window
            with lock:
                if window is not None and not opened:
                    opened.append(True)
                    window.begin()

        if window is not None:
            window.prepare()  # before the load: what it costs is not measured
        remotes: list[_Remote] = []
        try:
            for host, threads in zip(self.hosts, counts, strict=True):
                argv, env = spec.build(threads)
                remote_argv, bundled = remote_command(argv, env, host)
                r = _Remote(self.executor(host), host, self.address(host), remote_argv, bundled=bundled,
                            limit_s=spec.limit_s, threads=threads, marker=spec.marker, redact=redact,
                            on_marker=opened_once)
                remotes.append(r)
                r.start(files)
            deadline = time.monotonic() + max(READY_TIMEOUT_S, spec.limit_s)
            for r in remotes:
                if not r.ready.wait(max(0.0, deadline - time.monotonic())) or r.done.is_set():
                    r.close()
                    raise InfrastructureError(f"{spec.what}: load host {r.run.host.name} did not get ready "
                                              f"(its threads connected: {r.armed}/{r.run.threads}): "
                                              f"{_why(r.finish())}")
            for r in remotes:
                r.go()
            deadline = time.monotonic() + spec.limit_s + 15.0
            for r in remotes:
                if not r.done.wait(max(0.0, deadline - time.monotonic())):
                    raise InfrastructureError(f"{spec.what}: load host {r.run.host.name} gave no result after "
                                              f"{spec.limit_s:.0f}s; its sysbench was killed")
            return [r.finish() for r in remotes]
        finally:
            for r in remotes:
                r.close()
            if window is not None and opened:
                window.end()  # the last host has finished (or been ended)

    # -- the engines' rounds ------------------------------------------------------------------------------------
    def probe(self, runner: Any, kind: str, *, concurrency: int, seconds: float, rounds: int, timeout: float,
              on_round: Callable[[int, Round], None] | None = None, rows: int = 10000) -> WorkloadResult:
        """Probe rounds on every host: each round is a ``seconds`` window on all
        hosts at once (not a fixed number of queries: the hosts would end at
        different times), ``concurrency`` threads in total."""
        if concurrency <= 0 or rounds <= 0 or seconds <= 0:
            raise ConfigError(f"probe needs positive concurrency/rounds/seconds, got {concurrency}/{rounds}/{seconds}")
        workload = f"probe_{kind}"
        runner.preflight(workload, threads=concurrency)
        parts: list[WorkloadResult] = []
        for i in range(1, rounds + 1):
            spec = RoundSpec(
                workload, f"{workload} c={concurrency} round {i}/{rounds} on {runner.endpoint}", concurrency,
                lambda t: (runner.probe_command(kind, concurrency=t, queries=0, rows=rows, max_seconds=seconds), {}),
                "Threads started!", max(timeout, math.ceil(seconds) + 30.0),
                {"kind": kind, "window_s": math.ceil(seconds)})
            parts.append(self._round(runner, spec))
            if on_round is not None:
                on_round(i, parts[-1].rounds[0])
        return merge_results(parts)

    def oltp(self, runner: Any, workload: str, *, threads: int, duration: float, warmup: float, tables: int,
             table_size: int, rounds: int = 1, rate: float | None = None, timeout: float | None = None,
             on_round: Callable[[int, Round], None] | None = None) -> WorkloadResult:
        """``SysbenchRunner.run_oltp`` over the load hosts; ``rate`` is shared
        out in proportion to each host's threads."""
        if threads <= 0 or rounds <= 0:
            raise ConfigError(f"threads and rounds must be positive, got {threads} and {rounds}")
        runner.preflight(workload, threads=threads, tables=tables)
        limit = timeout if timeout is not None else math.ceil(duration) + math.ceil(warmup) + 120.0

        def build(t: int) -> tuple[list[str], Mapping[str, str]]:
            share = max(1, round(rate * t / threads)) if rate else None
            return runner.oltp_command(workload, threads=t, duration=duration, warmup=warmup, tables=tables,
                                       table_size=table_size, rate=share)

        parts: list[WorkloadResult] = []
        for i in range(1, rounds + 1):
            spec = RoundSpec(workload, f"{workload} t={threads} round {i}/{rounds} on {runner.endpoint}", threads,
                             build, "Checkpoint report" if warmup > 0 else "Threads started!", limit,
                             {"duration_s": math.ceil(duration), "warmup_s": math.ceil(warmup), "tables": tables,
                              "table_size": table_size, "warnings": []})
            parts.append(self._round(runner, spec))
            if on_round is not None:
                on_round(i, parts[-1].rounds[0])
        return merge_results(parts)

    def _round(self, runner: Any, spec: RoundSpec) -> WorkloadResult:
        runs = self.run_round(spec, password=runner.password, redact=runner.redact, window=runner.window_hooks)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec.what)
        for run in runs:
            runner.keep_report(f"{name}-{run.host.name}", run.text)
        return combine_hosts(spec, runs)


def session_load_hosts(cluster: Any, option: Callable[[str], Any]) -> tuple[LoadHost, ...]:
    """The run's load hosts: ``--load-hosts``, else the cluster file's ``load_hosts``, else none."""
    given = option("load_hosts")
    if given:
        return tuple(given)
    return tuple(getattr(cluster, "load_hosts", ()) or ())


def remote_command(argv: Sequence[str], env: Mapping[str, str], host: LoadHost) -> tuple[list[str], str | None]:
    """The local sysbench command as the wrapper runs it on ``host``: the
    script from the shipped directory, the password from the options file,
    the SQL host replaced when the host has its own; and the bundled script's
    name (OLTP), found next to the host's own sysbench."""
    out = [f"--config-file={CONFIG_NAME}"]
    for a in argv[1:]:
        if a.startswith(_PASSWORD_OPTION):
            continue
        if a.endswith(".lua") and Path(a).parent == LUA_DIR:
            a = "./" + Path(a).name
        elif a.startswith("--mysql-host=") and host.sql_host:
            n = len(a.removeprefix("--mysql-host=").split(","))
            a = "--mysql-host=" + ",".join([host.sql_host] * n)
        out.append(a)
    script = env.get("WB_SYSBENCH_SCRIPT")
    return out, Path(script).name if script else None


def _why(run: HostRun) -> str:
    if run.error:
        return run.error
    tail = " | ".join(ln.strip() for ln in run.text.strip().splitlines()[-6:])
    return tail or f"exit {run.exit_status}, no output"

