"""``pytest tests/tpch`` and a TPC-H fault scenario as a user runs them, on
a real lab at small scale factors: every answer checked by DuckDB; a
connection reset while one query's result is written (Toxiproxy's
``limit_data``, seed 004's failure) fails that cell alone, naming the query
and the error, and the session goes on; a wrong value in the database is a
wrong answer and a broken cell; under a 10 Mbit/s cap the terminal shows
each query's result bytes and the time they take through the cap beside
the measured time, and the census counts bytes per query.

The module starts its own lab (ports from 26300) and keeps generated data in
a temporary cache; each run is a pytest process of its own, which uses the
lab that is up and leaves it up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from selftests.labutil import free_port_base, needs
from wanbench.profiles.lab.servers import Lab
from wanbench.sql import SqlTarget
from wanbench.workloads import tpch_load

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.lab, pytest.mark.slow]

#: overrides the family's ``tpch_round_hooks`` fixture: Q2's result is cut after 200 bytes in one cell
CUT_CONFTEST = '''
import pytest
from wanbench.faults.toxiproxy import TOXIC_PREFIX
from wanbench.profiles.lab.servers import Lab
from wanbench.workloads.tpch import RoundHooks

CUT = f"{TOXIC_PREFIX}tpchsuite-cut"


class CutQ2(RoundHooks):
    def __init__(self, lab):
        self.lab = lab

    def before_query(self, number, connection_id):
        if number == 2:
            self.lab.toxiproxy.add_toxic("client_primary", CUT, "limit_data", "downstream", {"bytes": 200})

    def after_query(self, run):
        if run.number == 2:
            self.lab.toxiproxy.delete_toxic("client_primary", CUT)


@pytest.fixture
def tpch_round_hooks(request, cluster):
    if request.node.name != "test_tpch[sf0.01]":
        return None
    return CutQ2(Lab(request.config.getoption("lab_dir"), request.config.getoption("lab_port_base")))
'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    needs("mariadbd", "haproxy", "tpchgen-cli")
    with Lab(tmp_path_factory.mktemp("tpchsuite") / "lab", free_port_base(26300, 26499)) as started:
        yield started


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tpch-cache")


def run(lab: Lab, cache: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-rsf",
           "--lab-dir", str(lab.run_dir), "--lab-port-base", str(lab.port_base), "--tpch-cache", str(cache),
           "--baseline-dir", str(cwd / "store"), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200, check=False)


def _why(out: str) -> str:
    """What pytest said went wrong: its ERRORS and FAILURES sections, else the end of its output."""
    start = min((i for i in (out.find("= ERRORS ="), out.find("= FAILURES =")) if i >= 0), default=-1)
    return out[start:start + 6000] if start >= 0 else out[-4000:]


def _results(path: Path) -> dict[str, dict]:
    return {c["test_id"]: c for c in json.loads(path.read_text())["results"]}


def test_a_reset_while_a_result_is_written_fails_that_cell_alone(lab: Lab, cache: Path, tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CUT_CONFTEST)
    shutil.copy(ROOT / "tests" / "tpch" / "test_tpch.py", tmp_path / "test_tpch.py")
    res = run(lab, cache, tmp_path, "test_tpch.py", "--tpch-sf", "0.01,0.02", "--rounds", "1",
              "--results-json", str(tmp_path / "r.json"))
    out = res.stdout + res.stderr
    print(res.stdout[-6000:])
    assert res.returncode == 1, _why(out)
    assert re.search(r"test_tpch\[sf0\.01\] FAILED", out), out[-4000:]
    assert re.search(r"test_tpch\[sf0\.02\] PASSED", out), out[-4000:]
    m = re.search(r"test_tpch\[sf0\.01\]: 1 TPC-H query\(s\) failed, the others ran on:\n  round 1: Q2 failed "
                  r"after [0-9.]+s \((2013|2055)\): \S+: Lost connection", out)
    assert m, out[-4000:]
    cells = _results(tmp_path / "r.json")
    bad, good = cells["test_tpch[sf0.01]"], cells["test_tpch[sf0.02]"]
    checks = bad["workload_extra"]["checks"]
    assert len(checks) == 21
    assert all(c["passed"] for c in checks)
    assert len(good["workload_extra"]["checks"]) == 22
    assert all(c["passed"] for c in good["workload_extra"]["checks"])
    assert good["verdict"]["status"] == "no-baseline"
    table = {r["test_id"]: r for r in json.loads((tmp_path / "r.json").read_text())["tables"]["tpch"]}
    assert table["test_tpch[sf0.01]"]["queries_failed"] == [2]
    assert table["test_tpch[sf0.02]"]["queries_failed"] == []
    assert "[wanbench]     Q2 failed after" in out  # said as it happened, while the round went on


def test_a_wrong_value_is_a_wrong_answer_and_a_broken_cell(lab: Lab, cache: Path, tmp_path: Path) -> None:
    host, port = lab.endpoint("direct")
    cred = lab.credentials
    target = SqlTarget(host, port, cred.user, cred.password, tpch_load.DATABASE)
    first = run(lab, cache, tmp_path, str(ROOT / "tests" / "tpch"), "--tpch-sf", "0.01", "--rounds", "1")
    assert first.returncode == 0, first.stdout[-3000:]  # loaded (or found) SF 0.01, all 22 right
    assert "22/22 right" in first.stdout

    def sql(stmt: str) -> None:
        cnx = target.connect(who="test")
        try:
            cnx.cursor().execute(stmt)
        finally:
            cnx.close()

    sql("UPDATE lineitem SET l_quantity = l_quantity + 1 WHERE l_orderkey = 1 AND l_linenumber = 1")
    try:
        res = run(lab, cache, tmp_path, str(ROOT / "tests" / "tpch"), "--tpch-sf", "0.01", "--rounds", "1")
    finally:
        sql("UPDATE lineitem SET l_quantity = l_quantity - 1 WHERE l_orderkey = 1 AND l_linenumber = 1")
    assert res.returncode == 1, res.stdout[-3000:]
    assert "TPC-H answers differ from the reference engine's" in res.stdout
    assert "Q1 row 3, sum_qty: got" in res.stdout
    assert "status=broken reasons=INTEGRITY_TPCH_ANSWERS" in res.stdout


def test_under_a_10mbit_cap_bytes_and_predicted_time_per_query(lab: Lab, cache: Path, tmp_path: Path) -> None:
    res = run(lab, cache, tmp_path, str(ROOT / "tests" / "bandwidth"), "--scenario", "primary_tpch",
              "--bandwidth", "0,10mbit", "--concurrency", "1,10", "--rounds", "1", "--tpch-sf", "0.01",
              "--results-json", str(tmp_path / "r.json"))
    out = res.stdout
    print(out[-8000:])
    assert res.returncode == 0, _why(out) + res.stderr[-2000:]
    assert "2 passed, 2 skipped" in out.splitlines()[-1]
    assert "its workload tpch runs at concurrency 1 only" in out  # c10: one query stream only
    assert "predicted at the 10 Mbit/s cap = result bytes / cap" in out
    cells = _results(tmp_path / "r.json")
    capped = cells["test_bandwidth[primary_tpch-10mbit-c1]"]
    assert all(c["passed"] for c in capped["workload_extra"]["checks"])
    assert len(capped["workload_extra"]["checks"]) == 22
    rows = {r["query"]: r for r in json.loads((tmp_path / "r.json").read_text())["tables"]["tpch_queries"]
            if r["test_id"] == "test_bandwidth[primary_tpch-10mbit-c1]"}
    q16 = rows["Q16"]  # the largest result at SF 0.01 (about 12 kB): about 10 ms through 10 Mbit/s
    assert q16["cap_mbit"] == 10.0
    assert q16["predicted_s"] == pytest.approx(q16["result_bytes"] * 8 / 10e6)
    # no lower bound on its time: the cap's burst (50 ms of its rate: 62.5 kB at 10 Mbit/s) holds all
    # of 12 kB, so after a pause the result may pass at line rate (7.2 ms against 9.5 predicted, once)
    assert q16["seconds"] > 0
    census = capped["census"]["metrics"]
    assert census["bytes_per_op.primary"]["value"] > 100  # bytes per query, from the server's counters
    assert capped["census"]["link_bytes_per_op"]["proxy_primary"] > 100  # ... and on the faulted link
