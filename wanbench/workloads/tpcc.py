"""TPC-C engine: load, run and summarise the sysbench Lua TPC-C (wanbench/lua/tpcc.lua).

sysbench's C/LuaJIT core drives the transactions, so the numbers are the
database's, not a Python driver's (``bench/tpcc_driver_cost`` measures that).
Each sysbench thread is one terminal bound to a home warehouse; it prints its
per-type counts, error codes and a 1 %-bucket latency histogram when it ends,
and this module merges them into tpmC, tpmTotal, efficiency and go-tpc's
``[Summary]`` lines (the format of seeds 001/003/004).

The password travels to sysbench in a 0600 ``--config-file`` that is deleted
right after the run: it is never on a command line, in ``ps`` or in a report.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wanbench.errors import CommandError, ConfigError, InfrastructureError, MissingToolError
from wanbench.results import Latency, Round, WorkloadResult
from wanbench.workloads import sysproc
from wanbench.workloads.clientcpu import ClientLoad, assess, usable_cores
from wanbench.workloads.sqlconn import Connection, connect
from wanbench.workloads.tpcc_checks import run_checks

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
SCRIPT = LUA_DIR / "tpcc.lua"

TYPES = ("NEW_ORDER", "PAYMENT", "ORDER_STATUS", "DELIVERY", "STOCK_LEVEL")
MIX_PCT = {"NEW_ORDER": 45.0, "PAYMENT": 43.0, "ORDER_STATUS": 4.0, "DELIVERY": 4.0, "STOCK_LEVEL": 4.0}
# Clause 5.2.5.7 keying time and mean think time, seconds (mirrors tpcc.lua).
KEYING_S = {"NEW_ORDER": 18.0, "PAYMENT": 3.0, "ORDER_STATUS": 2.0, "DELIVERY": 2.0, "STOCK_LEVEL": 2.0}
THINK_S = {"NEW_ORDER": 12.0, "PAYMENT": 12.0, "ORDER_STATUS": 10.0, "DELIVERY": 5.0, "STOCK_LEVEL": 5.0}
# The spec's ceiling: 10 terminals per warehouse at zero response time give
# 12.86 New-Orders per minute per warehouse; go-tpc divides by it too.
TPMC_PER_WAREHOUSE = 12.86
LOG_BASE = math.log(1.01)  # tpcc.lua's histogram bucket width
STATS_PREFIX = "TPCC_STATS "
LOAD_PREFIX = "TPCC_LOAD "


@dataclass(frozen=True)
class TpccOptions:
    """One TPC-C run. ``time_scale`` multiplies keying and think times (tests use 0.01)."""

    warehouses: int = 1
    threads: int = 4
    duration: float = 30.0
    wait: bool = False
    time_scale: float = 1.0
    rollback_pct: int = 1
    load_batch: int = 500
    sysbench: str = "sysbench"
    grace: float = 60.0  # beyond duration before the run is killed

    def __post_init__(self) -> None:
        if self.warehouses < 1 or self.threads < 1:
            raise ConfigError(f"tpcc: warehouses ({self.warehouses}) and threads ({self.threads}) must be >= 1")
        if self.duration <= 0 or self.time_scale <= 0:
            raise ConfigError(f"tpcc: duration ({self.duration}) and time_scale ({self.time_scale}) must be > 0")
        if not 0 <= self.rollback_pct <= 100:
            raise ConfigError(f"tpcc: rollback_pct {self.rollback_pct} is not a percentage")

    @property
    def label(self) -> str:
        return f"w{self.warehouses}-t{self.threads}" + ("-wait" if self.wait else "")


# ------------------------------------------------------------------ stats


@dataclass
class Bucketed:
    """Count, sum, min, max and log histogram of one kind of outcome."""

    count: int = 0
    sum_us: float = 0.0
    min_us: float = math.inf
    max_us: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)

    def merge(self, data: Mapping[str, Any]) -> None:
        n = int(data.get("count", 0))
        if not n:
            return
        self.count += n
        self.sum_us += float(data.get("sum_us", 0.0))
        self.max_us = max(self.max_us, float(data.get("max_us", 0.0)))
        mn = float(data.get("min_us", -1))
        if mn >= 0:
            self.min_us = min(self.min_us, mn)
        for k, v in (data.get("hist") or {}).items():
            b = int(k)
            self.hist[b] = self.hist.get(b, 0) + int(v)

    def percentile_ms(self, pct: float) -> float:
        """Upper edge of the bucket holding the pct-th sample (at most the true max)."""
        if not self.count:
            return math.nan
        rank = max(1, math.ceil(pct / 100.0 * self.count))
        seen = 0
        for b in sorted(self.hist):
            seen += self.hist[b]
            if seen >= rank:
                return min(math.exp((b + 1) * LOG_BASE), self.max_us) / 1000.0
        return self.max_us / 1000.0

    def latency(self) -> Latency:
        if not self.count:
            return Latency()
        return Latency(
            avg=self.sum_us / self.count / 1000.0,
            min=(self.min_us if self.min_us != math.inf else math.nan) / 1000.0,
            p50=self.percentile_ms(50), p90=self.percentile_ms(90), p95=self.percentile_ms(95),
            p99=self.percentile_ms(99), p999=self.percentile_ms(99.9), max=self.max_us / 1000.0,
        )


@dataclass
class TypeStats:
    ok: Bucketed = field(default_factory=Bucketed)
    err: Bucketed = field(default_factory=Bucketed)
    rollbacks: int = 0
    codes: dict[str, int] = field(default_factory=dict)

    @property
    def attempts(self) -> int:
        return self.ok.count + self.err.count


@dataclass
class RunStats:
    """Per-thread TPCC_STATS lines merged."""

    seconds: float
    threads: int
    types: dict[str, TypeStats]
    waits: int = 0
    wait_requested_s: float = 0.0
    wait_actual_s: float = 0.0

    def waits_json(self) -> dict[str, float]:
        over = (self.wait_actual_s - self.wait_requested_s) / self.waits * 1000.0 if self.waits else 0.0
        return {"count": self.waits, "requested_s": round(self.wait_requested_s, 3),
                "actual_s": round(self.wait_actual_s, 3), "oversleep_ms_avg": round(over, 3)}


def parse_output(text: str) -> RunStats:
    """Merge every thread's ``TPCC_STATS`` line of a sysbench run's stdout."""
    types = {t: TypeStats() for t in TYPES}
    seconds = 0.0
    threads = 0
    waits, requested, actual = 0, 0.0, 0.0
    for line in text.splitlines():
        if not line.startswith(STATS_PREFIX):
            continue
        try:
            data = json.loads(line[len(STATS_PREFIX):])
        except ValueError as exc:
            raise InfrastructureError(f"tpcc: unreadable stats line from sysbench ({exc}): {line[:200]}") from None
        threads += 1
        seconds = max(seconds, float(data.get("seconds", 0.0)))
        w = data.get("waits") or {}
        waits += int(w.get("count", 0))
        requested += float(w.get("requested_us", 0.0)) / 1e6
        actual += float(w.get("actual_us", 0.0)) / 1e6
        for name, d in (data.get("types") or {}).items():
            ts = types.setdefault(name, TypeStats())
            ts.ok.merge(d)
            ts.rollbacks += int(d.get("rollbacks", 0))
            err = d.get("err") or {}
            ts.err.merge(err)
            for code, n in (err.get("codes") or {}).items():
                ts.codes[str(code)] = ts.codes.get(str(code), 0) + int(n)
    if not threads:
        raise InfrastructureError("tpcc: sysbench printed no TPCC_STATS line (did every thread die?)")
    return RunStats(seconds=seconds, threads=threads, types=types, waits=waits, wait_requested_s=requested,
                    wait_actual_s=actual)


# ---------------------------------------------------------------- summary


@dataclass(frozen=True)
class SummaryRow:
    """One go-tpc ``[Summary]`` line."""

    name: str
    takes_s: float
    count: int
    tpm: float
    sum_ms: float
    latency: Latency

    def render(self) -> str:
        lat = self.latency
        return (f"[Summary] {self.name} - Takes(s): {self.takes_s:.1f}, Count: {self.count}, TPM: {self.tpm:.1f}, "
                f"Sum(ms): {self.sum_ms:.1f}, Avg(ms): {lat.avg:.1f}, 50th(ms): {lat.p50:.1f}, "
                f"90th(ms): {lat.p90:.1f}, 95th(ms): {lat.p95:.1f}, 99th(ms): {lat.p99:.1f}, "
                f"99.9th(ms): {lat.p999:.1f}, Max(ms): {lat.max:.1f}")

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "tpm": self.tpm, "sum_ms": self.sum_ms, "takes_s": self.takes_s,
                **{k: v for k, v in self.latency.to_json().items()}}


@dataclass(frozen=True)
class TpccSummary:
    seconds: float
    warehouses: int
    threads: int
    wait: bool
    time_scale: float
    rows: tuple[SummaryRow, ...]
    tpmc: float
    tpm_total: float
    efficiency: float
    mix: Mapping[str, float]
    rollbacks: int
    errors_by_code: Mapping[str, int]

    def row(self, name: str) -> SummaryRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def render(self) -> str:
        """go-tpc's summary block, then a line that says what efficiency means here."""
        lines = [r.render() for r in self.rows]
        lines.append(f"tpmC: {self.tpmc:.1f}, tpmTotal: {self.tpm_total:.1f}, efficiency: {self.efficiency:.1f}%")
        if self.wait:
            scale = "" if self.time_scale == 1 else f", keying/think times x{self.time_scale:g} (efficiency scaled)"
            lines.append(f"# efficiency = tpmC / ({TPMC_PER_WAREHOUSE} x {self.warehouses} warehouses) with "
                         f"keying and think times{scale}; 100% needs {10 * self.warehouses} terminals")
        else:
            lines.append("# efficiency is only meaningful with --tpcc-wait (keying and think times); "
                         "without waits it only shows how far past the spec's ceiling the closed loop runs")
        return "\n".join(lines)


