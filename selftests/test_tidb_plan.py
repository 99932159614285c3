"""Fault planning on seed 000's cluster: shared hosts, peers, never SSH, dry run, preflight."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
from pathlib import Path

import pytest

from wanbench.errors import ConfigError, FaultError, InfrastructureError
from wanbench.executors import Executor, LocalExecutor
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import FAMILY_KIND, Fault, Level
from wanbench.faults.probe import Capabilities
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.plan import CLIENT, HostPlan, plan_fault, render_dry_run
from wanbench.profiles.tidb.preflight import preflight
from wanbench.profiles.tidb.tcplan import (
    choose_mechanisms,
    installed_nft,
    matches_by_interface,
    tc_peers,
    tc_renderer,
)
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.profiles.tidb.views import with_pd_leader
from wanbench.topology import Scenario, load_catalog

DATA = Path(__file__).parent / "data"
RTT200 = Level.parse("delay", "200ms")


@pytest.fixture(scope="module")
def topo():
    return load_cluster(DATA / "tiup_display_seed000.txt")


@pytest.fixture(scope="module")
def catalog():
    return load_catalog("tidb")


def _ports(hp: HostPlan) -> tuple[set[int], set[int]]:
    return {m.src_port for m in hp.matches if m.src_port}, {m.dst_port for m in hp.matches if m.dst_port}


def test_tidb_fault_stays_on_tidb_ports_on_shared_hosts(topo, catalog) -> None:
    plan = plan_fault(catalog["tidb"], topo, RTT200)
    assert [h.host for h in plan.hosts] == sorted(c.host for c in topo.by_role("tidb"))
    hp = plan.host("10.160.152.21")
    assert hp.faulted == ("tidb-10.160.152.21:4000",)
    assert hp.ports == (4000, 10080)
    assert set(hp.shares_host_with) == {"pd-10.160.152.21:2379", "tiproxy-10.160.152.21:6000"}
    src, dst = _ports(hp)
    assert src <= {4000, 10080}, "only TiDB's own listening ports as source ports"
    assert dst == {2379, 20160}, "TiDB calls PD (TSO) and TiKV; nothing else"
    # PD's own flows on this host are never matched: not its ports as source, not its peer port 2380
    assert not src & {2379, 2380, 6000, 6001}
    assert 2380 not in dst
    # every rule points at a remote peer of the scenario (or any client), never at a local one
    peer_hosts = {c.host for r in ("tiproxy", "pd", "tikv") for c in topo.by_role(r)} - {"10.160.152.21"}
    assert {m.dst for m in hp.matches} <= peer_hosts | {None}
    assert set(hp.local_peers) == {"pd-10.160.152.21:2379", "tiproxy-10.160.152.21:6000"}
    # TiProxy on the same host also calls PD :2379: the plan says so instead of hiding it
    assert any(c.startswith("tiproxy-10.160.152.21:6000 also calls pd :2379") for c in hp.collateral)
    assert not any(c.startswith("pd-") for c in hp.collateral)
    assert plan.shared_hosts()["10.160.152.21"] == list(hp.shares_host_with)


def test_tikv_write_targets_both_tikv_towards_cluster_peers(topo, catalog) -> None:
    plan = plan_fault(catalog["tikv_write"], topo, Level.parse("rate", "10mbit"))
    assert [h.host for h in plan.hosts] == ["10.160.152.24", "172.24.40.20"]
    hp = plan.host("172.24.40.20")
    assert set(hp.shares_host_with) == {"grafana-172.24.40.20:3000", "prometheus-172.24.40.20:9090"}
    src, dst = _ports(hp)
    assert src == {20160}
    assert dst == {2379, 20160}
    expected_peers = {c.host for r in ("tidb", "pd") for c in topo.by_role(r)} | {"10.160.152.24"}
    assert set(hp.peers) == expected_peers
    assert not hp.collateral, "nothing else on a TiKV host calls PD or TiKV"
    assert any("both ends" in n for n in plan.notes)


def test_pd_leader_follows_the_live_leader(topo, catalog) -> None:
    assert [h.host for h in plan_fault(catalog["pd_leader"], topo, RTT200).hosts] == ["10.160.152.23"]
    moved = with_pd_leader(topo, "172.24.40.17:2379")
    plan = plan_fault(catalog["pd_leader"], moved, RTT200)
    assert [h.host for h in plan.hosts] == ["172.24.40.17"]
    hp = plan.hosts[0]
    src, dst = _ports(hp)
    assert src == {2379, 2380}, "PD answers clients on 2379 and etcd peers on 2380"
    assert dst == {2380}, "PD calls only its etcd peers"


def test_pd_follower_spares_the_leader(topo, catalog) -> None:
    plan = plan_fault(catalog["pd_follower"], topo, RTT200)
    assert len(plan.hosts) == 5
    assert "10.160.152.23" not in {h.host for h in plan.hosts}


def test_client_rules_follow_the_load_host(topo, catalog) -> None:
    anywhere = plan_fault(catalog["tiproxy"], topo, RTT200)
    hp = anywhere.host("10.160.152.22")
    client = [m for m in hp.matches if CLIENT in m.peers]
    assert [(m.dst, m.src_port) for m in client] == [(None, 6000)]
    assert "any address" in client[0].why
    scoped = plan_fault(catalog["tiproxy"], topo, RTT200, load_host="10.160.152.30")
    client = [m for m in scoped.host("10.160.152.22").matches if CLIENT in m.peers]
    assert [(m.dst, m.src_port) for m in client] == [("10.160.152.30", 6000)]
    # TiProxy's fault reaches TiDB but not PD (its PD watch would share TiDB's TSO rule)
    assert {m.dst_port for m in scoped.host("10.160.152.22").matches if m.dst_port} == {4000, 10080}


@pytest.mark.parametrize("family", sorted(FAMILY_KIND))
def test_no_rule_ever_matches_ssh(topo, catalog, family: str) -> None:
    level = Level.parse(FAMILY_KIND[family], {"rtt": "50ms", "bandwidth": "5mbit", "loss": "1%"}[family])
    for scenario in catalog.values():
        for hp in plan_fault(scenario, topo, level).hosts:
            assert hp.ssh_port == 22
            assert all(22 not in (m.src_port, m.dst_port) for m in hp.matches), (scenario.name, hp.host)


def test_plan_refuses_a_rule_on_the_ssh_port(topo, catalog) -> None:
    settings = dataclasses.replace(cluster_settings(topo), ssh_ports={"10.160.152.24": 20160})
    odd = dataclasses.replace(topo, settings=settings.to_json())
    with pytest.raises(ConfigError, match="SSH port"):
        plan_fault(catalog["tikv_write"], odd, RTT200)


def test_target_that_selects_nothing(topo) -> None:
    with pytest.raises(ConfigError, match="selects no component"):
        plan_fault(Scenario(name="flash", target="tiflash", workload="read_probe"), topo, RTT200)
    with pytest.raises(ConfigError, match="selects no component"):  # monitoring is never a target
        plan_fault(Scenario(name="graf", target="grafana", workload="read_probe"), topo, RTT200)


def test_dry_run_lists_every_host_and_command(topo, catalog) -> None:
    plan = plan_fault(catalog["tikv_write"], topo, RTT200)
    seen: list[str] = []

    def renderer(hp: HostPlan, level: Level) -> list[str]:
        seen.append(hp.host)
        return ["tc -batch -", f"echo {level.label} on {len(hp.matches)} filters"]

    text = render_dry_run(plan, commands=renderer, ssh_user="tidb")
    assert seen == ["10.160.152.24", "172.24.40.20"]
    assert "nothing below has been run" in text
    for hp in plan.hosts:
        assert f"== {hp.host} (ssh tidb@{hp.host} port 22" in text
        for ip in hp.peer_ips:
            assert f"ip -o route get {ip}" in text
    assert text.count("tc -batch -") == 2
    assert "# shares the host with: grafana-172.24.40.20:3000, prometheus-172.24.40.20:9090" in text
    plain = render_dry_run(plan)
    assert "dst 10.160.152.21 sport 20160" in plain
    assert "replies from :20160 to tidb" in plain


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_preflight_refuses_before_any_fault(topo, tmp_path: Path) -> None:
    """One host answers, one refuses the SSH connection, one has no executor: all are named."""
    hosts = ["10.160.152.21", "10.160.152.24", "172.24.40.20"]
    unreachable = SSHExecutor("127.0.0.1", port=_closed_port(), user="nobody", known_hosts=tmp_path / "kh",
                              ssh_config=tmp_path / "none", connect_timeout=2)
    executors: dict[str, Executor] = {"10.160.152.21": LocalExecutor("10.160.152.21"), "10.160.152.24": unreachable}
    with pytest.raises(InfrastructureError) as info:
        preflight(topo, executors, hosts=hosts, timeout=5)
    msg = str(info.value)
    assert "preflight failed on 2 of 3 host(s)" in msg
    assert "no fault was applied" in msg
    assert "10.160.152.24: unreachable" in msg
    assert "cannot connect over SSH" in msg
    assert "172.24.40.20: no executor" in msg
    assert "10.160.152.21:" not in msg
    report = preflight(topo, {"10.160.152.21": LocalExecutor("10.160.152.21")}, hosts=["10.160.152.21"])
    assert report.ok
    assert report.results[0].detail.startswith("ssh ok")


def test_tc_dry_run_is_the_tc_mechanisms_batch(topo, catalog) -> None:
    plan = plan_fault(catalog["tidb"], topo, Level.parse("rate", "5mbit"))
    text = render_dry_run(plan, commands=tc_renderer())
    section = text.split("== 10.160.152.21 ")[1].split("\n== ")[0]
    batch = section.split("tc -batch - <<'EOF'\n")[1].split("\nEOF")[0].splitlines()
    assert batch[0] == "qdisc add dev DEV root handle 1a57: htb default 1"
    assert any("prio 1" in ln and "match ip sport 22 " in ln for ln in batch), "SSH is sent to the unshaped class"
    shaping = [ln for ln in batch if ln.startswith("filter") and "prio 2" in ln]
    assert len(shaping) == len(plan.host("10.160.152.21").matches)
    for port in (2379, 2380, 6000, 6001):  # PD's and TiProxy's own ports on this shared host
        assert not any(f"sport {port} " in ln for ln in shaping), port
    assert not any("dport 2380 " in ln for ln in shaping)
    assert "match ip dst" not in shaping[-1], "the any-address client filter comes after the specific ones"
    assert "rate 5mbit ceil 5mbit" in section


def test_tc_mechanisms_group_filters_by_interface(topo, catalog) -> None:
    plan = plan_fault(catalog["tikv_write"], topo, RTT200)
    hp = plan.host("172.24.40.20")
    ifaces = {ip: ("bond0" if ip.startswith("10.") else "eth1") for ip in hp.peer_ips}
    groups = matches_by_interface(hp, ifaces)
    assert set(groups) == {"bond0", "eth1"}
    assert {m.dst for m in groups["bond0"]} == {ip for ip in hp.peer_ips if ip.startswith("10.")}
    peers = tc_peers(groups["eth1"])
    assert all(p.direction in ("sport", "dport") for p in peers)
    assert [len(p.directions()) for p in peers] == [1] * len(peers), "one direction per planned filter"


def test_tidb_cluster_dry_run_contacts_nobody(topo, catalog) -> None:
    from wanbench.profiles.base import DryRun
    from wanbench.profiles.tidb.cluster import TidbCluster

    cluster = TidbCluster(topo, tag="dry", dry_run=True)
    assert cluster.sweep() == []
    fault = cluster.fault_for(catalog["tikv_write"], Level.parse("rate", "10mbit"))
    assert fault.component == "tikv-10.160.152.24:20160,tikv-172.24.40.20:20160"
    with pytest.raises(DryRun) as info:
        cluster.apply(fault, expected_duration_s=60)
    assert info.value.text.count("tc -batch - <<'EOF'") == 2
    with pytest.raises(InfrastructureError, match="dry run"):
        _ = cluster.executors
    ctx = cluster.run_context()
    assert ctx["dry_run"] is True
    assert ctx["versions"] == {"tidb": "v8.5.3", "source": "the cluster file (--dry-run asks no server)"}
    assert len(ctx["endpoints"]["proxy"]) == 6
    with pytest.raises(DryRun):
        cluster.sql_targets("direct")
    cluster.close()


def test_tidb_cluster_sql_targets_round_robin_list(topo) -> None:
    from wanbench.profiles.tidb.cluster import TidbCluster

    cluster = TidbCluster(topo, tag="t")
    targets = cluster.sql_targets("proxy")
    assert [t.address for t in targets] == [f"{c.host}:6000" for c in topo.by_role("tiproxy")]
    assert targets[0].user == "root"
    assert "password" not in repr(targets[0])
    assert [t.port for t in cluster.sql_targets("direct")] == [4000] * 6


def test_the_suites_dry_run_of_every_family_prints_the_plan(tmp_path: Path) -> None:
    """README step 3 as a user runs it: ``--dry-run`` with a cluster file, for each fault family and
    the availability family, prints every command per host and ends with every cell skipped. (The
    session's gate fingerprints the run before any cell prints its plan; a dry run asks no server,
    so its run context names the versions the cluster file gives.) The hosts are loopback addresses
    with nothing listening: a dry run that tried to reach one would fail."""
    from selftests.labutil import ROOT, suite_cmd

    (tmp_path / "topology.yaml").write_text(
        "global: {user: tidb, ssh_port: 22}\n"
        "pd_servers: [{host: 127.0.0.2}]\n"
        "tidb_servers: [{host: 127.0.0.2}]\n"
        "tikv_servers: [{host: 127.0.0.3}, {host: 127.0.0.4}]\n"
        "tiproxy_servers: [{host: 127.0.0.5}]\n")
    cluster = tmp_path / "demo.wanbench.yaml"
    cluster.write_text("wanbench_cluster: 1\nname: demo\ntopology: topology.yaml\n"
                       "sql: {user: bench, password_env: DEMO_BENCH_PASSWORD}\nload_host: 127.0.0.1\n")
    env = {k: v for k, v in os.environ.items() if k != "DEMO_BENCH_PASSWORD"} | {"HOME": str(tmp_path)}
    res = subprocess.run(
        suite_cmd("tests/rtt", "tests/bandwidth", "tests/loss", "tests/availability", "--cluster", str(cluster),
                  "--scenario", "tikv_write,heartbeat_tikv", "--rtt", "0,50ms", "--bandwidth", "0,5mbit",
                  "--loss", "0,1%", "--concurrency", "10", "--dry-run", "-p", "no:randomly", "-rs"),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-2000:]
    assert "9 skipped" in out, out[-2000:]
    assert "lacks versions" not in out
    for family, level in (("delay", "50ms"), ("rate", "5mbit"), ("loss", "1%")):
        assert f"# dry run: tikv_write {family}={level} on 2 host(s); nothing below has been run" in out
    # three faults on every TiKV host, and three outages of the first TiKV
    assert out.count("== 127.0.0.3 (ssh tidb@127.0.0.3 port 22") == 6
    assert out.count("== 127.0.0.4 (ssh tidb@127.0.0.4 port 22") == 3
    for kind in ("partition", "pause", "restart"):
        assert f"dry run: printed the commands for heartbeat_tikv {kind}; nothing applied" in out


def _caps(host: str, *, netem: bool, nft: bool = True) -> Capabilities:
    return Capabilities(host, root=True, netem=netem, htb=True, tbf=True, u32=True, ifb=True, clsact=True, nft=nft,
                        nft_numgen=nft, systemd=False, setsid=True, python3=True)


def test_each_host_gets_the_mechanism_its_kernel_allows(topo, catalog) -> None:
    """Rate caps by tc everywhere; loss by tc netem where the kernel has it, else by nft; delay only
    where it has netem, and a plan with one host without it is refused for every host, naming the
    host, what its kernel lacks and what to do."""
    plan = plan_fault(catalog["tikv_write"], topo, RTT200)
    hosts = [hp.host for hp in plan.hosts]
    mixed = {hosts[0]: _caps(hosts[0], netem=True), hosts[1]: _caps(hosts[1], netem=False)}
    assert choose_mechanisms(plan, mixed, Level.parse("rate", "5mbit")) == dict.fromkeys(hosts, "tc")
    assert choose_mechanisms(plan, mixed, Level.parse("loss", "1%")) == {hosts[0]: "tc", hosts[1]: "nft"}
    with pytest.raises(FaultError) as info:
        choose_mechanisms(plan, mixed, RTT200)
    msg = str(info.value)
    assert msg.startswith(f"[{hosts[1]}] cannot add delay 200ms (tikv_write) on this host: the kernel has no "
                          "sch_netem (the capability probe could not add a netem qdisc on a throwaway device there).")
    assert "modprobe sch_netem" in msg
    assert msg.endswith("Nothing was applied on any host.")
    assert "toxiproxy" not in msg  # not a way the TiDB profile has
    bare = dict.fromkeys(hosts, _caps("x", netem=False, nft=False))
    with pytest.raises(FaultError, match=r"these 2 hosts: \[.*\] no way to drop packets here"):
        choose_mechanisms(plan, bare, Level.parse("loss", "1%"))


class _NoNetemHost:
    """A host whose kernel has no netem: answers the preflight and the capability probe, and records
    every command it is asked to run."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.ssh_port = 22
        self.ran: list[list[str]] = []

    def run(self, argv, *, input=None, timeout=30.0, check=True):  # noqa: A002 - the executor's signature
        from wanbench.executors.base import CommandResult

        self.ran.append(list(argv))
        probed = argv[:2] == ["sh", "-c"] and "wbprobe" in argv[2]
        out = "root=1 netem=0 htb=1 tbf=1 u32=1 ifb=1 clsact=1 nft=1 nft_numgen=1 systemd=0 setsid=1 python3=1"
        return CommandResult(self.host, tuple(argv), 0, out if probed else "", "", 0.0)

    def close(self) -> None:
        return None


