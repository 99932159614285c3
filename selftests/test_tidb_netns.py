"""A small TiDB-shaped cluster of namespace hosts: preflight, dry run and a real tc plan over SSH.

Hosts (198.18.64.0/24, namespaces ``wbtidb-*``), each with its own sshd:
h1 = pd + tidb (two roles), h2 = tikv + prometheus (monitoring), h3 = tikv,
h4 = tiproxy. ``tikv_write`` at 5 Mbit/s, through ``TidbCluster``, must put exactly the planned u32
filters on h2 and h3 (towards h1's PD/TiDB and the other TiKV), nothing on h1
and h4, and leave nothing behind. Checked with ``tc`` run directly in each
namespace, not through the SSH path under test.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.fake_pd import FakePD
from selftests.labutil import netns_missing
from wanbench.errors import ConfigError, InfrastructureError
from wanbench.executors.base import Executor
from wanbench.faults.base import Level
from wanbench.netns import NetnsNetwork
from wanbench.procs import stop_child
from wanbench.profiles.base import DryRun
from wanbench.profiles.tidb.cluster import TidbCluster
from wanbench.profiles.tidb.facts import collect_facts
from wanbench.profiles.tidb.preflight import preflight, ssh_executors
from wanbench.profiles.tidb.tcplan import FilterKey, installed_filters, planned_filters
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.sql import SqlTarget
from wanbench.topology import Topology, load_catalog
from wanbench.wait import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow]

OCTET = 64  # 198.18.64.0/24: this profile's range, apart from the fault tests' (198.18.0.0/18 and 100+)


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsNetwork]:
    reason = netns_missing("tc")
    if reason:
        pytest.skip(reason)
    # the harness picks 100+; ours is 64
    with NetnsNetwork(tmp_path_factory.mktemp("wbtidb"), hosts=4, prefix="wbtidb", octet=OCTET) as network:
        yield network


@pytest.fixture(scope="module")
def cluster(net: NetnsNetwork) -> Topology:
    a = {h.name: h.address for h in net.hosts}
    topo = net.workdir / "topology.yaml"
    topo.write_text(textwrap.dedent(f"""\
        global: {{user: root, ssh_port: 22}}
        pd_servers: [{{host: {a['h1']}}}]
        tidb_servers: [{{host: {a['h1']}}}]
        tikv_servers: [{{host: {a['h2']}}}, {{host: {a['h3']}}}]
        tiproxy_servers: [{{host: {a['h4']}}}]
        monitoring_servers: [{{host: {a['h2']}}}]
        """))
    wb = net.workdir / "cluster.yaml"
    wb.write_text(textwrap.dedent(f"""\
        wanbench_cluster: 1
        name: wbtidb
        topology: topology.yaml
        ssh: {{user: root, key: {net.client_key}, known_hosts: {net.known_hosts}, connect_timeout: 5}}
        sql: {{user: root}}
        load_host: {net.gateway}
        """))
    return load_cluster(wb)


@pytest.fixture
def executors(net: NetnsNetwork, cluster: Topology) -> Iterator[dict[str, Executor]]:
    execs = ssh_executors(cluster, ssh_config=str(net.workdir / "no-ssh-config"))
    try:
        yield execs
    finally:
        for ex in execs.values():
            ex.close()


def installed(net: NetnsNetwork, name: str) -> tuple[str | None, set[FilterKey], set[int]]:
    """What tc says is on the host's interface, asked directly in its namespace (not over SSH)."""
    return installed_filters(net.direct(name), net.host(name).interface)


