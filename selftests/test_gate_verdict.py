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
    RunSummary,
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
    """Each recorded batch as one accepted run (its median is the run's summary)."""
    pooled: list[float] = []
    medians: list[float] = []
    for tag in tags:
        pooled += samples(tag)["qps"]
        medians.append(statistics.median(samples(tag)["qps"]))
    return BaselineCell(KEY, {"qps": pooled}, len(tags), DAY, {"mariadb": "10.11.19"}, "", {"qps": medians})


def runs_baseline(medians: list[float], *, drops: list[float] | None = None) -> BaselineCell:
    """A baseline of whole runs, one summary each."""
    return BaselineCell(KEY, {"qps": list(medians)}, len(medians), DAY, {"mariadb": "10.11.19"}, "",
                        {"qps": list(medians)}, {"qps": list(drops)} if drops else {})


def one_run(median: float) -> Samples:
    return {"qps": [median * f for f in (0.99, 1.0, 1.01)]}


def judge(
    base: BaselineCell | None,
    current: Samples,
    *,
    checks: tuple[Check, ...] = (QPS_5,),
    cells: int = 1,
    level0: Samples | None = None,
    incomparable: tuple[str, ...] = (),
    key: CellKey = KEY,
    earlier: tuple[RunSummary, ...] = (),
) -> Verdict:
    pending = assess_cell(key, current, checks, baseline=base, level0=level0, level0_label="0ms",
                          alpha_cell=0.05 / cells, incomparable=incomparable,
                          no_baseline_note="no baseline in .wanbench/baselines for profile 'lab'",
                          earlier_runs=earlier)
    correct_online(pending, cells)
    return decide(pending, alpha=0.05, comparisons=cells)


def test_regression_reads_like_a_sentence() -> None:
    v = judge(runs_baseline([5000, 5100, 4900, 5050, 4950]), one_run(4000))
    assert v.status == REGRESSION
    assert v.message.startswith(
        "replica_read rtt=50ms c=8: QPS 4000 is 20.0% below baseline 4999 (budget 5%, p="
    ), v.message
    assert v.message.endswith(
        ", 1 run vs 5 accepted, baseline 2026-11-22 mariadb 10.11.19, 5 accepted runs)"
    ), v.message
    doc = v.to_json()
    assert doc["status"] == "regression"
    check = doc["checks"][0]
    assert check["unit"] == "run"
    assert check["p"] < 0.001
    assert check["budget_line"] == 7


def test_rounds_of_one_run_are_not_independent_samples() -> None:
    """Five tight rounds 14 % below five tight baseline rounds looked like
    p=0.004 to a rank test over rounds; as one run against one accepted run
    there is no spread between runs to judge it with."""
    v = judge(baseline("handicap6-base"), samples("handicap6-current"))
    assert v.status == INCONCLUSIVE
    assert ("the baseline holds 1 accepted run of this cell and the gate needs 3 to know how much separate runs "
            "differ: record 2 more (--baseline-save, one invocation each, or --baseline-runs 2)") in v.message


def test_improvement() -> None:
    v = judge(runs_baseline([5000, 5100, 4900, 5050, 4950]), one_run(6000))
    assert v.status == IMPROVEMENT
    assert "QPS 6000 is 20.0% above baseline 4999: improvement" in v.message


def test_pass_says_what_it_could_have_detected() -> None:
    v = judge(runs_baseline([5000, 5020, 4980, 5010, 4990, 5005]), one_run(4990))
    assert v.status == PASS
    m = re.search(r"could detect (\d+\.\d)%", v.message)
    assert m, v.message
    assert float(m.group(1)) <= 5.0, v.message


def test_noisy_runs_are_inconclusive_with_the_smallest_detectable_change() -> None:
    """The recorded same-code batches, each taken as a run, differ by ~10 %:
    a 10 % handicap cannot be told from that with a 5 % budget."""
    base = baseline(*(f"same{i}-base" for i in range(10, 18)))
    v = judge(base, samples("handicap5-current"))
    assert v.status == INCONCLUSIVE
    m = re.search(r"the smallest drop it could detect is (\d+\.\d)%", v.message)
    assert m, v.message
    assert float(m.group(1)) > 5.0, v.message
    assert "--gate-max-runs" in v.message


