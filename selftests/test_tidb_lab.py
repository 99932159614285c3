"""The TiDB lab (``--lab-flavour tidb``): TiDB's real SQL tier (tidb-server
built by ``scripts/setup --tidb``, storage in-process) behind HAProxy, as a
user runs the suite. Round trips per operation across the faulted link and
KV requests per statement by type come out of a live tidb-server; a release
that adds a KV read per statement fails in one run; replica scenarios are
refused with the reason; nothing is left behind. The census and TPC-C runs
share one lab, left running between their invocations as a user's lab is
(each run still has its own process, connections and baseline store); they
come last, so the kill -9 test's own lab never runs beside it."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import ROOT, free_port_base, load_results, needs, pid_alive, recorded_pids, run_suite
from wanbench.census_locks import lock_why_not
from wanbench.profiles.lab.tidb import TIDB_BINARY, TidbLab

pytestmark = [pytest.mark.lab, pytest.mark.slow]
TIDB_COMMIT = "e4e814fdc0af"


def _need_tidb() -> None:
    needs("sysbench", "haproxy")
    if not TIDB_BINARY.exists() and shutil.which("tidb-server") is None:
        if os.environ.get("CI") == "true":  # CI builds it (.ci/run): missing there is a failure, not a skip
            pytest.fail(f"{TIDB_BINARY} is missing: .ci/run must run scripts/setup --tidb")
        pytest.skip("tidb-server is not built (scripts/setup --tidb)")


@pytest.fixture(autouse=True)
def _tidb() -> None:
    _need_tidb()


@pytest.fixture(scope="module")
def kept_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TidbLab]:
    """One TiDB lab for the module's census and TPC-C invocations, started here (the suite finds it
    running, uses it and leaves it running); stopped by PID at the end, leaving nothing of tidb-server's."""
    _need_tidb()
    lab = TidbLab(tmp_path_factory.mktemp("tidblab") / "lab", free_port_base(25100, 25300, span=14))
    with lab:
        yield lab
    assert not lab.run_dir.exists()
    # tidb-server's own files (socket, DDL and spill directories, slow log) stayed in the lab's directory
    port = lab.port_base + 6
    assert not Path(f"/tmp/tidb-{port}.sock").exists()
    assert not Path(f"/tmp/tidb/tmp_ddl-{port}").exists()
    assert not (ROOT / "tidb-slow.log").exists()


def _cells(path: Path) -> dict[str, dict[str, Any]]:
    return {c["test_id"].split("[", 1)[1].rstrip("]"): c for c in load_results(path)}


def _metric(cell: dict[str, Any], name: str) -> float:
    return float(cell["census"]["metrics"][name]["value"])


def _on(lab: TidbLab, tmp_path: Path) -> list[str]:
    """The suite on the kept lab, with a baseline store of the test's own."""
    return ["tests/rtt", "--lab-flavour", "tidb", "--lab-dir", str(lab.run_dir), "--lab-port-base", str(lab.port_base),
            "-p", "no:randomly", "--baseline-dir", str(tmp_path / "store")]


def _common(lab: TidbLab, tmp_path: Path) -> list[str]:
    return [*_on(lab, tmp_path), "--rtt", "0,50ms", "--concurrency", "10", "--rounds", "2", "--round-cap", "2s"]


def test_replica_scenarios_are_refused_with_the_reason(tmp_path: Path) -> None:
    res = run_suite("tests/rtt", "--lab-flavour", "tidb", "--scenario", "replica_write", "--collect-only",
                    timeout=120)
    assert res.returncode != 0
    assert "scenario replica_write is not available on the tidb-lab profile" in res.stderr + res.stdout
    assert "in-process (unistore)" in res.stderr + res.stdout


def test_kill_9_of_a_tidb_lab_run_leaves_nothing(tmp_path: Path) -> None:
    """The TiDB lab's processes (tidb-server, HAProxy, Toxiproxy, Prometheus) and faults go with a killed runner."""
    import signal
    import subprocess
    import time

    from selftests.labutil import as_at_a_terminal, suite_cmd
    from wanbench.faults.toxiproxy import ToxiproxyClient
    from wanbench.wait import wait_for

    base = free_port_base(25100, 25300, span=14)
    run_dir = tmp_path / "lab"
    proc = subprocess.Popen(  # noqa: S603
        suite_cmd("tests/rtt", "--lab-flavour", "tidb", "--lab-dir", str(run_dir), "--lab-port-base", str(base),
                  "--scenario", "tidb", "--rtt", "100ms", "--concurrency", "4", "--rounds", "20",
                  "--round-cap", "5s", "-p", "no:randomly"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=as_at_a_terminal,  # noqa: PLW1509 - a signal disposition, nothing that takes a lock
    )
    client = ToxiproxyClient(f"http://127.0.0.1:{base}")
    try:
        wait_for(lambda: proc.poll() is None and bool(client.our_toxics()), what="the fault to be in place",
                 timeout=300, transient=(Exception,))
        pids = recorded_pids(run_dir)
        assert len(pids) >= 5, pids  # toxiproxy, tidb, haproxy, prometheus, node exporter, watchdog, guard
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        t0 = time.monotonic()
        wait_for(lambda: not any(pid_alive(p) for p in pids), what="the TiDB lab's processes to end", timeout=60)
        wait_for(lambda: not run_dir.exists(), what="the TiDB lab's run directory to go", timeout=30)
        assert time.monotonic() - t0 < 60
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)


