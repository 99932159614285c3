"""TPC-C consistency conditions (clause 3.3.2) checked after every run.

Each check is one SQL query that returns the offending rows (none = pass), so
a failure names the warehouse, district, order or customer that broke it. A
fault must slow the database down, never lose or duplicate committed data:
these are the proof.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wanbench.sql import SqlTarget

MAX_ROWS = 20  # offending rows kept per check


@dataclass(frozen=True)
class Check:
    name: str
    clause: str
    description: str
    sql: str  # selects offending rows only


@dataclass(frozen=True)
class CheckResult:
    name: str
    clause: str
    description: str
    passed: bool
    columns: tuple[str, ...] = ()
    offending: tuple[tuple[Any, ...], ...] = ()
    seconds: float = 0.0
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.clause} {self.name}"

    def message(self) -> str:
        if self.passed:
            return f"{self.label}: ok"
        if self.error:
            return f"{self.label}: could not run: {self.error}"
        rows = "; ".join(", ".join(f"{c}={v}" for c, v in zip(self.columns, r, strict=False))
                         for r in self.offending[:5])
        more = f" (+{len(self.offending) - 5} more)" if len(self.offending) > 5 else ""
        return f"{self.label} violated ({self.description}): {rows}{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "clause": self.clause, "description": self.description, "passed": self.passed,
            "offending": [dict(zip(self.columns, (_plain(v) for v in r), strict=False)) for r in self.offending],
            "seconds": round(self.seconds, 3), "error": self.error, "message": self.message(),
        }


def _plain(v: Any) -> Any:
    if v is None or isinstance(v, (int, float, str, bool)):
        return v
    return str(v)  # Decimal, datetime


_DELIVERED_BY_CUSTOMER = """
    SELECT o_w_id w, o_d_id d, o_c_id c, SUM(ol_amount) s
    FROM orders JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
    WHERE ol_delivery_d IS NOT NULL GROUP BY o_w_id, o_d_id, o_c_id"""

_PAID_BY_CUSTOMER = """
    SELECT h_c_w_id w, h_c_d_id d, h_c_id c, SUM(h_amount) s FROM history GROUP BY h_c_w_id, h_c_d_id, h_c_id"""

CHECKS: tuple[Check, ...] = (
    Check("w_ytd_eq_sum_d_ytd", "3.3.2.1", "W_YTD = sum(D_YTD) per warehouse", """
        SELECT w_id, w_ytd, SUM(d_ytd) AS sum_d_ytd FROM warehouse JOIN district ON d_w_id = w_id
        GROUP BY w_id, w_ytd HAVING w_ytd <> SUM(d_ytd)"""),
    Check("next_o_id_eq_max_o_id", "3.3.2.2", "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) per district", """
        SELECT d_w_id, d_id, d_next_o_id, max_o_id, max_no_o_id FROM (
          SELECT d_w_id, d_id, d_next_o_id,
            (SELECT MAX(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id) AS max_o_id,
            (SELECT MAX(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id) AS max_no_o_id
          FROM district) x
        WHERE max_o_id IS NULL OR d_next_o_id - 1 <> max_o_id
           OR (max_no_o_id IS NOT NULL AND d_next_o_id - 1 <> max_no_o_id)"""),
    Check("new_order_ids_contiguous", "3.3.2.3", "max(NO_O_ID) - min(NO_O_ID) + 1 = rows in NEW_ORDER per district",
          """
        SELECT no_w_id, no_d_id, MIN(no_o_id) AS min_no_o_id, MAX(no_o_id) AS max_no_o_id, COUNT(*) AS new_orders
        FROM new_order GROUP BY no_w_id, no_d_id HAVING MAX(no_o_id) - MIN(no_o_id) + 1 <> COUNT(*)"""),
    Check("sum_ol_cnt_eq_order_lines", "3.3.2.4", "sum(O_OL_CNT) = rows in ORDER_LINE per district", """
        SELECT o.w AS w_id, o.d AS d_id, o.s AS sum_o_ol_cnt, l.n AS order_lines FROM
          (SELECT o_w_id w, o_d_id d, SUM(o_ol_cnt) s FROM orders GROUP BY o_w_id, o_d_id) o
          LEFT JOIN (SELECT ol_w_id w, ol_d_id d, COUNT(*) n FROM order_line GROUP BY ol_w_id, ol_d_id) l
          ON l.w = o.w AND l.d = o.d
        WHERE l.n IS NULL OR l.n <> o.s"""),
    Check("carrier_null_iff_new_order", "3.3.2.5", "O_CARRIER_ID is null iff the order is in NEW_ORDER", """
        SELECT o_w_id AS w_id, o_d_id AS d_id, o_id, o_carrier_id, no_o_id
        FROM orders LEFT JOIN new_order ON no_w_id = o_w_id AND no_d_id = o_d_id AND no_o_id = o_id
        WHERE (o_carrier_id IS NULL) <> (no_o_id IS NOT NULL)
        UNION ALL
        SELECT no_w_id, no_d_id, no_o_id, NULL, no_o_id
        FROM new_order LEFT JOIN orders ON o_w_id = no_w_id AND o_d_id = no_d_id AND o_id = no_o_id
        WHERE o_id IS NULL"""),
    Check("ol_cnt_eq_lines_per_order", "3.3.2.6", "O_OL_CNT = rows in ORDER_LINE per order", """
        SELECT o_w_id AS w_id, o_d_id AS d_id, o_id, o_ol_cnt, COUNT(ol_number) AS order_lines
        FROM orders LEFT JOIN order_line ON ol_w_id = o_w_id AND ol_d_id = o_d_id AND ol_o_id = o_id
        GROUP BY o_w_id, o_d_id, o_id, o_ol_cnt HAVING o_ol_cnt <> COUNT(ol_number)"""),
    Check("delivery_d_null_iff_carrier_null", "3.3.2.7", "OL_DELIVERY_D is null iff O_CARRIER_ID is null", """
        SELECT ol_w_id AS w_id, ol_d_id AS d_id, ol_o_id AS o_id, ol_number, o_carrier_id, ol_delivery_d
        FROM order_line JOIN orders ON o_w_id = ol_w_id AND o_d_id = ol_d_id AND o_id = ol_o_id
        WHERE (ol_delivery_d IS NULL) <> (o_carrier_id IS NULL)"""),
    Check("w_ytd_eq_sum_h_amount", "3.3.2.8", "W_YTD = sum(H_AMOUNT) of the warehouse's payments", """
        SELECT w_id, w_ytd, h.s AS sum_h_amount FROM warehouse
          LEFT JOIN (SELECT h_w_id, SUM(h_amount) s FROM history GROUP BY h_w_id) h ON h.h_w_id = w_id
        WHERE h.s IS NULL OR w_ytd <> h.s"""),
    Check("d_ytd_eq_sum_h_amount", "3.3.2.9", "D_YTD = sum(H_AMOUNT) of the district's payments", """
        SELECT d_w_id AS w_id, d_id, d_ytd, h.s AS sum_h_amount FROM district
          LEFT JOIN (SELECT h_w_id, h_d_id, SUM(h_amount) s FROM history GROUP BY h_w_id, h_d_id) h
          ON h.h_w_id = d_w_id AND h.h_d_id = d_id
        WHERE h.s IS NULL OR d_ytd <> h.s"""),
    Check("c_balance_eq_delivered_minus_paid", "3.3.2.10",
          "C_BALANCE = sum(delivered OL_AMOUNT) - sum(H_AMOUNT) per customer", f"""
        SELECT c_w_id AS w_id, c_d_id AS d_id, c_id, c_balance,
               COALESCE(ol.s, 0) - COALESCE(h.s, 0) AS expected
        FROM customer
          LEFT JOIN ({_DELIVERED_BY_CUSTOMER}) ol ON ol.w = c_w_id AND ol.d = c_d_id AND ol.c = c_id
          LEFT JOIN ({_PAID_BY_CUSTOMER}) h ON h.w = c_w_id AND h.d = c_d_id AND h.c = c_id
        WHERE c_balance <> COALESCE(ol.s, 0) - COALESCE(h.s, 0)"""),
    Check("delivered_orders_eq_delivery_cnt", "3.3.2.11",
          "count(ORDER) - count(NEW_ORDER) = 2100 + sum(C_DELIVERY_CNT) per district", """
        SELECT o.w AS w_id, o.d AS d_id, o.n AS orders, COALESCE(n.n, 0) AS new_orders, c.s AS sum_delivery_cnt
        FROM (SELECT o_w_id w, o_d_id d, COUNT(*) n FROM orders GROUP BY o_w_id, o_d_id) o
          LEFT JOIN (SELECT no_w_id w, no_d_id d, COUNT(*) n FROM new_order GROUP BY no_w_id, no_d_id) n
            ON n.w = o.w AND n.d = o.d
          LEFT JOIN (SELECT c_w_id w, c_d_id d, SUM(c_delivery_cnt) s FROM customer GROUP BY c_w_id, c_d_id) c
            ON c.w = o.w AND c.d = o.d
        WHERE o.n - COALESCE(n.n, 0) <> 2100 + COALESCE(c.s, 0)"""),
    Check("c_balance_plus_ytd_eq_delivered", "3.3.2.12",
          "C_BALANCE + C_YTD_PAYMENT = sum(delivered OL_AMOUNT) per customer", f"""
        SELECT c_w_id AS w_id, c_d_id AS d_id, c_id, c_balance, c_ytd_payment, COALESCE(ol.s, 0) AS delivered
        FROM customer
          LEFT JOIN ({_DELIVERED_BY_CUSTOMER}) ol ON ol.w = c_w_id AND ol.d = c_d_id AND ol.c = c_id
        WHERE c_balance + c_ytd_payment <> COALESCE(ol.s, 0)"""),
)


def run_checks(conn: SqlTarget, names: Sequence[str] | None = None) -> list[CheckResult]:
    """Run the checks (all, or those named) in one consistent snapshot."""
    import mysql.connector

    selected = [c for c in CHECKS if names is None or c.name in names]
    unknown = set(names or ()) - {c.name for c in CHECKS}
    if unknown:
        raise ValueError(f"unknown TPC-C check(s): {', '.join(sorted(unknown))}")
    cnx = conn.connect(who="tpcc checks")
    results = []
    try:
        cur = cnx.cursor()
        cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        # one snapshot for every check; not ", READ ONLY" too: TiDB refuses the two together (1064)
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        for check in selected:
            start = time.monotonic()
            try:
                cur.execute(check.sql + f"\nLIMIT {MAX_ROWS}")
                rows = cur.fetchall()
                cols = tuple(d[0] for d in cur.description or ())
            except mysql.connector.Error as exc:
                results.append(CheckResult(check.name, check.clause, check.description, False,
                                           seconds=time.monotonic() - start, error=str(exc.msg)))
                continue
            results.append(CheckResult(check.name, check.clause, check.description, not rows, cols,
                                       tuple(tuple(r) for r in rows), time.monotonic() - start))
        cur.execute("COMMIT")
        cur.close()
    finally:
        cnx.close()
    return results


def summary_lines(results: Sequence[CheckResult | Mapping[str, Any]]) -> list[str]:
    out = []
    for r in results:
        out.append(r.message() if isinstance(r, CheckResult) else str(r.get("message", r)))
    return out
