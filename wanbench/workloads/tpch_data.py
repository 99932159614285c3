"""TPC-H data: the schema and its generation with ``tpchgen-cli`` into a
cache (loading it into a server: ``tpch_load``).

``tpchgen-cli csv`` writes each table as ``--parts`` CSV files
(one header line each; the same rows as one file, split). A scale factor is
generated once into ``<cache>/tpchgen-cli-<version>/sf<SF>/``: it is written
into a scratch directory beside it and renamed into place only when every
file is there and its ``manifest.json`` (row counts per table) is written, so
a killed generation is never taken as complete; the next run sweeps it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wanbench.errors import CommandError, ConfigError, InfrastructureError
from wanbench.procs import find_binary
from wanbench.results import write_json_atomic
from wanbench.scratch import make_scratch, sweep_stale

MANIFEST = "manifest.json"
#: rows of lineitem per part file (and per LOAD DATA statement), about 12 MB of CSV
LINEITEM_ROWS_PER_PART = 100_000


# ---------------------------------------------------------------- schema (clause 1.4)

@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]  # (name, type): types both MySQL and DuckDB read the same way
    primary_key: tuple[str, ...]
    #: secondary indexes: the join and filter columns the 22 queries need on MariaDB
    indexes: tuple[tuple[str, ...], ...] = ()
    #: rows at scale factor 1 (nation and region: fixed); lineitem varies around its figure
    rows_sf1: int = 0

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c for c, _ in self.columns)

    def create_sql(self) -> str:
        """MySQL/TiDB: the table with its primary key; binary collation, so
        string comparison and order are DuckDB's (byte order)."""
        cols = ",\n  ".join(f"{c} {t} NOT NULL" for c, t in self.columns)
        return (f"CREATE TABLE {self.name} (\n  {cols},\n  PRIMARY KEY ({', '.join(self.primary_key)})\n)"
                " DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")

    def index_sql(self) -> list[str]:
        return [f"CREATE INDEX {self.name}_{'_'.join(cols)} ON {self.name} ({', '.join(cols)})"
                for cols in self.indexes]

    def duckdb_sql(self) -> str:
        return f"CREATE TABLE {self.name} ({', '.join(f'{c} {t}' for c, t in self.columns)})"


_D = "DECIMAL(15,2)"
TABLES: tuple[Table, ...] = (
    Table("region", (("r_regionkey", "INTEGER"), ("r_name", "CHAR(25)"), ("r_comment", "VARCHAR(152)")),
          ("r_regionkey",), rows_sf1=5),
    Table("nation", (("n_nationkey", "INTEGER"), ("n_name", "CHAR(25)"), ("n_regionkey", "INTEGER"),
                     ("n_comment", "VARCHAR(152)")),
          ("n_nationkey",), (("n_regionkey",),), rows_sf1=25),
    Table("supplier", (("s_suppkey", "INTEGER"), ("s_name", "CHAR(25)"), ("s_address", "VARCHAR(40)"),
                       ("s_nationkey", "INTEGER"), ("s_phone", "CHAR(15)"), ("s_acctbal", _D),
                       ("s_comment", "VARCHAR(101)")),
          ("s_suppkey",), (("s_nationkey",),), rows_sf1=10_000),
    Table("customer", (("c_custkey", "INTEGER"), ("c_name", "VARCHAR(25)"), ("c_address", "VARCHAR(40)"),
                       ("c_nationkey", "INTEGER"), ("c_phone", "CHAR(15)"), ("c_acctbal", _D),
                       ("c_mktsegment", "CHAR(10)"), ("c_comment", "VARCHAR(117)")),
          ("c_custkey",), (("c_nationkey",),), rows_sf1=150_000),
    Table("part", (("p_partkey", "INTEGER"), ("p_name", "VARCHAR(55)"), ("p_mfgr", "CHAR(25)"),
                   ("p_brand", "CHAR(10)"), ("p_type", "VARCHAR(25)"), ("p_size", "INTEGER"),
                   ("p_container", "CHAR(10)"), ("p_retailprice", _D), ("p_comment", "VARCHAR(23)")),
          ("p_partkey",), rows_sf1=200_000),
    Table("partsupp", (("ps_partkey", "INTEGER"), ("ps_suppkey", "INTEGER"), ("ps_availqty", "INTEGER"),
                       ("ps_supplycost", _D), ("ps_comment", "VARCHAR(199)")),
          ("ps_partkey", "ps_suppkey"), (("ps_suppkey",),), rows_sf1=800_000),
    Table("orders", (("o_orderkey", "BIGINT"), ("o_custkey", "INTEGER"), ("o_orderstatus", "CHAR(1)"),
                     ("o_totalprice", _D), ("o_orderdate", "DATE"), ("o_orderpriority", "CHAR(15)"),
                     ("o_clerk", "CHAR(15)"), ("o_shippriority", "INTEGER"), ("o_comment", "VARCHAR(79)")),
          ("o_orderkey",), (("o_custkey",), ("o_orderdate",)), rows_sf1=1_500_000),
    Table("lineitem", (("l_orderkey", "BIGINT"), ("l_partkey", "INTEGER"), ("l_suppkey", "INTEGER"),
                       ("l_linenumber", "INTEGER"), ("l_quantity", _D), ("l_extendedprice", _D),
                       ("l_discount", _D), ("l_tax", _D), ("l_returnflag", "CHAR(1)"),
                       ("l_linestatus", "CHAR(1)"), ("l_shipdate", "DATE"), ("l_commitdate", "DATE"),
                       ("l_receiptdate", "DATE"), ("l_shipinstruct", "CHAR(25)"), ("l_shipmode", "CHAR(10)"),
                       ("l_comment", "VARCHAR(44)")),
          ("l_orderkey", "l_linenumber"), (("l_partkey", "l_suppkey"), ("l_suppkey",), ("l_shipdate",)),
          rows_sf1=6_001_215),
)
TABLE_NAMES = tuple(t.name for t in TABLES)


