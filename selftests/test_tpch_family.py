"""The TPC-H family's contract, read from its cells' JSON: its samples and
metrics for the gate, its answers rule, its fingerprint (only where a run
sets its options), its tables and its per-query block with the time a
rate cap alone costs each result (result bytes / cap)."""

from __future__ import annotations

from typing import Any

import pytest

from selftests.test_families import BEFORE_THE_REGISTRY, default_options
from wanbench import families
from wanbench.gate import integrity
from wanbench.gate.baseline import samples_of
from wanbench.gate.budgets import METRICS, SECONDS_METRICS
from wanbench.report.allure_out import perf_metrics
from wanbench.workloads import engine_class
from wanbench.workloads.tpch_engine import TpchEngine, parse_seed, predicted_s, scale_factor_of, tpch_summary


def _cell(level: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    per_query = {"Q1": {"seconds": [0.5, 0.7], "rows": [4, 4], "bytes_received": [879, 879], "errors": 0},
                 "Q16": {"seconds": [0.09, 0.08], "rows": [296, 296], "bytes_received": [11862, 11862], "errors": 0},
                 "Q2": {"seconds": [0.04], "rows": [4], "bytes_received": [1246], "errors": 1}}
    return {"test_id": "test_bandwidth[primary_tpch-10mbit-c1]", "family": "bandwidth", "scenario": "primary_tpch",
            "level": level or {"kind": "rate", "value": 10.0, "label": "10mbit"}, "concurrency": 1,
            "workload": "tpch", "rounds": [{"seconds": 1.0, "queries": 22, "qps": 22.0, "latency_ms": {}}],
            "workload_extra": {"scale_factor": 0.01, "seed": None, "power_queries_only": [500.0, None],
                               "queries_per_hour": [1e4, 2e4], "geomean_s": [0.05, None],
                               "bytes_received": [20000, 19000], "per_query": per_query,
                               "failed": [[], [{"query": 2, "error": "Lost connection"}]], **extra}}


def test_the_engine_is_the_familys() -> None:
    assert engine_class("tpch") is TpchEngine
    assert TpchEngine.concurrencies == (1,)
    assert families.family("tpch").owns({"family": "rtt", "workload": "tpch"})
    assert scale_factor_of("sf0.01", 1.0) == 0.01
    assert scale_factor_of("", 1.0) == 1.0
    assert parse_seed("none") is None
    assert parse_seed("7") == 7


def test_its_samples_and_metrics() -> None:
    s = samples_of(_cell())
    assert s["power"] == [500.0]
    assert s["queries_per_hour"] == [1e4, 2e4]
    assert s["query_s.Q1"] == [0.5, 0.7]
    assert METRICS["power"] is True
    assert METRICS["query_s.Q16"] is False
    assert "query_s.Q1" in SECONDS_METRICS  # an absolute limit reads "2s"
    assert perf_metrics()["queries_per_hour"] == ("queries per hour", "/h", "higher")
    assert "query_s.Q1" not in perf_metrics()


def test_a_wrong_answer_is_its_integrity_problem() -> None:
    failed = {"checks": [{"name": "Q1", "passed": False, "message": "Q1 row 3, sum_qty: got 25, expected 24"}]}
    (p,) = integrity.problems_of(_cell(**failed))
    assert p.code == integrity.TPCH_ANSWERS
    assert p.message == ("TPC-H answers differ from the reference engine's (1 query(s)):\n"
                         "  Q1 row 3, sum_qty: got 25, expected 24")


def test_its_options_fingerprint_a_run_only_where_it_sets_them() -> None:
    assert families.fingerprint_params(default_options().__getitem__) == BEFORE_THE_REGISTRY
    given = default_options(tpch_sf=[0.01], tpch_seed=7)
    assert families.fingerprint_params(given.__getitem__) == {**BEFORE_THE_REGISTRY, "tpch_sf": [0.01], "tpch_seed": 7}


def test_under_a_cap_each_query_gets_the_time_its_bytes_take_through_it() -> None:
    assert predicted_s(11862, 10.0) == pytest.approx(0.0094896)
    assert predicted_s(11862, None) is None
    tables = families.family("tpch").tables([_cell()])
    (row,) = tables["tpch"]
    assert row["power"] == 500.0
    assert row["queries_failed"] == [2]
    q16 = next(q for q in tables["tpch_queries"] if q["query"] == "Q16")
    assert q16["predicted_s"] == pytest.approx(11862 * 8 / 10e6)
    assert q16["seconds"] == pytest.approx(0.085)
    head, block = tpch_summary([_cell()])
    assert "1/0 right" not in "\n".join(head.lines)
    assert block.title.endswith("predicted at the 10 Mbit/s cap = result bytes / cap")
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in block.lines[2:]}
    assert cells["Q16"] == ["296", "11862", "0.0850", "0.0095", "9.0x"]
    assert any(line.startswith("| Q2 ") and "(1 failed)" in line for line in block.lines)
    (_, plain) = tpch_summary([_cell(level={"kind": "none", "value": 0, "label": "-"})])
    assert "predicted" not in plain.title
    assert [c.strip() for c in plain.lines[0].split("|")[1:-1]] == ["query", "rows", "result bytes", "measured s"]


def test_the_census_counts_bytes_per_query_at_any_pace() -> None:
    """At SF 1 a query takes seconds to minutes: far below one operation a second, where rates
    would be noise, but the windows' counter totals divided by the queries are exact."""
    from wanbench.census import census_of

    cell = {**_cell(level={"kind": "none", "value": 0, "label": "-"}),
            "rounds": [{"seconds": 735.0, "queries": 22, "qps": 22 / 735.0, "latency_ms": {}}],
            "extra": {"evidence": {"windows": 1, "counters": {"primary": {"Bytes_sent": 700000.0,
                                                                         "Bytes_received": 109556.0}}}}}
    metrics = census_of(cell)["metrics"]
    assert metrics["bytes_per_op.primary"]["value"] == pytest.approx(36798.0)
    cell["extra"]["evidence"]["windows"] = 0  # no exact totals: the rates are not kept
    assert "bytes_per_op.primary" not in census_of(cell)["metrics"]
