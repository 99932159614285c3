"""Self-tests of the TPC-C family against a real MariaDB and real sysbench.

The session starts its own MariaDB (port 24306, data in a temporary
directory, the lab's durability settings) so this file needs nothing else;
``selftests/test_tpcc.py -m "not lab"`` runs only the pure ones.
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import PrivateMariadb, needs
from wanbench.errors import ConfigError, InfrastructureError
from wanbench.results import Latency, WorkloadResult
from wanbench.sql import SqlTarget
from wanbench.workloads import tpcc, tpcc_model
from wanbench.workloads.tpcc_checks import CHECKS, run_checks

PORT = 24306
NEEDS = ("sysbench", "mariadbd", "mariadb-install-db")

# Lines copied verbatim from seed 001 (go-tpc output, "IDC * 3").
SEED_001 = """\
[Summary] NEW_ORDER - Takes(s): 299.9, Count: 33007, TPM: 6602.7, Sum(ms): 1034428.7, Avg(ms): 31.4, 50th(ms): 24.1, 90th(ms): 60.8, 95th(ms): 71.3, 99th(ms): 88.1, 99.9th(ms): 109.1, Max(ms): 1040.2
[Summary] NEW_ORDER_ERR - Takes(s): 299.9, Count: 2, TPM: 0.4, Sum(ms): 75.1, Avg(ms): 37.5, 50th(ms): 28.3, 90th(ms): 48.2, 95th(ms): 48.2, 99th(ms): 48.2, 99.9th(ms): 48.2, Max(ms): 48.2
tpmC: 6602.7, tpmTotal: 14704.8, efficiency: 51343.0%"""  # noqa: E501


def _missing() -> list[str]:
    return [t for t in NEEDS if shutil.which(t) is None]


needs_tools = pytest.mark.skipif(bool(_missing()), reason=f"missing binaries: {_missing()}")


@pytest.fixture(scope="session")
def mariadb() -> Iterator[SqlTarget]:
    """A private MariaDB with the lab's settings (``labutil.PrivateMariadb``); stopped by PID at the end."""
    needs(*NEEDS)
    with PrivateMariadb(PORT, user="tpcc", password=secrets.token_urlsafe(12), prefix="wanbench-tpcc-db-") as db:
        yield SqlTarget("127.0.0.1", PORT, "tpcc", db.password, "wanbench_tpcc")


@pytest.fixture(scope="session")
def loaded(mariadb: SqlTarget) -> tpcc.LoadResult:
    return tpcc.load(mariadb, tpcc_model.TpccOptions(warehouses=1, threads=4))


@pytest.fixture(scope="session")
def closed_run(mariadb: SqlTarget, loaded: tpcc.LoadResult) -> WorkloadResult:
    return tpcc.run(mariadb, tpcc_model.TpccOptions(warehouses=1, threads=4, duration=15))


def _sql(conn: SqlTarget, *stmts: str) -> list[Any]:
    cnx = conn.connect(who="test")
    try:
        cur: Any = cnx.cursor()
        rows: list[Any] = []
        for s in stmts:
            cur.execute(s)
            rows = cur.fetchall() if cur.with_rows else []
        return rows
    finally:
        cnx.close()


# ------------------------------------------------------------- pure tests

def test_summary_renders_like_go_tpc_seed_001():
    lines = SEED_001.splitlines()
    row = tpcc_model.SummaryRow("NEW_ORDER", 299.9, 33007, 6602.7, 1034428.7, Latency(
        avg=31.4, p50=24.1, p90=60.8, p95=71.3, p99=88.1, p999=109.1, max=1040.2))
    err = tpcc_model.SummaryRow("NEW_ORDER_ERR", 299.9, 2, 0.4, 75.1, Latency(
        avg=37.5, p50=28.3, p90=48.2, p95=48.2, p99=48.2, p999=48.2, max=48.2))
    assert row.render() == lines[0]
    assert err.render() == lines[1]
    summary = tpcc_model.TpccSummary(seconds=299.9, warehouses=1, threads=8, wait=False, time_scale=1.0,
                               rows=(row, err), tpmc=6602.7, tpm_total=14704.8,
                               efficiency=51343.0, mix={}, rollbacks=0, errors_by_code={})
    # go-tpc's efficiency is tpmC / (12.86 x warehouses): seed 001 ran 1 warehouse
    assert 6602.7 / (tpcc_model.TPMC_PER_WAREHOUSE * 1) * 100 == pytest.approx(51343.0, rel=1e-5)
    rendered = summary.render().splitlines()
    assert rendered[:3] == lines
    assert "only meaningful with --tpcc-wait" in rendered[3]


