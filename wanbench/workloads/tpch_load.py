"""Loading TPC-H data into a MySQL-protocol server (MariaDB, TiDB).

The tables with their primary keys, ``LOAD DATA LOCAL INFILE`` per part file
(each part is its own statement and transaction: about 100k lineitem rows,
well inside TiDB's transaction size limit), or batched multi-row INSERTs
where the server or the client refuses LOCAL; then the secondary indexes,
``ANALYZE TABLE``, the row counts checked against the generator's manifest,
and last a marker row in ``tpch_loaded``. A database whose marker names the
same data and whose row counts match is not loaded again.
"""

from __future__ import annotations

import csv
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.workloads.tpch_data import TABLE_NAMES, TABLES, Dataset, Table, generate, sf_label, table

if TYPE_CHECKING:
    from wanbench.sql import SqlTarget

#: the database TPC-H uses on every profile
DATABASE = "wanbench_tpch"
MARKER_TABLE = "tpch_loaded"
INSERT_BATCH = 1000  # rows per multi-row INSERT of the fallback loader

#: client and server refusals of LOAD DATA LOCAL: the loader falls back to INSERT
LOCAL_REFUSED = frozenset({
    1148,  # ER_NOT_ALLOWED_COMMAND: local_infile=OFF (MySQL 5.x, older MariaDB; TiDB without the client flag)
    4166,  # ER_LOAD_INFILE_CAPABILITY_DISABLED: local_infile=OFF (MariaDB 10.5+)
    3948,  # ER_CLIENT_LOCAL_FILES_DISABLED (MySQL 8)
    3950,  # ER_LOAD_INFILE_CAPABILITY_DISABLED (MySQL 8)
    2068,  # CR_LOAD_DATA_LOCAL_INFILE_REJECTED: the client refused the file
})


@dataclass(frozen=True)
class TableLoad:
    table: str
    rows: int
    seconds: float  # loading the rows
    index_seconds: float  # its secondary indexes, built after the rows
    method: str  # "load_data_local" or "insert"

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "rows": self.rows, "seconds": round(self.seconds, 3),
                "index_seconds": round(self.index_seconds, 3), "method": self.method}


@dataclass(frozen=True)
class LoadResult:
    scale_factor: float
    database: str
    reused: bool  # the database already held this data: nothing was loaded
    tables: tuple[TableLoad, ...] = ()
    analyze_seconds: float = 0.0
    seconds: float = 0.0  # the whole load: tables, indexes, analyze, checks
    method: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"scale_factor": self.scale_factor, "database": self.database, "reused": self.reused,
                "method": self.method, "seconds": round(self.seconds, 3),
                "analyze_seconds": round(self.analyze_seconds, 3), "tables": [t.to_json() for t in self.tables]}

    def summary(self) -> str:
        if self.reused:
            return f"tpch: SF {sf_label(self.scale_factor)} already loaded in {self.database}"
        per = ", ".join(f"{t.table} {t.seconds:.2f}s+{t.index_seconds:.2f}s idx" for t in self.tables)
        return (f"tpch: loaded SF {sf_label(self.scale_factor)} into {self.database} in {self.seconds:.1f}s "
                f"({self.method}; {per}; analyze {self.analyze_seconds:.2f}s)")


def _check_name(database: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_]+", database):
        raise ConfigError(f"tpch: database name {database!r} must be letters, digits and _")


