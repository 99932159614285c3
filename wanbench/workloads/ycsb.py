"""YCSB engine: the core workloads A-F on sysbench's LuaJIT (wanbench/lua/ycsb.lua).

go-ycsb cannot be installed here and sysbench already is the load generator,
so YCSB's CoreWorkload is re-implemented in Lua with YCSB's own definitions
(key names, scrambled zipfian, latest, uniform, proportions) and the numbers
are printed in go-ycsb's summary shape, per operation.

This module holds the Python half of YCSB's math too (FNV-1a key hashing,
zeta, the exact probability of every item of the zipfian head): the key
names for the correctness check and the theory the distribution self-test
compares a real run with.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.results import YCSB_OPS, Latency, Round, WorkloadResult
from wanbench.units import parse_list
from wanbench.workloads import sysproc
from wanbench.workloads.clientcpu import ClientLoad, assess, usable_cores
from wanbench.workloads.tpcc import Bucketed, Connection

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
SCRIPT = LUA_DIR / "ycsb.lua"
DATABASE = "wanbench_ycsb"
TABLE = "usertable"
OPS = YCSB_OPS
STATS_PREFIX = "YCSB_STATS "
LOAD_PREFIX = "YCSB_LOAD "


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

FNV_OFFSET_BASIS_64 = 0xCBF29CE484222325
FNV_PRIME_64 = 1099511628211
_MASK = (1 << 64) - 1
ZIPFIAN_CONSTANT = 0.99
SCRAMBLE_ITEM_COUNT = 10_000_000_000  # ScrambledZipfianGenerator.ITEM_COUNT
SCRAMBLE_ZETAN = 26.46902820178302  # ScrambledZipfianGenerator.ZETAN: zeta(10^10, 0.99)


def fnvhash64(val: int) -> int:
    """YCSB's ``Utils.fnvhash64``: FNV-1a over 8 bytes, then ``Math.abs`` of
    the signed 64-bit result."""
    h = FNV_OFFSET_BASIS_64
    for _ in range(8):
        h ^= val & 0xFF
        val >>= 8
        h = (h * FNV_PRIME_64) & _MASK
    if h >= 1 << 63:
        h = (1 << 64) - h
    return h


def key_name(keynum: int) -> str:
    """``CoreWorkload.buildKeyName`` with insertorder=hashed, zeropadding=1."""
    return f"user{fnvhash64(keynum)}"


def zeta(n: int, theta: float = ZIPFIAN_CONSTANT) -> float:
    return math.fsum(1.0 / (i + 1) ** theta for i in range(n))


def expected_new_keys(workload: CoreWorkload, operations: int) -> int:
    """``CoreWorkload``: ``(int) (opcount * insertproportion * 2.0)``."""
    return int(operations * workload.insert_proportion * 2.0)


def key_space(records: int, workload: CoreWorkload, operations: int) -> int:
    """Items of ``ScrambledZipfianGenerator(0, records + expectednewkeys)``."""
    return records + expected_new_keys(workload, operations) + 1


def zipfian_item_probabilities(head: int, *, items: int = SCRAMBLE_ITEM_COUNT + 1,
                               zetan: float = SCRAMBLE_ZETAN) -> list[float]:
    """Exact probability of items 0..head-1 of YCSB's ``ZipfianGenerator``
    (Gray et al.'s inverse: item >= j iff u >= u_j, items 0 and 1 by zeta)."""
    theta = ZIPFIAN_CONSTANT
    alpha = 1.0 / (1.0 - theta)
    zeta2 = 1.0 + 0.5 ** theta
    eta = (1 - (2.0 / items) ** (1 - theta)) / (1 - zeta2 / zetan)
    p0 = 1.0 / zetan
    p1 = (0.5 ** theta) / zetan
    first_formula = (1.0 + 0.5 ** theta) / zetan  # u below this is item 0 or 1

    def u_at_least(j: int) -> float:  # smallest u whose formula gives >= j
        return ((j / items) ** (1.0 / alpha) - 1.0 + eta) / eta

    probs = [p0, p1]
    for j in range(2, head):
        lo = max(first_formula, u_at_least(j))
        hi = max(first_formula, u_at_least(j + 1))
        probs.append(max(0.0, min(1.0, hi) - min(1.0, lo)))
    return probs[:head]


def scrambled_key_shares(records: int, space: int, *, head: int = 200_000) -> dict[int, float]:
    """Expected share of each key of a scrambled-zipfian run over ``records``
    keys (no inserts): the head items land on ``fnvhash64(item) % space``;
    the rest of the mass is spread evenly (the hash scrambles it); draws
    beyond the last record are drawn again, so shares are renormalised."""
    probs = zipfian_item_probabilities(head)
    shares = dict.fromkeys(range(records), 0.0)
    tail = 1.0 - math.fsum(probs)
    for item, p in enumerate(probs):
        k = fnvhash64(item) % space
        if k < records:
            shares[k] += p
    for k in shares:
        shares[k] += tail / space
    total = math.fsum(shares.values())
    return {k: v / total for k, v in shares.items()}


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
        return key_space(self.records, self.core, self.operations)


# ---------------------------------------------------------------- database


def _connect(conn: Connection, *, with_db: bool = True) -> Any:
    import mysql.connector

    try:
        return mysql.connector.connect(**conn.connector_kwargs(with_db=with_db))
    except mysql.connector.Error as exc:
        raise InfrastructureError(f"ycsb: cannot connect to {conn.label}: {exc.msg}") from None


def sql(conn: Connection, statements: Sequence[str | tuple[str, Sequence[Any]]], *,
        with_db: bool = True) -> list[list[tuple[Any, ...]]]:
    """Run statements on one connection; the rows of each."""
    import mysql.connector

    cnx = _connect(conn, with_db=with_db)
    out: list[list[tuple[Any, ...]]] = []
    try:
        cur = cnx.cursor()
        for st in statements:
            text, params = (st, ()) if isinstance(st, str) else st
            try:
                cur.execute(text, tuple(params))
            except mysql.connector.Error as exc:
                raise InfrastructureError(f"ycsb: {text[:100]!r} on {conn.label} failed: {exc.msg}") from None
            out.append(list(cur.fetchall()) if cur.description else [])
        cur.close()
    finally:
        cnx.close()
    return out


def _field_names(fields: int) -> list[str]:
    return [f"FIELD{i}" for i in range(fields)]


def table_state(conn: Connection, opts: YcsbOptions) -> str:
    """'' when usertable holds exactly the records of ``opts`` in their
    shape, else why not."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", conn.db):
        raise ConfigError(f"ycsb: database name {conn.db!r} must be letters, digits and _")
    sql(conn, [f"CREATE DATABASE IF NOT EXISTS `{conn.db}`"], with_db=False)
    cols = sql(conn, [("SELECT column_name, character_maximum_length FROM information_schema.columns "
                       "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
                       (conn.db, TABLE))])[0]
    if not cols:
        return "no usertable"
    want = [("YCSB_KEY", 64)] + [(f, opts.field_length) for f in _field_names(opts.fields)]
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


def _argv(conn: Connection, opts: YcsbOptions, command: str, *, threads: int) -> list[str]:
    argv = [opts.sysbench, str(SCRIPT), f"--mysql-host={conn.host}", f"--mysql-port={conn.port}",
            f"--mysql-db={conn.db}", f"--threads={threads}", f"--records={opts.records}",
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


def _secrets(conn: Connection) -> list[str]:
    return [f"mysql-user={conn.user}", f"mysql-password={conn.password}"]


def _redact(conn: Connection) -> Any:
    return lambda text: text.replace(conn.password, "***") if conn.password else text


def load(conn: Connection, opts: YcsbOptions, *, threads: int = 4, timeout: float = 1800.0) -> LoadResult:
    """Drop and re-create usertable, then load it with sysbench (timed)."""
    cols = ", ".join(f"{f} VARCHAR({opts.field_length}) NOT NULL" for f in _field_names(opts.fields))
    sql(conn, [f"CREATE DATABASE IF NOT EXISTS `{conn.db}`"], with_db=False)
    sql(conn, [f"DROP TABLE IF EXISTS {TABLE}",
               f"CREATE TABLE {TABLE} (YCSB_KEY VARCHAR(64) NOT NULL PRIMARY KEY, {cols})"])
    threads = max(1, min(threads, opts.records))
    start = time.monotonic()
    res = sysproc.run(_argv(conn, opts, "prepare", threads=threads), what=f"ycsb load into {conn.label}",
                      timeout=timeout, threads=threads, secrets=_secrets(conn), cpus=conn.client_cpus,
                      redact=_redact(conn))
    seconds = time.monotonic() - start
    if res.exit_status != 0:
        tail = " | ".join(res.text.strip().splitlines()[-5:])
        raise InfrastructureError(f"ycsb load into {conn.label}: sysbench exited {res.exit_status}: {tail}")
    why = table_state(conn, opts)
    if why:
        raise InfrastructureError(f"ycsb load into {conn.label} is incomplete: {why}")
    return LoadResult(opts.records, threads, seconds, res.cpu_s)


def ensure_loaded(conn: Connection, opts: YcsbOptions, *, threads: int = 4) -> LoadResult | None:
    """Load unless the same records are already there; None when reused."""
    if not table_state(conn, opts):
        return None
    return load(conn, opts, threads=threads)


# ---------------------------------------------------------------- stats


@dataclass
class OpStats:
    ok: Bucketed = field(default_factory=Bucketed)
    err: Bucketed = field(default_factory=Bucketed)
    codes: dict[str, int] = field(default_factory=dict)
    not_found: int = 0


@dataclass
class RunStats:
    """Every thread's YCSB_STATS line, merged, and the files they left."""

    seconds: float
    threads: int
    ops: dict[str, OpStats]
    acked_inserts: list[int] = field(default_factory=list)
    unsure_inserts: list[int] = field(default_factory=list)
    key_counts: dict[int, int] = field(default_factory=dict)


def parse_output(text: str, files: Mapping[str, str] | None = None) -> RunStats:
    ops = {op: OpStats() for op in OPS}
    seconds, threads = 0.0, 0
    for line in text.splitlines():
        if not line.startswith(STATS_PREFIX):
            continue
        try:
            data = json.loads(line[len(STATS_PREFIX):])
        except ValueError as exc:
            raise InfrastructureError(f"ycsb: unreadable stats line from sysbench ({exc}): {line[:200]}") from None
        threads += 1
        seconds = max(seconds, float(data.get("seconds", 0.0)))
        for name, d in (data.get("ops") or {}).items():
            st = ops.setdefault(name, OpStats())
            st.ok.merge(d.get("ok") or {})
            st.err.merge(d.get("err") or {})
            st.not_found += int(d.get("not_found", 0))
            for code, n in (d.get("codes") or {}).items():
                st.codes[str(code)] = st.codes.get(str(code), 0) + int(n)
    if not threads:
        raise InfrastructureError("ycsb: sysbench printed no YCSB_STATS line (did every thread die?)")
    stats = RunStats(seconds=seconds, threads=threads, ops=ops)
    for name, body in (files or {}).items():
        if not name.endswith(".txt"):
            continue  # acks.bin: the threads' shared insert counters
        nums = [int(x) for x in body.split()]
        if name.startswith("inserts-"):
            stats.acked_inserts += nums
        elif name.startswith("unsure-"):
            stats.unsure_inserts += nums
        elif name.startswith("keys-"):
            for k, n in zip(nums[::2], nums[1::2], strict=True):
                stats.key_counts[k] = stats.key_counts.get(k, 0) + n
    return stats


# ---------------------------------------------------------------- summary


@dataclass(frozen=True)
class OpRow:
    """One go-ycsb summary line (``READ`` or ``READ_ERROR``)."""

    name: str
    takes_s: float
    count: int
    avg_us: float
    min_us: float
    max_us: float
    pct_us: Mapping[str, float]  # "50", "90", "95", "99", "99.9", "99.99"

    @property
    def ops(self) -> float:
        return self.count / self.takes_s if self.takes_s > 0 else math.nan

    def render(self) -> str:
        """go-ycsb's plain output: ``%-6s - Takes(s): ..., 99.99th(us): ...``."""
        pct = ", ".join(f"{p}th(us): {self.pct_us[p]:.0f}" for p in PCTS)
        return (f"{self.name:<6} - Takes(s): {self.takes_s:.1f}, Count: {self.count}, OPS: {self.ops:.1f}, "
                f"Avg(us): {self.avg_us:.0f}, Min(us): {self.min_us:.0f}, Max(us): {self.max_us:.0f}, {pct}")

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "ops": self.ops, "takes_s": self.takes_s, "avg_us": self.avg_us,
                "min_us": self.min_us, "max_us": self.max_us, **{f"p{p}_us": v for p, v in self.pct_us.items()}}


