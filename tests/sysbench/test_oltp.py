"""sysbench's bundled OLTP workloads, straight to the SQL tier and through the
proxy tier, at each thread count (the seeds' 001/002/004 tables).

Numbers exclude the warm-up, percentiles come from sysbench's histogram, and
a result limited by the load generator says so (``client.saturated``).
"""

from __future__ import annotations

from typing import Any

import pytest

from wanbench.fixtures.sysbench import OltpCell, OltpSession

pytestmark = pytest.mark.sysbench


def test_oltp(oltp_cell: OltpCell, oltp: OltpSession, record: Any, gate: Any) -> None:
    result = oltp.run(oltp_cell)
    cell = record(result, family="sysbench", scenario=oltp_cell.workload, path=oltp_cell.path,
                  level={"kind": "none", "value": 0, "label": oltp_cell.path},
                  extra={"settings": oltp.settings.to_json(),
                         "dataset": oltp.dataset.action if oltp.dataset else None})
    gate.check(cell)
