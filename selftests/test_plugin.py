"""wanbench as a pytest plugin, run the way users run it: options, markers
and fixtures from the entry point in any directory, a locked-down ``--help``,
options from the command line, ``PYTEST_ADDOPTS`` and ini ``addopts`` alike,
progress lines that never split pytest's, ``--lf``, and pytest-benchmark fed
with the cells' rounds. No lab: cells are recorded from fixed numbers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from selftests.gate_context import CTX, NO_CLUSTER

ROOT = Path(__file__).resolve().parent.parent
DISPLAY = ROOT / "selftests" / "data" / "tiup_display_seed000.txt"
HELP_GOLDEN = ROOT / "selftests" / "data" / "plugin" / "help.txt"
HELP_HEAD = "wanbench: network-fault performance regression suite:"

#: a project that records fake cells through the real `record` fixture
CONFTEST = f'''
import json

import pytest


@pytest.fixture(scope="session")
def run_context():  # stands in for the cluster's facts: no lab is started
    return json.loads({json.dumps(CTX)!r})
{NO_CLUSTER}'''

CELLS = '''
import os
import pytest
from wanbench.results import Latency, Round, WorkloadResult

QPS = {"a": [1000.0, 1010.0, 990.0, 1005.0, 995.0], "b": [500.0, 505.0, 495.0, 502.0, 498.0]}


@pytest.mark.rtt
@pytest.mark.parametrize("scenario", sorted(QPS))
def test_cell(scenario, record, gate, request):
    bad = os.environ.get("FAIL_CELL") == scenario
    rounds = tuple(Round(seconds=2000 / q, queries=2000, qps=q, errors=2000 if bad else 0,
                         latency_ms=Latency(avg=8.0, min=1.0, p50=7.0, p90=12.0, p95=15.0, p99=20.0, p999=30.0,
                                            max=40.0))
                   for q in QPS[scenario])
    from wanbench.pytest_plugin.progress import note
    for i in range(1, 3):
        note(request.config, f"  round {i}/2 of {scenario}")
    cell = record(WorkloadResult("probe_read", 8, rounds, rounds[0].latency_ms, errors=sum(r.errors for r in rounds)),
                  family="rtt", scenario=scenario, path="proxy",
                  level={"kind": "delay", "value": 50.0, "label": "50ms"})
    gate.check(cell)


def test_not_a_cell():
    pass
'''


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:randomly", *args, timeout=120)


@pytest.fixture
def cells(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_cells=CELLS)
    return pytester


def test_options_are_known_before_arguments_are_parsed(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """The issue's first command, from an empty directory and from the
    checkout: a separate-value --cluster with an absolute path elsewhere."""
    outside = tmp_path / "elsewhere" / "display.txt"
    outside.parent.mkdir()
    shutil.copy(DISPLAY, outside)
    res = run(pytester, "--collect-only", "-q", "--pyargs", "wanbench.suite", "-k", "rtt and tikv_write",
              "--cluster", str(outside))
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    assert "24/" in res.stdout.lines[-1], res.stdout.lines[-1]

    here = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-k", "rtt and tikv_write",
                           "--cluster", str(outside)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert here.returncode == 0, here.stdout + here.stderr
    ids = [line for line in here.stdout.splitlines() if "::" in line]
    assert len(ids) == 24, ids
    assert all(i.startswith("tests/rtt/test_rtt.py::test_rtt[tikv_write-") for i in ids), ids
    head = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "--cluster", str(outside), "-k", "x"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False).stdout
    assert f"rootdir: {ROOT}" in head, head[:600]
    assert "configfile: pytest.ini" in head, head[:600]


def test_markers_are_registered_for_strict_markers_anywhere(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_m="""
        import pytest

        @pytest.mark.rtt
        @pytest.mark.tpcc
        @pytest.mark.ycsb
        @pytest.mark.availability
        @pytest.mark.slow
        def test_marked():
            pass
    """)
    res = run(pytester, "--strict-markers", "-q", "--benchmark-disable")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    markers = run(pytester, "--markers").stdout.str()
    for name in ("rtt", "bandwidth", "loss", "sysbench", "tpcc", "ycsb", "availability", "lab", "netns", "slow"):
        assert markers.count(f"@pytest.mark.{name}:") == 1, name


def _help_section(pytester: pytest.Pytester) -> str:
    res = run(pytester, "--help")
    assert res.ret == 0
    text = res.stdout.str()
    assert HELP_HEAD in text, "wanbench's options are missing from --help outside the checkout"
    return HELP_HEAD + text.split(HELP_HEAD, 1)[1].split("\n\n", 1)[0] + "\n"


def test_help_is_locked_down(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every option, metavar, default and help text as shipped. After changing
    an option on purpose: WANBENCH_UPDATE_HELP=1 pytest selftests/test_plugin.py -k help"""
    monkeypatch.setenv("COLUMNS", "120")
    section = _help_section(pytester)
    if os.environ.get("WANBENCH_UPDATE_HELP") == "1":
        HELP_GOLDEN.write_text(section)
    assert section == HELP_GOLDEN.read_text(), (
        "pytest --help changed; if on purpose, regenerate with WANBENCH_UPDATE_HELP=1 "
        "pytest selftests/test_plugin.py -k help")


