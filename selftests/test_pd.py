"""PD leader discovery and pending-peer sampling against recorded PD v8.5 answers."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.fake_pd import FakePD
from wanbench.errors import ConfigError
from wanbench.profiles.tidb.pd import PDClient, PDError, PendingPeerSampler, discover_leader
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.profiles.tidb.views import pd_leader
from wanbench.wait import wait_for

DATA = Path(__file__).parent / "data"


@pytest.fixture
def fake_pd() -> Iterator[FakePD]:
    with FakePD() as pd:
        yield pd


@pytest.fixture
def display_topology():
    return load_cluster(DATA / "tiup_display_seed000.txt")


def _dead_url() -> str:
    """A loopback URL nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_leader_matches_display_when_nothing_moved(fake_pd: FakePD, display_topology) -> None:
    found = discover_leader(display_topology, pd_url=fake_pd.url)
    assert found.leader.address == "10.160.152.23:2379"
    assert found.leader.binary_version == "v8.5.3"
    assert found.previous == "10.160.152.23:2379"
    assert not found.moved
    leader = pd_leader(found.topology)
    assert leader is not None
    assert leader.name == "pd-10.160.152.23:2379"
    assert len(found.members) == 6


def test_leader_moved_between_display_and_run(fake_pd: FakePD, display_topology) -> None:
    fake_pd.set_leader("pd-172.24.40.17-2379")  # an election after the display was saved
    found = discover_leader(display_topology, pd_url=fake_pd.url)
    assert found.moved
    assert found.previous == "10.160.152.23:2379"
    assert found.leader.address == "172.24.40.17:2379"
    leaders = found.topology.select("pd:leader")
    assert [c.name for c in leaders] == ["pd-172.24.40.17:2379"], "the live answer must win over the file"
    assert "pd-10.160.152.23:2379" in {c.name for c in found.topology.select("pd:!leader")}
    assert found.to_json()["moved"] is True
    # the file's model itself is not changed
    before = pd_leader(display_topology)
    assert before is not None
    assert before.name == "pd-10.160.152.23:2379"


def test_yaml_topology_learns_leader_from_pd(fake_pd: FakePD) -> None:
    topo = load_cluster(DATA / "tiup_topology_seed000.yaml")
    assert pd_leader(topo) is None
    found = discover_leader(topo, pd_url=fake_pd.url)
    assert found.previous is None
    assert not found.moved
    leader = pd_leader(found.topology)
    assert leader is not None
    assert leader.address == "10.160.152.23:2379"


def test_every_pd_url_is_tried(fake_pd: FakePD) -> None:
    dead = _dead_url()
    client = PDClient([dead, fake_pd.url], timeout=2)
    leader, answered_by = client.leader()
    assert answered_by == fake_pd.url
    assert leader.name == "pd-10.160.152.23-2379"


def test_all_pds_failing_names_each_url(fake_pd: FakePD) -> None:
    fake_pd.fail(500, "no leader")
    dead = _dead_url()
    client = PDClient([fake_pd.url, dead], timeout=2)
    with pytest.raises(PDError) as info:
        client.leader()
    msg = str(info.value)
    assert fake_pd.url in msg
    assert "HTTP 500" in msg
    assert "no leader" in msg
    assert dead in msg
    assert "Refused" in msg
    assert fake_pd.hits["/pd/api/v1/leader"] == 1


def test_leader_from_another_cluster_is_a_config_error(fake_pd: FakePD, display_topology) -> None:
    fake_pd.members["members"][0]["client_urls"] = ["http://192.0.2.10:2379"]
    fake_pd.members["members"][0]["name"] = "pd-192.0.2.10-2379"
    fake_pd.set_leader("pd-192.0.2.10-2379")
    with pytest.raises(ConfigError, match="not among the PDs"):
        discover_leader(display_topology, pd_url=fake_pd.url)


def test_pd_url_must_be_http() -> None:
    with pytest.raises(ConfigError, match="http://host:2379"):
        PDClient(["10.0.0.1:2379"])


def test_pending_peers_are_counted_per_store(fake_pd: FakePD) -> None:
    client = PDClient([fake_pd.url], timeout=2)
    assert client.pending_peers().count == 0
    fake_pd.set_pending("pending_peer.json")
    sample = client.pending_peers()
    assert sample.count == 2
    assert sample.by_store == {4: 2}
    assert sample.region_ids == (76009, 76021)


def test_sampler_collects_during_a_run(fake_pd: FakePD) -> None:
    fake_pd.set_pending("pending_peer.json")
    client = PDClient([fake_pd.url], timeout=2)
    with PendingPeerSampler(client, interval=0.05) as sampler:
        wait_for(lambda: len(sampler.samples) >= 3, what="three pending-peer samples", timeout=10)
    summary = sampler.summary()
    assert summary["samples"] >= 3
    assert summary["max_pending_regions"] == 2
    assert summary["errors"] == []


def test_sampler_keeps_errors_out_of_the_run(fake_pd: FakePD) -> None:
    fake_pd.fail(503, "PD server is busy")
    client = PDClient([fake_pd.url], timeout=2)
    with PendingPeerSampler(client, interval=0.05) as sampler:
        wait_for(lambda: len(sampler.errors) >= 2, what="two failed samples", timeout=10)
    assert sampler.summary()["samples"] == 0
    assert "HTTP 503" in sampler.errors[0]
