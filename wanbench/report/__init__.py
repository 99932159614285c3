"""Allure reporting: per-test tables and SVG charts, the seed-000 summary
matrix, run context and Allure 3 metrics (see ``allure_out``)."""

from __future__ import annotations

from wanbench.report.allure_out import (
    add_secret,
    attach_cell,
    attach_summary,
    note_environment,
    note_run_context,
    write_run_context,
)

__all__ = [
    "add_secret",
    "attach_cell",
    "attach_summary",
    "note_environment",
    "note_run_context",
    "write_run_context",
]
