"""TiDB availability faults: planned for PD leader, TiKV and TiDB in a dry run
(seed 000's cluster), and run over SSH against namespace hosts where each
component is a small echo server behind a systemctl stand-in
(``selftests/fake_systemctl.py``), controlled the way tiup's units are.
"""

from __future__ import annotations

import dataclasses
import shutil
import stat
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wanbench.errors import FaultError
from wanbench.executors.base import Executor
from wanbench.faults.lease import LeaseKeeper
from wanbench.faults.outage import OutageKind
from wanbench.netns import NetnsNetwork
from wanbench.profiles.base import DryRun
from wanbench.profiles.capabilities import OUTAGES
from wanbench.profiles.tidb.cluster import TidbCluster
from wanbench.profiles.tidb.model import LABEL_LEADER
from wanbench.profiles.tidb.outages import TidbOutages
from wanbench.profiles.tidb.preflight import ssh_executors
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.topology import Topology, load_catalog

DATA = Path(__file__).resolve().parent / "data"
SCENARIOS = ("heartbeat_pd_leader", "heartbeat_tikv", "heartbeat_tidb")


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("kind", list(OutageKind))
def test_dry_run_plans_each_outage_on_one_instance(scenario: str, kind: OutageKind) -> None:
    topo = load_cluster(DATA / "tiup_display_seed000.txt")
    outages = TidbOutages(topo, dry_run=True)
    plan = outages.plan(load_catalog("tidb")[scenario], kind, 5.0)
    text = outages.render(plan)
    role = scenario.removeprefix("heartbeat_").removesuffix("_leader")
    assert plan.unit.startswith(f"{role}-")
    if scenario == "heartbeat_pd_leader":
        assert plan.host == "10.160.152.23", "the leader (L in tiup display), not the first PD"
    if kind is OutageKind.RESTART:
        assert f"systemctl stop {plan.unit}" in text
        assert f"systemctl start {plan.unit}" in text
    elif kind is OutageKind.PAUSE:
        assert "kill -STOP" in text
        assert "kill -CONT" in text
        assert plan.unit in text
    else:
        assert "counter drop" in text
        assert "th dport { 22 } accept" in text
        assert all(p.port != 22 for p in plan.peers)
        assert f"th sport {plan.unit.split('-')[1].split('.')[0]} jump loss" in text
    assert "nothing below has been run" in text
    with pytest.raises(FaultError, match="dry run"):
        outages.apply(plan.outage)


@pytest.mark.parametrize("kind", list(OutageKind))
def test_the_clusters_outages_print_the_same_plan_under_a_dry_run(kind: OutageKind) -> None:
    """What the availability fixture asks (``cluster.offers.get(OUTAGES)``): under --dry-run the
    plan is refused with ``DryRun`` carrying the commands ``TidbOutages`` renders, no host contacted."""
    topo = load_cluster(DATA / "tiup_display_seed000.txt")
    scenario = load_catalog("tidb")["heartbeat_tikv"]
    cluster = TidbCluster(topo, tag="dry", dry_run=True)
    offered = cluster.offers.get(OUTAGES)
    assert offered is not None
    with pytest.raises(DryRun) as info:
        offered.outage_for(scenario, kind, 5.0)
    alone = TidbOutages(topo, dry_run=True, run=cluster.run)  # the run names the nft table
    assert info.value.text == alone.render(alone.plan(scenario, kind, 5.0))


# -- over SSH on namespace hosts ---------------------------------------------------------------------------------


@pytest.fixture
def fake_systemctl(tmp_path: Path) -> Path:
    path = tmp_path / "systemctl"
    shutil.copy(Path(__file__).resolve().parent / "fake_systemctl.py", path)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def topology(netns_net: NetnsNetwork, tmp_path: Path) -> Topology:
    a = {h.name: h.address for h in netns_net.hosts}
    (tmp_path / "topology.yaml").write_text(textwrap.dedent(f"""\
        global: {{user: root, ssh_port: 22}}
        pd_servers: [{{host: {a['h1']}}}]
        tidb_servers: [{{host: {a['h1']}}}]
        tikv_servers: [{{host: {a['h2']}}}, {{host: {a['h3']}}}]
        """))
    (tmp_path / "cluster.yaml").write_text(textwrap.dedent(f"""\
        wanbench_cluster: 1
        name: wbavail
        topology: topology.yaml
        ssh: {{user: root, key: {netns_net.client_key}, known_hosts: {netns_net.known_hosts}, connect_timeout: 5}}
        sql: {{user: root}}
        load_host: {netns_net.gateway}
        """))
    topo = load_cluster(tmp_path / "cluster.yaml")
    # the PD leader as PD would name it (discovery itself is tested in test_tidb_netns)
    comps = tuple(dataclasses.replace(c, labels=c.labels | {LABEL_LEADER}) if c.role == "pd" else c
                  for c in topo.components)
    return dataclasses.replace(topo, components=comps)


