"""What a verdict is made of: statuses, reason codes, a check's numbers
(``Outcome``), a cell's decision (``Verdict``). Data only: deciding is in
``wanbench.gate.verdict``, wording in ``wanbench.gate.render``."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.gate.budgets import CellKey, Check
from wanbench.gate.integrity import Problem
from wanbench.gate.stats import log_ratio
from wanbench.results import finite_or_none

PASS = "pass"
REGRESSION = "regression"
IMPROVEMENT = "improvement"
INCONCLUSIVE = "inconclusive"
NO_BASELINE = "no-baseline"
INCOMPARABLE = "incomparable"
#: data a fault must never cost was lost (``wanbench.gate.integrity``): fails whatever the budgets say
BROKEN = "broken"
#: the cell's status is the first of these that any of its checks has
PRIORITY = (BROKEN, REGRESSION, INCOMPARABLE, NO_BASELINE, INCONCLUSIVE, IMPROVEMENT, PASS)
#: statuses that fail a cell (pytest), the exit status of ``compare`` and the Allure test
FAILING = frozenset({BROKEN, REGRESSION})
#: statuses that decide nothing: the cell is skipped, or fails under ``--gate-strict``
UNDECIDED = frozenset({INCONCLUSIVE, INCOMPARABLE})

# How a verdict ends its test: pytest's outcome, Allure's test status (same names), and
# whether ``compare`` exits 1 (``wanbench.gate.verdict.ends_as``)
PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"

# Reason codes: why a check or a cell ended as it did. Decisions test these,
# never the text of a message (the message is rendered from the same data).
R_WITHIN = "WITHIN_BUDGET"
R_BEYOND = "BEYOND_BUDGET"
R_BETTER = "BETTER_BEYOND_BUDGET"
R_ABSOLUTE_EXCEEDED = "ABSOLUTE_LIMIT_EXCEEDED"
R_ABSOLUTE_WITHIN = "ABSOLUTE_LIMIT_MET"
R_ZERO_REFERENCE = "ZERO_REFERENCE"
R_RUNS_MISSING = "TOO_FEW_BASELINE_RUNS"
R_RUNS_NOISY = "RUNS_TOO_NOISY"
R_ROUNDS_TOO_FEW = "TOO_FEW_ROUNDS"
R_ROUNDS_NOISY = "ROUNDS_TOO_NOISY"
R_DRIFT_RUNS_MISSING = "LEVEL0_DRIFT_RUNS_MISSING"
R_DRIFT_SPREAD = "LEVEL0_DRIFT_WITHIN_SPREAD"
R_CLIENT_SATURATED = "CLIENT_SATURATED"
R_NO_ROUNDS = "NO_ROUNDS"
R_INCOMPARABLE = "INCOMPARABLE_ENVIRONMENT"
R_NO_BASELINE = "NO_BASELINE"
R_NO_CHECKS = "NO_CHECKS"
R_CENSUS_BEYOND = "CENSUS_BEYOND_BUDGET"
R_CENSUS_WITHIN = "CENSUS_WITHIN_BUDGET"
#: the A/A guard (the group's level-0 cell, its rounds alternated as a faulted cell's are, with no
#: fault to toggle) moved a metric by more than the check's rule assumes: the machine is too noisy now
R_MACHINE_NOISY = "MACHINE_TOO_NOISY_NOW"
#: the census decided the cell (pass) while run-to-run checks could not: those stay advisory
R_ADVISORY = "QPS_ADVISORY"
#: the census passed, but a throughput check is beyond its budget at ``LOOKS_WORSE_P`` before the
#: session's correction: not sure enough to fail the cell, too far off to call it a pass
R_LOOKS_WORSE = "LOOKS_WORSE"
LOOKS_WORSE_P = 0.01
#: why a check may be undecided without keeping a cell whose census decided from a verdict:
#: the machine's noise, or too few accepted runs for a statistic (the census needs one)
ADVISORY_REASONS = frozenset({"RUNS_TOO_NOISY", "ROUNDS_TOO_NOISY", "TOO_FEW_BASELINE_RUNS", "TOO_FEW_ROUNDS",
                              "LEVEL0_DRIFT_RUNS_MISSING", "LEVEL0_DRIFT_WITHIN_SPREAD", R_MACHINE_NOISY})
#: undecided for a reason one more run of the cell could remove (``is_undecided``)
REPEATABLE = frozenset({R_RUNS_NOISY, R_MACHINE_NOISY})

_NAMES = {
    "qps": "QPS",
    "tps": "TPS",
    "tpmc": "tpmC",
    "latency_ms.p50": "p50 latency",
    "latency_ms.p95": "p95 latency",
    "latency_ms.p99": "p99 latency",
    "error_rate": "error rate",
    "rto_s": "RTO",
    "recovery_s": "recovery after the fault",
}


def metric_name(metric: str) -> str:
    """``QPS``; YCSB's per-operation metrics read ``READ OPS``, ``READ p99 latency``."""
    if metric.startswith("ops."):
        return f"{metric[4:]} OPS"
    if metric.startswith("latency_ms.p99."):
        return f"{metric[len('latency_ms.p99.'):]} p99 latency"
    return _NAMES.get(metric, metric)


