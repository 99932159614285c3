"""The SVG charts: well-formed, one line per level, baselines dashed,
fault markers where the fault was applied/removed, and no crash on gaps."""

from __future__ import annotations

import dataclasses
import math
import xml.etree.ElementTree as ET

import pytest

from selftests.test_report_samples import make_cell, seed_cells
from wanbench.report import charts, svg, tables

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # raises on malformed XML
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter(f"{SVG}text")]


def test_qps_chart_has_one_line_per_level_and_dashed_baselines() -> None:
    cells = [c for c in seed_cells() if c.scenario == "replica_write"]
    base = {(c.level["label"], c.concurrency): {"metrics": {"qps": c.workload.qps * 1.1}} for c in cells
            if c.level["value"] == 0}
    root = parse(charts.qps_vs_concurrency(cells, base))
    lines = root.findall(f"{SVG}polyline")
    solid = [ln for ln in lines if not ln.get("stroke-dasharray")]
    dashed = [ln for ln in lines if ln.get("stroke-dasharray")]
    assert len(solid) == 4  # 0, 50, 100, 200 ms
    assert len(dashed) == 1  # only level 0 has a baseline here
    labels = texts(root)
    assert {"0ms", "50ms", "100ms", "200ms", "baseline (dashed)"} <= set(labels)
    assert "replica_write (rtt): QPS vs concurrency" in labels
    assert {"10", "50", "100", "1000"} <= set(labels)  # the measured concurrencies are the ticks


def test_latency_chart_draws_p95_and_p99() -> None:
    cells = [c for c in seed_cells() if c.scenario == "replica_read" and c.level["value"] in (0, 200)]
    root = parse(charts.latency_vs_concurrency(cells))
    lines = root.findall(f"{SVG}polyline")
    assert len(lines) == 4  # p95 + p99 for two levels
    assert sum(1 for ln in lines if ln.get("stroke-dasharray") == "2,3") == 2


def test_time_chart_marks_fault_applied_and_removed() -> None:
    cell = make_cell("replica_write", 200, 100)
    root = parse(charts.latency_over_time(cell))
    labels = texts(root)
    assert "fault applied" in labels
    assert "fault removed" in labels
    assert len(root.findall(f"{SVG}polyline")) == 2  # latency and QPS


def test_time_chart_without_markers_says_why() -> None:
    cell = make_cell("replica_write", 200, 100)
    cell = dataclasses.replace(cell, extra={})
    labels = texts(parse(charts.latency_over_time(cell)))
    assert "fault applied" not in labels
    assert any("before and removed after" in t for t in labels)


def test_gaps_and_empty_input_do_not_break_the_chart() -> None:
    s = svg.Series("x", ((1.0, 1.0), (2.0, math.nan), (3.0, 2.0), (4.0, 3.0)))
    root = parse(svg.line_chart([s], title="t", x_axis=svg.Axis("x"), y_axis=svg.Axis("y")))
    assert len(root.findall(f"{SVG}polyline")) == 1  # the NaN splits the line; a lone point is a dot
    assert "no data" in texts(parse(charts.qps_vs_concurrency([])))


def test_names_are_escaped() -> None:
    cell = dataclasses.replace(make_cell("replica_read", 0, 10), scenario='a<b>&"c"')
    root = parse(charts.qps_vs_concurrency([cell]))
    assert any('a<b>&"c"' in t for t in texts(root))


@pytest.mark.parametrize(("lo", "hi"), [(0, 7874.02), (0.3, 0.9), (0, 1), (5, 5), (-3, 12)])
def test_nice_ticks_cover_the_range(lo: float, hi: float) -> None:
    ticks = svg.nice_ticks(lo, hi)
    assert ticks[0] <= lo
    assert ticks[-1] >= hi
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1


def test_family_summary_chart_labels_the_seed_drops() -> None:
    rows = tables.summary_rows(seed_cells())["rtt"]
    assert len(rows) == 8  # 2 scenarios x 4 concurrencies: too many groups for max_groups=4
    labels = texts(parse(charts.family_summary_chart("rtt", rows, max_groups=4)))
    assert "replica_write c=1000" in labels
    assert "replica_read c=1000" in labels
    assert "replica_write c=10" not in labels
    all_labels = texts(parse(charts.family_summary_chart("rtt", rows)))
    assert "replica_write c=10" in all_labels
    assert "-99%" in all_labels  # seed 000: 0.20 s -> 20.27 s per 1000 writes at c=10, 200 ms
    # seed 000, TiKV write at c=1000: 0.13 s -> 0.33 s per 1000 writes at 200 ms = -61 %
    assert "-61%" in labels
    assert "±0%" in labels  # reads do not notice the replica's RTT


def test_time_chart_falls_back_to_rounds_and_fault_active_time() -> None:
    """Probes report per round only; the lead's record() gives fault_active_s."""
    cell = make_cell("replica_write", 50, 100, with_series=False)
    total = sum(r.seconds for r in cell.workload.rounds)
    cell = dataclasses.replace(cell, extra={"fault_active_s": total + 2.0})
    root = parse(charts.latency_over_time(cell))
    labels = texts(root)
    assert any("(per round)" in t for t in labels)
    assert "fault applied" in labels
    assert "fault removed" not in labels
    assert any("still in place" in t for t in labels)
    marker = next(ln for ln in root.iter(f"{SVG}line") if ln.get("stroke-dasharray") == "6,3")
    first_round = min(float(p.split(",")[0]) for ln in root.findall(f"{SVG}polyline")
                      for p in (ln.get("points") or "").split())
    assert float(marker.get("x1") or 0) < first_round  # applied 2 s before the first round
