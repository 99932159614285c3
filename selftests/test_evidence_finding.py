"""The evidence arithmetic and the finding's rules, on constructed inputs
(the lab and Prometheus self-tests check the same code on real ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanbench.errors import ConfigError
from wanbench.evidence.deltas import Snapshot, evidence_from_windows
from wanbench.evidence.finding import Point, find_knee, finding_for, findings
from wanbench.evidence.readers import ProcInfo, open_connections, parse_proc_tcp, parse_ss, read_cpu_ticks
from wanbench.fixtures.evidence import evidence_line
from wanbench.pytest_plugin.options import parse_cpu_limits
from wanbench.report.evidence import cpu_qps_chart, evidence_html
from wanbench.results import CellResult, Latency, Round, WorkloadResult

SS = """0      0      127.0.0.1:23401 127.0.0.1:52598
\t bbr wscale:10,10 rto:204 bytes_sent:900 bytes_acked:800 bytes_received:5000 segs_out:20
0      0      127.0.0.1:40000 127.0.0.1:23401
\t bbr wscale:10,10 rto:204 bytes_sent:1 bytes_acked:1 bytes_received:1 segs_out:1
0      0      127.0.0.1:23401 127.0.0.1:52600
\t bbr bytes_acked:200 bytes_received:1000
"""


#: /proc/net/tcp as the kernel writes it: a listener on 23526 (0x5BE6), an open connection to
#: it, one whose client closed (CLOSE_WAIT, the server has not), one the server closed (FIN_WAIT2),
#: and the client side of the open one (local port 0xC350, not the server's)
PROC_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:5BE6 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:5BE6 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1
   2: 0100007F:5BE6 0100007F:C351 08 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
   3: 0100007F:5BE6 0100007F:C352 05 00000000:00000000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1
   4: 0100007F:C350 0100007F:5BE6 01 00000000:00000000 00:00000000 00000000     0        0 5 1 0 20 4 30 10 -1
"""


def test_proc_tcp_counts_the_connections_a_server_has_not_closed() -> None:
    assert parse_proc_tcp(PROC_TCP, {"primary": 23526, "replica": 23527}) == {"primary": 2, "replica": 0}


def test_open_connections_reads_the_kernel_as_connections_open_and_close() -> None:
    """Real loopback sockets: what the end of an evidence window waits on."""
    import socket

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    accepted = [server.accept()[0] for _ in clients]
    try:
        assert open_connections({"primary": port}) == {"primary": 3}
        accepted[0].close()  # the server ends one (a COM_QUIT answered): no longer counted
        clients[1].close()  # a client leaves and the server has not noticed: still the server's
        assert open_connections({"primary": port}) == {"primary": 2}
        accepted[1].close()
        assert open_connections({"primary": port}) == {"primary": 1}
    finally:
        for s in (*clients, *accepted, server):
            s.close()


def test_parse_ss_keeps_sockets_on_link_ports_only() -> None:
    got = parse_ss(SS, {23401: "client_proxy"})
    assert got == {("client_proxy", 23401, "127.0.0.1", 52598): (5000, 800),
                   ("client_proxy", 23401, "127.0.0.1", 52600): (1000, 200)}


def test_cpu_ticks_exclude_idle_and_iowait() -> None:
    text = "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 10 0 10 70 10 0 0 0 0 0\ncpu1 50 0 0 50 0 0 0 0 0 0\n"
    assert read_cpu_ticks(text) == {0: (20, 100), 1: (50, 100)}


