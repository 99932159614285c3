"""Early stop inside an interleaved cell (``wanbench.gate.curtail``): the
within-run spread the accepted runs show, how far the rounds left can move a
run's value, and ``interleave_rounds`` ending a cell when told to."""

from __future__ import annotations

import math

import pytest

from selftests.test_interleave import merge
from selftests.test_interleave import one_round as interleave_round
from wanbench.gate.baseline import within_run_spread
from wanbench.gate.curtail import Standing, margins, moved, settled
from wanbench.gate.stats import student_t_ppf
from wanbench.interleave import KEY, CellSwitch, interleave_rounds, run_interleaved
from wanbench.results import WorkloadResult


def test_the_within_run_spread_pools_each_run_about_its_own_mean() -> None:
    # two runs on machines of very different speed, the same spread inside each
    fast = {"qps": [1000.0 * math.exp(d) for d in (-0.1, 0.0, 0.1)]}
    slow = {"qps": [500.0 * math.exp(d) for d in (-0.1, 0.0, 0.1)]}
    sd, df = within_run_spread([fast, slow])["qps"]
    assert df == 4
    assert sd == pytest.approx(0.1)
    # one round per run says nothing about rounds; a round of 0 QPS has no log
    assert within_run_spread([{"qps": [1.0]}, {"qps": [2.0]}]) == {}
    assert "error_rate" not in within_run_spread([{"error_rate": [0.0, 0.01]}])


def test_the_margin_shrinks_to_nothing_as_the_planned_rounds_are_run() -> None:
    within = {"qps": (0.1, 6)}
    first = margins(within, 2, 6)["qps"]
    assert first == pytest.approx(student_t_ppf(0.995, 6) * 0.1 * math.sqrt(1 / 2 - 1 / 6))
    assert margins(within, 4, 6)["qps"] < first
    assert margins(within, 6, 6) == {}
    assert margins({"qps": (0.1, 0)}, 2, 6) == {}


def test_moving_the_bad_way_lowers_qps_and_raises_latency() -> None:
    samples = {"qps": [100.0], "latency_ms.p95": [10.0], "error_rate": [0.0]}
    margin = {"qps": 0.1, "latency_ms.p95": 0.1, "error_rate": 0.5}
    worse = moved(samples, margin, worse=True)
    better = moved(samples, margin, worse=False)
    assert worse["qps"][0] < 100 < better["qps"][0]
    assert worse["latency_ms.p95"][0] > 10 > better["latency_ms.p95"][0]
    assert worse["error_rate"] == better["error_rate"] == [0.0]


def by_threshold(samples: dict[str, list[float]], reference: dict[str, list[float]]) -> list[Standing]:
    """A drop check of runs (regression under 90) and one of rounds, undecided under 40."""
    qps = samples["qps"][0]
    return [Standing("drop qps", "regression" if qps < 90 else "pass"),
            Standing("level0 qps", "inconclusive" if qps < 40 else "pass", per_run=False)]


def test_a_cell_settles_only_when_every_check_stands_the_same_in_all_three_judgements() -> None:
    within = {"qps": (0.05, 10)}
    far = settled(by_threshold, {"qps": [70.0]}, {}, within=within, reference_within={}, done=2, planned=4)
    assert far is not None
    assert far.to_json()["checks"] == {"drop qps": "regression", "level0 qps": "pass"}
    assert far.to_json()["planned_pairs"] == 4
    assert "1 regression, 1 pass" in far.why()
    assert "2 pair(s) left" in far.why()
    # 92 is within the margin of the threshold: the rounds left could make it a regression
    assert settled(by_threshold, {"qps": [92.0]}, {}, within=within, reference_within={}, done=2, planned=4) is None
    # a check of rounds left undecided: more rounds could decide it
    assert settled(by_threshold, {"qps": [20.0]}, {}, within=within, reference_within={}, done=2, planned=4) is None
    # a check of runs left undecided stands: rounds do not add accepted runs
    few = settled(lambda s, r: [Standing("drop qps", "inconclusive", "TOO_FEW_BASELINE_RUNS")], {"qps": [50.0]}, {},
                  within=within, reference_within={}, done=2, planned=4)
    assert few is not None
    assert "1 inconclusive (TOO_FEW_BASELINE_RUNS)" in few.why()
    # nothing left to run, no spread known, or no check: the rule has nothing to say
    assert settled(by_threshold, {"qps": [70.0]}, {}, within=within, reference_within={}, done=4, planned=4) is None
    assert settled(by_threshold, {"qps": [70.0]}, {}, within={}, reference_within={}, done=2, planned=4) is None
    assert settled(lambda s, r: [], {"qps": [70.0]}, {}, within=within, reference_within={}, done=2, planned=4) is None


