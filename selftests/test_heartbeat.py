"""The availability heartbeat: its arithmetic on made-up attempts, and known
answers on the real lab (eight ports of 24010..24099: the first block free).

Known answers: a Toxiproxy outage of a measured length gives that RTO within
the heartbeat's resolution; partitioning the semi-sync replica stalls commits
for the semi-sync timeout (2 s here) and then leaves acknowledged writes
missing on the replica while the partition lasts, none after it heals; a run
without faults gives RTO of about one resolution step and RPO 0.
"""

from __future__ import annotations

import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.faults.outage import Outage, OutageKind, parse_outage_kinds
from wanbench.gate.baseline import samples_of
from wanbench.gate.budget_file import parse_budgets
from wanbench.gate.budgets import CellKey
from wanbench.heartbeat import (
    FAILED,
    OK,
    UNKNOWN,
    Attempt,
    Endpoint,
    Heartbeat,
    HeartbeatConfig,
    LabRowSource,
    RowSource,
)
from wanbench.heartbeat_numbers import rpo, rto, summarize
from wanbench.procs import port_free
from wanbench.profiles.capabilities import OUTAGES, Outages
from wanbench.profiles.lab.cluster import LabCluster
from wanbench.profiles.lab.servers import Lab
from wanbench.report.timeline import heartbeat_timeline
from wanbench.results import CellResult, Latency, WorkloadResult

#: candidate lab port bases; busy ones are skipped: other labs' clients borrow
#: ephemeral ports in this range, and a port in TIME-WAIT cannot be bound
PORT_BASES = range(24010, 24100, 10)


def _att(w: int, k: int, planned: float, latency: float, outcome: str = OK) -> Attempt:
    return Attempt(w, k, planned, planned, planned + latency, outcome)


# -- arithmetic ----------------------------------------------------------------------------------------------


def test_rto_is_the_longest_stretch_between_acknowledged_answers() -> None:
    # one writer at 10 Hz; slots 10..29 fail (2 s), everything else answers in 5 ms
    atts = [_att(0, k, k / 10, 0.005, FAILED if 10 <= k < 30 else OK) for k in range(50)]
    out = rto(atts, slo_s=1.0, start=0.0, end=5.0, removed_at=3.0)
    assert out["rto_s"] == pytest.approx(2.1, abs=1e-6)  # answer of slot 9 (0.905) to slot 30 (3.005)
    assert out["longest_gap"] == [pytest.approx(0.905), pytest.approx(3.005)]
    assert out["recovery_s"] == pytest.approx(0.005)


def test_an_answer_later_than_the_slo_is_not_an_acknowledgement() -> None:
    # a stall: slots 10..29 all answered at 3.0 s; with a 1 s SLO only the last 10 of them count
    atts = [_att(0, k, k / 10, 0.005) for k in range(10)]
    atts += [_att(0, k, k / 10, 3.0 - k / 10) for k in range(10, 30)]
    atts += [_att(0, k, k / 10, 0.005) for k in range(30, 40)]
    assert rto(atts, slo_s=1.0, start=0.0, end=4.0)["rto_s"] == pytest.approx(3.0 - 0.905)
    # measured from the *planned* time: the late slots do not hide the stall
    assert rto(atts, slo_s=0.5, start=0.0, end=4.0)["rto_s"] == pytest.approx(3.0 - 0.905)


def test_rpo_counts_acknowledged_rows_only_and_reports_unknown_apart() -> None:
    atts = [_att(0, k, k / 10, 0.01) for k in range(10)]
    atts += [_att(1, 0, 0.05, 1.0, UNKNOWN), _att(1, 1, 0.15, 1.0, UNKNOWN), _att(1, 2, 0.25, 0.0, FAILED)]
    present = {(0, k) for k in range(10) if k not in (3, 7)} | {(1, 0)}
    out = rpo(atts, present, source="replica")
    assert out["lost"] == 2
    assert out["span_s"] == pytest.approx(0.4)
    assert (out["unknown_committed"], out["unknown_absent"], out["failed_but_present"]) == (1, 1, 0)
    # a read taken at 0.5 s only expects what was acknowledged before it
    assert rpo(atts, present, acked_before=0.5)["lost"] == 1