def _snap(t: float, primary_cpu: float, questions: float, ticks: int, quota: float | None = None,
          periods: int = 0, throttled: int = 0) -> Snapshot:
    return Snapshot(t, {"primary": ProcInfo(primary_cpu, (1,), quota, periods, throttled),
                        "haproxy": ProcInfo(primary_cpu / 10, (0,))},
                    {0: (ticks // 4, ticks), 1: (ticks, ticks)},
                    {"primary": {"Questions": questions, "Rpl_semi_sync_master_tx_wait_time": questions * 20_000,
                                 "Rpl_semi_sync_master_tx_waits": questions}},
                    {"replica_primary": (int(questions), int(questions) * 2)})


def test_window_deltas() -> None:
    a, b = _snap(10.0, 100.0, 1000, 1000, 0.5, 100, 10), _snap(12.0, 100.9, 5000, 1200, 0.5, 120, 28)
    ev = evidence_from_windows([(a, b)], {"server": (1,), "client": (0,)},
                               client={"busy_cores": 0.3, "cores": 1}, qps=1990.0)
    assert ev["window_s"] == 2.0
    primary = ev["components"]["primary"]
    assert primary["cpu_cores"] == pytest.approx(0.45)
    assert primary["cpu_pct"] == pytest.approx(90.0)  # of its 0.5-core quota, not of CPU 1
    assert primary["throttled_pct"] == pytest.approx(90.0)
    assert ev["components"]["client"]["cpu_pct"] == pytest.approx(30.0)
    assert ev["cpu_sets"]["server"]["busy_pct"] == pytest.approx(100.0)
    assert ev["cpu_sets"]["client"]["members"] == ["haproxy", "client"]
    assert ev["qps"] == {"primary": 2000.0, "client": 1990.0}
    assert ev["latency_ms"]["primary.semi_sync_tx_wait"] == pytest.approx(20.0)
    assert ev["links"]["replica_primary"] == {"in_bytes_per_s": 2000, "out_bytes_per_s": 4000}


def _ev(primary_pct: float, *, server_busy: float = 50.0, ours: float = 50.0) -> dict:
    return {"components": {"primary": {"cpu_cores": primary_pct / 100, "cpu_pct": primary_pct, "cpus": [1]},
                           "replica": {"cpu_cores": 0.1, "cpu_pct": 10.0, "cpus": [1]},
                           "client": {"cpu_cores": 0.3, "cpu_pct": 30.0, "cpus": []}},
            "cpu_sets": {"server": {"cpus": [1], "busy_pct": server_busy, "ours_pct": ours,
                                    "members": ["primary", "replica"]}}}


def test_knee_needs_flat_qps_and_rising_latency() -> None:
    pts = [Point(8, 1000, 8, 8), Point(16, 1900, 9, 8), Point(32, 2000, 16, 16), Point(64, 2050, 31, 31)]
    assert find_knee(pts) == 16
    # flat QPS with falling latency is noise, not a knee
    assert find_knee([Point(8, 1000, 8, 8), Point(16, 1050, 7, 7)]) is None


def test_a_component_held_at_its_cpu_limit_is_the_knee_whatever_noise_adds_to_qps() -> None:
    """Seen in CI under the other lane's load: a primary under a 0.1-core quota, throttled at every
    concurrency, "grew" 12 % from 4 to 16 threads in 3-second rounds, and no knee was found."""
    def limited(conc: int, qps: float, p95: float) -> Point:
        ev = _ev(10)
        ev["components"]["primary"].update(cpu_limit_cores=0.1, throttled_pct=80.0)
        return Point(conc, qps, p95, p95, ev)

    pts = [limited(1, 150, 6), limited(4, 180, 25), limited(16, 200, 90)]
    assert find_knee(pts) == 1
    f = finding_for("oltp_point_select (direct)", pts)
    assert f is not None
    assert f.bottleneck == "primary", f.sentence
    assert "stays at its CPU limit from here on" in f.sentence
    # without the limit evidence, the same numbers are still growth
    assert find_knee([Point(1, 150, 6, 6), Point(4, 180, 25, 25), Point(16, 200, 90, 90)]) is None


def test_saturated_primary_is_the_sql_tier() -> None:
    pts = [Point(8, 1000, 8, 8, _ev(60)), Point(16, 1900, 9, 8, _ev(90)), Point(32, 2000, 16, 16, _ev(97)),
           Point(64, 2050, 31, 31, _ev(97))]
    f = finding_for("oltp_read_write (proxy)", pts)
    assert f is not None
    assert f.knee == 16
    assert f.bottleneck == "primary"
    assert f.sentence.startswith("oltp_read_write (proxy): QPS stops growing at 16 threads (1900 -> 2000 QPS at 32")
    assert "the SQL tier is the bottleneck" in f.sentence


def test_busy_machine_is_a_caveat_not_a_bottleneck() -> None:
    pts = [Point(2, 80, 25, 25, _ev(5, server_busy=98, ours=15)), Point(8, 310, 26, 25.8, _ev(15, server_busy=97,
                                                                                               ours=25))]
    f = finding_for("rtt replica_write 20ms", pts, added_rtt_ms=20)
    assert f is not None
    assert f.bottleneck == "latency"
    assert "8 threads / 25.8 ms average latency = 310 QPS (measured 310)" in f.sentence
    assert "8 / 20 ms = 400 QPS" in f.sentence
    assert "other processes on this machine may have disturbed" in f.sentence


def test_no_evidence_says_unknown() -> None:
    f = finding_for("x (direct)", [Point(8, 100, 1, 1), Point(16, 101, 2, 2)])
    assert f is not None
    assert f.bottleneck is None
    assert "unknown" in f.sentence


def _cell(c: int, qps: float, ev: dict) -> CellResult:
    lat = Latency(avg=c / qps * 1000, p95=c / qps * 1200)
    w = WorkloadResult("oltp_read_write", c, (Round(10, int(qps * 10), qps, latency_ms=lat),), lat)
    return CellResult(f"test_oltp[oltp_read_write-direct-t{c}]", "sysbench", "oltp_read_write",
                      {"kind": "none", "value": 0, "label": "direct"}, c, w, path="direct",
                      extra={"evidence": ev})


def test_results_json_cells_give_findings_lines_and_report_parts() -> None:
    cells = [_cell(8, 1000, _ev(60)), _cell(16, 1900, _ev(90)), _cell(32, 2000, _ev(97))]
    found = findings(c.to_json() for c in cells)
    assert [f.group for f in found] == ["oltp_read_write (direct)"]
    assert found[0].bottleneck == "primary"
    line = evidence_line(cells[2].to_json())
    assert line is not None
    assert line.startswith("test_oltp[oltp_read_write-direct-t32]: CPU primary 97%")
    html = evidence_html(cells[2])
    assert "<table>" in html
    assert "primary" in html
    svg = cpu_qps_chart(cells)
    assert svg.startswith("<svg")
    assert "primary CPU %" in svg
    assert "QPS" in svg


@pytest.mark.parametrize("text", ["primary", "nosuch=1", "primary=x", "primary=0"])
def test_cpu_limit_option_rejects(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_cpu_limits(text)


def test_cpu_limit_option_parses() -> None:
    assert parse_cpu_limits("primary=0.25, replica=1") == {"primary": 0.25, "replica": 1.0}


class _CountingProbe:
    """A probe that says which kind of snapshot was asked for, and when."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.t = 0.0

    def snapshot(self, full: bool = True) -> Snapshot:
        self.t += 1.0
        self.calls.append("full" if full else "cheap")
        status = {"primary": {"Questions": 100.0 * self.t}} if full else {}
        return Snapshot(self.t, {"primary": ProcInfo(self.t, (0,))}, {0: (int(self.t), int(2 * self.t))}, status)

    def cpu_sets(self) -> dict[str, tuple[int, ...]]:
        return {"machine": (0,)}


def test_window_start_reads_only_proc_the_expensive_counters_come_before_the_load() -> None:
    """A probe round can last 0.4 s: a 13 ms SQL-and-ss snapshot at its start
    costs the measurement a few percent, so it is taken before the load starts."""
    from wanbench.evidence.collect import EvidenceCollector

    probe = _CountingProbe()
    col = EvidenceCollector(probe)
    col.prepare()  # before sysbench starts: t=1, Questions=100
    col.begin()  # at "Threads started!": t=2, /proc only
    col.end()  # after sysbench ended: t=3, Questions=300
    assert probe.calls == ["full", "cheap", "full"]
    ev = col.take()
    assert ev is not None
    assert ev["window_s"] == 1.0  # from the window's true start, not from prepare
    assert ev["qps"]["primary"] == 200.0  # server counters from prepare's snapshot
    col.begin()  # no prepare (a caller that does not know it): a full snapshot, as before
    assert probe.calls[-1] == "full"


class _ClosingProbe(_CountingProbe):
    """The servers see the load's connections close a few polls after it ended."""

    def __init__(self, counts: list[dict[str, int]]) -> None:
        super().__init__()
        self.counts = counts

    def clients(self) -> dict[str, int]:
        self.calls.append("clients")
        return self.counts.pop(0) if len(self.counts) > 1 else self.counts[0]


def test_the_window_ends_after_the_servers_saw_the_load_disconnect() -> None:
    """A thread's teardown (its COM_QUIT, counted by Questions) crosses the
    faulted link: the end snapshot waits until the servers have seen every
    connection of the load close, so no run counts it by luck."""
    from wanbench.evidence.collect import EvidenceCollector

    probe = _ClosingProbe([{"primary": 2, "replica": 1},  # before the load: heartbeat, replication user
                           {"primary": 102, "replica": 1}, {"primary": 40, "replica": 1},
                           {"primary": 2, "replica": 1}])
    col = EvidenceCollector(probe)
    col.prepare()
    col.begin()
    col.end()
    assert probe.calls == ["full", "clients", "cheap", "clients", "clients", "clients", "full"]
    assert col.take() is not None


def test_connections_that_never_close_cost_the_window_a_note_not_the_measurement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wanbench.evidence import collect

    monkeypatch.setattr(collect, "SETTLE_S", 0.1)
    probe = _ClosingProbe([{"primary": 2}, {"primary": 5}])
    col = collect.EvidenceCollector(probe)
    col.prepare()
    col.begin()
    col.end()
    ev = col.take()
    assert ev is not None
    assert probe.calls[-1] == "full"
    assert any("still open" in n for n in ev.get("notes", [])), ev.get("notes")


def test_a_window_opens_only_when_an_earlier_loads_connections_are_gone() -> None:
    """A warm-up (not measured) has just exited but the servers are still
    closing its 1000 connections, each with a COM_QUIT that Questions counts:
    the next window's first snapshot waits until they are back at rest, so
    none of that teardown is counted in it."""
    from wanbench.evidence.collect import EvidenceCollector

    probe = _ClosingProbe([{"primary": 1, "replica": 0},  # at rest: the replication's connection
                           {"primary": 1001, "replica": 0}, {"primary": 350, "replica": 0},  # the warm-up's, closing
                           {"primary": 1, "replica": 0}])
    col = EvidenceCollector(probe)
    col.at_rest()
    col.prepare()
    assert probe.calls == ["clients", "clients", "clients", "clients", "full", "clients"]
    col.begin()
    col.end()
    ev = col.take()
    assert ev is not None
    assert "notes" not in ev


def test_a_teardown_longer_than_the_wait_costs_the_window_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    from wanbench.evidence import collect

    monkeypatch.setattr(collect, "SETTLE_S", 0.1)
    probe = _ClosingProbe([{"primary": 1}, *({"primary": n} for n in range(1000, 2, -1))])
    col = collect.EvidenceCollector(probe)
    col.at_rest()
    col.prepare()
    col.begin()
    col.end()
    ev = col.take()
    assert ev is not None
    assert any("still closing connections" in n for n in ev.get("notes", [])), ev.get("notes")


def test_a_connection_that_stands_beside_the_load_becomes_the_rest() -> None:
    """A standing connection opened after the session began (a heartbeat's
    writers) is not a load closing: once its count has stood still for
    QUIET_S it is the rest, with no note and no wait in later windows."""
    import time

    from wanbench.evidence import collect

    probe = _ClosingProbe([{"primary": 1}, {"primary": 4}])
    col = collect.EvidenceCollector(probe)
    col.at_rest()
    t0 = time.monotonic()
    col.prepare()
    assert collect.QUIET_S <= time.monotonic() - t0 < collect.SETTLE_S
    col.begin()
    col.end()
    ev = col.take()
    assert ev is not None
    assert "notes" not in ev
    probe.calls.clear()
    col.prepare()  # 4 is the rest now: no wait
    assert probe.calls == ["clients", "full", "clients"]
    col.begin()
    col.end()
    assert "notes" not in (col.take() or {})


class _PollingProbe(_CountingProbe):
    def poll(self) -> None:
        pass


def test_windows_opened_and_closed_from_two_threads_never_break_the_poller() -> None:
    """A load's reader thread opens the window (and starts the poller) while
    its reaper thread may be closing it: starting and stopping the poller from
    two threads at once raises nothing and leaves no poller running."""
    import sys
    import threading

    from wanbench.evidence.collect import EvidenceCollector

    col = EvidenceCollector(_PollingProbe())
    errors: list[BaseException] = []

    def hammer(action) -> None:  # noqa: ANN001 - a bound method
        try:
            for _ in range(2000):
                action()
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion
            errors.append(exc)

    workers = [threading.Thread(target=hammer, args=(a,)) for a in (col._start_poller, col._stop_poller,
                                                                    col._start_poller, col._stop_poller)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
    finally:
        sys.setswitchinterval(switch)
    col._stop_poller()
    assert errors == []
    assert not any(t.name == "wanbench-evidence-poll" and t.is_alive() for t in threading.enumerate())


def test_a_missed_window_is_an_evidence_error_not_an_empty_window() -> None:
    from wanbench.evidence.collect import EvidenceCollector

    col = EvidenceCollector(_CountingProbe())
    col.prepare()
    col.missed("too late")
    col.end()  # no window was opened: nothing to close
    assert col.take() == {"error": "too late"}
    assert col.take() is None  # said once
    col.prepare()
    col.begin()
    col.end()
    col.missed("round 2 too late")
    ev = col.take()
    assert ev is not None
    assert ev["windows"] == 1
    assert ev["notes"] == ["round 2 too late"]


def test_the_tidb_profiles_evidence_source_and_its_collector() -> None:
    """The cluster's Prometheus (``--prometheus`` over the topology's) and every tidb-server's status
    port, decided when it is built; without either the session is told so and collects nothing;
    ``close`` stops only what the source started. (Opening a source with status ports reads them:
    the seed's cluster is not reachable from here, so its source is only looked at.)"""
    from wanbench.evidence.prometheus import PromClient
    from wanbench.evidence.windows import TidbPrometheus, TidbWindows
    from wanbench.profiles.capabilities import EVIDENCE
    from wanbench.profiles.tidb.cluster import TidbCluster
    from wanbench.profiles.tidb.topology import load_cluster

    topo = load_cluster(Path(__file__).parent / "data" / "tiup_display_seed000.txt")
    for given, url in ((None, "http://172.24.40.20:9090"), ("http://10.0.0.9:9090/", "http://10.0.0.9:9090")):
        source = TidbCluster(topo, tag="ev", dry_run=True, prometheus=given).offers.get(EVIDENCE)
        assert isinstance(source, TidbPrometheus)
        assert source.url == url
        assert source.status_urls == tuple(f"http://{c.host}:10080" for c in topo.by_role("tidb"))
        assert len(source.status_urls) == 6
        windows = TidbPrometheus(source.url).open(print)
        assert isinstance(windows, TidbWindows)
        assert windows.client is not None
        assert windows.client.url == url
        assert windows.probe is None
    said: list[str] = []
    assert TidbPrometheus(None, why_none="no Prometheus here").open(said.append) is None
    assert said == ["no Prometheus here"]
    stopped: list[int] = []
    started = TidbWindows(PromClient("http://127.0.0.1:9"), stop=lambda: stopped.append(1))
    started.close()
    started.close()
    assert stopped == [1]


class _TidbStatus:
    """A tidb-server's status port on loopback, answering ``/metrics`` from a recorded scrape (the
    2025 unistore build) whose point-read counter grows by ``step`` on every scrape."""

    def __init__(self, step: int = 10) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        text = (Path(__file__).parent / "data" / "tidb-metrics" / "e4e814fdc0af-unistore-census-lines.txt").read_text()
        scrapes = [0]
        get = 'tidb_tikvclient_txn_cmd_duration_seconds_count{scope="general",type="get"} 118'
        assert get in text

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                scrapes[0] += 1
                body = text.replace(get, get.replace(" 118", f" {118 + step * scrapes[0]}")).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_tidb_cluster_without_prometheus_still_gets_the_census_counters() -> None:
    """No Prometheus, but the tidb-servers' status ports answer: the evidence is the census counters
    read at each window's edges (exact totals), with no Prometheus view; a status port that does not
    answer when the session opens leaves the census out, saying which."""
    from wanbench.evidence.windows import TidbPrometheus, TidbWindows

    status = _TidbStatus(step=10)
    try:
        said: list[str] = []
        windows = TidbPrometheus(None, why_none="no Prometheus here", status_urls=[status.url]).open(said.append)
        assert isinstance(windows, TidbWindows)
        assert windows.client is None
        assert windows.probe is not None
        assert said == [f"evidence: census counters read from every tidb-server's /metrics at each window's edge "
                        f"({status.url})",
                        "evidence: no Prometheus to ask: the census counters alone (no CPU per component, QPS per "
                        "tier, latency or NIC bytes)"]
        for _ in range(2):
            windows.begin()
            windows.end()
        ev = windows.take(qps=100.0)
        assert ev is not None
        assert ev["windows"] == 2
        assert ev["counters"]["tidb"]["kv_requests.Get"] == 20.0  # 10 reads between each window's edges
        assert ev["counters_source"] == f"tidb-server /metrics at each window's edges: {status.url}"
        assert ev["source"] == "tidb-server /metrics (no Prometheus: census counters only)"
        assert ev["qps"] == {"client": 100.0}
        assert "components" not in ev
    finally:
        status.close()
    said = []
    assert TidbPrometheus(None, why_none="no Prometheus here", status_urls=[status.url]).open(said.append) is None
    assert len(said) == 2
    assert said[0].startswith("evidence: census counters not read at each window's edge, since every "
                              "tidb-server's status port must answer from this machine")
    assert status.url in said[0]
    assert said[0].endswith(": no census counters")
    assert said[1] == "no Prometheus here"
