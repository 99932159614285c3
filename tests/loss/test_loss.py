"""Packet loss on one component's links: the seed authors' next case for
their leased lines (0 / 0.1 / 1 %): do retransmissions and retries keep the
workload alive, and at what cost? ``pytest -k "loss and replica_write"``.
"""

import pytest

pytestmark = pytest.mark.loss


def test_loss(fault, concurrency, run_workload, record, gate):
    cell = record(run_workload(concurrency))
    gate.check(cell)
