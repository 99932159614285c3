"""Allure's categories classify verdicts by status and reason codes: a
verdict of every status and every reason code, ended by the gate as pytest
ends it (``Gate.enforce``, lenient and ``--gate-strict``), lands in exactly
the category it should, in Allure 3 (labels) and in Allure 2's
``categories.json`` (the message's tag), the first match winning as in Allure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX
from wanbench import families
from wanbench.gate import integrity, outcome
from wanbench.gate.baseline import BaselineStore, Fingerprint
from wanbench.gate.budgets import Budgets, CellKey
from wanbench.gate.outcome import (
    BROKEN,
    IMPROVEMENT,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    PASS,
    PRIORITY,
    REGRESSION,
    Verdict,
)
from wanbench.pytest_plugin.gate import Gate
from wanbench.report.categories import (
    ERROR_CATEGORIES,
    VERDICT_CATEGORIES,
    allure3_rules,
    compat_rules,
    verdict_labels,
)

o = outcome
#: (status, reasons, the category it belongs in): every status, every reason code
CASES: list[tuple[str, tuple[str, ...], str]] = [
    (PASS, (o.R_WITHIN,), "within-budget"),
    (PASS, (o.R_ABSOLUTE_WITHIN,), "within-budget"),
    (PASS, (o.R_CENSUS_WITHIN, o.R_WITHIN), "within-budget"),
    (PASS, (o.R_ADVISORY, o.R_CENSUS_WITHIN), "decided-by-census"),
    (PASS, (o.R_NO_CHECKS,), "not-gated"),
    (NO_BASELINE, (o.R_NO_BASELINE,), "no-baseline"),
    (IMPROVEMENT, (o.R_BETTER,), "improvement"),
    (REGRESSION, (o.R_BEYOND,), "performance-regression"),
    (REGRESSION, (o.R_ABSOLUTE_EXCEEDED,), "performance-regression"),
    (REGRESSION, (o.R_CENSUS_BEYOND,), "census-regression"),
    (REGRESSION, (o.R_CENSUS_BEYOND, o.R_BEYOND), "census-regression"),
    (BROKEN, (integrity.LOST_WRITES,), "broken"),
    (BROKEN, (integrity.TPCC_CONSISTENCY,), "broken"),
    (BROKEN, (integrity.YCSB_CORRECTNESS, integrity.LOST_WRITES), "broken"),
    # every family's integrity code, whatever families there are (wanbench.families)
    *((BROKEN, (f.integrity.code,), "broken") for f in families.families() if f.integrity is not None),
    (INCONCLUSIVE, (o.R_CLIENT_SATURATED, o.R_BEYOND, o.R_WITHIN), "inconclusive-client-saturated"),
    (INCONCLUSIVE, (o.R_NO_ROUNDS,), "inconclusive-nothing-measured"),
    (INCONCLUSIVE, (o.R_ZERO_REFERENCE,), "inconclusive-nothing-measured"),
    (INCONCLUSIVE, (o.R_LOOKS_WORSE, o.R_RUNS_NOISY), "inconclusive-looks-worse"),
    (INCONCLUSIVE, (o.R_RUNS_MISSING,), "inconclusive-baseline-runs"),
    (INCONCLUSIVE, (o.R_DRIFT_RUNS_MISSING,), "inconclusive-baseline-runs"),
    (INCONCLUSIVE, (o.R_RUNS_NOISY, o.R_RUNS_MISSING), "inconclusive-baseline-runs"),
    (INCONCLUSIVE, (o.R_ROUNDS_TOO_FEW,), "inconclusive-too-few-rounds"),
    (INCONCLUSIVE, (o.R_RUNS_NOISY,), "inconclusive"),
    (INCONCLUSIVE, (o.R_ROUNDS_NOISY,), "inconclusive"),
    (INCONCLUSIVE, (o.R_MACHINE_NOISY,), "inconclusive"),
    (INCONCLUSIVE, (o.R_DRIFT_SPREAD,), "inconclusive"),
    (INCONCLUSIVE, (), "inconclusive-other"),
    (INCOMPARABLE, (o.R_INCOMPARABLE,), "incomparable"),
]
KEY = CellKey("rtt", "replica_write", "50ms", 10, "primary", "probe_write")


def test_every_status_and_every_reason_code_is_classified() -> None:
    codes = {v for k, v in vars(outcome).items() if k.startswith("R_") and isinstance(v, str)}
    codes |= {f.integrity.code for f in families.families() if f.integrity is not None}  # every family's
    assert codes - {r for _s, reasons, _c in CASES for r in reasons} == set()
    assert {s for s, _r, _c in CASES} == set(PRIORITY)
    assert {s for c in VERDICT_CATEGORIES for s in c.statuses} == set(PRIORITY)
    assert {c for _s, _r, c in CASES} == {c.id for c in VERDICT_CATEGORIES}, "no category that nothing lands in"


def ended(verdict: Verdict, *, strict: bool) -> tuple[str, str]:
    """How ``Gate.enforce`` ends the test: allure-pytest's status and message (``exconly()``)."""
    gate = Gate(Budgets("none", "lab", ()), BaselineStore(Path("/nonexistent")), Fingerprint.from_context(CTX),
                cells_planned=1,
                strict=strict)
    try:
        gate.enforce(verdict)
    except pytest.fail.Exception as exc:
        return "failed", f"Failed: {exc.msg}"
    except pytest.skip.Exception as exc:
        return "skipped", f"Skipped: {exc.msg}"
    return "passed", ""