def test_looking_worse_is_part_of_where_a_check_stands() -> None:
    def looks(samples: dict[str, list[float]], reference: dict[str, list[float]]) -> list[Standing]:
        return [Standing("baseline qps", "inconclusive", "RUNS_TOO_NOISY", looks_worse=samples["qps"][0] < 95)]

    assert settled(looks, {"qps": [100.0]}, {}, within={"qps": (0.05, 10)}, reference_within={},
                   done=2, planned=4) is None


def test_the_level0_rounds_beside_are_moved_the_other_way() -> None:
    seen: list[tuple[float, float]] = []

    def record(samples: dict[str, list[float]], reference: dict[str, list[float]]) -> list[Standing]:
        seen.append((samples["qps"][0], reference["qps"][0]))
        return [Standing("drop qps", "pass")]

    settled(record, {"qps": [100.0]}, {"qps": [1000.0]}, within={"qps": (0.05, 10)},
            reference_within={"qps": (0.02, 10)}, done=2, planned=4)
    (now, ref), (worse, ref_better), (better, ref_worse) = seen
    assert (now, ref) == (100.0, 1000.0)
    assert worse < 100 < better
    assert ref_better > 1000 > ref_worse
    assert math.log(100 / worse) > math.log(ref_better / 1000)  # each side with its own spread


def one_round(qps: float) -> WorkloadResult:
    return interleave_round(qps, 1.0)


def test_interleave_rounds_asks_after_each_whole_abba_block_and_stops_when_told() -> None:
    calls: list[bool] = []
    asked: list[tuple[int, int, int]] = []

    def enough(faulted: WorkloadResult, reference: WorkloadResult, planned: int) -> dict[str, object] | None:
        asked.append((len(faulted.rounds), len(reference.rounds), planned))
        return {"why": "decided"} if len(asked) == 2 else None

    ran = interleave_rounds(6, CellSwitch(calls.append, enough),
                            lambda faulted, i, n: one_round(100.0 if faulted else 1000.0), merge)
    assert asked == [(2, 2, 6), (4, 4, 6)]  # after rounds 4 and 8, never after the last
    assert ran.plan == (True, False, False, True) * 2
    assert len(ran.faulted) == len(ran.reference) == 4
    assert ran.early_stop == {"why": "decided"}
    assert calls[-1] is True, "the fault is back in place for the cells that follow"


def test_a_cell_that_is_never_decided_runs_every_planned_round() -> None:
    asked: list[int] = []

    def never(faulted: WorkloadResult, reference: WorkloadResult, planned: int) -> None:
        asked.append(planned)

    done = run_interleaved(3, CellSwitch(lambda f: None, never), lambda f, i, n: one_round(100.0), merge)
    assert len(done.faulted.rounds) == 3
    assert asked == [3]
    assert "early_stop" not in done.result().extra[KEY]
    # a plain switch (--no-early-stop) or no merge: nothing is asked
    run_interleaved(3, lambda f: None, lambda f, i, n: one_round(100.0), merge)
    interleave_rounds(3, CellSwitch(lambda f: None, never), lambda f, i, n: one_round(100.0))
    assert asked == [3]


def test_the_record_of_a_cell_that_stopped_says_so() -> None:
    done = run_interleaved(4, CellSwitch(lambda f: None, lambda a, b, n: {"why": "pass whatever", "pairs": 2}),
                           lambda f, i, n: one_round(100.0), merge)
    record = done.result().extra[KEY]
    assert record["early_stop"] == {"why": "pass whatever", "pairs": 2}
    assert record["order"] == "ABBA"
    assert len(record["pairs"]) == 2