def table(name: str) -> Table:
    for t in TABLES:
        if t.name == name:
            return t
    raise ConfigError(f"no TPC-H table {name!r} (tables: {', '.join(TABLE_NAMES)})")


# ---------------------------------------------------------------- generation

def parse_scale_factor(text: str | float) -> float:
    """A scale factor > 0 and <= 1000 (0.01 is ~10 MB of CSV, 1 is ~1 GB)."""
    try:
        sf = float(text)
    except (TypeError, ValueError):
        raise ConfigError(f"{text!r} is not a TPC-H scale factor (examples: 0.01, 0.1, 1)") from None
    if not 0 < sf <= 1000 or not math.isfinite(sf):
        raise ConfigError(f"{text!r}: a TPC-H scale factor must be > 0 and <= 1000")
    return sf


def sf_label(sf: float) -> str:
    """``0.01`` -> ``0.01``, ``1.0`` -> ``1``: the scale factor as directory names and reports show it."""
    return format(sf, "g")


def parts_for(sf: float) -> int:
    return max(1, math.ceil(table("lineitem").rows_sf1 * sf / LINEITEM_ROWS_PER_PART))


def default_cache_dir() -> Path:
    """``$WANBENCH_TPCH_CACHE``, else ``$XDG_CACHE_HOME/wanbench/tpch`` (``~/.cache/wanbench/tpch``)."""
    if env := os.environ.get("WANBENCH_TPCH_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "wanbench" / "tpch"


def tpchgen_binary() -> str:
    """``tpchgen-cli`` beside this Python (the virtualenv's bin/) or on PATH."""
    return find_binary("tpchgen-cli", str(Path(sys.executable).parent / "tpchgen-cli"))


def tpchgen_version(binary: str | None = None) -> str:
    """``tpchgen-cli 4.0.0``."""
    exe = binary or tpchgen_binary()
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise CommandError("localhost", f"{exe} --version", out.returncode, out.stderr)
    return out.stdout.strip()


@dataclass(frozen=True)
class Dataset:
    """The generated CSV files of one scale factor, complete (read from its manifest)."""

    scale_factor: float
    path: Path
    generator: str  # "tpchgen-cli 4.0.0"
    rows: Mapping[str, int]
    files: Mapping[str, tuple[str, ...]]  # table -> part files, relative to path
    bytes: int = 0
    seconds: float = 0.0  # how long generating it took (when it was generated)
    reused: bool = False  # found complete in the cache by this call

    @property
    def label(self) -> str:
        return f"TPC-H SF {sf_label(self.scale_factor)} ({self.generator})"

    def paths(self, name: str) -> list[Path]:
        return [self.path / f for f in self.files[name]]

    @property
    def fingerprint(self) -> str:
        """What the load marker records: the same data gives the same text."""
        return json.dumps({"sf": sf_label(self.scale_factor), "generator": self.generator,
                           "rows": dict(sorted(self.rows.items()))}, sort_keys=True)

    @classmethod
    def read(cls, path: Path) -> Dataset | None:
        """The dataset in ``path``, or None when it is not complete."""
        try:
            m = json.loads((path / MANIFEST).read_text())
            ds = cls(float(m["scale_factor"]), path, str(m["generator"]), {k: int(v) for k, v in m["rows"].items()},
                     {k: tuple(v) for k, v in m["files"].items()}, int(m.get("bytes", 0)),
                     float(m.get("seconds", 0.0)), reused=True)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if set(ds.rows) != set(TABLE_NAMES) or not all((path / f).is_file() for fs in ds.files.values() for f in fs):
            return None
        return ds


def _count_rows(path: Path) -> int:
    """Data lines of one CSV file (its header left out). TPC-H text has no newlines inside fields."""
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
    return max(0, n - 1)


def generate(scale_factor: float, cache_dir: Path | None = None, *, threads: int | None = None,
             timeout: float | None = None) -> Dataset:
    """The CSV files of ``scale_factor``: reused from the cache when complete,
    else generated (about 2.5 s at SF 0.01) and put in place atomically."""
    sf = parse_scale_factor(scale_factor)
    exe = tpchgen_binary()
    generator = tpchgen_version(exe)
    root = (cache_dir or default_cache_dir()) / generator.replace(" ", "-")
    final = root / f"sf{sf_label(sf)}"
    if (done := Dataset.read(final)) is not None:
        return done
    root.mkdir(parents=True, exist_ok=True)
    sweep_stale(root)  # generations whose process was killed
    if final.exists():  # incomplete and not a scratch directory: e.g. copied by hand
        raise InfrastructureError(f"tpch: {final} exists but holds no complete dataset (no valid {MANIFEST}); "
                                  "remove it to generate again")
    scratch = make_scratch(root)
    try:
        start = time.monotonic()
        parts = parts_for(sf)
        argv = [exe, "csv", "-s", sf_label(sf), "-o", str(scratch / "data"), "--parts", str(parts), "--quiet",
                "--num-threads", str(threads or max(1, min(4, os.cpu_count() or 1)))]
        limit = timeout if timeout is not None else 120.0 + 900.0 * sf
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False)
        except subprocess.TimeoutExpired:
            raise CommandError("localhost", " ".join(argv), None, f"no result after {limit:.0f}s") from None
        if out.returncode != 0:
            raise CommandError("localhost", " ".join(argv), out.returncode, out.stderr)
        data = scratch / "data"
        files: dict[str, tuple[str, ...]] = {}
        rows: dict[str, int] = {}
        size = 0
        for name in TABLE_NAMES:
            found = sorted(data.glob(f"{name}/{name}.*.csv"), key=lambda p: int(p.name.split(".")[1]))
            if not found:
                raise InfrastructureError(f"tpch: {' '.join(argv)} wrote no {name} files into {data}")
            files[name] = tuple(str(p.relative_to(data)) for p in found)
            rows[name] = sum(_count_rows(p) for p in found)
            size += sum(p.stat().st_size for p in found)
        seconds = time.monotonic() - start
        write_json_atomic(data / MANIFEST, {
            "scale_factor": sf, "generator": generator, "parts": parts, "rows": rows, "files": files,
            "bytes": size, "seconds": round(seconds, 3), "command": argv[1:]})
        try:
            data.rename(final)  # atomic: the dataset appears whole or not at all
        except OSError:
            if (other := Dataset.read(final)) is not None:  # another process finished first
                return other
            raise
        ds = Dataset.read(final)
        assert ds is not None, f"{final} was written without a readable manifest"
        return Dataset(ds.scale_factor, ds.path, ds.generator, ds.rows, ds.files, ds.bytes, seconds, reused=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
