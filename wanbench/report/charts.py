"""Pure-Python SVG charts for the Allure report.

Allure runs no scripts in attachments, so every chart is a self-contained
SVG string: no matplotlib, no JavaScript, no external fonts or links. The
chart functions take ``CellResult`` objects and return SVG text; the small
drawing kernel (``line_chart``, ``bar_chart``) knows nothing about wanbench.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from wanbench.report.svg import BASELINE_COLOUR, PALETTE, Axis, Frame, Marker, Series, bar_chart, line_chart
from wanbench.results import CellResult

# -- wanbench charts -------------------------------------------------------------------------------


def _level_label(cell: CellResult) -> str:
    return str(cell.level.get("label", cell.level.get("value", "?")))


def _level_key(cell: CellResult) -> tuple[float, float]:
    return float(cell.level.get("value", 0) or 0), float(cell.level.get("jitter", 0) or 0)


def _by_level(cells: Sequence[CellResult]) -> list[tuple[str, list[CellResult]]]:
    """Cells grouped by level (baseline first), each sorted by concurrency;
    a later measurement of the same cell replaces an earlier one."""
    groups: dict[tuple[float, float], dict[int, CellResult]] = {}
    labels: dict[tuple[float, float], str] = {}
    for c in cells:
        key = _level_key(c)
        groups.setdefault(key, {})[c.concurrency] = c
        labels[key] = _level_label(c)
    return [(labels[k], [groups[k][n] for n in sorted(groups[k])]) for k in sorted(groups)]


def _concurrency_axis(cells: Sequence[CellResult]) -> Axis:
    conc = sorted({c.concurrency for c in cells})
    log = bool(conc) and conc[0] > 0 and conc[-1] / conc[0] >= 10
    return Axis("concurrency (client threads)", log=log, ticks=tuple(float(n) for n in conc))


def _baseline_value(baseline: Mapping[str, Any] | None, metric: str) -> float:
    if not baseline:
        return math.nan
    src = baseline.get("metrics", baseline)
    v = src.get(metric) if isinstance(src, Mapping) else None
    try:
        return float(v) if v is not None else math.nan
    except (TypeError, ValueError):
        return math.nan


def qps_vs_concurrency(
    cells: Sequence[CellResult],
    baselines: Mapping[tuple[str, int], Mapping[str, Any]] | None = None,
    *,
    title: str = "",
) -> str:
    """QPS against concurrency, one line per level; the stored baseline of
    each (level label, concurrency) is overlaid as a dashed grey line."""
    series: list[Series] = []
    legend: list[tuple[str, str, str]] = []
    for i, (label, group) in enumerate(_by_level(cells)):
        colour = PALETTE[i % len(PALETTE)]
        series.append(Series(f"{label}", tuple((float(c.concurrency), c.workload.qps) for c in group), colour))
        legend.append((label, colour, ""))
        if baselines:
            pts = tuple((float(c.concurrency), _baseline_value(baselines.get((label, c.concurrency)), "qps"))
                        for c in group)
            if any(math.isfinite(y) for _, y in pts):
                series.append(Series(f"{label} baseline", pts, colour, dash="6,4", markers=False))
    if len(series) > len(legend):
        legend.append(("baseline (dashed)", BASELINE_COLOUR, "6,4"))
    name = title or _scenario_title(cells)
    return line_chart(series, title=f"{name}: QPS vs concurrency", x_axis=_concurrency_axis(cells),
                      y_axis=Axis("QPS (median of rounds)"), legend=legend)


def latency_vs_concurrency(
    cells: Sequence[CellResult],
    baselines: Mapping[tuple[str, int], Mapping[str, Any]] | None = None,
    *,
    title: str = "",
) -> str:
    """p95 (solid) and p99 (dotted) latency against concurrency per level,
    with the baseline's p95 dashed grey when known."""
    series: list[Series] = []
    legend: list[tuple[str, str, str]] = []
    for i, (label, group) in enumerate(_by_level(cells)):
        colour = PALETTE[i % len(PALETTE)]
        series.append(Series(f"{label} p95", tuple((float(c.concurrency), c.workload.latency_ms.p95)
                                                   for c in group), colour))
        series.append(Series(f"{label} p99", tuple((float(c.concurrency), c.workload.latency_ms.p99)
                                                   for c in group), colour, dash="2,3", markers=False))
        legend.append((label, colour, ""))
        if baselines:
            pts = tuple((float(c.concurrency), _baseline_value(baselines.get((label, c.concurrency)),
                                                               "latency_ms.p95")) for c in group)
            if any(math.isfinite(y) for _, y in pts):
                series.append(Series(f"{label} baseline p95", pts, colour, dash="8,4", markers=False))
    legend += [("p95", "#444444", ""), ("p99", "#444444", "2,3")]
    if len(series) > 2 * (len(legend) - 2):
        legend.append(("baseline p95", "#444444", "8,4"))
    name = title or _scenario_title(cells)
    return line_chart(series, title=f"{name}: p95 / p99 latency vs concurrency", x_axis=_concurrency_axis(cells),
                      y_axis=Axis("latency (ms)"), legend=legend)