def test_delay_on_a_kernel_without_netem_stops_before_anything_is_applied(catalog) -> None:
    from wanbench.profiles.tidb.cluster import TidbCluster

    topo = load_cluster(DATA / "tiup_topology_seed000.yaml")
    hosts = {c.host for c in topo.components}
    execs = {h: _NoNetemHost(h) for h in hosts}
    cluster = TidbCluster(topo, tag="t", executors=execs)  # type: ignore[arg-type]
    plan = plan_fault(catalog["tikv_write"], topo, RTT200)
    cluster._plans[fault := Fault("tikv", RTT200)] = (plan, None)
    with pytest.raises(FaultError, match="the kernel has no sch_netem"):
        cluster.apply(fault, expected_duration_s=60)
    for h, ex in execs.items():
        ran = [a[0] if a[0] != "sh" else ("probe" if "wbprobe" in a[2] else a[2][:20]) for a in ex.ran]
        assert ran == ["tc", "ip"] + (["probe"] if h in {hp.host for hp in plan.hosts} else []), (h, ex.ran)
    cluster.close()


#: ``nft -j list chain inet T out`` of the table the nft mechanism writes for a TiDB loss fault
#: (recorded on a namespace host: nftables 1.0.6)
NFT_OUT = (
    '{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}}, {"chain": {"family": "inet", '
    '"table": "T", "name": "out", "handle": 2, "type": "filter", "hook": "output", "prio": 0, "policy": "accept"}}, '
    '{"rule": {"family": "inet", "table": "T", "chain": "out", "handle": 5, "expr": [{"match": {"op": "==", '
    '"left": {"payload": {"protocol": "tcp", "field": "sport"}}, "right": 22}}, {"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "T", "chain": "out", "handle": 6, "expr": [{"match": {"op": "==", '
    '"left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [22, 2222]}}}, {"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "T", "chain": "out", "handle": 8, "expr": [{"match": {"op": "==", '
    '"left": {"meta": {"key": "oifname"}}, "right": "eth0"}}, {"match": {"op": "==", "left": {"payload": '
    '{"protocol": "ip", "field": "daddr"}}, "right": "198.18.66.1"}}, {"match": {"op": "==", "left": {"meta": '
    '{"key": "l4proto"}}, "right": {"set": ["tcp", "udp"]}}}, {"match": {"op": "==", "left": {"payload": '
    '{"protocol": "th", "field": "sport"}}, "right": 4000}}, {"jump": {"target": "loss"}}]}}, '
    '{"rule": {"family": "inet", "table": "T", "chain": "out", "handle": 10, "expr": [{"match": {"op": "==", '
    '"left": {"meta": {"key": "oifname"}}, "right": "eth0"}}, {"match": {"op": "==", "left": {"meta": '
    '{"key": "l4proto"}}, "right": {"set": ["tcp", "udp"]}}}, {"match": {"op": "==", "left": {"payload": '
    '{"protocol": "th", "field": "dport"}}, "right": 2379}}, {"jump": {"target": "loss"}}]}}]}')