def test_preflight_refuses_unknown_host_keys(net: NetnsNetwork, cluster: Topology, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    execs = ssh_executors(cluster, known_hosts=str(empty), ssh_config=str(net.workdir / "no-ssh-config"))
    try:
        with pytest.raises(InfrastructureError) as info:
            preflight(cluster, execs)
    finally:
        for ex in execs.values():
            ex.close()
    msg = str(info.value)
    assert "preflight failed on 4 of 4 host(s)" in msg
    assert msg.count("is not in known_hosts") == 4
    for h in net.hosts:
        assert installed(net, h.name)[0] != "1a57:", "preflight must not touch any host"


def test_a_mysql_server_on_the_tidb_port_is_refused(net: NetnsNetwork, tmp_path: Path) -> None:
    """A real MariaDB listening where TiDB should be: the facts step says it is not TiDB."""
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        pytest.skip("mariadb-server is not installed")
    host = net.host("h4")
    datadir = tmp_path / "data"
    init = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=root",
                           "--auth-root-authentication-method=normal"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert init.returncode == 0, f"mariadb-install-db failed: {init.stderr[-2000:]}{init.stdout[-1000:]}"
    log = open(tmp_path / "mariadbd.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host.netns, "mariadbd", "--no-defaults", f"--datadir={datadir}",
             f"--socket={tmp_path / 'sock'}", "--port=4000", f"--bind-address={host.address}", "--user=root",
             "--skip-grant-tables", "--skip-log-bin"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
        )
    finally:
        log.close()
    try:
        def listening() -> bool:
            if proc.poll() is not None:
                raise InfrastructureError(f"mariadbd exited {proc.returncode}: see {tmp_path / 'mariadbd.log'}")
            with socket.create_connection((host.address, 4000), timeout=1):
                return True

        wait_for(listening, what="mariadbd on the TiDB port", timeout=60)
        target = SqlTarget(host.address, 4000, "root", password="n0t-Printed-pw", connect_timeout=5)
        with pytest.raises(ConfigError, match="is not a TiDB server") as info:
            collect_facts(target)
        assert "MariaDB" in str(info.value)
        assert "n0t-Printed" not in str(info.value)
    finally:
        stop_child(proc)


def test_tikv_write_rate_dry_run_then_real(net: NetnsNetwork, cluster: Topology,
                                           executors: dict[str, Executor]) -> None:
    """The suite's Cluster on a TiDB-shaped network: preflight, live PD leader, dry run, real tc over SSH
    read back on every host, pending-peer samples, and nothing left after clearing."""
    a = {h.name: h.address for h in net.hosts}
    name_of = {v: k for k, v in a.items()}
    scenario = load_catalog("tidb")["tikv_write"]
    level = Level.parse("rate", "5mbit")
    with FakePD() as pd:
        pd.single(a["h1"]).set_pending("pending_peer.json")
        # -- dry run: every command, nothing contacted
        dry = TidbCluster(cluster, tag="netns-dry", dry_run=True)
        with pytest.raises(DryRun) as info:
            dry.apply(dry.fault_for(scenario, level), expected_duration_s=60)
        text = info.value.text
        assert text.count("tc -batch - <<'EOF'") == 2
        for h in net.hosts:
            assert installed(net, h.name)[0] != "1a57:", f"dry run changed {h.name}"

        tc = TidbCluster(cluster, tag="netns", pd_url=pd.url, executors=executors, pending_interval_s=0.1,
                         state_dir_for=lambda host: net.state_dir(net.host(name_of[host]).netns))
        try:
            report = tc.preflight()
            assert report.ok
            assert len(report.results) == 4
            assert tc.sweep() == []
            fault = tc.fault_for(scenario, level)
            plan, _ = tc._plans[fault]
            assert [name_of[h.host] for h in plan.hosts] == ["h2", "h3"]
            expected = {hp.host: planned_filters(hp.matches) for hp in plan.hosts}
            assert expected[a["h2"]] == {
                (a["h1"], 20160, None), (a["h1"], None, 2379), (a["h3"], 20160, None), (a["h3"], None, 20160)}
            evidence = tc.apply(fault, expected_duration_s=60)
            try:
                assert evidence.verified
                assert set(evidence.measured["filters"]) == {f"{a['h2']} eth0", f"{a['h3']} eth0"}
                assert evidence.measured["pd_leader"]["leader"] == f"{a['h1']}:2379"
                assert any(f"{a['h2']}: tikv-{a['h2']}:20160 shared the host with prometheus" in n
                           for n in evidence.notes)
                for line in evidence.applied:  # the dry run showed exactly the batch that ran
                    batch_line = line.split("] tc ", 1)[1].replace("dev eth0", "dev DEV")
                    assert batch_line in text, line
                for hp in plan.hosts:  # read back directly in each namespace, not over SSH
                    root, shaped, ssh = installed(net, name_of[hp.host])
                    assert root == "1a57:"
                    assert shaped == expected[hp.host], f"{name_of[hp.host]}: filters differ from the plan"
                    assert {dst for dst, _, _ in shaped} <= set(hp.peer_ips), "only towards planned peers"
                    assert 22 in ssh, "SSH goes to the unshaped class"
                    assert all(22 not in (sp, dp) for _, sp, dp in shaped)
                for name in ("h1", "h4"):
                    root, shaped, _ = installed(net, name)
                    assert root != "1a57:"
                    assert not shaped, f"{name} is not a target and must not be shaped"
                assert executors[a["h2"]].run(["true"], timeout=10).ok, "SSH still works through the fault"
                sampler = tc._active[fault].sampler
                assert sampler is not None, "a bandwidth fault samples PD's pending-peer regions"
                wait_for(lambda: sampler.samples, what="a pending-peer sample", timeout=10)
                # an interleaved level-0 round: the rules lifted on every host, then back as planned
                tc.suspend(fault)
                for hp in plan.hosts:
                    assert not installed(net, name_of[hp.host])[1], "suspended: no shaped filter left"
                tc.resume(fault, expected_duration_s=60)
                for hp in plan.hosts:
                    assert installed(net, name_of[hp.host])[1] == expected[hp.host]
            finally:
                cleared = tc.clear(fault, evidence)
            assert cleared.measured["pending_peers"]["max_pending_regions"] == 2
            assert "cleared and verified absent" in cleared.notes
        finally:
            tc.close()
    for h in net.hosts:
        root, shaped, _ = installed(net, h.name)
        assert root != "1a57:", f"{h.name} still has wanbench's qdisc"
        assert not shaped
        sd = Path(net.state_dir(h.netns))
        assert not (sd.is_dir() and any(sd.iterdir())), f"{h.name}: dead-man state left behind"
