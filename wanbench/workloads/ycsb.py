"""YCSB engine: the core workloads A-F on sysbench's LuaJIT (wanbench/lua/ycsb.lua).

sysbench already is the load generator of every family (one supervisor, fault
handling and error counting), so YCSB's CoreWorkload is re-implemented in Lua
with YCSB's own definitions (key names, scrambled zipfian, latest, uniform,
proportions) and the numbers are printed in go-ycsb's summary shape, per
operation. go-ycsb itself (v1.0.3, ``scripts/setup --cross-check``) is the
standing cross-check: ``bench/cross_check`` runs both on one lab (docs/ycsb.md).

This module: the workloads, a cell's options, loading the table, running a
cell and the engine the fixtures use. YCSB's key math is in ``ycsb_keys``,
the per-operation numbers in ``ycsb_stats``, the correctness checks in
``ycsb_checks``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.interleave import Interleaved, Switch, interleave_rounds
from wanbench.redact import redactor
from wanbench.results import Round, WorkloadResult
from wanbench.sql import SqlTarget
from wanbench.units import parse_list
from wanbench.workloads import sysproc
from wanbench.workloads.clientcpu import ClientLoad, assess, usable_cores
from wanbench.workloads.ycsb_checks import (
    DATABASE,
    TABLE,
    Check,
    field_names,
    remove_inserts,
    run_checks,
    sql,
)
from wanbench.workloads.ycsb_keys import key_name, key_space, zeta
from wanbench.workloads.ycsb_stats import (
    STATS_PREFIX,
    RunStats,
    all_ops,
    merge_stats,
    parse_output,
    per_op_metrics,
    summary_rows,
)

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
SCRIPT = LUA_DIR / "ycsb.lua"


@dataclass(frozen=True)
class CoreWorkload:
    """One of YCSB's workloads/workload[a-f] files."""

    name: str
    mix: Mapping[str, float]
    distribution: str  # zipfian | latest
    description: str

    @property
    def letter(self) -> str:
        return self.name[-1]

    @property
    def insert_proportion(self) -> float:
        return self.mix.get("INSERT", 0.0)


WORKLOADS: Mapping[str, CoreWorkload] = {w.name: w for w in (
    CoreWorkload("workloada", {"READ": 0.5, "UPDATE": 0.5}, "zipfian", "update heavy: 50/50 read/update"),
    CoreWorkload("workloadb", {"READ": 0.95, "UPDATE": 0.05}, "zipfian", "read mostly: 95/5 read/update"),
    CoreWorkload("workloadc", {"READ": 1.0}, "zipfian", "read only"),
    CoreWorkload("workloadd", {"READ": 0.95, "INSERT": 0.05}, "latest", "read latest: 95/5 read/insert"),
    CoreWorkload("workloade", {"SCAN": 0.95, "INSERT": 0.05}, "zipfian",
                 "short ranges: 95/5 scan/insert, scan length uniform 1..max"),
    CoreWorkload("workloadf", {"READ": 0.5, "READ_MODIFY_WRITE": 0.5}, "zipfian",
                 "read-modify-write: 50/50 read/read-modify-write"),
)}


def parse_workloads(text: str) -> list[str]:
    """``--ycsb-workloads``: ``a,c`` or ``workloada,workloadc``; ``all``."""
    if text.strip() == "all":
        return list(WORKLOADS)
    out = []
    for name in parse_list(text, lambda s: s.strip().lower()):
        full = name if name.startswith("workload") else f"workload{name}"
        if full not in WORKLOADS:
            raise ConfigError(f"unknown YCSB workload {name!r} (known: a-f, workloada..workloadf, all)")
        out.append(full)
    return out


# ---------------------------------------------------------------- YCSB's math

# ---------------------------------------------------------------- options