def test_nft_loss_rules_are_read_back_from_nft_itself() -> None:
    class Nft:
        host = "h"

        def run(self, argv, *, input=None, timeout=30.0, check=True):  # noqa: A002
            from wanbench.executors.base import CommandResult

            there = argv[-2] == "T"
            return CommandResult("h", tuple(argv), 0 if there else 1, NFT_OUT if there else "", "", 0.0)

    assert installed_nft(Nft(), "T") == (True, {("198.18.66.1", 4000, None), (None, None, 2379)}, {22, 2222})
    assert installed_nft(Nft(), "gone") == (False, set(), set())


def test_a_loss_dry_run_shows_the_nft_table_too(topo, catalog) -> None:
    """Which mechanism loss takes is the host's kernel's to decide, when the run starts: the dry run
    shows both, each with only the planned flows (one direction each), and says how it is decided."""
    plan = plan_fault(catalog["tidb"], topo, Level.parse("loss", "1%"))
    text = render_dry_run(plan, commands=tc_renderer())
    assert "else the nft table after it (a capability probe of every host decides" in text
    assert text.count("nft -f - <<'EOF'") == text.count("tc -batch - <<'EOF'") == len(plan.hosts)
    hp = plan.hosts[0]
    jumps = [ln.strip() for ln in text.split(f"== {hp.host} ")[1].split("== ")[0].splitlines() if "jump loss" in ln]
    assert len(jumps) == len(hp.matches)
    delay = render_dry_run(plan_fault(catalog["tidb"], topo, RTT200), commands=tc_renderer())
    assert "# delay needs sch_netem in this host's kernel" in delay
    assert "nft -f" not in delay