PCTS = ("50", "90", "95", "99", "99.9", "99.99")


def _row(name: str, b: Bucketed, seconds: float) -> OpRow:
    return OpRow(name, seconds, b.count, b.sum_us / b.count, b.min_us if b.min_us != math.inf else math.nan,
                 b.max_us, {p: b.percentile_ms(float(p)) * 1000.0 for p in PCTS})


def summary_rows(stats: RunStats) -> list[OpRow]:
    """go-ycsb prints its operations sorted by name, errors as ``OP_ERROR``."""
    rows = []
    for name in sorted(stats.ops):
        st = stats.ops[name]
        if st.ok.count:
            rows.append(_row(name, st.ok, stats.seconds))
        if st.err.count:
            rows.append(_row(f"{name}_ERROR", st.err, stats.seconds))
    return sorted(rows, key=lambda r: r.name)


def render_summary(stats: RunStats, opts: YcsbOptions, load_result: LoadResult | None = None) -> str:
    lines = [f"# ycsb {opts.workload} ({opts.core.description}, {opts.core.distribution}): {opts.records} records, "
             f"{opts.fields} fields x {opts.field_length} chars, {opts.threads} threads"]
    lines.append(load_result.render() if load_result is not None
                 else f"[load] none: the {opts.records} records loaded earlier were intact and reused")
    lines.append("Run finished, takes " + f"{stats.seconds:.1f}s")
    lines += [r.render() for r in summary_rows(stats)]
    return "\n".join(lines)


