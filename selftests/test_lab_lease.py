"""Lab faults on a lease: ``kill -9`` of the runner at each stage of delay (Toxiproxy), rate (tc on
``lo``) and loss (nft) leaves nothing; a stopped runner loses its lease and reports broken; `lab down`
removes and reports what a killed runner without its watchdog left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wanbench.executors.local import LocalExecutor
from wanbench.faults.deadman import STATE_DIR, DeadMan
from wanbench.profiles.lab.servers import Lab
from wanbench.wait import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PORT_BASE = int(os.environ.get("WANBENCH_LEASE_TEST_PORT_BASE", "30000"))
LEASE_S = 5.0
Runner = tuple[subprocess.Popen[bytes], Path, Path]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("leaselab"), PORT_BASE, "shared")
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def runners() -> Iterator[list[Runner]]:
    started: list[Runner] = []
    try:
        yield started
    finally:
        for proc, _, _ in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)


def start(lab: Lab, kind: str, stage: str, tmp: Path, *, lease: float = LEASE_S, watchdog: bool = True) -> Runner:
    ready, log = tmp / f"ready-{kind}", tmp / f"runner-{kind}.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "selftests.lease_runner", "lab", kind, stage, str(lease), str(ready),
             str(lab.run_dir), str(lab.port_base), "1" if watchdog else "0"],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=sink, stderr=subprocess.STDOUT,
        )
    return proc, ready, log


def wait_ready(runner: Runner, stage: str) -> None:
    proc, ready, log = runner
    wait_for(lambda: ready.exists() or proc.poll() is not None, what=f"the runner to reach {stage}", timeout=90)
    assert proc.poll() is None, log.read_text()
    assert ready.read_text() == stage


def leftovers(lab: Lab, pid: int) -> list[str]:
    """What runner ``pid`` left: toxics of this lab, its tc/nft rules on lo, its state files."""
    run_id = f"lab{pid}"
    left = [f"toxic {n} on {p}" for p, n in lab.toxiproxy.our_toxics(f"wb-{pid}-")]
    states = DeadMan(LocalExecutor(), state_dir=STATE_DIR).states()
    left += [f"state {s.key}" for s in states if s.run.run_id == run_id]
    others_tc = any(s.key == "tc-lo" and s.run.run_id != run_id for s in states)
    lo = json.loads(LocalExecutor().run(["tc", "-j", "qdisc", "show", "dev", "lo"]).stdout or "[]")
    if not others_tc and any(q.get("root") and q.get("handle") == "1a57:" for q in lo):
        left.append("tc 1a57: on lo")
    tables = LocalExecutor().run(["nft", "list", "tables"]).stdout
    if f"wanbench_{run_id}_lo" in tables:
        left.append(f"nft wanbench_{run_id}_lo")
    return left


@pytest.mark.parametrize("stage", ["applying", "verifying", "mid", "clearing"])
@pytest.mark.parametrize("kind", ["delay", "rate", "loss"])
def test_kill_9_at_each_stage(kind: str, stage: str, lab: Lab, tmp_path: Path, runners: list[Runner]) -> None:
    runners.append(start(lab, kind, stage, tmp_path))
    wait_ready(runners[0], stage)
    proc = runners[0][0]
    assert leftovers(lab, proc.pid), "nothing in place at this stage: the test proves nothing"
    killed = time.time()
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    wait_for(lambda: not leftovers(lab, proc.pid), what=f"{kind} faults to go after kill -9 while {stage}",
             timeout=LEASE_S + 10, interval=0.1, max_interval=0.3)
    print(f"lab {kind} {stage}: clean {time.time() - killed:.1f}s after kill -9")


@pytest.mark.parametrize("kind", ["delay", "rate"])
def test_stopped_runner_reports_broken(kind: str, lab: Lab, tmp_path: Path, runners: list[Runner]) -> None:
    runners.append(start(lab, kind, "hung", tmp_path))
    wait_ready(runners[0], "hung")
    proc, ready, log = runners[0]
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        stopped = time.time()
        wait_for(lambda: not leftovers(lab, proc.pid), what="the lease to lapse and the fault to go",
                 timeout=LEASE_S + 10, interval=0.2, max_interval=0.5)
        print(f"lab {kind} SIGSTOP: clean {time.time() - stopped:.1f}s after the runner stopped")
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    Path(str(ready) + ".go").write_text("")
    assert proc.wait(timeout=60) == 3, log.read_text()
    assert "BROKEN" in log.read_text()


def test_lab_down_removes_what_a_killed_runner_left(lab: Lab, tmp_path: Path, runners: list[Runner]) -> None:
    """No watchdog, a long lease: only `lab down` (or the next session's sweep) can remove these. Last in
    the module: it stops the lab."""
    for kind in ("rate", "loss", "delay"):  # one after the other: each verifies with the others in place
        runners.append(start(lab, kind, "mid", tmp_path, lease=120, watchdog=False))
        wait_ready(runners[-1], "mid")
    for proc, _, _ in runners:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    left = {r[0].pid: leftovers(lab, r[0].pid) for r in runners}
    assert all(left.values()), left
    base = ["--dir", str(lab.run_dir), "--port-base", str(lab.port_base)]
    listed = subprocess.run([sys.executable, "-m", "wanbench", "faults", "list", *base], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, check=True).stdout
    assert "toxic wb-" in listed, listed
    assert "tc qdisc 1a57: on lo" in listed, listed
    assert "nft table inet wanbench_lab" in listed, listed
    down = subprocess.run([sys.executable, "-m", "wanbench", "lab", "down", *base], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True).stdout
    print(down)
    assert "removed toxic wb-" in down
    assert "removed localhost: tc qdisc 1a57: on lo" in down
    assert "removed localhost: nft table inet wanbench_lab" in down
    assert not any(leftovers_after(pid) for pid in left), [leftovers_after(pid) for pid in left]


def leftovers_after(pid: int) -> list[str]:
    """``leftovers`` once the lab (and its Toxiproxy) is down: the host's rules and state files only."""
    run_id = f"lab{pid}"
    states = DeadMan(LocalExecutor(), state_dir=STATE_DIR).states()
    left = [s.key for s in states if s.run.run_id == run_id]
    if f"wanbench_{run_id}_lo" in LocalExecutor().run(["nft", "list", "tables"]).stdout:
        left.append("nft")
    lo = json.loads(LocalExecutor().run(["tc", "-j", "qdisc", "show", "dev", "lo"]).stdout or "[]")
    if not any(s.key == "tc-lo" for s in states) and any(q.get("handle") == "1a57:" for q in lo):
        left.append("tc 1a57: on lo")
    return left
