"""Shared by the bench scripts that measure *between-invocation* noise:
one run = one ``pytest`` invocation of the suite on a freshly started lab,
exactly as a CI job or a nightly run makes it."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from wanbench.profiles.lab.layout import DEFAULT_CPU_LAYOUT  # noqa: E402

#: the workloads the gate is calibrated on: level 0 of the write and read
#: probes, and sysbench's oltp_read_write through the proxy
WORKLOADS: dict[str, list[str]] = {
    "write": ["tests/rtt", "-k", "rtt and replica_write", "--rtt", "0", "--concurrency", "10"],
    "read": ["tests/rtt", "-k", "rtt and replica_read", "--rtt", "0", "--concurrency", "10"],
    "oltp": ["tests/sysbench", "-k", "oltp_read_write and proxy", "--workloads", "oltp_read_write",
             "--threads", "8", "--duration", "8s", "--warmup", "2s", "--tables", "2", "--table-size", "5000"],
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@dataclass(frozen=True)
class RunResult:
    workload: str
    median_qps: float
    rounds: tuple[float, ...]
    seconds: float
    handicap: int | None


def run_once(workload: str, *, port_base: int, rounds: int, cpus: str = DEFAULT_CPU_LAYOUT,
             handicap: int | None = None, extra: tuple[str, ...] = ()) -> RunResult:
    """One separate invocation on a fresh lab (its own run directory, started
    and stopped by the suite); the cell's run median from --results-json."""
    tmp = Path(tempfile.mkdtemp(prefix="wanbench-bench-run-"))
    try:
        results = tmp / "results.json"
        cmd = [sys.executable, "-m", "pytest", *WORKLOADS[workload], "--rounds", str(rounds),
               "--lab-cpus", cpus, "--lab-dir", str(tmp / "lab"), "--lab-port-base", str(port_base),
               "--baseline-dir", str(tmp / "store"), "--results-json", str(results), "-q", "-p", "no:randomly",
               *(["--lab-handicap", str(handicap)] if handicap else []), *extra]
        t0 = time.monotonic()
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
                             env={**os.environ, "PYTHONUNBUFFERED": "1"})
        seconds = time.monotonic() - t0
        if not results.exists():
            raise RuntimeError(f"{workload} run failed (exit {res.returncode}):\n{res.stdout[-2000:]}\n"
                               f"{res.stderr[-2000:]}")
        cells = json.loads(results.read_text())["results"]
        if len(cells) != 1:
            raise RuntimeError(f"{workload}: expected one cell, got {[c['test_id'] for c in cells]}")
        qps = tuple(float(r["qps"]) for r in cells[0]["rounds"])
        return RunResult(workload, statistics.median(qps), qps, seconds, handicap)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
