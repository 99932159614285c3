"""Load hosts without a network: parsing, splitting, exact merging, and the
remote wrapper's protocol run locally with a fake ``sysbench``.

The merge tests check the cell's numbers against a brute-force view (every
sample written out and sorted) rather than against the code that merges.
"""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.executors.local import LocalExecutor
from wanbench.faults.base import FaultKind, Level
from wanbench.profiles.tidb.cluster import TidbCluster
from wanbench.profiles.tidb.plan import CLIENT, plan_fault
from wanbench.profiles.tidb.topology import parse_wanbench_cluster
from wanbench.results import CellResult
from wanbench.topology import LoadHost, Scenario, parse_load_hosts
from wanbench.wait import wait_for
from wanbench.workloads.clientcpu import ClientLoad
from wanbench.workloads.histogram import Histogram
from wanbench.workloads.hostrecord import merge_records
from wanbench.workloads.loadhosts import LoadHosts, _Remote, remote_command, split_threads
from wanbench.workloads.loadhosts_merge import HostRun, RoundSpec, combine_hosts
from wanbench.workloads.sysbench import LUA_DIR
from wanbench.workloads.sysbench_output import merge_results

# -- parsing and splitting ------------------------------------------------------------------------------------------


def test_parse_load_hosts() -> None:
    assert parse_load_hosts("dc1-load,dc2-load=10.0.0.5") == (LoadHost("dc1-load"), LoadHost("dc2-load", "10.0.0.5"))
    assert len(parse_load_hosts("a")) == 1
    for bad, why in (("a,a", "listed twice"), ("a,,b", "empty item"), ("a b", "SSH host name"),
                     ("a=", "not an address"), ("root@a", "SSH host name")):
        with pytest.raises(ConfigError, match=why):
            parse_load_hosts(bad)


def test_split_threads() -> None:
    assert split_threads(10, 3) == [4, 3, 3]
    assert split_threads(4, 2) == [2, 2]
    with pytest.raises(ConfigError, match="cannot be split over 3 load hosts"):
        split_threads(2, 3)