@dataclass(frozen=True)
class YcsbOptions:
    """One YCSB cell: a core workload at a thread count over a record set."""

    workload: str = "workloada"
    threads: int = 8
    records: int = 10_000
    fields: int = 10
    field_length: int = 100
    operations: int = 0  # 0: run for ``duration``
    duration: float = 30.0
    max_scan_length: int = 100
    key_stats: bool = False
    load_batch: int = 200
    sysbench: str = "sysbench"
    grace: float = 60.0

    def __post_init__(self) -> None:
        if self.workload not in WORKLOADS:
            raise ConfigError(f"ycsb: unknown workload {self.workload!r} (known: {', '.join(WORKLOADS)})")
        for name in ("threads", "records", "fields", "field_length", "max_scan_length", "load_batch"):
            if getattr(self, name) < 1:
                raise ConfigError(f"ycsb: {name} must be >= 1, not {getattr(self, name)}")
        if self.records < 2:
            raise ConfigError("ycsb: at least 2 records (the latest distribution needs them)")
        if self.operations < 0 or (self.operations == 0 and self.duration <= 0):
            raise ConfigError("ycsb: give a positive operation count or duration")
        if self.fields > 100 or self.field_length > 16000:
            raise ConfigError("ycsb: at most 100 fields of at most 16000 characters")

    @property
    def core(self) -> CoreWorkload:
        return WORKLOADS[self.workload]

    @property
    def label(self) -> str:
        return f"{self.workload}-t{self.threads}"

    @property
    def key_space(self) -> int:
        return key_space(self.records, self.core.insert_proportion, self.operations)


# ---------------------------------------------------------------- database



