"""The sysbench engine against a real MariaDB (and a real Toxiproxy): probes,
timeouts, data-set reuse, warm-up exclusion, client saturation, preflight.

The server is this module's own: a MariaDB in a temporary directory on port
27306 ($WANBENCH_SYSBENCH_TEST_PORT), stopped by PID at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.labutil import PrivateMariadb, as_at_a_terminal
from wanbench.errors import InfrastructureError, MissingToolError
from wanbench.wait import wait_for
from wanbench.workloads.preflight import PreflightError
from wanbench.workloads.sysbench import SysbenchRunner

pytestmark = pytest.mark.lab

PORT = int(os.environ.get("WANBENCH_SYSBENCH_TEST_PORT", "27306"))
TOXI_API, TOXI_LISTEN = 27308, 27309
PASSWORD = "sb-Secret-42"
ROOT = Path(__file__).resolve().parent.parent


def _tool(name: str) -> str:
    found = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if not found:
        pytest.skip(f"{name} is not installed (run scripts/setup)")
    return found


@pytest.fixture(scope="module")
def mariadb() -> Iterator[PrivateMariadb]:
    _tool("sysbench")
    with PrivateMariadb(PORT, user="wb", password=PASSWORD, prefix="wb-sysbench-test-") as db:
        yield db


@pytest.fixture
def runner(mariadb: PrivateMariadb, tmp_path: Path) -> SysbenchRunner:
    return SysbenchRunner(host="127.0.0.1", port=mariadb.port, user="wb", password=PASSWORD,
                          database="wbtest", workdir=tmp_path / "reports")


def _no_secret(*texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t


# -- probes ------------------------------------------------------------------


def test_probe_rounds_are_exact_query_counts(runner: SysbenchRunner) -> None:
    runner.prepare_probe(rows=2000)
    seen: list[int] = []
    res = runner.probe("read", concurrency=4, queries=3000, rounds=2, timeout=60,
                       on_round=lambda i, rnd: seen.append(i), rows=2000)
    assert seen == [1, 2]
    assert [r.queries for r in res.rounds] == [3000, 3000]
    assert res.extra["events"] == 6000
    assert res.errors == 0
    assert res.reconnects == 0
    assert res.errors_by_code == {}
    lat = res.latency_ms
    assert 0 < lat.min <= lat.p50 <= lat.p95 <= lat.p99 <= lat.p999 <= lat.max
    assert res.qps > 0
    assert len(res.reports) == 2
    assert res.client["rounds"]
    assert res.client["saturated"] in (True, False)
    _no_secret(*res.reports, json.dumps(res.extra), json.dumps(res.client))
    assert "--mysql-password=***" in res.extra["commands"][0]
    saved = sorted((runner.workdir or Path()).glob("*.txt"))
    assert len(saved) == 2
    _no_secret(*(p.read_text() for p in saved))

    wres = runner.probe("write", concurrency=4, queries=500, rounds=1, timeout=60)
    assert wres.rounds[0].queries == 500
    assert wres.workload == "probe_write"
    count = runner._sql(["SELECT COUNT(*) FROM wb_probe_write"], database="wbtest")[0][0][0]
    assert count >= 500


def _bytes_received(runner: SysbenchRunner) -> int:
    return int(runner._sql(["SHOW GLOBAL STATUS LIKE 'Bytes_received'"])[0][0][1])


@pytest.mark.parametrize("kind", ["read", "write"])
def test_the_extra_bytes_handicap_sends_n_more_bytes_and_changes_nothing_else(runner: SysbenchRunner,
                                                                              kind: str) -> None:
    """``--probe-extra-bytes N``: the server receives N more bytes per
    statement, the statements and rows are the same (the census calibration's
    known truth)."""
    runner.prepare_probe(rows=2000)
    per_op = {}
    for pad in (0, 300):
        before = _bytes_received(runner)
        res = runner.probe(kind, concurrency=2, queries=400, rounds=1, timeout=60, rows=2000, extra_bytes=pad)
        assert res.errors == 0
        per_op[pad] = (_bytes_received(runner) - before) / 400
    assert 295 <= per_op[300] - per_op[0] <= 320, per_op
    if kind == "write":
        rows = runner._sql(["SELECT DISTINCT c FROM wb_probe_write"], database="wbtest")[0]
        assert rows == [("w" * 120,)], "the same row is written whatever the padding"


def _parent(proc_dir: Path) -> int:
    """The parent PID of a /proc entry (0 when it is gone): only this test's own
    sysbench counts, not another xdist worker's."""
    try:
        return int((proc_dir / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def test_password_is_never_on_a_command_line(runner: SysbenchRunner) -> None:
    """Any user of the machine can read /proc/PID/cmdline: sysbench gets the
    password from a 0600 options file that is gone once it has run."""
    runner.prepare_probe(rows=1000)
    seen: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv and argv[0].endswith(b"sysbench") and _parent(entry) == os.getpid():
                    seen.append(b" ".join(argv).decode(errors="replace"))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        res = runner.probe("read", concurrency=2, queries=20000, rounds=2, timeout=60, rows=1000)
    finally:
        done.set()
        watcher.join()
    assert res.errors == 0  # the options file did carry the password
    assert seen, "no sysbench process was seen running"
    _no_secret(*seen)
    files = {arg.split("=", 1)[1] for cmd in seen for arg in cmd.split() if arg.startswith("--config-file=")}
    assert len(files) >= 1
    assert all("--config-file=" in cmd for cmd in seen)
    assert not [f for f in files if Path(f).exists()], "options files with the password left behind"


def test_prepare_probe_repairs_the_read_table(runner: SysbenchRunner, mariadb: PrivateMariadb) -> None:
    runner.prepare_probe(rows=1000)
    mariadb.root_sql("DELETE FROM wbtest.wb_probe_read WHERE id = 500")
    runner.prepare_probe(rows=1000)
    assert mariadb.root_sql("SELECT COUNT(*), MIN(id), MAX(id) FROM wbtest.wb_probe_read").split() == [
        "1000", "1", "1000"]


def test_round_over_timeout_is_killed(runner: SysbenchRunner) -> None:
    runner.prepare_probe(rows=1000)
    with pytest.raises(InfrastructureError, match=r"no result after 2s, sysbench \(pid \d+\) was killed") as info:
        runner.probe("read", concurrency=2, queries=500_000_000, rounds=1, timeout=2, rows=1000)
    pid = int(str(info.value).split("(pid ")[1].split(")")[0])
    assert not Path(f"/proc/{pid}").exists()
    _no_secret(str(info.value))


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def test_ctrl_c_leaves_no_sysbench(runner: SysbenchRunner, mariadb: PrivateMariadb) -> None:
    runner.prepare_probe(rows=1000)
    script = (
        "import sys; from wanbench.workloads.sysbench import SysbenchRunner\n"
        f"r = SysbenchRunner(host='127.0.0.1', port={mariadb.port}, user='wb', password=sys.stdin.readline().strip(),"
        " database='wbtest')\n"
        "r.probe('read', concurrency=2, queries=500_000_000, rounds=1, timeout=600, rows=1000)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_at_a_terminal)  # noqa: PLW1509 - a signal disposition only
    try:
        assert proc.stdin is not None
        proc.stdin.write(PASSWORD + "\n")
        proc.stdin.close()
        kids = wait_for(lambda: [k for k in _children(proc.pid)
                                 if "sysbench" in Path(f"/proc/{k}/comm").read_text()],
                        what="the probe's sysbench process", timeout=30, transient=(OSError,))
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "KeyboardInterrupt" in err
        _no_secret(err)
        for k in kids:
            assert not Path(f"/proc/{k}").exists(), f"sysbench {k} survived Ctrl-C"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def test_missing_sysbench_binary() -> None:
    with pytest.raises(MissingToolError, match="sysbench not found: run scripts/setup"):
        SysbenchRunner(host="127.0.0.1", port=1, user="u", password="p", sysbench="/nonexistent/sysbench")


def test_connection_setup_is_not_latency(runner: SysbenchRunner, mariadb: PrivateMariadb, tmp_path: Path) -> None:
    """With 100 ms on every server reply, connecting costs several replies;
    a query costs one. Latencies near 100 ms prove connecting is not timed."""
    server = ROOT / "bin" / "toxiproxy-server"
    if not server.exists():
        pytest.skip("bin/toxiproxy-server is not installed (run scripts/setup)")
    runner.prepare_probe(rows=1000)
    log = open(tmp_path / "toxiproxy.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(server), "-host", "127.0.0.1", "-port", str(TOXI_API)], stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    api = f"http://127.0.0.1:{TOXI_API}"

    def post(path: str, body: dict[str, object]) -> None:
        req = urllib.request.Request(api + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5):
            pass

    try:
        wait_for(lambda: urllib.request.urlopen(api + "/version", timeout=1).status == 200,
                 what="toxiproxy API", timeout=20)
        post("/proxies", {"name": "db", "listen": f"127.0.0.1:{TOXI_LISTEN}",
                          "upstream": f"127.0.0.1:{mariadb.port}"})
        post("/proxies/db/toxics", {"name": "slow", "type": "latency", "stream": "downstream",
                                    "attributes": {"latency": 100}})
        slow = SysbenchRunner(host="127.0.0.1", port=TOXI_LISTEN, user="wb", password=PASSWORD, database="wbtest")
        res = slow.probe("read", concurrency=2, queries=8, rounds=1, timeout=60, rows=1000)
        assert 95 <= res.latency_ms.min
        assert res.latency_ms.max < 190
        assert res.rounds[0].seconds < 4 * 0.19 + 0.2  # 4 sequential queries per thread, no connect time
    finally:
        proc.terminate()
        proc.wait(timeout=20)


# -- OLTP --------------------------------------------------------------------


def test_oltp_dataset_reuse_and_recreate(runner: SysbenchRunner, mariadb: PrivateMariadb) -> None:
    runner.cleanup_oltp()
    assert runner.prepare_oltp(tables=2, table_size=500).action == "created"
    assert runner.prepare_oltp(tables=2, table_size=500).action == "reused"
    mariadb.root_sql("INSERT INTO wbtest.sbtest1 (k, c, pad) VALUES (1, 'x', 'y')")  # what oltp_insert does
    assert runner.prepare_oltp(tables=2, table_size=500).action == "reused"
    assert mariadb.root_sql("SELECT COUNT(*) FROM wbtest.sbtest1").strip() == "500"
    mariadb.root_sql("DELETE FROM wbtest.sbtest2 WHERE id = 7")  # what oltp_delete does
    state = runner.prepare_oltp(tables=2, table_size=500)
    assert state.action == "created"
    assert "sbtest2 holds 499 rows" in state.detail
    assert runner.prepare_oltp(tables=2, table_size=600).action == "created"
    runner.cleanup_oltp()
    assert mariadb.root_sql("SHOW TABLES FROM wbtest LIKE 'sbtest%'").strip() == ""


def test_warmup_is_excluded(runner: SysbenchRunner) -> None:
    """Every event sleeps 500 ms during each thread's first second; a 2 s
    warm-up must leave none of them in the numbers, while a run without
    warm-up shows them."""
    runner.prepare_oltp(tables=1, table_size=1000)
    slow = ["--wb-slow-start=1", "--wb-slow-ms=500"]
    res = runner.run_oltp("oltp_point_select", threads=4, duration=3, warmup=2, tables=1, table_size=1000,
                          options=slow)
    assert res.extra["warmup_excluded"] is True
    assert res.latency_ms.max < 500, res.latency_ms
    warm_qps = res.series[0].qps  # the first second: about 4 threads / 0.5 s
    assert res.qps > 10 * warm_qps, (res.qps, warm_qps)

    control = runner.run_oltp("oltp_point_select", threads=4, duration=3, warmup=0, tables=1, table_size=1000,
                              options=slow)
    assert control.extra["warmup_excluded"] is False
    assert control.latency_ms.max >= 500


def test_client_saturation_flag(runner: SysbenchRunner) -> None:
    runner.prepare_oltp(tables=1, table_size=1000)
    spin = runner.run_oltp("oltp_point_select", threads=32, duration=3, warmup=2, tables=1, table_size=1000,
                           options=["--wb-spin=300000"])
    assert spin.client["saturated"] is True, spin.client
    assert "client-bound" in spin.client["message"]
    normal = runner.run_oltp("oltp_point_select", threads=8, duration=3, warmup=1, tables=1, table_size=1000)
    assert normal.client["saturated"] is False, normal.client


def test_preflight_stops_runs_that_would_fail(runner: SysbenchRunner, mariadb: PrivateMariadb) -> None:
    runner.prepare_oltp(tables=2, table_size=200)
    try:
        mariadb.root_sql("SET GLOBAL max_connections = 40")
        with pytest.raises(PreflightError, match="max_connections is 40: run SET GLOBAL max_connections"):
            runner.run_oltp("oltp_point_select", threads=64, duration=1, warmup=0, tables=2, table_size=200)
        runner.prepare_probe(rows=1000)
        with pytest.raises(PreflightError, match="max_connections is 40"):  # a probe's warm-up
            runner.probe("read", concurrency=64, queries=200, rounds=1, timeout=60, rows=1000)
        # a measured round after it (check=False) asks nothing first: sysbench itself is refused
        with pytest.raises(InfrastructureError, match="error 1040: Too many connections") as refused:
            runner.probe("read", concurrency=64, queries=200, rounds=1, timeout=60, rows=1000, check=False)
        assert not isinstance(refused.value, PreflightError)
    finally:
        mariadb.root_sql("SET GLOBAL max_connections = 2000")
    try:
        mariadb.root_sql("SET GLOBAL max_prepared_stmt_count = 50")
        with pytest.raises(PreflightError, match="max_prepared_stmt_count is 50"):
            runner.run_oltp("oltp_read_write", threads=8, duration=1, warmup=0, tables=2, table_size=200)
    finally:
        mariadb.root_sql("SET GLOBAL max_prepared_stmt_count = 16382")


def test_oltp_read_write_numbers_and_series(runner: SysbenchRunner) -> None:
    runner.prepare_oltp(tables=2, table_size=1000)
    rounds: list[int] = []
    res = runner.run_oltp("oltp_read_write", threads=4, duration=2, warmup=1, tables=2, table_size=1000,
                          rounds=2, on_round=lambda i, rnd: rounds.append(i))
    assert rounds == [1, 2]
    assert len(res.rounds) == 2
    for rnd in res.rounds:
        assert rnd.queries == pytest.approx(20 * rnd.tps * rnd.seconds, rel=0.01)  # 20 statements a transaction
        assert 1.5 < rnd.seconds < 2.6
    assert len(res.series) >= 5
    assert all(p.qps > 0 for p in res.series)
    assert [p.t for p in res.series] == sorted(p.t for p in res.series)
    _no_secret(*res.reports)


def test_open_loop_rate(runner: SysbenchRunner) -> None:
    runner.prepare_oltp(tables=1, table_size=1000)
    # sysbench's open loop arrives as a Poisson process: the verdict allows for the count's own spread
    # (rate_summary; its rule is tested on numbers in test_sysbench_parser.py)
    res = runner.run_oltp("oltp_point_select", threads=4, duration=8, warmup=1, tables=1, table_size=1000, rate=200)
    assert res.extra["rate"]["target"] == 200
    assert res.extra["rate"]["sustained"] is True
    assert res.tps == pytest.approx(200, rel=0.15)
