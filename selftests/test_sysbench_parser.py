"""The sysbench report parser, histogram percentiles, tables, preflight and
client-saturation rules, on recorded sysbench 1.0.20 outputs (no servers)."""

from __future__ import annotations

import json
import math
import random
import resource
from pathlib import Path

import pytest

from wanbench.errors import InfrastructureError
from wanbench.results import CellResult, Latency, Round, WorkloadResult
from wanbench.workloads import preflight
from wanbench.workloads.clientcpu import ClientLoad, assess, merge_client
from wanbench.workloads.histogram import Histogram, merge_histograms, parse_histogram
from wanbench.workloads.sysbench_output import (
    check_output,
    merge_results,
    parse_output,
    rate_summary,
    result_from_output,
    round_from_output,
)
from wanbench.workloads.tables import direct_vs_proxy_rows, direct_vs_proxy_table, oltp_rows, oltp_table, tables_json

DATA = Path(__file__).parent / "data" / "sysbench"
RECORDED_WITH_FINAL = [
    "probe_read_c8.txt",
    "probe_write_c8.txt",
    "oltp_read_write_t16_warmup.txt",
    "oltp_write_only_deadlocks.txt",
]


def read(name: str) -> str:
    return (DATA / name).read_text()


# -- histogram ---------------------------------------------------------------

KNOWN = """\
Latency histogram (values are in milliseconds)
       value  ------------- distribution ------------- count
       1.000 |****************************************  50
       2.000 |********************************          40
       3.000 |*******                                   9
      10.000 |*                                         1

WBJSON {"type":"cumulative","t":1}
"""


def test_percentiles_of_a_known_histogram() -> None:
    h = parse_histogram(KNOWN)
    assert h.count == 100
    # sysbench's rule: first bucket whose running count reaches floor(N*p/100 + 0.5)
    assert h.percentile(50) == 1.0
    assert h.percentile(50.6) == 2.0
    assert h.percentile(90) == 2.0
    assert h.percentile(95) == 3.0
    assert h.percentile(99) == 3.0
    assert h.percentile(99.9) == 10.0
    assert h.mean() == pytest.approx((50 * 1 + 40 * 2 + 9 * 3 + 10) / 100)
    lat = h.latency()
    assert (lat.min, lat.p50, lat.p90, lat.p95, lat.p99, lat.p999, lat.max) == (1, 1, 2, 3, 3, 10, 10)


def test_percentile_rejects_out_of_range() -> None:
    with pytest.raises(ValueError, match="percentile"):
        parse_histogram(KNOWN).percentile(0)


def test_empty_histogram_gives_nan() -> None:
    h = parse_histogram("no histogram here")
    assert not h
    assert math.isnan(h.percentile(95))
    assert math.isnan(h.latency().p95)
    assert h.latency(avg=1.5).avg == 1.5


def test_merge_adds_bucket_counts() -> None:
    a = Histogram(((1.0, 3), (2.0, 1)))
    b = Histogram(((2.0, 4), (5.0, 2)))
    m = merge_histograms([a, b])
    assert m.buckets == ((1.0, 3), (2.0, 5), (5.0, 2))
    assert a.merge(b) == m
    assert m.percentile(50) == 2.0


@pytest.mark.parametrize("name", RECORDED_WITH_FINAL)
def test_histogram_p95_equals_sysbench_own_p95(name: str) -> None:
    """Same rule as sysbench: our p95 from the buckets is its --percentile=95."""
    out = parse_output(read(name))
    assert out.final is not None
    assert out.histogram.percentile(95) == pytest.approx(round(out.final["latency_pct_ms"], 3), abs=0.0011)


@pytest.mark.parametrize("name", RECORDED_WITH_FINAL)
def test_histogram_counts_the_final_window(name: str) -> None:
    out = parse_output(read(name))
    assert out.final is not None
    events = out.final["events"]
    # sysbench counts an event in flight at the end in one and not the other
    assert abs(out.histogram.count - events) <= max(2, 0.01 * events)


# -- parsing reports ---------------------------------------------------------


