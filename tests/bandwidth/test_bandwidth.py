"""Aggregate bandwidth cap on one component's links (seed 000, "頻寬瓶頸").

Each level caps every link that touches the scenario's component (each
direction, aggregate over all connections), then the probe runs at every
concurrency. ``pytest -k "bandwidth and replica_write"``.
"""

import pytest

pytestmark = pytest.mark.bandwidth


def test_bandwidth(fault, concurrency, run_workload, record, gate):
    cell = record(run_workload(concurrency))
    gate.check(cell)