# ---------------------------------------------------------------- checks


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "message": self.message}


def _in_batches(keys: Sequence[str], size: int = 1000) -> Iterable[Sequence[str]]:
    for i in range(0, len(keys), size):
        yield keys[i:i + size]


def run_checks(conn: Connection, opts: YcsbOptions, stats: RunStats) -> list[Check]:
    """After a run: record count = loaded + acknowledged inserts (plus at most
    the inserts whose connection died, outcome unknown); every field of every
    record (so every updated one) has the workload's field length; every
    acknowledged insert is there."""
    checks: list[Check] = []
    (count,), = sql(conn, [f"SELECT COUNT(*) FROM {TABLE}"])[0]
    count = int(count)
    low = opts.records + len(stats.acked_inserts)
    high = low + len(stats.unsure_inserts)
    ok = low <= count <= high
    want = f"{low}" if high == low else f"{low}..{high} ({len(stats.unsure_inserts)} inserts of unknown outcome)"
    checks.append(Check("record_count", ok, f"usertable holds {count} records; loaded {opts.records} + "
                                            f"acknowledged inserts {len(stats.acked_inserts)} = {want}"))
    cond = " OR ".join(f"CHAR_LENGTH({f}) <> {opts.field_length}" for f in _field_names(opts.fields))
    bad = sql(conn, [f"SELECT COUNT(*) FROM {TABLE} WHERE {cond}",
                     f"SELECT YCSB_KEY FROM {TABLE} WHERE {cond} ORDER BY YCSB_KEY LIMIT 5"])
    n_bad = int(bad[0][0][0])
    checks.append(Check("field_length", n_bad == 0,
                        f"{n_bad} record(s) have a field that is not {opts.field_length} characters long"
                        + (f", e.g. {', '.join(str(r[0]) for r in bad[1])}" if n_bad else "")))
    keys = [key_name(k) for k in stats.acked_inserts]
    missing: list[str] = []
    for batch in _in_batches(keys):
        found = sql(conn, [(f"SELECT YCSB_KEY FROM {TABLE} WHERE YCSB_KEY IN ({','.join(['%s'] * len(batch))})",
                            batch)])[0]
        have = {str(r[0]) for r in found}
        missing += [k for k in batch if k not in have]
    checks.append(Check("acknowledged_inserts", not missing,
                        f"{len(missing)} of {len(keys)} acknowledged insert(s) missing"
                        + (f", e.g. {', '.join(missing[:5])}" if missing else "")))
    return checks


