"""TPC-H (seed 003's TPC-H 22 queries, as go-tpc runs them): per round the 22
queries of stream 0, each timed with its rows and result bytes, the power
(queries only) and queries per hour gated against budgets, every answer
checked by DuckDB over the same generated data (a wrong answer: broken).
``pytest tests/tpch --tpch-sf 0.01 --rounds 3``.
"""

import pytest

pytestmark = pytest.mark.tpch


def test_tpch(tpch_cell, run_tpch, check_tpch):
    check_tpch(run_tpch(tpch_cell))  # budgets, every answer, and no query failed