def test_the_census_of_a_live_tidb_counts_round_trips_and_kv_requests(kept_lab: TidbLab, tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    res = run_suite(*_common(kept_lab, tmp_path), "--scenario", "proxy,tidb_write", "--results-json", str(out),
                    "--baseline-save", timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "storage in-process: unistore" in res.stdout
    assert "the TiDB lab was already running: using it and leaving it running" in res.stdout
    assert "KV requests/op (TiDB)" in res.stdout
    cells = _cells(out)
    read, write = cells["proxy-50ms-c10"], cells["tidb_write-50ms-c10"]
    # through the faulted proxy a statement crosses two faulted links; a write to TiDB one
    assert 1.8 <= _metric(read, "round_trips") <= 2.2, read["census"]
    assert 0.9 <= _metric(write, "round_trips") <= 1.1, write["census"]
    # counted by tidb-server itself, at each window's edges: one KV Get per point select; one
    # two-phase commit (a prewrite and a commit, one region) per single-row insert
    assert read["census"]["kv_source"] == "txn"  # unistore: the transaction layer, no RPCs
    assert _metric(read, "work.tidb.kv_requests.Get") == pytest.approx(1.0, abs=0.02)
    assert 1.0 <= _metric(read, "work.tidb.statements") <= 1.1  # and each connection's own set-up
    assert _metric(write, "work.tidb.kv_requests.Prewrite") == pytest.approx(1.0, abs=0.02)
    assert _metric(write, "work.tidb.kv_requests.Commit") == pytest.approx(1.0, abs=0.02)
    assert _metric(write, "work.tidb.commits") == pytest.approx(1.0, abs=0.02)
    assert read["extra"]["evidence"]["counters_source"].startswith("tidb-server /metrics")
    ctx = json.loads(out.read_text())["run"]
    assert ctx["profile"] == "tidb-lab"
    assert ctx["versions"]["tidb_commit"] == TIDB_COMMIT
    assert "unistore" in ctx["storage"]

    # a release that reads one more row per statement: one more KV Get, caught in one run
    worse = tmp_path / "worse.json"
    res = run_suite(*_common(kept_lab, tmp_path), "--scenario", "proxy", "--probe-extra-reads", "1",
                    "--results-json", str(worse), timeout=900)
    assert res.returncode == 1, res.stdout[-4000:]
    cell = _cells(worse)["proxy-50ms-c10"]
    assert cell["verdict"]["status"] == "regression", cell["verdict"]
    fired = {c["metric"] for c in cell["verdict"]["checks"] if c["status"] == "regression"}
    assert "work.tidb.kv_requests.Get" in fired, fired
    assert _metric(cell, "work.tidb.kv_requests.Get") == pytest.approx(2.0, abs=0.05)
    assert kept_lab.run_dir.exists()  # the suite left the lab it found running as it was


def test_tpcc_on_a_live_tidb_counts_its_lock_retries_and_judges_its_kv_requests_by_them(
        kept_lab: TidbLab, tmp_path: Path) -> None:
    """TPC-C's terminals on one warehouse meet each other's locks (Payment and New-Order update the
    district row): tidb-server retries those statements, re-sending their reads and PessimisticLock
    requests. The census reads the retries from tidb-server and holds those KV requests back where
    more than 5 % of the locking statements were retried; Prewrite and Commit (once per
    transaction) are never held back for it (2026-11-29: 12 % at 10 terminals, 272 % at 100 with 50 ms)."""
    out = tmp_path / "results.json"
    res = run_suite(*_on(kept_lab, tmp_path), "--scenario", "tidb_tpcc", "--rtt", "0", "--concurrency", "8",
                    "--rounds", "1", "--duration", "4s", "--warehouses", "1", "--results-json", str(out), timeout=900)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    census = _cells(out)["tidb_tpcc-0ms-c8"]["census"]
    seen = census["lock_retries"]["tidb"]
    assert seen["locking_statements"] > 0, seen  # every TPC-C transaction but two read-only ones locks
    assert seen["share"] == pytest.approx(seen["retries"] / seen["locking_statements"], abs=1e-4)
    lock = census["metrics"]["work.tidb.kv_requests.PessimisticLock"]
    assert lock["value"] > 1.0, lock
    lock_reason = "pessimistic retries over"
    mix_reason = "the window did not run the workload's mix"  # a rule checked before the lock retries
    if seen["share"] > 0.05:
        assert lock.get("count") is False, (seen, lock)
        assert lock["why"].startswith(mix_reason) or lock_reason in lock["why"], (seen, lock)
        assert lock_reason in (lock_why_not(seen) or "")
    elif lock.get("count") is False:  # held back, but then for another reason (the mix, TiDB's own work)
        assert lock_reason not in lock["why"], (seen, lock)
    for typ in ("Prewrite", "Commit"):
        assert lock_reason not in census["metrics"][f"work.tidb.kv_requests.{typ}"].get("why", ""), census
