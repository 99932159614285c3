"""Selftest-only fixtures: a session-wide network of namespace hosts with real sshd,
and the rule that splits the self-tests over xdist workers.

Loaded only for selftests/; the performance suite never sees these.

``scripts/selftest`` runs with ``-n 2`` and three kinds of tests:

* ``machine``: every test that uses the machine as a whole (a lab's servers,
  qdiscs and nft tables on ``lo``, the sweep of dead runs' faults a lab
  session does at start, processes found by scanning ``/proc``, timing that a
  second lab would distort): by marker (``lab``) plus the modules listed in
  ``MACHINE_MODULES``. ONE scheduling scope, so they run one after another on
  one worker, as they did serially.
* ``netns``: the tests of network-namespace hosts that start no lab
  (``netns`` marker without ``lab``): their qdiscs, nft tables, sshd and
  dead-man state live in namespaces of their own, named by the worker's PID.
  A second scope, which xdist hands to the other worker first (its scopes are
  dealt largest first), so it runs beside the machine scope.
* everything else (unit and pytester tests): a scope per test, taken by
  whichever worker is free.

``MachineGroupScheduling`` does the split; a new test with the ``lab`` or
``netns`` marker lands in its group without anyone remembering.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from selftests.labutil import netns_missing, pid_alive
from wanbench.executors.ssh import SSHExecutor
from wanbench.netns import NetnsNetwork

#: markers whose tests use the machine as a whole
MACHINE_MARKERS = ("lab", "netns")
#: modules whose tests use the machine as a whole beyond their markers: they start their own
#: Prometheus on fixed ports, kill and look for processes machine-wide, or share localhost's state
MACHINE_MODULES = frozenset({
    "test_evidence_tidb.py", "test_procs.py", "test_scratch.py", "test_sysproc.py", "test_load_hosts.py",
    # `Lab.down()`, as `lab down` does, clears every dead run's tc/nft leftovers on this machine's lo
    "test_lab_sockets.py",
    # its hosts keep their dead-man state to themselves (private_run), but it runs a tidb-server and
    # sysbench flat out on both cores, which timing in the machine scope would feel
    "test_tidb_live_netns.py",
})
#: the tests `scripts/selftest --quick` leaves out (on top of the machine group): seconds each
SLOW_MARKER = "slow"


def is_machine_wide(item: pytest.Item) -> bool:
    """Lab, netns or a listed module: left out by ``--quick``."""
    return item.path.name in MACHINE_MODULES or any(item.get_closest_marker(m) for m in MACHINE_MARKERS)


def scope_of(item: pytest.Item) -> str | None:
    """``machine``, ``netns`` or None (a scope of its own)."""
    if item.path.name in MACHINE_MODULES or item.get_closest_marker("lab"):
        return "machine"
    if item.get_closest_marker("netns"):
        return "netns"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput and workerinput.get(_GROUPS_INPUT):  # tell the controller's scheduler (MachineGroupScheduling)
        out = Path(workerinput[_GROUPS_INPUT]) / f"scopes-{workerinput.get('workerid', 'gw')}.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({i.nodeid: scope for i in items if (scope := scope_of(i))}))
        tmp.replace(out)
    if os.environ.get("WANBENCH_SELFTEST_QUICK") == "1":  # scripts/selftest --quick
        keep = [i for i in items if not is_machine_wide(i) and not i.get_closest_marker(SLOW_MARKER)]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


_GROUPS_INPUT = "wanbench_selftest_groups"


class MachineGroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduling with the ``machine`` and ``netns`` scopes and
    every other test a scope of its own. (pytest-xdist's ``--dist loadgroup``
    renames node ids through ``Item._nodeid``, which pytest 9 no longer has,
    so its groups are silently ignored.) The workers write each test's scope
    as they collect; the scopes are read once collection is complete. xdist
    deals the largest scopes first, one to each worker: ``machine`` to one,
    ``netns`` to the other."""

    def __init__(self, config: pytest.Config, log: Any, groups_dir: str) -> None:
        super().__init__(config, log)
        self.groups_dir = groups_dir
        self._scopes: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._scopes is None:
            self._scopes = {}
            for path in Path(self.groups_dir).glob("scopes-*.json"):
                self._scopes.update(json.loads(path.read_text()))
        return self._scopes.get(nodeid, nodeid)


