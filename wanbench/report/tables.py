"""Tables: for the Allure report the per-test HTML result table, the raw
per-round CSV and the seed-000 style summary matrix; for the terminal the one
text-table renderer (``text_table``) every printed table uses.

Everything here is a pure function of ``CellResult`` objects (or rows of
strings) and returns text; ``allure_out`` and the terminal summaries decide
where it goes. The HTML uses only tags and inline styles that Allure's
sanitiser keeps (no scripts, no classes).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from wanbench.results import CellResult, drop_table


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = (),
               frame: bool = True) -> list[str]:
    """Rows of strings as aligned lines for a terminal: the header, a rule,
    the rows. Columns whose index is in ``right`` (numbers) are right-aligned,
    header included, the others (names) left-aligned, so digits line up and
    names read from the left. With ``frame`` the layout of the seed tables
    users pasted (``| a | b |`` under a ``|---|`` rule, which also renders as
    Markdown); without, columns two spaces apart and no rule."""
    table = [list(headers), *(list(r) for r in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))]
        return "| " + " | ".join(out) + " |" if frame else "  ".join(out).rstrip()

    lines = [line(table[0])]
    if frame:
        lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return lines + [line(r) for r in table[1:]]


#: (metric key of CellResult.metrics(), label, unit, True if higher is better)
HEADLINE: tuple[tuple[str, str, str, bool], ...] = (
    ("qps", "QPS", "/s", True),
    ("tps", "TPS", "/s", True),
    ("tpmc", "tpmC", "/min", True),
    ("latency_ms.p50", "p50 latency", "ms", False),
    ("latency_ms.p95", "p95 latency", "ms", False),
    ("latency_ms.p99", "p99 latency", "ms", False),
    ("error_rate", "error rate", "", False),
)

REGRESSION_STATUSES = frozenset({"regression", "fail", "failed"})
MESSAGE_MAX = 240
_BAD = "background:#fde2e1;color:#a40000;font-weight:bold"
_GOOD = "color:#1a7f37"
_TD = "padding:4px 10px;border-bottom:1px solid #e5e5e5"
_TH = "padding:4px 10px;border-bottom:2px solid #999;text-align:left"
_NUM = _TD + ";text-align:right;font-variant-numeric:tabular-nums"


@dataclass(frozen=True)
class Row:
    """One line of the result table."""

    metric: str
    label: str
    unit: str
    value: float
    baseline: float
    higher_is_better: bool
    regression: bool = False
    status: str = ""  # the gate's status for this metric, if it checked it

    @property
    def change_pct(self) -> float:
        if not (math.isfinite(self.value) and math.isfinite(self.baseline)) or self.baseline == 0:
            return math.nan
        return (self.value - self.baseline) / self.baseline * 100.0

    @property
    def worse(self) -> bool:
        c = self.change_pct
        return math.isfinite(c) and (c < 0 if self.higher_is_better else c > 0)


def fmt(v: float | None, unit: str = "") -> str:
    """Numbers as people read them: 41631.97 -> "41,632", 0.734 -> "0.734"."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if unit == "" and 0 <= v <= 1 and v != int(v):
        return f"{v * 100:.3g}%"
    a = abs(v)
    if a >= 1000:
        s = f"{v:,.0f}"
    elif a >= 100:
        s = f"{v:.1f}"
    else:
        s = f"{v:.3g}"
    return f"{s} {unit}".strip() if unit and unit != "/s" and unit != "/min" else s


def fmt_change(c: float) -> str:
    return "–" if not math.isfinite(c) else f"{c:+.1f}%"