def summarize(stats: RunStats, opts: TpccOptions) -> TpccSummary:
    """tpmC = New-Orders (rolled-back ones included, clause 5.4.2) per minute."""
    secs = stats.seconds if stats.seconds > 0 else opts.duration
    rows: list[SummaryRow] = []
    codes: dict[str, int] = {}
    for name in sorted(stats.types):
        ts = stats.types[name]
        for suffix, b in (("", ts.ok), ("_ERR", ts.err)):
            if b.count:
                rows.append(SummaryRow(name + suffix, secs, b.count, b.count / secs * 60.0, b.sum_us / 1000.0,
                                       b.latency()))
        for code, n in ts.codes.items():
            codes[code] = codes.get(code, 0) + n
    no = stats.types.get("NEW_ORDER", TypeStats()).ok.count
    tpmc = no / secs * 60.0
    tpm_total = sum(ts.ok.count for ts in stats.types.values()) / secs * 60.0
    ceiling = TPMC_PER_WAREHOUSE * opts.warehouses / (opts.time_scale if opts.wait else 1.0)
    attempts = sum(ts.attempts for ts in stats.types.values())
    mix = {t: (stats.types[t].attempts / attempts * 100.0 if attempts else math.nan) for t in TYPES}
    return TpccSummary(
        seconds=secs, warehouses=opts.warehouses, threads=opts.threads, wait=opts.wait,
        time_scale=opts.time_scale, rows=tuple(rows), tpmc=tpmc, tpm_total=tpm_total,
        efficiency=tpmc / ceiling * 100.0, mix=mix,
        rollbacks=stats.types.get("NEW_ORDER", TypeStats()).rollbacks, errors_by_code=codes,
    )


