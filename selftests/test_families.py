"""One contract per family, one registry (``wanbench.families``): the
built-in families are read from it by the gate, the results JSON, Allure,
the fingerprint and ``--load-hosts``, exactly as the name tables they
replaced read them; a family a plugin registers through
``pytest_wanbench_families`` is read the same way; the wheel carries every
family's files."""

from __future__ import annotations

import fnmatch
import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX, NO_CLUSTER
from wanbench import families
from wanbench.errors import ConfigError
from wanbench.families import Family, Metric
from wanbench.faults.base import FAMILY_KIND
from wanbench.gate import integrity
from wanbench.gate.baseline import samples_of
from wanbench.gate.budgets import METRICS, SECONDS_METRICS, all_families, fault_families, outage_families
from wanbench.report.allure_out import perf_metrics
from wanbench.workloads import engine_class

ROOT = Path(__file__).resolve().parent.parent


def test_the_built_in_families_in_marker_order() -> None:
    declared = tuple(importlib.import_module(m).FAMILY.name for m in families.BUILT_IN)
    assert families.names() == ("rtt", "bandwidth", "loss", *declared)
    assert declared[:3] == ("sysbench", "tpcc", "ycsb")
    assert fault_families() == tuple(FAMILY_KIND)  # every fault family has levels of a fault kind
    assert outage_families() == ("availability",)
    assert set(all_families()) == set(families.names())
    for fam in families.families():
        if fam.engine:
            assert callable(getattr(engine_class(fam.name), "runner", None)), fam.name


#: the options run_context fingerprinted before the registry, always (their hash must not move)
BEFORE_THE_REGISTRY = {"duration": 30.0, "warmup": 5.0, "tables": 4, "table_size": 10000, "rate": None,
                       "warehouses": [1], "tpcc_wait": False, "ycsb_records": 10000, "ycsb_fields": 10,
                       "ycsb_field_length": 100, "ycsb_operations": None}


class _Options:
    """What every module of the plugin table registers in ``pytest_addoption``, at its default."""

    def __init__(self) -> None:
        self.defaults: dict[str, Any] = {}

    def getgroup(self, *_args: Any, **_kwargs: Any) -> _Options:
        return self

    def addoption(self, *names: str, **attrs: Any) -> None:
        dest = attrs.get("dest") or names[0].lstrip("-").replace("-", "_")
        default = attrs.get("default")
        convert = attrs.get("type")
        self.defaults[dest] = convert(default) if isinstance(default, str) and convert else default  # as argparse


def default_options(**given: Any) -> dict[str, Any]:
    """Every option of an empty command line (``given`` instead of some), by ``dest``."""
    import wanbench.pytest_plugin as plugin

    options = _Options()
    for name in plugin.pytest_plugins:
        add = getattr(importlib.import_module(name), "pytest_addoption", None)
        if add is not None:
            add(options)
    return {**options.defaults, **given}


def test_the_fingerprint_of_a_run_with_the_defaults_is_what_it_was() -> None:
    """Families added since fingerprint a run only where it sets their options (``fingerprint_unless``)."""
    assert families.fingerprint_params(default_options().__getitem__) == BEFORE_THE_REGISTRY


def test_a_fingerprint_option_nobody_registers_is_named() -> None:
    fam = Family("nofp", "a family whose option is missing", fingerprint=("nofp_size",))
    with families.registered(fam), pytest.raises(ConfigError, match="'nofp' fingerprints runs with option 'nofp_size'"):
        families.fingerprint_params(default_options().__getitem__)


def _cell(**more: Any) -> dict[str, Any]:
    return {"test_id": "t", "family": "rtt", "scenario": "s", "level": {"kind": "delay", "value": 50, "label": "50ms"},
            "concurrency": 4, "workload": "probe_read",
            "rounds": [{"seconds": 1.0, "queries": 100, "qps": 100.0, "tps": None, "latency_ms": {"p99": 2.0}}],
            **more}


def test_samples_come_from_the_families_that_own_the_cell() -> None:
    tpcc = _cell(workload="tpcc", workload_extra={"tpmc_rounds": [600.0, None, 660.0], "tpmc": 630.0})
    assert samples_of(tpcc)["tpmc"] == [600.0, 660.0]
    assert samples_of(_cell(workload="tpcc", workload_extra={"tpmc": 630.0}))["tpmc"] == [630.0]  # before tpmc_rounds
    ycsb = _cell(workload="ycsb_workloada", workload_extra={"per_op_rounds": [
        {"READ": {"ops": 900.0, "p99_ms": 1.5}, "UPDATE": {"ops": 100.0, "p99_ms": 9.0}},
        {"READ": {"ops": 950.0, "p99_ms": 1.4}}]})
    s = samples_of(ycsb)
    assert s["ops.READ"] == [900.0, 950.0]
    assert s["latency_ms.p99.UPDATE"] == [9.0]
    heartbeat = _cell(extra={"heartbeat": {"rto_s": 2.5, "recovery_s": None}})  # rides beside any cell
    assert samples_of(heartbeat)["rto_s"] == [2.5]
    assert "recovery_s" not in samples_of(heartbeat)
    assert set(samples_of(_cell())) == {"qps", "error_rate", "latency_ms.p99"}  # a probe cell: every cell's only


