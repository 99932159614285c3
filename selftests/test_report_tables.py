"""Result table, raw CSV and the seed-000 summary matrix."""

from __future__ import annotations

import csv
import io
import math

import pytest

from selftests.test_report_samples import make_cell, seed_cells
from wanbench.report import tables

REGRESSION = {"status": "regression", "metric": "qps",
              "message": "replica_write rtt=200ms c=1000: QPS 3030 is 8.4% below baseline 3300 (budget 5%)"}


def test_regression_row_is_highlighted_with_change_and_message() -> None:
    cell = make_cell("replica_write", 200, 1000, verdict=REGRESSION)
    html = tables.cell_html(cell, {"metrics": {"qps": 3300.0, "latency_ms.p95": 400.0}, "release": "v8.5.2"})
    qps_row = next(line for line in html.split("<tr") if ">QPS<" in line)
    assert "background:#fde2e1" in qps_row
    assert "regression" in qps_row
    assert "-8.2%" in qps_row  # 3030.3 vs 3300
    p95_row = next(line for line in html.split("<tr") if ">p95 latency<" in line)
    assert "background:#fde2e1" not in p95_row
    assert "+23.8%" in p95_row
    assert "below baseline 3300" in html
    assert "release v8.5.2" in html


def test_no_baseline_says_so() -> None:
    html = tables.cell_html(make_cell("replica_read", 0, 10))
    assert "no baseline for this cell yet" in html
    assert "background:#fde2e1" not in html


def test_flat_baseline_mapping_is_accepted() -> None:
    rows = tables.cell_rows(make_cell("replica_read", 0, 10), {"qps": 10000, "latency_ms.p95": 1.0})
    qps = next(r for r in rows if r.metric == "qps")
    assert qps.baseline == 10000
    assert not qps.worse
    assert qps.change_pct == pytest.approx(66.67, abs=0.01)


def test_rounds_csv_has_every_round() -> None:
    cell = make_cell("replica_write", 50, 100)
    rows = list(csv.DictReader(io.StringIO(tables.rounds_csv(cell))))
    assert [r["round"] for r in rows] == ["1", "2", "3"]
    assert [float(r["seconds"]) for r in rows] == [0.55, 0.57, 0.59]  # seed 000 min/avg/max
    assert float(rows[1]["qps"]) == pytest.approx(1000 / 0.57, rel=1e-5)
    assert rows[0]["tps"] == ""  # NaN is an empty cell, not "nan"


def test_summary_matrix_matches_seed_000() -> None:
    cells = seed_cells()
    rows = {(r["scenario"], r["concurrency"]): r for r in tables.summary_rows(cells)["rtt"]}
    write = rows[("replica_write", 1000)]
    assert write["baseline_qps"] == pytest.approx(1000 / 0.13)
    assert write["levels"]["200ms"]["drop_pct"] == pytest.approx((1 - 0.13 / 0.33) * 100)
    html = tables.summary_html(cells)
    assert "<h3>rtt</h3>" in html
    assert "200ms drop" in html
    assert "60.61%" in html
    flat = list(csv.DictReader(io.StringIO(tables.summary_csv(cells))))
    assert len(flat) == len(cells)
    assert {r["level"] for r in flat} == {"0ms", "50ms", "100ms", "200ms"}


def test_summary_accepts_result_dicts_from_xdist_workers() -> None:
    cells = seed_cells()
    assert tables.summary_csv([c.to_json() for c in cells]) == tables.summary_csv(cells)


@pytest.mark.parametrize(("value", "unit", "text"), [
    (41631.97, "/s", "41,632"), (0.734, "ms", "0.734 ms"), (math.nan, "ms", "–"), (0.0125, "", "1.25%"),
    (153.4, "ms", "153.4 ms"),
])
def test_number_format(value: float, unit: str, text: str) -> None:
    assert tables.fmt(value, unit) == text


def test_gate_verdict_supplies_baseline_budgets_and_short_message() -> None:
    """The shape wanbench/pytest_plugin/gate.py stores on the cell (Verdict.to_json)."""
    verdict = {
        "status": "inconclusive", "message": "replica_write rtt=50ms c=50: QPS 844 is 26.5% above baseline 667, " * 8,
        "checks": [{"kind": "baseline", "metric": "qps", "limit": 0.05, "budget_line": 17, "status": "inconclusive",
                    "current": 844.1, "reference": 667.3},
                   {"kind": "level0", "metric": "qps", "limit": 0.1, "budget_line": 30, "status": "pass",
                    "current": 844.1, "reference": 3416.0},
                   {"kind": "baseline", "metric": "error_rate", "limit": 0.01, "budget_line": 21, "status": "pass",
                    "current": 0.0, "reference": 0.0}],
        "baseline": {"release": "v1-demo", "accepted_at": "2026-11-22T17:47:11+00:00", "runs": 1},
    }
    cell = make_cell("replica_write", 50, 50, verdict=verdict)
    rows = {r.metric: r for r in tables.cell_rows(cell)}
    assert rows["qps"].baseline == 667.3  # the baseline check's reference, not level 0's
    assert rows["qps"].status == "inconclusive"
    assert rows["error_rate"].status == "pass"
    html = tables.cell_html(cell)
    assert "QPS vs baseline ≤ 5% worse (line 17)" in html
    assert "release v1-demo, accepted 2026-11-22T17:47:11+00:00, 1 accepted run(s)" in html
    verdict_line = next(line for line in html.splitlines() if "verdict: inconclusive" in line)
    assert len(verdict_line) < tables.MESSAGE_MAX + 200
    assert "no baseline for this cell yet" not in html


def test_text_table_aligns_names_left_and_numbers_right() -> None:
    lines = tables.text_table(["scenario", "c", "QPS"], [["replica_write", "8", "3158.00"], ["pd", "128", "12.5"]],
                              right=(1, 2))
    assert lines == [
        "| scenario      |   c |     QPS |",
        "|---------------|-----|---------|",
        "| replica_write |   8 | 3158.00 |",
        "| pd            | 128 |    12.5 |",
    ]
    assert tables.text_table(["cell", "verdict", "QPS"], [["a rtt=50ms c=8", "regression", "-41.4%"]], right=(2,),
                             frame=False) == ["cell            verdict        QPS",
                                              "a rtt=50ms c=8  regression  -41.4%"]
    assert tables.text_table(["type", "qps"], []) == ["| type | qps |", "|------|-----|"]