def test_more_runs_of_the_current_code_decide_what_one_could_not() -> None:
    """Sequential repeats (--gate-max-runs): each earlier run of the cell is
    carried over and tested as a run of its own."""
    base = runs_baseline([5000, 5300, 4700, 5200, 4800, 5100])
    one = judge(base, one_run(4300), cells=4)
    assert one.status == INCONCLUSIVE, one.message
    three = judge(base, one_run(4300), cells=4, earlier=(RunSummary({"qps": 4250}), RunSummary({"qps": 4350})))
    assert three.status == REGRESSION, three.message
    assert "3 runs vs 6 accepted" in three.message


def test_fewer_runs_than_the_policy_needs_never_call_a_regression() -> None:
    v = judge(runs_baseline([5000, 5010]), one_run(2500))
    assert v.status == INCONCLUSIVE
    assert "record 1 more" in v.message
    assert v.outcomes[0].to_json()["runs_missing"] == 1


def test_drop_against_level_zero_gated_against_the_baseline_runs_drop() -> None:
    """The seeds' "% drop": this run's level 40 % -> 60 % while the accepted
    runs dropped 40 +- 1 %: 20 points over a 5-point budget."""
    drop5 = Check("drop", "qps", 0.05, 9, "budgets.yaml")
    base = runs_baseline([3000, 3050, 2950, 3010], drops=[0.40, 0.41, 0.39, 0.40])
    worse = judge(base, one_run(2000), checks=(drop5,), level0=one_run(5000))
    assert worse.status == REGRESSION, worse.message
    assert "QPS drop against level 0 is 60.0% vs 40.0% in the baseline runs (+20.0 points) (budget 5 points" in (
        worse.message
    )
    same = judge(base, one_run(3000), checks=(drop5,), level0=one_run(5000))
    assert same.status == PASS, same.message
    # a slower machine today moves level 0 and the level together: the drop holds
    slow = judge(base, one_run(1500), checks=(drop5,), level0=one_run(2500))
    assert slow.status == PASS, slow.message


def test_saturated_client_turns_a_regression_into_inconclusive() -> None:
    from wanbench.gate.baseline import Lookup
    from wanbench.gate.budget_file import parse_budgets

    budgets = parse_budgets("profile: lab\nrules:\n  - baseline: {qps: 5%}\n", source="b.yaml")
    pending = Judge(budgets, Lookup(None)).pending(
        KEY, one_run(4000), alpha_cell=0.05, client={"saturated": True, "message": "client CPU 98%"})
    assert pending.saturated == "client CPU 98%"
    base = runs_baseline([5000, 5100, 4900, 5050, 4950])
    p2 = assess_cell(KEY, one_run(4000), [QPS_5], baseline=base, level0=None, alpha_cell=0.05)
    p2.saturated = pending.saturated
    v = decide(correct_online(p2, 1), alpha=0.05)
    assert v.status == INCONCLUSIVE
    assert "but the client was saturated (client CPU 98%): not a database regression" in v.message


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
    """14 % below level 0, beyond a 10 % budget over the rounds (p=0.004); the
    accepted runs' drops say whether that is beyond the machine's drift."""
    budget = Check("level0", "qps", 0.10, 20, "budgets.yaml")
    head = "QPS 20872 is 14.0% below level 0 (rtt=0ms) 24278"
    context = "(degradation budget 10%, p=0.004, 5 rounds vs 5"
    steady = runs_baseline([5000, 5010, 4990, 5005], drops=[0.140, 0.143, 0.138, 0.141])
    v = judge(steady, samples("handicap6-current"), checks=(budget,), level0=samples("handicap6-base"))
    assert v.status == REGRESSION, v.message
    assert head in v.message
    assert context in v.message
    assert v.outcomes[0].to_json()["drift"]["runs"] == 4


