"""YCSB core workloads A-F (seeds 003/004: go-ycsb, 128 threads), on sysbench's
LuaJIT: per-operation OPS and p99 gated against budgets, printed in go-ycsb's
summary shape, every run followed by the correctness checks.
``pytest tests/ycsb --ycsb-workloads a --threads 128 --duration 60s``.
"""

import pytest

pytestmark = pytest.mark.ycsb


def test_ycsb(ycsb_cell, run_ycsb, gate):
    cell = run_ycsb(ycsb_cell)
    gate.check(cell)  # per-operation budgets, and the correctness checks