def test_probe_read_report() -> None:
    text = read("probe_read_c8.txt")
    out = parse_output(text)
    assert len(out.cumulative) == 1
    assert not out.had_checkpoint
    rnd = round_from_output(out)
    assert rnd.queries == 20000
    assert rnd.seconds == pytest.approx(out.final["interval"])  # type: ignore[index]
    assert rnd.qps == pytest.approx(20000 / rnd.seconds)
    lat = rnd.latency_ms
    assert lat.min <= lat.p50 <= lat.p90 <= lat.p95 <= lat.p99 <= lat.p999 <= lat.max
    assert lat.avg == pytest.approx(0.095451)  # sysbench's exact average, not the buckets'
    assert rnd.errors == 0
    assert rnd.reconnects == 0


def test_warmup_checkpoint_is_excluded() -> None:
    out = parse_output(read("oltp_read_write_t16_warmup.txt"))
    assert out.had_checkpoint
    warm, final = out.cumulative[0], out.cumulative[-1]
    rnd = round_from_output(out)
    assert rnd.seconds == pytest.approx(final["interval"])
    assert rnd.seconds < final["t"] - warm["interval"] + 0.1
    assert rnd.queries == final["reads"] + final["writes"] + final["other"]
    assert rnd.tps == pytest.approx(final["events"] / final["interval"])
    # the histogram holds the steady state only, not warm-up + steady state
    assert abs(out.histogram.count - final["events"]) <= 2
    assert out.histogram.count < warm["events"] + final["events"] - 2
    assert len(out.intervals) >= 5


def test_errors_by_code_and_warmup_errors() -> None:
    text = read("oltp_write_only_deadlocks.txt")
    out = parse_output(text)
    assert set(out.errors_by_code) == {"1213"}
    final = out.final
    assert final is not None
    # per-thread split of warm-up/steady state agrees with sysbench's own counters
    assert out.errors_by_code["1213"] == pytest.approx(final["errors"], abs=16)
    assert out.warmup_errors_by_code["1213"] == pytest.approx(out.cumulative[0]["errors"], abs=16)
    res = result_from_output("oltp_write_only", 16, out, report=text, client=None)
    assert res.errors == final["errors"]
    assert res.ignored_errors == final["errors"]
    assert res.errors_by_code == {"1213": out.errors_by_code["1213"]}
    assert res.series
    assert max(p.errors for p in res.series) > 0


def test_bad_report_line_is_an_error() -> None:
    with pytest.raises(InfrastructureError, match="unreadable sysbench report line"):
        parse_output('WBJSON {"type":"cumulative","t":1.0,\n')


@pytest.mark.parametrize(("name", "code", "hint"), [
    ("fatal_1040.txt", "1040", "max_connections"),
    ("fatal_1045.txt", "1045", "user and password"),
])
def test_fatal_output_names_the_error_and_the_fix(name: str, code: str, hint: str) -> None:
    with pytest.raises(InfrastructureError) as info:
        check_output(read(name), 1, "oltp_point_select t=40")
    msg = str(info.value)
    assert f"error {code}" in msg
    assert hint in msg
    assert "sysbench exited 1" in msg
    assert msg.count("Too many connections") <= 1  # repeated FATAL lines are shown once


def test_clean_exit_without_report_is_an_error() -> None:
    with pytest.raises(InfrastructureError, match="no final report"):
        check_output("sysbench 1.0.20\nThreads started!\n", 0, "probe")


# -- open loop ---------------------------------------------------------------


def _rate_output(seconds: float, events: int) -> str:
    return f'WBJSON {{"type":"cumulative","interval":{seconds},"events":{events}}}\n'


@pytest.mark.parametrize(("rate", "seconds", "events", "sustained"), [
    (200, 8, 1600, True),
    (200, 8, 1500, True),      # 6.3 % short, 2.5 sd: chance
    (200, 8, 1470, False),     # 8.1 % short, 3.3 sd
    (200, 8, 1000, False),
    (5000, 60, 288_000, True),   # 4 % short: 3 sd is only 0.5 %, so the 5 % rule decides
    (5000, 60, 284_000, False),  # 5.3 % short
    (200, 0, 0, False),          # no measured window: nothing was sustained
])
def test_open_loop_shortfall_is_judged_against_chance_and_five_percent(
        rate: float, seconds: float, events: int, sustained: bool) -> None:
    summary = rate_summary(rate, parse_output(_rate_output(seconds, events)))
    assert summary["sustained"] is sustained
    if seconds:
        assert summary["achieved"] == pytest.approx(events / seconds)
    else:
        assert math.isnan(summary["achieved"])
    assert ("overloaded" in summary["message"]) is not sustained


