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

import dataclasses
import math
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import CommandError, ConfigError, InfrastructureError, MissingToolError
from wanbench.families import Family, Integrity, Metric, Section, engine_summaries
from wanbench.gate.integrity import TPCC_CONSISTENCY
from wanbench.interleave import Interleaved, Switch, interleave_rounds
from wanbench.redact import redactor
from wanbench.results import Latency, Round, WorkloadResult
from wanbench.sql import SqlTarget
from wanbench.workloads import sysproc
from wanbench.workloads.clientcpu import ClientLoad, assess, usable_cores
from wanbench.workloads.tpcc_checks import run_checks
from wanbench.workloads.tpcc_model import (
    _QUERIES,
    MIX_PCT,
    STATS_PREFIX,
    RunStats,
    TpccOptions,
    TpccSummary,
    expected_efficiency,
    merge_stats,
    parse_output,
    summarize,
)

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
SCRIPT = LUA_DIR / "tpcc.lua"

# ---------------------------------------------------------------- sysbench


@dataclass(frozen=True)
class SysbenchRun:
    command: str  # redacted
    exit_status: int
    stdout: str  # stdout and stderr as they came (redacted)
    wall_s: float
    cpu_s: float  # the sysbench process's user + system CPU


def sysbench_argv(conn: SqlTarget, opts: TpccOptions, command: str) -> list[str]:
    """argv without credentials: they go to sysbench in an options file."""
    argv = [
        opts.sysbench, str(SCRIPT),
        f"--mysql-host={conn.host}", f"--mysql-port={conn.port}", f"--mysql-db={conn.database}",
        f"--threads={opts.threads}", f"--warehouses={opts.warehouses}", f"--load-batch={opts.load_batch}",
    ]
    if command == "run":
        argv += [f"--time={max(1, round(opts.duration))}", "--mysql-ignore-errors=all",
                 f"--tpcc-wait={'on' if opts.wait else 'off'}", f"--time-scale={opts.time_scale:g}",
                 f"--rollback-pct={opts.rollback_pct}", "--report-interval=0"]
    argv.append(command)
    return argv


def run_sysbench(conn: SqlTarget, opts: TpccOptions, command: str, *, timeout: float,
                 window: sysproc.WindowHooks | None = None) -> SysbenchRun:
    """Run one sysbench command through ``sysproc.run`` (the supervisor every
    engine shares); its CPU comes from wait4 (exact, per process). ``window``
    (server-side evidence) is told when the threads start and when it ends."""
    if shutil.which(opts.sysbench) is None:
        raise MissingToolError(opts.sysbench, "apt-get install sysbench (1.0.20)")
    argv = sysbench_argv(conn, opts, command)
    res = sysproc.run(argv, what=f"sysbench tpcc {command} on {conn.label}", timeout=timeout, threads=opts.threads,
                      secrets=[f"mysql-user={conn.user}", f"mysql-password={conn.password}"],
                      cpus=conn.client_cpus, redact=redactor([conn.password]),
                      window_marker="Threads started!" if window is not None else None, window=window)
    result = SysbenchRun(res.command, res.exit_status, res.text, res.wall_s, res.cpu_s)
    if result.exit_status != 0:
        tail = "\n".join(res.text.strip().splitlines()[-5:])
        raise CommandError("localhost", res.command, result.exit_status, tail)
    return result


# ---------------------------------------------------------------- database


def _connect(conn: SqlTarget, *, with_db: bool = True) -> Any:
    return conn.connect(with_db=with_db, who="tpcc")


