"""Pure-Python SVG charts for the Allure report.

Allure runs no scripts in attachments, so every chart is a self-contained
SVG string: no matplotlib, no JavaScript, no external fonts or links. The
chart functions take ``CellResult`` objects and return SVG text; the small
drawing kernel (``line_chart``, ``bar_chart``) knows nothing about wanbench.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from wanbench.results import CellResult

#: Colour-blind-safe palette (Okabe-Ito), level 0 first.
PALETTE = ("#0072B2", "#E69F00", "#D55E00", "#CC79A7", "#009E73", "#56B4E9", "#F0E442", "#000000")
BASELINE_COLOUR = "#7f7f7f"
FONT = "font-family:Helvetica,Arial,sans-serif"


@dataclass(frozen=True)
class Series:
    """One line: ``points`` are (x, y); NaN y values break the line."""

    name: str
    points: tuple[tuple[float, float], ...]
    colour: str = PALETTE[0]
    dash: str = ""  # SVG stroke-dasharray, "" = solid
    axis: str = "left"  # "left" or "right" y axis
    markers: bool = True


@dataclass(frozen=True)
class Marker:
    """A vertical line at ``x`` with a label (fault applied / removed)."""

    x: float
    label: str
    colour: str = "#D55E00"


@dataclass(frozen=True)
class Axis:
    label: str
    log: bool = False
    ticks: tuple[float, ...] = ()  # explicit ticks (e.g. the concurrencies measured)
    zero: bool = True  # start a linear axis at 0


@dataclass(frozen=True)
class Frame:
    width: int = 760
    height: int = 380
    left: int = 70
    right: int = 70
    top: int = 48
    bottom: int = 92

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^n) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0, 1.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.floor(lo / step + 1e-9)
    last = math.ceil(hi / step - 1e-9)
    return [round(i * step, 10) for i in range(first, last + 1)]


def fmt_num(v: float) -> str:
    """Short tick label: 12k, 1.5M, 0.25."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e4:
        return f"{v / 1e3:.3g}k"
    if a >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.3g}"


class _Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float, log: bool) -> None:
        self.log = log
        if log:
            lo, hi = math.log10(max(lo, 1e-9)), math.log10(max(hi, 1e-9))
        if hi <= lo:
            hi = lo + 1.0
        self.lo, self.hi, self.a, self.b = lo, hi, a, b

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 1e-9))
        return self.a + (v - self.lo) / (self.hi - self.lo) * (self.b - self.a)


def _svg_open(frame: Frame, title: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{frame.width}" height="{frame.height}" '
        f'viewBox="0 0 {frame.width} {frame.height}" style="{FONT};font-size:12px">',
        f"<title>{escape(title)}</title>",
        f'<rect x="0" y="0" width="{frame.width}" height="{frame.height}" fill="#ffffff"/>',
        f'<text x="{frame.width / 2:.1f}" y="24" text-anchor="middle" font-size="15" font-weight="bold">'
        f"{escape(title)}</text>",
    ]


def _legend(frame: Frame, entries: Sequence[tuple[str, str, str]]) -> list[str]:
    """Legend rows under the plot: (name, colour, dash)."""
    out: list[str] = []
    x0, y = float(frame.left), frame.height - frame.bottom + 48
    x = x0
    for name, colour, dash in entries:
        w = 48 + 7.4 * len(name)
        if x + w > frame.width - 10:
            x, y = x0, y + 18
        d = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x}" y1="{y - 4}" x2="{x + 24}" y2="{y - 4}" stroke="{colour}" stroke-width="2.5"{d}/>')
        out.append(f'<text x="{x + 30}" y="{y}">{escape(name)}</text>')
        x += w
    return out