def test_summary_chart_and_gate_samples() -> None:
    hb = Heartbeat([Endpoint("127.0.0.1", 1, "u", "pw", "db")], HeartbeatConfig(writers=1))
    hb.stopped_at = 5.0
    atts = [_att(0, k, k / 10, 0.005, FAILED if 10 <= k < 30 else OK) for k in range(50)]
    s = summarize(hb, atts, [rpo(atts, {(0, k) for k in range(50)}, source="primary")], fault_window=(1.0, 3.0))
    assert (s["rto_s"], s["lost_writes"], s["counts"][FAILED]) == (pytest.approx(2.1), 0, 20)
    svg = heartbeat_timeline(s, title="x")
    root = ET.fromstring(svg)  # well-formed, self-contained
    assert root.tag.endswith("svg")
    assert "script" not in svg
    assert svg.count("<circle") >= 50
    wl = WorkloadResult("heartbeat", 1, (), Latency())
    cell = CellResult("t", "availability", "heartbeat_replica", {"label": "partition"}, 1, wl,
                      extra={"heartbeat": s})
    assert samples_of(cell)["rto_s"] == [pytest.approx(2.1)]
    assert samples_of(cell.to_json())["recovery_s"] == [s["recovery_s"]]


def test_lost_acknowledged_writes_fail_the_cell_and_say_where() -> None:
    from wanbench.fixtures.availability import assert_no_lost_writes

    atts = [_att(0, k, k / 10, 0.01) for k in range(30)]
    present = {(0, k) for k in range(30)} - {(0, 21), (0, 22)}
    hb = Heartbeat([Endpoint("127.0.0.1", 1, "u", "pw", "db")], HeartbeatConfig(writers=1))
    hb.stopped_at = 3.0
    during = {**rpo(atts, set(), acked_before=1.0, source="replica"), "during_fault": True}
    ok = summarize(hb, atts, [during, rpo(atts, {(0, k) for k in range(30)}, source="primary")])
    assert ok["at_risk_writes"] == 10  # missing on the replica during the fault: reported, not failed
    assert_no_lost_writes(ok, "cell")
    lost = summarize(hb, atts, [rpo(atts, present, source="primary")])
    with pytest.raises(pytest.fail.Exception, match=r"cell: 2 acknowledged heartbeat writes are missing after "
                                                    r"recovery \(primary: 2 rows sent between 2.10 s and 2.20 s\)"):
        assert_no_lost_writes(lost, "cell")


def test_budgets_take_rto_in_seconds_and_outage_levels() -> None:
    text = ("version: 1\nprofile: lab\nrules:\n  - family: availability\n    scenario: heartbeat_replica\n"
            "    level: partition\n    absolute:\n      rto_s: 2500ms\n      recovery_s: 3s\n")
    b = parse_budgets(text, source="b.yaml")
    checks = {c.metric: c.limit for c in b.checks_for(CellKey("availability", "heartbeat_replica", "partition", 3,
                                                                "proxy", "heartbeat"))}
    assert checks == {"rto_s": 2.5, "recovery_s": 3.0}
    with pytest.raises(ConfigError, match="outage 'crash' can never match"):
        parse_budgets(text.replace("level: partition", "level: crash"), source="b.yaml")


def test_outage_kinds_parse() -> None:
    assert parse_outage_kinds("pause, restart") == [OutageKind.PAUSE, OutageKind.RESTART]
    with pytest.raises(ConfigError, match="unknown outage"):
        parse_outage_kinds("partition,crash")


