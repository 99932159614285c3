"""The checks no budget can trade away, read from a cell's recorded data.

Lost acknowledged heartbeat writes, a violated TPC-C consistency condition,
a failed YCSB correctness check and a wrong TPC-H answer make a cell
``broken`` whatever its budgets say. They are read from the cell's JSON
(``CellResult.to_json()``, or a cell of a results file), so pytest,
``python -m wanbench compare`` and the reports judge the same data the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: reason codes of integrity failures
LOST_WRITES = "INTEGRITY_LOST_WRITES"
TPCC_CONSISTENCY = "INTEGRITY_TPCC_CONSISTENCY"
YCSB_CORRECTNESS = "INTEGRITY_YCSB_CORRECTNESS"
TPCH_ANSWERS = "INTEGRITY_TPCH_ANSWERS"
#: workload -> (reason code, the headline of its failed checks); ``ycsb_*`` workloads share one entry
_CHECKED = {
    "tpcc": (TPCC_CONSISTENCY, "TPC-C consistency violated after the run ({n} check(s))"),
    "ycsb": (YCSB_CORRECTNESS, "YCSB correctness violated after the run ({n} check(s))"),
    "tpch": (TPCH_ANSWERS, "TPC-H answers differ from the reference engine's ({n} query(s))"),
}


@dataclass(frozen=True)
class Problem:
    """One integrity failure of a cell: its reason code and what a DBA reads."""

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def _failed_checks(extra: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [c for c in extra.get("checks", []) or [] if isinstance(c, Mapping) and not c.get("passed")]


def _lost_writes(heartbeat: Mapping[str, Any], label: str) -> Problem | None:
    lost = int(heartbeat.get("lost_writes", 0) or 0)
    if not lost:
        return None
    where = "; ".join(
        f"{c['source']}: {c['lost']} rows sent between {float(c['first_lost_at']):.2f} s and "
        f"{float(c['last_lost_at']):.2f} s"
        for c in heartbeat.get("rpo", []) or []
        if c.get("lost") and not c.get("during_fault")
    )
    return Problem(LOST_WRITES, f"{label}: {lost} acknowledged heartbeat writes are missing after recovery ({where})")


def problems_of(cell: Mapping[str, Any]) -> tuple[Problem, ...]:
    """Every integrity failure recorded in ``cell`` (a cell's JSON), in a fixed order."""
    label = str(cell.get("test_id") or "cell")
    out: list[Problem] = []
    heartbeat = (cell.get("extra") or {}).get("heartbeat")
    if isinstance(heartbeat, Mapping) and (p := _lost_writes(heartbeat, label)):
        out.append(p)
    workload = str(cell.get("workload") or "")
    extra = cell.get("workload_extra") or {}
    checked = _CHECKED.get("ycsb" if workload.startswith("ycsb_") else workload)
    if checked:
        failed = _failed_checks(extra)
        if failed:
            code, headline = checked
            lines = "\n  ".join(str(c.get("message", c)) for c in failed)
            out.append(Problem(code, f"{headline.format(n=len(failed))}:\n  {lines}"))
    return tuple(out)