def ensure_database(conn: SqlTarget) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_]+", conn.database):
        raise ConfigError(f"tpcc: database name {conn.database!r} must be letters, digits and _")
    cnx = _connect(conn, with_db=False)
    try:
        cur = cnx.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{conn.database}`")
        cur.close()
    finally:
        cnx.close()


def loaded_warehouses(conn: SqlTarget) -> int:
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


def load(conn: SqlTarget, opts: TpccOptions, *, timeout: float = 900.0) -> LoadResult:
    """Drop and reload: items once, per-warehouse data split across ``opts.threads``."""
    ensure_database(conn)
    run_sysbench(conn, opts, "cleanup", timeout=120)
    start = time.monotonic()
    res = run_sysbench(conn, opts, "prepare", timeout=timeout)
    got = loaded_warehouses(conn)
    if got != opts.warehouses:
        raise InfrastructureError(f"tpcc: load of {opts.warehouses} warehouse(s) into {conn.label} is incomplete")
    return LoadResult(opts.warehouses, opts.threads, time.monotonic() - start, res.cpu_s)


def ensure_loaded(conn: SqlTarget, opts: TpccOptions) -> LoadResult | None:
    """Load unless the same number of warehouses is already there; None when reused."""
    ensure_database(conn)
    if loaded_warehouses(conn) == opts.warehouses:
        return None
    return load(conn, opts)


@dataclass(frozen=True)
class _RoundRun:
    sb: SysbenchRun
    stats: RunStats
    summary: TpccSummary
    queries: int


def _one_round(conn: SqlTarget, opts: TpccOptions, window: sysproc.WindowHooks | None) -> _RoundRun:
    sb = run_sysbench(conn, opts, "run", timeout=opts.duration + opts.grace
                      + (opts.time_scale * 30.0 if opts.wait else 0.0), window=window)
    stats = parse_output(sb.stdout)
    m = _QUERIES.search(sb.stdout)
    return _RoundRun(sb, stats, summarize(stats, opts), int(m.group(1)) if m else 0)


def run(conn: SqlTarget, opts: TpccOptions, *, checks: bool = True, rounds: int = 1,
        window: sysproc.WindowHooks | None = None, switch: Switch | None = None) -> WorkloadResult:
    """``rounds`` TPC-C runs back to back on a loaded database, then the
    consistency checks (once, after the last: a fault must not cost data).
    ``window`` (server-side evidence) sees each round's measured window.
    ``switch``: the cell's fault switch; each round then runs beside a
    level-0 round (``wanbench.interleave``), whose window the evidence does not see.

    A failed check does not raise: it is listed in ``extra["checks"]`` and
    ``failed_checks(result)`` names it, so the caller decides (tests fail)."""
    cores = usable_cores(conn.client_cpus)
    if switch is None:
        done = [_one_round(conn, opts, window) for _ in range(max(1, rounds))]
        check_results = [c.to_json() for c in run_checks(conn)] if checks else []
        return to_workload_result(done, opts, checks=check_results, cores=cores)
    ran = interleave_rounds(
        max(1, rounds), switch, lambda faulted, _i, _n: _one_round(conn, opts, window if faulted else None),
        lambda rs: to_workload_result(rs, opts, checks=[], cores=cores))
    check_results = [c.to_json() for c in run_checks(conn)] if checks else []
    result = to_workload_result(ran.faulted, opts, checks=check_results, cores=cores)
    reference = to_workload_result(ran.reference, opts, checks=[], cores=cores)
    return Interleaved(result, reference, ran.plan, ran.early_stop).result()


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
            "mix_target": dict(MIX_PCT),
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
        self._loaded: dict[tuple[str, int], SqlTarget] = {}

    def dataset(self, warehouses: int, path: str) -> SqlTarget:
        """A connection to a database holding exactly ``warehouses``; loads
        (in parallel) only when it does not."""
        ctx = self.ctx
        target = ctx.cluster.sql_targets(path)[0]
        key = (target.address, warehouses)
        if key not in self._loaded:
            # one dataset per database: loading another warehouse count replaces it
            for other in [k for k in self._loaded if k[0] == target.address]:
                del self._loaded[other]
            conn = dataclasses.replace(target, database=self.DATABASE)
            opts = TpccOptions(warehouses=warehouses, threads=min(8, 2 * warehouses + 2))
            ctx.progress(f"tpcc: checking/loading {warehouses} warehouse(s) into {conn.label}")
            res = ensure_loaded(conn, opts)
            if res is not None:
                ctx.progress(f"tpcc: loaded {warehouses} warehouse(s) in {res.seconds:.1f}s "
                             f"with {res.threads} loader threads")
            self._loaded[key] = conn
        return self._loaded[key]

    def runner(self, variant: str, path: str) -> Any:
        """``run(threads)`` on ``variant`` warehouses (``w4``; plain ``tpcc``: the first ``--warehouses``)."""
        ctx = self.ctx
        warehouses = _warehouses(variant) if variant else list(ctx.option("warehouses"))[0]
        self.dataset(warehouses, path)

        def run_cell(concurrency: int) -> WorkloadResult:
            conn = self.dataset(warehouses, path)  # tests/tpcc may have loaded another count since
            opts = TpccOptions(warehouses=warehouses, threads=concurrency, duration=float(ctx.option("duration")),
                               wait=bool(ctx.option("tpcc_wait")), time_scale=float(ctx.option("tpcc_time_scale")))
            return run(conn, opts, rounds=int(ctx.option("rounds")), window=ctx.window(), switch=ctx.interleave())

        return run_cell


def _warehouses(variant: str) -> int:
    m = re.fullmatch(r"w([1-9][0-9]*)", variant)
    if m is None:
        raise ConfigError(f"tpcc: variant {variant!r} is not a warehouse count such as w4 (tpcc:w4)")
    return int(m.group(1))


# -- the TPC-C family (tests/tpcc; ``workload: tpcc`` in a fault scenario) -----------------------------------------

#: tests/tpcc measure the database, not the proxy tier
TESTS_PATH = "direct"


def tpcc_samples(cell: Mapping[str, Any]) -> dict[str, list[float]]:
    """tpmC per round (a cell from before ``tpmc_rounds``: its one tpmC)."""
    extra = cell.get("workload_extra") or {}
    values = extra.get("tpmc_rounds") if "tpmc_rounds" in extra else [extra.get("tpmc")]
    finite = [float(v) for v in values or () if v is not None and math.isfinite(float(v))]
    return {"tpmc": finite} if finite else {}


def tpcc_headline(cell: Mapping[str, Any]) -> dict[str, float]:
    tpmc = (cell.get("workload_extra") or {}).get("tpmc")
    return {"tpmc": float(tpmc)} if tpmc is not None else {}


def _is_tpcc(cell: Mapping[str, Any]) -> bool:
    return cell.get("workload") == "tpcc"


def tpcc_rows(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """End-of-run table rows: one per TPC-C cell (results JSON dicts)."""
    rows = []
    for c in cells:
        if not _is_tpcc(c):
            continue
        extra = c.get("workload_extra") or {}
        no = (extra.get("per_type") or {}).get("NEW_ORDER", {})
        rows.append({"test_id": c["test_id"], "warehouses": extra.get("warehouses"), "threads": c["concurrency"],
                     "tpmc": extra.get("tpmc"), "tpm_total": extra.get("tpm_total"),
                     "efficiency": extra.get("efficiency"), "new_order_p95_ms": no.get("p95"),
                     "new_order_p99_ms": no.get("p99"), "errors": c.get("errors"),
                     "checks_failed": [k["name"] for k in extra.get("checks", []) if not k.get("passed")]})
    return rows


def tpcc_tables(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    rows = tpcc_rows(cells)
    return {"tpcc": rows} if rows else None


def tpcc_summary(cells: Sequence[Mapping[str, Any]]) -> list[Section]:
    """go-tpc's summary block per TPC-C cell, as users compare it with seeds 001/003/004."""
    mine = [c for c in cells if _is_tpcc(c)]
    return [engine_summaries(mine, title="wanbench tpcc: go-tpc summary per cell", checks="consistency",
                             path=TESTS_PATH)] if mine else []


FAMILY = Family(
    "tpcc",
    "the TPC-C workload (tests/tpcc)",
    fixtures="wanbench.fixtures.tpcc",
    engine="wanbench.workloads.tpcc:TpccEngine",
    metrics=(Metric("tpmc", True, "tpmC", "tpmC"),),
    samples=tpcc_samples,
    headline=tpcc_headline,
    integrity=Integrity(TPCC_CONSISTENCY, "TPC-C consistency violated after the run ({n} check(s))"),
    fingerprint=("duration", "warehouses", "tpcc_wait"),
    tables=tpcc_tables,
    summary=tpcc_summary,
    package_data=("lua/tpcc.lua", "lua/tpcc_common.lua"),
)