def test_integrity_reads_each_owning_family_heartbeat_first() -> None:
    failed = {"checks": [{"name": "3.3.2.1", "passed": False, "message": "w_ytd != sum(d_ytd)"},
                         {"name": "3.3.2.2", "passed": True}]}
    hb = {"lost_writes": 2, "rpo": [{"source": "primary", "lost": 2, "first_lost_at": 1.0, "last_lost_at": 1.5}]}
    problems = integrity.problems_of(_cell(workload="tpcc", workload_extra=failed, extra={"heartbeat": hb}))
    assert [p.code for p in problems] == [integrity.LOST_WRITES, integrity.TPCC_CONSISTENCY]
    assert problems[1].message == "TPC-C consistency violated after the run (1 check(s)):\n  w_ytd != sum(d_ytd)"
    assert "t: 2 acknowledged heartbeat writes are missing" in problems[0].message
    assert integrity.problems_of(_cell(workload="probe_read", workload_extra=failed)) == ()  # nobody's checks


def test_the_metric_tables_are_every_familys() -> None:
    assert METRICS["tpmc"] is True
    assert METRICS["latency_ms.p99.READ"] is False
    assert "rto_s" in SECONDS_METRICS
    assert "qps" not in SECONDS_METRICS
    shown = perf_metrics()
    assert shown["tpmc"] == ("tpmC", "tpmC", "higher")
    assert shown["ops.READ"] == ("READ OPS", "ops", "higher")
    assert "rto_s" not in shown
    fam = Family("toyfam", "a toy", metrics=(Metric("toy_ms", False, "toy", "ms"),))
    with families.registered(fam):
        assert METRICS["toy_ms"] is False
        assert "toy_ms" in perf_metrics()
    assert "toy_ms" not in METRICS


def test_a_plugin_cannot_replace_a_built_in_family() -> None:
    with pytest.raises(ConfigError, match="'tpcc' is built in"):
        families.register(Family("tpcc", "another TPC-C"))
    with pytest.raises(ConfigError, match="kind 'weird'"):
        Family("x", "y", kind="weird")


def test_every_familys_files_are_package_data() -> None:
    """Each family's files exist and pyproject's package-data patterns carry them (the wheel: test_wheel.py)."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["wanbench"]
    for fam in families.families():
        for glob in fam.package_data:
            found = sorted((ROOT / "wanbench").glob(glob))
            assert found, f"{fam.name}: package data {glob} matches no file"
            for path in found:
                rel = path.relative_to(ROOT / "wanbench").as_posix()
                assert any(fnmatch.fnmatchcase(rel, p) for p in patterns), f"{fam.name}: {rel} is not in the wheel"


# -- a family from a plugin, end to end in a throw-away project (no lab) ----------------------------------------------

CONFTEST = '''
import json, os
import pytest
from wanbench.families import Family, Integrity, Metric, Section


def pong_samples(cell):
    return {"pong_ms": [r["latency_ms"]["max"] for r in cell["rounds"]]}


def pong_tables(cells):
    rows = [{"test_id": c["test_id"], "qps": c["qps"]} for c in cells if c["family"] == "pong"]
    return {"pong": rows} if rows else None


def pong_summary(cells):
    return [Section("wanbench pong: the toy's own block", tuple(c["test_id"] for c in cells if c["family"] == "pong"))]


def pytest_wanbench_families():
    return Family("pong", "a plugin's family", metrics=(Metric("pong_ms", False, "slowest pong", "ms"),),
                  samples=pong_samples, integrity=Integrity("INTEGRITY_PONG", "pong lost ({n} check(s))"),
                  tables=pong_tables, summary=pong_summary)


@pytest.fixture(scope="session")
def run_context():
    return json.loads(os.environ["GATE_CONTEXT"])
''' + NO_CLUSTER

TEST_MODULE = '''
import pytest
from wanbench.results import Latency, Round, WorkloadResult

pytestmark = pytest.mark.pong


@pytest.mark.parametrize("lost", [False, True])
def test_pong(record, gate, lost):
    rounds = tuple(Round(1.0, 100, 100.0, latency_ms=Latency(avg=1.0, max=m)) for m in (3.0, 4.0, 5.0))
    checks = [{"name": "pong", "passed": not lost, "message": "a pong went missing"}]
    result = WorkloadResult("pong", 1, rounds, Latency(avg=1.0), extra={"checks": checks})
    gate.check(record(result, family="pong", scenario="toy", path="direct"))
'''

BUDGETS = "version: 1\\nprofile: lab\\nrules:\\n  - family: pong\\n    baseline:\\n      pong_ms: 10%\\n"


def test_a_plugins_family_is_read_like_a_built_in_one(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_pong.py").write_text(TEST_MODULE)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nfilterwarnings = error\n")
    (tmp_path / "budgets.yaml").write_text(BUDGETS.replace("\\n", "\n"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GATE_CONTEXT": json.dumps(CTX)}
    res = subprocess.run([sys.executable, "-m", "pytest", "-rsf", "--strict-markers", "--budgets", "budgets.yaml",
                          "--baseline-dir", "store", "--baseline-save", "--results-json", "r.json",
                          "-p", "no:randomly"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert "1 failed, 1 passed" in out, out  # the budget file knows the family and its metric
    assert "[wanbench] cell 1 of 2: test_pong[False]" in out  # a measured cell: progress counts it
    assert "wanbench pong: the toy's own block" in out
    assert "pong lost (1 check(s)):" in out
    assert "INTEGRITY_PONG" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert [r["test_id"] for r in doc["tables"]["pong"]] == ["test_pong[False]", "test_pong[True]"]
    assert [c["verdict"]["status"] for c in doc["results"]] == ["no-baseline", "broken"]
    (stored,) = (tmp_path / "store").glob("lab-*.json")  # the gate kept the family's own samples
    (cell,) = json.loads(stored.read_text())["runs"][0]["cells"].values()
    assert cell["samples"]["pong_ms"] == [3.0, 4.0, 5.0]
