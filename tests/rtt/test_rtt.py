"""Added round-trip time on one component (seed 000, "RTT 延遲").

Each level is applied once on the scenario's component (every link that
touches it: its round trip grows by the level), then the scenario's probe
runs at every concurrency. ``pytest -k "rtt and replica_write"``.
"""

import pytest

pytestmark = pytest.mark.rtt


def test_rtt(fault, concurrency, run_workload, record, gate):
    cell = record(run_workload(concurrency))
    gate.check(cell)
