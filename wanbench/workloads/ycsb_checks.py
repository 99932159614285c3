"""YCSB's correctness checks after a run, and putting the table back.

A fault must never cost an acknowledged write: after every run the record
count, the field lengths and every acknowledged insert are checked, then the
run's inserts are deleted so the next run starts from the loaded records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.results import WorkloadResult
from wanbench.sql import SqlTarget
from wanbench.workloads.ycsb_keys import key_name
from wanbench.workloads.ycsb_stats import RunStats

DATABASE = "wanbench_ycsb"
TABLE = "usertable"


def sql(conn: SqlTarget, statements: Sequence[str | tuple[str, Sequence[Any]]], *,
        with_db: bool = True) -> list[list[tuple[Any, ...]]]:
    """Run statements on one connection; the rows of each."""
    import mysql.connector

    cnx = conn.connect(with_db=with_db, who="ycsb")
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


def field_names(fields: int) -> list[str]:
    return [f"FIELD{i}" for i in range(fields)]


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


def run_checks(conn: SqlTarget, stats: RunStats, *, records: int, fields: int, field_length: int) -> list[Check]:
    """After a run: record count = loaded + acknowledged inserts (plus at most
    the inserts whose connection died, outcome unknown); every field of every
    record (so every updated one) has the workload's field length; every
    acknowledged insert is there."""
    checks: list[Check] = []
    (count,), = sql(conn, [f"SELECT COUNT(*) FROM {TABLE}"])[0]
    count = int(count)
    low = records + len(stats.acked_inserts)
    high = low + len(stats.unsure_inserts)
    ok = low <= count <= high
    want = f"{low}" if high == low else f"{low}..{high} ({len(stats.unsure_inserts)} inserts of unknown outcome)"
    checks.append(Check("record_count", ok, f"usertable holds {count} records; loaded {records} + "
                                            f"acknowledged inserts {len(stats.acked_inserts)} = {want}"))
    cond = " OR ".join(f"CHAR_LENGTH({f}) <> {field_length}" for f in field_names(fields))
    bad = sql(conn, [f"SELECT COUNT(*) FROM {TABLE} WHERE {cond}",
                     f"SELECT YCSB_KEY FROM {TABLE} WHERE {cond} ORDER BY YCSB_KEY LIMIT 5"])
    n_bad = int(bad[0][0][0])
    checks.append(Check("field_length", n_bad == 0,
                        f"{n_bad} record(s) have a field that is not {field_length} characters long"
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


def remove_inserts(conn: SqlTarget, stats: RunStats) -> None:
    """Put usertable back to the loaded records, so every run (and every
    cell) starts from the same data, as a fresh YCSB load would."""
    keys = [key_name(k) for k in stats.acked_inserts + stats.unsure_inserts]
    for batch in _in_batches(keys):
        sql(conn, [(f"DELETE FROM {TABLE} WHERE YCSB_KEY IN ({','.join(['%s'] * len(batch))})", batch)])
