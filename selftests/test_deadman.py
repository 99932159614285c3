"""Dead-man timers on namespace hosts: faults clear themselves when the runner dies.

In the ``netns`` scope, beside the ``machine`` scope's loaded cores (selftests/conftest.py): the
state lives in each namespace's own ``/run/wanbench/netns-*`` directory, and the timers leave
room for a busy machine: a runner has 30 s to apply both faults, and the first of two timers
armed back to back runs 8 s, so the second is armed before it fires."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.deadman import DeadMan, FaultState, RunInfo
from wanbench.netns import NetnsNetwork
from wanbench.wait import wait_for

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parent.parent

#: a wanbench runner that installs a rate cap (tc) and packet loss (nft) over SSH and then hangs
RUNNER = r"""
import sys, time
from pathlib import Path
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.faults.nft import NftMechanism
from wanbench.faults.tc import PeerMatch, TcMechanism
address, peer, key, known_hosts, state_dir, deadline, ready = sys.argv[1:8]
ex = SSHExecutor(address, user="root", key_filename=key, known_hosts=known_hosts, ssh_config="/nonexistent")
peers = [PeerMatch(ip=peer)]
TcMechanism(ex, "eth0", peers, state_dir=state_dir).apply(Fault("h1", Level(FaultKind.RATE, 10)),
                                                          deadline_s=float(deadline))
NftMechanism(ex, peers, interface="eth0", state_dir=state_dir).apply(Fault("h1", Level(FaultKind.LOSS, 1)),
                                                                     deadline_s=float(deadline))
Path(ready).write_text("applied")
time.sleep(3600)  # a hung test: only SIGKILL ends it
"""


@pytest.mark.slow
def test_fault_clears_itself_after_runner_is_killed(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                                    leftovers: Callable[[], dict[str, list[str]]],
                                                    tmp_path: Path) -> None:
    h1, h2 = netns_net.host("h1"), netns_net.host("h2")
    ready, log = tmp_path / "ready", tmp_path / "runner.log"
    deadline_s = 30.0
    with log.open("wb") as sink:
        runner = subprocess.Popen(
            [sys.executable, "-c", RUNNER, h1.address, h2.address, str(netns_net.client_key),
             str(netns_net.known_hosts), netns_net.state_dir(h1.netns), str(deadline_s), str(ready)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: ready.exists() or runner.poll() is not None, what="the runner to apply its faults",
                 timeout=120)
        assert runner.poll() is None, log.read_text()
        killed_at = time.time()
        runner.send_signal(signal.SIGKILL)
        runner.wait(timeout=10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait(timeout=10)
    # the runner is gone, its faults are not (yet)
    found = leftovers()
    assert set(found) == {"h1"}, found
    assert len(found["h1"]) == 3, found  # qdisc, nft table, state files
    states = [FaultState.from_json(json.loads(p.read_text()))
              for p in Path(netns_net.state_dir(h1.netns)).glob("*.json")]
    assert len(states) == 2  # tc and nft
    assert all(s.deadline > killed_at for s in states), "killed after the deadline: the test proves nothing"
    # after the dead-man's deadline everything of that run is gone from the host, with no runner around
    last = max(s.deadline for s in states)
    wait_for(lambda: not leftovers(), what="the dead-man timers to clear the faults",
             timeout=last - time.time() + 30, interval=0.5)
    assert time.time() >= min(s.deadline for s in states) - 1.5  # cleared by the timer, not early by someone else
    out = ssh_h["h1"].run(["tc", "qdisc", "show", "dev", "eth0"]).stdout
    assert "1a57:" not in out
    assert "wanbench_" not in ssh_h["h1"].run(["nft", "list", "tables"]).stdout


def test_disarm_stops_the_timer(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor], tmp_path: Path,
                                alive: Callable[[int], bool]) -> None:
    fired = tmp_path / "fired"
    dm = DeadMan(ssh_h["h2"], state_dir=netns_net.state_dir(netns_net.host("h2").netns))
    state = dm.arm("test-disarm", mechanism="test", run=RunInfo.current(), clear_script=f"touch {fired}",
                   after_s=60)
    pid = int(state.timer.split(":")[1])
    assert alive(pid)
    assert dm.read("test-disarm") == state
    dm.disarm("test-disarm")
    wait_for(lambda: not alive(pid), what="the timer process to end", timeout=15)
    assert not fired.exists()
    assert dm.read("test-disarm") is None
    dm.disarm("test-disarm")  # nothing there: fine


def test_timer_clears_only_while_its_token_is_current(netns_net: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                                     tmp_path: Path, alive: Callable[[int], bool]) -> None:
    """A timer that outlives its fault (state rewritten by a newer apply) must not clear the newer fault."""
    fired, fired2 = tmp_path / "old", tmp_path / "new"
    # driven directly in the namespace (no SSH round trips) so the old timer cannot fire before the re-arm
    dm = DeadMan(netns_net.direct("h3"), state_dir=netns_net.state_dir(netns_net.host("h3").netns))
    old = dm.arm("test-token", mechanism="test", run=RunInfo.current(), clear_script=f"touch {fired}", after_s=8)
    newer = dm.arm("test-token", mechanism="test", run=RunInfo.current(), clear_script=f"touch {fired2}",
                   after_s=60)
    assert time.time() < old.deadline - 1, "the machine is too slow: the old timer may have fired already"
    wait_for(lambda: not alive(int(old.timer.split(":")[1])), what="the old timer to fire", timeout=30)
    assert not fired.exists()
    assert dm.read("test-token") == newer
    dm.disarm("test-token")
    assert not fired2.exists()