def test_open_loop_at_its_own_rate_is_rarely_called_overloaded() -> None:
    # 1000 simulated 8 s runs of Poisson arrivals at 200/s (fixed seed): a plain "5 % short" rule calls
    # 28 of them overloaded; the rule allows for the count's spread (3 sd: about 1 in 700)
    rng = random.Random(32)
    overloaded = 0
    for _ in range(1000):
        t, events = rng.expovariate(200), 0
        while t < 8:
            events += 1
            t += rng.expovariate(200)
        overloaded += not rate_summary(200, parse_output(_rate_output(8, events)))["sustained"]
    assert overloaded <= 4


# -- merging rounds ----------------------------------------------------------


def _one_round(name: str) -> WorkloadResult:
    text = read(name)
    load = ClientLoad(cpu_seconds=0.2, wall_seconds=1.0, threads=8, cores=2)
    return result_from_output("probe_read", 8, parse_output(text), report=text, client=load, command="sysbench ...")


def test_merge_results_uses_merged_histograms() -> None:
    a = _one_round("probe_read_c8.txt")
    b = _one_round("probe_write_c8.txt")
    m = merge_results([a, b])
    assert len(m.rounds) == 2
    assert len(m.reports) == 2
    ha = Histogram(tuple((v, int(c)) for v, c in a.extra["histogram"]))
    hb = Histogram(tuple((v, int(c)) for v, c in b.extra["histogram"]))
    merged = merge_histograms([ha, hb])
    assert m.latency_ms.p99 == merged.percentile(99)
    assert m.latency_ms.max == max(a.latency_ms.max, b.latency_ms.max)
    ev_a, ev_b = a.extra["events"], b.extra["events"]
    assert m.latency_ms.avg == pytest.approx((a.latency_ms.avg * ev_a + b.latency_ms.avg * ev_b) / (ev_a + ev_b))
    assert m.extra["commands"] == ["sysbench ...", "sysbench ..."]
    assert m.client["saturated"] is False
    assert len(m.client["rounds"]) == 2


# -- client saturation rule --------------------------------------------------


def test_client_load_rule() -> None:
    busy = ClientLoad(cpu_seconds=1.8, wall_seconds=1.0, threads=256, cores=2)
    assert busy.busy_cores == pytest.approx(1.8)
    assert busy.capacity == 2
    assert busy.saturated
    one_thread = ClientLoad(cpu_seconds=0.9, wall_seconds=1.0, threads=1, cores=2)
    assert one_thread.capacity == 1
    assert one_thread.saturated
    normal = ClientLoad(cpu_seconds=0.6, wall_seconds=1.0, threads=8, cores=2)
    assert not normal.saturated
    verdict = assess([normal, busy])
    assert verdict["saturated"]
    assert "client-bound" in verdict["message"]
    assert "256 threads" in verdict["message"]
    assert not assess([normal])["saturated"]
    assert assess([ClientLoad(1.2, 1.0, 64, 2)])["message"].startswith("note:")
    assert merge_client([assess([normal]), assess([busy])])["saturated"]
    assert assess([])["message"] == "client CPU was not measured"


# -- preflight ---------------------------------------------------------------


def test_preflight_max_connections() -> None:
    server = preflight.ServerLimits(max_connections=151, connections_in_use=3, server="127.0.0.1:4000")
    problems = preflight.check(workload="oltp_point_select", threads=1000, tables=4, server=server)
    assert len(problems) == 1
    assert "max_connections is 151" in problems[0]
    assert "SET GLOBAL max_connections = 2000" in problems[0]
    assert preflight.check(workload="oltp_point_select", threads=128, tables=4, server=server) == []
    unlimited = preflight.ServerLimits(max_connections=0)  # TiDB's default
    assert preflight.check(workload="oltp_point_select", threads=5000, tables=4, server=unlimited) == []