def failed_checks(result: WorkloadResult) -> list[Mapping[str, Any]]:
    return [c for c in result.extra.get("checks", []) if not c.get("passed")]


def remove_inserts(conn: Connection, stats: RunStats) -> None:
    """Put usertable back to the loaded records, so every run (and every
    cell) starts from the same data, as a fresh YCSB load would."""
    keys = [key_name(k) for k in stats.acked_inserts + stats.unsure_inserts]
    for batch in _in_batches(keys):
        sql(conn, [(f"DELETE FROM {TABLE} WHERE YCSB_KEY IN ({','.join(['%s'] * len(batch))})", batch)])


# ---------------------------------------------------------------- run


@dataclass(frozen=True)
class _RoundRun:
    proc: sysproc.ProcessRun
    stats: RunStats


def run_round(conn: Connection, opts: YcsbOptions) -> _RoundRun:
    """One sysbench run of the workload; no checks, inserts left in place."""
    timeout = (opts.duration if not opts.operations else 3600.0) + opts.grace
    res = sysproc.run(_argv(conn, opts, "run", threads=opts.threads), what=f"ycsb {opts.label} on {conn.label}",
                      timeout=timeout, threads=opts.threads, secrets=_secrets(conn), cpus=conn.client_cpus,
                      redact=_redact(conn), window_marker="Threads started!")
    if res.exit_status != 0:
        tail = " | ".join(res.text.strip().splitlines()[-5:])
        raise InfrastructureError(f"ycsb {opts.label} on {conn.label}: sysbench exited {res.exit_status}: {tail}")
    return _RoundRun(res, parse_output(res.text, res.files))