def test_the_schedule_never_waits_for_a_stuck_write() -> None:
    """A server that accepts and never greets: each attempt hangs for the connect timeout, the slots
    behind it are attempted late with latency from their planned time, every slot ends as one attempt."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(64)  # never accepted: the kernel completes the handshake, nothing answers
        ep = Endpoint("127.0.0.1", srv.getsockname()[1], "u", "pw", "db")
        hb = Heartbeat([ep], HeartbeatConfig(writers=1, rate_hz=10, connect_timeout_s=0.5, drain_s=0.6))
        hb.start()
        _measure(hb, 2.0)
        atts = hb.stop()
    assert [a.seq for a in atts] == list(range(len(atts)))
    assert len(atts) == pytest.approx(20, abs=1), "one attempt per planned slot before the stop"
    assert all(a.planned == pytest.approx(a.seq / 10) for a in atts)
    tried = [a for a in atts if a.outcome != "skipped"]
    assert all(a.outcome == FAILED for a in tried), {a.error for a in tried}
    assert tried[3].started >= 1.4, "slot 3 waited for the three stuck attempts before it"
    assert tried[3].latency_s >= 1.5, "latency counts from the planned time"
    assert 1 <= len(atts) - len(tried) <= 16, "what the drain could not reach is skipped, not dropped"


# -- known answers on the lab ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab on the first free block of ports (a block found free can be taken by another lab's
    client before ours binds it: then the next one is tried)."""
    started: Lab | None = None
    for base in PORT_BASES:
        if not all(port_free(base + i) for i in range(8)):
            continue
        candidate = Lab(tmp_path_factory.mktemp("hb") / "lab", base, semisync_timeout_ms=2000)
        try:
            started = candidate.__enter__()
            break
        except InfrastructureError as exc:
            if "are in use" not in str(exc):
                raise
    if started is None:
        pytest.skip(f"no eight free ports at any of {list(PORT_BASES)}")
    try:
        yield started
    finally:
        started.__exit__(None, None, None)


@pytest.fixture(scope="module")
def cluster(lab: Lab) -> Iterator[LabCluster]:
    c = LabCluster(lab, tag="hbtest", grace_s=30)
    try:
        yield c
    finally:
        c.close()


def _heartbeat(cluster: LabCluster, path: str) -> Heartbeat:
    hb = Heartbeat([Endpoint.of(t) for t in cluster.sql_targets(path)], HeartbeatConfig())
    hb.prepare()
    return hb.start()


def _measure(hb: Heartbeat, seconds: float) -> None:
    """Let the heartbeat run (a measurement window, not a wait for a state)."""
    threading.Event().wait(seconds)


def _sources(cluster: LabCluster) -> list[RowSource]:
    """Every copy (``Cluster.copies``): the primary, and the replica once caught up."""
    sources = cluster.copies()
    assert [s.name for s in sources] == ["primary", "replica"]
    return sources


def _outages(cluster: LabCluster) -> Outages:
    outages = cluster.offers.get(OUTAGES)
    assert outages is not None
    return outages


@pytest.mark.lab
@pytest.mark.slow
def test_no_fault_gives_rto_of_one_step_and_no_loss(lab: Lab, cluster: LabCluster) -> None:
    assert lab.state()["semisync_timeout_ms"] == 2000
    hb = _heartbeat(cluster, "proxy")
    _measure(hb, 3.0)
    atts = hb.stop()
    checks = [rpo(atts, hb.read_rows(s), source=s.name) for s in _sources(cluster)]
    s = summarize(hb, atts, checks)
    assert s["counts"][OK] == len(atts) >= 80, s["counts"]
    assert s["rto_s"] < 0.3, f"RTO {s['rto_s']} s without a fault (resolution {hb.config.resolution_s:.3f} s)"
    assert [c["lost"] for c in checks] == [0, 0]


@pytest.mark.lab
@pytest.mark.slow
def test_a_toxiproxy_outage_of_known_length_is_the_rto(lab: Lab, cluster: LabCluster) -> None:
    hb = _heartbeat(cluster, "direct")
    _measure(hb, 1.0)
    lab.toxiproxy.set_enabled("client_primary", False)
    down = time.monotonic()
    try:
        _measure(hb, 2.0)
    finally:
        lab.toxiproxy.set_enabled("client_primary", True)
        outage = time.monotonic() - down
        removed = hb.mark("fault_removed")
    _measure(hb, 1.5)
    atts = hb.stop()
    out = rto(atts, slo_s=hb.config.slo_s, end=hb.stopped_at, removed_at=removed)
    step = hb.config.resolution_s
    # the stretch spans the outage plus at most one slot on each side (and a little scheduling noise)
    assert outage - 0.05 <= out["rto_s"] <= outage + 2 * step + 0.1, (out, outage)
    assert out["recovery_s"] is not None
    assert out["recovery_s"] < 2 * step + 0.1
    assert sum(1 for a in atts if a.outcome == FAILED) >= 40  # refused while the proxy was off
    assert rpo(atts, hb.read_rows(_sources(cluster)[0]))["lost"] == 0