@dataclass(frozen=True)
class Reference:
    """What a statistical check compares against: rounds of level 0 of the
    same run, or one summary per accepted baseline run."""

    samples: Sequence[float]
    what: str  # "baseline" / "level 0 (rtt=0ms)" / "baseline drop"
    detail: str  # "baseline 2026-11-20 mariadb 10.11.19" or ""
    allow_t: bool = False  # see choose_test


@dataclass(frozen=True)
class RunSummary:
    """One run of a cell, as the run-level checks see it: the median of its
    rounds per metric and, for a faulted cell, its drop against the run's own
    level 0. ``--gate-max-runs`` carries earlier runs of the same cell over to
    the next invocation in this shape."""

    summary: Mapping[str, float]
    drop: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"summary": dict(self.summary), "drop": dict(self.drop)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        return cls({k: float(v) for k, v in (data.get("summary") or {}).items()},
                   {k: float(v) for k, v in (data.get("drop") or {}).items()})

    def values(self, check: Check) -> float | None:
        source = self.drop if check.kind == "drop" else self.summary
        return source.get(check.metric)


@dataclass(frozen=True)
class Outcome:
    """One check of one cell: raw statistics, then (after ``decide``) a status."""

    check: Check
    current: float
    reference: float
    n_current: int = 0
    n_reference: int = 0
    change: float = math.nan  # signed: relative (cur/ref - 1), error_rate in points
    worse: float = math.nan  # the change in the bad direction (> 0 is worse)
    p_worse: float = 1.0
    p_better: float = 1.0
    p_worse_adj: float = 1.0
    p_better_adj: float = 1.0
    detectable: float = math.nan  # smallest worse change this cell could flag
    min_p: float = 0.0
    alpha_each: float = 0.05
    test: str = ""  # mann-whitney | welch-t (when ranks cannot reach alpha_each)
    ci: tuple[float, float] = (math.nan, math.nan)
    ref_what: str = ""
    ref_detail: str = ""
    #: accepted runs this run-level check still needs before it may judge
    runs_missing: int = 0
    #: a ``level0`` check: its level and level 0 are blocks of one run, measured
    #: minutes apart, and the machine drifts between blocks as it does between
    #: runs. The accepted runs' drops of this cell show by how much; with fewer
    #: than the policy's ``min_runs`` (``drift_runs_missing`` > 0) a drop beyond
    #: the budget is not called a regression. ``drift_p``: one-sided p that this
    #: run's drop is beyond the budget, given the spread of the accepted runs' drops;
    #: nan when no drift applies (an interleaved cell: its level 0 ran beside it)
    drift_runs: int = 0
    drift_runs_missing: int = 0
    drift_sd: float = math.nan
    drift_p: float = math.nan
    #: a ``drop`` or ``level0`` check of an interleaved run: by how much the A/A guard (the group's
    #: level-0 cell, its two alternating halves) moved this metric with no fault (``guard_shift``, a
    #: worsening as ``drops_of`` gives it, either sign), and the relative change the check's rule
    #: assumes the machine's noise may make (``guard_allowed``; ``wanbench.gate.assess.with_guard``)
    guard_shift: float = math.nan
    guard_allowed: float = math.nan
    #: an A/B level's pooled check (``wanbench.gate.ab_levels``): the cells whose pairs it pools
    #: (0: one cell's check); ``n_current`` is then the pairs of all of them
    cells: int = 0
    status: str = ""
    message: str = ""
    #: the reason code behind ``status`` (``R_*``)
    reason: str = ""

    @property
    def statistical(self) -> bool:
        return self.check.kind not in ("absolute", "census") and self.runs_missing == 0

    @property
    def looks_worse(self) -> bool:
        """A statistical check beyond its budget whose one-sided p, before the
        session's correction, is under ``LOOKS_WORSE_P``: on the seed-000 bench 1
        of 480 same-code cells, and every run slowed by a level-0 handicap."""
        return self.statistical and self.worse > self.check.limit and self.p_worse < LOOKS_WORSE_P

    @property
    def guard_tripped(self) -> bool:
        """The A/A guard moved more than this check's rule assumes the machine does
        (compared as |log ratio|, so a rise and a fall of one size count alike)."""
        if not math.isfinite(self.guard_shift):
            return False
        return abs(log_ratio(self.guard_shift, self.check.higher_is_better)) > math.log1p(self.guard_allowed)

    @property
    def unit(self) -> str:
        return "run" if self.check.per_run else "pair" if self.check.kind == "ab" else "round"

    def to_json(self) -> dict[str, Any]:
        num = finite_or_none
        return {
            "kind": self.check.kind,
            "metric": self.check.metric,
            "limit": self.check.limit,
            "budget_line": self.check.line,
            "status": self.status,
            "current": num(self.current),
            "reference": num(self.reference),
            "n_current": self.n_current,
            "n_reference": self.n_reference,
            "change": num(self.change),
            "p": num(self.p_worse) if self.statistical else None,
            "p_adjusted": num(self.p_worse_adj) if self.statistical else None,
            "p_better": num(self.p_better) if self.statistical else None,
            "test": self.test or None,
            "detectable_change": num(self.detectable),
            "ratio_ci95": [num(self.ci[0]), num(self.ci[1])],
            "unit": self.unit,
            "runs_missing": self.runs_missing,
            **({"drift": {"runs": self.drift_runs, "runs_missing": self.drift_runs_missing,
                          "sd_points": num(self.drift_sd * 100), "p": num(self.drift_p)}}
               if self.check.kind == "level0" else {}),
            **({"guard": {"shift_pct": num(self.guard_shift * 100),
                          "allowed_pct": num(self.guard_allowed * 100), "tripped": self.guard_tripped}}
               if math.isfinite(self.guard_shift) else {}),
            **({"cells": self.cells} if self.cells else {}),
            "reason": self.reason,
            "message": self.message,
        }


