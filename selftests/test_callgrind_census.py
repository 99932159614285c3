"""``bench/callgrind_census`` end to end on a tiny window: a MariaDB primary
with the lab's options under callgrind, a few point selects and inserts
counted, the server's own counters proving the window held exactly those
statements, and nothing left running."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selftests.labutil import needs

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "callgrind_census"


@pytest.mark.lab
@pytest.mark.slow
def test_a_tiny_window_is_counted_per_statement(tmp_path: Path) -> None:
    needs("valgrind", "callgrind_control", "mariadbd", "mariadb-install-db", "sysbench")
    out = tmp_path / "cg.json"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--statements", "5", "--warmup", "3", "--settle", "0",
         "--handicap", "index", "--native-runs", "1", "--port-base", "24790", "--dir", str(tmp_path / "runs"),
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert res.returncode in (0, 1), res.stdout + res.stderr  # one run per side: no spread to judge
    assert "callgrind census" in res.stdout, res.stdout + res.stderr
    doc = json.loads(out.read_text())
    sides = [r["side"] for r in doc["runs"]]
    assert sides == ["plain", "handicap", "native"]
    for run in doc["runs"]:
        for kind in ("read", "write"):
            w = run["windows"][kind]
            # exactly the window's statements reached the server, one COM_STMT_EXECUTE each
            n = w["statements"]
            sent = {k: v for k, v in w["sent"].items() if v}
            assert sent == {"Questions": n, "Com_stmt_execute": n}, w
            if run["side"] == "native":
                assert w["instructions"] is None
                assert n >= 3000  # enough for the server's CPU time, read in 10 ms ticks
            else:
                assert n == 5
                # a point select costs tens of thousands of instructions in mariadbd, an insert more
                assert 5_000 < w["per_statement"] < 5_000_000, w
    # the handicap (an index on CHAR(120) every insert maintains) costs writes more
    assert doc["kinds"]["write"]["ratio"] > 1.0
    assert "ratio" in doc["kinds"]["read"]
    assert doc["cost"]["read"]["native_cpu_ms_per_statement"] > 0  # 3,000 statements span several CPU ticks
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == "", "the script left a server running"