def test_cluster_file_load_hosts(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text("tidb_servers: [{host: 10.0.1.1}]\npd_servers: [{host: 10.0.1.2}]\n")
    data = {"wanbench_cluster": 1, "topology": "topo.yaml", "load_hosts": ["dc1-load", "dc2-load=10.9.0.1"]}
    topo = parse_wanbench_cluster(data, path=tmp_path / "c.yaml")
    assert topo.settings["load_hosts"] == ["dc1-load", "dc2-load=10.9.0.1"]
    with pytest.raises(ConfigError, match="load_hosts"):
        parse_wanbench_cluster({**data, "load_hosts": ["x", "x"]}, path=tmp_path / "c.yaml")
    with pytest.raises(ConfigError, match="must be a list"):
        parse_wanbench_cluster({**data, "load_hosts": "dc1-load"}, path=tmp_path / "c.yaml")


def test_client_scoped_rules_cover_every_load_host(tmp_path: Path) -> None:
    (tmp_path / "topo.yaml").write_text(textwrap.dedent("""\
        tidb_servers: [{host: 10.0.1.1}]
        tiproxy_servers: [{host: 10.0.1.3}]
        pd_servers: [{host: 10.0.1.2}]
        tikv_servers: [{host: 10.0.1.4}]
        """))
    topo = parse_wanbench_cluster({"wanbench_cluster": 1, "topology": "topo.yaml"}, path=tmp_path / "c.yaml")
    scenario = Scenario("tiproxy_clients", "tiproxy", "read_probe", "proxy", peers=(CLIENT,))
    plan = plan_fault(scenario, topo, Level(FaultKind.DELAY, 50.0), load_hosts=["10.2.0.1", "10.3.0.1"])
    rules = {(m.dst, m.src_port) for hp in plan.hosts for m in hp.matches}
    assert rules == {("10.2.0.1", 6000), ("10.3.0.1", 6000)}
    one = plan_fault(scenario, topo, Level(FaultKind.DELAY, 50.0))
    assert {m.dst for hp in one.hosts for m in hp.matches} == {None}  # no load host known: any address


def test_tidb_cluster_scopes_client_rules_to_each_load_hosts_address(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The address a load host's connections come from is its SSH HostName (~/.ssh/config), else its name."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host dc2-load\n  HostName 10.3.0.1\n")
    (tmp_path / "topo.yaml").write_text("tiproxy_servers: [{host: 10.0.1.3}]\ntidb_servers: [{host: 10.0.1.1}]\n")
    topo = parse_wanbench_cluster({"wanbench_cluster": 1, "topology": "topo.yaml",
                                   "load_hosts": ["10.2.0.1", "dc2-load"]}, path=tmp_path / "c.yaml")
    cluster = TidbCluster(topo, tag="t", dry_run=True)
    assert [h.name for h in cluster.load_hosts] == ["10.2.0.1", "dc2-load"]
    assert cluster.client_addresses == ("10.2.0.1", "10.3.0.1")
    scenario = Scenario("clients", "tiproxy", "read_probe", peers=(CLIENT,))
    fault = cluster.fault_for(scenario, Level(FaultKind.DELAY, 50.0))
    assert {m.dst for hp in cluster._plans[fault][0].hosts for m in hp.matches} == {"10.2.0.1", "10.3.0.1"}
    # --load-hosts wins over the file
    assert TidbCluster(topo, tag="t", dry_run=True, load_hosts=parse_load_hosts("dc9")).client_addresses == ("dc9",)


# -- exact merging --------------------------------------------------------------------------------------------------


def _output(hist: dict[float, int], *, seconds: float, p95: float, extra: str = "") -> str:
    events = sum(hist.values())
    rows = "".join(f"{v:12.3f} |{'*' * 5:<40} {c}\n" for v, c in sorted(hist.items()))
    avg = sum(v * c for v, c in hist.items()) / events
    final = {"type": "cumulative", "t": seconds, "interval": seconds, "threads": 2, "events": events,
             "reads": events, "writes": 0, "other": 0, "errors": 0, "reconnects": 0, "latency_pct_ms": p95,
             "queue": 0, "concurrency": 0, "latency_min_ms": min(hist), "latency_avg_ms": avg,
             "latency_max_ms": max(hist), "latency_sum_ms": avg * events}
    return (f"{extra}Threads started!\nWBJSON {json.dumps(final, separators=(',', ':'))}\n"
            "Latency histogram (values are in milliseconds)\n"
            "       value  ------------- distribution ------------- count\n" + rows)


def _run(name: str, hist: dict[float, int], seconds: float, offset: float) -> HostRun:
    p95 = Histogram(tuple(sorted(hist.items()))).percentile(95)
    return HostRun(LoadHost(name, "10.9.0.1"), f"10.0.0.{len(name)}", 2, f"sysbench ({name})",
                   text=_output(hist, seconds=seconds, p95=p95), exit_status=0, marker_at=100.0 + offset,
                   end_at=100.0 + offset + seconds, client=ClientLoad(0.5, seconds, 2, 4))


def _samples(*hists: dict[float, int]) -> list[float]:
    return sorted(v for h in hists for v, c in h.items() for _ in range(c))


def _brute(samples: list[float], pct: float) -> float:
    return samples[max(1, math.floor(len(samples) * pct / 100 + 0.5)) - 1]


NEAR = {0.5: 900, 0.6: 80, 0.9: 20}  # a load host next to the cluster
FAR = {20.0: 150, 21.0: 40, 30.0: 10}  # one in another data centre
SPEC = RoundSpec("probe_read", "probe_read c=4", 4, lambda t: ([], {}), "Threads started!", 30.0, {"kind": "read"})


def test_one_round_on_two_hosts_merges_exactly() -> None:
    result = combine_hosts(SPEC, [_run("near", NEAR, 2.0, 0.0), _run("far", FAR, 2.5, 0.004)])
    samples = _samples(NEAR, FAR)
    for key, pct in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p999", 99.9)):
        assert getattr(result.latency_ms, key) == _brute(samples, pct), key
    # averaging the hosts' p95 would say something else entirely
    assert result.latency_ms.p95 != (Histogram(tuple(NEAR.items())).percentile(95)
                                     + Histogram(tuple(FAR.items())).percentile(95)) / 2
    rnd = result.rounds[0]
    assert rnd.qps == pytest.approx(1000 / 2.0 + 200 / 2.5)
    assert rnd.queries == 1200
    assert result.extra["events"] == 1200
    lh = result.extra["load_hosts"]
    assert [h["host"] for h in lh["hosts"]] == ["near", "far"]
    assert sum(h["rounds"][0]["qps"] for h in lh["hosts"]) == pytest.approx(rnd.qps)
    assert lh["rounds"][0]["start_skew_ms"] == pytest.approx(4.0)
    assert lh["hosts"][1]["latency_ms"]["p95"] == 21.0
    assert lh["hosts"][0]["client"]["saturated"] is False
    assert len(result.reports) == 2
    assert result.reports[1].startswith("# load host far")


def test_rounds_merge_per_host_and_for_the_cell() -> None:
    r1 = combine_hosts(SPEC, [_run("near", NEAR, 2.0, 0.0), _run("far", FAR, 2.0, 0.002)])
    far2 = {20.0: 100, 40.0: 100}
    r2 = combine_hosts(SPEC, [_run("near", NEAR, 2.0, 0.0), _run("far", far2, 2.0, 0.008)])
    cell = merge_results([r1, r2])
    samples = _samples(NEAR, FAR, NEAR, far2)
    assert cell.latency_ms.p99 == _brute(samples, 99)
    assert cell.latency_ms.p50 == _brute(samples, 50)
    lh = cell.extra["load_hosts"]
    far = lh["hosts"][1]
    assert [r["qps"] for r in far["rounds"]] == [100.0, 100.0]
    assert far["latency_ms"]["p99"] == _brute(_samples(FAR, far2), 99)
    assert [r["qps"] for r in lh["rounds"]] == [pytest.approx(600.0), pytest.approx(600.0)]
    assert lh["max_start_skew_ms"] == pytest.approx(8.0)
    assert merge_records([r1.extra["load_hosts"]])["hosts"][1]["histogram"] == [[20.0, 150], [21.0, 40], [30.0, 10]]
    # the record: load_hosts at the top of the cell, not inside workload_extra
    doc = CellResult("t", "rtt", "s", {"label": "0ms", "value": 0}, 4, cell).to_json()
    assert doc["load_hosts"]["hosts"][0]["host"] == "near"
    assert "load_hosts" not in doc["workload_extra"]
    # and back, as a cell travels from an xdist worker to the controller
    assert CellResult.from_json(doc).to_json() == doc


def test_a_failed_host_is_named() -> None:
    bad = HostRun(LoadHost("far"), "10.0.0.9", 2, "sysbench", text="FATAL: error 2003: can't connect\n",
                  exit_status=1)
    with pytest.raises(InfrastructureError, match="on load host far.*2003"):
        combine_hosts(SPEC, [_run("near", NEAR, 2.0, 0.0), bad])


def test_remote_command_keeps_the_password_off_the_command_line() -> None:
    argv = ["/usr/bin/sysbench", str(LUA_DIR / "probe.lua"), "--db-driver=mysql", "--mysql-host=127.0.0.1,127.0.0.1",
            "--mysql-port=1,2", "--mysql-password=s3cret", "--threads=2", "run"]
    out, bundled = remote_command(argv, {}, LoadHost("h", "10.9.0.1"))
    assert out == ["--config-file=wb.cfg", "./probe.lua", "--db-driver=mysql", "--mysql-host=10.9.0.1,10.9.0.1",
                   "--mysql-port=1,2", "--threads=2", "run"]
    assert bundled is None
    out, bundled = remote_command(argv, {"WB_SYSBENCH_SCRIPT": "/usr/share/sysbench/oltp_insert.lua"}, LoadHost("h"))
    assert "--mysql-host=127.0.0.1,127.0.0.1" in out
    assert bundled == "oltp_insert.lua"


# -- the wrapper, run locally with a fake sysbench ------------------------------------------------------------------

FAKE = r"""#!/bin/sh
case "$*" in *s3cret*) echo "ARGV HAS THE PASSWORD";; esac
for a; do case $a in --config-file=*) cfg=${a#--config-file=};; esac; done
[ "$(stat -c %a "$cfg")" = 600 ] && grep -qx 'mysql-password=s3cret' "$cfg" && echo "CONFIG OK"
[ -f ./probe.lua ] && [ -f ./wb_hooks.lua ] && echo "SCRIPTS OK"
for a; do case $a in --threads=*) n=${a#--threads=};; esac; done
i=0; while [ $i -lt "$n" ]; do echo "WBARMED $i"; i=$((i + 1)); done
: < "$WB_GO"
echo "WBGO $(date +%s.%N)"
echo "Threads started!"
if [ -n "${FAKE_SLEEP:-}" ]; then exec sleep "$FAKE_SLEEP"; fi
i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done
sleep 0.3
cat "$FAKE_OUTPUT"
"""


class _Pipe:
    """A local process behind the channel calls ``_Remote`` makes."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def sendall(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, n: int) -> bytes:
        assert self.proc.stdout is not None
        return os.read(self.proc.stdout.fileno(), n)

    def recv_exit_status(self) -> int:  # called once the output ended
        status = self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return status

    def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()  # what sshd does when the channel closes
        self.proc.wait(30)


class _LocalShell(LocalExecutor):
    """The executor a load host would be, on this machine: ``start`` runs argv with pipes."""

    hostname = "127.0.0.1"

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__("fake-load-host")
        self.env = env

    def start(self, argv: list[str]) -> _Pipe:
        return _Pipe(subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, env=self.env))


@pytest.fixture
def fake_host(tmp_path: Path) -> Callable[..., _LocalShell]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sysbench"
    fake.write_text(FAKE)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    (tmp_path / "tmp").mkdir()

    def make(**env: str) -> _LocalShell:
        return _LocalShell({**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path / "tmp"),
                            **env})

    return make


ARGV = ["/usr/bin/sysbench", str(LUA_DIR / "probe.lua"), "--mysql-host=127.0.0.1", "--mysql-password=s3cret",
        "--threads=2", "--time=1", "run"]


def test_wrapper_ships_files_releases_together_and_cleans_up(fake_host: Callable[..., _LocalShell],
                                                             tmp_path: Path) -> None:
    out_file = tmp_path / "out.txt"
    out_file.write_text(_output(NEAR, seconds=1.0, p95=0.6).split("Threads started!\n", 1)[1])
    shells = {name: fake_host(FAKE_OUTPUT=str(out_file)) for name in ("a", "b")}
    hosts = LoadHosts([LoadHost("a"), LoadHost("b")], executor=lambda h: shells[h.name])
    spec = RoundSpec("probe_read", "probe_read c=4", 4, lambda t: (list(ARGV), {}), "Threads started!", 30.0)
    runs = hosts.run_round(spec, password="s3cret", redact=lambda text: text)
    for run in runs:
        assert "ARGV HAS THE PASSWORD" not in run.text
        assert "CONFIG OK" in run.text, run.text
        assert "SCRIPTS OK" in run.text, run.text
        assert run.exit_status == 0
        assert run.marker_at is not None
        assert run.end_at is not None
        assert run.client is not None
        assert run.client.cores >= 1
        assert run.client.cpu_seconds >= 0
        assert not run.text.startswith("WB")  # the wrapper's own lines are not sysbench's output
    assert abs(runs[0].marker_at - runs[1].marker_at) < 1.0  # type: ignore[operator]
    result = combine_hosts(spec, runs)
    assert result.extra["events"] == 2 * sum(NEAR.values())
    assert all(r.released_at is not None for r in runs)
    assert 0 <= result.extra["load_hosts"]["rounds"][0]["release_skew_ms"] < 1000
    assert list((tmp_path / "tmp").iterdir()) == []  # each wrapper removed its directory


def test_closing_the_channel_kills_the_remote_sysbench(fake_host: Callable[..., _LocalShell],
                                                       tmp_path: Path) -> None:
    shell = fake_host(FAKE_SLEEP="600")
    remote = _Remote(shell, LoadHost("a"), "127.0.0.1", remote_command(ARGV, {}, LoadHost("a"))[0], bundled=None,
                     limit_s=600, threads=2, marker="Threads started!", redact=lambda text: text)
    remote.start({"probe.lua": b"", "wb_hooks.lua": b"", "wb.cfg": b"mysql-password=s3cret\n"})
    assert remote.ready.wait(30)
    remote.go()
    wait_for(lambda: remote.run.marker_at is not None and remote.pid is not None, what="the fake sysbench", timeout=30)
    children = Path(f"/proc/{remote.pid}/task/{remote.pid}/children").read_text().split()
    assert children, "timeout has no child"
    sleeper = int(children[0])
    done = threading.Event()
    threading.Thread(target=lambda: (remote.close(), done.set()), daemon=True).start()
    assert done.wait(30)
    wait_for(lambda: not Path(f"/proc/{sleeper}").exists() or _zombie(sleeper), what="the fake sysbench to die",
             timeout=10)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_time_limit_kills_a_stuck_sysbench(fake_host: Callable[..., _LocalShell]) -> None:
    hosts = LoadHosts([LoadHost("a")], executor=lambda h: fake_host(FAKE_SLEEP="600"))
    spec = RoundSpec("probe_read", "probe_read c=2", 2, lambda t: (list(ARGV), {}), "Threads started!", 1.0)
    runs = hosts.run_round(spec, password="s3cret", redact=lambda text: text)
    assert runs[0].exit_status == 137  # timeout -s KILL
    with pytest.raises(InfrastructureError, match="load host a: sysbench exited 137"):
        combine_hosts(spec, runs)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_closing_the_channel_before_the_release_kills_the_waiting_sysbench(
        fake_host: Callable[..., _LocalShell], tmp_path: Path) -> None:
    """The runner died while the hosts' threads were connected and waiting for GO."""
    remote = _Remote(fake_host(), LoadHost("a"), "127.0.0.1", remote_command(ARGV, {}, LoadHost("a"))[0],
                     bundled=None, limit_s=600, threads=2, marker="Threads started!", redact=lambda text: text)
    remote.start({"probe.lua": b"", "wb_hooks.lua": b"", "wb.cfg": b""})
    assert remote.ready.wait(30)  # both threads armed
    assert remote.pid is not None
    children = Path(f"/proc/{remote.pid}/task/{remote.pid}/children").read_text().split()
    waiting = int(children[0])
    remote.close()
    wait_for(lambda: not Path(f"/proc/{waiting}").exists() or _zombie(waiting), what="the waiting sysbench to die",
             timeout=10)
    assert remote.run.marker_at is None  # it was never released
    assert list((tmp_path / "tmp").iterdir()) == []


def test_the_report_shows_each_load_host() -> None:
    from wanbench.report.tables import cell_html

    result = combine_hosts(SPEC, [_run("near", NEAR, 2.0, 0.0), _run("far", FAR, 2.5, 0.004)])
    html = cell_html(CellResult("t", "rtt", "s", {"label": "0ms", "value": 0}, 4, result))
    assert ">near<" in html
    assert ">far<" in html
    assert "21 ms" in html  # far's own p95
    assert "started within 4 ms of each other" in html


def test_a_host_that_skipped_the_warm_up_checkpoint_is_named() -> None:
    spec = RoundSpec("oltp_point_select", "oltp t=4", 4, lambda t: ([], {}), "Checkpoint report", 30.0,
                     {"warmup_s": 2, "warnings": []})
    result = combine_hosts(spec, [_run("near", NEAR, 2.0, 0.0), _run("far", FAR, 2.0, 0.0)])
    assert result.extra["warmup_excluded"] is False  # the fake outputs have no checkpoint report
    assert result.extra["warnings"] == ["load host(s) near, far skipped the warm-up checkpoint (client starved of "
                                        "CPU?): their numbers include the warm-up"]
