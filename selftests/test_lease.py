"""Fault leases on namespace hosts over real SSH: a killed or stopped runner's faults go within lease + 10 s.

Each runner (``selftests.lease_runner``) applies a rate cap (tc) and packet loss
(nft) on one host and is stopped at a stage; what it left is checked with
``tc``/``nft`` run directly in the namespace, not through the SSH path under
test. A short lease (10 s) keeps these quick; one case runs the default 30 s.

The module runs in the ``netns`` scope, beside the labs and live tidb-server of the
``machine`` scope (selftests/conftest.py): its state lives in each namespace's own
``/run/wanbench/netns-*`` directory, which no sweep of localhost's ``/run/wanbench``
lists, and its leases are long enough (10 s, renewed every 3.3 s) to be renewed on a
machine whose two cores are busy. (3 s leases lapsed there.)
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from wanbench.errors import FaultLostError
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.faults.deadman import DEFAULT_LEASE_S, DeadMan, FaultState, RunInfo
from wanbench.faults.inventory import clear_found, host_faults
from wanbench.faults.lease import DeadManLease, LeaseKeeper
from wanbench.faults.tc import PeerMatch, TcMechanism
from wanbench.faults.toxiproxy import expired_toxic_leases, split_level, write_toxic_lease
from wanbench.netns import NetnsNetwork
from wanbench.procs import load_preexec, proc_start_time
from wanbench.wait import wait_for

ROOT = Path(__file__).resolve().parent.parent
LEASE_S = 10.0


def start_runner(net: NetnsNetwork, host: str, kind: str, stage: str, tmp: Path, lease: float = LEASE_S
                 ) -> tuple[subprocess.Popen[bytes], Path, Path]:
    h = net.host(host)
    peer = net.host("h2" if host != "h2" else "h3").address
    ready, log = tmp / f"ready-{host}-{kind}", tmp / f"runner-{host}-{kind}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "selftests.lease_runner", "ssh", kind, stage, str(lease), str(ready), h.address,
             peer, str(net.client_key), str(net.known_hosts), net.state_dir(h.netns)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=subprocess.STDOUT,
        )
    return proc, ready, log


def wait_ready(runners: list[tuple[subprocess.Popen[bytes], Path, Path]], stage: str) -> None:
    for proc, ready, log in runners:
        wait_for(lambda p=proc, r=ready: r.exists() or p.poll() is not None,  # type: ignore[misc]
                 what=f"the runner to reach {stage}", timeout=60)
        assert proc.poll() is None, log.read_text()
        assert ready.read_text() == stage


def kill_all(runners: list[tuple[subprocess.Popen[bytes], Path, Path]]) -> None:
    for proc, _, _ in runners:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture
def runners() -> Iterator[list[tuple[subprocess.Popen[bytes], Path, Path]]]:
    started: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    try:
        yield started
    finally:
        kill_all(started)


def gone_within(leftovers: Callable[[], dict[str, list[str]]], host: str, limit: float, since: float) -> float:
    wait_for(lambda: host not in leftovers(), what=f"{host}'s faults to be cleared by its dead-man",
             timeout=limit, interval=0.2, max_interval=0.5)
    return time.time() - since


# -- kill -9 at each stage, rate (tc) and loss (nft) over SSH ---------------------------------------------------------
@pytest.mark.netns
@pytest.mark.parametrize(("stage", "host"), [("applying", "h1"), ("mid", "h2"), ("clearing", "h3")])
def test_kill_9_leaves_nothing_after_lease(stage: str, host: str, netns_net: NetnsNetwork,
                                           leftovers: Callable[[], dict[str, list[str]]], tmp_path: Path,
                                           runners: list[tuple[subprocess.Popen[bytes], Path, Path]]) -> None:
    runners += [start_runner(netns_net, host, kind, stage, tmp_path) for kind in ("rate", "loss")]
    wait_ready(runners, stage)
    assert host in leftovers(), "the runners left nothing to clear: the test proves nothing"
    killed = time.time()
    kill_all(runners)
    took = gone_within(leftovers, host, LEASE_S + 10, killed)
    print(f"{stage}: {host} clean {took:.1f}s after kill -9 (lease {LEASE_S:g}s)")


@pytest.mark.netns
@pytest.mark.slow
def test_kill_9_with_the_default_lease(netns_net: NetnsNetwork, leftovers: Callable[[], dict[str, list[str]]],
                                       tmp_path: Path, runners: list[tuple[subprocess.Popen[bytes], Path, Path]]
                                       ) -> None:
    runners.append(start_runner(netns_net, "h1", "rate", "mid", tmp_path, lease=DEFAULT_LEASE_S))
    wait_ready(runners, "mid")
    killed = time.time()
    kill_all(runners)
    took = gone_within(leftovers, "h1", DEFAULT_LEASE_S + 10, killed)
    print(f"default lease: h1 clean {took:.1f}s after kill -9")
    # renewed every lease/3 up to the kill: the host waits out the lease from the last renewal
    assert took >= DEFAULT_LEASE_S / 2, f"cleared after {took:.1f}s: not by the lease"


# -- a stopped runner -------------------------------------------------------------------------------------------------
@pytest.mark.netns
def test_stopped_runner_loses_its_lease_and_reports_broken(
        netns_net: NetnsNetwork, leftovers: Callable[[], dict[str, list[str]]], tmp_path: Path,
        runners: list[tuple[subprocess.Popen[bytes], Path, Path]]) -> None:
    runners.append(start_runner(netns_net, "h3", "rate", "hung", tmp_path))
    wait_ready(runners, "hung")
    proc, ready, log = runners[0]
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        stopped = time.time()
        took = gone_within(leftovers, "h3", LEASE_S + 10, stopped)
        print(f"SIGSTOP: h3 clean {took:.1f}s after the runner stopped")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    Path(str(ready) + ".go").write_text("")
    assert proc.wait(timeout=60) == 3, log.read_text()
    out = log.read_text()
    assert "BROKEN" in out
    assert "lease lost" in out
    assert "h3" not in leftovers()


@pytest.mark.netns
def test_a_renewed_lease_outlives_its_length(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                             leftovers: Callable[[], dict[str, list[str]]]) -> None:
    """Renewal over the open SSH session keeps the fault; releasing it lets the host clear it."""
    h2 = netns_net.host("h2")
    keeper = LeaseKeeper(LEASE_S)
    mech = TcMechanism(ssh_h["h2"], "eth0", [PeerMatch(ip=netns_net.host("h1").address)],
                       state_dir=netns_net.state_dir(h2.netns), keeper=keeper)
    fault = Fault("h2", Level(FaultKind.RATE, 10))
    try:
        mech.apply(fault, deadline_s=600)
        start = time.time()
        # two leases long, renewed by the keeper's thread: still there, and check() is happy
        wait_for(lambda: time.time() - start > 2 * keeper.lease_s, what="two leases to pass",
                 timeout=2 * LEASE_S + 10)
        assert mech.installed()
        keeper.check()
        keeper.release(mech._lease_id)  # stop renewing without clearing: the host's timer takes over
        gone_within(leftovers, "h2", LEASE_S + 10, time.time())
    finally:
        keeper.close()
        mech.clear(fault)


@pytest.mark.netns
def test_the_hard_bound_clears_a_renewed_fault(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    """However faithfully the runner renews, the fault goes at its hard bound (the level's worst case)."""
    fired = tmp_path / "fired"
    dm = DeadMan(netns_net.direct("h3"), state_dir=netns_net.state_dir(netns_net.host("h3").netns), lease_s=30)
    keeper = LeaseKeeper(30.0, period_s=0.5)
    state = dm.arm("test-hard", mechanism="test", run=RunInfo.current(), clear_script=f"touch {fired}", after_s=3)
    assert state.lease_s == 30
    keeper.hold("hard", DeadManLease(dm, state))
    try:
        wait_for(fired.exists, what="the hard bound to clear the fault", timeout=15)
        assert time.time() >= state.deadline - 1.5
        with pytest.raises(FaultLostError, match="no longer holds"):
            keeper.check()
    finally:
        keeper.close()
        dm.disarm("test-hard")


@pytest.mark.netns
def test_sweep_at_start_removes_a_lapsed_lease_of_a_remote_runner(
        netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor], leftovers: Callable[[], dict[str, list[str]]]) -> None:
    """A runner on another machine cannot be asked whether it lives; a lapsed lease says it does not, even
    when the host's timer is gone too (so the fault would otherwise wait for its hard bound)."""
    h2 = netns_net.host("h2")
    state_dir = netns_net.state_dir(h2.netns)
    elsewhere = RunInfo("remote01", "another-runner", 1, 1)
    keeper = LeaseKeeper(LEASE_S)
    theirs = TcMechanism(ssh_h["h2"], "eth0", [PeerMatch(ip=netns_net.host("h3").address)], run=elsewhere,
                         state_dir=state_dir, keeper=keeper)
    theirs.apply(Fault("h2", Level(FaultKind.RATE, 10)), deadline_s=600)
    keeper.close()  # the remote runner is gone...
    dm = DeadMan(ssh_h["h2"], state_dir=state_dir)
    dm.stop_timer(dm.read(theirs.key))  # ...and so is the host's timer (the state file stays)
    mine = TcMechanism(ssh_h["h2"], "eth0", [PeerMatch(ip=netns_net.host("h1").address)], state_dir=state_dir)
    assert mine.sweep() == [], "swept while the lease was still running"
    def lapsed() -> FaultState | None:
        st = dm.read(theirs.key)
        return st if st is not None and st.lease_lapsed() else None

    assert wait_for(lapsed, what="the lease to lapse", timeout=LEASE_S + 15, interval=0.5).is_stale()
    removed = mine.sweep()
    assert removed == [f"{ssh_h['h2'].host}: tc qdisc 1a57: on eth0 of run remote01"], removed
    assert "h2" not in leftovers()