def latency_over_time(cell: CellResult) -> str:
    """Latency (left axis) and QPS (right axis) over the run, with vertical
    markers when the fault was applied and removed.

    Per-second samples when the workload gives them (``workload.series``);
    otherwise one step per round (probes report per round only). Markers come
    from ``cell.extra["fault_applied_at"/"fault_removed_at"]`` (seconds on the
    same clock), else from ``fault_active_s`` (how long the fault had been in
    place when the cell was recorded)."""
    w = cell.workload
    if w.series:
        lat = Series("latency p95 (ms)", tuple((p.t, p.latency_ms) for p in w.series), PALETTE[2], markers=False)
        qps = Series("QPS", tuple((p.t, p.qps) for p in w.series), PALETTE[0], axis="right", markers=False)
        end = max(p.t for p in w.series)
        what = "per second"
    else:
        lat_pts: list[tuple[float, float]] = []
        qps_pts: list[tuple[float, float]] = []
        t = 0.0
        for r in w.rounds:
            lat_pts += [(t, r.latency_ms.p95), (t + r.seconds, r.latency_ms.p95)]
            qps_pts += [(t, r.qps), (t + r.seconds, r.qps)]
            t += r.seconds
        end = t
        lat = Series("round p95 latency (ms)", tuple(lat_pts), PALETTE[2], markers=False)
        qps = Series("round QPS", tuple(qps_pts), PALETTE[0], axis="right", markers=False)
        what = "per round"
    markers: list[Marker] = []
    applied, removed = cell.extra.get("fault_applied_at"), cell.extra.get("fault_removed_at")
    active = cell.extra.get("fault_active_s")
    if not isinstance(applied, (int, float)) and isinstance(active, (int, float)) and cell.fault:
        applied = end - float(active)
    for v, text, colour in ((applied, "fault applied", "#D55E00"), (removed, "fault removed", "#009E73")):
        if isinstance(v, (int, float)) and math.isfinite(float(v)):
            markers.append(Marker(float(v), text, colour))
    if not _level_key(cell)[0]:
        note = "baseline: no fault"
    elif not markers:
        note = "fault applied before and removed after the measured window"
    elif len(markers) == 1:
        note = "fault still in place after the last round"
    else:
        note = ""
    return line_chart([lat, qps], title=f"{cell_title(cell)}: latency and QPS over time ({what})",
                      x_axis=Axis("seconds since the measurement started", zero=True),
                      y_axis=Axis("latency (ms)"), y2_axis=Axis("QPS"), markers=markers, note=note)


def family_summary_chart(family: str, rows: Sequence[Mapping[str, Any]], *, max_groups: int = 12) -> str:
    """One chart per family: QPS at every level as % of level 0 (100 % = no
    change), labelled with the drop, for every (scenario, concurrency) when
    they fit (``max_groups``), else for each scenario at its highest
    concurrency as seed 000 does. Relative values let a 150-QPS write probe
    and a 40k-QPS read probe share one axis."""
    chosen: list[Mapping[str, Any]] = list(rows)
    subtitle = "every concurrency"
    if len(chosen) > max_groups:
        top: dict[str, Mapping[str, Any]] = {}
        for r in rows:
            if r["scenario"] not in top or r["concurrency"] > top[r["scenario"]]["concurrency"]:
                top[r["scenario"]] = r
        chosen = list(top.values())
        subtitle = "highest concurrency"
    level_vals: dict[str, float] = {}
    for r in chosen:
        for label, v in r["levels"].items():
            level_vals[label] = float(v["value"])
    levels = sorted(level_vals, key=lambda lb: level_vals[lb])
    groups = [f"{r['scenario']} c={r['concurrency']}" for r in chosen]
    bars: list[tuple[str, str, list[float]]] = []
    labels: list[list[str]] = []
    for i, lb in enumerate(levels):
        vals, texts = [], []
        for r in chosen:
            v = r["levels"].get(lb)
            base = r.get("baseline_qps")
            if v is None or not base:
                vals.append(math.nan)
                texts.append("")
                continue
            vals.append(v["qps"] / base * 100.0)
            drop = v.get("drop_pct")
            texts.append("" if drop is None or level_vals[lb] == 0 else _drop_label(drop))
        bars.append((lb, PALETTE[i % len(PALETTE)], vals))
        labels.append(texts)
    return bar_chart(groups, bars, title=f"{family}: QPS at each level as % of level 0 ({subtitle})",
                     y_label="QPS, % of level 0", labels=labels, reference=100.0,
                     frame=Frame(width=max(760, 120 * len(groups) + 140)))


def _drop_label(drop: float) -> str:
    """QPS change as the seed writes it: -61% (a drop), +4% (faster)."""
    if round(drop) == 0:
        return "±0%"
    return f"-{drop:.0f}%" if drop > 0 else f"+{-drop:.0f}%"


def cell_title(cell: CellResult) -> str:
    return f"{cell.scenario} {cell.family}={_level_label(cell)} c={cell.concurrency}"


def _scenario_title(cells: Sequence[CellResult]) -> str:
    return f"{cells[0].scenario} ({cells[0].family})" if cells else ""
