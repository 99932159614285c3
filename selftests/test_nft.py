"""NftMechanism (packet loss) on namespace hosts over real SSH, measured by counters."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wanbench.errors import ConfigError, FaultError, FaultVerificationError
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.faults.deadman import RunInfo
from wanbench.faults.nft import NftMechanism, loss_fraction
from wanbench.faults.tc import PeerMatch
from wanbench.faults.verify import (
    RttSample,
    binomial_bounds,
    rtt_tolerance_ms,
    send_udp,
    verify_loss,
    verify_rtt,
)
from wanbench.netns import NetnsNetwork

pytestmark = pytest.mark.netns

UDP_PORT = 28320


def loss(pct: float) -> Fault:
    return Fault("h1", Level(FaultKind.LOSS, pct))


@pytest.fixture
def make_nft(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor]) -> Iterator[Callable[..., NftMechanism]]:
    made: list[NftMechanism] = []

    def make(host: str, peers: list[PeerMatch], interface: str | None = "eth0", **kw: Any) -> NftMechanism:
        h = netns_net.host(host)
        mech = NftMechanism(ssh_h[host], peers, interface=interface, state_dir=netns_net.state_dir(h.netns), **kw)
        made.append(mech)
        return mech

    try:
        yield make
    finally:
        for m in made:
            m.clear()


def test_loss_fraction_resolution() -> None:
    assert loss_fraction(1) == (1, 100)
    assert loss_fraction(0.1) == (1, 1000)
    assert loss_fraction(0.25) == (25, 10000)
    assert loss_fraction(100) == (100, 100)
    with pytest.raises(ConfigError, match="at most 4 decimals"):
        loss_fraction(0.123456)
    with pytest.raises(ConfigError, match="more than 0%"):
        loss_fraction(150)


@pytest.mark.parametrize("pct", [1.0, 0.1])
def test_loss_measured_by_counters(pct: float, netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                   make_nft: Callable[..., NftMechanism]) -> None:
    h2 = netns_net.host("h2").address
    mech = make_nft("h1", [PeerMatch(ip=h2)])
    mech.apply(loss(pct), deadline_s=120)
    n = 10_000
    sent = send_udp(ssh_h["h1"], h2, UDP_PORT, n)
    matched, dropped = mech.counters()
    assert matched == n  # every packet to the peer met the rule, nothing else did
    assert sent == n - dropped  # what the counters dropped is what never left the host
    ev = verify_loss("h1", pct, matched, dropped, mechanism="nft", min_packets=10_000)
    lo, hi = binomial_bounds(n, pct)
    assert ev.verified
    assert lo <= dropped <= hi
    # traffic to another host is not touched
    assert send_udp(ssh_h["h1"], netns_net.host("h3").address, UDP_PORT, 2000) == 2000
    assert mech.counters()[0] == matched


def test_verification_fails_on_wrong_numbers() -> None:
    with pytest.raises(FaultVerificationError, match=r"asked for 1% loss but 0 of 20000"):
        verify_loss("h1", 1.0, 20_000, 0, mechanism="nft")
    with pytest.raises(FaultVerificationError, match="cannot be confirmed"):
        verify_loss("h1", 1.0, 50, 1, mechanism="nft", min_packets=10_000)


def test_ssh_survives_total_loss_towards_the_runner(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                                    make_nft: Callable[..., NftMechanism]) -> None:
    mech = make_nft("h1", [PeerMatch(ip=netns_net.gateway)])
    mech.apply(loss(100), deadline_s=120)
    assert send_udp(ssh_h["h1"], netns_net.gateway, UDP_PORT, 500) == 0  # everything else to the runner is lost
    fresh = netns_net.ssh("h1")  # new SSH connections work too
    try:
        assert fresh.run(["echo", "alive"]).stdout == "alive\n"
    finally:
        fresh.close()
    mech.clear()
    assert send_udp(ssh_h["h1"], netns_net.gateway, UDP_PORT, 500) == 500


def test_lab_style_ports_on_lo(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                               make_nft: Callable[..., NftMechanism]) -> None:
    mech = make_nft("h3", [PeerMatch(port=28321)], interface="lo")
    mech.apply(loss(5), deadline_s=120)
    send_udp(ssh_h["h3"], "127.0.0.1", 28321, 10_000)
    matched, dropped = mech.counters()
    assert matched >= 10_000  # requests (dport) plus ICMP-free UDP: each packet once on the way out
    verify_loss("h3", 5, matched, dropped, mechanism="nft", min_packets=10_000)
    send_udp(ssh_h["h3"], "127.0.0.1", 28322, 1000)
    assert mech.counters()[0] == matched  # another port is not matched


def test_apply_twice_clear_three_times(make_nft: Callable[..., NftMechanism], netns_net: NetnsNetwork,
                                       ssh_h: dict[str, SSHExecutor],
                                       leftovers: Callable[[], dict[str, list[str]]]) -> None:
    mech = make_nft("h2", [PeerMatch(ip=netns_net.host("h3").address, port=4000)])
    mech.apply(loss(1), deadline_s=120)
    first = ssh_h["h2"].run(["nft", "list", "table", "inet", mech.table]).stdout
    mech.apply(loss(1), deadline_s=120)
    assert ssh_h["h2"].run(["nft", "list", "table", "inet", mech.table]).stdout == first
    for _ in range(3):
        mech.clear()
    assert leftovers() == {}


def test_only_loss(make_nft: Callable[..., NftMechanism], netns_net: NetnsNetwork,
                   leftovers: Callable[[], dict[str, list[str]]]) -> None:
    mech = make_nft("h1", [PeerMatch(ip=netns_net.host("h2").address)])
    with pytest.raises(FaultError, match="only does packet loss"):
        mech.apply(Fault("h1", Level(FaultKind.RATE, 10)), deadline_s=60)
    with pytest.raises(ConfigError, match="not a network interface name"):
        make_nft("h1", [PeerMatch(ip=netns_net.host("h2").address)], interface='eth0" accept; #')
    assert leftovers() == {}


def test_sweep_removes_dead_runs_only(make_nft: Callable[..., NftMechanism], netns_net: NetnsNetwork,
                                     leftovers: Callable[[], dict[str, list[str]]]) -> None:
    me = RunInfo.current()
    dead = RunInfo("deadrun2", me.runner_host, me.runner_pid, me.runner_start + 1)
    live = RunInfo("liverun2", me.runner_host, me.runner_pid, me.runner_start)
    h2 = netns_net.host("h2").address
    make_nft("h1", [PeerMatch(ip=h2)], run=dead).apply(loss(1), deadline_s=300)
    theirs = make_nft("h1", [PeerMatch(ip=h2)], run=live)
    theirs.apply(loss(1), deadline_s=300)
    # another run's capability probe, caught at the instant its throwaway table exists
    probing = netns_net.direct("h1")
    probing.run(["nft", "add", "table", "inet", "wanbench_probe_x1"])
    try:
        removed = make_nft("h1", [PeerMatch(ip=h2)]).sweep()
        assert "wanbench_probe_x1" in probing.run(["nft", "list", "tables"]).stdout
    finally:
        probing.run(["nft", "delete", "table", "inet", "wanbench_probe_x1"])
    assert removed == [f"{netns_net.host('h1').address}: nft table inet wanbench_deadrun2_eth0 of run deadrun2"]
    assert theirs.installed()
    theirs.clear()
    assert leftovers() == {}


def test_rtt_judgement_uses_the_larger_tolerance() -> None:
    base = RttSample(0.1, 0.08, 0.2, 20)
    ok = verify_rtt("h1", 200, base, RttSample(209.0, 205, 212, 20), mechanism="toxiproxy")  # 5 % = 10 ms
    assert ok.measured["added_rtt_ms"] == 208.9
    assert rtt_tolerance_ms(20) == 2.0
    with pytest.raises(FaultVerificationError, match=r"asked for \+20ms RTT but measured \+23.9ms"):
        verify_rtt("h1", 20, base, RttSample(24.0, 23, 25, 20), mechanism="toxiproxy")