def run(conn: Connection, opts: YcsbOptions, *, rounds: int = 1, checks: bool = True,
        load_result: LoadResult | None = None) -> WorkloadResult:
    """``rounds`` runs; after each, the correctness checks (a fault must not
    cost acknowledged data) and the inserts removed again."""
    done: list[_RoundRun] = []
    check_results: list[Check] = []
    for _ in range(max(1, rounds)):
        r = run_round(conn, opts)
        done.append(r)
        try:
            if checks:
                check_results += [c for c in run_checks(conn, opts, r.stats)
                                  if not c.passed or not any(x.name == c.name for x in check_results)]
        finally:
            remove_inserts(conn, r.stats)
    return to_workload_result(done, opts, checks=check_results, load_result=load_result,
                              cores=usable_cores(conn.client_cpus))


def merge_stats(parts: Sequence[RunStats]) -> RunStats:
    ops = {op: OpStats() for op in OPS}
    for p in parts:
        for name, st in p.ops.items():
            into = ops.setdefault(name, OpStats())
            for mine, theirs in ((into.ok, st.ok), (into.err, st.err)):
                mine.merge({"count": theirs.count, "sum_us": theirs.sum_us, "max_us": theirs.max_us,
                            "min_us": theirs.min_us if theirs.min_us != math.inf else -1,
                            "hist": {str(k): v for k, v in theirs.hist.items()}})
            into.not_found += st.not_found
            for code, n in st.codes.items():
                into.codes[code] = into.codes.get(code, 0) + n
    keys: dict[int, int] = {}
    for p in parts:
        for k, n in p.key_counts.items():
            keys[k] = keys.get(k, 0) + n
    return RunStats(seconds=sum(p.seconds for p in parts), threads=max(p.threads for p in parts), ops=ops,
                    acked_inserts=[k for p in parts for k in p.acked_inserts],
                    unsure_inserts=[k for p in parts for k in p.unsure_inserts], key_counts=keys)


