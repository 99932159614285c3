"""Release against release on two real labs (``--ab``), as a user runs it:
identical sides pass, a candidate whose primary runs under a CPU quota is
flagged at level 0 (where no count moves), ``compare`` judges the stored
run the same way, and both labs are gone at the end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from selftests.labutil import ROOT, free_port_base, load_results, needs, run_suite
from selftests.test_results_schema import assert_valid, strict_load

pytestmark = [pytest.mark.lab, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _servers() -> None:
    needs("mariadbd", "sysbench", "haproxy")


def ab_run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path / "results.json"
    res = run_suite("tests/rtt", "--ab", "--lab-dir", str(tmp_path / "lab"),
                    "--lab-port-base", str(free_port_base(26600, 27600, span=34)), "--scenario", "primary",
                    "--concurrency", "10", "--queries", "2000", "--round-cap", "1s", "--results-json", str(out),
                    "-p", "no:randomly", *args, timeout=900)
    return res, out


def compare(path: Path) -> tuple[int, dict[str, str]]:
    verdicts = path.with_name("verdicts.json")
    res = subprocess.run([sys.executable, "-m", "wanbench", "compare", str(path), "--json", str(verdicts)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return res.returncode, {v["cell"]: v["status"] for v in json.loads(verdicts.read_text())}


def test_identical_sides_alternate_pass_and_leave_nothing(tmp_path: Path) -> None:
    res, out = ab_run(tmp_path, "--rtt", "0,40ms", "--rounds", "2")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "round 2/4 (baseline)" in res.stdout
    assert "baseline: applied 40ms on primary (verified)" in res.stdout
    assert "wanbench A/B: candidate against baseline" in res.stdout
    assert "A/A guard on (identical sides)" in res.stdout
    cells = load_results(out)
    assert len(cells) == 2
    for cell in cells:
        record = cell["workload_extra"]["ab"]
        assert record["order"] == "ABBA"
        assert record["aa_guard"] is True
        assert len(record["baseline"]["rounds"]) == len(cell["rounds"]) == 2
        assert len(record["pairs"]) == 2
        assert "log_ratio" in record["pairs"][0]
        # each side counted by its own cluster's counters: the same probe costs the same
        mine, theirs = cell["census"]["metrics"], record["baseline"]["census"]["metrics"]
        assert abs(mine["work.primary.statements"]["value"] - theirs["work.primary.statements"]["value"]) < 0.1
        assert cell["verdict"]["status"] != "regression"
    faulted = next(c for c in cells if c["level"]["value"] == 40)
    assert faulted["fault"]["baseline"]["component"] == "primary"
    assert 0.8 <= faulted["workload_extra"]["ab"]["baseline"]["census"]["metrics"]["round_trips"]["value"] <= 1.2
    assert_valid(strict_load(out))  # the A/B record and each side's census are in the results schema
    run = json.loads(out.read_text())["run"]
    assert run["params"]["ab"] is True
    assert run["ab"]["candidate"]["endpoints"] != run["ab"]["baseline"]["endpoints"]
    assert compare(out)[1] == {c["verdict"]["cell"]: c["verdict"]["status"] for c in cells}
    for d in (tmp_path / "lab", tmp_path / "lab-baseline"):
        assert not d.exists(), f"{d} left behind"


def test_a_candidate_under_a_cpu_quota_is_flagged_at_level_0_and_compare_agrees(tmp_path: Path) -> None:
    allure = tmp_path / "allure"
    res, out = ab_run(tmp_path, "--rtt", "0", "--rounds", "4", "--lab-cpu-limit", "primary=0.05",
                      "--concurrency", "10,20", "--alluredir", str(allure))
    assert res.returncode == 1, res.stdout[-4000:] + res.stderr[-2000:]
    assert "A/A guard off" in res.stdout
    cells = load_results(out)
    assert len(cells) == 2
    for cell in cells:
        assert cell["verdict"]["status"] == "regression", cell["verdict"]["message"]
        assert "below the baseline side" in cell["verdict"]["message"] or "above the baseline side" in \
            cell["verdict"]["message"]
        # the pairs see it (QPS, latency); a core's 5 % may also move a count at c=20 (the census may fire too)
        fired = {c["kind"] for c in cell["verdict"]["checks"] if c["status"] == "regression"}
        assert "ab" in fired, cell["verdict"]["message"]
    assert "lab_cpu_limit" in res.stdout or "--lab-cpu-limit=" in res.stdout
    # the level: both cells' pairs pooled, judged once more, the same in the results, compare and Allure
    assert_valid(strict_load(out))  # the levels are in the results schema
    (level,) = json.loads(out.read_text())["levels"]
    assert (level["cell"], level["status"], level["ends"]) == ("rtt/*/0ms/c=0//", "regression", "failed")
    assert "QPS of its 2 cells is" in level["message"]
    assert "levels (each fault level's cells pooled" in res.stdout
    assert "[regression] rtt=0ms, its cells pooled" in res.stdout
    assert "(alpha 0.05 over 2 cells and 1 level," in res.stdout
    code, verdicts = compare(out)
    assert code == 1
    assert verdicts == {**{c["verdict"]["cell"]: "regression" for c in cells}, level["cell"]: "regression"}
    results = [json.loads(p.read_text()) for p in allure.glob("*-result.json")]
    (written,) = [r for r in results if r["fullName"] == "wanbench.ab_levels#rtt-0ms"]
    assert written["status"] == "failed"
    assert {"name": "wanbench_verdict", "value": "regression"} in written["labels"]