SETTINGS_TEST = """
def test_settings(oltp_settings, request):
    print(f"ROUNDS={oltp_settings.rounds} ALL={request.config.getoption('rounds')}")
"""


@pytest.mark.parametrize(
    ("how", "expected"),
    [("none", 1), ("cmdline", 4), ("cmdline=", 4), ("env", 4), ("ini", 4)],
)
def test_rounds_from_anywhere(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, how: str,
                              expected: int) -> None:
    """sysbench runs one round unless --rounds is given, wherever it is given."""
    pytester.makepyfile(test_s=SETTINGS_TEST)
    args = ["-s", "-q", "--benchmark-disable"]
    if how == "cmdline":
        args += ["--rounds", "4"]
    elif how == "cmdline=":
        args += ["--rounds=4"]
    elif how == "env":
        monkeypatch.setenv("PYTEST_ADDOPTS", "--rounds 4")
    elif how == "ini":
        pytester.makeini("[pytest]\naddopts = --rounds 4\n")
    res = run(pytester, *args)
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    res.stdout.fnmatch_lines([f"ROUNDS={expected} ALL={4 if how != 'none' else 3}*"])


def _check_progress_layout(lines: list[str]) -> None:
    """Our lines start at column 0 and stand alone; pytest's result lines name their test."""
    for line in lines:
        if "[wanbench]" in line:
            assert line.startswith("[wanbench] "), f"split line: {line!r}"
        if re.search(r"\b(PASSED|SKIPPED|FAILED)\b", line) and "::" not in line and "=" not in line:
            raise AssertionError(f"result without its test: {line!r}")
    assert not [line for line in lines if line.strip() in (".", "s", "F")], "lone result letter"


@pytest.mark.parametrize("flags", [[], ["-v"], ["-s"]])
def test_progress_lines_are_whole_and_count_cells(cells: pytest.Pytester, tmp_path: Path,
                                                  flags: list[str]) -> None:
    res = run(cells, *flags, "--baseline-dir", str(tmp_path / "store"))
    out = res.stdout.lines
    assert res.ret == 0, res.stdout.str()
    _check_progress_layout(out)
    cell_lines = [line for line in out if "] cell " in line]
    assert len(cell_lines) == 2, out
    assert cell_lines[0].startswith("[wanbench] cell 1 of 2: test_cell[a] (elapsed ")
    assert "time left: known after the first cell" in cell_lines[0]
    header = r"cell 2 of 2: test_cell\[b\] \(elapsed [\dhms]+, about [\dhms]+ left\)"
    assert re.search(header, cell_lines[1]), cell_lines
    assert sum("[wanbench]   round" in line for line in out) == 4
    gate = next(i for i, line in enumerate(out) if " wanbench gate " in line)
    assert out[gate + 1].strip(), "blank line under a summary header"
    percent = "$" if "-s" in flags else r" +\[ *\d+%\]$"  # pytest shows no percentages with -s
    assert any(re.match(r"test_cells\.py::test_cell\[a\] PASSED" + percent, line) for line in out), out


def test_quiet_shows_no_progress_and_keeps_pytests_dots(cells: pytest.Pytester, tmp_path: Path) -> None:
    res = run(cells, "-q", "--baseline-dir", str(tmp_path / "store"))
    text = res.stdout.str()
    assert "[wanbench]" not in text.split("wanbench gate")[0]
    res.stdout.fnmatch_lines(["... * [[]100%[]]"])


def test_live_logging_prints_the_lines_once(cells: pytest.Pytester, tmp_path: Path) -> None:
    res = run(cells, "--log-cli-level=INFO", "--baseline-dir", str(tmp_path / "store"))
    text = res.stdout.str()
    assert "[wanbench]   round" not in text
    assert text.count("round 1/2 of a") == 1, text


