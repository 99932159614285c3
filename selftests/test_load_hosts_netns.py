"""Load from two namespace hosts against the real lab, over real SSH.

Two hosts ``wbload-h1`` and ``wbload-h2`` (namespaces ``wbload-*``, addresses
10.231.N.0/24, each with its own sshd) run sysbench as load hosts. The lab
listens on loopback only, so this module puts a small TCP relay on the root
namespace's bridge address that forwards the lab's client ports to
127.0.0.1; the load hosts connect there (``--load-hosts wbload-h1=GATEWAY``).
Traffic goes only to loopback and to these namespaces.

The SSH settings come from a ``~/.ssh/config`` in a HOME of the module's own,
as a user's would. Checked with views that do not go through the code under
test: percentiles recomputed here from each host's raw histogram, QPS added up
here, processes listed per namespace with ``ip netns pids``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from selftests.labutil import ROOT, as_at_a_terminal, free_port_base, netns_missing, suite_cmd
from wanbench import scratch
from wanbench.netns import NetnsNetwork
from wanbench.profiles.lab.servers import Lab
from wanbench.results import results_schema_path
from wanbench.wait import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.lab, pytest.mark.slow]

PREFIX = "wbload"
NET = "10.231"  # this module's range: no other suite uses 10.231.0.0/16
REMOTE_SCRATCH = "wanbench-load."


class Relay:
    """TCP relay: ``listen``:port -> 127.0.0.1:port for each port, one thread per direction."""

    def __init__(self, listen: str, ports: list[int]) -> None:
        self._servers: list[socket.socket] = []
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        for port in ports:
            srv = socket.create_server((listen, port), backlog=256)
            self._servers.append(srv)
            threading.Thread(target=self._accept, args=(srv, port), daemon=True).start()

    def _accept(self, srv: socket.socket, port: int) -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._socks += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            socks, self._socks = self._socks, []
        for s in [*self._servers, *socks]:
            s.close()


@dataclass
class Setup:
    net: NetnsNetwork
    lab: Lab
    home: Path
    names: list[str]

    @property
    def load_hosts(self) -> str:
        return ",".join(f"{n}={self.net.gateway}" for n in self.names)

    def env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.home)}

    def suite(self, results: Path, *args: str) -> list[str]:
        return suite_cmd("tests/rtt", "--scenario", "primary", "--concurrency", "4", "--rounds", "1",
                         "--load-hosts", self.load_hosts, "--results-json", str(results),
                         "--lab-dir", str(self.lab.run_dir), "--lab-port-base", str(self.lab.port_base), *args)


def _ours_left(net: NetnsNetwork) -> dict[str, list[str]]:
    """Per host, every process in its namespace but its sshd (comm and pid)."""
    out: dict[str, list[str]] = {}
    for h in net.hosts:
        pids = subprocess.run(["ip", "netns", "pids", h.netns], capture_output=True, text=True, check=False)
        extra = []
        for pid in pids.stdout.split():
            if int(pid) == net.sshd_pid(h.name):
                continue
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            extra.append(f"{comm}[{pid}]")
        if extra:
            out[h.name] = extra
    return out


def _sysbench_on_every_host(setup: Setup, proc: subprocess.Popen[str]) -> bool:
    assert proc.poll() is None, proc.stdout.read() if proc.stdout else "the suite exited"
    left = _ours_left(setup.net)
    return all(any(p.startswith("sysbench[") for p in left.get(h.name, ())) for h in setup.net.hosts)


def _remote_scratch() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(REMOTE_SCRATCH + "*"))


def _namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return [ln.split()[0] for ln in listed.splitlines() if ln.startswith(PREFIX + "-")]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    reason = netns_missing("sysbench", "mariadbd", "timeout")
    if reason:
        pytest.skip(reason)
    assert not _namespaces(), f"namespaces of an earlier run are still there: {_namespaces()}"
    work = tmp_path_factory.mktemp("wbload")
    lab = Lab(work / "lab", free_port_base(25500, 25999))
    relay: Relay | None = None
    sshd: list[int] = []
    with NetnsNetwork(work / "net", hosts=2, prefix=PREFIX, net=NET) as net:
        try:
            sshd = [net.sshd_pid(h.name) for h in net.hosts]
            lab.up()
            relay = Relay(net.gateway, [lab.endpoint("proxy")[1], lab.endpoint("direct")[1]])
            home = work / "home"
            (home / ".ssh").mkdir(parents=True)
            names = [f"{PREFIX}-{h.name}" for h in net.hosts]
            (home / ".ssh" / "config").write_text("".join(
                f"Host {name}\n  HostName {h.address}\n  User root\n  IdentityFile {net.client_key}\n"
                f"  UserKnownHostsFile {net.known_hosts}\n" for name, h in zip(names, net.hosts, strict=True)))
            yield Setup(net, lab, home, names)
        finally:
            if relay is not None:
                relay.close()
            lab.down()
    # after teardown: no namespace, no sshd, no remote scratch of ours
    assert not _namespaces(), _namespaces()
    assert not [p for p in sshd if Path(f"/proc/{p}").exists()], "an sshd outlived its namespace"
    assert not _remote_scratch(), _remote_scratch()


def _percentile(counts: dict[float, int], pct: float) -> float:
    """sysbench's rule, written out again here: the first bucket whose running
    count reaches floor(N * pct / 100 + 0.5)."""
    total = sum(counts.values())
    target = max(1, math.floor(total * pct / 100 + 0.5))
    running = 0
    for value in sorted(counts):
        running += counts[value]
        if running >= target:
            return value
    raise AssertionError("empty histogram")


def test_two_load_hosts_merge_exactly_and_leave_nothing(setup: Setup, tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    started = time.monotonic()
    res = subprocess.run(setup.suite(results, "--rtt", "0,20ms", "--duration", "3s"), cwd=ROOT, env=setup.env(),
                         capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.monotonic() - started
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    doc = json.loads(results.read_text())
    jsonschema.Draft202012Validator(json.loads(results_schema_path().read_text())).validate(doc)
    cells = {c["level"]["label"]: c for c in doc["results"]}
    assert sorted(cells) == ["0ms", "20ms"]
    skews = []
    for label, cell in cells.items():
        lh = cell["load_hosts"]
        hosts = lh["hosts"]
        assert [h["host"] for h in hosts] == setup.names
        assert [h["threads"] for h in hosts] == [2, 2]
        assert [h["address"] for h in hosts] == [h.address for h in setup.net.hosts]
        assert all(h["sql_host"] == setup.net.gateway for h in hosts)
        # per-host QPS add up to the cell's (one round: the round's QPS is the cell's)
        assert len(cell["rounds"]) == 1
        added = sum(h["rounds"][0]["qps"] for h in hosts)
        assert math.isclose(added, cell["qps"], rel_tol=1e-9), (label, added, cell["qps"])
        assert math.isclose(lh["rounds"][0]["qps"], cell["qps"], rel_tol=1e-9)
        assert sum(h["queries"] for h in hosts) == cell["rounds"][0]["queries"]
        # each host's histogram is its sysbench's own: its p95 is the p95 sysbench printed
        merged: dict[float, int] = {}
        for h in hosts:
            own = {float(v): int(c) for v, c in h["histogram"]}
            assert abs(_percentile(own, 95) - h["rounds"][0]["sysbench_p95_ms"]) < 0.0006, (label, h["host"])
            for v, c in own.items():
                merged[v] = merged.get(v, 0) + c
        assert sum(merged.values()) == cell["workload_extra"]["events"]
        # the cell's percentiles are those of the summed raw histograms
        for key, pct in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
            assert cell["latency_ms"][key] == _percentile(merged, pct), (label, key)
        for h in hosts:
            client = h["client"]
            assert client["rounds"][0]["cpu_seconds"] > 0, (label, h["host"], client)
            assert client["rounds"][0]["cores"] >= 1
            assert client["saturated"] in (True, False)
        skews.append((lh["rounds"][0]["start_skew_ms"], lh["rounds"][0]["release_skew_ms"]))
        assert lh["max_start_skew_ms"] < 1000, lh["rounds"]
        assert lh["rounds"][0]["release_skew_ms"] is not None  # the namespaces share one clock: exact here
    # the lab's 20 ms fault sits behind the relay: the load hosts' reads see it
    rise = cells["20ms"]["latency_ms"]["p50"] - cells["0ms"]["latency_ms"]["p50"]
    # at least most of the fault, and less than twice it (the other CI lane's load only adds queueing)
    assert 14 <= rise < 40, f"p50 rose by {rise:.1f} ms under a 20 ms RTT fault"
    print(f"\nload hosts: (start skew seen by the runner, release skew by the hosts' clock) {skews} ms; "
          f"suite took {elapsed:.1f}s")
    wait_for(lambda: not _ours_left(setup.net), what="the load hosts to be left with only their sshd", timeout=10)
    assert not _remote_scratch(), _remote_scratch()


def test_kill_9_of_the_runner_ends_the_remote_sysbench(setup: Setup, tmp_path: Path) -> None:
    proc = subprocess.Popen(setup.suite(tmp_path / "results.json", "--rtt", "0", "--duration", "120s"), cwd=ROOT,
                            env=setup.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        wait_for(lambda: _sysbench_on_every_host(setup, proc), what="sysbench on both load hosts", timeout=180,
                 interval=0.2)
        proc.kill()  # SIGKILL: no teardown, no finally
        proc.communicate(timeout=30)
        killed = time.monotonic()
        wait_for(lambda: not _ours_left(setup.net), what="the load hosts to end the killed run's sysbench",
                 timeout=15, interval=0.05)
        gone = time.monotonic() - killed
        wait_for(lambda: not _remote_scratch(), what="the wrappers to remove their directories", timeout=5)
        print(f"\nremote sysbench gone {gone:.2f}s after kill -9 of the runner")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
        scratch.sweep_stale()  # the killed runner's local scratch directory, as the next run would


def test_ctrl_c_of_the_runner_ends_the_remote_sysbench(setup: Setup, tmp_path: Path) -> None:
    proc = subprocess.Popen(setup.suite(tmp_path / "results.json", "--rtt", "0", "--duration", "120s"), cwd=ROOT,
                            env=setup.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=as_at_a_terminal)  # noqa: PLW1509
    try:
        wait_for(lambda: _sysbench_on_every_host(setup, proc), what="sysbench on both load hosts", timeout=180,
                 interval=0.2)
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0
        assert "KeyboardInterrupt" in out or "Interrupted" in out, out[-2000:]
        wait_for(lambda: not _ours_left(setup.net), what="the load hosts to be left with only their sshd",
                 timeout=5, interval=0.05)
        wait_for(lambda: not _remote_scratch(), what="the wrappers to remove their directories", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_oltp_family_on_two_load_hosts(setup: Setup, tmp_path: Path) -> None:
    """The bundled OLTP scripts come from each host's own sysbench; the warm-up is left out on every host."""
    results = tmp_path / "results.json"
    cmd = suite_cmd("tests/sysbench", "--workloads", "oltp_point_select", "--threads", "4", "--duration", "2s",
                    "--warmup", "1s", "--tables", "1", "--table-size", "1000", "--load-hosts", setup.load_hosts,
                    "--results-json", str(results), "--lab-dir", str(setup.lab.run_dir),
                    "--lab-port-base", str(setup.lab.port_base))
    res = subprocess.run(cmd, cwd=ROOT, env=setup.env(), capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    cells = json.loads(results.read_text())["results"]
    assert sorted(c["path"] for c in cells) == ["direct", "proxy"]
    for cell in cells:
        hosts = cell["load_hosts"]["hosts"]
        assert [h["threads"] for h in hosts] == [2, 2]
        assert cell["workload_extra"]["warmup_excluded"] is True
        assert math.isclose(sum(h["rounds"][0]["qps"] for h in hosts), cell["qps"], rel_tol=1e-9)
        assert all(h["qps"] > 0 for h in hosts)
    wait_for(lambda: not _ours_left(setup.net), what="the load hosts to be left with only their sshd", timeout=10)