def test_state_file_stays_readable_by_runners_before_leases() -> None:
    """Their sweep builds FaultState(**file) and takes any file it cannot read for an orphan, removing a
    live fault: the lease and scope live beside the file (``<key>.lease``), not in it."""
    state = FaultState("tc-lo", "tc", RunInfo.current(), "tok", 1.0, "true", "setsid:1", "d", 30.0, "lab:1")
    assert set(state.to_json()) == {"key", "mechanism", "run", "token", "deadline", "clear_script", "timer",
                                    "description"}
    assert FaultState.from_json(state.to_json(), state.meta_json()) == state
    assert FaultState.from_json(state.to_json()).lease_s == 0  # a file of a runner before leases


# -- the keeper alone -------------------------------------------------------------------------------------------------
class FakeLease:
    def __init__(self, slow_s: float = 0.0) -> None:
        self.label = "fake"
        self.answer: bool | None = True
        self.slow_s = slow_s
        self.renewed_at: list[float] = []

    def renew(self) -> bool:
        threading.Event().wait(self.slow_s)  # a host that answers slowly
        self.renewed_at.append(time.monotonic())
        if self.answer is None:
            raise FaultLostError("fake", "unreachable")
        return self.answer


def test_a_slow_host_does_not_hold_up_the_others() -> None:
    keeper, slow, fast = LeaseKeeper(30.0, period_s=100), FakeLease(slow_s=2.0), FakeLease()
    keeper.hold("slow", slow)
    keeper.hold("fast", fast)
    t0 = time.monotonic()
    keeper.check()
    assert fast.renewed_at[-1] - t0 < 1.0, "renewed one after the other"
    assert slow.renewed_at[-1] - t0 >= 2.0
    keeper.close()