@dataclass(frozen=True)
class Verdict:
    """A cell's decision as data: ``status``, the ``reasons`` (codes) behind
    it, each check with its numbers (``outcomes``) and the integrity
    ``problems``; ``message`` is rendered from them."""

    key: CellKey
    status: str
    message: str
    outcomes: tuple[Outcome, ...] = ()
    notes: tuple[str, ...] = ()
    baseline: Mapping[str, Any] = field(default_factory=dict)
    alpha: float = 0.05
    comparisons: int = 1
    reasons: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()

    @property
    def label(self) -> str:
        return self.status

    @property
    def failing(self) -> bool:
        return self.status in FAILING

    @property
    def tag(self) -> str:
        """The decision in the message pytest reports (``tag_of``)."""
        return tag_of(self.status, self.reasons)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reasons": list(self.reasons),
            "message": self.message,
            "cell": self.key.id,
            "integrity": [p.to_json() for p in self.problems],
            "checks": [o.to_json() for o in self.outcomes],
            "notes": list(self.notes),
            "baseline": dict(self.baseline),
            "alpha": self.alpha,
            "comparisons": self.comparisons,
        }


#: how the tag of a verdict begins (``tag_of``)
TAG_PREFIX = "[wanbench: "


def tag_of(status: str, reasons: Sequence[str]) -> str:
    """``[wanbench: status=regression reasons=CENSUS_BEYOND_BUDGET,BEYOND_BUDGET]``:
    the verdict's status and reason codes at the end of the message pytest
    fails or skips a cell with, so whatever reads only that message (Allure
    2 categories, JUnit XML, a CI log) classifies by data, not by wording."""
    return f"{TAG_PREFIX}status={status} reasons={','.join(reasons) or '-'}]"
