"""The gate inside pytest, end to end in a throw-away project: record a
baseline, rerun, catch a real regression, refuse another environment, stop
at collection on a bad budget file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX, NO_CLUSTER

ROOT = Path(__file__).resolve().parent.parent
BATCHES = ROOT / "selftests" / "data" / "gate" / "probe_read_batches.json"

CONFTEST = '''
import json, os
from pathlib import Path
import pytest

# wanbench's plugin (options, gate, ...) comes from its pytest11 entry point.


def pytest_configure(config):
    """Count the invocations: each one measures the next batch of its plan."""
    counter = Path(config.rootpath) / "invocations"
    n = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(n + 1))
    config.invocation_number = n


@pytest.fixture(scope="session")
def run_context():
    return json.loads(os.environ["GATE_CONTEXT"])
''' + NO_CLUSTER

TEST_MODULE = '''
import json, os
import pytest
from wanbench.results import CellResult, Round, WorkloadResult

with open(os.environ["GATE_BATCHES"]) as fh:
    BATCHES = json.load(fh)["batches"]
PLAN = json.loads(os.environ["GATE_PLAN"])


@pytest.mark.parametrize(("scenario", "tags"), PLAN, ids=[p[0] for p in PLAN])
def test_cell(request, gate, scenario, tags):
    """``tags``: one recorded batch per invocation (the last one repeats); ``tag*0.6`` scales its QPS."""
    tags = [tags] if isinstance(tags, str) else tags
    tag, _, factor = tags[min(request.config.invocation_number, len(tags) - 1)].partition("*")
    rounds = tuple(Round.from_json({**r, "qps": r["qps"] * float(factor or 1)}) for r in BATCHES[tag])
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
#: five runs of unchanged code, one recorded batch each, then the same code again
RUNS = [["replica_read", [f"same{i}-base" for i in range(11, 17)]], ["proxy", [f"same{i}-base" for i in range(1, 7)]]]


def test_first_run_passes_and_says_there_was_nothing_to_compare(project: Path) -> None:
    first = run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save", "--release", "10.11.19-ga")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "2 passed" in first.stdout.splitlines()[-1]
    assert "2 cell(s) measured with no baseline to compare: they pass" in first.stdout
    assert "[no-baseline]" not in first.stdout  # counted, not listed: a first full matrix would list them all
    saved = list((project / "store").glob("lab-*.json"))
    assert len(saved) == 1
    assert f"baseline saved: {saved[0]} (2 cells)" in first.stdout
    stored = json.loads(saved[0].read_text())
    assert stored["runs"][0]["release"] == "10.11.19-ga"
    assert stored["runs"][0]["cells"]["rtt/replica_read/50ms/c=8/proxy/probe_read"]["summary"]["qps"] > 0


def test_baseline_runs_rerun_unchanged_and_catch_a_regression(project: Path) -> None:
    """--baseline-runs 5 records five accepted runs as five invocations; a
    sixth of the same code is no regression; a 40 % slower one is."""
    saved = run(project, RUNS, "--budgets", "budgets.yaml", "--baseline-save", "--baseline-runs", "5")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert "recording baseline run 5 of 5 as a separate invocation" in saved.stdout
    assert (project / "invocations").read_text() == "5"
    store = json.loads(next((project / "store").glob("lab-*.json")).read_text())
    assert len(store["runs"]) == 5
    again = run(project, RUNS, "--budgets", "budgets.yaml")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "regression" not in again.stdout
    slower = [["replica_read", ["same10-base*0.6"]], ["proxy", ["same7-base"]]]
    res = run(project, slower, "--budgets", "budgets.yaml")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed" in res.stdout.splitlines()[-1]
    assert "replica_read rtt=50ms c=8: QPS 13289 is" in res.stdout
    assert "1 run vs 5 accepted, baseline " in res.stdout
    assert "wanbench gate" in res.stdout  # the summary section


def test_gate_max_runs_repeats_undecided_cells_as_separate_invocations(project: Path) -> None:
    """Accepted runs 5 % apart: one run 12 % slower cannot be told from them
    at alpha 0.05 / 3 looks; the next invocations of the chain decide."""
    spread = [["replica_read", [f"same11-base*{f}" for f in (1.0, 1.06, 0.94, 1.04, 0.96)]]]
    assert run(project, spread, "--budgets", "budgets.yaml", "--baseline-save", "--baseline-runs", "5").returncode == 0
    (project / "invocations").write_text("0")
    slower = [["replica_read", ["same11-base*0.88", "same11-base*0.86", "same11-base*0.87"]]]
    chained = run(project, slower, "--budgets", "budgets.yaml", "--gate-max-runs", "3")
    out = chained.stdout
    assert "1 inconclusive (alpha 0.05 over 1 cells, run 1 of at most 3" in out, out
    assert "measuring them again as a separate invocation (run 2 of at most 3)" in out, out
    assert "2 runs vs 5 accepted" in out, out
    assert "[run 2 of at most 3]" in out, out
    assert chained.returncode == 1, out
    assert "run 2 ended with exit status 1" in out
    assert (project / "invocations").read_text() == "2"  # decided at the second look: no third run


def test_strict_gate_fails_inconclusive_cells(project: Path) -> None:
    assert run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save").returncode == 0
    # one accepted run: the gate cannot know how much runs differ
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


def test_a_chain_is_driven_from_outside_any_session(project: Path) -> None:
    """The process the user started runs no session of its own: it starts
    each run of the chain (the counter counts sessions), and an option that
    only shows something (--collect-only) is no chain at all."""
    shown = run(project, GOOD, "--budgets", "budgets.yaml", "--gate-max-runs", "3", "--collect-only", "-q")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "[wanbench]" not in shown.stdout
    assert (project / "invocations").read_text() == "1"
    saved = run(project, GOOD, "--budgets", "budgets.yaml", "--baseline-save", "--baseline-runs", "2")
    assert saved.returncode == 0, saved.stdout + saved.stderr
    assert (project / "invocations").read_text() == "3"
    assert saved.stdout.count("baseline saved:") == 2


def test_argv_of_each_run_of_a_chain() -> None:
    from wanbench.pytest_plugin.chain import chained_args

    typed = ["-k", "rtt", "tests/rtt", "--clean-alluredir", "--results-json=r.json", "--gate-max-runs", "3",
             "--baseline-save"]
    first = chained_args(typed, run=1, results_json="r.json", baseline_save=False, drop=())
    assert first == ["-k", "rtt", "tests/rtt", "--clean-alluredir", "--gate-max-runs", "3", "--baseline-save",
                     "--results-json", "r.json"]
    second = chained_args(typed, run=2, results_json="r.json", baseline_save=False, drop=["tests/rtt"])
    assert second == ["-k", "rtt", "--gate-max-runs", "3", "--results-json", "r.run2.json"]
    base = chained_args(["--baseline-runs", "4", "--baseline-save", "tests/"], run=3, results_json=None,
                        baseline_save=True)
    assert base == ["tests/", "--baseline-save", "--baseline-runs", "1"]


def test_a_run_of_a_chain_dies_with_its_driver(tmp_path: Path) -> None:
    """kill -9 of the process the user started: the run it started is
    killed by the kernel at once (its faults then go with its lease, as for
    any killed runner), not left measuring on its own. The driver's chain
    file, which it could not remove, is in its scratch directory: the next
    run's sweep removes it, and nothing is left."""
    (tmp_path / "test_slow.py").write_text(
        "import os, time\nfrom pathlib import Path\n\n"
        "def test_slow(request):\n    Path('chain.path').write_text(request.config.getoption('gate_chain'))\n"
        "    Path('run.pid').write_text(str(os.getpid()))\n    time.sleep(120)\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    scratch_dir = tmp_path / "tmp"
    scratch_dir.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch_dir)}  # the drivers' scratch, and nobody else's
    driver = subprocess.Popen([sys.executable, "-m", "pytest", "--gate-max-runs", "2", "-q"], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid_file = tmp_path / "run.pid"
    try:
        for _ in range(300):
            if pid_file.exists() and pid_file.read_text():
                break
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert child != driver.pid
        driver.kill()
        driver.wait(timeout=10)
        for _ in range(100):
            if not Path(f"/proc/{child}").exists() or "Z" in _state(child):
                break
            time.sleep(0.1)
        assert not Path(f"/proc/{child}").exists() or "Z" in _state(child), "the run outlived its driver"
    finally:
        driver.kill()
    chain = Path((tmp_path / "chain.path").read_text())
    assert chain.exists(), "kill -9: the driver could not remove its chain file"
    assert chain.parent.parent == scratch_dir
    assert json.loads((chain.parent / "owner.json").read_text())["pid"] == driver.pid
    following = subprocess.run([sys.executable, "-m", "pytest", "--gate-max-runs", "2", "-q", "-k", "no_such_test"],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert following.returncode == 5, following.stdout + following.stderr  # nothing selected: nothing to run
    assert f"removed stale scratch directory {chain.parent} (its run (pid {driver.pid}) is gone)" in following.stdout
    assert list(scratch_dir.iterdir()) == [], "the next run swept the killed driver's scratch and removed its own"


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
