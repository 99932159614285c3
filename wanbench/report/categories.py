"""Allure's categories, classified by the verdict's data: its status and
reason codes, never the words of its message.

Every category of a verdict is generated from ``VERDICT_CATEGORIES`` (which
statuses, and which reason codes among the verdict's) and from the one rule
of how a verdict ends its test (``wanbench.gate.verdict.ends_as``: the Allure
statuses it can have). Allure takes the first category that matches, so the
order of the table is the order of precedence.

Two forms, because Allure's two readers see different things:

* Allure 3 (``allurerc``, what ``scripts/report`` uses) matches labels: each
  test with a verdict carries ``wanbench_verdict`` (its status) and one
  ``wanbench_reason`` per code (``verdict_labels``, written by
  ``wanbench.report.allure_out``). Labels are there for every test, passed
  ones too, which have no message.
* ``categories.json`` (Allure 2's compatible form: statuses and regular
  expressions only) matches the tag that ends the message of a failed or
  skipped cell (``wanbench.gate.outcome.tag_of``); a category whose verdicts
  always pass has no message to match and is left out.

Errors that are not verdicts (a fault that could not be applied, a broken
server or tool) are matched by the exception's type name in the trace, and
come first: a cell whose fault failed measured nothing worth classifying.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.gate.outcome import (
    BROKEN,
    IMPROVEMENT,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    PASS,
    R_ABSOLUTE_EXCEEDED,
    R_ADVISORY,
    R_BEYOND,
    R_CENSUS_BEYOND,
    R_CLIENT_SATURATED,
    R_DRIFT_RUNS_MISSING,
    R_DRIFT_SPREAD,
    R_LOOKS_WORSE,
    R_MACHINE_NOISY,
    R_NO_CHECKS,
    R_NO_ROUNDS,
    R_ROUNDS_NOISY,
    R_ROUNDS_TOO_FEW,
    R_RUNS_MISSING,
    R_RUNS_NOISY,
    R_ZERO_REFERENCE,
    REGRESSION,
    TAG_PREFIX,
)
from wanbench.gate.verdict import status_ends_as

#: Allure labels that carry a verdict's data (``verdict_labels``)
LABEL_STATUS = "wanbench_verdict"
LABEL_REASON = "wanbench_reason"


@dataclass(frozen=True)
class VerdictCategory:
    """Verdicts of one of ``statuses`` with at least one of ``reasons``
    among their reason codes (``()``: any)."""

    id: str
    name: str
    description: str
    statuses: tuple[str, ...]
    reasons: tuple[str, ...] = ()

    def outcomes(self) -> list[str]:
        """The Allure statuses these verdicts end their tests with, strict or not."""
        return sorted({status_ends_as(s, strict=strict) for s in self.statuses for strict in (False, True)})


#: in order of precedence: the first that matches a verdict is its category
VERDICT_CATEGORIES: tuple[VerdictCategory, ...] = (
    VerdictCategory("broken", "Broken: data lost under the fault",
                    "Acknowledged writes lost, or a consistency or correctness check violated: fails whatever the "
                    "budgets say.", (BROKEN,)),
    VerdictCategory("census-regression", "WAN cost regression (census)",
                    "Round trips, bytes or work per operation grew beyond the census budget: one run decides.",
                    (REGRESSION,), (R_CENSUS_BEYOND,)),
    VerdictCategory("performance-regression", "Performance regression",
                    "Worse than the baseline or level 0 beyond the budget, and significantly; or beyond an "
                    "absolute limit.", (REGRESSION,), (R_BEYOND, R_ABSOLUTE_EXCEEDED)),
    VerdictCategory("inconclusive-client-saturated", "Inconclusive: load generator saturated",
                    "The client, not the database, was the bottleneck: its speeds say nothing.",
                    (INCONCLUSIVE,), (R_CLIENT_SATURATED,)),
    VerdictCategory("inconclusive-nothing-measured", "Inconclusive: nothing to judge",
                    "No rounds were measured, or the reference's median is 0.",
                    (INCONCLUSIVE,), (R_NO_ROUNDS, R_ZERO_REFERENCE)),
    VerdictCategory("inconclusive-looks-worse", "Inconclusive: looks slower than the noise explains",
                    "Its census counts are within budget, but a throughput check is beyond its budget before the "
                    "session's correction, not after it.", (INCONCLUSIVE,), (R_LOOKS_WORSE,)),
    VerdictCategory("inconclusive-baseline-runs", "Inconclusive: record more baseline runs",
                    "Too few accepted runs to know how much separate runs differ: --baseline-runs N.",
                    (INCONCLUSIVE,), (R_RUNS_MISSING, R_DRIFT_RUNS_MISSING)),
    VerdictCategory("inconclusive-too-few-rounds", "Inconclusive: too few rounds",
                    "No difference could reach the cell's alpha with so few rounds: --rounds.",
                    (INCONCLUSIVE,), (R_ROUNDS_TOO_FEW,)),
    VerdictCategory("inconclusive", "Inconclusive: too noisy to judge",
                    "The cell's noise hides a change of the budget's size: more baseline runs, --gate-max-runs, a "
                    "quieter machine.",
                    (INCONCLUSIVE,), (R_RUNS_NOISY, R_ROUNDS_NOISY, R_MACHINE_NOISY, R_DRIFT_SPREAD)),
    VerdictCategory("inconclusive-other", "Inconclusive",
                    "Undecided for a reason no category above names.", (INCONCLUSIVE,)),
    VerdictCategory("incomparable", "Incomparable with the baseline",
                    "The environment fingerprint differs from the baseline's (versions, hardware, parameters).",
                    (INCOMPARABLE,)),
    VerdictCategory("no-baseline", "No baseline",
                    "Measured and recorded, but there is no accepted baseline to compare with yet: it passes.",
                    (NO_BASELINE,)),
    VerdictCategory("improvement", "Improvement",
                    "Better than the budget, significantly: record it with --baseline-save.", (IMPROVEMENT,)),
    VerdictCategory("not-gated", "Passed: no budget rule applies",
                    "No rule of the budget file matches the cell: nothing was checked.", (PASS,), (R_NO_CHECKS,)),
    VerdictCategory("decided-by-census", "Passed: decided by the census",
                    "Its counts are within budget; the throughput checks this machine's noise leaves undecided "
                    "are advisory.", (PASS,), (R_ADVISORY,)),
    VerdictCategory("within-budget", "Within budget",
                    "Within its budgets, and the gate could have seen a change of the budget's size.", (PASS,)),
)

#: errors that are not verdicts, matched by the exception's type in the trace
ERROR_CATEGORIES: tuple[dict[str, Any], ...] = (
    {"id": "fault-not-applied", "name": "Fault could not be applied or verified",
     "description": "The network fault failed to install, verify or clear: the numbers would be meaningless.",
     "statuses": ["broken", "failed"], "trace": r"[\s\S]*(FaultError|FaultVerificationError)[\s\S]*"},
    {"id": "infrastructure-error", "name": "Infrastructure error",
     "description": "A server, tool, command or wait failed: not a measurement.",
     "statuses": ["broken", "failed"],
     "trace": r"[\s\S]*(InfrastructureError|CommandError|WaitTimeout|MissingToolError)[\s\S]*"},
)


def verdict_labels(verdict: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The Allure labels of a verdict (``Verdict.to_json()``): its status and each reason code."""
    if not verdict or not isinstance(verdict.get("status"), str):
        return []
    reasons = [str(r) for r in verdict.get("reasons") or ()]
    return [(LABEL_STATUS, str(verdict["status"])), *((LABEL_REASON, r) for r in reasons)]