def test_keeper_reports_a_lease_the_host_dropped() -> None:
    keeper, lease = LeaseKeeper(30.0), FakeLease()
    keeper.hold("x", lease)
    keeper.check()
    lease.answer = False
    with pytest.raises(FaultLostError, match="no longer holds"):
        keeper.check()
    lease.answer = True
    with pytest.raises(FaultLostError):  # and it stays lost: every later cell is broken too
        keeper.check()
    keeper.release("x")  # a normal clear forgets it
    keeper.check()
    keeper.close()


def test_keeper_reports_a_gap_longer_than_the_lease() -> None:
    """A runner that could not renew for a whole lease (stopped, unreachable) cannot vouch for the fault."""
    for answer, why in ((None, "renewing failed"), (True, "runner was stopped")):
        keeper, lease = LeaseKeeper(3.0, period_s=100), FakeLease()
        keeper.hold("x", lease)
        lease.answer = answer
        keeper.check()  # a renewal that cannot tell, or succeeds, within the lease: not lost
        keeper._held["x"].last_ok -= 4  # as if the runner had been stopped for 4 s since its last renewal
        with pytest.raises(FaultLostError, match=f"not renewed for .*{why}"):
            keeper.check()
        keeper.close()


def test_the_renewer_thread_stops_when_nothing_is_held() -> None:
    keeper = LeaseKeeper(3.0)
    keeper.hold("x", FakeLease())
    thread = keeper._thread
    assert thread is not None
    assert thread.daemon
    assert thread.is_alive()
    keeper.release("x")
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_toxiproxy_halves_add_up_to_the_level() -> None:
    assert split_level(37) == (19, 18)
    assert split_level(50) == (25, 25)
    assert split_level(1) == (1, 0)
    assert split_level(0) == (0, 0)
    assert all(sum(split_level(ms)) == ms for ms in range(0, 1001))


