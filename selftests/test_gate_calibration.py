"""``bench/gate_calibration`` end to end on real servers, shrunk to one
comparison of each kind: it measures, judges, reports, and cleans up."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gate_calibration"
PORTS = (29306, 29307, 29474)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.lab
@pytest.mark.slow
def test_one_comparison_of_each_kind(tmp_path: Path) -> None:
    for tool in ("mariadbd", "mariadb-install-db", "sysbench"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    if not (ROOT / "bin" / "toxiproxy-server").exists():
        pytest.skip("bin/toxiproxy-server is not installed (scripts/setup)")
    out = tmp_path / "cal.json"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--same", "1", "--handicapped", "1", "--rounds", "3", "--queries", "3000",
         "--handicap-rate", "300", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    # 1 + 1 comparisons are too few for the thresholds: the verdict must say FAIL
    assert res.returncode == 1, res.stdout + res.stderr
    assert "overall               : FAIL" in res.stdout
    report = json.loads(out.read_text())
    assert report["same_code"]["n"] == 1
    assert report["handicapped"]["n"] == 1
    assert len(report["batches"]) == 4
    assert all(len(b["rounds"]) == 3 for b in report["batches"])
    # a 300 KB/s bandwidth toxic delays every response: the handicap must cost QPS
    assert report["handicap_cost_alternating"] > 0.10
    assert all(not port_open(p) for p in PORTS), "calibration servers left running"
    assert "gatecal" not in json.dumps(report["messages"])  # no credentials in what it reports