_GROUPS_DIR = pytest.StashKey[str]()


_XDIST_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        # A pytest that a self-test starts (from a fixture of any scope) would inherit
        # the worker's environment and take itself for an xdist worker: pytest-benchmark
        # then disables itself and warns at exit, an error under filterwarnings=error.
        # xdist reads the worker's identity from config.workerinput, not from these.
        for name in _XDIST_ENV:
            os.environ.pop(name, None)
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        config.stash[_GROUPS_DIR] = tempfile.mkdtemp(prefix="wanbench-selftest-groups-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _GROUPS_DIR in config.stash:
        shutil.rmtree(config.stash[_GROUPS_DIR], ignore_errors=True)


def pytest_configure_node(node: Any) -> None:
    node.workerinput[_GROUPS_INPUT] = node.config.stash[_GROUPS_DIR]


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return MachineGroupScheduling(config, log, config.stash[_GROUPS_DIR])


@pytest.fixture(scope="session")
def netns_net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetnsNetwork]:
    """Three hosts h1..h3 on one bridge, each with its own sshd; the runner sits at ``.gateway``."""
    reason = netns_missing("tc", "nft", "python3")
    if reason:
        pytest.skip(reason)
    with NetnsNetwork(tmp_path_factory.mktemp("netns"), hosts=3) as net:
        yield net


@pytest.fixture
def ssh_h(netns_net: NetnsNetwork) -> Iterator[dict[str, SSHExecutor]]:
    """One SSH executor per host, closed after the test."""
    execs = {h.name: netns_net.ssh(h.name) for h in netns_net.hosts}
    try:
        yield execs
    finally:
        for ex in execs.values():
            ex.close()


def _leftovers(net: NetnsNetwork, name: str) -> list[str]:
    """What wanbench left on a host: our qdiscs, wanbench_* tables, state files (empty = clean)."""
    host = net.host(name)
    d = net.direct(name)
    left: list[str] = []
    qd = "".join(d.run(["tc", "qdisc", "show", "dev", dev]).stdout for dev in (host.interface, "lo"))
    if "1a57:" in qd:
        left.append(f"qdisc: {qd.strip()}")
    tables = d.run(["nft", "list", "tables"]).stdout
    if "wanbench_" in tables:
        left.append(f"nft: {tables.strip()}")
    sd = Path(net.state_dir(host.netns))
    if sd.is_dir() and any(sd.iterdir()):
        left.append(f"state: {sorted(p.name for p in sd.iterdir())}")
    return left


@pytest.fixture
def leftovers(netns_net: NetnsNetwork) -> Callable[[], dict[str, list[str]]]:
    """Call it to get what wanbench left on each host (our qdiscs, wanbench_* tables, state files)."""

    def check() -> dict[str, list[str]]:
        return {h.name: found for h in netns_net.hosts if (found := _leftovers(netns_net, h.name))}

    return check


@pytest.fixture
def alive() -> Callable[[int], bool]:
    return pid_alive


#: the self-tests that run a live tidb-server (built by scripts/setup --tidb): CI's TiDB lane
TIDB_MODULES = frozenset({"test_tidb_lab.py", "test_tidb_live_netns.py"})


def _module_of(report: Any) -> str:
    return str(report.nodeid).split("::", 1)[0].rsplit("/", 1)[-1]


def _lane_of(report: Any) -> str:
    if _module_of(report) in MACHINE_MODULES or "lab" in report.keywords:
        return "machine"
    return "netns" if "netns" in report.keywords else "other"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Each lane's test time (setup, call and teardown summed), and the TiDB lane's: what CI's length is made of."""
    times: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for r in reports:
            if not isinstance(r, pytest.TestReport):
                continue
            times[_lane_of(r)] = times.get(_lane_of(r), 0.0) + r.duration
            if _module_of(r) in TIDB_MODULES:
                times["TiDB"] = times.get("TiDB", 0.0) + r.duration
    if times:
        lanes = ", ".join(f"{k} {v:.0f} s" for k, v in sorted(times.items()) if k != "TiDB")
        tidb = f"; the TiDB lane ({', '.join(sorted(TIDB_MODULES))}) {times['TiDB']:.0f} s" if "TiDB" in times else ""
        terminalreporter.write_line(f"[selftest] test time per lane: {lanes}{tidb}")
