"""The heartbeat's timeline as a self-contained SVG (no scripts, no fonts).

One dot per attempt: x = its planned send time, y = its latency (from the
planned time, log scale), colour = outcome. The fault window is shaded, the
SLO is a dashed line and the longest stretch without an acknowledged write
(the RTO) is a bar along the top. A stall reads as a ramp: attempts planned
during it all complete when it ends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

from wanbench.report.svg import FONT

#: outcome -> colour (Okabe-Ito: colour-blind safe)
OUTCOME_COLOUR = {"ok": "#009E73", "failed": "#D55E00", "unknown": "#CC79A7", "skipped": "#7f7f7f"}
OVER_SLO_COLOUR = "#E69F00"

W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 380, 64, 24, 80, 48


def heartbeat_timeline(summary: Mapping[str, Any], *, title: str = "") -> str:
    """SVG of one cell's heartbeat (``summary`` as ``wanbench.heartbeat_numbers.summarize`` returns it)."""
    attempts = [a for a in summary.get("attempts", []) if len(a) >= 6]
    slo = float(summary.get("config", {}).get("slo_s", 1.0))
    duration = float(summary.get("duration_s") or max((a[4] for a in attempts), default=1.0)) or 1.0
    x_max = max(duration, max((a[2] for a in attempts), default=0.0)) or 1.0
    lat = [max(a[4] - a[2], 1e-4) for a in attempts]
    y_lo, y_hi = 1e-3, max(10 ** math.ceil(math.log10(max([*lat, slo * 2]))), 1.0)
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + pw * max(0.0, min(t, x_max)) / x_max

    def y(s: float) -> float:
        s = min(max(s, y_lo), y_hi)
        return TOP + ph * (1 - (math.log10(s) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo)))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
           f'style="{FONT};font-size:11px">',
           f'<rect width="{W}" height="{H}" fill="white"/>']
    head = title or "heartbeat"
    out.append(f'<text x="{LEFT}" y="18" style="font-size:14px;font-weight:bold">{escape(head)}</text>')
    rec = summary.get("recovery_s")
    sub = f"RTO {summary.get('rto_s', 0):.2f} s"
    if rec is not None:
        sub += f", first acknowledged write {rec:.2f} s after the fault's removal"
    sub += f"; lost {summary.get('lost_writes', 0)}, at risk during the fault {summary.get('at_risk_writes', 0)}"
    out.append(f'<text x="{LEFT}" y="34">{escape(sub)}</text>')
    window = summary.get("fault_window")
    if window:
        a, b = float(window[0]), float(window[1]) if window[1] is not None else x_max
        out.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(1.0, x(b) - x(a)):.1f}" height="{ph}" '
                   f'fill="#D55E00" fill-opacity="0.12"><title>fault in place {a:.2f}-{b:.2f} s</title></rect>')
        out.append(f'<text x="{x(a) + 3:.1f}" y="{TOP + 12}" fill="#D55E00">fault</text>')
    gap = summary.get("longest_gap")
    if gap:
        out.append(f'<line x1="{x(gap[0]):.1f}" x2="{x(gap[1]):.1f}" y1="{TOP - 6}" y2="{TOP - 6}" '
                   f'stroke="#000" stroke-width="3"><title>longest stretch without an acknowledged write: '
                   f'{gap[0]:.2f}-{gap[1]:.2f} s</title></line>')
        out.append(f'<text x="{x(gap[0]):.1f}" y="{TOP - 10}">RTO</text>')
    # axes and grid
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    decade = y_lo
    while decade <= y_hi * 1.0001:
        yy = y(decade)
        label = f"{decade * 1000:g} ms" if decade < 1 else f"{decade:g} s"
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 4}" y="{yy + 4:.1f}" text-anchor="end">{label}</text>')
        decade *= 10
    step = _nice_step(x_max)
    t = 0.0
    while t <= x_max + 1e-9:
        out.append(f'<text x="{x(t):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{t:g}</text>')
        t += step
    out.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">planned send time (s since the '
               f'heartbeat started)</text>')
    out.append(f'<text x="14" y="{TOP + ph / 2}" transform="rotate(-90 14 {TOP + ph / 2})" '
               f'text-anchor="middle">latency from planned time</text>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(slo):.1f}" y2="{y(slo):.1f}" stroke="#E69F00" '
               f'stroke-dasharray="6 4"><title>SLO {slo:g} s</title></line>')
    out.append(f'<text x="{LEFT + pw - 4}" y="{y(slo) - 4:.1f}" text-anchor="end" fill="#E69F00">SLO {slo:g} s'
               f'</text>')
    for att, latency in zip(attempts, lat, strict=True):
        outcome = str(att[5])
        colour = OUTCOME_COLOUR.get(outcome, "#000")
        if outcome == "ok" and latency > slo:
            colour = OVER_SLO_COLOUR
        tip = f"writer {att[0]} seq {att[1]}: {outcome}, {latency * 1000:.0f} ms" + (f" ({att[6]})" if
                                                                                      len(att) > 6 and att[6] else "")
        out.append(f'<circle cx="{x(att[2]):.1f}" cy="{y(latency):.1f}" r="2.2" fill="{colour}">'
                   f'<title>{escape(tip)}</title></circle>')
    # legend
    lx = LEFT + 6
    items = [("ok", OUTCOME_COLOUR["ok"]), ("ok, over SLO", OVER_SLO_COLOUR), ("failed", OUTCOME_COLOUR["failed"]),
             ("unknown", OUTCOME_COLOUR["unknown"]), ("skipped", OUTCOME_COLOUR["skipped"])]
    for i, (name, colour) in enumerate(items):
        cx = lx + i * 96
        out.append(f'<circle cx="{cx}" cy="50" r="4" fill="{colour}"/>')
        out.append(f'<text x="{cx + 7}" y="54">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _nice_step(span: float) -> float:
    raw = span / 8
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return float(m * mag)
    return float(10 * mag)