def test_a_level_zero_drop_is_not_a_regression_before_the_drift_is_known() -> None:
    """Level 0 and the level are blocks measured apart: the rounds agree within
    each block, but the machine drifts between them. Without accepted runs
    showing how much, a drop beyond the budget is inconclusive, never a regression."""
    budget = Check("level0", "qps", 0.10, 20, "budgets.yaml")
    v = judge(None, samples("handicap6-current"), checks=(budget,), level0=samples("handicap6-base"))
    assert v.status == INCONCLUSIVE, v.message
    assert "QPS 20872 is 14.0% below level 0 (rtt=0ms) 24278, beyond the 10% degradation budget over this run's " \
           "rounds" in v.message
    assert "the baseline holds 0 accepted runs of this cell and the gate needs 3 to know by how much: record 3 " \
           "more" in v.message
    # accepted runs whose drops spread widely: still not clearly beyond the budget
    drifting = runs_baseline([5000, 5010, 4990], drops=[-0.10, 0.25, 0.02])
    v = judge(drifting, samples("handicap6-current"), checks=(budget,), level0=samples("handicap6-base"))
    assert v.status == INCONCLUSIVE, v.message
    assert "the drops of the 3 accepted runs of this cell spread by 17.8 points" in v.message
    # a drop within the budget passes whatever the drift
    small = {"qps": [q * 0.99 for q in samples("handicap6-base")["qps"]]}
    v = judge(None, small, checks=(budget,), level0=samples("handicap6-base"))
    assert v.status == PASS, v.message


def test_cell_without_rounds_is_inconclusive() -> None:
    v = judge(baseline("same1-base"), {})
    assert v.status == INCONCLUSIVE
    assert v.message == "replica_read rtt=50ms c=8: no rounds were measured, nothing to judge"


def test_level_zero_missing_is_a_note_not_a_failure() -> None:
    budget = Check("level0", "qps", 0.10, 20, "budgets.yaml")
    v = judge(None, samples("handicap6-current"), checks=(budget,))
    assert v.status == PASS
    assert "level-0 check skipped" in v.to_json()["notes"][0]


def same_code_matrix() -> list[tuple[CellKey, BaselineCell, Samples]]:
    """The 20 same-code batches of the recording as the cells of one session,
    each judged against five other same-code batches taken as accepted runs."""
    out = []
    for i in range(20):
        key = CellKey("rtt", "replica_read", "50ms", 8 + i, "proxy", "probe_read")
        base = baseline(*(f"same{(i + k) % 20}-base" for k in range(1, 6)))
        out.append((key, base, samples(f"same{i}-current")))
    return out


def test_same_code_cells_alone_stay_within_the_false_positive_rate() -> None:
    """Judged alone (alpha 0.05 each), about 1 in 20 same-code cells may be
    flagged by chance; 2 or fewer has probability 0.92 (binomial)."""
    flagged = [judge(base, cur, key=key, cells=1).status for key, base, cur in same_code_matrix()]
    assert flagged.count(REGRESSION) <= 2, flagged


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
    """A 40 % drop against eight noisy accepted runs is still caught among 20 cells."""
    base = baseline(*(f"same{i}-base" for i in range(10, 18)))
    v = judge(base, {"qps": [q * 0.6 for q in samples("same10-current")["qps"]]}, cells=20)
    assert v.status == REGRESSION, v.message


def test_judge_remembers_level_zero_cells_in_run_order() -> None:
    from wanbench.gate.baseline import Lookup
    from wanbench.gate.budget_file import parse_budgets

    budgets = parse_budgets("profile: lab\nrules:\n  - family: rtt\n    level0: {qps: 10%}\n", source="b.yaml")
    j = Judge(budgets, Lookup(None, note="empty store"))
    j.remember(CellKey("rtt", "replica_read", "0ms", 8, "proxy", "probe_read"), samples("handicap6-base"),
               is_level0=True)
    pending = j.pending(KEY, samples("handicap6-current"), alpha_cell=0.05)
    v = decide(correct_online(pending, 1), alpha=0.05)
    assert v.status == INCONCLUSIVE  # an empty store: the drift between blocks is not known yet
    assert "below level 0 (rtt=0ms)" in v.message


