"""Tables in the users' own shape: seed 004's per-cell summary (type,
threads, qps, p95) and seed 001's direct-vs-proxy difference.

Pure functions over cells (``CellResult`` objects or their ``to_json()``
dicts): the ``*_rows`` functions return the data (for ``--results-json``),
the ``*_table`` functions the same data as text for the terminal.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from wanbench.families import Family, Section
from wanbench.report.tables import text_table
from wanbench.results import CellResult

#: The bundled OLTP workloads, in the order the seeds list them.
OLTP_WORKLOADS: tuple[str, ...] = (
    "oltp_point_select",
    "oltp_read_only",
    "oltp_read_write",
    "oltp_write_only",
    "oltp_update_index",
    "oltp_update_non_index",
    "oltp_insert",
    "oltp_delete",
    "select_random_points",
    "select_random_ranges",
)


def _cell_dict(cell: CellResult | Mapping[str, Any]) -> Mapping[str, Any]:
    return cell.to_json() if isinstance(cell, CellResult) else cell


def _is_oltp(c: Mapping[str, Any]) -> bool:
    return c.get("family") == "sysbench" or c.get("workload") in OLTP_WORKLOADS


def _order(workload: str) -> int:
    return OLTP_WORKLOADS.index(workload) if workload in OLTP_WORKLOADS else len(OLTP_WORKLOADS)


def oltp_rows(cells: Iterable[CellResult | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Seed 004's summary (type, threads, qps, p95) plus path, tps, errors
    and the client-saturation flag, one row per cell."""
    rows = []
    for cell in cells:
        c = _cell_dict(cell)
        if not _is_oltp(c):
            continue
        lat = c.get("latency_ms") or {}
        client = c.get("client") or {}
        rows.append({
            "type": c.get("workload"),
            "path": c.get("path", ""),
            "threads": c.get("concurrency"),
            "qps": c.get("qps"),
            "tps": c.get("tps"),
            "p95": lat.get("p95"),
            "p99": lat.get("p99"),
            "avg": lat.get("avg"),
            "max": lat.get("max"),
            "errors": c.get("errors", 0),
            "client_bound": bool(client.get("saturated", False)),
            "test_id": c.get("test_id"),
        })
    rows.sort(key=lambda r: (_order(str(r["type"])), str(r["path"]), int(r["threads"] or 0)))
    return rows


def direct_vs_proxy_rows(cells: Iterable[CellResult | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Seed 001's comparison: per workload and threads, direct vs proxy QPS
    and p95 and the difference in percent (negative = proxy slower)."""
    by_key: dict[tuple[str, int], dict[str, Mapping[str, Any]]] = {}
    for row in oltp_rows(cells):
        by_key.setdefault((str(row["type"]), int(row["threads"] or 0)), {})[str(row["path"])] = row
    out = []
    for (workload, threads), paths in sorted(by_key.items(), key=lambda kv: (_order(kv[0][0]), kv[0][1])):
        d, p = paths.get("direct"), paths.get("proxy")
        if d is None or p is None:
            continue
        out.append({
            "type": workload,
            "threads": threads,
            "direct_qps": d["qps"],
            "proxy_qps": p["qps"],
            "qps_diff_pct": _diff(p["qps"], d["qps"]),
            "direct_p95": d["p95"],
            "proxy_p95": p["p95"],
            "p95_diff_pct": _diff(p["p95"], d["p95"]),
            "client_bound": bool(d["client_bound"] or p["client_bound"]),
        })
    return out


def _diff(new: Any, old: Any) -> float | None:
    if new is None or old is None or not old or math.isnan(float(old)) or math.isnan(float(new)):
        return None
    return (float(new) - float(old)) / float(old) * 100.0


def _fmt(v: Any, spec: str = ".2f") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def oltp_table(cells: Iterable[CellResult | Mapping[str, Any]]) -> str:
    """Seed 004's table (type | path | threads | qps | tps | p95 ...) as text."""
    rows = oltp_rows(cells)
    if not rows:
        return ""
    return "\n".join(text_table(
        ["type", "path", "threads", "qps", "tps", "p95 ms", "p99 ms", "errors", "client-bound"],
        [[str(r["type"]), str(r["path"]), str(r["threads"]), _fmt(r["qps"]), _fmt(r["tps"]), _fmt(r["p95"]),
          _fmt(r["p99"]), str(r["errors"]), _fmt(r["client_bound"])] for r in rows],
        right=range(2, 8),
    ))


def direct_vs_proxy_table(cells: Iterable[CellResult | Mapping[str, Any]]) -> str:
    """Seed 001's direct-vs-proxy difference as text."""
    rows = direct_vs_proxy_rows(cells)
    if not rows:
        return ""
    return "\n".join(text_table(
        ["type", "threads", "direct qps", "proxy qps", "qps diff", "direct p95", "proxy p95", "p95 diff",
         "client-bound"],
        [[str(r["type"]), str(r["threads"]), _fmt(r["direct_qps"]), _fmt(r["proxy_qps"]),
          _fmt(r["qps_diff_pct"], "+.1f") + ("%" if r["qps_diff_pct"] is not None else ""),
          _fmt(r["direct_p95"]), _fmt(r["proxy_p95"]),
          _fmt(r["p95_diff_pct"], "+.1f") + ("%" if r["p95_diff_pct"] is not None else ""),
          _fmt(r["client_bound"])] for r in rows],
        right=range(1, 8),
    ))


def tables_json(cells: Iterable[CellResult | Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Both tables as data, for ``results_document(..., tables=...)``."""
    cells = list(cells)
    return {"sysbench_oltp": oltp_rows(cells), "sysbench_direct_vs_proxy": direct_vs_proxy_rows(cells)}


# -- the sysbench OLTP family (tests/sysbench) --------------------------------------------------------------------


def sysbench_tables(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    rows = oltp_rows(cells)
    return {"sysbench": rows, "direct_vs_proxy": direct_vs_proxy_rows(cells)} if rows else None


def sysbench_summary(cells: Sequence[Mapping[str, Any]]) -> list[Section]:
    """Seed 004's table and seed 001's direct-vs-proxy difference, of the family's own cells."""
    sb = [c for c in cells if c.get("family") == "sysbench"]
    if not sb:
        return []
    out = [Section("wanbench sysbench: type, threads, qps, p95 (seed 004 layout)", (oltp_table(sb),))]
    diff = direct_vs_proxy_table(sb)
    if diff:
        out.append(Section("wanbench sysbench: direct vs proxy (seed 001 layout)", (diff,), sep="-"))
    return out


FAMILY = Family(
    "sysbench",
    "sysbench OLTP workloads, direct and through the proxy (tests/sysbench)",
    fixtures="wanbench.fixtures.sysbench",
    workloads=OLTP_WORKLOADS,
    fingerprint=("duration", "warmup", "tables", "table_size", "rate"),
    load_hosts=True,
    tables=sysbench_tables,
    summary=sysbench_summary,
    package_data=("lua/wb_oltp.lua", "lua/wb_hooks.lua"),
)
