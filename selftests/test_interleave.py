"""Interleaved levels: ABBA order, the pairs, and the gate taking its level 0
from the rounds beside the faulted ones (``wanbench.interleave``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from wanbench.census import census_of
from wanbench.gate.baseline import Lookup, RunCell, reference_of, run_entry_cells
from wanbench.gate.budget_file import parse_budgets
from wanbench.gate.verdict import Judge
from wanbench.interleave import KEY, paired, run_interleaved, schedule
from wanbench.report.census_rows import table_rows
from wanbench.results import Latency, Round, WorkloadResult


def test_abba_starts_under_the_fault_and_pairs_neighbours() -> None:
    assert schedule(1) == [True, False]
    assert schedule(4) == [True, False, False, True, True, False, False, True]
    plan = schedule(5)
    assert plan.count(True) == plan.count(False) == 5
    with pytest.raises(ValueError, match="at least one round"):
        schedule(0)


def one_round(qps: float, avg_ms: float) -> WorkloadResult:
    rnd = Round(seconds=1.0, queries=int(qps), qps=qps, latency_ms=Latency(avg=avg_ms, p95=avg_ms * 1.2))
    return WorkloadResult("probe_write", 10, (rnd,), rnd.latency_ms)


def merge(parts: Sequence[WorkloadResult]) -> WorkloadResult:
    rounds = tuple(r for p in parts for r in p.rounds)
    return WorkloadResult(parts[0].workload, parts[0].concurrency, rounds, rounds[0].latency_ms)


def test_the_switch_runs_only_on_a_change_and_leaves_the_fault_in_place() -> None:
    calls: list[bool] = []
    ran: list[bool] = []

    def run_round(faulted: bool, i: int, total: int) -> WorkloadResult:
        ran.append(faulted)
        return one_round(100.0 if faulted else 1000.0, 100.0 if faulted else 10.0)

    done = run_interleaved(3, calls.append, run_round, merge)
    assert ran == [True, False, False, True, True, False]
    assert calls == [False, True, False, True]  # lifted, back, lifted, and back at the end
    assert done.plan == (True, False, False, True, True, False)
    assert [r.qps for r in done.faulted.rounds] == [100.0] * 3
    assert [r.qps for r in done.reference.rounds] == [1000.0] * 3


def test_a_failing_round_still_puts_the_fault_back() -> None:
    calls: list[bool] = []

    def run_round(faulted: bool, i: int, total: int) -> WorkloadResult:
        if i == 2:
            raise RuntimeError("sysbench died")
        return one_round(100.0, 100.0)

    with pytest.raises(RuntimeError):
        run_interleaved(2, calls.append, run_round, merge)
    assert calls == [False, True]


def test_pairs_give_the_drop_and_the_added_latency() -> None:
    a = [{"qps": 100.0, "latency_ms": {"avg": 105.0}}, {"qps": 90.0, "latency_ms": {"avg": 110.0}}]
    b = [{"qps": 1000.0, "latency_ms": {"avg": 5.0}}, {"qps": 900.0, "latency_ms": {"avg": 9.0}}]
    out = paired(a, b)
    assert out["qps_ratio"] == pytest.approx(0.1)
    assert out["drop"] == pytest.approx(0.9)
    assert out["log_ratio_sd"] == pytest.approx(0.0, abs=1e-9)
    assert out["added_latency_ms"] == pytest.approx(100.5)
    assert len(out["pairs"]) == 2


def cell_json(test_id: str, level: str, value: float, qps: Sequence[float], avg: float,
              reference: Sequence[float] = (), ref_avg: float = 1.0) -> dict:
    def rounds(values: Sequence[float], lat: float) -> list[dict]:
        return [{"seconds": 1.0, "queries": int(q), "qps": q, "tps": None, "errors": 0, "reconnects": 0,
                 "latency_ms": {"avg": lat, "p50": lat, "p95": lat, "p99": lat}} for q in values]

    extra = {}
    if reference:
        extra[KEY] = {"order": "AB" * len(qps), "reference": {"rounds": rounds(reference, ref_avg)},
                      **paired(rounds(qps, avg), rounds(reference, ref_avg))}
    return {"test_id": test_id, "family": "rtt", "scenario": "replica_write", "concurrency": 10,
            "path": "proxy", "workload": "probe_write",
            "level": {"kind": "delay", "value": value, "label": level},
            "rounds": rounds(qps, avg), "workload_extra": extra, "extra": {}, "client": {}}


def test_the_census_counts_round_trips_against_the_rounds_beside() -> None:
    # a level-0 cell minutes earlier on a faster minute (1 ms), the rounds beside at 4 ms
    level0 = cell_json("l0", "0ms", 0, [9000.0] * 3, 1.0)
    cell = cell_json("l50", "50ms", 50, [180.0] * 3, 54.0, reference=[2500.0] * 3, ref_avg=4.0)
    census = census_of(cell, level0)
    assert census["metrics"]["round_trips"]["value"] == pytest.approx(1.0)
    assert census["round_trips"]["level0"] == "interleaved"
    assert census["interleaved"]["pairs"] == 3
    assert census["interleaved"]["drop"] == pytest.approx(1 - 180 / 2500)
    row = table_rows([{**cell, "census": census, "label": "w50"}])[0]
    assert row[1].startswith("92.8%")
    assert row[2] == "1.00"
    # not interleaved: the level-0 cell of the run, as before
    plain = cell_json("l50", "50ms", 50, [180.0] * 3, 54.0)
    assert census_of(plain, level0)["metrics"]["round_trips"]["value"] == pytest.approx(1.06)


BUDGET = """
version: 1
profile: lab
rules:
  - name: replica reads do not care
    family: rtt
    level0:
      qps: 10%