def test_a_least_spread_between_runs_keeps_back_to_back_baselines_honest() -> None:
    """Three accepted runs recorded back to back agree within 0.2 %; a run an
    hour later on a drifting machine is 12 % lower. Trusting the 0.2 % calls
    that a regression; with the policy's least spread of 10 % it is
    inconclusive, and a real 40 % drop is still caught."""
    tight = runs_baseline([5000, 5010, 4990])

    def verdict(median: float, spread: float) -> Verdict:
        pending = assess_cell(KEY, one_run(median), [QPS_5], baseline=tight, level0=None, alpha_cell=0.05,
                              min_run_spread=spread)
        return decide(correct_online(pending, 1), alpha=0.05)

    assert verdict(4400, 0.0).status == REGRESSION
    drifted = verdict(4400, 0.10)
    assert drifted.status == INCONCLUSIVE, drifted.message
    assert "too noisy to judge a 5% budget" in drifted.message
    assert verdict(3000, 0.10).status == REGRESSION


def test_a_latency_spread_too_wide_for_exp_is_nothing_detectable_not_a_crash() -> None:
    """Seen on the lab: three accepted runs whose p99 differ by orders of
    magnitude, one round each, the session's alpha over 24 cells: the
    critical log-ratio passed 709 and exp() overflowed inside the gate."""
    from wanbench.gate.assess import assess_runs
    from wanbench.gate.outcome import Reference

    check = Check("baseline", "latency_ms.p99", 0.10, 1, "lab.yaml")
    ref = Reference([1.0, 1e-60, 1e60], "baseline", "")
    o = assess_runs(check, [2.0], ref, alpha_each=1e-6, min_runs=3, min_run_spread=0.1)
    assert o.detectable == float("inf")


def test_counts_within_budget_do_not_pass_a_cell_that_looks_much_slower() -> None:
    """The census decides a cell whose throughput checks this machine cannot
    settle, unless one of them is beyond its budget at p < 0.01 before the
    session's correction: a level-0 handicap made read probes 60 % slower and
    changed no count. That cell stays inconclusive (LOOKS_WORSE), never a pass."""
    from wanbench.gate.assess import Pending
    from wanbench.gate.outcome import PASS, R_ADVISORY, R_CENSUS_WITHIN, R_LOOKS_WORSE, R_RUNS_NOISY, Outcome
    from wanbench.gate.verdict import INCONCLUSIVE, _status_and_reasons

    key = CellKey("rtt", "primary", "0ms", 10, "proxy", "probe_read")
    census = Outcome(Check("census", "work.primary.statements", 0.10, 1, "b.yaml", relative=True), 1.0, 1.0,
                     status=PASS, reason=R_CENSUS_WITHIN)

    def qps(worse: float, p: float) -> Outcome:
        return Outcome(Check("baseline", "qps", 0.05, 2, "b.yaml"), 1000 * (1 - worse), 1000.0, n_current=1,
                       n_reference=5, worse=worse, p_worse=p, p_worse_adj=min(1.0, p * 72), status=INCONCLUSIVE,
                       reason=R_RUNS_NOISY)

    status, reasons = _status_and_reasons(Pending(key, []), [census, qps(0.60, 0.002)], [])
    assert status == INCONCLUSIVE
    assert R_LOOKS_WORSE in reasons
    status, reasons = _status_and_reasons(Pending(key, []), [census, qps(0.12, 0.2)], [])
    assert status == PASS  # within what the machine's noise explains: the census decides
    assert R_ADVISORY in reasons


