"""The sysbench workload engine: slap-style probes and the bundled OLTP scripts.

Every number comes from sysbench's own report. wanbench's Lua hooks
(``wanbench/lua/wb_hooks.lua``) print one ``WBJSON {...}`` line per report
(per second, at the warm-up checkpoint, at the end) and per worker thread
(SQL errors by MySQL error code); percentiles come from the ``--histogram``
block (see ``histogram.py``). The raw output of every sysbench process is
kept, with the password redacted, in ``WorkloadResult.reports``.

Warm-up: sysbench 1.0.20 has no ``--warmup-time``. A run lasts warm-up +
duration with ``--report-checkpoints=<warm-up>``: at the checkpoint sysbench
prints a cumulative report and resets its counters and histogram, so the
final report and histogram cover only the steady state.

Connection setup is not latency: sysbench connects (and prepares
statements) in ``thread_init`` before it starts its timer. Verified with a
50 ms Toxiproxy delay on the server's replies: 40 point selects reported
max 51.5 ms while the process ran 160 ms longer than sysbench's own time
(``selftests/test_sysbench_engine.py::test_connection_setup_is_not_latency``).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError, MissingToolError
from wanbench.redact import hide
from wanbench.results import Round, WorkloadResult
from wanbench.sql import connect as sql_connect
from wanbench.units import parse_duration_ms, parse_list
from wanbench.workloads import preflight, sysproc
from wanbench.workloads.clientcpu import (
    ClientLoad,
)
from wanbench.workloads.sysbench_output import check_output, merge_results, rate_summary, result_from_output, tail_of
from wanbench.workloads.tables import OLTP_WORKLOADS

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
PROBE_SCRIPT = LUA_DIR / "probe.lua"
OLTP_WRAPPER = LUA_DIR / "wb_oltp.lua"

PROBE_KINDS = ("read", "write")
PROBE_READ_TABLE = "wb_probe_read"
PROBE_WRITE_TABLE = "wb_probe_write"
#: The write probe's table is emptied by prepare_probe above this size, so
#: inserts keep measuring the same thing across sessions.
PROBE_WRITE_MAX_ROWS = 1_000_000

_SCRIPT_DIRS = ("/usr/share/sysbench", "/usr/local/share/sysbench")
_IDENT = re.compile(r"^[A-Za-z0-9_]{1,64}$")


def find_bundled_script(workload: str) -> Path:
    """The bundled ``<workload>.lua`` (``$WANBENCH_SYSBENCH_SCRIPTS`` first)."""
    if workload not in OLTP_WORKLOADS:
        raise ConfigError(f"unknown sysbench workload {workload!r}; known: {', '.join(OLTP_WORKLOADS)}")
    dirs = [os.environ["WANBENCH_SYSBENCH_SCRIPTS"]] if os.environ.get("WANBENCH_SYSBENCH_SCRIPTS") else []
    found = shutil.which("sysbench")
    if found:
        dirs.append(str(Path(found).resolve().parent.parent / "share" / "sysbench"))
    dirs.extend(_SCRIPT_DIRS)
    for d in dirs:
        path = Path(d) / f"{workload}.lua"
        if path.is_file():
            return path
    raise MissingToolError(f"sysbench script {workload}.lua", f"looked in {', '.join(dirs)}; run scripts/setup")


def parse_workloads(text: str) -> list[str]:
    """``--workloads``: a comma-separated subset of the OLTP workloads."""
    names = parse_list(text, lambda s: s)
    unknown = [n for n in names if n not in OLTP_WORKLOADS]
    if unknown:
        raise ConfigError(f"unknown workload(s) {', '.join(unknown)} (known: {', '.join(OLTP_WORKLOADS)})")
    return names


def parse_warmup(text: str) -> float:
    """``--warmup``: seconds (``5s``, ``0`` for none)."""
    return parse_duration_ms(text, default_unit="s") / 1000.0


# --------------------------------------------------------------------------
# Running sysbench
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    text: str
    exit_status: int
    client: ClientLoad | None
    wall: float


@dataclass(frozen=True)
class DatasetState:
    """What ``prepare_oltp`` found and did."""

    action: str  # "reused" or "created"
    tables: int
    table_size: int
    detail: str = ""


#: moved from the command line into an options file when sysbench runs
_PASSWORD_OPTION = "--mysql-password="


class SysbenchRunner:
    """Runs sysbench against one endpoint (direct or through the proxy).

    The password goes to sysbench on its command line (it has no other way)
    and is replaced by ``***`` in every report, command and error we keep.
    """

    def __init__(self, *, host: str, port: int, user: str, password: str, database: str = "wanbench",
                 sysbench: str = "sysbench", workdir: Path | None = None, extra_args: Sequence[str] = (),
                 more_endpoints: Sequence[tuple[str, int]] = (), cpus: Sequence[int] = ()) -> None:
        """``host:port`` is where data is prepared and checked; the load is
        spread round robin over it and ``more_endpoints`` (sysbench takes
        comma-separated hosts and ports). ``cpus`` confines sysbench to
        those CPUs (the lab's split layout)."""
        if not _IDENT.match(database):
            raise ConfigError(f"database name {database!r}: use letters, digits and _ only")
        found = shutil.which(sysbench)
        if not found:
            raise MissingToolError("sysbench", "run scripts/setup")
        self.host, self.port, self.user, self.password = host, int(port), user, password
        self.database = database
        self.sysbench = found
        self.workdir = Path(workdir) if workdir is not None else None
        self.extra_args = tuple(extra_args)
        self.more_endpoints = tuple((h, int(pt)) for h, pt in more_endpoints if (h, int(pt)) != (host, int(port)))
        self.cpus = tuple(cpus)
        #: told when each measured window opens and closes (``begin()`` /
        #: ``end()``): server-side evidence is read at exactly those instants
        self.window_hooks: sysproc.WindowHooks | None = None
        self._report_seq = 0

    def __repr__(self) -> str:
        return f"SysbenchRunner({self.user}@{self.endpoint}/{self.database})"

    # -- helpers -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def redact(self, text: str) -> str:
        return hide(text, [self.password])

    def connection_args(self) -> list[str]:
        return [
            "--db-driver=mysql",
            "--mysql-host=" + ",".join([self.host, *(h for h, _ in self.more_endpoints)]),
            "--mysql-port=" + ",".join(str(pt) for pt in [self.port, *(pt for _, pt in self.more_endpoints)]),
            f"--mysql-user={self.user}",
            f"{_PASSWORD_OPTION}{self.password}",
            f"--mysql-db={self.database}",
        ]

    def display(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        """The command as a user would type it, password redacted."""
        prefix = " ".join(f"{k}={shlex.quote(self.redact(v))}" for k, v in (env or {}).items())
        cmd = shlex.join(self.redact(a) for a in argv)
        return f"{prefix} {cmd}".strip()

    def _sql(self, statements: Sequence[str | tuple[str, Sequence[Any]]], *, database: str | None = None,
             timeout: float = 30.0) -> list[list[tuple[Any, ...]]]:
        """Run statements on one connection; the rows of each."""
        import mysql.connector  # imported here: only needed when a runner talks SQL

        conn = sql_connect(host=self.host, port=self.port, user=self.user, password=self.password,
                           database=database, timeout=timeout, who="sysbench setup")
        out: list[list[tuple[Any, ...]]] = []
        try:
            cur = conn.cursor()
            for st in statements:
                sql, params = (st, ()) if isinstance(st, str) else st
                try:
                    cur.execute(sql, tuple(params))
                    out.append(list(cur.fetchall()) if cur.description else [])
                except mysql.connector.Error as exc:
                    raise InfrastructureError(
                        f"{self.endpoint}: {sql[:120]!r} failed: {self.redact(str(exc))}") from None
            cur.close()
        finally:
            conn.close()
        return out

    def server_limits(self) -> preflight.ServerLimits:
        rows = self._sql([
            "SELECT @@max_connections",
            "SHOW GLOBAL STATUS LIKE 'Threads_connected'",
            "SHOW GLOBAL VARIABLES LIKE 'max_prepared_stmt_count'",
            "SHOW GLOBAL STATUS LIKE 'Prepared_stmt_count'",
        ])

        def status(r: list[tuple[Any, ...]], default: int) -> int:
            try:
                return int(r[0][1]) if r else default
            except (TypeError, ValueError):
                return default

        return preflight.ServerLimits(
            max_connections=int(rows[0][0][0] or 0),
            connections_in_use=status(rows[1], 0),
            max_prepared_stmt_count=status(rows[2], -1),
            prepared_stmt_in_use=status(rows[3], 0),
            server=self.endpoint,
        )

    def preflight(self, workload: str, *, threads: int, tables: int = 1) -> None:
        """Stop a run that would fail (connections, prepared statements, open files)."""
        preflight.ensure(workload=workload, threads=threads, tables=tables, server=self.server_limits())

    def keep_report(self, name: str, text: str) -> None:
        """Keep a redacted sysbench output (e.g. a load host's) with this runner's reports."""
        self._save_report(name, self.redact(text))

    def _save_report(self, name: str, text: str) -> None:
        if self.workdir is None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._report_seq += 1
        (self.workdir / f"{self._report_seq:04d}-{name}.txt").write_text(text)

    def _execute(self, argv: Sequence[str], *, timeout: float, what: str, threads: int,
                 window_marker: str, env: Mapping[str, str] | None = None) -> _Run:
        """Run sysbench through ``sysproc.run`` (the one supervisor of every
        engine: password in a 0600 options file, pinned, CPU measured from
        ``window_marker`` on, killed on timeout or interrupt) and keep its
        redacted output as a report."""
        secret = [a.removeprefix("--") for a in argv if a.startswith(_PASSWORD_OPTION)]
        rest = [a for a in argv if not a.startswith(_PASSWORD_OPTION)]
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", what)
        run = sysproc.run(rest, what=what, timeout=timeout, threads=threads, secrets=secret, cpus=self.cpus,
                          env=env, window_marker=window_marker, redact=self.redact,
                          on_output=lambda text: self._save_report(name, text), window=self.window_hooks)
        self._save_report(name, run.text)
        return _Run(text=run.text, exit_status=run.exit_status, client=run.client, wall=run.wall_s)

    # -- probes ------------------------------------------------------------

    def prepare_probe(self, *, rows: int = 10000) -> None:
        """Create the database and the probe tables unless they are there and
        intact (``wb_probe_read`` holds exactly ids 1..rows)."""
        if rows <= 0:
            raise ConfigError(f"probe rows must be positive, not {rows}")
        db = self.database
        self._sql([f"CREATE DATABASE IF NOT EXISTS `{db}`"])
        found = self._sql([
            f"CREATE TABLE IF NOT EXISTS `{PROBE_READ_TABLE}` (id INT NOT NULL PRIMARY KEY, "
            "k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '')",
            f"CREATE TABLE IF NOT EXISTS `{PROBE_WRITE_TABLE}` (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, "
            "k INT NOT NULL DEFAULT 0, c CHAR(120) NOT NULL DEFAULT '')",
            f"SELECT COUNT(*), COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM `{PROBE_READ_TABLE}`",
            f"SELECT COUNT(*) FROM `{PROBE_WRITE_TABLE}`",
        ], database=db)
        count, lo, hi = (int(x) for x in found[2][0])
        if (count, lo, hi) != (rows, 1 if rows else 0, rows):
            stmts: list[str | tuple[str, Sequence[Any]]] = [f"TRUNCATE TABLE `{PROBE_READ_TABLE}`"]
            batch = 1000
            for first in range(1, rows + 1, batch):
                ids = range(first, min(rows, first + batch - 1) + 1)
                values = ",".join(f"({i},{i % 1000},'{i:0>120}')" for i in ids)
                stmts.append(f"INSERT INTO `{PROBE_READ_TABLE}` (id, k, c) VALUES {values}")
            self._sql(stmts, database=db, timeout=120)
        if int(found[3][0][0]) > PROBE_WRITE_MAX_ROWS:
            self._sql([f"TRUNCATE TABLE `{PROBE_WRITE_TABLE}`"], database=db)

    def probe_command(self, kind: str, *, concurrency: int, queries: int, rows: int = 10000,
                      max_seconds: float | None = None, extra_round_trips: int = 0,
                      extra_bytes: int = 0, extra_reads: int = 0) -> list[str]:
        """argv of one probe round: ``queries`` events in total, or fewer if
        ``max_seconds`` passes first (the round's QPS stays exact)."""
        if kind not in PROBE_KINDS:
            raise ConfigError(f"probe kind must be one of {', '.join(PROBE_KINDS)}, not {kind!r}")
        return [
            self.sysbench, str(PROBE_SCRIPT), *self.connection_args(),
            f"--kind={kind}", f"--rows={rows}", f"--threads={concurrency}",
            *([f"--extra_round_trips={extra_round_trips}"] if extra_round_trips else []),
            *([f"--extra_bytes={extra_bytes}"] if extra_bytes else []),
            *([f"--extra_reads={extra_reads}"] if extra_reads else []),
            f"--events={queries}", f"--time={math.ceil(max_seconds) if max_seconds else 0}",
            "--histogram", "--percentile=95",
            *self.extra_args, "run",
        ]

    def probe(self, kind: str, *, concurrency: int, queries: int, rounds: int, timeout: float,
              on_round: Callable[[int, Round], None] | None = None, rows: int = 10000,
              max_seconds: float | None = None, extra_round_trips: int = 0, extra_bytes: int = 0,
              extra_reads: int = 0, check: bool = True) -> WorkloadResult:
        """mysqlslap-style rounds: each runs exactly ``queries`` statements in
        total at ``concurrency`` threads; percentiles over all rounds.

        ``check=False``: no preflight (``preflight``), for a round of a cell whose warm-up at the
        same concurrency has just passed it: under a fault its four queries and its handshake
        cross the faulted path (2.3 s at 200 ms, a third of a c=1000 cell's measuring time)."""
        if concurrency <= 0 or queries <= 0 or rounds <= 0:
            raise ConfigError(f"probe needs positive concurrency/queries/rounds, got {concurrency}/{queries}/{rounds}")
        workload = f"probe_{kind}"
        argv = self.probe_command(kind, concurrency=concurrency, queries=queries, rows=rows,
                                  max_seconds=max_seconds, extra_round_trips=extra_round_trips,
                                  extra_bytes=extra_bytes, extra_reads=extra_reads)
        if check:
            self.preflight(workload, threads=concurrency)
        parts: list[WorkloadResult] = []
        for i in range(1, rounds + 1):
            what = f"{workload} c={concurrency} round {i}/{rounds} on {self.endpoint}"
            run = self._execute(argv, timeout=timeout, what=what, threads=concurrency,
                                window_marker="Threads started!")
            out = check_output(run.text, run.exit_status, what)
            part = result_from_output(workload, concurrency, out, report=run.text, client=run.client,
                                      command=self.display(argv), extra={"kind": kind, "queries_per_round": queries})
            parts.append(part)
            if on_round is not None:
                on_round(i, part.rounds[0])
        return merge_results(parts)

    # -- OLTP --------------------------------------------------------------

    def _table_state(self, tables: int, table_size: int) -> str:
        """'' when sbtest1..N hold exactly ids 1..table_size, else why not."""
        rows = self._sql([
            ("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
             "AND table_name LIKE 'sbtest%%'", (self.database,)),
        ])
        present = {str(r[0]) for r in rows[0]}
        missing = [f"sbtest{i}" for i in range(1, tables + 1) if f"sbtest{i}" not in present]
        if missing:
            return f"missing tables {', '.join(missing[:5])}"
        checks = self._sql(
            [f"SELECT COUNT(*), COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM sbtest{i} WHERE id <= %d"
             % table_size for i in range(1, tables + 1)],
            database=self.database, timeout=300,
        )
        for i, rows_i in enumerate(checks, start=1):
            count, lo, hi = (int(x) for x in rows_i[0])
            if (count, lo, hi) != (table_size, 1, table_size):
                return f"sbtest{i} holds {count} rows with ids {lo}..{hi}, expected {table_size} rows 1..{table_size}"
        return ""

    def prepare_oltp(self, *, tables: int, table_size: int, timeout: float = 1800.0) -> DatasetState:
        """Reuse sbtest1..N when intact (rows added by oltp_insert beyond
        ``table_size`` are deleted first); otherwise drop and re-create them
        with the bundled ``prepare`` command."""
        if tables <= 0 or table_size <= 0:
            raise ConfigError(f"--tables and --table-size must be positive, got {tables} and {table_size}")
        self._sql([f"CREATE DATABASE IF NOT EXISTS `{self.database}`"])
        why = self._table_state(tables, table_size)
        if not why:
            self._sql([f"DELETE FROM sbtest{i} WHERE id > {table_size}" for i in range(1, tables + 1)],
                      database=self.database, timeout=300)
            return DatasetState("reused", tables, table_size)
        self.cleanup_oltp(tables=tables)
        script = find_bundled_script("oltp_read_write")
        argv = [self.sysbench, str(script), *self.connection_args(), f"--tables={tables}",
                f"--table-size={table_size}", f"--threads={min(tables, 4)}", *self.extra_args, "prepare"]
        what = f"sysbench prepare {tables}x{table_size} on {self.endpoint}"
        run = self._execute(argv, timeout=timeout, what=what, threads=min(tables, 4), window_marker="\0")
        if run.exit_status != 0:
            raise InfrastructureError(f"{what}: sysbench exited {run.exit_status}; {tail_of(run.text)}")
        still = self._table_state(tables, table_size)
        if still:
            raise InfrastructureError(f"{what}: data set not intact after prepare: {still}")
        return DatasetState("created", tables, table_size, why)

    def cleanup_oltp(self, *, tables: int | None = None) -> None:
        """Drop sbtest tables (all of them when ``tables`` is None)."""
        rows = self._sql([
            ("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
             "AND table_name LIKE 'sbtest%%'", (self.database,)),
        ])
        names = sorted(str(r[0]) for r in rows[0] if re.fullmatch(r"sbtest\d+", str(r[0])))
        if tables is not None:
            names = sorted(set(names) | {f"sbtest{i}" for i in range(1, tables + 1)})
        if names:
            self._sql([f"DROP TABLE IF EXISTS {n}" for n in names], database=self.database)

    def oltp_command(self, workload: str, *, threads: int, duration: float, warmup: float, tables: int,
                     table_size: int, rate: float | None = None,
                     options: Sequence[str] = ()) -> tuple[list[str], dict[str, str]]:
        """argv and environment of one OLTP round (warm-up + duration)."""
        script = find_bundled_script(workload)
        dur = math.ceil(duration)
        warm = math.ceil(warmup) if warmup > 0 else 0
        if dur <= 0:
            raise ConfigError(f"duration must be at least 1s, got {duration}")
        argv = [
            self.sysbench, str(OLTP_WRAPPER), *self.connection_args(),
            f"--tables={tables}", f"--table-size={table_size}", f"--threads={threads}",
            f"--time={dur + warm}", "--events=0", "--report-interval=1", "--histogram", "--percentile=95",
        ]
        if warm:
            argv += [f"--report-checkpoints={warm}", f"--wb-warmup={warm}"]
        if rate:
            argv.append(f"--rate={int(rate)}")
        argv += [*self.extra_args, *options, "run"]
        return argv, {"WB_SYSBENCH_SCRIPT": str(script)}

    def run_oltp(self, workload: str, *, threads: int, duration: float, warmup: float, tables: int,
                 table_size: int, rounds: int = 1, rate: float | None = None, timeout: float | None = None,
                 on_round: Callable[[int, Round], None] | None = None,
                 options: Sequence[str] = ()) -> WorkloadResult:
        """``rounds`` sysbench runs of warm-up + duration each; numbers from
        the steady state only. ``options`` go to sysbench as they are."""
        if threads <= 0 or rounds <= 0:
            raise ConfigError(f"threads and rounds must be positive, got {threads} and {rounds}")
        argv, env = self.oltp_command(workload, threads=threads, duration=duration, warmup=warmup,
                                      tables=tables, table_size=table_size, rate=rate, options=options)
        self.preflight(workload, threads=threads, tables=tables)
        limit = timeout if timeout is not None else math.ceil(duration) + math.ceil(warmup) + 120.0
        parts: list[WorkloadResult] = []
        for i in range(1, rounds + 1):
            what = f"{workload} t={threads} round {i}/{rounds} on {self.endpoint}"
            run = self._execute(argv, timeout=limit, what=what, threads=threads, env=env,
                                window_marker="Checkpoint report" if warmup > 0 else "Threads started!")
            out = check_output(run.text, run.exit_status, what)
            extra: dict[str, Any] = {"duration_s": math.ceil(duration), "warmup_s": math.ceil(warmup),
                                     "tables": tables, "table_size": table_size, "warnings": []}
            if warmup > 0 and not out.had_checkpoint:
                # sysbench skips a checkpoint whose time passed before its
                # checkpoint thread got the CPU (seen with a CPU-starved client)
                extra["warnings"].append(
                    f"round {i}: sysbench skipped the warm-up checkpoint at {math.ceil(warmup)}s (client "
                    "starved of CPU?): this round's numbers include the warm-up")
            if rate:
                extra["rate"] = rate_summary(rate, out)
            part = result_from_output(workload, threads, out, report=run.text, client=run.client,
                                      command=self.display(argv, env), extra=extra)
            parts.append(part)
            if on_round is not None:
                on_round(i, part.rounds[0])
        return merge_results(parts)