def baseline_metrics(baseline: Mapping[str, Any] | None,
                     verdict: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Metric -> baseline value. From ``baseline`` (``{"metrics": {...}}`` or a
    flat mapping with the keys of ``CellResult.metrics()``), else from the
    gate verdict's ``baseline`` checks (their ``reference`` medians)."""
    out: dict[str, float] = {}
    src = baseline.get("metrics", baseline) if baseline else None
    if isinstance(src, Mapping):
        for k, v in src.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out[str(k)] = float(v)
    for check in _checks(verdict):
        ref = check.get("reference")
        if check.get("kind") == "baseline" and isinstance(ref, (int, float)) and isinstance(check.get("metric"), str):
            out.setdefault(check["metric"], float(ref))
    return out


def baseline_origin(baseline: Mapping[str, Any] | None, verdict: Mapping[str, Any] | None) -> str:
    """"release v8.5.2, accepted 2026-11-20, 3 runs" for the table's footer."""
    parts = []
    for src in (baseline or {}, (verdict or {}).get("baseline") or {}):
        if not isinstance(src, Mapping):
            continue
        for key, text in (("release", "release {}"), ("date", "{}"), ("accepted_at", "accepted {}"),
                          ("runs", "{} accepted run(s)"), ("run", "run {}"), ("label", "{}")):
            v = src.get(key)
            if v and not isinstance(v, (Mapping, list)):
                parts.append(text.format(v))
    return ", ".join(dict.fromkeys(parts))


def _checks(verdict: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    checks = (verdict or {}).get("checks") or ()
    return [c for c in checks if isinstance(c, Mapping)]


def verdict_status(verdict: Mapping[str, Any] | None) -> str:
    if not verdict:
        return ""
    for key in ("status", "outcome", "verdict", "result"):
        v = verdict.get(key)
        if isinstance(v, str):
            return v
    return ""


def verdict_metrics(verdict: Mapping[str, Any] | None) -> set[str]:
    """Metrics a verdict blames (``metric`` or ``metrics``, or failed checks)."""
    if not verdict:
        return set()
    out: set[str] = set()
    m = verdict.get("metric")
    if isinstance(m, str):
        out.add(m)
    ms = verdict.get("metrics")
    if isinstance(ms, (list, tuple)):
        out.update(str(x) for x in ms)
    for check in _checks(verdict):
        if str(check.get("status", "")).lower() in REGRESSION_STATUSES and isinstance(check.get("metric"), str):
            out.add(check["metric"])
    return out


def metric_status(verdict: Mapping[str, Any] | None, metric: str) -> str:
    """The gate's status for one metric: its checks' statuses, worst first."""
    order = ("regression", "incomparable", "no-baseline", "inconclusive", "improvement", "pass")
    found = {str(c.get("status", "")) for c in _checks(verdict) if c.get("metric") == metric and c.get("status")}
    for status in order:
        if status in found:
            return status
    return next(iter(sorted(found)), "")


def cell_rows(cell: CellResult, baseline: Mapping[str, Any] | None = None) -> list[Row]:
    metrics = cell.metrics()
    base = baseline_metrics(baseline, cell.verdict)
    regressed = verdict_status(cell.verdict).lower() in REGRESSION_STATUSES
    blamed = verdict_metrics(cell.verdict)
    rows = []
    for key, label, unit, higher in HEADLINE:
        value = metrics.get(key, math.nan)
        if key in ("tps", "tpmc") and not math.isfinite(value):
            continue
        rows.append(Row(key, label, unit, value, base.get(key, math.nan), higher,
                        regression=regressed and (key in blamed or (not blamed and key == "qps")),
                        status=metric_status(cell.verdict, key)))
    return rows


def cell_html(cell: CellResult, baseline: Mapping[str, Any] | None = None) -> str:
    """The test's description: what was measured, the result table against
    the baseline, the verdict; regressions in red."""
    w = cell.workload
    rows = cell_rows(cell, baseline)
    status = verdict_status(cell.verdict)
    message = str(cell.verdict.get("message", "")) if cell.verdict else ""
    fault = cell.fault or {}
    lvl = cell.level.get("label", "?")
    out = [
        f"<p><b>{escape(cell.scenario)}</b> · {escape(cell.family)} = <b>{escape(str(lvl))}</b> · "
        f"concurrency <b>{cell.concurrency}</b> · workload <code>{escape(w.workload)}</code>"
        + (f" · path <code>{escape(cell.path)}</code>" if cell.path else "")
        + f" · {len(w.rounds)} round(s), {w.queries:,} queries</p>",
    ]
    if fault.get("mechanism") or fault.get("kind"):
        verified = (fault.get("evidence") or {}).get("verified") if isinstance(fault.get("evidence"), Mapping) else None
        on = f" on {fault['component']}" if fault.get("component") else ""
        what = fault.get("label", fault.get("value"))
        out.append(f"<p>fault: {escape(str(fault.get('kind', '')))} {escape(str(what))}"
                   f"{escape(on)} via {escape(str(fault.get('mechanism', '?')))}"
                   + ("" if verified is None else " · verified" if verified else " · <b>not verified</b>")
                   + "</p>")
    head = "".join(f'<th style="{_TH}">{h}</th>' for h in ("metric", "this run", "baseline", "change", "verdict"))
    body = []
    for r in rows:
        style = _BAD if r.regression else ""
        change_style = _BAD if r.regression else ("color:#a40000" if r.worse else _GOOD if
                                                  math.isfinite(r.change_pct) else "")
        v = r.status or (status if r.regression else "")
        body.append(
            f'<tr style="{style}"><td style="{_TD}">{escape(r.label)}</td>'
            f'<td style="{_NUM}">{fmt(r.value, r.unit)}</td>'
            f'<td style="{_NUM}">{fmt(r.baseline, r.unit)}</td>'
            f'<td style="{_NUM};{change_style}">{fmt_change(r.change_pct)}</td>'
            f'<td style="{_TD}">{escape(v)}</td></tr>')
    body.append(f'<tr><td style="{_TD}">errors</td><td style="{_NUM}">{w.errors:,}</td>'
                f'<td style="{_NUM}">–</td><td style="{_NUM}">–</td>'
                f'<td style="{_TD}">{escape(_codes(w.errors_by_code))}</td></tr>')
    out.append(f'<table style="border-collapse:collapse;margin:6px 0">'
               f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    if status:
        colour = "#a40000" if status.lower() in REGRESSION_STATUSES else "#333"
        if len(message) > MESSAGE_MAX:  # the whole message is in the test's status box
            message = message[:MESSAGE_MAX].rsplit(" ", 1)[0] + " …"
        out.append(f'<p style="color:{colour}"><b>verdict: {escape(status)}</b>'
                   + (f" — {escape(message)}" if message else "") + "</p>")
    elif not any(math.isfinite(r.baseline) for r in rows):
        out.append("<p><i>no baseline for this cell yet: numbers are recorded, not judged</i></p>")
    origin = baseline_origin(baseline, cell.verdict)
    if origin:
        out.append(f"<p style=\"color:#666\">baseline: {escape(origin)}</p>")
    budgets = [_budget_text(c) for c in _checks(cell.verdict) if c.get("status") in ("regression", "inconclusive")]
    if budgets:
        out.append(f"<p style=\"color:#666\">budgets applied: {escape('; '.join(budgets))}</p>")
    sat = w.client.get("saturated") if isinstance(w.client, Mapping) else None
    if sat:
        out.append(f'<p style="color:#a40000">client saturated: {escape(str(w.client.get("message", sat)))}</p>')
    if isinstance(w.extra.get("load_hosts"), Mapping):
        out.append(load_hosts_html(w.extra["load_hosts"]))
    return "\n".join(out)


def load_hosts_html(record: Mapping[str, Any]) -> str:
    """Each load host's share of the cell (``--load-hosts``): its QPS, its own
    percentiles and its sysbench's CPU, a saturated host in red."""
    head = "".join(f'<th style="{_TH}">{h}</th>' for h in
                   ("load host", "threads", "QPS", "p50", "p95", "p99", "sysbench CPU"))
    body = []
    for h in record.get("hosts", ()):
        lat = h.get("latency_ms") or {}
        client = h.get("client") or {}
        cpu = client.get("busy_cores")
        style = _BAD if client.get("saturated") else ""
        body.append(
            f'<tr style="{style}"><td style="{_TD}">{escape(str(h.get("host")))}</td>'
            f'<td style="{_NUM}">{h.get("threads")}</td><td style="{_NUM}">{fmt(h.get("qps"), "/s")}</td>'
            + "".join(f'<td style="{_NUM}">{fmt(lat.get(k), "ms")}</td>' for k in ("p50", "p95", "p99"))
            + f'<td style="{_NUM}">{fmt(cpu, "cores")} of {client.get("cores", "?")}</td></tr>')
    skew = record.get("max_start_skew_ms")
    return (f'<table style="border-collapse:collapse;margin:6px 0"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
            + (f'<p style="color:#666">load hosts started within {fmt(skew, "ms")} of each other '
               "(the cell's percentiles come from their summed histograms)</p>" if skew is not None else ""))


def _budget_text(check: Mapping[str, Any]) -> str:
    """"QPS vs baseline ≤ 5% worse (line 17)" from one gate check."""
    names = {k: label for k, label, _, _ in HEADLINE}
    metric = str(check.get("metric", "?"))
    kind = str(check.get("kind", ""))
    limit = check.get("limit")
    if isinstance(limit, (int, float)) and kind in ("baseline", "level0") and metric != "error_rate":
        bound = f"≤ {limit * 100:g}% worse"
    else:
        bound = f"limit {limit}"
    against = {"baseline": "vs baseline", "level0": "vs level 0", "absolute": "absolute"}.get(kind, kind)
    line = f" (line {check['budget_line']})" if check.get("budget_line") else ""
    return f"{names.get(metric, metric)} {against} {bound}{line}"


def _codes(codes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())) if codes else ""


ROUND_COLUMNS = ("round", "seconds", "queries", "qps", "tps", "lat_avg_ms", "lat_min_ms", "lat_p50_ms",
                 "lat_p90_ms", "lat_p95_ms", "lat_p99_ms", "lat_p999_ms", "lat_max_ms", "errors", "reconnects")


def rounds_csv(cell: CellResult) -> str:
    """Raw per-round numbers, one row per round (Allure shows CSV as a table)."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(ROUND_COLUMNS)
    for i, r in enumerate(cell.workload.rounds, 1):
        lat = r.latency_ms
        wr.writerow([i, _c(r.seconds), r.queries, _c(r.qps), _c(r.tps), *(_c(getattr(lat, k)) for k in
                     ("avg", "min", "p50", "p90", "p95", "p99", "p999", "max")), r.errors, r.reconnects])
    return buf.getvalue()


def _c(v: float) -> str:
    return "" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.6g}"


# -- summary matrix (seed 000) ---------------------------------------------------------------------


def as_docs(cells: Sequence[CellResult | Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Cells as result dicts (``CellResult.to_json``); dicts pass through, so
    cells handed over by xdist workers as JSON work too."""
    return [c.to_json() if isinstance(c, CellResult) else c for c in cells]


def summary_rows(cells: Sequence[CellResult | Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Family -> ``drop_table`` rows (per scenario and concurrency: QPS at
    each level and % drop against level 0)."""
    docs = as_docs(cells)
    families: list[str] = []
    for d in docs:
        if d["family"] not in families:
            families.append(d["family"])
    return {f: rows for f in families if (rows := drop_table(docs, f))}


def _levels(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
    seen: dict[str, float] = {}
    for r in rows:
        for label, v in r["levels"].items():
            seen[label] = float(v["value"])
    return sorted(seen.items(), key=lambda kv: kv[1])


def summary_html(cells: Sequence[CellResult | Mapping[str, Any]], title: str = "wanbench summary") -> str:
    """Seed 000's tables: per family, per scenario and concurrency, the
    level-0 QPS, then QPS and % drop at each level (drops >= 10 % in red)."""
    out = [f"<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title></head>"
           f"<body style=\"font-family:Helvetica,Arial,sans-serif;font-size:13px\"><h2>{escape(title)}</h2>"]
    by_family = summary_rows(cells)
    if not by_family:
        out.append("<p>no measured cells</p>")
    for family, rows in by_family.items():
        levels = [lv for lv in _levels(rows) if lv[1] != 0]
        head = [f'<th style="{_TH}">scenario</th>', f'<th style="{_TH}">concurrency</th>',
                f'<th style="{_TH}">level-0 QPS</th>']
        for label, _ in levels:
            head += [f'<th style="{_TH}">{escape(label)} QPS</th>', f'<th style="{_TH}">{escape(label)} drop</th>']
        body = []
        for r in rows:
            cols = [f'<td style="{_TD}"><b>{escape(r["scenario"])}</b></td>',
                    f'<td style="{_NUM}">{r["concurrency"]}</td>',
                    f'<td style="{_NUM}">{fmt(r.get("baseline_qps"))}</td>']
            for label, _ in levels:
                v = r["levels"].get(label)
                if v is None:
                    cols += [f'<td style="{_NUM}">–</td>'] * 2
                    continue
                drop = v.get("drop_pct")
                style = _BAD if drop is not None and drop >= 10 else ""
                cols += [f'<td style="{_NUM}">{fmt(v["qps"])}</td>',
                         f'<td style="{_NUM};{style}">{_drop(drop)}</td>']
            body.append("<tr>" + "".join(cols) + "</tr>")
        out.append(f"<h3>{escape(family)}</h3><table style=\"border-collapse:collapse\"><thead><tr>"
                   f"{''.join(head)}</tr></thead><tbody>{''.join(body)}</tbody></table>")
    out.append("<p style=\"color:#666\">drop = (level-0 QPS − QPS) / level-0 QPS; negative = faster than "
               "level 0 (noise or caching). Red: drop of 10 % or more.</p></body></html>")
    return "\n".join(out)


def _drop(d: float | None) -> str:
    if d is None:
        return "–"
    return f"{d:.2f}%" if d >= 0 else f"{d:.2f}% (up)"


def summary_csv(cells: Sequence[CellResult | Mapping[str, Any]]) -> str:
    """The summary matrix flattened: family, scenario, concurrency, level, QPS, drop."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(("family", "scenario", "concurrency", "level", "qps", "level0_qps", "drop_pct"))
    for family, rows in summary_rows(cells).items():
        for r in rows:
            for label, v in sorted(r["levels"].items(), key=lambda kv: kv[1]["value"]):
                wr.writerow((family, r["scenario"], r["concurrency"], label, _c(v["qps"]),
                             _c(r.get("baseline_qps") or math.nan),
                             "" if v.get("drop_pct") is None else f"{v['drop_pct']:.2f}"))
    return buf.getvalue()