def expected_efficiency(summary: TpccSummary, *, oversleep_s: float = 0.0) -> float:
    """Efficiency the waits allow given the measured response times: each
    terminal's mean cycle is keying + response + think, weighted by the mix.
    ``oversleep_s`` (mean per wait, two waits per cycle) accounts for a loaded
    client that wakes up late."""
    cycle = 2 * oversleep_s
    for t in TYPES:
        row = summary.row(t)
        resp_s = row.latency.avg / 1000.0 if row and row.count else 0.0
        cycle += MIX_PCT[t] / 100.0 * ((KEYING_S[t] + THINK_S[t]) * summary.time_scale + resp_s)
    tpmc = summary.threads * (MIX_PCT["NEW_ORDER"] / 100.0) / cycle * 60.0
    return tpmc / (TPMC_PER_WAREHOUSE * summary.warehouses / summary.time_scale) * 100.0


# ---------------------------------------------------------------- sysbench


def _redact(text: str, conn: Connection) -> str:
    return text.replace(conn.password, "***") if conn.password else text


@dataclass(frozen=True)
class SysbenchRun:
    command: str  # redacted
    exit_status: int
    stdout: str  # stdout and stderr as they came (redacted)
    wall_s: float
    cpu_s: float  # the sysbench process's user + system CPU