def allure3_category(rules: Sequence[Mapping[str, Any]], status: str, message: str,
                     labels: Sequence[tuple[str, str]]) -> str | None:
    """Allure 3's ``matchCategory``: the first rule one of whose matchers
    matches (statuses, labels and message as ``RegExp.test``)."""
    for rule in rules:
        matchers = rule["matchers"] if isinstance(rule["matchers"], list) else [rule["matchers"]]
        for m in matchers:
            if "statuses" in m and status not in m["statuses"]:
                continue
            if any(not any(re.search(rx, v) for n, v in labels if n == name) for name, rx in
                   (m.get("labels") or {}).items()):
                continue
            if "message" in m and not re.search(m["message"], message):
                continue
            if "trace" in m and not re.search(m["trace"], message):
                continue
            return str(rule["id"])
    return None


def allure2_category(rules: Sequence[Mapping[str, Any]], status: str, message: str) -> str | None:
    """Allure 2's rule for ``categories.json``: statuses, and whole-message ``Pattern.matches``."""
    for rule in rules:
        if status not in rule.get("matchedStatuses", [status]):
            continue
        if "messageRegex" in rule and not (message and re.fullmatch(rule["messageRegex"], message)):
            continue
        if "traceRegex" in rule and not (message and re.fullmatch(rule["traceRegex"], message)):
            continue
        return str(rule["id"])
    return None


@pytest.mark.parametrize("strict", [False, True], ids=["lenient", "strict"])
@pytest.mark.parametrize(("status", "reasons", "category"), CASES,
                         ids=[f"{s}-{'+'.join(r) or 'none'}" for s, r, _c in CASES])
def test_a_verdict_lands_in_its_category(status: str, reasons: tuple[str, ...], category: str, strict: bool) -> None:
    # words that the old message patterns matched, in every message: they must decide nothing
    words = "QPS 2893 is 8.4% below baseline 3158, regression? no baseline, inconclusive, incomparable"
    verdict = Verdict(KEY, status, f"{KEY.label}: {words}", reasons=reasons)
    allure_status, message = ended(verdict, strict=strict)
    assert allure_status == ("failed" if verdict.failing or strict and status in (INCONCLUSIVE, INCOMPARABLE)
                             else "skipped" if status in (INCONCLUSIVE, INCOMPARABLE) else "passed")
    labels = verdict_labels(verdict.to_json())
    assert allure3_category(allure3_rules(), allure_status, message, labels) == category
    in_compat = allure2_category(compat_rules(), allure_status, message)
    if allure_status == "passed":  # no message: Allure 2 has nothing to match, and no category pretends it can
        assert in_compat is None
        assert category not in {r["id"] for r in compat_rules()}
    else:
        assert in_compat == category
        assert message.endswith(f"[wanbench: status={status} reasons={','.join(reasons) or '-'}]")


def test_errors_that_are_not_verdicts_come_first() -> None:
    """A fault that could not be applied fails the test with its exception,
    whatever verdict the cell had before."""
    trace = "wanbench.errors.FaultVerificationError: delay on lo: measured 0.1 ms, wanted 50 ms"
    labels = verdict_labels({"status": "regression", "reasons": ["BEYOND_BUDGET"]})
    assert allure3_category(allure3_rules(), "broken", trace, labels) == "fault-not-applied"
    assert allure2_category(compat_rules(), "broken", trace) == "fault-not-applied"
    assert allure3_category(allure3_rules(), "failed", "wanbench.wait.WaitTimeout: lab not up", []) == (
        "infrastructure-error")
    assert allure3_category(allure3_rules(), "failed", "AssertionError: a test's own bug", []) is None


def test_the_manual_lists_the_categories_in_their_order() -> None:
    """docs/report.md's table of categories is the code's, in the order Allure tries them."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "report.md").read_text()
    table = text.split("| category | verdicts |", 1)[1].split("\n\n", 1)[0]
    listed = re.findall(r"^\| \*\*(.+?)\*\* \|", table, flags=re.MULTILINE)
    assert listed == [e["name"] for e in ERROR_CATEGORIES] + [c.name for c in VERDICT_CATEGORIES]