"""


def test_the_gate_takes_level_0_from_the_rounds_beside() -> None:
    budgets = parse_budgets(BUDGET, source="b.yaml")
    judge = Judge(budgets, Lookup(None))
    # level 0 minutes earlier ran on a fast minute: 20 % more than the rounds beside the fault
    level0 = RunCell.of(cell_json("l0", "0ms", 0, [1200.0, 1210.0, 1190.0], 1.0))
    cell = RunCell.of(cell_json("l50", "50ms", 50, [1000.0, 1005.0, 995.0], 1.0,
                                reference=[1000.0, 1010.0, 990.0]))
    assert cell.reference["qps"] == [1000.0, 1010.0, 990.0]
    judge.remember(level0.key, level0.samples, is_level0=True)
    plain, _ = judge.verdict(cell.key, cell.samples, cells=1)
    beside, _ = judge.verdict(cell.key, cell.samples, cells=1, reference=cell.reference)
    check = next(o for o in beside.outcomes if o.check.kind == "level0")
    assert check.reference == pytest.approx(1000.0)
    assert abs(check.worse) < 0.01
    assert "interleaved" in beside.message
    assert next(o for o in plain.outcomes if o.check.kind == "level0").worse == pytest.approx(1 - 1000 / 1200)


def test_the_store_keeps_the_drop_against_the_rounds_beside() -> None:
    level0 = RunCell.of(cell_json("l0", "0ms", 0, [2000.0] * 3, 1.0))
    cell = RunCell.of(cell_json("l50", "50ms", 50, [100.0] * 3, 50.0, reference=[1000.0] * 3))
    entries = run_entry_cells([level0, cell])
    assert entries[cell.key.id]["drop"]["qps"] == pytest.approx(0.9)
    assert not reference_of(cell_json("l0", "0ms", 0, [1.0], 1.0))


def test_an_aa_guard_that_moved_more_than_the_budget_leaves_level0_checks_undecided() -> None:
    """The level-0 cell's rounds alternate as a faulted cell's do, with no
    fault to toggle: its two halves are an A/A comparison. When they differ by
    more than a check's budget, the machine is too noisy now to judge that
    check in this group, whatever the faulted rounds say; a quiet guard
    leaves the verdict as it was."""
    from wanbench.gate.outcome import INCONCLUSIVE, R_MACHINE_NOISY, REGRESSION

    budgets = parse_budgets(BUDGET, source="b.yaml")
    faulted = RunCell.of(cell_json("l50", "50ms", 50, [700.0, 710.0, 690.0, 705.0, 695.0], 1.0,
                                   reference=[1000.0, 1010.0, 990.0, 1005.0, 995.0]))

    def verdict(guard_reference: Sequence[float]):  # noqa: ANN202 - a Verdict
        judge = Judge(budgets, Lookup(None))
        level0 = RunCell.of(cell_json("l0", "0ms", 0, [1000.0, 1010.0, 990.0, 1005.0, 995.0], 1.0,
                                      reference=guard_reference))
        judge.remember(level0.key, level0.samples, is_level0=True, reference=level0.reference)
        v, _ = judge.verdict(faulted.key, faulted.samples, cells=1, reference=faulted.reference)
        return v, next(o for o in v.outcomes if o.check.kind == "level0")

    quiet, check = verdict([1010.0, 1000.0, 995.0, 990.0, 1005.0])
    assert quiet.status == REGRESSION
    assert abs(check.guard_shift) < 0.01
    assert not check.guard_tripped
    noisy, check = verdict([1300.0, 1310.0, 1290.0, 1305.0, 1295.0])  # no fault, and 23 % apart
    assert noisy.status == INCONCLUSIVE
    assert check.reason == R_MACHINE_NOISY
    assert check.guard_shift == pytest.approx(1 - 1000 / 1300, abs=0.01)
    assert "machine is too noisy now" in noisy.message
    assert check.to_json()["guard"] == {"shift_pct": pytest.approx(23.1, abs=0.1), "allowed_pct": 10.0,
                                        "tripped": True}
    # without an interleaved level-0 cell there is no guard: nothing changes
    judge = Judge(budgets, Lookup(None))
    plain = RunCell.of(cell_json("l0", "0ms", 0, [1000.0, 1010.0, 990.0, 1005.0, 995.0], 1.0))
    judge.remember(plain.key, plain.samples, is_level0=True, reference=plain.reference)
    v, _ = judge.verdict(faulted.key, faulted.samples, cells=1, reference=faulted.reference)
    assert v.status == REGRESSION


def test_a_drop_check_allows_its_guard_what_the_accepted_runs_spread_allows() -> None:
    """A ``drop`` check's run t-test takes the accepted runs' spread as this
    run's noise: the guard trips when its ratio lies outside the 99 %
    bound of that spread (log ratios, t with n - 1 degrees of freedom)."""
    import math

    from wanbench.gate.assess import with_guard
    from wanbench.gate.budgets import Check
    from wanbench.gate.outcome import Outcome
    from wanbench.gate.stats import student_t_ppf

    drop = Outcome(Check("drop", "qps", 0.05, 1, "b.yaml"), 0.93, 0.90)
    spread = [0.5, 0.55, 0.45, 0.5, 0.52]  # QPS ratios 0.5, 0.45, 0.55, 0.5, 0.48
    logs = [math.log(1 - d) for d in spread]
    sd = math.sqrt(sum((v - sum(logs) / 5) ** 2 for v in logs) / 4)
    bound = student_t_ppf(0.995, 4) * sd
    guarded = with_guard(drop, {"qps": 0.2}, spread)
    assert guarded.guard_allowed == pytest.approx(math.expm1(bound))
    assert not guarded.guard_tripped  # |log 0.8| = 0.22 < the bound, 0.34
    assert with_guard(drop, {"qps": 0.4}, spread).guard_tripped  # |log 0.6| = 0.51 > 0.34
    assert with_guard(drop, {"qps": -0.7}, spread).guard_tripped  # a rise counts alike
    assert with_guard(drop, {"qps": 0.02}, [0.9, 0.9, 0.9]).guard_tripped  # runs that never varied
    assert math.isnan(with_guard(drop, {"qps": 0.4}, [0.5]).guard_shift)  # one accepted run: no guard
    baseline = Outcome(Check("baseline", "qps", 0.05, 1, "b.yaml"), 1.0, 1.0)
    assert not with_guard(baseline, {"qps": 0.5}).guard_tripped  # against stored runs: not the guard's
