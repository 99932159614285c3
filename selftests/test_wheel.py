"""The wheel carries the plugin, the fixtures and the suite: built from the
checkout, installed into a directory of its own and run from an empty
directory, it collects the whole suite with ``wanbench.fixtures`` and
``wanbench.suite`` taken from the wheel, not from the checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from wanbench import families

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_the_wheel_runs_from_an_empty_directory(tmp_path: Path) -> None:
    wheels, site, empty = tmp_path / "wheels", tmp_path / "site", tmp_path / "empty"
    empty.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(ROOT), "--no-deps", "-w", str(wheels)], check=True, timeout=300)
    (wheel,) = wheels.glob("wanbench-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "wanbench/fixtures/results.py" in names
    assert "wanbench/pytest_plugin/__init__.py" in names
    assert "wanbench/suite/rtt/test_rtt.py" in names
    assert {f"wanbench/workloads/tpch_sql/q{n:02d}.sql" for n in range(1, 23)} <= set(names)  # package data
    for fam in families.families():  # every family's contract: its files, its fixtures, its module
        for glob in fam.package_data:
            wanted = {f"wanbench/{p.relative_to(ROOT / 'wanbench').as_posix()}" for p in (ROOT / "wanbench").glob(glob)}
            assert wanted, f"{fam.name}: {glob} matches no file"
            assert wanted <= set(names), f"{fam.name}: {sorted(wanted - set(names))} not in the wheel"
        if fam.fixtures:
            assert f"{fam.fixtures.replace('.', '/')}.py" in names, fam.fixtures
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run([sys.executable, "-c", "import wanbench.fixtures, wanbench.suite as s;"
                            "print(wanbench.fixtures.__file__); print(s.__file__)"],
                           cwd=empty, env=env, capture_output=True, text=True, check=True)
    assert all(line.startswith(str(site)) for line in where.stdout.split()), where.stdout
    queries = subprocess.run([sys.executable, "-c", "from wanbench.workloads import tpch_queries as q;"
                              "print(len(q.queries()), q.SQL_DIR)"], cwd=empty, env=env, capture_output=True,
                             text=True, check=True)
    assert queries.stdout.split()[0] == "22"
    assert queries.stdout.split()[1].startswith(str(site)), queries.stdout
    run = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "wanbench.suite", "--collect-only", "-q",
                          "-p", "no:randomly", "-p", "no:cacheprovider"],
                         cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "\nrtt/test_rtt.py::test_rtt[" in run.stdout  # node ids relative to the rootdir: wanbench/suite
    assert "\ntpcc/test_tpcc.py::" in run.stdout
    fixtures = subprocess.run([sys.executable, "-m", "pytest", "--fixtures", "-q", "-p", "no:randomly",
                               "-p", "no:cacheprovider"], cwd=empty, env=env, capture_output=True, text=True,
                              timeout=300)
    for name in ("record", "gate", "fault", "run_workload", "cluster"):
        assert f"\n{name}" in fixtures.stdout, name
    # pytest-benchmark makes its storage directory wherever it runs; nothing else may appear
    assert [p.name for p in empty.iterdir() if p.name != ".benchmarks"] == [], "files left behind"