def sysbench_argv(conn: Connection, opts: TpccOptions, command: str) -> list[str]:
    """argv without credentials: they go to sysbench in an options file."""
    argv = [
        opts.sysbench, str(SCRIPT),
        f"--mysql-host={conn.host}", f"--mysql-port={conn.port}", f"--mysql-db={conn.db}",
        f"--threads={opts.threads}", f"--warehouses={opts.warehouses}", f"--load-batch={opts.load_batch}",
    ]
    if command == "run":
        argv += [f"--time={max(1, round(opts.duration))}", "--mysql-ignore-errors=all",
                 f"--tpcc-wait={'on' if opts.wait else 'off'}", f"--time-scale={opts.time_scale:g}",
                 f"--rollback-pct={opts.rollback_pct}", "--report-interval=0"]
    argv.append(command)
    return argv


def run_sysbench(conn: Connection, opts: TpccOptions, command: str, *, timeout: float,
                 window: sysproc.WindowHooks | None = None) -> SysbenchRun:
    """Run one sysbench command through ``sysproc.run`` (the supervisor every
    engine shares); its CPU comes from wait4 (exact, per process). ``window``
    (server-side evidence) is told when the threads start and when it ends."""
    if shutil.which(opts.sysbench) is None:
        raise MissingToolError(opts.sysbench, "apt-get install sysbench (1.0.20)")
    argv = sysbench_argv(conn, opts, command)
    res = sysproc.run(argv, what=f"sysbench tpcc {command} on {conn.label}", timeout=timeout, threads=opts.threads,
                      secrets=[f"mysql-user={conn.user}", f"mysql-password={conn.password}"],
                      cpus=conn.client_cpus, redact=lambda text: _redact(text, conn),
                      window_marker="Threads started!" if window is not None else None, window=window)
    result = SysbenchRun(res.command, res.exit_status, res.text, res.wall_s, res.cpu_s)
    if result.exit_status != 0:
        tail = "\n".join(res.text.strip().splitlines()[-5:])
        raise CommandError("localhost", res.command, result.exit_status, tail)
    return result


# ---------------------------------------------------------------- database


def _connect(conn: Connection, *, with_db: bool = True) -> Any:
    return connect(conn, with_db=with_db, who="tpcc")


