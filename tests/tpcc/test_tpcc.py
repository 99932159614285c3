"""TPC-C (seeds 001/003/004: go-tpc): warehouses x threads, tpmC and New-Order
p95/p99 gated against budgets, every run followed by the TPC-C consistency
checks. ``pytest tests/tpcc --warehouses 1 --threads 4 --duration 30s``;
``--tpcc-wait`` adds keying and think times (efficiency is meaningful then).
"""

import pytest

pytestmark = pytest.mark.tpcc


def test_tpcc(tpcc_cell, run_tpcc, gate):
    cell = run_tpcc(tpcc_cell)
    gate.check(cell)  # budgets, and every consistency condition of the run
