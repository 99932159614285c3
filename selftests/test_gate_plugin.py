"""The gate inside pytest, end to end in a throw-away project: record a
baseline, rerun, catch a real regression, refuse another environment, stop
at collection on a bad budget file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX

ROOT = Path(__file__).resolve().parent.parent
BATCHES = ROOT / "selftests" / "data" / "gate" / "probe_read_batches.json"

CONFTEST = '''
import json, os
import pytest

pytest_plugins = ["fixtures.options", "fixtures.gate"]


@pytest.fixture(scope="session")
def run_context():
    return json.loads(os.environ["GATE_CONTEXT"])
'''

TEST_MODULE = '''
import json, os
import pytest
from wanbench.results import CellResult, Round, WorkloadResult

with open(os.environ["GATE_BATCHES"]) as fh:
    BATCHES = json.load(fh)["batches"]
PLAN = json.loads(os.environ["GATE_PLAN"])


@pytest.mark.parametrize(("scenario", "tag"), PLAN, ids=[p[0] for p in PLAN])
def test_cell(gate, scenario, tag):
    rounds = tuple(Round.from_json(r) for r in BATCHES[tag])
    w = WorkloadResult("probe_read", 8, rounds, rounds[0].latency_ms)
    cell = CellResult("t", "rtt", scenario, {"kind": "delay", "value": 50.0, "label": "50ms"}, 8, w, path="proxy")
    try:
        gate.check(cell)
    finally:
        assert cell.verdict is not None and cell.verdict["cell"] == f"rtt/{scenario}/50ms/c=8/proxy/probe_read"
'''

QPS_ONLY = "version: 1\nprofile: lab\nrules:\n  - baseline:\n      qps: 5%\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cells.py").write_text(TEST_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nfilterwarnings = error\n")
    (tmp_path / "budgets.yaml").write_text(QPS_ONLY)
    return tmp_path


def run(project: Path, plan: list[list[str]], *args: str, **ctx: Any) -> subprocess.CompletedProcess[str]:
    context = {**CTX, **ctx}
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GATE_CONTEXT": json.dumps(context),
        "GATE_BATCHES": str(BATCHES),
        "GATE_PLAN": json.dumps(plan),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rsf", "--baseline-dir", str(project / "store"), *args],
        cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False,
    )


GOOD = [["replica_read", "handicap6-base"], ["proxy", "same1-base"]]
SLOWER = [["replica_read", "handicap6-current"], ["proxy", "same1-base"]]


def test_save_rerun_and_catch_a_regression(project: Path) -> None:
    first = run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save", "--release", "10.11.19-ga")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 skipped" in first.stdout
    assert "no-baseline: replica_read rtt=50ms c=8: no baseline for this cell" in first.stdout
    saved = list((project / "store").glob("lab-*.json"))
    assert len(saved) == 1
    assert f"baseline saved: {saved[0]} (2 cells)" in first.stdout
    stored = json.loads(saved[0].read_text())
    assert stored["runs"][0]["release"] == "10.11.19-ga"

    again = run(project, GOOD, "--budgets", "budgets.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "failed" not in again.stdout.splitlines()[-1]

    slower = run(project, SLOWER, "--budgets", "budgets.yaml")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "1 failed" in slower.stdout.splitlines()[-1]
    assert "replica_read rtt=50ms c=8: QPS 20872 is 14.0% below baseline 24278 (budget 5%, p=0.004, " \
           "5 rounds vs 5, baseline " in slower.stdout
    assert "mariadb 10.11.19)" in slower.stdout
    assert "wanbench gate" in slower.stdout  # the summary section


def test_strict_gate_fails_inconclusive_cells(project: Path) -> None:
    assert run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save").returncode == 0
    # same rounds again: the proxy cell's spread hides a 5 % change at alpha 0.05 / 2 cells
    lenient = run(project, GOOD, "--budgets", "budgets.yaml")
    assert lenient.returncode == 0, lenient.stdout
    assert "inconclusive: proxy rtt=50ms c=8" in lenient.stdout
    strict = run(project, GOOD, "--budgets", "budgets.yaml", "--gate-strict")
    assert strict.returncode == 1, strict.stdout
    assert "[--gate-strict]" in strict.stdout


def test_other_environment_is_skipped_as_incomparable(project: Path) -> None:
    assert run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save").returncode == 0
    other = run(project, SLOWER, "--budgets", "budgets.yaml", client={"cpu_model": "Intel Xeon", "cores": 4})
    assert other.returncode == 0, other.stdout
    assert "incomparable: replica_read rtt=50ms c=8: incomparable with the stored baseline: client.cores: 2 -> 4" in (
        other.stdout
    )


def test_bad_budget_file_stops_the_run_at_collection(project: Path) -> None:
    bad = "profile: lab\nrules:\n  - family: rtt\n    level: 10mbit\n    baseline: {qps: 5%}\n"
    (project / "bad.yaml").write_text(bad)
    res = run(project, GOOD, "--budgets", "bad.yaml")
    assert res.returncode == 4, res.stdout + res.stderr
    assert "--budgets: bad.yaml:4: level '10mbit' can never match a rtt cell" in res.stderr
    assert "test_cell" not in res.stdout  # nothing ran


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budgets", "absent.yaml"], "--budgets: 'absent.yaml': no such budget file"),
        (["--baseline-keep", "0"], "--baseline-keep: '0' is not a positive whole number"),
        (["--release", " "], "--release: ' ' is not a release name"),
    ],
)
def test_bad_gate_options_are_usage_errors(project: Path, args: list[str], message: str) -> None:
    res = run(project, GOOD, *args)
    assert res.returncode == 4
    assert message in res.stderr


def test_default_budgets_come_from_the_profile(project: Path) -> None:
    res = run(project, GOOD, "--baseline-save")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "budgets " + str(ROOT / "wanbench" / "budgets" / "lab.yaml") in res.stdout
