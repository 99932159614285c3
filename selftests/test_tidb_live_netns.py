"""The TiDB profile end to end, on a live tidb-server (issue #30, item 4).

One namespace host ``wb<pid>l-h1`` (198.18.66.0/24; a killed run's is swept by the next) with its own sshd runs a
real tidb-server (``bin/tidb-server``, built by ``scripts/setup --tidb``;
storage in-process) bound to the host's address, and, because a tiup
topology has a PD and the profile asks it who leads, a PD stand-in that
answers from recorded PD v8.5 responses (``selftests/fake_pd.py``: PD cannot
run here). A tiup ``topology.yaml`` and a wanbench cluster file describe it as
a user would; the SQL user is created on the tidb-server with a password
taken from an environment variable. The suite then runs as a user runs it, in
a subprocess with a HOME of its own (no ``~/.ssh/config``, no ``~/.tiup``):

* ``--dry-run`` of the rtt, bandwidth, loss and availability families prints
  every command per host and changes nothing;
* bandwidth and loss faults on TiDB are applied over SSH (seen with tc and
  nft run in the host's own namespaces while they are in place), verified on
  the wire (the cell's evidence), and gone afterwards;
* ``kill -9`` of the runner under a bandwidth fault: the host's dead-man
  timer removes it within the lease, and nothing of the run is left there;
* ``rtt`` stops before anything is applied, naming the missing netem;
* the census: KV requests and statements per operation counted by the
  tidb-server's own ``/metrics`` at each window's edges, with no Prometheus.

Each host's sshd sees a ``/run/wanbench`` of its own (``private_run``), as a
real host has, so the run keeps its default state directory and shares no
dead-man state with runs on this machine. Checks look at the host directly
(``nsenter`` into its sshd's namespaces), not through the SSH path under test.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from selftests.labutil import ROOT, load_results, netns_missing, suite_cmd
from wanbench import netns
from wanbench.errors import InfrastructureError
from wanbench.faults.nft import PROBE_TABLE_PREFIX
from wanbench.netns import NetnsNetwork
from wanbench.procs import log_tail, stop_child
from wanbench.profiles.lab.layout import socket_path
from wanbench.profiles.lab.tidb import TIDB_BINARY
from wanbench.sql import connect as sql_connect
from wanbench.wait import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.slow]

OCTET = 66  # 198.18.66.0/24: this module's range (test_tidb_netns.py has 64, the fault tests 100+)
PASSWORD_ENV = "WBLIVE_TIDB_PASSWORD"
SQL_USER = "bench"
TIDB_PORT, STATUS_PORT, PD_PORT = 4000, 10080, 2379


def _skip_reason() -> str | None:
    missing = netns_missing("tc", "nft", "nsenter", "sysbench", "python3")
    if missing:
        return missing
    if not TIDB_BINARY.exists():
        if os.environ.get("CI") == "true":  # CI builds it (.ci/run): missing there is a failure, not a skip
            pytest.fail(f"{TIDB_BINARY} is missing: .ci/run must run scripts/setup --tidb")
        return "tidb-server is not built (scripts/setup --tidb)"
    return None


@dataclass
class Live:
    """The namespace host, its servers, and the files a user would have written."""

    net: NetnsNetwork
    address: str
    password: str = field(repr=False)  # a failing assertion prints the Live: never its password
    cluster_file: Path
    home: Path
    procs: dict[str, subprocess.Popen[bytes]]

    def env(self) -> dict[str, str]:
        """A user's shell: the password exported, a HOME of its own (no ~/.ssh/config, no ~/.tiup), and
        scratch space in the module's directory (a killed run's goes with it)."""
        return {**os.environ, "HOME": str(self.home), "TMPDIR": str(self.home), PASSWORD_ENV: self.password}

    def suite(self, *args: str) -> list[str]:
        return suite_cmd(*args, "--cluster", str(self.cluster_file), "--baseline-dir", str(self.home / "store"),
                         "-p", "no:randomly")

    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.suite(*args), cwd=ROOT, env=self.env(), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def host(self) -> Any:
        """The host as its sshd (and so a dead-man timer) sees it: not through the SSH path under test."""
        return self.net.host_view("h1")

    def faults_on_host(self) -> dict[str, str]:
        """What of wanbench is on the host now: our root qdisc, wanbench_* tables, state files, timers."""
        ex = self.host()
        out: dict[str, str] = {}
        qd = ex.run(["tc", "qdisc", "show", "dev", "eth0"]).stdout
        if "1a57:" in qd:
            out["qdisc"] = qd.strip()
        tables = ex.run(["nft", "list", "tables"]).stdout
        if "wanbench_" in tables:
            out["nft"] = tables.strip()
        state = ex.run(["sh", "-c", "ls -A /run/wanbench"]).stdout.strip()
        if state:
            out["state"] = state
        timers = [pid for pid in _netns_pids(self.net.host("h1").netns) if "wanbench-deadman" in _cmdline(pid)]
        if timers:
            out["timers"] = " ".join(map(str, timers))
        return out


def _netns_pids(ns: str) -> list[int]:
    return [int(p) for p in netns._sh("ip", "netns", "pids", ns, check=False).stdout.split()]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _start(name: str, argv: list[str], workdir: Path, procs: dict[str, subprocess.Popen[bytes]],
           **kwargs: Any) -> subprocess.Popen[bytes]:
    log = open(workdir / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,  # noqa: S603
                                start_new_session=True, **kwargs)
    finally:
        log.close()
    procs[name] = proc
    return proc


def _stop(procs: dict[str, subprocess.Popen[bytes]]) -> None:
    for proc in procs.values():  # only the processes this module started, by PID
        stop_child(proc)


def _admin(address: str, *statements: str) -> None:
    conn = sql_connect(host=address, port=TIDB_PORT, user="root", password="", timeout=5)
    try:
        cur = conn.cursor()
        for st in statements:
            cur.execute(st)
    finally:
        conn.close()


def _write_files(workdir: Path, net: NetnsNetwork, address: str) -> Path:
    """The files a user has: tiup's topology.yaml and a wanbench cluster file next to it (docs/tidb.md)."""
    (workdir / "topology.yaml").write_text(textwrap.dedent(f"""\
        # tiup cluster deploy wblive v8.5.3 topology.yaml
        global:
          user: root
          ssh_port: 22
          deploy_dir: /tidb-deploy
          data_dir: /tidb-data
        pd_servers:
          - host: {address}
        tidb_servers:
          - host: {address}
            port: {TIDB_PORT}
            status_port: {STATUS_PORT}
        """))
    cluster = workdir / "wblive.wanbench.yaml"
    cluster.write_text(textwrap.dedent(f"""\
        wanbench_cluster: 1
        name: wblive
        topology: topology.yaml
        sql:
          user: {SQL_USER}
          password_env: {PASSWORD_ENV}
          database: sbtest
          endpoints: tidb
        ssh:
          user: root
          port: 22
          key: {net.client_key}
          known_hosts: {net.known_hosts}
          connect_timeout: 5
        load_host: {net.gateway}
        """))
    return cluster


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    workdir = tmp_path_factory.mktemp("wblive")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    # named after this process (wb<pid>l-h1: the session's own network in selftests/conftest.py is
    # wb<pid>-h1), so that a killed run's network is swept by the next; the range is this module's own
    with NetnsNetwork(workdir / "net", hosts=1, private_run=True, tag="l", octet=OCTET) as net:
        try:
            h = net.host("h1")
            (workdir / "tidb").mkdir()
            (workdir / "tidb.toml").write_text(  # every file of tidb-server's in workdir, none in /tmp
                f'temp-dir = "{workdir}/tidb-tmp"\ntmp-storage-path = "{workdir}/tidb-tmp-storage"\n'
                f'socket = "{socket_path(workdir / "tidb.sock")}"\n'
                f'[log]\nlevel = "warn"\nslow-query-file = "{workdir}/tidb-slow.log"\n')
            tidb = _start("tidb-server", [
                "ip", "netns", "exec", h.netns, str(TIDB_BINARY), "--store=unistore",
                f"--path={workdir / 'tidb'}", f"--config={workdir / 'tidb.toml'}", f"--host={h.address}",
                f"-P={TIDB_PORT}", f"--status-host={h.address}", f"--status={STATUS_PORT}",
                f"--log-file={workdir / 'tidb.log'}"], workdir, procs, cwd=workdir)  # its slow log goes there
            _start("pd", ["ip", "netns", "exec", h.netns, sys.executable, "-m", "selftests.fake_pd", h.address,
                          str(PD_PORT)], workdir, procs, cwd=ROOT)

            def answers() -> bool:
                if tidb.poll() is not None:
                    raise InfrastructureError(f"tidb-server exited {tidb.returncode}: "
                                              f"{log_tail(workdir / 'tidb-server.out')}")
                _admin(h.address, "SELECT 1")
                return True

            wait_for(answers, what=f"tidb-server on {h.address}:{TIDB_PORT}", timeout=180,
                     transient=(Exception,), hint=f"log: {log_tail(workdir / 'tidb.log')}")
            password = secrets.token_urlsafe(12)
            _admin(h.address, f"CREATE USER '{SQL_USER}'@'%' IDENTIFIED BY '{password}'",
                   f"GRANT ALL ON *.* TO '{SQL_USER}'@'%'", "CREATE DATABASE IF NOT EXISTS sbtest")
            home = workdir / "home"
            (home / ".ssh").mkdir(parents=True)
            yield Live(net, h.address, password, _write_files(workdir, net, h.address), home, procs)
        finally:
            _stop(procs)