@pytest.mark.lab
@pytest.mark.slow
def test_semi_sync_fallback_stalls_for_the_timeout_then_loses_on_the_replica(lab: Lab,
                                                                             cluster: LabCluster) -> None:
    outages = _outages(cluster)
    hb = _heartbeat(cluster, "proxy")
    _measure(hb, 1.0)
    o = Outage(OutageKind.PARTITION, "replica", 4.0)
    ev = outages.apply(o)
    applied = hb.mark("fault_applied")
    try:
        assert ev.measured["connect_timed_out"] == [lab.port(4)]
        _measure(hb, 3.5)
        status = lab.semi_sync_status()["Rpl_semi_sync_master_status"]
        t = hb.now()
        during = rpo(hb.attempts(), hb.read_rows(LabRowSource("replica", lab, "replica", wait="applied", wait_s=5)),
                     acked_before=t, source="replica")
    finally:
        removed = hb.mark("fault_removed")
        outages.clear(o, ev)
    _measure(hb, 2.0)
    atts = hb.stop()
    s = summarize(hb, atts, [{**during, "during_fault": True}, *[rpo(atts, hb.read_rows(x), source=x.name)
                                                                   for x in _sources(cluster)]],
                  fault_window=(applied, removed))
    assert status == "OFF", "the primary should have fallen back to asynchronous replication"
    assert 1.8 <= s["rto_s"] <= 2.0 + 0.5, f"RTO {s['rto_s']} s, semi-sync timeout 2 s"
    assert during["lost"] > 0, "writes acknowledged after the fallback must be missing on the replica"
    assert s["at_risk_writes"] == during["lost"], s["rpo"]
    assert s["lost_writes"] == 0, s["rpo"]
    assert not lab.toxiproxy.our_toxics()


@pytest.mark.lab
@pytest.mark.slow
def test_restart_and_pause_leave_the_lab_ready(lab: Lab, cluster: LabCluster, tmp_path: Path) -> None:
    outages = _outages(cluster)
    old_pid = lab.pid_of("proxy")
    o = Outage(OutageKind.RESTART, "proxy", 0.5)
    ev = outages.apply(o)
    assert not lab.running()["haproxy"]
    ev = outages.clear(o, ev)
    assert lab.pid_of("proxy") != old_pid == ev.measured["old_pid"]
    # a pause longer than the read timeout: the writes in flight end as unknown, and the read-back
    # says what became of them (they commit once the primary runs again)
    hb = _heartbeat(cluster, "direct")
    _measure(hb, 0.5)
    p = Outage(OutageKind.PAUSE, "primary", 2.5)
    pid = lab.pid_of("primary")
    ev = outages.apply(p)
    try:
        assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
        _measure(hb, 2.5)
    finally:
        outages.clear(p, ev)
    assert Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T"
    assert not list((lab.run_dir / "deadman").glob("*.json")), "the pause lease must be disarmed"
    _measure(hb, 1.5)
    atts = hb.stop()
    unknown = [a for a in atts if a.outcome == UNKNOWN]
    assert len(unknown) >= hb.config.writers, "each writer had a write in flight when the primary stopped"
    assert all(a.error.startswith("3024") for a in unknown), {a.error for a in unknown}
    check = rpo(atts, hb.read_rows(_sources(cluster)[0]), source="primary")
    assert check["lost"] == 0
    assert check["unknown_committed"] + check["unknown_absent"] == len(unknown)
    assert atts[-1].outcome == OK