@pytest.fixture
def units(netns_net: NetnsNetwork, topology: Topology, fake_systemctl: Path,
          tmp_path: Path) -> Iterator[dict[str, Executor]]:
    """Every component started as a fake unit on its host; all stopped afterwards."""
    execs = ssh_executors(topology, ssh_config=str(tmp_path / "no-ssh-config"))
    started: list[tuple[str, str]] = []
    try:
        for c in topology.components:
            unit = f"{c.role}-{c.port}.service"
            execs[c.host].run([str(fake_systemctl), "start", unit], timeout=30)
            started.append((c.host, unit))
        yield execs
    finally:
        name_of = {h.address: h.name for h in netns_net.hosts}
        for host, unit in started:
            netns_net.direct(name_of[host]).run([str(fake_systemctl), "stop", unit], check=False, timeout=30)
        for ex in execs.values():
            ex.close()


def _connects(net: NetnsNetwork, from_host: str | None, address: str, port: int) -> bool:
    """A TCP connect and an echo within 1 s, from a namespace host (or from the runner with None)."""
    code = (f"import socket; s = socket.create_connection(({address!r}, {port}), timeout=1); s.settimeout(1); "
            "s.sendall(b'x'); assert s.recv(1) == b'x'")
    argv = ["python3", "-c", code]
    if from_host is None:
        import subprocess

        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    return net.direct(from_host).run(argv, check=False, timeout=10).exit_status == 0


@pytest.mark.netns
@pytest.mark.slow
def test_outages_over_ssh_on_namespace_hosts(netns_net: NetnsNetwork, topology: Topology, fake_systemctl: Path,
                                            units: dict[str, Executor],
                                            leftovers: Callable[[], dict[str, list[str]]]) -> None:
    a = {h.name: h.address for h in netns_net.hosts}
    keeper = LeaseKeeper(30)
    outages = TidbOutages(topology, executors=units, grace_s=30, systemctl=(str(fake_systemctl),),
                          state_dir_for=lambda host: netns_net.state_dir(
                              netns_net.host({v: k for k, v in a.items()}[host]).netns), keeper=keeper)
    try:
        _run_outages(netns_net, outages, keeper, a)
    finally:
        keeper.close()
    assert leftovers() == {}, "no nft table, qdisc or lease state may stay behind"


def _run_outages(netns_net: NetnsNetwork, outages: TidbOutages, keeper: LeaseKeeper, a: dict[str, str]) -> None:
    catalog = load_catalog("tidb")
    assert _connects(netns_net, "h1", a["h2"], 20160)

    # partition of one TiKV: its peers (PD/TiDB on h1, the other TiKV) get nothing back; the runner,
    # not a peer of TiKV, still does; SSH keeps working (the clear goes over it)
    plan = outages.plan(catalog["heartbeat_tikv"], OutageKind.PARTITION, 1.0)
    assert plan.host == a["h2"]
    ev = outages.apply(plan.outage)
    try:
        assert ev.verified
        assert not _connects(netns_net, "h1", a["h2"], 20160)
        assert not _connects(netns_net, "h3", a["h2"], 20160)
        assert _connects(netns_net, None, a["h2"], 20160)
        assert _connects(netns_net, "h1", a["h3"], 20160), "the other TiKV must not be touched"
    finally:
        outages.clear(plan.outage, ev)
    assert _connects(netns_net, "h1", a["h2"], 20160)

    # pause of the TiDB server: its MainPID stops, the port accepts but never answers
    plan = outages.plan(catalog["heartbeat_tidb"], OutageKind.PAUSE, 1.0)
    ev = outages.apply(plan.outage)
    try:
        assert keeper.held, "the pause holds a lease the runner renews"
        keeper.check()
        assert ev.measured["state"] == "T"
        assert not _connects(netns_net, None, a["h1"], 4000)
    finally:
        outages.clear(plan.outage, ev)
    assert _connects(netns_net, None, a["h1"], 4000)

    # restart of the PD leader: stopped (nothing listens), started again on clear
    plan = outages.plan(catalog["heartbeat_pd_leader"], OutageKind.RESTART, 1.0)
    assert plan.unit == "pd-2379.service"
    ev = outages.apply(plan.outage)
    try:
        assert not _connects(netns_net, "h2", a["h1"], 2379)
    finally:
        outages.clear(plan.outage, ev)
    assert _connects(netns_net, "h2", a["h1"], 2379)
    assert keeper.held == [], "every lease released on clear"