def _alternatives(values: Sequence[str]) -> str:
    return "|".join(re.escape(v) for v in values)


def allure3_rules() -> list[dict[str, Any]]:
    """The categories of the Allure 3 configuration (``matchers``: statuses and labels)."""
    rules: list[dict[str, Any]] = [
        {"id": e["id"], "name": e["name"], "matchers": {"statuses": e["statuses"], "trace": e["trace"]}}
        for e in ERROR_CATEGORIES]
    for c in VERDICT_CATEGORIES:
        labels = {LABEL_STATUS: f"^({_alternatives(c.statuses)})$"}
        if c.reasons:
            labels[LABEL_REASON] = f"^({_alternatives(c.reasons)})$"
        rules.append({"id": c.id, "name": c.name, "matchers": {"statuses": c.outcomes(), "labels": labels}})
    return rules


def tag_regex(statuses: Sequence[str], reasons: Sequence[str] = ()) -> str:
    """A regular expression that matches a message whose tag (``tag_of``)
    has one of ``statuses`` and, if given, one of ``reasons`` as a whole
    code; the same in Java (Allure 2 matches whole messages), JavaScript and Python."""
    status = f"status=({_alternatives(statuses)}) "
    reason = f"reasons=([^\\]]*,)?({_alternatives(reasons)})(,[^\\]]*)?\\]" if reasons else "reasons=[^\\]]*\\]"
    return r"[\s\S]*" + re.escape(TAG_PREFIX) + status + reason + r"[\s\S]*"


def compat_rules() -> list[dict[str, Any]]:
    """``categories.json``: Allure 2's compatible form, matching the message's tag."""
    rules: list[dict[str, Any]] = [
        {"id": e["id"], "name": e["name"], "description": e["description"], "matchedStatuses": e["statuses"],
         "traceRegex": e["trace"]} for e in ERROR_CATEGORIES]
    for c in VERDICT_CATEGORIES:
        with_message = [s for s in c.outcomes() if s != "passed"]
        if with_message:
            rules.append({"id": c.id, "name": c.name, "description": c.description, "matchedStatuses": with_message,
                          "messageRegex": tag_regex(c.statuses, c.reasons)})
    return rules
