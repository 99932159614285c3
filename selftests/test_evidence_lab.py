"""The evidence and its finding on the real lab, with bottlenecks known by
construction: a thread sweep against a primary held to a tenth of a CPU by a
cgroup quota must name the SQL tier, and a run under added RTT, where nothing
is busy, must say the limit is latency-bound concurrency."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import free_port_base, run_suite

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture
def scratch() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="wanbench-evidence-lab-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _suite(scratch: Path, *args: str) -> tuple[dict[str, Any], str]:
    base = free_port_base(29000, 29089)
    out = scratch / "results.json"
    res = run_suite(*args, "--lab-port-base", str(base), "--lab-dir", str(scratch / "lab"),
                    "--results-json", str(out), timeout=400)
    text = res.stdout + res.stderr
    assert out.is_file(), f"no results written (exit {res.returncode}):\n{text[-3000:]}"
    assert not (scratch / "lab").exists(), "the suite left its lab running"
    return json.loads(out.read_text()), text


def _finding(doc: dict[str, Any], group: str) -> dict[str, Any]:
    found = {f["group"]: f for f in doc.get("findings", ())}
    assert group in found, f"no finding for {group!r}; findings: {list(found)}"
    return found[group]


def test_cpu_limited_primary_is_named_the_bottleneck(scratch: Path) -> None:
    doc, text = _suite(scratch, "tests/sysbench", "-k", "direct", "--workloads", "oltp_point_select",
                       "--threads", "1,4,16", "--duration", "3s", "--warmup", "1s", "--tables", "1",
                       "--table-size", "1000", "--lab-cpu-limit", "primary=0.1")
    cells = doc["results"]
    assert [c["concurrency"] for c in cells] == [1, 4, 16]
    for c in cells:
        primary = c["extra"]["evidence"]["components"]["primary"]
        assert primary["cpu_limit_cores"] == pytest.approx(0.1)
        # the quota holds: the primary never used (much) more than a tenth of a core
        assert primary["cpu_cores"] <= 0.13, primary
    f = _finding(doc, "oltp_point_select (direct)")
    assert f["bottleneck"] == "primary", f["sentence"]
    assert f["knee"] in (1, 4), f["sentence"]
    assert "the SQL tier is the bottleneck" in f["sentence"]
    assert "limit 0.1 cores" in f["sentence"]
    # the same sentence and a per-cell evidence line reach the terminal
    assert f["sentence"] in text
    assert "wanbench evidence: server side" in text


def test_added_rtt_is_latency_bound(scratch: Path) -> None:
    doc, text = _suite(scratch, "tests/rtt", "--scenario", "replica_write", "--rtt", "20ms",
                       "--concurrency", "2,8", "--queries", "160", "--rounds", "1")
    cells = doc["results"]
    assert {c["concurrency"] for c in cells} == {2, 8}
    for c in cells:
        ev = c["extra"]["evidence"]
        # every commit waits for the replica's acknowledgement across the delayed link
        assert ev["latency_ms"]["primary.semi_sync_tx_wait"] >= 15.0, ev["latency_ms"]
        assert ev["links"]["replica_primary"]["in_bytes_per_s"] > 0, ev["links"]
    f = _finding(doc, "rtt replica_write 20ms")
    assert f["bottleneck"] == "latency", f["sentence"]
    assert "latency-bound concurrency" in f["sentence"]
    assert "8 / 20 ms = 400 QPS" in f["sentence"]
    assert f["sentence"] in text


def test_tpcc_cells_carry_the_evidence_of_each_round(scratch: Path) -> None:
    doc, text = _suite(scratch, "tests/tpcc", "--warehouses", "1", "--threads", "2,4", "--duration", "2s",
                       "--rounds", "2")
    cells = doc["results"]
    assert [c["concurrency"] for c in cells] == [2, 4]
    for c in cells:
        ev = c["extra"]["evidence"]
        assert ev["windows"] == 2, ev  # one measured window per round; the load and the checks are outside
        assert 1.5 <= ev["window_s"] <= 8, ev  # two rounds of about 2 s each
        assert ev["components"]["primary"]["cpu_cores"] > 0, ev["components"]
    assert "tpcc" in " ".join(f["group"] for f in doc.get("findings", ())), doc.get("findings")
    assert "test_tpcc[w1-t2]: CPU" in text


@pytest.mark.skipif(not shutil.which("prometheus"), reason="Debian's prometheus package is not installed")
def test_lab_prometheus_scrapes_the_lab_and_stops_with_it(scratch: Path) -> None:
    import time

    from wanbench.evidence.prometheus import LabPrometheus, PromClient
    from wanbench.procs import ProcessHandle
    from wanbench.profiles.lab import running
    from wanbench.profiles.lab.servers import Lab
    from wanbench.wait import wait_for

    lab = Lab(scratch / "lab", free_port_base(29000, 29089))
    with lab:
        prom = running.start_prometheus(lab)
        handles = [ProcessHandle.load(lab.run_dir / f"{s}.pid") for s in LabPrometheus.SERVICES]
        assert all(h is not None and h.alive() for h in handles)
        client = PromClient(prom.url)

        def scraped() -> bool:
            now = time.time()
            jobs = {m["job"] for m, v in client.query("mysql_up", now) if v == 1}
            return jobs == {"mysqld_primary", "mysqld_replica"} and bool(client.query("node_cpu_seconds_total", now))

        wait_for(scraped, what="the lab's Prometheus to scrape both MariaDB servers and the node", timeout=60)
        start = time.time()
        with lab.admin("primary") as conn:
            cur = conn.cursor()
            while time.time() - start < 4:  # load spread over several 1 s scrapes
                cur.execute("SELECT 1")
                cur.fetchall()
        loaded = time.time()

        def scraped_after_load() -> bool:
            # 1 s scrapes: a sample taken after the load, and a window of a few scrapes
            last = client.query("max(timestamp(mysql_global_status_questions))", time.time())
            return bool(last) and last[0][1] > loaded and time.time() - start > 3

        wait_for(scraped_after_load, what="a scrape after the load", timeout=30)
        ev = prom.evidence(start, time.time())
        # the exporters' own queries (~10/s) hit both servers; the load only the primary
        assert ev["questions"]["mysqld_primary"] > ev["questions"]["mysqld_replica"] + 50, ev
        assert set(ev["node_cpu_busy"]) >= {"0"}, ev
    assert not any(h is not None and h.alive() for h in handles), "the lab's Prometheus outlived the lab"
