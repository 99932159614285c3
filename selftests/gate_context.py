"""The run context (environment fingerprint) the gate self-tests share."""

from __future__ import annotations

from typing import Any

CTX: dict[str, Any] = {
    "profile": "lab",
    "versions": {"mariadb": "10.11.19"},
    "topology_shape": {"primary": 1, "proxy": 1, "replica": 1},
    "client": {"cpu_model": "Intel Xeon", "cores": 2},
    "params": {"rounds": 5, "queries": 20000},
}

#: For the conftest of a pytest session whose cells are made up (``run_context`` stands in too): it
#: opens no cluster. Opening one starts the lab, whose start sweeps every dead run's tc/nft faults
#: on the machine's ``lo``: what a self-test in the machine scope killed a runner to leave there
#: (test_lab_lease.py) would vanish under it. (It needs ``import pytest`` above it.)
NO_CLUSTER = '''

@pytest.fixture(scope="session")
def evidence_collector():  # made-up cells: no server behind them, no evidence to collect
    return None


@pytest.fixture(scope="session")
def cluster():
    pytest.fail("this session's cells are made up: nothing in it may open a cluster (start a lab)")
'''
