"""The ``--results-json`` document: strict JSON (no NaN/Infinity anywhere) and
valid against the JSON Schema shipped in the package, for documents made by
the real code paths and for a real lab run."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from selftests.test_report_samples import make_cell
from wanbench.pytest_plugin.reporting import ResultsSink
from wanbench.results import (
    CellResult,
    Latency,
    Round,
    WorkloadResult,
    results_schema_path,
    write_json_atomic,
    write_text_atomic,
)

ROOT = Path(__file__).resolve().parent.parent
PORT_BASE = 31010  # inside this feature's lab port range (31000-31099)


def strict_load(path: Path) -> Any:
    """Python's json accepts NaN/Infinity; other consumers do not."""

    def refuse(token: str) -> None:
        raise AssertionError(f"{path} holds {token}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(results_schema_path().read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def assert_valid(doc: Any) -> None:
    errors = sorted(validator().iter_errors(doc), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:10])


def test_schema_ships_in_the_package() -> None:
    assert results_schema_path().is_file()
    assert results_schema_path().parent.parent.name == "wanbench"
    validator()


def degenerate_cell() -> CellResult:
    """What once wrote bare NaN: a zero-second round, a round with no
    latency, an infinite rate, a NaN in engine extras and client facts."""
    rounds = (Round(seconds=0.0, queries=0, qps=math.nan),
              Round(seconds=1.0, queries=10, qps=math.inf, latency_ms=Latency()))
    w = WorkloadResult("probe_write", 10, rounds, Latency(), client={"share": math.nan},
                       extra={"tpm_total": math.inf, "nested": [math.nan, {"x": -math.inf}]})
    return CellResult("test_rtt[x-0ms-c10]", "rtt", "x", {"kind": "delay", "value": 0.0, "label": "0ms"}, 10, w,
                      extra={"fault_active_s": math.nan})


def test_results_file_is_strict_and_valid(tmp_path: Path) -> None:
    sink = ResultsSink()
    sink.context = {"profile": "lab", "params": {"rounds": 3, "queries": None}, "release": None}
    sink.add(make_cell("replica_write", 0, 10))
    sink.add(make_cell("replica_write", 200, 10, verdict={"status": "pass", "message": "ok", "cell": "c"}))
    sink.add(degenerate_cell())
    sink.add(dataclasses.replace(make_cell("replica_read", 0, 10, with_series=False), family="sysbench",
                                 scenario="oltp_read_only", path="direct"))
    out = tmp_path / "results.json"
    write_json_atomic(out, sink.document())
    doc = strict_load(out)
    assert_valid(doc)
    bad = doc["results"][2]
    assert [r["qps"] for r in bad["rounds"]] == [None, None]
    assert bad["qps"] is None  # the median of NaN and Infinity is not a number either
    assert bad["workload_extra"]["nested"] == [None, {"x": None}]
    assert bad["seconds"]["avg"] == 0.5


def test_atomic_writes_replace_whole_files_and_leave_no_temporary_one(tmp_path: Path) -> None:
    """Every JSON file wanbench writes (results, lab state, PID files, toxic
    leases, Allure's) goes through write_json_atomic: strict JSON, and a
    failed write leaves the old file and nothing else."""
    out = tmp_path / "deeper" / "lease.json"
    write_json_atomic(out, {"hard_deadline": math.inf, "lease_s": 30.0, "pids": (1, 2)})
    assert strict_load(out) == {"hard_deadline": None, "lease_s": 30.0, "pids": [1, 2]}
    with pytest.raises(TypeError):
        write_json_atomic(out, {"not json": object()})
    assert strict_load(out)["lease_s"] == 30.0
    write_text_atomic(tmp_path / "deeper" / "environment.properties", "a=b\n")
    assert sorted(p.name for p in out.parent.iterdir()) == ["environment.properties", "lease.json"]


def test_schema_rejects_what_consumers_could_not_read() -> None:
    doc = {"schema": 1, "run": {"id": "r", "started": "", "finished": ""},
           "results": [make_cell("replica_write", 0, 10).to_json()]}
    assert_valid(doc)
    broken = json.loads(json.dumps(doc))
    broken["results"][0]["rounds"][0]["qps"] = "fast"
    del broken["results"][0]["latency_ms"]["p99"]
    errors = list(validator().iter_errors(broken))
    assert {e.validator for e in errors} >= {"type", "required"}, [e.message for e in errors]


@pytest.mark.lab
@pytest.mark.slow
def test_a_real_lab_run_writes_a_valid_results_file(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-k", "rtt and replica_write", "--rtt", "0,50ms", "--concurrency", "10",
         "--rounds", "2", "--round-cap", "2s", "--lab-port-base", str(PORT_BASE), "--lab-dir", str(tmp_path / "lab"),
         "--baseline-dir", str(tmp_path / "store"), "--results-json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    doc = strict_load(out)
    assert_valid(doc)
    assert [c["level"]["label"] for c in doc["results"]] == ["0ms", "50ms"]
    assert all(len(c["rounds"]) == 2 for c in doc["results"])
