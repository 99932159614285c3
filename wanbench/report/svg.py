"""A small SVG drawing kernel for the charts of the Allure report: series,
axes with nice ticks, a line chart and a bar chart, each a self-contained
SVG string (no scripts, fonts or links: Allure runs none in attachments).
It knows nothing about wanbench; ``charts.py`` draws wanbench's cells with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

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