def table_state(conn: SqlTarget, opts: YcsbOptions) -> str:
    """'' when usertable holds exactly the records of ``opts`` in their
    shape, else why not."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", conn.database):
        raise ConfigError(f"ycsb: database name {conn.database!r} must be letters, digits and _")
    sql(conn, [f"CREATE DATABASE IF NOT EXISTS `{conn.database}`"], with_db=False)
    cols = sql(conn, [("SELECT column_name, character_maximum_length FROM information_schema.columns "
                       "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                       (conn.database, TABLE))])[0]
    if not cols:
        return "no usertable"
    want = [("YCSB_KEY", 64)] + [(f, opts.field_length) for f in field_names(opts.fields)]
    have = [(str(c), int(n or 0)) for c, n in cols]
    if have != want:
        return f"usertable has columns {have[:3]}..., not {opts.fields} fields of {opts.field_length}"
    (count,), = sql(conn, [f"SELECT COUNT(*) FROM {TABLE}"])[0]
    if int(count) != opts.records:
        return f"usertable holds {count} records, not {opts.records}"
    probe = [key_name(k) for k in sorted({0, opts.records // 2, opts.records - 1})]
    (found,), = sql(conn, [(f"SELECT COUNT(*) FROM {TABLE} WHERE YCSB_KEY IN ({','.join(['%s'] * len(probe))})",
                            probe)])[0]
    if int(found) != len(probe):
        return "usertable's keys are not YCSB's hashed keys 0..records-1"
    return ""


@dataclass(frozen=True)
class LoadResult:
    """The load phase (seeds 003/004 comment on slow loads)."""

    records: int
    threads: int
    seconds: float
    client_cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else math.nan

    def render(self) -> str:
        return (f"[load] {self.records} records with {self.threads} threads in {self.seconds:.1f}s "
                f"= {self.records_per_s:.0f} records/s")

    def to_json(self) -> dict[str, Any]:
        return {"records": self.records, "threads": self.threads, "seconds": round(self.seconds, 3),
                "records_per_s": self.records_per_s, "client_cpu_s": round(self.client_cpu_s, 3)}


def _argv(conn: SqlTarget, opts: YcsbOptions, command: str, *, threads: int) -> list[str]:
    argv = [opts.sysbench, str(SCRIPT), f"--mysql-host={conn.host}", f"--mysql-port={conn.port}",
            f"--mysql-db={conn.database}", f"--threads={threads}", f"--records={opts.records}",
            f"--fields={opts.fields}", f"--field-length={opts.field_length}", f"--load-batch={opts.load_batch}"]
    if command == "run":
        core = opts.core
        argv += [f"--workload={core.letter}", f"--key-space={opts.key_space}",
                 f"--max-scan-length={opts.max_scan_length}", "--mysql-ignore-errors=all", "--report-interval=0",
                 f"--key-stats={'on' if opts.key_stats else 'off'}"]
        if core.distribution == "latest":
            argv.append(f"--latest-zetan={zeta(opts.records - 1)!r}")
        if opts.operations:
            argv += [f"--events={opts.operations}", "--time=0"]
        else:
            argv += ["--events=0", f"--time={max(1, round(opts.duration))}"]
    argv.append(command)
    return argv


def _secrets(conn: SqlTarget) -> list[str]:
    return [f"mysql-user={conn.user}", f"mysql-password={conn.password}"]


def load(conn: SqlTarget, opts: YcsbOptions, *, threads: int = 4, timeout: float = 1800.0) -> LoadResult:
    """Drop and re-create usertable, then load it with sysbench (timed)."""
    cols = ", ".join(f"{f} VARCHAR({opts.field_length}) NOT NULL" for f in field_names(opts.fields))
    sql(conn, [f"CREATE DATABASE IF NOT EXISTS `{conn.database}`"], with_db=False)
    sql(conn, [f"DROP TABLE IF EXISTS {TABLE}",
               f"CREATE TABLE {TABLE} (YCSB_KEY VARCHAR(64) NOT NULL PRIMARY KEY, {cols})"])
    threads = max(1, min(threads, opts.records))
    start = time.monotonic()
    res = sysproc.run(_argv(conn, opts, "prepare", threads=threads), what=f"ycsb load into {conn.label}",
                      timeout=timeout, threads=threads, secrets=_secrets(conn), cpus=conn.client_cpus,
                      redact=redactor([conn.password]))
    seconds = time.monotonic() - start
    if res.exit_status != 0:
        tail = " | ".join(res.text.strip().splitlines()[-5:])
        raise InfrastructureError(f"ycsb load into {conn.label}: sysbench exited {res.exit_status}: {tail}")
    why = table_state(conn, opts)
    if why:
        raise InfrastructureError(f"ycsb load into {conn.label} is incomplete: {why}")
    return LoadResult(opts.records, threads, seconds, res.cpu_s)


def ensure_loaded(conn: SqlTarget, opts: YcsbOptions, *, threads: int = 4) -> LoadResult | None:
    """Load unless the same records are already there; None when reused."""
    if not table_state(conn, opts):
        return None
    return load(conn, opts, threads=threads)



def render_summary(stats: RunStats, opts: YcsbOptions, load_result: LoadResult | None = None) -> str:
    lines = [f"# ycsb {opts.workload} ({opts.core.description}, {opts.core.distribution}): {opts.records} records, "
             f"{opts.fields} fields x {opts.field_length} chars, {opts.threads} threads"]
    lines.append(load_result.render() if load_result is not None
                 else f"[load] none: the {opts.records} records loaded earlier were intact and reused")
    lines.append("Run finished, takes " + f"{stats.seconds:.1f}s")
    lines += [r.render() for r in summary_rows(stats)]
    return "\n".join(lines)



# ---------------------------------------------------------------- run


@dataclass(frozen=True)
class _RoundRun:
    proc: sysproc.ProcessRun
    stats: RunStats


def run_round(conn: SqlTarget, opts: YcsbOptions, *, window: sysproc.WindowHooks | None = None) -> _RoundRun:
    """One sysbench run of the workload; no checks, inserts left in place.
    ``window`` (server-side evidence) is told when its threads start and end."""
    timeout = (opts.duration if not opts.operations else 3600.0) + opts.grace
    res = sysproc.run(_argv(conn, opts, "run", threads=opts.threads), what=f"ycsb {opts.label} on {conn.label}",
                      timeout=timeout, threads=opts.threads, secrets=_secrets(conn), cpus=conn.client_cpus,
                      redact=redactor([conn.password]), window_marker="Threads started!", window=window)
    if res.exit_status != 0:
        tail = " | ".join(res.text.strip().splitlines()[-5:])
        raise InfrastructureError(f"ycsb {opts.label} on {conn.label}: sysbench exited {res.exit_status}: {tail}")
    return _RoundRun(res, parse_output(res.text, res.files))


def run(conn: SqlTarget, opts: YcsbOptions, *, rounds: int = 1, checks: bool = True,
        load_result: LoadResult | None = None, window: sysproc.WindowHooks | None = None,
        switch: Switch | None = None) -> WorkloadResult:
    """``rounds`` runs; after each, the correctness checks (a fault must not
    cost acknowledged data) and the inserts removed again. ``window``
    (server-side evidence) sees each round's measured window, not the checks.
    ``switch``: the cell's fault switch; each round then runs beside a
    level-0 round (``wanbench.interleave``), checked alike, whose window the
    evidence does not see."""
    check_results: list[Check] = []

    def one(window_: sysproc.WindowHooks | None) -> _RoundRun:
        r = run_round(conn, opts, window=window_)
        try:
            if checks:
                found = run_checks(conn, r.stats, records=opts.records, fields=opts.fields,
                                   field_length=opts.field_length)
                check_results.extend(c for c in found
                                     if not c.passed or not any(x.name == c.name for x in check_results))
        finally:
            remove_inserts(conn, r.stats)
        return r

    cores = usable_cores(conn.client_cpus)
    if switch is None:
        done = [one(window) for _ in range(max(1, rounds))]
        return to_workload_result(done, opts, checks=check_results, load_result=load_result, cores=cores)
    ran = interleave_rounds(max(1, rounds), switch, lambda faulted, _i, _n: one(window if faulted else None),
                            lambda rs: to_workload_result(rs, opts, checks=[], load_result=load_result, cores=cores))
    result = to_workload_result(ran.faulted, opts, checks=check_results, load_result=load_result, cores=cores)
    reference = to_workload_result(ran.reference, opts, checks=[], load_result=load_result, cores=cores)
    return Interleaved(result, reference, ran.plan, ran.early_stop).result()



def _round(r: _RoundRun) -> Round:
    s = r.stats
    ok = sum(st.ok.count for n, st in s.ops.items() if n != "READ_MODIFY_WRITE")
    errors = sum(st.err.count for n, st in s.ops.items() if n != "READ_MODIFY_WRITE")
    secs = s.seconds
    return Round(seconds=secs, queries=ok, qps=ok / secs if secs else math.nan,
                 tps=ok / secs if secs else math.nan, latency_ms=all_ops(s).latency(), errors=errors)



def to_workload_result(done: Sequence[_RoundRun], opts: YcsbOptions, *, checks: Sequence[Check],
                       load_result: LoadResult | None, cores: int) -> WorkloadResult:
    stats = merge_stats([r.stats for r in done]) if len(done) > 1 else done[0].stats
    rows = summary_rows(stats)
    text = render_summary(stats, opts, load_result)
    codes: dict[str, int] = {}
    for st in stats.ops.values():
        for c, n in st.codes.items():
            codes[c] = codes.get(c, 0) + n
    rounds = tuple(_round(r) for r in done)
    cpu = sum(r.proc.cpu_s for r in done)
    wall = sum(r.proc.wall_s for r in done)
    clients = [r.proc.client for r in done if r.proc.client is not None]
    return WorkloadResult(
        workload=f"ycsb_{opts.workload}",
        concurrency=opts.threads,
        rounds=rounds,
        latency_ms=all_ops(stats).latency(),
        errors=sum(r.errors for r in rounds),
        errors_by_code=dict(sorted(codes.items())),
        reports=tuple(render_summary(r.stats, opts) + "\n\n" + "\n".join(
            x for x in r.proc.text.splitlines() if not x.startswith(STATS_PREFIX)) for r in done),
        client={**assess(clients or [ClientLoad(cpu, wall, opts.threads, cores)]), "cpu_s": cpu, "wall_s": wall,
                "command": done[0].proc.command},
        extra={
            "ycsb_workload": opts.workload, "distribution": opts.core.distribution, "records": opts.records,
            "fields": opts.fields, "field_length": opts.field_length, "operations": opts.operations,
            "duration_s": opts.duration if not opts.operations else None, "key_space": opts.key_space,
            "per_op": {r.name: r.to_json() for r in rows},
            "mix": observed_mix(stats, opts.core), "mix_target": {k: v * 100.0 for k, v in opts.core.mix.items()},
            "per_op_rounds": [per_op_metrics(r.stats) for r in done],
            "not_found": {n: st.not_found for n, st in stats.ops.items() if st.not_found},
            "errors_by_op": {n: dict(sorted(st.codes.items())) for n, st in stats.ops.items() if st.codes},
            "acknowledged_inserts": len(stats.acked_inserts), "unsure_inserts": len(stats.unsure_inserts),
            "load": load_result.to_json() if load_result else None,
            "checks": [c.to_json() for c in checks], "summary_text": text,
            "key_counts": {str(k): n for k, n in sorted(stats.key_counts.items())} if opts.key_stats else {},
        },
    )


def observed_mix(stats: RunStats, core: CoreWorkload) -> dict[str, float]:
    """Each operation of ``core``'s mix as a share of the operations run (%),
    attempts and errors alike. A READ_MODIFY_WRITE's read is also on the READ
    line (as YCSB counts it): the READs of the mix are the rest."""
    runs = {name: st.attempts for name, st in stats.ops.items()}
    if "READ_MODIFY_WRITE" in core.mix:
        runs["READ"] = runs.get("READ", 0) - runs.get("READ_MODIFY_WRITE", 0)
    total = sum(runs.get(name, 0) for name in core.mix)
    return {name: runs.get(name, 0) / total * 100.0 for name in core.mix} if total > 0 else {}


# ---------------------------------------------------------------- engine


def options_from(option: Any, *, workload: str, threads: int) -> YcsbOptions:
    """``YcsbOptions`` from the run's ``--ycsb-*``, ``--duration`` options."""
    return YcsbOptions(workload=workload, threads=threads, records=int(option("ycsb_records")),
                       fields=int(option("ycsb_fields")), field_length=int(option("ycsb_field_length")),
                       operations=int(option("ycsb_operations") or 0), duration=float(option("duration")),
                       max_scan_length=int(option("ycsb_max_scan_length")))


