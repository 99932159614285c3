"""The TiDB profile's evidence queries against a real Prometheus.

``selftests/data/prometheus/tidb_seed000.om`` holds TiDB/TiKV/PD/node
samples of seed 000's cluster (real metric names and labels, constructed
values at known rates: see its generator). ``promtool`` backfills them into a
TSDB block, Debian's ``prometheus`` serves that block on loopback, and the
evidence code asks it over HTTP the questions the Grafana panels ask.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.labutil import free_port_base
from wanbench.evidence.finding import Point, finding_for
from wanbench.evidence.prometheus import PromClient, find_prometheus, host_links, tidb_evidence, tidb_queries
from wanbench.evidence.windows import TidbWindows
from wanbench.procs import spawn
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.wait import wait_for

DATA = Path(__file__).parent / "data"
SAMPLES = DATA / "prometheus" / "tidb_seed000.om"
START = 1763948400  # the samples' first timestamp (see the generator)
END = START + 300

pytestmark = pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                                reason="Debian's prometheus package is not installed (run scripts/setup)")


@pytest.fixture(scope="module")
def prometheus() -> Iterator[PromClient]:
    work = Path(tempfile.mkdtemp(prefix="wanbench-evidence-prom-"))
    handle = None
    try:
        data = work / "data"
        res = subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(SAMPLES), str(data)],  # noqa: S607
                             capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0, f"promtool backfill failed: {res.stderr[-800:]}"
        port = free_port_base(29090, 29099, span=1)
        cfg = work / "prometheus.yml"
        cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        handle = spawn("prometheus", ["prometheus", f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                                      f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=100y"],
                       log=work / "prometheus.log", pid_file=work / "prometheus.pid")
        client = PromClient(f"http://127.0.0.1:{port}", timeout=5)

        def serving() -> bool:
            # ready, and the backfilled block is loaded (Prometheus opens blocks at start-up)
            return client.ready() and bool(client.query("count(process_cpu_seconds_total)", END))

        wait_for(serving, what="Prometheus serving the backfilled TiDB samples", timeout=60,
                 transient=(Exception,), hint=f"log: {(work / 'prometheus.log').read_text()[-600:]}")
        yield client
    finally:
        if handle is not None:
            handle.stop(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


def test_seed000_topology_names_its_prometheus() -> None:
    topology = load_cluster(DATA / "tiup_display_seed000.txt")
    assert find_prometheus(topology) == "http://172.24.40.20:9090"
    assert find_prometheus(topology, "http://10.0.0.9:9090/") == "http://10.0.0.9:9090"


def test_queries_are_valid_promql(prometheus: PromClient) -> None:
    for name, expr in tidb_queries(240).items():
        prometheus.query(expr, END)  # raises with Prometheus' own parse error otherwise
        assert "[240s]" in expr or name == "host_cores"


def test_tidb_evidence_from_real_prometheus(prometheus: PromClient) -> None:
    ev = tidb_evidence(prometheus, END - 240, END)
    comps = ev["components"]
    assert len(comps) == 6 + 6 + 6 + 2
    tikv = comps["tikv@10.160.152.24:20180"]
    assert tikv["cpu_cores"] == pytest.approx(7.6, rel=0.01)
    assert tikv["host_cores"] == 8
    assert tikv["cpu_pct"] == pytest.approx(95.0, abs=1.0)
    assert comps["tidb@10.160.152.21:10080"]["cpu_pct"] == pytest.approx(25.0, abs=1.0)
    # QPS per tier: TiDB OK queries (6 x 1200/s), TiKV gRPC without kv_gc (2 x 4200/s)
    assert ev["qps"]["tidb"] == pytest.approx(7200, rel=0.01)
    assert ev["qps"]["tikv_grpc"] == pytest.approx(8400, rel=0.01)
    assert ev["qps"]["tidb_statements_by_type"]["Update"] == pytest.approx(1200, rel=0.01)
    lat = ev["latency_ms"]
    assert lat["tidb.query_p99"] == pytest.approx(32.0, rel=0.02)
    assert lat["tidb.query_p95_by_instance"]["172.24.40.19:10080"] == pytest.approx(16.0, rel=0.02)
    assert lat["tikv.grpc_p99_by_type"]["kv_get"] == pytest.approx(4.0, rel=0.02)
    assert lat["tikv.grpc_p99_by_type"]["kv_commit"] == pytest.approx(16.0, rel=0.02)
    assert "kv_gc" not in lat["tikv.grpc_p99_by_type"]
    assert lat["tikv.raft_commit_log_p99"] == pytest.approx(8.0, rel=0.02)
    assert lat["pd.tso_wait_p99"] == pytest.approx(2.0, rel=0.02)
    pools = ev["tikv_thread_cpu_cores"]["172.24.40.20:20180"]
    assert pools["grpc-server"] == pytest.approx(1.2, rel=0.01)
    assert pools["unified-read-po"] == pytest.approx(2.4, rel=0.01)
    # NIC bytes per host, loopback excluded
    assert ev["links"]["host 10.160.152.24"]["in_bytes_per_s"] == pytest.approx(50e6, rel=0.01)
    assert ev["links"]["host 172.24.40.17"]["out_bytes_per_s"] == pytest.approx(25e6, rel=0.01)


def test_finding_names_tikv_from_prometheus_evidence(prometheus: PromClient) -> None:
    ev = tidb_evidence(prometheus, END - 240, END)
    f = finding_for("tpcc (proxy)", [Point(64, 7200.0, 16.0, 8.0, ev)])
    assert f is not None
    assert f.bottleneck == "tikv@10.160.152.24:20180", f.sentence
    assert "the storage tier (TiKV) is the bottleneck" in f.sentence
    assert "95 %" in f.sentence


def test_tidb_collector_asks_for_its_windows(prometheus: PromClient) -> None:
    windows = TidbWindows(prometheus)
    windows._edges = [[END - 240.0, END - 120.0], [END - 110.0, END]]  # two rounds' wall-clock edges
    ev = windows.take(qps=7100.0)
    assert ev is not None
    assert ev["window_s"] == pytest.approx(240.0)
    assert ev["qps"]["client"] == 7100.0
    assert ev["qps"]["tidb"] == pytest.approx(7200, rel=0.01)
    assert windows.take() is None  # taken: the next cell starts empty


def test_unreachable_prometheus_is_an_error_note_not_a_failure() -> None:
    port = free_port_base(29090, 29099, span=1)  # nothing listens there
    windows = TidbWindows(PromClient(f"http://127.0.0.1:{port}", timeout=2))
    windows.begin()
    windows.end()
    ev = windows.take()
    assert ev is not None
    assert "not reachable" in ev["error"]


def test_a_loopback_host_has_no_nic_bytes_of_the_cluster() -> None:
    """The TiDB lab's tidb-server is 127.0.0.1: its traffic is all on ``lo``, which the query
    leaves out, so the host's other NICs carried 0.0 bytes per query of it (TPC-H on the TiDB lab,
    2026-11-27). Such a host is left out instead of reported as a link that carried nothing."""
    links = host_links({"127.0.0.1": 900.0, "10.0.0.5": 5e6, "localhost": 1.0, "::1": 2.0}, {"10.0.0.5": 1e6})
    assert links == {"host 10.0.0.5": {"in_bytes_per_s": 5000000, "out_bytes_per_s": 1000000}}