def test_summary_from_thread_stats_merges_threads():
    def thread(tid: int, n: int, us: float) -> str:
        b = int(math.log(us) / tpcc_model.LOG_BASE)
        t = {"count": n, "sum_us": n * us, "min_us": us, "max_us": us, "hist": {str(b): n}, "rollbacks": 1,
             "err": {"count": 1, "sum_us": 500.0, "min_us": 500.0, "max_us": 500.0, "hist": {"624": 1},
                     "codes": {"1213": 1}}}
        return tpcc_model.STATS_PREFIX + json.dumps({"thread": tid, "seconds": 60.0, "types": {"NEW_ORDER": t}})

    stats = tpcc_model.parse_output("noise\n" + thread(0, 100, 2000.0) + "\n" + thread(1, 300, 4000.0) + "\n")
    s = tpcc_model.summarize(stats, tpcc_model.TpccOptions(warehouses=1, threads=2, duration=60))
    no, err = s.row("NEW_ORDER"), s.row("NEW_ORDER_ERR")
    assert no is not None
    assert err is not None
    assert (no.count, err.count, s.rollbacks, dict(s.errors_by_code)) == (400, 2, 2, {"1213": 2})
    assert s.tpmc == pytest.approx(400.0)
    assert no.latency.avg == pytest.approx(3.5)
    assert no.latency.p50 == pytest.approx(4.0, rel=0.011)  # 300 of 400 samples at 4 ms
    assert no.latency.p90 == pytest.approx(4.0, rel=0.011)
    assert no.latency.min == pytest.approx(2.0)
    assert no.latency.max == pytest.approx(4.0)


def test_rounds_merge_counts_histograms_and_seconds():
    line = tpcc_model.STATS_PREFIX + json.dumps({"thread": 0, "seconds": 30.0, "types": {"NEW_ORDER": {
        "count": 10, "sum_us": 10000.0, "min_us": 500.0, "max_us": 2000.0, "hist": {"700": 10}, "rollbacks": 0,
        "err": {"count": 0, "hist": {}, "codes": {}}}}})
    one = tpcc_model.parse_output(line)
    both = tpcc_model.merge_stats([one, tpcc_model.parse_output(line)])
    assert both.seconds == 60.0
    assert both.types["NEW_ORDER"].ok.count == 20
    assert both.types["NEW_ORDER"].ok.hist == {700: 20}
    assert tpcc_model.summarize(both, tpcc_model.TpccOptions()).tpmc == pytest.approx(20.0)


def test_parse_output_without_stats_is_an_error():
    with pytest.raises(InfrastructureError, match="no TPCC_STATS"):
        tpcc_model.parse_output("FATAL: something\n")


