"""Workload engines: one module per load generator behind one small protocol.

An engine prepares its data once per session, runs one cell (a workload at a
concurrency on one endpoint) and returns a ``WorkloadResult``; it cleans up
only on request. ``sysbench`` is the first engine (probes and the bundled
OLTP scripts); TPC-C and others plug in the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wanbench.results import Round, WorkloadResult


class WorkloadEngine(Protocol):
    """What the fixtures need from an engine."""

    def prepare(self) -> object:
        """Create or reuse the engine's data set; return what was done."""
        ...

    def run(self, workload: str, *, concurrency: int, rounds: int,
            on_round: Callable[[int, Round], None] | None = None) -> WorkloadResult: ...

    def cleanup(self) -> None: ...