def test_a_cell_that_looks_worse_names_the_check_that_does() -> None:
    """Seen on the seed-000 shape: a cell held undecided because its p99 looked
    worse read 'it looks slower ...: QPS 8775 is 6.8% above baseline 8213'.
    The sentence names the check that looks worse, in its own terms, and keeps
    the merely undecided ones apart."""
    from wanbench.gate.assess import Pending
    from wanbench.gate.outcome import PASS, R_CENSUS_WITHIN, R_LOOKS_WORSE, R_RUNS_NOISY, Outcome
    from wanbench.gate.render import _render
    from wanbench.gate.verdict import INCONCLUSIVE, _status_and_reasons

    key = CellKey("rtt", "replica_read", "200ms", 500, "proxy", "probe_read")
    census = Outcome(Check("census", "work.primary.statements", 0.10, 1, "b.yaml", relative=True), 1.0, 1.0,
                     status=PASS, reason=R_CENSUS_WITHIN, message="statements within")
    faster = Outcome(Check("baseline", "qps", 0.05, 2, "b.yaml"), 8775.0, 8213.0, n_current=1, n_reference=3,
                     worse=-0.068, p_worse=0.9, p_worse_adj=1.0, status=INCONCLUSIVE, reason=R_RUNS_NOISY,
                     message="QPS 8775 is 6.8% above baseline 8213, too noisy to judge")
    tail = Outcome(Check("baseline", "latency_ms.p99", 0.10, 3, "b.yaml"), 130.0, 100.0, n_current=1,
                   n_reference=3, worse=0.30, p_worse=0.004, p_worse_adj=0.3, status=INCONCLUSIVE,
                   reason=R_RUNS_NOISY, message="p99 130 ms is 30.0% above baseline 100 ms")
    outcomes = [census, faster, tail]
    status, reasons = _status_and_reasons(Pending(key, []), outcomes, [])
    assert R_LOOKS_WORSE in reasons
    text = _render(Pending(key, []), status, reasons, outcomes, [])
    assert "but p99 latency (baseline) looks worse than this machine's noise explains" in text
    head, _, rest = text.partition(" -- also undecided: ")
    assert "p99 130 ms is 30.0% above" in head
    assert "QPS 8775" not in head
    assert "QPS 8775 is 6.8% above" in rest


@pytest.mark.parametrize(
    ("base", "current", "level0", "code", "words"),
    [
        ("one run", "tight", None, "TOO_FEW_BASELINE_RUNS", "record 2 more (--baseline-save"),
        ("noisy runs", "tight", None, "RUNS_TOO_NOISY", "let the gate repeat the run (--gate-max-runs)"),
        (None, "one round", "tight", "TOO_FEW_ROUNDS", "a test needs at least 2 rounds on each side"),
        (None, "two rounds", "two rounds", "TOO_FEW_ROUNDS", "the smallest possible p is"),
        (None, "noisy rounds", "noisy rounds", "ROUNDS_TOO_NOISY", "the smallest drop this cell could detect is"),
    ],
)
def test_the_decision_chooses_an_undecided_checks_reason_and_the_words_follow_it(
        base: str | None, current: str, level0: str | None, code: str, words: str) -> None:
    """``wanbench.gate.verdict`` picks the code (it decides what repeats and
    what stays advisory); ``wanbench.gate.render`` only words it."""
    bases = {"one run": runs_baseline([5000]), "noisy runs": runs_baseline([5000, 6500, 3800, 5900, 4200]), None: None}
    rounds = {"tight": one_run(4800), "one round": {"qps": [4800.0]}, "two rounds": {"qps": [4800.0, 3000.0]},
              "noisy rounds": {"qps": [4800.0, 2500.0, 7000.0, 3900.0, 5600.0, 3000.0]}}
    budget = QPS_5 if base else Check("level0", "qps", 0.10, 20, "budgets.yaml")
    v = judge(bases[base], rounds[current], checks=(budget,), level0=rounds[level0] if level0 else None,
              cells=10**6 if current == "two rounds" else 1)
    assert v.status == INCONCLUSIVE, v.message
    assert v.outcomes[0].reason == code, v.message
    assert code in v.reasons
    assert words in v.message, v.message