def connection_for(cluster: Any, path: str) -> SqlTarget:
    return dataclasses.replace(cluster.sql_targets(path)[0], database=DATABASE)


class YcsbEngine:
    """YCSB as the workload of a fault scenario (``workload: ycsb:workloada``;
    plain ``ycsb`` runs the first of ``--ycsb-workloads``)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.loads: dict[str, LoadResult | None] = {}

    def dataset(self, path: str, opts: YcsbOptions) -> tuple[SqlTarget, LoadResult | None]:
        """Loaded once per path (reused when the same records are there)."""
        conn = connection_for(self.ctx.cluster, path)
        if path not in self.loads:
            self.ctx.progress(f"ycsb: checking/loading {opts.records} records into {conn.label}")
            res = ensure_loaded(conn, opts)
            if res is not None:
                self.ctx.progress("ycsb: " + res.render())
            self.loads[path] = res
        return conn, self.loads[path]

    def runner(self, variant: str, path: str) -> Any:
        ctx = self.ctx
        workload = parse_workloads(variant)[0] if variant else list(ctx.option("ycsb_workloads"))[0]
        conn, loaded = self.dataset(path, options_from(ctx.option, workload=workload, threads=1))

        def run_cell(concurrency: int) -> WorkloadResult:
            opts = options_from(ctx.option, workload=workload, threads=concurrency)
            return run(conn, opts, rounds=int(ctx.option("rounds")), load_result=loaded, window=ctx.window(),
                       switch=ctx.interleave())

        return run_cell
