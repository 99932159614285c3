"""The checks no budget can trade away, read from a cell's recorded data.

Each family says what breaks its cells (``wanbench.families.Integrity``):
lost acknowledged heartbeat writes, a violated TPC-C consistency condition,
a failed YCSB correctness check, a wrong TPC-H answer. Any of them makes a
cell ``broken`` whatever its budgets say. They are read from the cell's JSON
(``CellResult.to_json()``, or a cell of a results file), so pytest,
``python -m wanbench compare`` and the reports judge the same data the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wanbench import families

#: reason codes of the built-in families' integrity failures (each family declares its own)
LOST_WRITES = "INTEGRITY_LOST_WRITES"
TPCC_CONSISTENCY = "INTEGRITY_TPCC_CONSISTENCY"
YCSB_CORRECTNESS = "INTEGRITY_YCSB_CORRECTNESS"
TPCH_ANSWERS = "INTEGRITY_TPCH_ANSWERS"


@dataclass(frozen=True)
class Problem:
    """One integrity failure of a cell: its reason code and what a DBA reads."""

    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


def failed_checks(extra: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The failed entries of a cell's ``workload_extra.checks``."""
    return [c for c in extra.get("checks", []) or [] if isinstance(c, Mapping) and not c.get("passed")]


def problems_of(cell: Mapping[str, Any]) -> tuple[Problem, ...]:
    """Every integrity failure recorded in ``cell`` (a cell's JSON), in a fixed
    order: what any cell may carry first (a heartbeat's lost writes), then the
    failed checks of the families that own it."""
    out: list[Problem] = []
    rules = [f.integrity for f in families.families() if f.integrity is not None]
    for rule in rules:
        if rule.failures is not None and (message := rule.failures(cell)):
            out.append(Problem(rule.code, message))
    extra = cell.get("workload_extra") or {}
    for fam in families.owners(cell):
        checked = fam.integrity
        if checked is None or checked.failures is not None:
            continue
        failed = failed_checks(extra)
        if failed:
            lines = "\n  ".join(str(c.get("message", c)) for c in failed)
            out.append(Problem(checked.code, f"{checked.headline.format(n=len(failed))}:\n  {lines}"))
    return tuple(out)