def test_a_bandwidth_fault_samples_pd_only_where_there_is_one(tmp_path: Path) -> None:
    """Pending-peer regions are an observation of a bandwidth fault, not a precondition: a topology
    without PD (and no pd_url) gets no sampler, where it used to fail the fault after its rules went on."""
    from wanbench.profiles.tidb.cluster import TidbCluster

    with_pd = TidbCluster(load_cluster(DATA / "tiup_topology_seed000.yaml"), tag="t")
    sampler = with_pd.pending_sampler()
    assert sampler is not None
    assert sampler.client.urls[0].endswith(":2379")
    (tmp_path / "topology.yaml").write_text("tidb_servers: [{host: 127.0.0.2}]\n")
    assert TidbCluster(load_cluster(tmp_path / "topology.yaml"), tag="t").pending_sampler() is None
    given = TidbCluster(load_cluster(tmp_path / "topology.yaml"), tag="t", pd_url="http://127.0.0.3:2379")
    assert given.pending_sampler() is not None


def test_a_failed_wire_check_names_a_load_host_this_machine_does_not_send_from(tmp_path: Path) -> None:
    """The rules towards the clients are scoped to ``load_host``; when this machine sends from another
    address, a failed measurement says so (the addresses alone decide nothing: a NAT may make both right)."""
    from wanbench.profiles.tidb.wire import client_flows, elsewhere

    (tmp_path / "topology.yaml").write_text("tidb_servers: [{host: 127.0.0.1}]\n")
    topo = load_cluster(tmp_path / "topology.yaml")
    scenario = load_catalog("tidb")["tidb"]
    rate = Level.parse("rate", "5mbit")
    wrong = plan_fault(scenario, topo, rate, load_host="127.0.0.99")
    assert client_flows(wrong) == [("127.0.0.1", 4000, "127.0.0.99")]
    assert elsewhere(wrong, "127.0.0.1", 4000) == (
        "; the rules towards the clients name the load host 127.0.0.99, but this machine, where the load runs, "
        "reaches 127.0.0.1:4000 from 127.0.0.1: unless a NAT between makes them the same, the workload does not "
        "cross the fault (set load_host: 127.0.0.1 in the cluster file, or --load-host)")
    assert client_flows(plan_fault(scenario, topo, rate)) == [("127.0.0.1", 4000, None)]  # any address
    assert elsewhere(plan_fault(scenario, topo, rate), "127.0.0.1", 4000) == ""
