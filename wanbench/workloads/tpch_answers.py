"""TPC-H answers checked by a second engine: DuckDB runs the same query text
with the same parameters on the same generated files, and the two result
sets are compared with the rules of the specification (clause 2.1.3.5).

A wrong answer is data: a list of ``Mismatch`` naming the query, the row,
the column and both values. ``compare`` never raises on a difference.

The reference database is built once per dataset, in its cache directory
(``reference.duckdb``, written under another name and renamed into place),
and opened read-only by every run after that.
"""

from __future__ import annotations

import datetime
import decimal
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from wanbench.workloads.tpch_data import TABLES, Dataset
from wanbench.workloads.tpch_queries import Query, query

REFERENCE_FILE = "reference.duckdb"

# Clause 2.1.3.5, "the precision of all values contained in the query validation output data":
#   a) singleton column values and results from COUNT aggregates match exactly;
#   b) ratios: within 1 % when rounded to the nearest 1/100th, 0.99*v <= round(r,2) <= 1.01*v;
#   c) results from SUM aggregates: within $100 of the validation output;
#   d) results from AVG aggregates: as b), within 1 % when rounded to the nearest 1/100th.
#   Comment 1: values computed from SUM aggregates and ratios (Q8, Q14, Q17) follow b) and c);
#   comment 2: a SUM of 0s and 1s (Q12) follows a); comment 3: Q15's total revenue, selected
#   from the view, follows c); comment 4: SUM(l_quantity) (Q1, Q18) follows a).
# Each query's file names the rule of each column (tpch_sql/qNN.sql, "answer:").
SUM_TOLERANCE = Decimal(100)
RELATIVE_TOLERANCE = Decimal("0.01")
CENT = Decimal("0.01")
RULES: Mapping[str, str] = {
    "exact": "clause 2.1.3.5 a: singleton values and counts match exactly",
    "ratio": "clause 2.1.3.5 b+c: within 1% rounded to 1/100, and within $100",
    "sum": "clause 2.1.3.5 c: within $100",
    "avg": "clause 2.1.3.5 d: within 1% rounded to 1/100",
}


@dataclass(frozen=True)
class Answer:
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Mismatch:
    """One way a tested answer differs from the reference answer."""

    query: int
    what: str  # "value", "rows" (count), "row" (extra or missing), "columns"
    message_text: str
    row: int | None = None  # 1-based, in the tested result
    column: str | None = None
    got: Any = None
    expected: Any = None
    rule: str = ""

    def message(self) -> str:
        where = f"Q{self.query}"
        if self.row is not None:
            where += f" row {self.row}"
        if self.column:
            where += f", {self.column}"
        return f"{where}: {self.message_text}"

    def to_json(self) -> dict[str, Any]:
        return {"query": self.query, "what": self.what, "row": self.row, "column": self.column,
                "got": _plain(self.got), "expected": _plain(self.expected), "rule": self.rule,
                "message": self.message()}


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else str(v)
    if isinstance(v, (tuple, list)):
        return [_plain(x) for x in v]
    return str(v)  # Decimal, date


def _show(v: Any) -> str:
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return "NULL" if v is None else str(v)


def _show_row(row: Sequence[Any]) -> str:
    return "(" + ", ".join(_show(v) for v in row) + ")"


# ---------------------------------------------------------------- value rules

def _number(v: Any) -> Decimal | None:
    if isinstance(v, bool):
        return Decimal(int(v))
    if isinstance(v, (int, Decimal)):
        return Decimal(v)
    if isinstance(v, float):
        return Decimal(repr(v)) if math.isfinite(v) else None
    if isinstance(v, (str, bytes)):
        try:
            return Decimal(v.decode() if isinstance(v, bytes) else v.strip())
        except decimal.InvalidOperation:
            return None
    return None


def _cents(d: Decimal) -> Decimal:
    return d.quantize(CENT, rounding=decimal.ROUND_HALF_UP)


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        v = v.decode(errors="replace")
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    return str(v).strip()  # clause 2.1.3.4 e: leading or trailing blanks are acceptable


def value_problem(kind: str, got: Any, expected: Any) -> str | None:
    """Why ``got`` fails rule ``kind`` against ``expected``; None when it passes."""
    if got is None or expected is None:
        return None if got is None and expected is None else "one of the two is NULL"
    g, e = _number(got), _number(expected)
    numeric = not isinstance(got, (str, bytes)) or not isinstance(expected, (str, bytes))
    if kind == "exact":
        if g is not None and e is not None and numeric:
            return None if g == e else "not equal"
        return None if _text(got) == _text(expected) else "not equal"
    if g is None or e is None:
        return "not a number"
    if kind in ("sum", "ratio") and abs(_cents(g) - _cents(e)) > SUM_TOLERANCE:
        return f"differs by {abs(_cents(g) - _cents(e))}, more than ${SUM_TOLERANCE}"
    if kind in ("avg", "ratio"):
        r, v = _cents(g), _cents(e)
        if abs(r - v) > RELATIVE_TOLERANCE * abs(v):
            return f"rounded to 1/100: {r} vs {v}, more than 1% apart"
    return None


# ---------------------------------------------------------------- result sets

