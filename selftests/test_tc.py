"""TcMechanism on namespace hosts over real SSH: rate caps measured by real transfers."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from wanbench.errors import ConfigError, FaultError, FaultVerificationError, HostKeyError, HostUnreachableError
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import Fault, FaultKind, Level, Mechanism
from wanbench.faults.deadman import RunInfo
from wanbench.faults.nft import NftMechanism
from wanbench.faults.probe import choose_mechanism, probe
from wanbench.faults.tc import HANDLE, PeerMatch, TcMechanism
from wanbench.faults.verify import measure_rate, verify_rate_by_transfer
from wanbench.netns import NetnsNetwork
from wanbench.topology import Component, Topology
from wanbench.wait import wait_for

pytestmark = pytest.mark.netns

SINK_PORT = 28310


def rate(mbit: float) -> Fault:
    return Fault("h1", Level(FaultKind.RATE, mbit))


@pytest.fixture
def make_tc(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor]) -> Iterator[Callable[..., TcMechanism]]:
    """Builds TcMechanisms for the namespace hosts and clears every one after the test."""
    made: list[TcMechanism] = []

    def make(host: str, peers: list[PeerMatch], interface: str = "eth0", **kw: Any) -> TcMechanism:
        h = netns_net.host(host)
        mech = TcMechanism(ssh_h[host], interface, peers, state_dir=netns_net.state_dir(h.netns), **kw)
        made.append(mech)
        return mech

    try:
        yield make
    finally:
        for m in made:
            m.clear()


def _peer(net: NetnsNetwork, name: str) -> PeerMatch:
    return PeerMatch(ip=net.host(name).address)


def test_rate_verification_fails_when_the_cap_is_missing(netns_net: NetnsNetwork,
                                                        ssh_h: dict[str, SSHExecutor]) -> None:
    with pytest.raises(FaultVerificationError, match=r"asked for a 10 Mbit/s cap but 4 connections moved"):
        verify_rate_by_transfer(ssh_h["h1"], ssh_h["h2"], netns_net.host("h2").address, SINK_PORT, 10,
                                mechanism="tc", seconds=1)


def test_probe_decides_by_exit_status(ssh_h: dict[str, SSHExecutor]) -> None:
    caps = probe(ssh_h["h1"])
    assert caps.htb
    assert caps.u32
    assert caps.nft
    assert caps.nft_numgen
    assert caps.setsid
    assert caps.root
    # this kernel has no sch_netem (ENVIRONMENT.md): the probe must see that, not guess
    assert caps.netem is False
    assert "wbprobe" not in ssh_h["h1"].run(["ip", "link"]).stdout
    chosen = {k: choose_mechanism(k, caps) for k in FaultKind}
    assert chosen == {FaultKind.DELAY: "toxiproxy", FaultKind.RATE: "tc", FaultKind.LOSS: "nft"}


def test_rate_cap_between_two_hosts_only(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                         make_tc: Callable[..., TcMechanism]) -> None:
    h2, h3 = netns_net.host("h2").address, netns_net.host("h3").address
    mech = make_tc("h1", [_peer(netns_net, "h2")])
    ev = mech.apply(rate(10), deadline_s=120)
    assert any("rate 10mbit" in line for line in ev.applied)
    verified = verify_rate_by_transfer(ssh_h["h1"], ssh_h["h2"], h2, SINK_PORT, 10, mechanism="tc")
    assert verified.verified
    assert -8 <= verified.measured["deviation_pct"] <= 2
    # traffic to the other peer is not capped (scoping), measured the same way
    free = measure_rate(ssh_h["h1"], ssh_h["h3"], h3, SINK_PORT, nbytes=2_500_000, connections=4)
    assert free.mbit > 50, free


def test_ssh_unaffected_while_capped_at_5mbit(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                              make_tc: Callable[..., TcMechanism]) -> None:
    # cap everything h1 sends to the runner (the SSH client) and to h2
    mech = make_tc("h1", [PeerMatch(ip=netns_net.gateway), _peer(netns_net, "h2")])
    mech.apply(rate(5), deadline_s=120)
    nbytes = 4_000_000  # 6.4 s at 5 Mbit/s
    res = ssh_h["h1"].run(["head", "-c", str(nbytes), "/dev/zero"], timeout=60)
    assert len(res.stdout) == nbytes
    stats = ssh_h["h1"].run(["tc", "-s", "class", "show", "dev", "eth0"]).stdout
    sent = {m[1]: int(m[2]) for m in re.finditer(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", stats)}
    assert sent["1a57:1"] >= nbytes, sent  # SSH went through the unshaped class
    assert sent["1a57:10"] < nbytes // 10, sent  # not through the runner's capped class
    assert res.duration < 5.5, f"SSH output took {res.duration:.1f}s: looks capped"


def test_delay_without_netem_says_which_mechanism_to_use(make_tc: Callable[..., TcMechanism],
                                                         netns_net: NetnsNetwork,
                                                         leftovers: Callable[[], dict[str, list[str]]]) -> None:
    mech = make_tc("h1", [_peer(netns_net, "h2")])
    with pytest.raises(FaultError, match=r"no sch_netem.*use the toxiproxy mechanism"):
        mech.apply(Fault("h1", Level(FaultKind.DELAY, 50)), deadline_s=60)
    with pytest.raises(FaultError, match=r"no sch_netem.*use the nft mechanism"):
        mech.apply(Fault("h1", Level(FaultKind.LOSS, 1)), deadline_s=60)
    assert not mech.supports(FaultKind.DELAY)
    assert mech.supports(FaultKind.RATE)
    assert leftovers() == {}


def test_apply_twice_clear_three_times(make_tc: Callable[..., TcMechanism], netns_net: NetnsNetwork,
                                       ssh_h: dict[str, SSHExecutor],
                                       leftovers: Callable[[], dict[str, list[str]]],
                                       alive: Callable[[int], bool]) -> None:
    mech = make_tc("h2", [_peer(netns_net, "h3"), PeerMatch(ip=netns_net.host("h1").address, port=4000)])

    def state() -> str:
        return ssh_h["h2"].run(["tc", "-d", "class", "show", "dev", "eth0"]).stdout + \
            ssh_h["h2"].run(["tc", "filter", "show", "dev", "eth0"]).stdout

    mech.apply(rate(30), deadline_s=120)
    first, timer1 = state(), mech._deadman().read(mech.key)  # noqa: SLF001
    mech.apply(rate(30), deadline_s=120)
    timer2 = mech._deadman().read(mech.key)  # noqa: SLF001
    assert state() == first
    assert mech.installed()
    # the first apply's dead-man was disarmed by the second apply; only the second one lives
    assert timer1 is not None
    assert timer2 is not None
    assert timer1.token != timer2.token
    wait_for(lambda: not alive(int(timer1.timer.split(":")[1])), what="the first dead-man to go", timeout=10)
    assert alive(int(timer2.timer.split(":")[1]))
    for _ in range(3):
        mech.clear()
        assert not mech.installed()
    wait_for(lambda: not alive(int(timer2.timer.split(":")[1])), what="the dead-man to be disarmed", timeout=10)
    assert leftovers() == {}


def test_refuses_foreign_root_qdisc(make_tc: Callable[..., TcMechanism], netns_net: NetnsNetwork,
                                    ssh_h: dict[str, SSHExecutor]) -> None:
    ex = ssh_h["h3"]
    ex.run(["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "77:", "tbf", "rate", "1gbit", "burst", "64k",
            "latency", "10ms"])
    try:
        mech = make_tc("h3", [_peer(netns_net, "h1")])
        with pytest.raises(FaultError, match="not wanbench's; refusing"):
            mech.apply(rate(10), deadline_s=60)
        mech.clear()  # tolerates it: nothing of ours there
        assert "qdisc tbf 77: root" in ex.run(["tc", "qdisc", "show", "dev", "eth0"]).stdout
    finally:
        ex.run(["tc", "qdisc", "del", "dev", "eth0", "root"])


def test_live_fault_of_another_run_is_left_alone(make_tc: Callable[..., TcMechanism],
                                                 netns_net: NetnsNetwork) -> None:
    theirs = make_tc("h1", [_peer(netns_net, "h2")], run=RunInfo.current("otherrun"))
    theirs.apply(rate(10), deadline_s=120)
    mine = make_tc("h1", [_peer(netns_net, "h2")])
    with pytest.raises(FaultError, match="another live wanbench run otherrun"):
        mine.apply(rate(5), deadline_s=60)
    assert mine.sweep() == []
    mine.clear()
    assert theirs.installed()


def test_stale_fault_of_dead_runner_is_swept(make_tc: Callable[..., TcMechanism], netns_net: NetnsNetwork,
                                            leftovers: Callable[[], dict[str, list[str]]]) -> None:
    me = RunInfo.current()
    dead = RunInfo("deadrun1", me.runner_host, me.runner_pid, me.runner_start + 1)  # same PID, other process
    make_tc("h1", [_peer(netns_net, "h2")], run=dead).apply(rate(10), deadline_s=300)
    make_tc("h2", [_peer(netns_net, "h3")], run=dead).apply(rate(10), deadline_s=300)
    assert len(leftovers()) == 2
    removed = make_tc("h1", [_peer(netns_net, "h3")]).sweep()
    assert removed == [f"{netns_net.host('h1').address}: tc qdisc {HANDLE} on eth0 of run deadrun1"]
    assert list(leftovers()) == ["h2"]
    assert len(make_tc("h2", [_peer(netns_net, "h1")]).sweep()) == 1
    assert leftovers() == {}


def test_orphan_qdisc_without_state_is_swept(make_tc: Callable[..., TcMechanism], netns_net: NetnsNetwork,
                                             ssh_h: dict[str, SSHExecutor]) -> None:
    ssh_h["h3"].run(["tc", "qdisc", "add", "dev", "eth0", "root", "handle", HANDLE, "htb", "default", "1"])
    removed = make_tc("h3", [_peer(netns_net, "h1")]).sweep()
    assert removed == [f"{netns_net.host('h3').address}: tc qdisc {HANDLE} on eth0 of unknown run (no state file)"]


def test_bad_inputs_one_clear_error_each_and_no_fault(
    netns_net: NetnsNetwork, make_tc: Callable[..., TcMechanism], tmp_path: object,
    leftovers: Callable[[], dict[str, list[str]]],
) -> None:
    topo = Topology("lab", "t", (Component("h1", "db", netns_net.host("h1").address, (22,)),))
    with pytest.raises(ConfigError, match="unknown component 'tikv-9'"):
        topo.component("tikv-9")
    with pytest.raises(ConfigError, match="-5ms"):
        Level.parse(FaultKind.DELAY, "-5ms")
    with pytest.raises(ConfigError, match="0mbit"):
        Level.parse(FaultKind.RATE, "0mbit")
    with pytest.raises(ConfigError, match="150%"):
        Level.parse(FaultKind.LOSS, "150%")
    with pytest.raises(ConfigError, match="refusing to match SSH port 22"):
        make_tc("h1", [PeerMatch(port=22)])
    with pytest.raises(ConfigError, match="not an IP address"):
        PeerMatch(ip="h2; rm -rf /")
    with pytest.raises(FaultError, match="no network interface 'eth9'"):
        make_tc("h1", [_peer(netns_net, "h2")], interface="eth9").apply(rate(10), deadline_s=60)
    unreachable = SSHExecutor(f"198.18.{netns_net.octet}.250", user="root", connect_timeout=1.5,
                              known_hosts=netns_net.known_hosts, ssh_config=str(netns_net.workdir / "none"))
    with pytest.raises(HostUnreachableError):
        TcMechanism(unreachable, "eth0", [_peer(netns_net, "h2")]).apply(rate(10), deadline_s=60)
    bad_key = netns_net.workdir / "forged_known_hosts"
    h2_line = next(ln for ln in netns_net.known_hosts.read_text().splitlines()
                   if ln.startswith(netns_net.host("h2").address + " "))
    bad_key.write_text(netns_net.host("h1").address + " " + h2_line.split(" ", 1)[1] + "\n")
    with pytest.raises(HostKeyError, match="MISMATCH"):
        TcMechanism(netns_net.ssh("h1", known_hosts=str(bad_key)), "eth0",
                    [_peer(netns_net, "h2")]).apply(rate(10), deadline_s=60)
    assert leftovers() == {}


def test_lab_style_ports_only_on_lo(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                    make_tc: Callable[..., TcMechanism]) -> None:
    """The lab's shape: links identified by a listen port on ``lo``; each direction capped per link.

    Run inside h3's own loopback so the machine's shared ``lo`` (other engineers' labs) is never shaped.
    """
    ex = ssh_h["h3"]
    port, other = 28311, 28312
    mech = make_tc("h3", [PeerMatch(port=port)], interface="lo")
    ev = mech.apply(rate(10), deadline_s=120)
    assert sum("u32 match ip dport 28311" in a for a in ev.applied) == 1
    assert sum("u32 match ip sport 28311" in a for a in ev.applied) == 1
    # aggregate over 4 connections to the link's port is capped...
    verify_rate_by_transfer(ex, ex, "127.0.0.1", port, 10, mechanism="tc", seconds=3)
    # ...while another port on the same lo is not
    free = measure_rate(ex, ex, "127.0.0.1", other, nbytes=2_500_000, connections=4)
    assert free.mbit > 100, free



def _implements_protocol(tc: TcMechanism, nft: NftMechanism) -> list[Mechanism]:
    """Static check (mypy): both mechanisms satisfy the Mechanism protocol."""
    return [tc, nft]
