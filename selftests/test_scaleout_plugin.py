"""``pytest -n 2 --labs 2`` through the real plugin, xdist and scheduler, with
the lab left out: the ``fault`` fixture is replaced by one that applies
nothing and the cells record fixed numbers, so what is checked is the
sharing and the merge (same cells, ids, order, tables, verdicts, baseline
file as one process) and a worker that dies mid-scenario, in seconds.
selftests/test_scaleout_lab.py does the same on real labs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX, NO_CLUSTER

pytestmark = pytest.mark.slow  # pytest-xdist runs in subprocesses: seconds each

CONFTEST = f'''
import json
import time

import pytest

from wanbench.fixtures.faults import FaultContext


@pytest.fixture(scope="session")
def run_context():  # stands in for the cluster's facts: no lab is started
    return json.loads({json.dumps(CTX)!r})
{NO_CLUSTER}

@pytest.fixture(scope="module")
def fault(request):  # the real parametrization (scenario, level); nothing is applied
    scenario, level = request.param
    return FaultContext("rtt", scenario, level, None, None, time.monotonic())
'''

CELLS = '''
import os
import signal

import pytest

from wanbench.results import Latency, Round, WorkloadResult

pytestmark = pytest.mark.rtt
QPS = {"replica_write": 1000.0, "primary": 5000.0}


def test_rtt(fault, concurrency, record, gate):
    if os.environ.get("KILL_AT") == f"{fault.scenario.name}-{fault.level.label}-c{concurrency}":
        os.kill(os.getpid(), signal.SIGKILL)  # the worker dies mid-scenario, as with kill -9
    q = QPS[fault.scenario.name] / (1 + fault.level.value / 10) * (1 + concurrency / 100)
    lat = Latency(avg=1.0, min=0.5, p50=1.0, p90=1.5, p95=2.0, p99=3.0, p999=4.0, max=5.0)
    rounds = tuple(Round(seconds=100 / (q + i), queries=100, qps=q + i, latency_ms=lat) for i in range(3))
    cell = record(WorkloadResult("write_probe", concurrency, rounds, lat))
    gate.check(cell)
'''

MATRIX = ["--scenario", "replica_write,primary", "--rtt", "0,20ms", "--concurrency", "1,4", "--rounds", "3"]
IDS = [f"test_rtt[{sc}-{lv}-c{c}]" for sc in ("primary", "replica_write") for lv in ("0ms", "20ms") for c in (1, 4)]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_rtt=CELLS)
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:randomly", "-p", "no:cacheprovider", *MATRIX, *args, timeout=180)


def _cells(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["results"])


def test_two_workers_give_one_processs_cells_tables_and_verdicts(project: pytest.Pytester, tmp_path: Path) -> None:
    one = run(project, "--results-json", str(tmp_path / "one.json"), "--baseline-dir", str(tmp_path / "b1"),
              "--baseline-save")
    assert one.ret == 0, one.stdout.str()
    two = run(project, "-n", "2", "--labs", "2", "--lab-port-base", "25400",
              "--results-json", str(tmp_path / "two.json"), "--baseline-dir", str(tmp_path / "b2"), "--baseline-save",
              "--alluredir", str(tmp_path / "allure"))
    out = two.stdout.str()
    assert two.ret == 0, out
    a, b = _cells(tmp_path / "one.json"), _cells(tmp_path / "two.json")
    assert [c["test_id"] for c in a] == IDS  # a one-process run's order: scenario, level, concurrency
    assert [c["test_id"] for c in b] == IDS  # the merge puts the workers' cells back in that order
    for x, y in zip(a, b, strict=True):
        assert (x["qps"], x["level"], x["verdict"]["status"]) == (y["qps"], y["level"], y["verdict"]["status"])
        assert "cluster" not in x
    lab_of = {c["scenario"]: {d["cluster"]["name"] for d in b if d["scenario"] == c["scenario"]} for c in b}
    assert lab_of == {"replica_write": {"lab1"}, "primary": {"lab2"}} or lab_of == {
        "replica_write": {"lab2"}, "primary": {"lab1"}}, lab_of  # one lab per scenario, both labs used
    ta = json.loads((tmp_path / "one.json").read_text())["tables"]["rtt"]
    tb = json.loads((tmp_path / "two.json").read_text())["tables"]["rtt"]
    assert [{k: v for k, v in r.items() if k != "clusters"} for r in tb] == ta
    assert "over 8 cells" in out
    assert "wanbench gate" in out
    assert "| cluster" in out  # the tables name the lab of each row
    saved = [line for line in out.splitlines() if "baseline saved:" in line]
    assert len(saved) == 1, saved
    assert "8 cells of lab1, lab2" in saved[0], saved
    results = [json.loads(p.read_text()) for p in (tmp_path / "allure").glob("*-result.json")]
    assert len(results) == 8
    assert {lab["value"] for r in results for lab in r["labels"] if lab["name"] == "cluster"} == {"lab1", "lab2"}
    assert "clusters=lab1, lab2" in (tmp_path / "allure" / "environment.properties").read_text()
    (store,) = (tmp_path / "b2").glob("*.json")
    assert json.loads(store.read_text())["runs"][0]["cells"].keys() == json.loads(
        next((tmp_path / "b1").glob("*.json")).read_text())["runs"][0]["cells"].keys()


@pytest.mark.parametrize("restarts", ["0", "2"])
def test_a_worker_that_dies_mid_scenario(project: pytest.Pytester, tmp_path: Path, restarts: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILL_AT", "replica_write-20ms-c1")
    res = run(project, "-n", "2", "--labs", "2", "--lab-port-base", "25400", "--results-json",
              str(tmp_path / "r.json"), "--baseline-dir", str(tmp_path / "b"), "--max-worker-restart", restarts,
              "--alluredir", str(tmp_path / "allure"))
    out = res.stdout.str()
    assert res.ret == 1, out
    assert "crashed while running" in out, out
    assert "test_rtt[replica_write-20ms-c1]" in out, out
    assert "broken: not measured" in out, out
    doc = json.loads((tmp_path / "r.json").read_text())
    measured = [c["test_id"] for c in doc["results"]]
    broken = [b["test_id"] for b in doc["broken"]]
    assert measured == [i for i in IDS if not i.startswith("test_rtt[replica_write-20ms")]
    assert broken == ["test_rtt[replica_write-20ms-c1]", "test_rtt[replica_write-20ms-c4]"]
    allure = {r["name"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "allure").glob("*-result.json"))}
    assert allure["test_rtt[replica_write-20ms-c4]"]["status"] == "broken"  # written by the controller
    assert allure["test_rtt[replica_write-20ms-c1]"]["status"] == "broken"
    assert "1 failed" in out, out.splitlines()[-1]
    assert "1 error" in out, out.splitlines()[-1]
