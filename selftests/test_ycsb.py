"""YCSB on a real MariaDB: every core workload in a short CI configuration,
the scrambled-zipfian access frequencies of a real run against YCSB's
distribution, the correctness check catching a corruption, and YCSB's key
names from Lua and Python agreeing. ``-m "not lab"`` runs only the pure ones.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.labutil import PrivateMariadb
from selftests.test_sysbench_engine import PASSWORD
from wanbench.errors import ConfigError
from wanbench.sql import SqlTarget
from wanbench.workloads import tpcc_model, ycsb, ycsb_checks, ycsb_keys, ycsb_stats

PORT = int(os.environ.get("WANBENCH_YCSB_TEST_PORT", "23620"))
ROOT = Path(__file__).resolve().parent.parent
RECORDS = 1000


def test_key_names_match_ycsb_and_lua() -> None:
    # YCSB's first key of every load (keynum 0) is user6284781860667377211
    assert ycsb_keys.key_name(0) == "user6284781860667377211"
    nums = [0, 1, 2, 999, 123456789, 10_000_000_000]
    out = subprocess.run(["sysbench", str(ycsb.SCRIPT), "keyname"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "WB_YCSB_KEYNUMS": " ".join(map(str, nums))}, check=True).stdout
    lua = {int(p[1]): p[2] for p in (ln.split() for ln in out.splitlines() if ln.startswith("YCSB_KEY "))}
    assert lua == {n: ycsb_keys.key_name(n) for n in nums}


def test_zipfian_theory_is_ycsb_head() -> None:
    probs = ycsb_keys.zipfian_item_probabilities(1000)
    assert probs[0] == pytest.approx(1 / 26.46902820178302)
    assert probs[1] == pytest.approx(0.5 ** 0.99 / 26.46902820178302)
    # Gray's formula gives item j about 1/(j+1)^0.99/zetan
    assert probs[500] == pytest.approx(1 / 501 ** 0.99 / 26.46902820178302, rel=0.05)


def test_summary_is_go_ycsb_shape() -> None:
    b = tpcc_model.Bucketed()
    b.merge({"count": 3, "sum_us": 600.0, "min_us": 100, "max_us": 300, "hist": {"463": 1, "532": 1, "573": 2}})
    row = ycsb_stats.op_row("READ", b, 10.0)
    assert row.render().startswith("READ   - Takes(s): 10.0, Count: 3, OPS: 0.3, Avg(us): 200, Min(us): 100, "
                                   "Max(us): 300, 50th(us): ")
    assert row.render().endswith("99.99th(us): 300")


def test_per_operation_numbers_enter_the_gate(tmp_path: Path) -> None:
    from wanbench.gate.baseline import samples_of
    from wanbench.gate.budget_file import load_budgets
    from wanbench.gate.budgets import CellKey
    from wanbench.gate.verdict import metric_name
    from wanbench.results import CellResult, Latency, WorkloadResult

    rounds = [{"READ": {"ops": 1000.0, "p99_ms": 4.0}, "UPDATE": {"ops": 990.0, "p99_ms": 9.0}},
              {"READ": {"ops": 1010.0, "p99_ms": 4.2}, "UPDATE": {"ops": 1000.0, "p99_ms": 9.5}}]
    result = WorkloadResult(workload="ycsb_workloada", concurrency=8, rounds=(), latency_ms=Latency(),
                            extra={"per_op_rounds": rounds})
    cell = CellResult(test_id="t", family="ycsb", scenario="workloada", level={"value": 0, "label": "-"},
                      concurrency=8, workload=result)
    samples = samples_of(cell)
    assert samples["ops.READ"] == [1000.0, 1010.0]
    assert samples["latency_ms.p99.UPDATE"] == [9.0, 9.5]
    assert metric_name("ops.READ") == "READ OPS"
    assert metric_name("latency_ms.p99.SCAN") == "SCAN p99 latency"
    key = CellKey("ycsb", "workloada", "-", 8, "direct", "ycsb_workloada")
    budgets = load_budgets(Path("wanbench/budgets/lab.yaml"), profile="lab")
    checks = {(c.kind, c.metric): c.limit for c in budgets.checks_for(key)}
    assert checks[("baseline", "ops.READ")] == pytest.approx(0.05)
    assert checks[("baseline", "latency_ms.p99.READ_MODIFY_WRITE")] == pytest.approx(0.10)
    bad = tmp_path / "b.yaml"
    bad.write_text("version: 1\nprofile: lab\nrules:\n  - family: ycsb\n    baseline:\n      ops.DELETE: 5%\n")
    with pytest.raises(ConfigError, match="unknown metric .ops.DELETE."):
        load_budgets(bad)


def test_options_are_validated() -> None:
    with pytest.raises(ConfigError, match="unknown YCSB workload 'g'"):
        ycsb.parse_workloads("a,g")
    assert ycsb.parse_workloads("a,workloadf") == ["workloada", "workloadf"]


@pytest.fixture(scope="module")
def conn() -> Iterator[SqlTarget]:
    with PrivateMariadb(PORT, user="wb", password=PASSWORD, prefix="wb-ycsb-test-"):
        yield SqlTarget("127.0.0.1", PORT, "wb", PASSWORD, ycsb_checks.DATABASE)


@pytest.fixture(scope="module")
def loaded(conn: SqlTarget) -> ycsb.LoadResult:
    res = ycsb.load(conn, ycsb.YcsbOptions(records=RECORDS, fields=4, field_length=20), threads=2)
    assert res.seconds > 0
    assert res.records == RECORDS
    return res


@pytest.mark.lab
@pytest.mark.parametrize("workload", list(ycsb.WORKLOADS))
def test_each_workload_runs_and_checks(conn: SqlTarget, loaded: ycsb.LoadResult, workload: str) -> None:
    opts = ycsb.YcsbOptions(workload=workload, threads=4, records=RECORDS, fields=4, field_length=20,
                            operations=3000)
    result = ycsb.run(conn, opts, load_result=loaded)
    extra = result.extra
    core = ycsb.WORKLOADS[workload]
    for op in core.mix:
        assert extra["per_op"][op]["count"] > 0, (op, extra["summary_text"])
        assert extra["per_op"][op]["ops"] > 0
    counts = {op: extra["per_op"][op]["count"] for op in core.mix}
    if workload == "workloadf":  # RMW's read is in READ too, as YCSB measures it
        counts["READ"] -= counts["READ_MODIFY_WRITE"]
    done = sum(counts.values())
    assert done == 3000, extra["summary_text"]
    for op, share in core.mix.items():  # the mix is YCSB's proportions (binomial noise allowed)
        assert abs(counts[op] / done - share) < 0.04, (op, extra["summary_text"])
    assert not ycsb_checks.failed_checks(result), extra["checks"]
    assert [c["name"] for c in extra["checks"]] == ["record_count", "field_length", "acknowledged_inserts"]
    if "INSERT" in core.mix:
        assert extra["acknowledged_inserts"] == extra["per_op"]["INSERT"]["count"] > 0
    if workload == "workloadf":  # RMW's read and update are measured on their own too, as YCSB does
        assert extra["per_op"]["UPDATE"]["count"] == extra["per_op"]["READ_MODIFY_WRITE"]["count"]
    assert "READ" in extra["summary_text"] or "SCAN" in extra["summary_text"]
    assert ycsb.table_state(conn, opts) == "", "inserts were not removed after the run"


@pytest.mark.lab
def test_zipfian_frequencies_of_a_real_run(conn: SqlTarget, loaded: ycsb.LoadResult) -> None:
    ops = 60000
    opts = ycsb.YcsbOptions(workload="workloadc", threads=4, records=RECORDS, fields=4, field_length=20,
                            operations=ops, key_stats=True)
    result = ycsb.run(conn, opts)
    counts = {int(k): n for k, n in result.extra["key_counts"].items()}
    assert sum(counts.values()) == ops
    theory = ycsb_keys.scrambled_key_shares(RECORDS, opts.key_space)
    top = sorted(theory, key=lambda k: -theory[k])[:10]
    for k in top:  # each hot key's share within 4 binomial standard deviations of YCSB's
        p = theory[k]
        sd = (p * (1 - p) / ops) ** 0.5
        assert abs(counts.get(k, 0) / ops - p) < 4 * sd + 1e-4, (k, counts.get(k, 0) / ops, p)
    hot_share = sum(counts.get(k, 0) for k in top) / ops
    assert hot_share > 10 * 10 / RECORDS  # skewed: 10 keys of 1000 get far more than 1 %
    observed_top = sorted(counts, key=lambda k: -counts[k])[:10]
    assert len(set(observed_top) & set(top)) >= 8
    # not contiguous: the hot keys are spread over the key numbers and over
    # the ordered key space (YCSB_KEY order: where TiDB cuts its Regions)
    assert max(observed_top) - min(observed_top) > RECORDS // 2
    ordered = sorted(ycsb_keys.key_name(k) for k in range(RECORDS))
    ranks = sorted(ordered.index(ycsb_keys.key_name(k)) for k in observed_top)
    assert ranks[-1] - ranks[0] > RECORDS // 2
    assert sum(1 for a, b in zip(ranks, ranks[1:], strict=False) if b - a == 1) < 3


@pytest.mark.lab
def test_correctness_check_catches_corruption(conn: SqlTarget, loaded: ycsb.LoadResult) -> None:
    opts = ycsb.YcsbOptions(workload="workloadd", threads=2, records=RECORDS, fields=4, field_length=20,
                            operations=600)
    r = ycsb.run_round(conn, opts)
    try:
        assert r.stats.acked_inserts
        victim = ycsb_keys.key_name(r.stats.acked_inserts[0])
        table = ycsb_checks.TABLE
        ycsb_checks.sql(conn, [(f"DELETE FROM {table} WHERE YCSB_KEY = %s", (victim,)),
                               (f"UPDATE {table} SET FIELD2 = 'short' WHERE YCSB_KEY = %s", (ycsb_keys.key_name(7),))])
        failed = {c.name: c.message for c in ycsb_checks.run_checks(
            conn, r.stats, records=RECORDS, fields=4, field_length=20) if not c.passed}
        assert set(failed) == {"record_count", "field_length", "acknowledged_inserts"}, failed
        assert victim in failed["acknowledged_inserts"]
        assert ycsb_keys.key_name(7) in failed["field_length"]
    finally:
        ycsb_checks.remove_inserts(conn, r.stats)
        ycsb_checks.sql(conn, [(f"UPDATE {ycsb_checks.TABLE} SET FIELD2 = REPEAT('x', 20) WHERE YCSB_KEY = %s",
                         (ycsb_keys.key_name(7),))])


SUITE_PORT_BASE = int(os.environ.get("WANBENCH_YCSB_SUITE_PORT_BASE", "23650"))


@pytest.mark.lab
@pytest.mark.slow
def test_the_family_on_the_lab(tmp_path: Path) -> None:
    """``pytest tests/ycsb`` as a user runs it, all six workloads in a short
    CI configuration: ids, go-ycsb's lines, the load, the checks, the JSON."""
    results = tmp_path / "results.json"
    cmd = [sys.executable, "-m", "pytest", "tests/ycsb", "-v", "-p", "no:randomly", "--ycsb-workloads", "all",
           "--threads", "4", "--rounds", "1", "--ycsb-records", "500", "--duration", "1",
           "--lab-port-base", str(SUITE_PORT_BASE), "--lab-dir", str(tmp_path / "lab"),
           "--baseline-dir", str(tmp_path / "baselines"), "--results-json", str(results)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for w in ycsb.WORKLOADS:
        assert f"tests/ycsb/test_ycsb.py::test_ycsb[{w}-t4] PASSED" in out, out[-3000:]
    assert "6 passed" in out, out[-3000:]
    assert re.search(r"^READ   - Takes\(s\): [\d.]+, Count: \d+, OPS: [\d.]+, Avg\(us\): \d+, Min\(us\): \d+, "
                     r"Max\(us\): \d+, 50th\(us\): \d+, 90th\(us\): \d+, 95th\(us\): \d+, 99th\(us\): \d+, "
                     r"99.9th\(us\): \d+, 99.99th\(us\): \d+$", out, re.M), out[-3000:]
    for op in ("UPDATE", "INSERT", "SCAN", "READ_MODIFY_WRITE"):
        assert re.search(rf"^{op}\s* - Takes\(s\)", out, re.M), op
    assert "[load] 500 records with" in out
    assert out.count("correctness: 3/3 checks passed") == 6
    doc = json.loads(results.read_text())
    cells = {c["test_id"]: c for c in doc["results"]}
    a = cells["test_ycsb[workloada-t4]"]
    assert a["family"] == "ycsb"
    assert a["workload"] == "ycsb_workloada"
    assert set(a["workload_extra"]["per_op"]) >= {"READ", "UPDATE"}
    assert a["workload_extra"]["per_op"]["READ"]["p99_us"] > 0
    assert doc["tables"]["ycsb"], "no per-operation table in the results"
    # server-side evidence of each cell's measured window (one round: one window), as for sysbench cells;
    # rounds of one second: 600 operations lasted 40 ms, a window a busy CI machine's output reader can miss
    for cell in cells.values():
        ev = cell["extra"]["evidence"]
        assert ev["windows"] == 1, ev
        assert ev["components"]["primary"]["cpu_cores"] > 0, ev["components"]
    assert "wanbench evidence: server side" in out