@needs_tools
def test_nurand_matches_the_exact_distribution(tmp_path: Path):
    """NURand(255, 0, 999) from the Lua code against its exact distribution,
    enumerated over every (random(0,A), random(x,y)) pair; plus range checks
    of the 1023 and 8191 variants and the C-delta rule of clause 2.1.6.1."""
    script = tmp_path / "nurand.lua"
    script.write_text(f"""
package.path = "{tpcc.LUA_DIR}/?.lua;" .. package.path
local T = require("tpcc_common")
function cmd_nurand()
   local h = {{}}
   for _ = 1, 200000 do
      local v = T.nurand(255, 0, 999, T.C_LAST_RUN)
      h[v] = (h[v] or 0) + 1
   end
   local lo, hi, lo2, hi2 = 1e9, -1, 1e9, -1
   for _ = 1, 100000 do
      local a = T.nurand(1023, 1, 3000, T.C_ID)
      local b = T.nurand(8191, 1, 100000, T.C_OL_I_ID)
      lo, hi = math.min(lo, a), math.max(hi, a)
      lo2, hi2 = math.min(lo2, b), math.max(hi2, b)
   end
   local out = {{}}
   for v, n in pairs(h) do out[#out + 1] = v .. ":" .. n end
   print("HIST " .. table.concat(out, ","))
   print(string.format("RANGE %d %d %d %d", lo, hi, lo2, hi2))
   print(string.format("C %d %d %s", T.C_LAST_LOAD, T.C_LAST_RUN, T.lastname(371)))
end
sysbench.cmdline.commands = {{ nurand = {{ cmd_nurand }} }}
""")
    out = subprocess.run(["sysbench", str(script), "nurand"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    def grab(pattern: str) -> tuple[str, ...]:
        m = re.search(pattern, out)
        assert m, f"{pattern!r} not in sysbench output: {out[-500:]}"
        return m.groups()

    hist = {int(k): int(v) for k, v in (p.split(":") for p in grab(r"HIST (\S+)")[0].split(","))}
    lo, hi, lo2, hi2 = map(int, grab(r"RANGE (\d+) (\d+) (\d+) (\d+)"))
    c_load, c_run, name = grab(r"C (\d+) (\d+) (\w+)")
    assert min(hist) >= 0
    assert max(hist) <= 999
    assert 1 <= lo
    assert hi <= 3000
    assert 1 <= lo2
    assert hi2 <= 100000
    delta = abs(int(c_run) - int(c_load))
    assert 65 <= delta <= 119
    assert delta not in (96, 112)
    assert name == "PRICALLYOUGHT"  # 3-7-1 (clause 4.3.2.3)

    exact = collections.Counter((((a | b) + int(c_run)) % 1000) for a in range(256) for b in range(1000))
    total_exact, total = sum(exact.values()), sum(hist.values())
    tvd = 0.5 * sum(abs(exact[v] / total_exact - hist.get(v, 0) / total) for v in range(1000))
    assert tvd < 0.05, f"NURand(255) is {tvd:.3f} (total variation) away from its exact distribution"
    # and it is not uniform: the 10 % most likely values carry far more than 10 %
    top = sorted(exact.values(), reverse=True)[:100]
    assert sum(top) / total_exact > 0.15


def test_time_scale_parser():
    assert tpcc.parse_time_scale("0.01") == 0.01
    for bad in ("0", "-1", "x", "11"):
        with pytest.raises(ConfigError):
            tpcc.parse_time_scale(bad)


# --------------------------------------------------------- real database

@pytest.mark.lab
@pytest.mark.slow
def test_load_one_warehouse_in_under_a_minute(loaded: tpcc.LoadResult, mariadb: SqlTarget):
    # 11 s on an idle 2-core machine; the bound only catches a hung or serial load
    # (other engineers load this machine: never assert wall-clock speed tightly)
    assert loaded.seconds < 300, f"1-warehouse load took {loaded.seconds:.1f}s"
    counts = dict(_sql(mariadb, """SELECT 'item', COUNT(*) FROM item UNION ALL SELECT 'stock', COUNT(*) FROM stock
        UNION ALL SELECT 'customer', COUNT(*) FROM customer UNION ALL SELECT 'orders', COUNT(*) FROM orders
        UNION ALL SELECT 'new_order', COUNT(*) FROM new_order UNION ALL SELECT 'history', COUNT(*) FROM history
        UNION ALL SELECT 'district', COUNT(*) FROM district"""))
    assert counts == {"item": 100000, "stock": 100000, "customer": 30000, "orders": 30000, "new_order": 9000,
                      "history": 30000, "district": 10}
    # every last name of the 1000 exists in each district (Payment by name never misses)
    (n,) = _sql(mariadb, "SELECT COUNT(DISTINCT c_last) FROM customer WHERE c_d_id = 7")[0]
    assert n == 1000


@pytest.mark.lab
@pytest.mark.slow
def test_run_is_consistent_and_reports_go_tpc_numbers(closed_run: WorkloadResult, mariadb: SqlTarget):
    r = closed_run
    checks = r.extra["checks"]
    assert [c["name"] for c in checks] == [c.name for c in CHECKS]
    assert all(c["passed"] for c in checks), tpcc.failed_checks(r)
    per_type = r.extra["per_type"]
    assert set(tpcc_model.TYPES) <= set(per_type)
    no = per_type["NEW_ORDER"]
    assert r.extra["tpmc"] == pytest.approx(no["count"] / r.rounds[0].seconds * 60, rel=1e-6)
    assert r.extra["tpm_total"] > r.extra["tpmc"] > 0
    assert no["p50"] <= no["p90"] <= no["p95"] <= no["p99"] <= no["p999"] <= no["max"]
    assert r.latency_ms.p95 == no["p95"]
    # about 1 % of New-Orders roll back on purpose, and they are not errors
    assert 0.002 < r.extra["rollbacks"] / no["count"] < 0.03
    lines = r.extra["summary_text"].splitlines()
    summary_re = re.compile(r"^\[Summary\] [A-Z_]+ - Takes\(s\): [\d.]+, Count: \d+, TPM: [\d.]+, Sum\(ms\): [\d.]+, "
                            r"Avg\(ms\): [\d.]+, 50th\(ms\): [\d.]+, 90th\(ms\): [\d.]+, 95th\(ms\): [\d.]+, "
                            r"99th\(ms\): [\d.]+, 99\.9th\(ms\): [\d.]+, Max\(ms\): [\d.]+$")
    assert all(summary_re.match(x) for x in lines if x.startswith("[Summary]"))
    assert any(re.match(r"^tpmC: [\d.]+, tpmTotal: [\d.]+, efficiency: [\d.]+%$", x) for x in lines)
    assert r.rounds[0].qps > r.rounds[0].tps > 0
    assert r.client["cpu_s"] > 0
    assert r.client["cpu_ms_per_txn"] > 0
    # the password never leaves the engine
    assert mariadb.password not in json.dumps({"client": r.client, "extra": r.extra, "reports": r.reports})
    assert "--config-file=" in r.client["command"]
    assert not Path(r.client["command"].split("=", 2)[1].split()[0]).exists()


@pytest.mark.lab
@pytest.mark.slow
def test_mix_is_within_two_cards_per_terminal_of_45_43_4_4_4(closed_run: WorkloadResult):
    """The deck is a cycle of 100 cards, and any stretch of it is within two
    cards per type of the exact mix: 4 terminals and 500 transactions are
    within 1.6 points of it, whatever card each terminal started at."""
    mix, per_type = closed_run.extra["mix"], closed_run.extra["per_type"]
    assert closed_run.extra["mix_target"] == tpcc_model.MIX_PCT
    attempts = sum(v["count"] for v in per_type.values())
    assert attempts >= 500, "run too short to judge the mix"
    for name, want in tpcc_model.MIX_PCT.items():
        n = sum(per_type.get(k, {}).get("count", 0) for k in (name, name + "_ERR"))
        assert abs(n - attempts * want / 100) <= 2 * closed_run.concurrency, f"{name}: {n} of {attempts}"
        assert abs(mix[name] - want) <= 200 * closed_run.concurrency / attempts, f"{name}: {mix[name]:.2f}%"


@pytest.mark.lab
@pytest.mark.slow
def test_many_terminals_of_a_few_transactions_each_still_run_the_mix(mariadb: SqlTarget,
                                                                      loaded: tpcc.LoadResult):
    """Each terminal starts at a random card of the deck, every card as likely:
    256 terminals of a few transactions each run about 12 % Delivery,
    Order-Status and Stock-Level together. (The earlier start, random credit
    scaled by each type's weight, ran none of them in a terminal's first 6
    cards and 3 % over its first 8: at 250 terminals and 5 transactions
    each, a round of the lab ran none.)"""
    r = tpcc.run(mariadb, tpcc_model.TpccOptions(warehouses=1, threads=256, duration=1))
    per_type = r.extra["per_type"]
    attempts = sum(v["count"] for v in per_type.values())
    assert attempts <= 8 * 256, f"{attempts} transactions: too many per terminal to show where terminals start"
    rare = {t: sum(per_type.get(k, {}).get("count", 0) for k in (t, t + "_ERR"))
            for t in ("ORDER_STATUS", "DELIVERY", "STOCK_LEVEL")}
    assert all(n > 0 for n in rare.values()), rare
    assert sum(rare.values()) >= 0.06 * attempts, f"{rare} of {attempts}"  # 12 % expected


@pytest.mark.lab
@pytest.mark.slow
@pytest.mark.filterwarnings("always:TPC-C checks took:UserWarning")  # shown in the summary, not an error
def test_checks_name_exactly_the_corrupted_rows(closed_run: WorkloadResult, mariadb: SqlTarget):
    def failed() -> dict[str, list[dict]]:
        results = run_checks(mariadb)
        slow = sorted(results, key=lambda r: -r.seconds)[:3]
        # 1-2 s on a quiet machine; a CI run once took 40 s per pass
        if sum(r.seconds for r in results) > float(os.environ.get("WANBENCH_TPCC_CHECKS_WARN", "20")):
            warnings.warn("TPC-C checks took " + ", ".join(f"{r.name} {r.seconds:.1f} s" for r in slow), stacklevel=2)
        return {r.name: [dict(zip(r.columns, row, strict=False)) for row in r.offending]
                for r in results if not r.passed}

    assert failed() == {}
    _sql(mariadb, "UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1")
    try:
        bad = failed()
    finally:
        _sql(mariadb, "UPDATE warehouse SET w_ytd = w_ytd - 1 WHERE w_id = 1")
    assert set(bad) == {"w_ytd_eq_sum_d_ytd", "w_ytd_eq_sum_h_amount"}
    assert [row["w_id"] for row in bad["w_ytd_eq_sum_d_ytd"]] == [1]

    _sql(mariadb, "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 1 AND d_id = 3")
    try:
        bad = failed()
    finally:
        _sql(mariadb, "UPDATE district SET d_next_o_id = d_next_o_id - 1 WHERE d_w_id = 1 AND d_id = 3")
    assert set(bad) == {"next_o_id_eq_max_o_id"}
    assert [(row["d_w_id"], row["d_id"]) for row in bad["next_o_id_eq_max_o_id"]] == [(1, 3)]

    # a lost order line: the order and district totals both notice
    (o_id, n) = _sql(mariadb, "SELECT ol_o_id, MAX(ol_number) FROM order_line WHERE ol_w_id=1 AND ol_d_id=5 "
                              "AND ol_o_id=100 GROUP BY ol_o_id")[0]
    saved = _sql(mariadb, f"SELECT * FROM order_line WHERE ol_w_id=1 AND ol_d_id=5 AND ol_o_id={o_id} "
                          f"AND ol_number={n}")[0]
    _sql(mariadb, f"DELETE FROM order_line WHERE ol_w_id=1 AND ol_d_id=5 AND ol_o_id={o_id} AND ol_number={n}")
    try:
        bad = failed()
    finally:
        cnx = mariadb.connect(who="test")
        try:
            cnx.cursor().execute("INSERT INTO order_line VALUES (" + ",".join(["%s"] * len(saved)) + ")", saved)
        finally:
            cnx.close()
    assert set(bad) == {"sum_ol_cnt_eq_order_lines", "ol_cnt_eq_lines_per_order"}
    assert [(row["d_id"], row["o_id"]) for row in bad["ol_cnt_eq_lines_per_order"]] == [(5, 100)]
    assert failed() == {}


@pytest.mark.lab
@pytest.mark.slow
def test_errors_are_counted_by_code_and_the_run_goes_on(closed_run: WorkloadResult, mariadb: SqlTarget):
    """Payment writes history; without that table every Payment fails with
    1146 and rolls back, the other four types go on."""
    _sql(mariadb, "RENAME TABLE history TO history_away")
    try:
        r = tpcc.run(mariadb, tpcc_model.TpccOptions(warehouses=1, threads=2, duration=3), checks=False)
    finally:
        _sql(mariadb, "RENAME TABLE history_away TO history")
    per_type = r.extra["per_type"]
    assert "PAYMENT" not in per_type
    assert per_type["PAYMENT_ERR"]["count"] > 10
    assert dict(r.errors_by_code) == {"1146": per_type["PAYMENT_ERR"]["count"]}
    assert per_type["NEW_ORDER"]["count"] > 10
    assert "[Summary] PAYMENT_ERR - " in r.extra["summary_text"]
    assert all(c.passed for c in run_checks(mariadb)), "a failed Payment left partial writes behind"


@pytest.mark.lab
@pytest.mark.slow
def test_wait_gives_the_theoretical_efficiency(closed_run: WorkloadResult, mariadb: SqlTarget):
    """40 terminals on 1 warehouse with keying/think times scaled x0.05: the
    spec's 12.86 tpmC per warehouse (scaled), times 4 terminals per 10, less
    what the response times take: about 400 %. Scaled times stay long next to
    a loaded machine's sleep overshoot."""
    opts = tpcc_model.TpccOptions(warehouses=1, threads=40, duration=20, wait=True, time_scale=0.05)
    start = time.monotonic()
    r = tpcc.run(mariadb, opts, checks=False)
    # the run alone: the consistency checks after it take what this machine's disk makes them take
    assert time.monotonic() - start < 20 + 15, "waits overran the run length"
    checks = run_checks(mariadb)
    eff, waits = r.extra["efficiency"], r.extra["waits"]
    spec, expected = r.extra["efficiency_expected"], r.extra["efficiency_expected_measured_waits"]
    assert expected <= spec <= 400
    assert eff < 400 * 1.1
    # on a loaded machine the client wakes up late: the theoretical value
    # counts the sleeps as they really were (reported as oversleep_ms_avg)
    assert abs(eff - expected) / expected < 0.15, (
        f"efficiency {eff:.1f}% vs theoretical {expected:.1f}% (spec waits: {spec:.1f}%; the client overslept "
        f"{waits['oversleep_ms_avg']} ms per wait)")
    assert "efficiency = tpmC / (12.86 x 1 warehouses)" in r.extra["summary_text"]
    assert waits["count"] > 2 * sum(v["count"] for v in r.extra["per_type"].values()) - 2 * opts.threads
    assert [c.name for c in checks if not c.passed] == []


def test_tests_tpcc_collects_warehouses_by_threads_and_documents_options():
    """``test_tpcc[w1-t4]``: the cells and options, without running anything."""
    root = Path(__file__).resolve().parent.parent
    base = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]
    out = subprocess.run([*base, "--collect-only", "-q", "tests/tpcc", "--warehouses", "1,2", "--threads", "4,8"],
                         cwd=root, capture_output=True, text=True, timeout=120, check=False)
    ids = [line.split("::")[-1] for line in out.stdout.splitlines() if "::test_tpcc[" in line]
    assert ids == ["test_tpcc[w1-t4]", "test_tpcc[w1-t8]", "test_tpcc[w2-t4]", "test_tpcc[w2-t8]"], out.stdout[-2000:]
    bad = subprocess.run([*base, "--collect-only", "-q", "tests/tpcc", "--tpcc-time-scale", "0"],
                         cwd=root, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode != 0
    assert "--tpcc-time-scale: '0'" in bad.stderr
    helptext = subprocess.run([*base, "--help"], cwd=root, capture_output=True, text=True, timeout=120,
                              check=False).stdout
    for opt in ("--warehouses=LIST", "--tpcc-wait", "--tpcc-time-scale=FACTOR"):
        assert opt in helptext
