"""Every verdict, decided from recorded rounds of the real read probe
(``selftests/data/gate/probe_read_batches.json``), with the message a DBA reads."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from wanbench.gate.baseline import BaselineCell, Samples, samples_of
from wanbench.gate.budgets import CellKey, Check
from wanbench.gate.verdict import (
    IMPROVEMENT,
    INCOMPARABLE,
    INCONCLUSIVE,
    NO_BASELINE,
    PASS,
    REGRESSION,
    Judge,
    Pending,
    Verdict,
    assess_cell,
    correct,
    correct_online,
    decide,
)

DATA = Path(__file__).parent / "data" / "gate" / "probe_read_batches.json"
BATCHES = json.loads(DATA.read_text())["batches"]
KEY = CellKey("rtt", "replica_read", "50ms", 8, "proxy", "probe_read")
QPS_5 = Check("baseline", "qps", 0.05, 7, "budgets.yaml")
DAY = "2026-11-22T17:40:00+00:00"


def samples(tag: str) -> Samples:
    return samples_of({"family": "rtt", "scenario": "replica_read", "concurrency": 8, "rounds": BATCHES[tag]})


def baseline(*tags: str) -> BaselineCell:
    pooled: list[float] = []
    medians: list[float] = []
    for tag in tags:
        pooled += samples(tag)["qps"]
        medians.append(statistics.median(samples(tag)["qps"]))
    return BaselineCell(KEY, {"qps": pooled}, len(tags), DAY, {"mariadb": "10.11.19"}, "", {"qps": medians})


def judge(
    base: BaselineCell | None,
    current: Samples,
    *,
    checks: tuple[Check, ...] = (QPS_5,),
    cells: int = 1,
    level0: Samples | None = None,
    incomparable: tuple[str, ...] = (),
    key: CellKey = KEY,
) -> Verdict:
    pending = assess_cell(key, current, checks, baseline=base, level0=level0, level0_label="0ms",
                          alpha_cell=0.05 / cells, incomparable=incomparable,
                          no_baseline_note="no baseline in .wanbench/baselines for profile 'lab'")
    correct_online(pending, cells)
    return decide(pending, alpha=0.05, comparisons=cells)


def test_regression_reads_like_a_sentence() -> None:
    v = judge(baseline("handicap6-base"), samples("handicap6-current"))
    assert v.status == REGRESSION
    assert v.message == (
        "replica_read rtt=50ms c=8: QPS 20872 is 14.0% below baseline 24278 "
        "(budget 5%, p=0.004, 5 rounds vs 5, baseline 2026-11-22 mariadb 10.11.19)"
    )
    doc = v.to_json()
    assert doc["status"] == "regression"
    check = doc["checks"][0]
    assert check["p"] == pytest.approx(1 / 252)
    assert check["budget_line"] == 7
    assert check["ratio_ci95"][0] < 0.95


def test_improvement() -> None:
    v = judge(baseline("handicap6-current"), samples("handicap6-base"))
    assert v.status == IMPROVEMENT
    assert "QPS 24278 is 16.3% above baseline 20872: improvement" in v.message


def test_pass_says_what_it_could_have_detected() -> None:
    v = judge(baseline("handicap5-base"), samples("handicap5-current"))
    assert v.status == PASS
    m = re.search(r"could detect (\d+\.\d)%", v.message)
    assert m, v.message
    assert float(m.group(1)) <= 5.0, v.message


def test_inconclusive_gives_the_smallest_detectable_change() -> None:
    v = judge(baseline("handicap0-base"), samples("handicap0-current"))
    assert v.status == INCONCLUSIVE
    m = re.search(r"too noisy to judge a 5% budget: the smallest drop this cell could detect is (\d+\.\d)%", v.message)
    assert m, v.message
    assert float(m.group(1)) > 5.0, v.message
    assert v.outcomes[0].to_json()["detectable_change"] > 0.05


def test_too_few_rounds_against_one_accepted_run_is_inconclusive_and_says_so() -> None:
    """3 vs 3 rounds cannot reach alpha 0.05/24 by ranks (smallest p 0.05)."""
    three = {"qps": samples("handicap6-current")["qps"][:3]}
    base = BaselineCell(KEY, {"qps": samples("handicap6-base")["qps"][:3]}, 1, DAY, {}, "")
    v = judge(base, three, cells=24)
    assert v.status == INCONCLUSIVE
    assert "with 3 vs 3 rounds no difference can reach p <= 0.0021" in v.message
    assert "the smallest possible p is 0.05" in v.message
    assert "accept one more baseline run (--baseline-save)" in v.message


def test_t_test_against_several_accepted_runs_catches_a_clear_drop_among_many_cells() -> None:
    qps = samples("same1-base")["qps"]
    runs = [qps[:3], qps[1:4]]
    base = BaselineCell(KEY, {"qps": runs[0] + runs[1]}, 2, DAY, {}, "",
                        {"qps": [statistics.median(r) for r in runs]})
    slower = {"qps": [q * 0.8 for q in qps[2:5]]}
    v = judge(base, slower, cells=24)
    assert v.outcomes[0].test == "welch-t"
    assert v.status == REGRESSION, v.message
    assert "(t-test), 3 rounds vs 6" in v.message
    same = judge(base, {"qps": qps[2:5]}, cells=24)
    assert same.status in (PASS, INCONCLUSIVE)


def test_one_round_is_not_enough_for_any_test() -> None:
    base = BaselineCell(KEY, {"qps": samples("handicap6-base")["qps"]}, 1, DAY, {}, "")
    v = judge(base, {"qps": samples("handicap6-current")["qps"][:1]})
    assert v.status == INCONCLUSIVE
    assert "with 1 vs 5 rounds no difference can reach p <= 0.05 (a test needs at least 2 rounds on each side)" in (
        v.message
    )


def test_no_baseline_says_how_to_record_one() -> None:
    v = judge(None, samples("same0-current"))
    assert v.status == NO_BASELINE
    assert v.message == (
        "replica_read rtt=50ms c=8: no baseline for this cell (no baseline in .wanbench/baselines for "
        "profile 'lab'); record one with --baseline-save"
    )


def test_incomparable_names_the_fields_that_differ() -> None:
    v = judge(None, samples("same0-current"), incomparable=("client.cores: 2 -> 4",))
    assert v.status == INCOMPARABLE
    assert v.message.startswith(
        "replica_read rtt=50ms c=8: incomparable with the stored baseline: client.cores: 2 -> 4"
    )


def test_absolute_limit_needs_no_baseline_and_wins_over_no_baseline() -> None:
    limit = Check("absolute", "latency_ms.p95", 0.9, 12, "budgets.yaml")
    v = judge(None, samples("same0-base"), checks=(QPS_5, limit))
    assert v.status == REGRESSION
    assert "p95 latency 0.954 ms is above the limit 0.9 ms (absolute budget, median of 5 rounds)" in v.message


def test_degradation_against_level_zero_of_the_same_run() -> None:
    budget = Check("level0", "qps", 0.10, 20, "budgets.yaml")
    v = judge(None, samples("handicap6-current"), checks=(budget,), level0=samples("handicap6-base"))
    assert v.status == REGRESSION
    assert "QPS 20872 is 14.0% below level 0 (rtt=0ms) 24278 (degradation budget 10%, p=0.004, 5 rounds vs 5)" in (
        v.message
    )


def test_cell_without_rounds_is_inconclusive() -> None:
    v = judge(baseline("same1-base"), {})
    assert v.status == INCONCLUSIVE
    assert v.message == "replica_read rtt=50ms c=8: no rounds were measured, nothing to judge"


def test_level_zero_missing_is_a_note_not_a_failure() -> None:
    budget = Check("level0", "qps", 0.10, 20, "budgets.yaml")
    v = judge(None, samples("handicap6-current"), checks=(budget,))
    assert v.status == PASS
    assert "level-0 check skipped" in v.to_json()["notes"][0]


def test_change_within_the_spread_of_accepted_runs_is_not_a_regression() -> None:
    runs = [[100.0 + i + j * 0.1 for i in range(5)] for j in range(4)] + [[90.0, 91.0, 89.0, 90.5, 92.0]]
    medians = [statistics.median(r) for r in runs]
    base = BaselineCell(KEY, {"qps": [v for r in runs for v in r]}, 5, DAY, {}, "", {"qps": medians})
    v = judge(base, {"qps": [90.6, 91.0, 90.8, 91.5, 92.5]})
    assert v.status == INCONCLUSIVE
    assert "not worse than every accepted run (worst run 90.5)" in v.message
    below = judge(base, {"qps": [85.0, 86.0, 84.2, 85.2, 87.0]})
    assert below.status == REGRESSION


def same_code_matrix() -> list[tuple[CellKey, BaselineCell, Samples]]:
    """The 20 same-code pairs of the recording as the cells of one session."""
    out = []
    for i in range(20):
        key = CellKey("rtt", "replica_read", "50ms", 8 + i, "proxy", "probe_read")
        base = BaselineCell(key, samples(f"same{i}-base"), 1, DAY, {}, "")
        out.append((key, base, samples(f"same{i}-current")))
    return out


def test_clean_matrix_fails_by_chance_without_correction() -> None:
    """On this noisy recording, judging each same-code cell alone flags some."""
    flagged = [judge(base, cur, key=key, cells=1).status for key, base, cur in same_code_matrix()]
    assert flagged.count(REGRESSION) >= 2


@pytest.mark.parametrize("method", ["online", "holm", "bonferroni", "bh"])
def test_clean_matrix_does_not_fail_with_the_session_correction(method: str) -> None:
    matrix = same_code_matrix()
    pendings: list[Pending] = []
    for key, base, cur in matrix:
        p = assess_cell(key, cur, [QPS_5], baseline=base, level0=None, alpha_cell=0.05 / len(matrix))
        pendings.append(correct_online(p, len(matrix)) if method == "online" else p)
    if method != "online":
        correct(pendings, method)
    verdicts = [decide(p, alpha=0.05, comparisons=len(matrix)) for p in pendings]
    assert [v.status for v in verdicts].count(REGRESSION) == 0


def test_real_regression_survives_the_correction_with_enough_baseline_runs() -> None:
    """A 14 % drop against a 3-run baseline is still caught among 20 cells."""
    base = baseline("handicap6-base", "handicap2-base", "handicap3-base")
    v = judge(base, samples("handicap6-current"), cells=20)
    assert v.status == REGRESSION, v.message


def test_judge_remembers_level_zero_cells_in_run_order() -> None:
    from wanbench.gate.baseline import Lookup
    from wanbench.gate.budgets import parse_budgets

    budgets = parse_budgets("profile: lab\nrules:\n  - family: rtt\n    level0: {qps: 10%}\n", source="b.yaml")
    j = Judge(budgets, Lookup(None, note="empty store"))
    j.remember(CellKey("rtt", "replica_read", "0ms", 8, "proxy", "probe_read"), samples("handicap6-base"),
               is_level0=True)
    pending = j.pending(KEY, samples("handicap6-current"), alpha_cell=0.05)
    v = decide(correct_online(pending, 1), alpha=0.05)
    assert v.status == REGRESSION
    assert "below level 0 (rtt=0ms)" in v.message
