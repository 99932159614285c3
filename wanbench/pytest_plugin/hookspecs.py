"""wanbench's own hooks: how a family adds to what every cell records.

The plugin's machinery (reporting, the gate) never imports a family. A
family module (a ``wanbench.fixtures`` module, or a user's conftest) that
knows something more about a measured cell, or has its own table for the
results JSON, implements these hooks, as pytest-xdist (``pytest_xdist_*``)
and pytest-benchmark (``pytest_benchmark_*``) name theirs.
docs/architecture.md shows a whole family built this way.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec
def pytest_wanbench_cell_recorded(request: pytest.FixtureRequest, cell: Any) -> None:
    """``cell`` (a ``wanbench.results.CellResult``) was measured by ``request``'s
    test and is about to be kept: add what this family knows of it to
    ``cell.extra`` (evidence of the servers, a heartbeat's summary). Called
    before the results JSON, Allure and the gate see the cell."""


@pytest.hookspec
def pytest_wanbench_result_tables(cells: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Tables for the results JSON (``tables``), by name, from the session's
    cells (their JSON): e.g. ``{"ping": [row, ...]}``, beside those of the
    registered families (``Family.tables``). Return None when this plugin
    has none. A table that raises is kept as its error, never at the cost of
    the results file."""


@pytest.hookspec
def pytest_wanbench_families() -> Any:
    """Performance families this plugin adds: ``wanbench.families.Family``
    objects (one, or an iterable of them), each the family's whole contract
    (marker, metrics and per-round samples, integrity checks, fingerprint,
    load hosts, results tables, terminal summary), registered for the session
    and read like the built-in ones by the gate, the results JSON and Allure.
    The older form, a mapping of marker name -> description, adds a marker
    and nothing else. Either way its tests are measured cells (counted by the
    progress lines, scheduled by scenario over several clusters, refused
    under xdist on one cluster) and its markers are registered for
    ``--strict-markers``."""