def test_toxic_leases_lapse_by_mtime_and_by_hard_bound(tmp_path: Path) -> None:
    """The lab watchdog's view of the toxics' lease files (strict JSON: an
    infinite bound is written as null and means no bound)."""
    now = time.time()
    renewed = write_toxic_lease(tmp_path, "wb-a-", hard_deadline=now + 60, lease_s=30, label="a")
    unbounded = write_toxic_lease(tmp_path, "wb-b-", hard_deadline=math.inf, lease_s=30, label="b")
    write_toxic_lease(tmp_path, "wb-c-", hard_deadline=now - 1, lease_s=30, label="c")
    assert renewed.renew()
    assert unbounded.renew()
    assert [(prefix, why) for _, prefix, why in expired_toxic_leases(tmp_path, now)] == [
        ("wb-c-", "hard bound passed")]
    later = [(prefix, why.split(" (")[0]) for _, prefix, why in expired_toxic_leases(tmp_path, time.time() + 31)]
    assert later == [(p, "lease of 30s lapsed") for p in ("wb-a-", "wb-b-", "wb-c-")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wb-a-.json", "wb-b-.json", "wb-c-.json"]


# -- state files: the lease fields, and the inventory --------------------------------------------------------------
@pytest.mark.netns
def test_faults_list_and_clear_on_a_host(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                         leftovers: Callable[[], dict[str, list[str]]]) -> None:
    h1 = netns_net.host("h1")
    state_dir = netns_net.state_dir(h1.netns)
    dead = RunInfo("deadbeef", "elsewhere", 1, 1)
    TcMechanism(ssh_h["h1"], "eth0", [PeerMatch(ip=netns_net.host("h2").address)], run=dead,
                state_dir=state_dir).apply(Fault("h1", Level(FaultKind.RATE, 10)), deadline_s=600)
    netns_net.direct("h1").run(["nft", "add", "table", "inet", "wanbench_orphan_eth0"])
    found = host_faults(ssh_h["h1"], state_dir)
    lines = [f.line for f in found]
    assert len(found) == 2, lines
    assert any("tc qdisc 1a57: on eth0" in ln and "run deadbeef" in ln for ln in lines), lines
    assert any("wanbench_orphan_eth0" in ln and "no state file" in ln for ln in lines), lines
    assert clear_found(ssh_h["h1"], found, state_dir=state_dir, dry_run=True)[0].startswith("would remove")
    assert "h1" in leftovers()
    done = clear_found(ssh_h["h1"], found, state_dir=state_dir)
    assert len(done) == 2
    assert "h1" not in leftovers()
    assert DeadMan(ssh_h["h1"], state_dir=state_dir).states() == []


@pytest.mark.netns
def test_faults_cli_over_ssh(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                             leftovers: Callable[[], dict[str, list[str]]], tmp_path: Path) -> None:
    """`python -m wanbench faults list|clear --cluster FILE` on a one-host TiDB topology (h1)."""
    h1 = netns_net.host("h1")
    state_dir = netns_net.state_dir(h1.netns)
    (tmp_path / "topology.yaml").write_text(
        "global: {user: root, ssh_port: 22}\n"
        f"pd_servers: [{{host: {h1.address}}}]\ntidb_servers: [{{host: {h1.address}}}]\n"
        f"tikv_servers: [{{host: {h1.address}}}]\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "wanbench_cluster: 1\nname: leasetest\ntopology: topology.yaml\n"
        f"ssh: {{user: root, key: {netns_net.client_key}, known_hosts: {netns_net.known_hosts}, connect_timeout: 5}}\n"
        "sql: {user: root}\n")
    dead = RunInfo("deadbeef", "elsewhere", 1, 1)
    TcMechanism(ssh_h["h1"], "eth0", [PeerMatch(ip=netns_net.host("h2").address)], run=dead,
                state_dir=state_dir).apply(Fault("h1", Level(FaultKind.RATE, 10)), deadline_s=600)

    def cli(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "wanbench", "faults", *args, "--cluster", str(cluster),
                              "--state-dir", state_dir], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    listed = cli("list")
    assert f"{h1.address}: tc qdisc 1a57: on eth0 [live] tc-eth0" in listed, listed  # no lease, runner elsewhere
    assert "found 1 fault(s) on 1 host(s)" in listed
    assert "would remove" in cli("clear", "--dry-run")
    assert "h1" in leftovers()
    cleared = cli("clear")
    assert "removed 1 fault(s) on 1 host(s)" in cleared, cleared
    assert "h1" not in leftovers()
    assert f"{h1.address}: no wanbench fault" in cli("list")


# -- no orphan load ----------------------------------------------------------------------------------------------------
def test_load_generator_dies_with_its_runner(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    code = ("import subprocess, sys, time; from wanbench.procs import load_preexec; "
            "p = subprocess.Popen(['sleep', '600'], preexec_fn=load_preexec()); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the child to start", timeout=20)
        child = int(pidfile.read_text())
        assert proc_start_time(child) is not None
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
    wait_for(lambda: proc_start_time(child) is None, what="the load generator to die with its parent", timeout=5)
    assert load_preexec([0]) is not None
