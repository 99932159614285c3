"""The command line: bad values stop the run before anything starts, ids
select exactly what ``-k`` says, and ``--help`` stays as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def run_pytest(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rtt", "50msec"], "--rtt: '50msec' is not a duration"),
        (["--rtt=-5ms"], "--rtt: '-5ms' is not a duration"),
        (["--rtt", "50ms,50ms"], "--rtt: '50ms,50ms': a level is listed twice"),
        (["--concurrency", "c=abc"], "--concurrency: 'c=abc' is not a positive whole number"),
        (["--concurrency", "0"], "--concurrency: '0' is not a positive whole number"),
        (["--rounds", "x"], "--rounds: 'x' is not a positive whole number"),
        (["--scenario", "tikv_write"], "unknown scenario(s) tikv_write for the lab profile"),
        (["--fault-lease", "2s"], "--fault-lease: '2s': a fault lease must be at least 3s"),
    ],
)
def test_bad_values_stop_the_run_naming_the_option(args: list[str], message: str) -> None:
    res = run_pytest("--collect-only", "-q", "tests/rtt", *args)
    assert res.returncode == 4, res.stdout + res.stderr
    assert message in res.stderr


def test_k_selects_exactly_one_scenario_without_starting_anything(tmp_path: Path) -> None:
    lab_dir = tmp_path / "lab"
    res = run_pytest("--collect-only", "-q", "-k", "rtt and replica_write", "--rtt", "0,50ms",
                     "--concurrency", "10,100", "--lab-dir", str(lab_dir))
    assert res.returncode == 0, res.stdout + res.stderr
    ids = sorted(line.split("::", 1)[1] for line in res.stdout.splitlines() if "::" in line)
    assert ids == sorted(
        f"test_rtt[replica_write-{lv}-c{c}]" for lv in ("0ms", "50ms") for c in (10, 100)
    )
    assert not lab_dir.exists(), "collection must not start the lab"


def test_default_matrix_ids() -> None:
    res = run_pytest("--collect-only", "-q", "-k", "rtt and replica_read")
    ids = [line.split("::", 1)[1] for line in res.stdout.splitlines() if "::" in line]
    assert len(ids) == 4 * 6, res.stdout
    assert "test_rtt[replica_read-200ms-c1000]" in ids


def test_help_lists_every_option_with_metavar_and_default() -> None:
    res = run_pytest("--help")
    assert res.returncode == 0
    text = " ".join(res.stdout.split())
    for opt in ("--cluster=FILE", "--scenario=NAMES", "--rtt=LEVELS", "--concurrency=LIST", "--rounds=N",
                "--queries=N", "--round-timeout=DURATION", "--results-json=PATH", "--lab-dir=DIR",
                "--lab-port-base=PORT", "--fault-lease=DURATION"):
        assert opt in text, f"{opt} missing from --help"
    section = res.stdout.split("wanbench: network-fault performance regression suite:")[1].split("\n\n")[0]
    for block in section.split("\n  --")[1:]:
        assert "Default:" in " ".join(block.split()), f"option without its default in --help: --{block[:40]}"
