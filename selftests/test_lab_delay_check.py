"""How the lab verifies an added delay from the fastest SELECT 1 through each
faulted link before and after the toxic (``LabCluster._delay_checks``): a busy
machine only adds time, to the measurement before the fault as to the one
after, so an inflated "before" must not fail a delay that is in place, while
a delay that is not the one asked for still fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.profiles.lab.tidb import TidbLab
from wanbench.profiles.lab.tidb_cluster import TidbLabCluster


@pytest.fixture
def cluster(tmp_path: Path) -> TidbLabCluster:
    return TidbLabCluster(TidbLab(tmp_path / "lab", 29900), tag="t")  # nothing started: the checks are arithmetic


def _checks(cluster: TidbLabCluster, before: float, after: float, ms: float = 100.0) -> dict:
    fault = Fault("tidb", Level(FaultKind.DELAY, ms), ())
    links = cluster.faulted_links(fault)
    link = next(ln for ln in links if ln.name == "client_tidb")
    return cluster._delay_checks(fault, [link], {link.name: before}, {link.name: after})["client_tidb"]


def test_a_quiet_machine_measures_the_delay_asked_for(cluster: TidbLabCluster) -> None:
    assert _checks(cluster, 0.6, 100.9)["ok"]


def test_a_before_inflated_by_load_does_not_fail_a_delay_in_place(cluster: TidbLabCluster) -> None:
    """Seen under a load average of 60: before 4.7 ms, after 102.1 ms at 100 ms."""
    c = _checks(cluster, 4.7, 102.1)
    assert c["added_ms"] == pytest.approx(97.4)
    assert c["ok"]


@pytest.mark.parametrize(("before", "after"), [(0.6, 50.8), (0.6, 95.0), (0.6, 205.0), (30.0, 200.0)])
def test_a_delay_other_than_asked_fails(cluster: TidbLabCluster, before: float, after: float) -> None:
    assert not _checks(cluster, before, after)["ok"]
