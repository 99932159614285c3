"""Realistic CellResults for the report self-tests, built from seed 000's
TiKV-write and TiKV-read tables (RTT family, 1000 queries per round), so
charts and tables are exercised with the shapes real runs have."""

from __future__ import annotations

import math

from wanbench.faults.base import FaultKind, Level
from wanbench.results import CellResult, Latency, Round, SeriesPoint, WorkloadResult

# scenario -> level ms -> concurrency -> (avg s, min s, max s) per 1000 queries (seed 000)
SEED_000: dict[str, dict[int, dict[int, tuple[float, float, float]]]] = {
    "replica_write": {
        0: {10: (0.20, 0.19, 0.21), 50: (0.06, 0.06, 0.06), 100: (0.06, 0.05, 0.06), 1000: (0.13, 0.12, 0.15)},
        50: {10: (5.27, 5.27, 5.28), 50: (1.06, 1.06, 1.06), 100: (0.57, 0.55, 0.59), 1000: (0.19, 0.17, 0.20)},
        100: {10: (10.28, 10.27, 10.29), 50: (2.07, 2.07, 2.07), 100: (1.05, 1.04, 1.06), 1000: (0.21, 0.21, 0.21)},
        200: {10: (20.27, 20.27, 20.28), 50: (4.11, 4.06, 4.20), 100: (2.24, 2.24, 2.24), 1000: (0.33, 0.31, 0.36)},
    },
    "replica_read": {
        0: {10: (0.06, 0.05, 0.06), 50: (0.04, 0.03, 0.05), 100: (0.04, 0.04, 0.05), 1000: (0.12, 0.11, 0.13)},
        50: {10: (0.05, 0.05, 0.05), 50: (0.03, 0.03, 0.03), 100: (0.03, 0.03, 0.03), 1000: (0.12, 0.11, 0.13)},
        100: {10: (0.05, 0.05, 0.06), 50: (0.03, 0.03, 0.04), 100: (0.04, 0.03, 0.04), 1000: (0.13, 0.12, 0.13)},
        200: {10: (0.05, 0.05, 0.05), 50: (0.03, 0.03, 0.03), 100: (0.04, 0.03, 0.04), 1000: (0.12, 0.11, 0.12)},
    },
}
QUERIES = 1000


def make_cell(scenario: str, level_ms: int, concurrency: int, *, verdict: dict | None = None,
              with_series: bool = True) -> CellResult:
    avg, lo, hi = SEED_000[scenario][level_ms][concurrency]
    rounds = []
    for secs in (lo, avg, hi):
        qps = QUERIES / secs
        mean_ms = concurrency / qps * 1000.0  # Little's law
        rounds.append(Round(seconds=secs, queries=QUERIES, qps=qps,
                            latency_ms=Latency(avg=mean_ms, min=mean_ms * 0.3, p50=mean_ms * 0.9, p90=mean_ms * 1.3,
                                               p95=mean_ms * 1.5, p99=mean_ms * 2.1, p999=mean_ms * 3,
                                               max=mean_ms * 4)))
    mid = rounds[1].latency_ms
    series: tuple[SeriesPoint, ...] = ()
    if with_series:
        series = tuple(SeriesPoint(t=float(t), qps=rounds[1].qps * (1 + 0.05 * math.sin(t)),
                                   latency_ms=mid.p95 * (1 + 0.1 * math.cos(t))) for t in range(1, 31))
    level = Level(FaultKind.DELAY, float(level_ms))
    workload = "write_probe" if scenario == "replica_write" else "read_probe"
    w = WorkloadResult(workload=workload, concurrency=concurrency, rounds=tuple(rounds), latency_ms=mid,
                       series=series,
                       reports=tuple(f"sysbench 1.0.20 report, round {i}\nqueries: {QUERIES}\n" for i in range(1, 4)))
    fault = {} if level.is_baseline else {
        "kind": "delay", "value": level_ms, "mechanism": "toxiproxy", "component": "replica",
        "evidence": {"mechanism": "toxiproxy", "applied": ["replica_primary: latency 25ms each way"],
                     "measured": {"rtt_ms": level_ms + 0.4}, "verified": True, "notes": []},
    }
    return CellResult(test_id=f"tests/rtt/test_rtt.py::test_rtt[{scenario}-{level.label}-c{concurrency}]",
                      family="rtt", scenario=scenario, level=level.to_json(), concurrency=concurrency,
                      workload=w, fault=fault, path="proxy", verdict=verdict,
                      started="2026-11-22T17:00:00+00:00", finished="2026-11-22T17:00:31+00:00",
                      extra={"fault_applied_at": 3.0, "fault_removed_at": 28.0} if level_ms else {})


def seed_cells() -> list[CellResult]:
    return [make_cell(s, lv, c) for s in SEED_000 for lv in SEED_000[s] for c in SEED_000[s][lv]]


def test_samples_follow_seed_000() -> None:
    cells = seed_cells()
    assert len(cells) == 2 * 4 * 4
    base = next(c for c in cells if c.scenario == "replica_write" and c.level["value"] == 0 and c.concurrency == 1000)
    assert round(base.workload.qps) == round(1000 / 0.13)  # seed: 7874.02 QPS at c=1000
