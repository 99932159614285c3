"""The server-side evidence in the Allure report: a table per cell, a chart
of per-component CPU and QPS against concurrency, and the finding.

Cells carry their evidence in ``extra["evidence"]`` (``wanbench.evidence``);
cells without it give no table and an empty chart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from wanbench.evidence.finding import Finding, findings
from wanbench.report.charts import _concurrency_axis
from wanbench.report.svg import PALETTE, Axis, Series, line_chart
from wanbench.results import CellResult


def evidence_of(cell: CellResult) -> Mapping[str, Any]:
    ev = cell.extra.get("evidence")
    return ev if isinstance(ev, Mapping) else {}


def _num(v: Any, unit: str = "", nd: int = 1) -> str:
    if isinstance(v, (int, float)) and math.isfinite(v):
        return f"{v:.{nd}f}{unit}"
    return "-"


def evidence_html(cell: CellResult) -> str:
    """One table: CPU per component (and per CPU set), QPS per tier, waits, link bytes."""
    ev = evidence_of(cell)
    if not ev:
        return ""
    if ev.get("error"):
        return f"<p>evidence: {escape(str(ev['error']))}</p>"
    rows: list[tuple[str, str, str]] = []
    for name, c in sorted(ev.get("components", {}).items(), key=lambda kv: -(kv[1].get("cpu_cores") or 0)):
        where = (f"limit {c['cpu_limit_cores']:g} cores" if c.get("cpu_limit_cores")
                 else f"CPU {','.join(str(x) for x in c.get('cpus', ()))}" if c.get("cpus")
                 else f"{c['host_cores']} cores" if c.get("host_cores") else "")
        extra = f", throttled {c['throttled_pct']:.0f} % of periods" if c.get("throttled_pct") is not None else ""
        rows.append(("CPU", escape(name), f"{_num(c.get('cpu_pct'), ' %')} ({_num(c.get('cpu_cores'), ' cores', 2)}"
                                          f"{', ' + escape(where) if where else ''}{extra})"))
    for name, s in (ev.get("cpu_sets") or {}).items():
        rows.append(("CPU set", escape(f"{name} ({','.join(str(x) for x in s.get('cpus', ()))})"),
                     f"busy {_num(s.get('busy_pct'), ' %')}, lab {_num(s.get('ours_pct'), ' %')}"))
    for tier, v in (ev.get("qps") or {}).items():
        if isinstance(v, (int, float)):
            rows.append(("QPS", escape(tier), _num(v)))
    for tier, v in (ev.get("commits_per_s") or {}).items():
        rows.append(("commits/s", escape(tier), _num(v)))
    for key, v in (ev.get("latency_ms") or {}).items():
        if isinstance(v, (int, float)):
            rows.append(("latency", escape(key), _num(v, " ms", 3)))
        elif isinstance(v, Mapping):
            rows.append(("latency", escape(key), escape(", ".join(f"{k} {_num(x, ' ms', 2)}" for k, x in v.items()))))
    for name, b in (ev.get("links") or {}).items():
        rows.append(("network", escape(name), f"in {_num(b['in_bytes_per_s'] / 1e6, ' MB/s', 3)}, "
                                              f"out {_num(b['out_bytes_per_s'] / 1e6, ' MB/s', 3)}"))
    body = "".join(f"<tr><td>{a}</td><td>{b}</td><td style='text-align:right'>{c}</td></tr>" for a, b, c in rows)
    return (f"<h4>Server-side evidence ({escape(str(ev.get('source', '')))}, "
            f"{_num(ev.get('window_s'), ' s')} measured)</h4>"
            "<table><tr><th>what</th><th>where</th><th>value</th></tr>" + body + "</table>")


def cpu_qps_chart(cells: Sequence[CellResult], *, title: str = "") -> str:
    """Per-component CPU (% of the CPUs each may use, left axis) and QPS
    (right axis) against concurrency, for the cells of one level."""
    ordered = sorted(cells, key=lambda c: c.concurrency)
    names: list[str] = []
    for c in ordered:
        for n in evidence_of(c).get("components", {}):
            if n not in names:
                names.append(n)
    series = []
    for i, n in enumerate(names):
        pts = tuple((float(c.concurrency), float(evidence_of(c).get("components", {}).get(n, {}).get("cpu_pct")
                                                 or math.nan)) for c in ordered)
        series.append(Series(f"{n} CPU %", pts, PALETTE[(i + 1) % len(PALETTE)]))
    series.append(Series("QPS", tuple((float(c.concurrency), c.workload.qps) for c in ordered), PALETTE[0],
                         dash="6,4", axis="right"))
    name = title or (f"{ordered[0].scenario} ({ordered[0].path or '-'})" if ordered else "")
    return line_chart(series, title=f"{name}: CPU per component and QPS vs concurrency",
                      x_axis=_concurrency_axis(ordered), y_axis=Axis("CPU % of its CPUs"),
                      y2_axis=Axis("QPS"))


def same_level(cell: CellResult, cells: Sequence[CellResult]) -> list[CellResult]:
    label = cell.level.get("label")
    return [c for c in cells if c.level.get("label") == label and c.path == cell.path]


def finding_for_cells(cells: Sequence[CellResult]) -> Finding | None:
    found = findings(c.to_json() for c in cells)
    return found[0] if found else None