def test_preflight_prepared_statements() -> None:
    server = preflight.ServerLimits(max_connections=5000, max_prepared_stmt_count=16382)
    assert preflight.prepared_statements_needed("oltp_read_write", 1000, 4) == 1000 * (9 * 4 + 2)
    problems = preflight.check(workload="oltp_read_write", threads=1000, tables=4, server=server)
    assert len(problems) == 1
    assert "max_prepared_stmt_count is 16382" in problems[0]
    assert preflight.check(workload="oltp_point_select", threads=1000, tables=4, server=server) == []


def test_preflight_open_files() -> None:
    server = preflight.ServerLimits(max_connections=0)
    problems = preflight.check(workload="oltp_point_select", threads=1000, tables=1, server=server,
                               nofile=(1024, 1024))
    assert len(problems) == 1
    assert "ulimit -Hn" in problems[0]
    # a low soft limit alone is fine: raise_nofile lifts it for sysbench
    assert preflight.check(workload="oltp_point_select", threads=1000, tables=1, server=server,
                           nofile=(256, 65536)) == []
    with pytest.raises(preflight.PreflightError, match="preflight: .*max_connections"):
        preflight.ensure(workload="oltp_point_select", threads=500, tables=1,
                         server=preflight.ServerLimits(max_connections=100))


def test_raise_nofile_lifts_soft_limit_within_hard() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
        new_soft, _ = preflight.raise_nofile(1000)
        assert new_soft >= min(1000 + preflight.FD_MARGIN, hard)
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == new_soft
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


# -- tables ------------------------------------------------------------------


def _cell(workload: str, path: str, threads: int, qps: float, p95: float, saturated: bool = False) -> CellResult:
    rnd = Round(seconds=10.0, queries=int(qps * 10), qps=qps, tps=qps / 20, latency_ms=Latency(p95=p95))
    wr = WorkloadResult(workload=workload, concurrency=threads, rounds=(rnd,), latency_ms=Latency(p95=p95),
                        client={"saturated": saturated})
    return CellResult(test_id=f"test_oltp[{workload}-{path}-t{threads}]", family="sysbench", scenario=workload,
                      level={"label": "none", "value": 0}, concurrency=threads, workload=wr, path=path)


def test_oltp_and_direct_vs_proxy_tables() -> None:
    cells = [
        _cell("oltp_read_write", "proxy", 8, 3000.0, 80.0),
        _cell("oltp_read_write", "direct", 8, 3150.27, 73.13),
        _cell("oltp_point_select", "direct", 8, 12653.13, 1.25),
        _cell("oltp_point_select", "proxy", 8, 11000.0, 1.5, saturated=True),
        _cell("oltp_point_select", "direct", 16, 13457.78, 2.61),  # no proxy twin: not in the diff table
    ]
    rows = oltp_rows(cells)
    assert [(r["type"], r["path"], r["threads"]) for r in rows] == [
        ("oltp_point_select", "direct", 8), ("oltp_point_select", "direct", 16),
        ("oltp_point_select", "proxy", 8), ("oltp_read_write", "direct", 8), ("oltp_read_write", "proxy", 8),
    ]
    text = oltp_table(cells)
    assert "| type " in text
    assert "12653.13" in text
    assert "73.13" in text
    diff = direct_vs_proxy_rows(cells)
    assert [(r["type"], r["threads"]) for r in diff] == [("oltp_point_select", 8), ("oltp_read_write", 8)]
    assert diff[1]["qps_diff_pct"] == pytest.approx((3000 - 3150.27) / 3150.27 * 100)
    assert diff[0]["client_bound"] is True
    dtext = direct_vs_proxy_table(cells)
    assert "-4.8%" in dtext
    assert "yes" in dtext
    # the same data from --results-json style dicts
    as_dicts = [c.to_json() for c in cells]
    assert direct_vs_proxy_rows(as_dicts) == diff
    doc = tables_json(cells)
    json.dumps(doc)
    assert doc["sysbench_oltp"] == rows
    assert oltp_table([]) == ""
    assert direct_vs_proxy_table([]) == ""