def _tie_groups(query: Query, rows: Sequence[Sequence[Any]]) -> list[tuple[int, int]]:
    """[start, end) runs of reference rows whose ORDER BY keys are equal: their
    order among themselves is unspecified (all rows: one run without ORDER BY)."""
    if not rows:
        return []
    if not query.order_by:
        return [(0, len(rows))]
    groups, start = [], 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or any(rows[i][c] != rows[start][c] for c in query.order_by):
            groups.append((start, i))
            start = i
    return groups


def _row_problems(query: Query, columns: Sequence[str], got: Sequence[Any], expected: Sequence[Any],
                  row: int) -> list[Mismatch]:
    out = []
    for i, kind in enumerate(query.kinds):
        why = value_problem(kind, got[i], expected[i])
        if why:
            name = columns[i] if i < len(columns) else f"column {i + 1}"
            out.append(Mismatch(query.number, "value", f"got {_show(got[i])}, expected {_show(expected[i])} "
                                f"({why}; {RULES[kind]})", row, name, got[i], expected[i], kind))
    return out


def compare(query: Query, got: Answer, expected: Answer) -> list[Mismatch]:
    """The differences between ``got`` (the tested engine's answer, with its
    LIMIT) and ``expected`` (the reference answer of the same text without
    its LIMIT): row count, then each row by the rules of its columns, in the
    ORDER BY order; rows whose ORDER BY keys tie may come in any order, and
    at the LIMIT any of the rows tying with the last kept one may be kept."""
    n = query.number
    width = len(query.kinds)
    if len(got.columns) != width or len(expected.columns) != width:
        return [Mismatch(n, "columns", f"{len(got.columns)} columns, the reference {len(expected.columns)}, "
                                       f"the query's rules {width}")]
    want = len(expected.rows) if query.limit is None else min(query.limit, len(expected.rows))
    problems: list[Mismatch] = []
    if len(got.rows) != want:
        problems.append(Mismatch(n, "rows", f"{len(got.rows)} rows, expected {want}", got=len(got.rows),
                                 expected=want))
    for start, end in _tie_groups(query, expected.rows):
        if start >= len(got.rows):
            break
        candidates = list(range(start, end))  # reference rows any tested row of this run may match
        for i in range(start, min(end, len(got.rows))):
            row = got.rows[i]
            # the same position first, then any other row of the run
            order = ([i] if i in candidates else []) + [j for j in candidates if j != i]
            match = next((j for j in order
                          if not _row_problems(query, got.columns, row, expected.rows[j], i + 1)), None)
            if match is None:
                j = order[0]
                problems.extend(_row_problems(query, got.columns, row, expected.rows[j], i + 1))
            else:
                j = match
            candidates.remove(j)
    for i in range(want, len(got.rows)):
        problems.append(Mismatch(n, "row", f"an extra row {_show_row(got.rows[i])}", i + 1, got=got.rows[i]))
    for i in range(len(got.rows), want):
        problems.append(Mismatch(n, "row", f"missing, expected {_show_row(expected.rows[i])}", i + 1,
                                 expected=expected.rows[i]))
    return problems


# ---------------------------------------------------------------- the reference engine

def reference_path(dataset: Dataset) -> Path:
    """The dataset's DuckDB database, built on first use."""
    path = dataset.path / REFERENCE_FILE
    if path.is_file():
        return path
    import duckdb

    tmp = dataset.path / f".{REFERENCE_FILE}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(tmp), config={"threads": 2})
        try:
            for t in TABLES:
                con.execute(t.duckdb_sql())
                for part in dataset.paths(t.name):
                    quoted = str(part).replace("'", "''")
                    con.execute(f"COPY {t.name} FROM '{quoted}' (FORMAT csv, HEADER)")
                (n,) = con.execute(f"SELECT COUNT(*) FROM {t.name}").fetchone() or (0,)
                if n != dataset.rows[t.name]:
                    raise ValueError(f"DuckDB read {n} rows of {t.name}, the generator wrote {dataset.rows[t.name]}")
            con.execute("CHECKPOINT")
        finally:
            con.close()
        tmp.rename(path)  # atomic: a reference database is complete or absent
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return path


class Reference:
    """DuckDB answers of the dataset's queries (read-only; answers cached per query and parameters)."""

    def __init__(self, dataset: Dataset, *, threads: int = 1) -> None:
        import duckdb

        self.dataset = dataset
        self._con = duckdb.connect(str(reference_path(dataset)), read_only=True, config={"threads": threads})
        self._cache: dict[tuple[int, tuple[tuple[str, str], ...]], Answer] = {}

    def answer(self, number: int, params: Mapping[str, str]) -> Answer:
        """The reference answer of query ``number``: its text without LIMIT (see ``compare``)."""
        key = (number, tuple(sorted(params.items())))
        if key not in self._cache:
            cur = self._con.execute(query(number).sql_unlimited(params))
            columns = tuple(d[0] for d in cur.description or ())
            self._cache[key] = Answer(columns, tuple(tuple(r) for r in cur.fetchall()))
        return self._cache[key]

    def check(self, number: int, params: Mapping[str, str], got: Answer) -> list[Mismatch]:
        return compare(query(number), got, self.answer(number, params))

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> Reference:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
