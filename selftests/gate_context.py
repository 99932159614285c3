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