def _all_ops(stats: RunStats) -> Bucketed:
    """Every operation's own latency (RMW's parts are in READ and UPDATE)."""
    total = Bucketed()
    for name, st in stats.ops.items():
        if name == "READ_MODIFY_WRITE":
            continue
        b = st.ok
        total.merge({"count": b.count, "sum_us": b.sum_us, "max_us": b.max_us,
                     "min_us": b.min_us if b.min_us != math.inf else -1,
                     "hist": {str(k): v for k, v in b.hist.items()}})
    return total


def _op_latency(b: Bucketed) -> Latency:
    return b.latency()


def _round(r: _RoundRun) -> Round:
    s = r.stats
    ok = sum(st.ok.count for n, st in s.ops.items() if n != "READ_MODIFY_WRITE")
    errors = sum(st.err.count for n, st in s.ops.items() if n != "READ_MODIFY_WRITE")
    secs = s.seconds
    return Round(seconds=secs, queries=ok, qps=ok / secs if secs else math.nan,
                 tps=ok / secs if secs else math.nan, latency_ms=_all_ops(s).latency(), errors=errors)


def per_op_metrics(stats: RunStats) -> dict[str, dict[str, float]]:
    """``{op: {"ops": per second, "p99_ms": ...}}`` for the gate."""
    out = {}
    for name, st in stats.ops.items():
        if st.ok.count:
            out[name] = {"ops": st.ok.count / stats.seconds if stats.seconds else math.nan,
                         "p99_ms": st.ok.percentile_ms(99)}
    return out


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
        latency_ms=_all_ops(stats).latency(),
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
            "per_op_rounds": [per_op_metrics(r.stats) for r in done],
            "not_found": {n: st.not_found for n, st in stats.ops.items() if st.not_found},
            "errors_by_op": {n: dict(sorted(st.codes.items())) for n, st in stats.ops.items() if st.codes},
            "acknowledged_inserts": len(stats.acked_inserts), "unsure_inserts": len(stats.unsure_inserts),
            "load": load_result.to_json() if load_result else None,
            "checks": [c.to_json() for c in checks], "summary_text": text,
            "key_counts": {str(k): n for k, n in sorted(stats.key_counts.items())} if opts.key_stats else {},
        },
    )


# ---------------------------------------------------------------- engine


def options_from(option: Any, *, workload: str, threads: int) -> YcsbOptions:
    """``YcsbOptions`` from the run's ``--ycsb-*``, ``--duration`` options."""
    return YcsbOptions(workload=workload, threads=threads, records=int(option("ycsb_records")),
                       fields=int(option("ycsb_fields")), field_length=int(option("ycsb_field_length")),
                       operations=int(option("ycsb_operations") or 0), duration=float(option("duration")),
                       max_scan_length=int(option("ycsb_max_scan_length")))


def connection_for(cluster: Any, path: str) -> Connection:
    target = cluster.sql_targets(path)[0]
    return Connection(target.host, target.port, target.credentials.user, target.credentials.password, DATABASE,
                      client_cpus=cluster.client_cpus())


class YcsbEngine:
    """YCSB as the workload of a fault scenario (``workload: ycsb:workloada``;
    plain ``ycsb`` runs the first of ``--ycsb-workloads``)."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self.loads: dict[str, LoadResult | None] = {}

    def dataset(self, path: str, opts: YcsbOptions) -> tuple[Connection, LoadResult | None]:
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
            return run(conn, opts, rounds=int(ctx.option("rounds")), load_result=loaded)

        return run_cell