def ensure_database(conn: Connection) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_]+", conn.db):
        raise ConfigError(f"tpcc: database name {conn.db!r} must be letters, digits and _")
    cnx = _connect(conn, with_db=False)
    try:
        cur = cnx.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{conn.db}`")
        cur.close()
    finally:
        cnx.close()


def loaded_warehouses(conn: Connection) -> int:
    """Warehouses of a complete load, 0 when there is none (or it is partial)."""
    import mysql.connector

    cnx = _connect(conn)
    try:
        cur = cnx.cursor()
        try:
            cur.execute("SELECT COUNT(*) FROM warehouse")
            (w,) = cur.fetchone()
            cur.execute("SELECT COUNT(*) FROM item")
            (items,) = cur.fetchone()
            cur.execute("SELECT COUNT(*) FROM stock")
            (stock,) = cur.fetchone()
            cur.execute("SELECT COUNT(*) FROM district")
            (districts,) = cur.fetchone()
        except mysql.connector.Error:
            return 0
        finally:
            cur.close()
    finally:
        cnx.close()
    ok = items == 100_000 and stock == 100_000 * w and districts == 10 * w
    return int(w) if ok else 0


@dataclass(frozen=True)
class LoadResult:
    warehouses: int
    threads: int
    seconds: float
    client_cpu_s: float


def load(conn: Connection, opts: TpccOptions, *, timeout: float = 900.0) -> LoadResult:
    """Drop and reload: items once, per-warehouse data split across ``opts.threads``."""
    ensure_database(conn)
    run_sysbench(conn, opts, "cleanup", timeout=120)
    start = time.monotonic()
    res = run_sysbench(conn, opts, "prepare", timeout=timeout)
    got = loaded_warehouses(conn)
    if got != opts.warehouses:
        raise InfrastructureError(f"tpcc: load of {opts.warehouses} warehouse(s) into {conn.label} is incomplete")
    return LoadResult(opts.warehouses, opts.threads, time.monotonic() - start, res.cpu_s)


def ensure_loaded(conn: Connection, opts: TpccOptions) -> LoadResult | None:
    """Load unless the same number of warehouses is already there; None when reused."""
    ensure_database(conn)
    if loaded_warehouses(conn) == opts.warehouses:
        return None
    return load(conn, opts)


_QUERIES = re.compile(r"^\s*queries:\s+(\d+)", re.M)


def merge_stats(parts: Sequence[RunStats]) -> RunStats:
    """Rounds one after another: counts and histograms add, and so do seconds."""
    types = {t: TypeStats() for t in TYPES}
    for p in parts:
        for name, ts in p.types.items():
            into = types.setdefault(name, TypeStats())
            for mine, theirs in ((into.ok, ts.ok), (into.err, ts.err)):
                mine.merge({"count": theirs.count, "sum_us": theirs.sum_us, "max_us": theirs.max_us,
                            "min_us": theirs.min_us if theirs.min_us != math.inf else -1,
                            "hist": {str(k): v for k, v in theirs.hist.items()}})
            into.rollbacks += ts.rollbacks
            for code, n in ts.codes.items():
                into.codes[code] = into.codes.get(code, 0) + n
    return RunStats(seconds=sum(p.seconds for p in parts), threads=max((p.threads for p in parts), default=0),
                    types=types, waits=sum(p.waits for p in parts),
                    wait_requested_s=sum(p.wait_requested_s for p in parts),
                    wait_actual_s=sum(p.wait_actual_s for p in parts))


@dataclass(frozen=True)
class _RoundRun:
    sb: SysbenchRun
    stats: RunStats
    summary: TpccSummary
    queries: int


def run(conn: Connection, opts: TpccOptions, *, checks: bool = True, rounds: int = 1,
        window: sysproc.WindowHooks | None = None) -> WorkloadResult:
    """``rounds`` TPC-C runs back to back on a loaded database, then the
    consistency checks (once, after the last: a fault must not cost data).
    ``window`` (server-side evidence) sees each round's measured window.

    A failed check does not raise: it is listed in ``extra["checks"]`` and
    ``failed_checks(result)`` names it, so the caller decides (tests fail)."""
    done: list[_RoundRun] = []
    for _ in range(max(1, rounds)):
        sb = run_sysbench(conn, opts, "run", timeout=opts.duration + opts.grace
                          + (opts.time_scale * 30.0 if opts.wait else 0.0), window=window)
        stats = parse_output(sb.stdout)
        m = _QUERIES.search(sb.stdout)
        done.append(_RoundRun(sb, stats, summarize(stats, opts), int(m.group(1)) if m else 0))
    check_results: list[dict[str, Any]] = []
    if checks:

        check_results = [c.to_json() for c in run_checks(conn)]
    return to_workload_result(done, opts, checks=check_results, cores=usable_cores(conn.client_cpus))


def _round(r: _RoundRun) -> Round:
    s = r.summary
    no_row = s.row("NEW_ORDER")
    ok = sum(x.count for x in s.rows if not x.name.endswith("_ERR"))
    errors = sum(x.count for x in s.rows if x.name.endswith("_ERR"))
    secs = s.seconds
    return Round(seconds=secs, queries=r.queries, qps=r.queries / secs if secs else math.nan,
                 tps=ok / secs if secs else math.nan, latency_ms=no_row.latency if no_row else Latency(),
                 errors=errors)


def to_workload_result(done: Sequence[_RoundRun], opts: TpccOptions, *, checks: Sequence[Mapping[str, Any]],
                       cores: int) -> WorkloadResult:
    """Headline numbers over all rounds (merged histograms); per-round tpmC
    in ``extra["tpmc_rounds"]`` for the gate's statistics."""
    stats = merge_stats([r.stats for r in done])
    summary = summarize(stats, opts) if len(done) > 1 else done[0].summary
    no_row = summary.row("NEW_ORDER")
    no_latency = no_row.latency if no_row else Latency()
    ok_total = sum(r.count for r in summary.rows if not r.name.endswith("_ERR"))
    errors = sum(r.count for r in summary.rows if r.name.endswith("_ERR"))
    text = summary.render()
    cpu = sum(r.sb.cpu_s for r in done)
    wall = sum(r.sb.wall_s for r in done)
    more: dict[str, Any] = {}
    if opts.wait:
        waits = stats.waits_json()
        more = {"efficiency_expected": expected_efficiency(summary), "waits": waits,
                "efficiency_expected_measured_waits": expected_efficiency(
                    summary, oversleep_s=waits["oversleep_ms_avg"] / 1000.0)}
    reports = tuple(
        r.summary.render() + "\n\n" + "\n".join(x for x in r.sb.stdout.splitlines() if not x.startswith(STATS_PREFIX))
        for r in done)
    return WorkloadResult(
        workload="tpcc",
        concurrency=opts.threads,
        rounds=tuple(_round(r) for r in done),
        latency_ms=no_latency,
        errors=errors,
        errors_by_code=dict(summary.errors_by_code),
        reports=reports,
        client={**assess([ClientLoad(r.sb.cpu_s, r.sb.wall_s, opts.threads, cores)
                          for r in done]),
                "cpu_s": cpu, "wall_s": wall,
                "cpu_ms_per_txn": cpu / (ok_total + errors) * 1000.0 if ok_total + errors else math.nan,
                "command": done[0].sb.command},
        extra={
            "tpmc": summary.tpmc, "tpm_total": summary.tpm_total, "efficiency": summary.efficiency,
            "efficiency_meaningful": summary.wait, "tpmc_rounds": [r.summary.tpmc for r in done],
            "warehouses": opts.warehouses, "wait": opts.wait, "time_scale": opts.time_scale,
            "per_type": {r.name: r.to_json() for r in summary.rows}, "mix": dict(summary.mix),
            "rollbacks": summary.rollbacks, "checks": list(checks), "summary_text": text, **more,
        },
    )


def parse_time_scale(text: str) -> float:
    """``--tpcc-time-scale``: a factor > 0 for keying and think times (0.01 in tests)."""
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a number (examples: 1, 0.1, 0.01)") from None
    if not 0 < value <= 10:
        raise ConfigError(f"{text!r}: the time scale must be > 0 and <= 10")
    return value


def failed_checks(result: WorkloadResult) -> list[Mapping[str, Any]]:
    return [c for c in result.extra.get("checks", []) if not c.get("passed")]


class TpccEngine:
    """TPC-C for the fixtures: ``dataset(warehouses, path)`` for tests/tpcc,
    and the workload of a fault scenario (``workload: tpcc``: the first
    ``--warehouses`` value, loaded before the fault is applied). One cache of
    what is loaded, since both use the same database."""

    DATABASE = "wanbench_tpcc"

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._loaded: dict[tuple[str, int], Connection] = {}

    def dataset(self, warehouses: int, path: str) -> Connection:
        """A connection to a database holding exactly ``warehouses``; loads
        (in parallel) only when it does not."""
        ctx = self.ctx
        target = ctx.cluster.sql_targets(path)[0]
        key = (target.address, warehouses)
        if key not in self._loaded:
            # one dataset per database: loading another warehouse count replaces it
            for other in [k for k in self._loaded if k[0] == target.address]:
                del self._loaded[other]
            conn = Connection(target.host, target.port, target.credentials.user, target.credentials.password,
                              self.DATABASE, client_cpus=ctx.cluster.client_cpus())
            opts = TpccOptions(warehouses=warehouses, threads=min(8, 2 * warehouses + 2))
            ctx.progress(f"tpcc: checking/loading {warehouses} warehouse(s) into {conn.label}")
            res = ensure_loaded(conn, opts)
            if res is not None:
                ctx.progress(f"tpcc: loaded {warehouses} warehouse(s) in {res.seconds:.1f}s "
                             f"with {res.threads} loader threads")
            self._loaded[key] = conn
        return self._loaded[key]

    def runner(self, variant: str, path: str) -> Any:
        if variant:
            raise ConfigError(f"tpcc has no variants (got tpcc:{variant})")
        ctx = self.ctx
        warehouses = list(ctx.option("warehouses"))[0]
        self.dataset(warehouses, path)

        def run_cell(concurrency: int) -> WorkloadResult:
            conn = self.dataset(warehouses, path)  # tests/tpcc may have loaded another count since
            opts = TpccOptions(warehouses=warehouses, threads=concurrency, duration=float(ctx.option("duration")),
                               wait=bool(ctx.option("tpcc_wait")), time_scale=float(ctx.option("tpcc_time_scale")))
            return run(conn, opts, rounds=int(ctx.option("rounds")), window=ctx.window())

        return run_cell
