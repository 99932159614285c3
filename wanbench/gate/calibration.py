"""How well the gate decides, measured on runs made the way users make them.

A *run* is one pytest invocation: a new process, new connections and (on the
lab) a freshly started lab. The calibration records same-code runs and runs
with a known handicap, then replays the gate's own decision
(``verdict.assess_cell`` with the budget's ``baseline`` check) over them:

* false positives: a same-code run judged against a window of other
  same-code runs taken as the accepted baseline;
* detection: handicapped runs judged against such a window, first as one
  run, then with more runs of the chain as ``--gate-max-runs`` would add
  them (alpha split over the looks): the detection curve against runs spent.

Windows overlap (a run serves in several comparisons), so comparisons are not
independent; the counts say how often the gate erred on these runs, not a
confidence bound.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.gate.baseline import BaselineCell
from wanbench.gate.budgets import CellKey, Check
from wanbench.gate.verdict import REGRESSION, RunSummary, assess_cell, correct_online, decide

#: targets of the brief: at most 5 % false positives, at least 90 % of 10 % drops caught
FP_MAX, DETECT_MIN, TARGET_DROP = 0.05, 0.90, 0.10


def log_sd(values: Sequence[float]) -> float:
    """Spread of run medians as the sd of their logs (~ relative sd)."""
    vals = [math.log(v) for v in values if v > 0]
    return statistics.stdev(vals) if len(vals) >= 2 else math.nan


@dataclass(frozen=True)
class Comparison:
    """One replayed gate decision."""

    current: tuple[int, ...]  # indices of the current runs (handicapped or same-code)
    baseline: tuple[int, ...]  # indices of the same-code runs taken as accepted
    status: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"current": list(self.current), "baseline": list(self.baseline), "status": self.status,
                "message": self.message}


def judge_runs(current: Sequence[float], baseline: Sequence[float], *, budget: float, alpha: float,
               looks: int = 1, min_runs: int = 3, min_run_spread: float = 0.0,
               key: CellKey | None = None) -> tuple[str, str]:
    """The gate's verdict of ``current`` run medians (the last one measured
    now, the others carried over from earlier looks) against ``baseline`` run
    medians, exactly as pytest decides a one-cell session."""
    key = key or CellKey("calibration", "cell", "0ms", 1)
    check = Check("baseline", "qps", budget, 0, "calibration")
    base = BaselineCell(key, {"qps": list(baseline)}, len(baseline), "", {}, "", {"qps": list(baseline)})
    *earlier, now = current
    pending = assess_cell(key, {"qps": [now]}, [check], baseline=base, level0=None, alpha_cell=alpha / looks,
                          earlier_runs=[RunSummary({"qps": v}) for v in earlier], min_runs=min_runs,
                          min_run_spread=min_run_spread)
    correct_online(pending, looks)
    v = decide(pending, alpha=alpha, comparisons=looks)
    return v.status, v.message


def windows(n: int, size: int, count: int, *, exclude: int | None = None) -> list[tuple[int, ...]]:
    """``count`` baseline windows of ``size`` consecutive runs (cyclic) out of
    ``n``, never containing ``exclude``; spread evenly over the start points."""
    pool = [i for i in range(n) if i != exclude]
    if len(pool) < size:
        return []
    starts = sorted({round(k * len(pool) / max(1, count)) % len(pool) for k in range(count)})
    return [tuple(pool[(s + j) % len(pool)] for j in range(size)) for s in starts]


@dataclass
class Calibration:
    """Same-code and handicapped run medians of one workload, and the gate's record on them."""

    workload: str
    same: list[float]
    handicapped: list[float]
    baseline_runs: int = 5
    max_runs: int = 3
    budget: float = 0.05
    alpha: float = 0.05
    #: the gate policy's least spread between runs (``GatePolicy.min_run_spread``)
    min_run_spread: float = 0.0
    seconds_per_run: float = math.nan
    false_positives: list[Comparison] = field(default_factory=list)
    detections: list[list[Comparison]] = field(default_factory=list)  # per chain, one per look

    def run(self, comparisons: int = 20) -> Calibration:
        n = len(self.same)
        per_current = max(1, math.ceil(comparisons / max(1, n)))
        self.false_positives = []
        for i in range(n):
            for win in windows(n, self.baseline_runs, per_current, exclude=i):
                status, msg = judge_runs([self.same[i]], [self.same[j] for j in win], budget=self.budget,
                                    min_run_spread=self.min_run_spread,
                                         alpha=self.alpha)
                self.false_positives.append(Comparison((i,), win, status, msg))
        self.detections = []
        h = len(self.handicapped)
        wins = windows(n, self.baseline_runs, max(1, h))
        for c in range(h):
            win = wins[c % len(wins)] if wins else ()
            chain: list[Comparison] = []
            for look in range(1, self.max_runs + 1):
                idx = tuple((c + k) % h for k in range(look))
                status, msg = judge_runs([self.handicapped[k] for k in idx], [self.same[j] for j in win],
                                         budget=self.budget, min_run_spread=self.min_run_spread,
                                         alpha=self.alpha, looks=self.max_runs)
                chain.append(Comparison(idx, win, status, msg))
                if status in (REGRESSION, "pass", "improvement"):
                    break
            self.detections.append(chain)
        return self

    @property
    def fp_rate(self) -> float:
        fp = self.false_positives
        return sum(c.status == REGRESSION for c in fp) / len(fp) if fp else math.nan

    def detected_by(self, look: int) -> float:
        """Fraction of chains that called a regression within ``look`` runs."""
        if not self.detections:
            return math.nan
        hit = sum(any(c.status == REGRESSION for c in chain[:look]) for chain in self.detections)
        return hit / len(self.detections)

    @property
    def realized_drop(self) -> float:
        if not self.same or not self.handicapped:
            return math.nan
        return 1.0 - statistics.median(self.handicapped) / statistics.median(self.same)

    def curve(self) -> list[dict[str, float]]:
        """Detection against runs spent: per look, the fraction caught and the
        runs a verdict costs (the accepted baseline plus the looks)."""
        return [{"looks": k, "runs_per_verdict": self.baseline_runs + k, "detected": self.detected_by(k)}
                for k in range(1, self.max_runs + 1)]

    def passed(self) -> bool:
        return (len(self.false_positives) >= 20 and self.fp_rate <= FP_MAX and len(self.detections) >= 10
                and self.detected_by(self.max_runs) >= DETECT_MIN)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "same_code_medians": self.same,
            "handicapped_medians": self.handicapped,
            "between_run_sd": log_sd(self.same),
            "realized_drop": self.realized_drop,
            "baseline_runs": self.baseline_runs,
            "max_runs": self.max_runs,
            "false_positives": {"n": len(self.false_positives),
                                "regressions": sum(c.status == REGRESSION for c in self.false_positives),
                                "rate": self.fp_rate},
            "detection_curve": self.curve(),
            "seconds_per_run": self.seconds_per_run,
            "passed": self.passed(),
            "comparisons": {"same_code": [c.to_json() for c in self.false_positives],
                            "handicapped": [[c.to_json() for c in chain] for chain in self.detections]},
        }
