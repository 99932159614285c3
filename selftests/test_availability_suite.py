"""The availability family end to end on a lab the session starts: the
semi-sync replica partitioned under the heartbeat, as `pytest -k
"availability and replica"` runs it (issue 16's "done when")."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from selftests.labutil import run_suite
from wanbench.procs import port_free

PORT_BASES = range(24015, 24100, 10)  # eight free ports in this helper range, skipping busy ones


def run_on_a_free_lab(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the suite on a lab of its own. Other labs' clients borrow ephemeral ports in this range
    (a port in TIME-WAIT cannot be bound), so a base found free can be taken before the lab binds
    it: then the next free base is tried."""
    res = None
    for base in PORT_BASES:
        if not all(port_free(base + i) for i in range(8)):
            continue
        res = run_suite(*args, "--lab-dir", str(tmp_path / "lab"), "--lab-port-base", str(base), timeout=300)
        if "are in use" not in res.stdout:
            return res
    if res is None:
        pytest.skip(f"no eight free ports at any of {list(PORT_BASES)}")
    return res


@pytest.mark.lab
@pytest.mark.slow
def test_replica_partition_reports_the_semisync_stall_and_the_replica_rpo(tmp_path: Path) -> None:
    results = tmp_path / "availability.json"
    res = run_on_a_free_lab(tmp_path, "tests/availability", "-k", "availability and replica and partition",
                            "--lab-semisync-timeout", "2s", "--outage-hold", "3s", "--results-json", str(results),
                            "--alluredir", str(tmp_path / "allure"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    (cell,) = json.loads(results.read_text())["results"]
    hb = cell["extra"]["heartbeat"]
    assert (cell["family"], cell["scenario"], cell["level"]["label"]) == ("availability", "heartbeat_replica",
                                                                         "partition")
    assert cell["fault"]["mechanism"] == "nft"
    assert cell["level"]["value"] == 4.0, "held past the 2 s semi-sync timeout"
    assert 1.8 <= hb["rto_s"] <= 2.6, hb["rto_s"]
    during = [c for c in hb["rpo"] if c.get("during_fault")]
    assert [c["source"] for c in during] == ["replica"]
    assert during[0]["lost"] > 0
    assert hb["lost_writes"] == 0
    assert cell["verdict"]["status"] == "pass"
    assert "wanbench availability: RTO, recovery and lost writes per cell" in res.stdout
    assert "heartbeat_replica partition: RTO" in res.stdout
    svgs = [p.read_text() for p in (tmp_path / "allure").glob("*-attachment.svg")]
    assert any("longest stretch without an acknowledged write" in s for s in svgs), "timeline chart missing"
    assert not (tmp_path / "lab").exists(), "the session must stop the lab it started"


@pytest.mark.lab
@pytest.mark.slow
def test_heartbeat_beside_a_loss_cell(tmp_path: Path) -> None:
    results = tmp_path / "loss.json"
    res = run_on_a_free_lab(tmp_path, "tests/loss", "-k", "loss and replica_write", "--loss", "0", "--concurrency",
                            "10", "--rounds", "3", "--queries", "300", "--heartbeat", "--results-json", str(results))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    (cell,) = json.loads(results.read_text())["results"]
    hb = cell["extra"]["heartbeat"]
    assert cell["family"] == "loss"
    assert cell["qps"] > 0, "the probe still measured"
    assert hb["counts"]["ok"] > 0
    # No fault: every write answered. (The strict known answer is in test_heartbeat; here the probe
    # loads the same 2 cores, and a connect slower than the 1 s connect timeout is a real miss.)
    errors = {a[6] for a in hb["attempts"] if a[5] != "ok"}
    assert hb["counts"]["failed"] + hb["counts"]["unknown"] <= 3, (hb["counts"], errors)
    assert hb["rto_s"] < 1.0, (hb["rto_s"], errors)
    assert [c["source"] for c in hb["rpo"]] == ["primary", "replica"]
    assert hb["lost_writes"] == 0
    assert "replica_write 0%: RTO" in res.stdout
