"""Collection of the sysbench OLTP family: ids, -k selection, bad options.
Runs pytest in a subprocess with --collect-only: nothing connects anywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def collect(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
           "tests/sysbench", "--collect-only", "-q", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


def test_ids_cover_workload_path_threads() -> None:
    r = collect("--threads", "8,64")
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [line.split("::", 1)[1] for line in r.stdout.splitlines() if "::test_oltp[" in line]
    assert len(ids) == 10 * 2 * 2
    assert "test_oltp[oltp_read_write-proxy-t64]" in ids
    assert "test_oltp[select_random_ranges-direct-t8]" in ids


def test_k_selects_one_cell() -> None:
    r = collect("--threads", "8,16,32,64,128", "-k", "oltp_read_write and proxy and t64")
    assert r.returncode == 0, r.stdout + r.stderr
    ids = [line for line in r.stdout.splitlines() if "::test_oltp[" in line]
    assert ids == ["tests/sysbench/test_oltp.py::test_oltp[oltp_read_write-proxy-t64]"]


def test_workloads_subset_and_bad_values() -> None:
    r = collect("--workloads", "oltp_point_select,oltp_insert", "--threads", "4")
    ids = [line.split("::", 1)[1] for line in r.stdout.splitlines() if "::test_oltp[" in line]
    assert ids == ["test_oltp[oltp_point_select-direct-t4]", "test_oltp[oltp_point_select-proxy-t4]",
                   "test_oltp[oltp_insert-direct-t4]", "test_oltp[oltp_insert-proxy-t4]"]
    for args, needle in [
        (("--workloads", "oltp_nope"), "--workloads: unknown workload(s) oltp_nope"),
        (("--threads", "8,abc"), "--threads:"),
        (("--duration", "-5s"), "--duration:"),
        (("--warmup", "5sec"), "--warmup:"),
        (("--table-size", "0"), "--table-size:"),
        (("--rate", "fast"), "--rate:"),
    ]:
        bad = collect(*args)
        assert bad.returncode != 0, args
        assert needle in bad.stderr, (args, bad.stderr)
