"""The seeds' own load generators, PingCAP's go-tpc and go-ycsb, as cross-checks.

Our users' documents (the seeds) were measured with go-tpc and go-ycsb;
wanbench measures TPC-C and YCSB with its own sysbench Lua engines.
``bench/cross_check`` runs both on one lab and prints how far they agree;
this module holds what that needs and what can be tested without a lab:
where the pinned binaries are (``scripts/setup --cross-check`` builds them
into ``bin/``), their command lines, running one of them with its CPU time,
and parsing their output.

Both tools print their summaries in the shapes wanbench's own engines copy
(``[Summary] NEW_ORDER - Takes(s): ...`` and ``READ   - Takes(s): ...``), so
the same parsers read ours and theirs.

go-tpc takes the password only on its command line (``-p``), where other
users of the machine can read it in ``ps``: the cross-check gives it a
throwaway SQL user with a random password, dropped again at the end.
go-ycsb reads it from a 0600 properties file, but prints every property
when it starts: its output is redacted before it is kept or shown.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wanbench.errors import InfrastructureError, MissingToolError
from wanbench.procs import load_preexec

PROJECT_ROOT = Path(__file__).resolve().parent.parent
GO_TPC_VERSION = "v1.0.7"
GO_YCSB_VERSION = "v1.0.3"
SETUP_HINT = "run scripts/setup --cross-check"


# ------------------------------------------------------------------ the binaries


def tool_path(name: str) -> str:
    """``bin/<name>`` of this checkout, else ``name`` on PATH."""
    local = PROJECT_ROOT / "bin" / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which(name)
    if found:
        return found
    raise MissingToolError(name, SETUP_HINT)


def go_tpc_version(path: str) -> str:
    """What ``go-tpc version`` reports as its release ("dev" when it was
    built without the version injected at link time)."""
    out = subprocess.run([path, "version"], capture_output=True, text=True, timeout=30, check=False).stdout
    m = re.search(r"^Release version:\s*(\S+)", out, re.MULTILINE)
    return m.group(1) if m else "unknown"


def go_ycsb_version(path: str) -> str:
    """go-ycsb has no version command: ``scripts/setup-cross-check`` writes
    ``<binary>.version`` (module version and the binary's sha256). The version
    when both match, else ``unknown`` (a binary from elsewhere)."""
    stamp = Path(path + ".version")
    try:
        words = stamp.read_text().split()
    except FileNotFoundError:
        return "unknown"
    if len(words) != 3 or not words[2].startswith("sha256:"):
        return "unknown"
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return words[1] if words[2] == f"sha256:{digest}" else "unknown (binary changed since it was stamped)"


# ------------------------------------------------------------------ command lines


@dataclass(frozen=True)
class Target:
    """Where a seed tool connects, as whom, and into which database."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str


def go_tpc_argv(tool: str, target: Target, *, warehouses: int, threads: int, action: str,
                duration_s: float | None = None) -> list[str]:
    """``go-tpc tpcc ... prepare|run|check``. ``run`` goes on after a failed
    transaction (``--ignore-error``) as our terminals do; without it one
    deadlock ends a go-tpc thread for the rest of the run. Its interval
    report comes once, after the run (only the ``[Summary]`` is read)."""
    argv = [tool, "tpcc", "-H", target.host, "-P", str(target.port), "-U", target.user, "-p", target.password,
            "-D", target.database, "--warehouses", str(warehouses), "-T", str(threads)]
    if action == "run":
        if not duration_s:
            raise ValueError("go-tpc run needs a duration")
        argv += ["--time", f"{duration_s:g}s", "--interval", f"{2 * duration_s + 60:g}s", "--ignore-error"]
    argv.append(action)
    return argv


def go_tpch_argv(tool: str, target: Target, *, scale_factor: int, threads: int, action: str) -> list[str]:
    """``go-tpc tpch --sf N prepare`` or ``run --check`` of the 22 queries once
    each on one connection (``--count 22 -T 1``)."""
    argv = [tool, "tpch", "-H", target.host, "-P", str(target.port), "-U", target.user, "-p", target.password,
            "-D", target.database, "--sf", str(scale_factor)]
    if action == "run":
        argv += ["-T", "1", "--count", "22", "--check", "--ignore-error"]
    else:
        argv += ["-T", str(threads)]
    argv.append(action)
    return argv


#: YCSB's core workloads as ours runs them (``wanbench.workloads.ycsb.WORKLOADS``).
#: go-ycsb v1.0.3's own workloads/workload{a,b,c,e,f} files say
#: ``requestdistribution=uniform``: we pass YCSB's definitions explicitly.
YCSB_WORKLOADS: Mapping[str, Mapping[str, str]] = {
    "workloada": {"readproportion": "0.5", "updateproportion": "0.5", "requestdistribution": "zipfian"},
    "workloadb": {"readproportion": "0.95", "updateproportion": "0.05", "requestdistribution": "zipfian"},
    "workloadc": {"readproportion": "1", "requestdistribution": "zipfian"},
    "workloadd": {"readproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "latest"},
    "workloade": {"scanproportion": "0.95", "insertproportion": "0.05", "requestdistribution": "zipfian",
                  "scanlengthdistribution": "uniform"},
    "workloadf": {"readproportion": "0.5", "readmodifywriteproportion": "0.5", "requestdistribution": "zipfian"},
}


def go_ycsb_properties(target: Target, *, workload: str, records: int, threads: int, fields: int = 10,
                       field_length: int = 100, max_scan_length: int = 100) -> str:
    """A go-ycsb properties file (``-P``): connection, record shape and the
    workload's mix. The run ends by SIGINT after its duration (go-ycsb
    v1.0.3 ignores ``maxexecutiontime``), so the operation count is huge."""
    if workload not in YCSB_WORKLOADS:
        raise ValueError(f"unknown YCSB workload {workload!r}")
    props = {
        "mysql.host": target.host, "mysql.port": str(target.port), "mysql.user": target.user,
        "mysql.password": target.password, "mysql.db": target.database,
        "workload": "core", "recordcount": str(records), "operationcount": str(10**9),
        "fieldcount": str(fields), "fieldlength": str(field_length), "readallfields": "true",
        "readproportion": "0", "updateproportion": "0", "scanproportion": "0", "insertproportion": "0",
        "readmodifywriteproportion": "0", "maxscanlength": str(max_scan_length), "threadcount": str(threads),
        **YCSB_WORKLOADS[workload],
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


# ------------------------------------------------------------------ running one


@dataclass(frozen=True)
class ToolRun:
    command: str  # redacted
    exit_status: int
    text: str  # stdout and stderr as they came, redacted
    wall_s: float
    cpu_s: float  # the tool's user + system CPU (wait4)
    lines: tuple[tuple[float, str], ...]  # (seconds since start, line), redacted

    def first_line_at(self, pattern: str) -> float | None:
        """Seconds from the start to the first line matching ``pattern``."""
        rx = re.compile(pattern)
        return next((t for t, line in self.lines if rx.search(line)), None)


def run_tool(argv: Sequence[str], *, what: str, timeout: float, cpus: Collection[int] = (),
             stop_after: float | None = None, redact: Callable[[str], str] = lambda s: s) -> ToolRun:
    """Run a seed tool to its end, confined to ``cpus`` and killed with the
    runner (``load_preexec``). ``stop_after``: send SIGINT after that many
    seconds, as a user's Ctrl-C (go-ycsb then prints its summary and exits).
    Killed (by its PID) after ``timeout`` seconds: InfrastructureError."""
    t0 = time.monotonic()
    proc = subprocess.Popen(  # noqa: S603 - argv list
        list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
        errors="replace", bufsize=1, preexec_fn=load_preexec(cpus))  # noqa: PLW1509
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    interrupted = stop_after is None
    status: int | None = None
    cpu = 0.0
    while status is None:
        pid, raw, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            status = os.waitstatus_to_exitcode(raw)
            cpu = usage.ru_utime + usage.ru_stime
            proc.returncode = status
            break
        now = time.monotonic() - t0
        if not interrupted and stop_after is not None and now >= stop_after:
            proc.send_signal(signal.SIGINT)
            interrupted = True
        if now > timeout:
            proc.kill()
            os.wait4(proc.pid, 0)
            proc.returncode = -9
            reader.join(timeout=5)
            _close(proc)
            tail = " | ".join(redact(line) for _, line in lines[-5:])
            raise InfrastructureError(f"{what}: killed after {timeout:.0f} s without finishing: {tail}")
        time.sleep(0.05)
    reader.join(timeout=30)
    _close(proc)
    kept = tuple((t, redact(line)) for t, line in lines)
    return ToolRun(redact(" ".join(argv)), status, "\n".join(line for _, line in kept), time.monotonic() - t0,
                   cpu, kept)


def _close(proc: subprocess.Popen[str]) -> None:
    if proc.stdout is not None:
        try:
            proc.stdout.close()
        except OSError:
            pass


# ------------------------------------------------------------------ parsing

_FIELD = re.compile(r"([A-Za-z0-9.]+(?:\([a-z]+\))?):\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+|NaN|Inf))")


def _fields(body: str) -> dict[str, float]:
    return {k: float(v) for k, v in _FIELD.findall(body)}


@dataclass(frozen=True)
class TpcRow:
    """One go-tpc ``[Summary]`` line (ours prints the same shape)."""

    name: str
    takes_s: float
    count: int
    tpm: float
    sum_ms: float
    avg_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float

    @property
    def mean_ms(self) -> float:
        """Sum/Count: exact in go-tpc too (its Avg(ms) comes from histogram buckets)."""
        return self.sum_ms / self.count if self.count else math.nan

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__} | {"mean_ms": self.mean_ms}


@dataclass(frozen=True)
class TpcSummary:
    rows: Mapping[str, TpcRow]
    tpmc: float

    def busy_fraction(self, threads: int) -> float:
        """The share of the terminals' time inside a timed transaction:
        the sum of every transaction's latency over threads x time."""
        takes = max((r.takes_s for r in self.rows.values()), default=0.0)
        total_ms = sum(r.sum_ms for r in self.rows.values())
        return total_ms / (threads * takes * 1000.0) if takes > 0 else math.nan

    @property
    def transactions(self) -> int:
        return sum(r.count for n, r in self.rows.items() if not n.endswith("_ERR"))

    @property
    def errors(self) -> int:
        return sum(r.count for n, r in self.rows.items() if n.endswith("_ERR"))


_TPC_LINE = re.compile(r"^\[Summary\]\s+(?P<name>[A-Z][A-Z_]*)\s+-\s+(?P<body>.*)$", re.MULTILINE)
_TPMC = re.compile(r"^tpmC:\s*([-+]?\d+(?:\.\d+)?)", re.MULTILINE)


def parse_tpc_summary(text: str) -> TpcSummary:
    """The ``[Summary]`` lines and ``tpmC:`` of go-tpc's (or our) TPC-C output.

    ``[Current]`` interval lines are ignored; a name seen twice keeps its last
    line. tpmC is go-tpc's own line, else NEW_ORDER's TPM. Raises ValueError
    when there is no summary at all (a run that died)."""
    rows: dict[str, TpcRow] = {}
    for m in _TPC_LINE.finditer(text):
        f = _fields(m.group("body"))
        rows[m.group("name")] = TpcRow(
            name=m.group("name"), takes_s=f.get("Takes(s)", math.nan), count=int(f.get("Count", 0)),
            tpm=f.get("TPM", math.nan), sum_ms=f.get("Sum(ms)", math.nan), avg_ms=f.get("Avg(ms)", math.nan),
            p50_ms=f.get("50th(ms)", math.nan), p90_ms=f.get("90th(ms)", math.nan),
            p95_ms=f.get("95th(ms)", math.nan), p99_ms=f.get("99th(ms)", math.nan),
            p999_ms=f.get("99.9th(ms)", math.nan), max_ms=f.get("Max(ms)", math.nan))
    if not rows:
        raise ValueError("no [Summary] lines in the TPC-C output")
    found = _TPMC.findall(text)
    if found:
        tpmc = float(found[-1])
    else:
        no = rows.get("NEW_ORDER")
        tpmc = no.tpm if no else math.nan
    return TpcSummary(rows, tpmc)


@dataclass(frozen=True)
class YcsbRow:
    """One go-ycsb summary line (ours prints the same shape); latencies in µs."""

    op: str
    takes_s: float
    count: int
    ops: float
    avg_us: float
    min_us: float
    max_us: float
    p50_us: float
    p90_us: float
    p95_us: float
    p99_us: float
    p999_us: float
    p9999_us: float

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_YCSB_LINE = re.compile(r"^(?P<op>[A-Z][A-Z_]*)\s+-\s+(?P<body>Takes\(s\):.*)$", re.MULTILINE)
_RUN_FINISHED = "Run finished, takes"


def parse_ycsb_summary(text: str) -> dict[str, YcsbRow]:
    """The per-operation lines of go-ycsb's (or our) final summary: those after
    the last ``Run finished, takes`` line (go-ycsb prints interval reports of
    the same shape before it). Raises ValueError when there is none."""
    at = text.rfind(_RUN_FINISHED)
    if at < 0:
        raise ValueError("no 'Run finished' line in the YCSB output")
    rows: dict[str, YcsbRow] = {}
    for m in _YCSB_LINE.finditer(text, at):
        f = _fields(m.group("body"))
        rows[m.group("op")] = YcsbRow(
            op=m.group("op"), takes_s=f.get("Takes(s)", math.nan), count=int(f.get("Count", 0)),
            ops=f.get("OPS", math.nan), avg_us=f.get("Avg(us)", math.nan), min_us=f.get("Min(us)", math.nan),
            max_us=f.get("Max(us)", math.nan), p50_us=f.get("50th(us)", math.nan),
            p90_us=f.get("90th(us)", math.nan), p95_us=f.get("95th(us)", math.nan),
            p99_us=f.get("99th(us)", math.nan), p999_us=f.get("99.9th(us)", math.nan),
            p9999_us=f.get("99.99th(us)", math.nan))
    if not rows:
        raise ValueError("no per-operation lines after 'Run finished' in the YCSB output")
    return rows


_TPCH_QUERY = re.compile(r"^\[Summary\]\s+(Q\d+):\s*([\d.]+)s", re.MULTILINE)
_TPCH_FAILED = re.compile(r"execute run failed, err (?:check (q\d+) failed (.*)|execute (?:query )?(.*))")


def parse_tpch_run(text: str) -> tuple[dict[str, float], list[str]]:
    """go-tpc ``tpch run``: seconds per query from its ``[Summary] Q1: 1.23s``
    lines (to the first row: go-tpc stops its clock when the result starts),
    and the failures it printed (a wrong answer under ``--check`` or an error)."""
    seconds = {q: float(s) for q, s in _TPCH_QUERY.findall(text)}
    failures = [line.strip() for line in text.splitlines() if "execute run failed" in line]
    return seconds, failures


# ------------------------------------------------------------------ go-tpc's histogram

#: go-tpc v1.0.7 (pkg/measurement): HdrHistogram from 1 ms with 1 significant figure
_GO_TPC_UNIT_NS = 1 << 19  # the largest power of two <= 1 ms: 0.524 ms
_GO_TPC_SUB_BUCKETS = 32  # 2 * 10^1 rounded up to a power of two


def go_tpc_bucket_ms(value_ms: float) -> float:
    """The width of go-tpc's latency bucket that holds ``value_ms``: its
    percentiles are the upper edges of these buckets, 0.52 ms wide up to
    16.8 ms, 1.05 ms from 16.8 to 33.6 ms, and so on (3-6 % of the value)."""
    units = max(value_ms * 1e6 / _GO_TPC_UNIT_NS, 1.0)
    bucket = max(0, math.floor(math.log2(units / _GO_TPC_SUB_BUCKETS)) + 1) if units >= _GO_TPC_SUB_BUCKETS else 0
    return (_GO_TPC_UNIT_NS << bucket) / 1e6