def _finite(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_axis: Axis,
    y_axis: Axis,
    y2_axis: Axis | None = None,
    markers: Sequence[Marker] = (),
    frame: Frame | None = None,
    note: str = "",
    legend: Sequence[tuple[str, str, str]] | None = None,
) -> str:
    """An SVG line chart; an empty ``series`` gives a chart that says so.
    ``legend`` (name, colour, dash) replaces the one-entry-per-series legend."""
    frame = frame or Frame()
    out = _svg_open(frame, title)
    pts_all = [p for s in series for p in _finite(s.points)]
    if not pts_all:
        out.append(f'<text x="{frame.width / 2:.1f}" y="{frame.height / 2:.1f}" text-anchor="middle" '
                   f'fill="#888">no data</text></svg>')
        return "\n".join(out)

    xs = [x for x, _ in pts_all] + [m.x for m in markers if math.isfinite(m.x)] + list(x_axis.ticks)
    x_lo, x_hi = min(xs), max(xs)
    if x_axis.log:
        x_lo, x_hi = x_lo / 1.25, x_hi * 1.25
        x_ticks = list(x_axis.ticks) or [10.0 ** e for e in range(math.floor(math.log10(x_lo)),
                                                                   math.ceil(math.log10(x_hi)) + 1)]
    else:
        x_ticks = list(x_axis.ticks) or nice_ticks(x_lo if not x_axis.zero else min(0.0, x_lo), x_hi)
        x_lo, x_hi = min(x_ticks + [x_lo]), max(x_ticks + [x_hi])
        if x_axis.ticks:
            pad = (x_hi - x_lo) * 0.05 or 1.0
            x_lo, x_hi = x_lo - pad, x_hi + pad
    sx = _Scale(x_lo, x_hi, frame.left, frame.left + frame.plot_w, x_axis.log)

    scales: dict[str, tuple[_Scale, list[float]]] = {}
    for side, axis in (("left", y_axis), ("right", y2_axis)):
        if axis is None:
            continue
        ys = [y for s in series if s.axis == side for _, y in _finite(s.points)]
        if not ys:
            continue
        lo = min(0.0, min(ys)) if axis.zero else min(ys)
        ticks = nice_ticks(lo, max(ys) * 1.05 if max(ys) > 0 else max(ys) + 1)
        scales[side] = (_Scale(ticks[0], ticks[-1], frame.top + frame.plot_h, frame.top, False), ticks)

    # grid and axes
    bottom = frame.top + frame.plot_h
    out.append(f'<rect x="{frame.left}" y="{frame.top}" width="{frame.plot_w}" height="{frame.plot_h}" '
               f'fill="none" stroke="#cccccc"/>')
    if "left" in scales:
        sy, ticks = scales["left"]
        for t in ticks:
            y = sy(t)
            out.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.plot_w}" y2="{y:.1f}" '
                       f'stroke="#eeeeee"/>')
            out.append(f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_num(t)}</text>')
        out.append(f'<text transform="translate(16,{frame.top + frame.plot_h / 2:.1f}) rotate(-90)" '
                   f'text-anchor="middle">{escape(y_axis.label)}</text>')
    if "right" in scales and y2_axis is not None:
        sy, ticks = scales["right"]
        xr = frame.left + frame.plot_w
        for t in ticks:
            out.append(f'<text x="{xr + 6}" y="{sy(t) + 4:.1f}" text-anchor="start" fill="#555">{fmt_num(t)}</text>')
        out.append(f'<text transform="translate({frame.width - 14},{frame.top + frame.plot_h / 2:.1f}) rotate(90)" '
                   f'text-anchor="middle" fill="#555">{escape(y2_axis.label)}</text>')
    for t in x_ticks:
        if not (x_lo <= t <= x_hi):
            continue
        x = sx(t)
        out.append(f'<line x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" y2="{bottom}" stroke="#f3f3f3"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{fmt_num(t)}</text>')
    out.append(f'<text x="{frame.left + frame.plot_w / 2:.1f}" y="{bottom + 34}" text-anchor="middle">'
               f"{escape(x_axis.label)}</text>")

    for m in markers:
        if not math.isfinite(m.x):
            continue
        x = sx(m.x)
        out.append(f'<line x1="{x:.1f}" y1="{frame.top}" x2="{x:.1f}" y2="{bottom}" stroke="{m.colour}" '
                   f'stroke-width="1.5" stroke-dasharray="6,3"/>')
        right_half = x > frame.left + frame.plot_w / 2
        out.append(f'<text x="{x - 4 if right_half else x + 4:.1f}" y="{frame.top - 4}" fill="{m.colour}" '
                   f'text-anchor="{"end" if right_half else "start"}">{escape(m.label)}</text>')

    for s in series:
        if s.axis not in scales:
            continue
        sy = scales[s.axis][0]
        segments: list[list[tuple[float, float]]] = [[]]
        for x, y in s.points:
            if math.isfinite(x) and math.isfinite(y):
                segments[-1].append((sx(x), sy(y)))
            elif segments[-1]:
                segments.append([])
        d = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        for seg in segments:
            if len(seg) > 1:
                path = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
                out.append(f'<polyline points="{path}" fill="none" stroke="{s.colour}" stroke-width="2.2"{d}/>')
            if s.markers or len(seg) == 1:
                for x, y in seg:
                    out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{s.colour}"/>')
    out.extend(_legend(frame, legend if legend is not None else
                       [(s.name, s.colour, s.dash) for s in series if s.axis in scales]))
    if note:
        out.append(f'<text x="{frame.width - 8}" y="{frame.height - 6}" text-anchor="end" fill="#888" '
                   f'font-size="10">{escape(note)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def bar_chart(
    groups: Sequence[str],
    bars: Sequence[tuple[str, str, Sequence[float]]],
    *,
    title: str,
    y_label: str,
    labels: Sequence[Sequence[str]] | None = None,
    reference: float | None = None,
    frame: Frame | None = None,
) -> str:
    """Grouped bars: ``bars`` = (name, colour, one value per group).
    ``labels[b][g]`` is drawn above bar b of group g."""
    frame = frame or Frame()
    out = _svg_open(frame, title)
    values = [v for _, _, vals in bars for v in vals if math.isfinite(v)]
    if not groups or not values:
        out.append(f'<text x="{frame.width / 2:.1f}" y="{frame.height / 2:.1f}" text-anchor="middle" '
                   f'fill="#888">no data</text></svg>')
        return "\n".join(out)
    ticks = nice_ticks(min(0.0, min(values)), max(max(values), reference or 0.0) * 1.12)
    sy = _Scale(ticks[0], ticks[-1], frame.top + frame.plot_h, frame.top, False)
    bottom = frame.top + frame.plot_h
    for t in ticks:
        y = sy(t)
        out.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.plot_w}" y2="{y:.1f}" '
                   f'stroke="#eeeeee"/>')
        out.append(f'<text x="{frame.left - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_num(t)}</text>')
    out.append(f'<text transform="translate(16,{frame.top + frame.plot_h / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    gw = frame.plot_w / len(groups)
    bw = gw * 0.8 / max(len(bars), 1)
    for gi, g in enumerate(groups):
        gx = frame.left + gi * gw + gw * 0.1
        out.append(f'<text x="{frame.left + gi * gw + gw / 2:.1f}" y="{bottom + 16}" text-anchor="middle">'
                   f"{escape(g)}</text>")
        for bi, (_name, colour, vals) in enumerate(bars):
            v = vals[gi] if gi < len(vals) else math.nan
            if not math.isfinite(v):
                continue
            x = gx + bi * bw
            y0, y1 = sy(max(v, 0.0)), sy(min(v, 0.0))
            out.append(f'<rect x="{x:.1f}" y="{y0:.1f}" width="{bw * 0.92:.1f}" height="{max(y1 - y0, 0.5):.1f}" '
                       f'fill="{colour}"/>')
            if labels and bi < len(labels) and gi < len(labels[bi]) and labels[bi][gi]:
                out.append(f'<text x="{x + bw * 0.46:.1f}" y="{y0 - 4:.1f}" text-anchor="middle" font-size="10">'
                           f"{escape(labels[bi][gi])}</text>")
    if reference is not None:
        y = sy(reference)
        out.append(f'<line x1="{frame.left}" y1="{y:.1f}" x2="{frame.left + frame.plot_w}" y2="{y:.1f}" '
                   f'stroke="{BASELINE_COLOUR}" stroke-dasharray="5,4"/>')
    out.append(f'<line x1="{frame.left}" y1="{bottom}" x2="{frame.left + frame.plot_w}" y2="{bottom}" '
               f'stroke="#999"/>')
    out.extend(_legend(frame, [(name, colour, "") for name, colour, _ in bars]))
    out.append("</svg>")
    return "\n".join(out)


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