# -- watching the host while a run is under way ---------------------------------------------------------------------

class Watcher:
    """Polls the host directly (not over SSH) while a run is under way and keeps every distinct thing it
    saw: tc's qdiscs, classes and filters on eth0, nft's wanbench tables, the dead-man state files."""

    def __init__(self, live: Live, interval: float = 0.3) -> None:
        self.live = live
        self.interval = interval
        self.seen: dict[str, set[str]] = {"tc": set(), "nft": set(), "state": set()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="wblive-watcher", daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        ex = self.live.host()
        while True:
            tc = "".join(ex.run(["tc", *what, "show", "dev", "eth0"], check=False).stdout
                         for what in (["qdisc"], ["class"], ["filter"]))
            if "1a57:" in tc:
                self.seen["tc"].add(tc)
            # Not the capability probe's throwaway table (a chain with no hook, gone within the probe's one
            # shell call): the 0.3 s poll can catch it, and it is no fault (the session sweep skips it too).
            listed = ex.run(["nft", "list", "tables"], check=False).stdout.splitlines()
            names = [ln.split()[-1] for ln in listed if "wanbench_" in ln]
            tables = [t for t in names if not t.startswith(PROBE_TABLE_PREFIX)]
            for t in tables:  # named: a table swept between the two reads still says which it was
                listing = ex.run(["nft", "list", "table", "inet", t], check=False).stdout
                self.seen["nft"].add(f"{t}: {listing}")
            state = ex.run(["sh", "-c", "ls -A /run/wanbench"], check=False).stdout.split()
            self.seen["state"].update(state)
            if self._stop.wait(self.interval):  # the polling period, not a wait for a condition
                return


def _cells(path: Path) -> dict[str, dict[str, Any]]:
    return {c["test_id"]: c for c in load_results(path)}


def _statements(live: Live) -> float:
    """Statements the tidb-server has executed (its own /metrics, read directly)."""
    import urllib.request

    with urllib.request.urlopen(f"http://{live.address}:{STATUS_PORT}/metrics", timeout=10) as resp:  # noqa: S310
        text = resp.read().decode()
    return sum(float(m[1]) for m in re.finditer(r"^tidb_executor_statement_total\{[^}]*\} (\S+)$", text, re.M))


# -- the tests ------------------------------------------------------------------------------------------------------

def test_dry_run_prints_every_command_and_changes_nothing(live: Live) -> None:
    """README step 3 on this cluster, for every family a TiDB fault belongs to."""
    before = _statements(live)
    with Watcher(live) as watch:
        res = live.run("tests/rtt", "tests/bandwidth", "tests/loss", "tests/availability", "--scenario",
                       "tidb,heartbeat_tidb", "--rtt", "0,50ms", "--bandwidth", "0,5mbit", "--loss", "0,1%",
                       "--concurrency", "4", "--dry-run", "-rs")
    out = res.stdout
    assert res.returncode == 0, out[-4000:] + res.stderr[-2000:]
    assert "9 skipped" in out, out[-2000:]
    a, gw = live.address, live.net.gateway
    for kind, level in (("delay", "50ms"), ("rate", "5mbit"), ("loss", "1%")):
        assert f"# dry run: tidb {kind}={level} on 1 host(s); nothing below has been run" in out
    assert out.count(f"== {a} (ssh root@{a} port 22; the SSH port is never matched) ==") == 3 + 3  # + 3 outages
    assert out.count(f"replies from :{TIDB_PORT} to clients") == 3
    assert out.count(f"filter add dev DEV parent 1a57: protocol ip prio 2 u32 match ip dst {gw}/32 match ip sport "
                     f"{TIDB_PORT} 0xffff flowid 1a57:10") == 3
    assert "qdisc add dev DEV parent 1a57:10 handle 10: bfifo limit 625000" in out  # 5 Mbit/s for 1 s
    assert f'oifname "DEV" ip daddr {gw} meta l4proto {{ tcp, udp }} th sport {TIDB_PORT} jump loss' in out
    assert "# delay needs sch_netem in this host's kernel" in out
    for kind in ("partition", "pause", "restart"):
        assert f"dry run: printed the commands for heartbeat_tidb {kind}; nothing applied" in out
    assert watch.seen == {"tc": set(), "nft": set(), "state": set()}, "a dry run changed the host"
    assert _statements(live) == before, "a dry run sent SQL to the tidb-server"
    assert live.faults_on_host() == {}


def test_bandwidth_and_loss_on_tidb_applied_verified_and_removed(live: Live, tmp_path: Path) -> None:
    """Both families run for real: the rules seen on the host while in place are the planned ones, the
    cells' evidence shows them read back and measured on the wire, nothing is left, and the census
    counted one KV Get per point select from the tidb-server's own /metrics (no Prometheus here)."""
    out = tmp_path / "results.json"
    with Watcher(live) as watch:
        res = live.run("tests/bandwidth", "tests/loss", "--scenario", "tidb", "--bandwidth", "0,5mbit", "--loss",
                       "0,1%", "--concurrency", "4", "--rounds", "2", "--round-cap", "2s", "--results-json", str(out),
                       timeout=900)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    assert "4 passed" in res.stdout
    gw = live.net.gateway
    # in place, as seen on the host itself: a 5 Mbit/s class fed by one filter (replies from :4000 to us),
    # then an nft table dropping 1 % of the same flow, SSH accepted first
    tc = "\n".join(watch.seen["tc"])
    assert re.search(r"class htb 1a57:10 root leaf 10: prio 0 rate 5Mbit ceil 5Mbit", tc), tc
    assert "match c6124201/ffffffff at 16" in tc  # dst 198.18.66.1
    assert "match 0fa00000/ffff0000 at 20" in tc  # sport 4000
    nft = "\n".join(watch.seen["nft"])
    assert "numgen random mod 100 < 1 counter" in nft, nft
    assert f'oifname "eth0" ip daddr {gw} meta l4proto {{ tcp, udp }} th sport {TIDB_PORT} jump loss' in nft
    assert "tcp sport 22 accept" in nft
    assert {s.split(".")[0] for s in watch.seen["state"]} >= {"tc-eth0"}, watch.seen["state"]
    assert any(s.startswith("nft-wanbench_") for s in watch.seen["state"])
    assert live.faults_on_host() == {}, "the run left something on the host"

    cells = _cells(out)
    rate = cells["test_bandwidth[tidb-5mbit-c4]"]["fault"]
    assert rate["mechanism"] == "tc"
    ev = rate["evidence"]
    assert ev["verified"] is True
    assert ev["measured"]["filters"] == {f"{live.address} eth0": {"mechanism": "tc", "root": "1a57:", "filters": 1,
                                                                  "expected": 1, "ok": True}}
    wire = ev["measured"]["wire"]["rate"][0]
    assert wire["endpoint"] == f"{live.address}:{TIDB_PORT}"
    assert -12 <= wire["deviation_pct"] <= wire["allowed_pct"][1], wire
    assert ev["measured"]["pd_leader"]["leader"] == f"{live.address}:{PD_PORT}"
    assert f"[{live.address} eth0] tc filter add dev eth0 parent 1a57: protocol ip prio 2 u32 match ip dst {gw}/32 " \
           f"match ip sport {TIDB_PORT} 0xffff flowid 1a57:10" in ev["applied"]
    loss = cells["test_loss[tidb-1%-c4]"]["fault"]
    assert loss["mechanism"] == "nft"  # no sch_netem on this kernel: the probe chose nft
    lev = loss["evidence"]["measured"]
    assert lev["mechanisms"] == {live.address: "nft"}
    assert lev["filters"][f"{live.address} eth0"]["ok"] is True
    counted = lev["wire"]["loss"][0]
    assert counted["packets"] >= 1000
    assert counted["binomial_range"][0] <= counted["dropped"] <= counted["binomial_range"][1]
    assert counted["dropped"] > 0

    for test_id in ("test_bandwidth[tidb-nolimit-c4]", "test_bandwidth[tidb-5mbit-c4]"):
        census = cells[test_id]["census"]
        assert census["kv_source"] == "txn"  # unistore: counted at the transaction layer
        assert census["metrics"]["work.tidb.kv_requests.Get"]["value"] == pytest.approx(1.0, abs=0.02), census
        assert 1.0 <= census["metrics"]["work.tidb.statements"]["value"] <= 1.1
        evidence = cells[test_id]["extra"]["evidence"]
        assert evidence["counters_source"] == (f"tidb-server /metrics at each window's edges: "
                                               f"http://{live.address}:{STATUS_PORT}")
        assert evidence["source"] == "tidb-server /metrics (no Prometheus: census counters only)"
    assert "KV requests/op (TiDB)" in res.stdout
    ctx = json.loads(out.read_text())["run"]
    assert ctx["profile"] == "tidb"
    assert ctx["fingerprint"]["git_hash"].startswith("e4e814fdc0af")
    assert live.password not in out.read_text() + res.stdout + res.stderr


def test_kill_9_under_a_bandwidth_fault_the_hosts_timer_removes_it(live: Live, tmp_path: Path) -> None:
    """The runner dies with its fault in place: the timer on the host removes it within the lease, and
    nothing of the run is left there (qdisc, nft table, state files, timer, SSH sessions)."""
    lease = 6.0
    ns = live.net.host("h1").netns
    own = set(_netns_pids(ns))  # sshd, tidb-server, the PD stand-in
    proc = subprocess.Popen(  # noqa: S603
        live.suite("tests/bandwidth", "--scenario", "tidb", "--bandwidth", "5mbit", "--concurrency", "4",
                   "--rounds", "20", "--round-cap", "5s", "--fault-lease", f"{lease:g}s"),
        cwd=ROOT, env=live.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        wait_for(lambda: proc.poll() is None and {"qdisc", "state", "timers"} <= set(live.faults_on_host()),
                 what="the bandwidth fault in place on the host", timeout=300)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
        t0 = time.monotonic()
        wait_for(lambda: live.faults_on_host() == {}, what="the host's timer to remove the fault", timeout=lease + 20,
                 interval=0.2)
        took = time.monotonic() - t0
        assert took <= lease + 6, f"removed {took:.1f}s after the runner died (lease {lease:g}s)"
        wait_for(lambda: set(_netns_pids(ns)) <= own, what="the run's SSH sessions on the host to end", timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)


def test_rtt_stops_before_anything_is_applied_naming_the_missing_netem(live: Live) -> None:
    """Delay needs netem, which this kernel lacks: level 0 is measured, 50 ms stops before any change.
    The session first sweeps what a dead run left on the host (here an nft table of no live run, with
    a chain no packet passes), as every session does."""
    orphan = "wanbench_deadrun_eth0"
    live.host().run(["nft", f"add table inet {orphan}; add chain inet {orphan} loss"])
    with Watcher(live) as watch:
        res = live.run("tests/rtt", "--scenario", "tidb", "--rtt", "0,50ms", "--concurrency", "4", "--rounds", "1",
                       "--round-cap", "2s")
    out = res.stdout
    assert (f"removed stale faults of an earlier run: ['{live.address}: nft table inet {orphan} of unknown run "
            "(no state file)']") in out, out[-4000:]
    watch.seen["nft"] = {t for t in watch.seen["nft"] if orphan not in t}
    assert res.returncode == 1, out[-4000:]
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\b1 passed\b", summary), out[-6000:]  # level 0 measured
    assert re.search(r"\b1 error\b", summary), out[-6000:]  # 50 ms stopped at its fault
    assert (f"FaultError: [{live.address}] cannot add delay 50ms (tidb) on this host: the kernel has no sch_netem "
            "(the capability probe could not add a netem qdisc on a throwaway device there). The TiDB profile adds "
            "delay with tc netem on the faulted hosts and has no other way to delay their traffic: load the module "
            "there (`modprobe sch_netem`") in out
    assert "Nothing was applied on any host." in out
    assert watch.seen == {"tc": set(), "nft": set(), "state": set()}, "something was applied"
    assert live.faults_on_host() == {}