def test_last_failed_remeasures_only_the_failed_cell(cells: pytest.Pytester, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "store")
    monkeypatch.setenv("FAIL_CELL", "b")
    first = run(cells, "-q", "--baseline-dir", store)
    first.assert_outcomes(failed=1, passed=2)
    assert "test_cell[b] - Failed: b rtt=50ms c=8: error rate 50%" in first.stdout.str()
    monkeypatch.delenv("FAIL_CELL")
    again = run(cells, "--lf", "-v", "--baseline-dir", store)
    again.assert_outcomes(passed=1)  # b, re-measured (and now within budget); a and the plain test not run
    again.stdout.fnmatch_lines(["*run-last-failure: rerun previous 1 failure*", "*cell 1 of 1: test_cell[[]b[]]*"])


def test_benchmark_json_holds_each_rounds_throughput(cells: pytest.Pytester, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    res = run(cells, "-q", "--baseline-dir", str(tmp_path / "store"), f"--benchmark-json={out}")
    assert res.ret == 0, res.stdout.str()
    benches = {b["param"]: b for b in json.loads(out.read_text())["benchmarks"]}
    assert sorted(benches) == ["a", "b"]  # the plain test has no benchmark
    a = benches["a"]
    assert a["group"] == "rtt/a"
    assert a["stats"]["rounds"] == 5
    assert a["stats"]["data"] == pytest.approx([1 / q for q in (1000.0, 1010.0, 990.0, 1005.0, 995.0)])
    assert a["stats"]["ops"] == pytest.approx(1000.0, rel=0.01)
    info = a["extra_info"]
    assert (info["qps"], info["latency_ms_p95"], info["verdict"]) == (1000.0, 15.0, "no-baseline")
    assert (info["family"], info["concurrency"], info["rounds"]) == ("rtt", 8, 5)


def test_benchmark_only_and_skip_select_cells_alike(cells: pytest.Pytester, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    only = run(cells, "-rs", "--benchmark-only", "--baseline-dir", store)
    only.assert_outcomes(passed=2, skipped=1)  # the two cells run, the plain test is skipped by --only
    only.stdout.fnmatch_lines(["*Skipping non-benchmark (--benchmark-only active)*"])
    skip = run(cells, "-rs", "--benchmark-skip", "--baseline-dir", store)
    skip.assert_outcomes(skipped=2, passed=1)
    skip.stdout.fnmatch_lines(["*Skipping benchmark (--benchmark-skip active)*"])


def test_benchmark_compare_against_a_saved_run(cells: pytest.Pytester, tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    first = run(cells, "-q", "--baseline-dir", store, "--benchmark-autosave")
    assert first.ret == 0, first.stdout.str()
    second = run(cells, "-q", "--baseline-dir", store, "--benchmark-compare", "--benchmark-compare-fail=mean:50%")
    assert second.ret == 0, second.stdout.str()
    second.stderr.fnmatch_lines(["*Comparing against benchmarks from*0001_*"])
    second.stdout.fnmatch_lines(["*test_cell[[]a[]] (0001_*", "*test_cell[[]a[]] (NOW)*"])


def test_a_run_whose_cells_all_broke_still_ends_with_its_summary(cells: pytest.Pytester, tmp_path: Path) -> None:
    """pytest-benchmark's "no benchmarks have been run" warning, under
    warnings-as-errors, used to end such a run in a traceback."""
    cells.makeconftest(CONFTEST.replace("    return json.loads", "    raise RuntimeError('no cluster')\n    return"))
    res = run(cells, "-W", "error", "--baseline-dir", str(tmp_path / "store"),
              f"--benchmark-json={tmp_path / 'b.json'}")
    assert res.ret == 1, res.stdout.str() + res.stderr.str()
    # the cells' gate needs the cluster's facts, so they break in setup
    res.stdout.fnmatch_lines(["*RuntimeError: no cluster*", "*1 passed, 2 errors*"], consecutive=False)
    # raised, it reads "pytest_benchmark.logger.PytestBenchmarkWarning: ..." at the end of a traceback
    assert "pytest_benchmark.logger.PytestBenchmarkWarning" not in res.stderr.str()


def test_only_values_pytest_could_take_for_a_test_path_are_joined(tmp_path: Path) -> None:
    from wanbench.pytest_plugin import joined_values

    there = tmp_path / "display.txt"
    there.write_text("x")
    given = ["-k", "rtt", "--cluster", str(there), "--cluster", str(tmp_path / "missing.txt"), "--rounds", "2",
             str(tmp_path)]
    assert joined_values(given, {"--cluster", "--rounds"}) == [
        "-k", "rtt", f"--cluster={there}", "--cluster", str(tmp_path / "missing.txt"), "--rounds", "2", str(tmp_path)]