def ensure_database(target: SqlTarget) -> None:
    _check_name(target.database)
    cnx = target.connect(with_db=False, who="tpch")
    try:
        cur = cnx.cursor()
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{target.database}`")
        cur.close()
    finally:
        cnx.close()


def table_rows(target: SqlTarget) -> dict[str, int]:
    """Row count of each TPC-H table there is (missing tables left out)."""
    import mysql.connector

    cnx = target.connect(who="tpch")
    out: dict[str, int] = {}
    try:
        cur = cnx.cursor()
        for name in TABLE_NAMES:
            try:
                cur.execute(f"SELECT COUNT(*) FROM {name}")
                (n,) = cur.fetchone()
                out[name] = int(n)
            except mysql.connector.Error:
                continue
        cur.close()
    finally:
        cnx.close()
    return out


def loaded_fingerprint(target: SqlTarget) -> str | None:
    """What the marker of a complete load says, None without one."""
    import mysql.connector

    cnx = target.connect(who="tpch")
    try:
        cur = cnx.cursor()
        try:
            cur.execute(f"SELECT dataset FROM {MARKER_TABLE}")
            row = cur.fetchone()
        except mysql.connector.Error:
            return None
        finally:
            cur.close()
    finally:
        cnx.close()
    return str(row[0]) if row else None


def is_loaded(target: SqlTarget, dataset: Dataset) -> bool:
    """The database holds exactly ``dataset``: its marker names it and every row count matches the manifest."""
    return loaded_fingerprint(target) == dataset.fingerprint and table_rows(target) == dict(dataset.rows)


def ensure_loaded(target: SqlTarget, dataset: Dataset, *, method: str = "auto",
                  progress: Callable[[str], None] | None = None) -> LoadResult:
    """Load ``dataset`` unless the database already holds it (then ``reused``)."""
    ensure_database(target)
    if is_loaded(target, dataset):
        return LoadResult(dataset.scale_factor, target.database, reused=True)
    return load(target, dataset, method=method, progress=progress)


def _load_data_sql(path: Path, name: str) -> str:
    cols = ", ".join(table(name).column_names)
    quoted = str(path).replace("\\", "\\\\").replace("'", "\\'")
    return (f"LOAD DATA LOCAL INFILE '{quoted}' INTO TABLE {name} CHARACTER SET utf8mb4 "
            "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
            f"LINES TERMINATED BY '\\n' IGNORE 1 LINES ({cols})")


def _csv_rows(path: Path) -> Iterator[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        next(reader, None)  # header
        yield from reader


def _insert_file(cur: Any, path: Path, name: str) -> int:
    t = table(name)
    sql = (f"INSERT INTO {name} ({', '.join(t.column_names)}) VALUES "
           f"({', '.join(['%s'] * len(t.columns))})")
    batch: list[list[str]] = []
    n = 0
    for row in _csv_rows(path):
        batch.append(row)
        if len(batch) >= INSERT_BATCH:
            cur.executemany(sql, batch)  # mysql-connector sends one multi-row INSERT per call
            n += len(batch)
            batch = []
    if batch:
        cur.executemany(sql, batch)
        n += len(batch)
    return n


def _warnings(cur: Any) -> list[str]:
    cur.execute("SHOW WARNINGS LIMIT 5")
    return [" ".join(str(x) for x in w) for w in cur.fetchall()]


def _load_local(cur: Any, t: Table, dataset: Dataset) -> int:
    """``LOAD DATA LOCAL INFILE`` of each part file: one statement (and, with
    autocommit, one transaction) per part. Any warning (a truncated or
    converted value) is an error: the data would differ from DuckDB's."""
    rows = 0
    for path in dataset.paths(t.name):
        cur.execute(_load_data_sql(path, t.name))
        if cur.warning_count:
            raise InfrastructureError(f"tpch: loading {path.name} into {t.name} gave {cur.warning_count} "
                                      "warning(s): " + "; ".join(_warnings(cur)))
        rows += cur.rowcount
    return rows


def load(target: SqlTarget, dataset: Dataset, *, method: str = "auto",
         progress: Callable[[str], None] | None = None) -> LoadResult:
    """Drop and load the 8 tables of ``dataset`` into ``target.database``.

    ``method``: ``auto`` (LOAD DATA LOCAL INFILE, INSERT where it is refused),
    ``load_data_local`` (no fallback) or ``insert``."""
    import mysql.connector

    if method not in ("auto", "load_data_local", "insert"):
        raise ConfigError(f"tpch: unknown load method {method!r} (auto, load_data_local, insert)")
    say = progress or (lambda _msg: None)
    ensure_database(target)
    start = time.monotonic()
    # the client may only send files of this dataset, whatever a server asks for
    cnx = target.connect(who="tpch load", allow_local_infile_in_path=str(dataset.path))
    loads: list[TableLoad] = []
    use = "insert" if method == "insert" else "load_data_local"
    try:
        cur = cnx.cursor()
        cur.execute(f"DROP TABLE IF EXISTS {MARKER_TABLE}")  # first: a half-done reload is never complete
        for t in TABLES:
            cur.execute(f"DROP TABLE IF EXISTS {t.name}")
            cur.execute(t.create_sql())
        for t in TABLES:
            t0 = time.monotonic()
            rows = 0
            if use == "load_data_local":
                try:
                    rows = _load_local(cur, t, dataset)
                except mysql.connector.Error as exc:
                    if method == "load_data_local" or exc.errno not in LOCAL_REFUSED:
                        raise
                    say(f"tpch: LOAD DATA LOCAL refused ({exc.errno}: {exc.msg}); loading with INSERT")
                    use = "insert"
                    cur.execute(f"TRUNCATE TABLE {t.name}")
                    t0 = time.monotonic()
            if use == "insert":
                rows = sum(_insert_file(cur, p, t.name) for p in dataset.paths(t.name))
            seconds = time.monotonic() - t0
            if rows != dataset.rows[t.name]:
                raise InfrastructureError(f"tpch: {t.name} got {rows} rows, the generator wrote {dataset.rows[t.name]}")
            loads.append(TableLoad(t.name, rows, seconds, 0.0, use))
            say(f"tpch: {t.name}: {rows} rows in {seconds:.2f}s ({use})")
        for i, t in enumerate(TABLES):
            t0 = time.monotonic()
            for stmt in t.index_sql():
                cur.execute(stmt)
            loads[i] = TableLoad(t.name, loads[i].rows, loads[i].seconds, time.monotonic() - t0, loads[i].method)
        t0 = time.monotonic()
        for t in TABLES:
            cur.execute(f"ANALYZE TABLE {t.name}")
            if cur.with_rows:
                cur.fetchall()
        analyze = time.monotonic() - t0
        cur.close()
    finally:
        cnx.close()
    got = table_rows(target)
    if got != dict(dataset.rows):
        raise InfrastructureError(f"tpch: row counts in {target.label} are {got}, the generator wrote "
                                  f"{dict(dataset.rows)}")
    _write_marker(target, dataset)
    methods = sorted({t.method for t in loads})
    return LoadResult(dataset.scale_factor, target.database, False, tuple(loads), analyze,
                      time.monotonic() - start, "+".join(methods))


def _write_marker(target: SqlTarget, dataset: Dataset) -> None:
    cnx = target.connect(who="tpch load")
    try:
        cur = cnx.cursor()
        cur.execute(f"CREATE TABLE {MARKER_TABLE} (dataset VARCHAR(2000) NOT NULL, loaded_at VARCHAR(40) NOT NULL)")
        cur.execute(f"INSERT INTO {MARKER_TABLE} VALUES (%s, %s)",
                    (dataset.fingerprint, time.strftime("%Y-%m-%dT%H:%M:%S%z")))
        cur.close()
    finally:
        cnx.close()


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` did: the data generated (or found) and loaded (or found)."""

    dataset: Dataset
    load: LoadResult
    target: SqlTarget = field(repr=False)

    def summary(self) -> str:
        gen = ("found in the cache" if self.dataset.reused
               else f"generated in {self.dataset.seconds:.1f}s")
        return f"{self.dataset.label}: {gen} ({self.dataset.path}); {self.load.summary()}"


def prepare(target: SqlTarget, scale_factor: float, *, cache_dir: Path | None = None, method: str = "auto",
            progress: Callable[[str], None] | None = None) -> Prepared:
    """Generate (once per scale factor) and load (once per database) TPC-H data."""
    ds = generate(scale_factor, cache_dir)
    return Prepared(ds, ensure_loaded(target, ds, method=method, progress=progress), target)
