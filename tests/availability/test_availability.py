"""Availability under faults: one component is partitioned, paused or
restarted while a heartbeat writes; RTO (how long writes stop) and RPO
(acknowledged writes missing, on the primary and on each replica) per cell.
``pytest -k "availability and replica" --lab-semisync-timeout 2s``.
"""

import pytest

pytestmark = pytest.mark.availability


def test_availability(outage, record, gate):
    cell = record(outage.run())
    gate.check(cell)  # RTO budgets; lost acknowledged writes always fail
