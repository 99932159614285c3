"""An A/B run's level verdicts (``wanbench.gate.ab_levels``): each fault
level's cells pooled, so a candidate about 10 % slower in every cell, which
no cell's few pairs can show, fails the run; identical sides do not; pytest,
``compare`` and Allure give the level the same status and reasons."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from selftests.test_ab import ab_cell, rounds
from selftests.test_gate_cli import CTX, compare, doc
from wanbench.gate import ab_levels
from wanbench.gate.ab_checks import pair_logs, pair_noise
from wanbench.gate.baseline import BaselineStore, Fingerprint, Lookup, RunCell
from wanbench.gate.budget_file import default_budgets_path, load_budgets
from wanbench.gate.budgets import CellKey
from wanbench.gate.verdict import Judge
from wanbench.results import CellResult

#: recorded batches whose cells stay undecided on their own at a 10 % handicap
QUIET = (0, 1, 2, 5, 6, 7, 8, 9)


def level_cells(factor: float, *, aa: bool = False, level: str = "0ms", tags: tuple[int, ...] = QUIET
                ) -> list[CellResult]:
    """One A/B cell per recorded batch, all of one level (each its own concurrency);
    the candidate's QPS ``factor`` times the recorded rounds'."""
    cells = []
    for n, i in enumerate(tags):
        c = ab_cell(rounds(f"same{i}-current", factor), rounds(f"same{i}-base"), aa=aa, level=level)
        c.concurrency = 10 * (n + 1)
        cells.append(c)
    return cells


def judged(cells: list[CellResult]) -> tuple[list[str], list]:
    """Each cell's status and the level verdicts, as one session judges them (cells + levels compared)."""
    run = [RunCell.of(c) for c in cells]
    m = len(run) + ab_levels.planned_levels((c.key.family, c.key.level) for c in run)
    judge = Judge(load_budgets(default_budgets_path("lab"), profile="lab"), Lookup(None, note="A/B"))
    statuses = [judge.verdict(c.key, c.samples, cells=m, census=c.census, ab=c.ab)[0].status for c in run]
    return statuses, judge.level_verdicts(run, comparisons=m)


def test_a_candidate_10pc_slower_in_every_cell_fails_its_level_though_no_cell_can_tell() -> None:
    statuses, (level,) = judged(level_cells(0.9))
    assert "regression" not in statuses, statuses  # 5 pairs a cell: each too noisy for a 5 % budget
    assert level.status == "regression"
    assert level.reasons == ("BEYOND_BUDGET",)
    assert level.key == CellKey("rtt", "*", "0ms", 0)
    assert level.key.pooled
    assert level.message.startswith("rtt=0ms, its cells pooled: QPS of its 8 cells is 9.5% below the baseline side's")
    assert "40 pairs in 8 cells" in level.message
    (o,) = level.outcomes
    assert o.cells == 8
    assert o.n_current == 40
    assert o.to_json()["cells"] == 8
    assert o.change == pytest.approx(-0.0952, abs=0.001)
    assert level.comparisons == 9  # the 8 cells and the level share the session's alpha


def test_identical_sides_leave_the_level_undecided_or_passed_never_regressed() -> None:
    _statuses, (level,) = judged(level_cells(1.0))
    assert level.status == "inconclusive"
    assert level.reasons == ("ROUNDS_TOO_NOISY",)
    assert "could detect a drop of 6.5%" in level.message


def test_a_level_fails_the_run_by_a_regression_alone_even_under_gate_strict() -> None:
    from wanbench.gate.verdict import ends_as

    _statuses, (slower,) = judged(level_cells(0.9))
    _statuses, (same,) = judged(level_cells(1.0))
    assert [ends_as(slower), ends_as(slower, strict=True)] == ["failed", "failed"]
    assert [ends_as(same), ends_as(same, strict=True)] == ["skipped", "skipped"]  # the cells are strict's business


def test_the_aa_guard_holds_a_level_as_it_holds_a_cell() -> None:
    _statuses, (level,) = judged(level_cells(0.9, aa=True))
    assert level.status == "inconclusive"
    assert level.reasons == ("MACHINE_TOO_NOISY_NOW",)
    assert "the two sides are identical" in level.message


def test_the_pooled_statistic_by_hand() -> None:
    """D is the mean of the cells' mean log ratios; its variance the sum of
    each cell's s^2 / n over k^2; its df Welch-Satterthwaite's."""
    cells = level_cells(0.9)[:3]
    sides = [(RunCell.of(c).samples["qps"], RunCell.of(c).ab.samples["qps"]) for c in cells]  # type: ignore[union-attr]
    mean, se, df, k, pairs = ab_levels.pooled_stats(sides)
    means = [statistics.fmean(pair_logs(a, b)) for a, b in sides]
    noise = [pair_noise(a, b) for a, b in sides]
    v = [sd * sd / len(pair_logs(a, b)) for (sd, _df), (a, b) in zip(noise, sides, strict=True)]
    assert (k, pairs) == (3, 15)
    assert mean == pytest.approx(statistics.fmean(means))
    assert se == pytest.approx(math.sqrt(sum(v)) / 3)
    assert df == pytest.approx(sum(v) ** 2 / sum(vi * vi / d for vi, (_sd, d) in zip(v, noise, strict=True)))
    # a cell with one pair has no noise estimate: it is left out
    one = ab_cell(rounds("same3-current", 0.9, n=1), rounds("same3-base", n=1))
    assert ab_levels.pooled_stats([*sides, (RunCell.of(one).samples["qps"], RunCell.of(one).ab.samples["qps"])]  # type: ignore[union-attr]
                                  )[3:] == (3, 15)
    assert ab_levels.pooled_stats([])[3:] == (0, 0)


def test_which_levels_have_a_verdict() -> None:
    assert ab_levels.planned_levels([("rtt", "0ms"), ("rtt", "0ms"), ("rtt", "50ms"), ("bandwidth", "0mbit")]) == 1
    statuses, levels = judged([*level_cells(0.9, tags=(0, 1)), *level_cells(0.9, level="50ms", tags=(2,))])
    assert [v.key.level for v in levels] == ["0ms"]  # 50ms has one cell: its cell's verdict is the level's
    assert len(statuses) == 3


def test_pytest_compare_and_allure_give_a_level_the_same_status_and_reasons(tmp_path: Path) -> None:
    from wanbench.pytest_plugin.gate import Gate
    from wanbench.report.allure_out import write_level

    cells = [*level_cells(0.9), *level_cells(1.0, level="50ms", tags=(10, 11, 12))]
    fp = Fingerprint.from_context({**CTX, "params": {**CTX["params"], "ab": True}})
    gate = Gate(load_budgets(default_budgets_path("lab"), profile="lab"), BaselineStore(tmp_path / "store"), fp,
                cells_planned=len(cells) + 2, ab=True)
    in_pytest = {c.key.id: gate.judge_cell(cell).status for cell in cells if (c := RunCell.of(cell))}
    levels = gate.judge_levels()
    assert "regression" not in in_pytest.values()
    assert [(v.key.id, v.status, gate.level_ends(v)) for v in levels] == [
        ("rtt/*/0ms/c=0//", "regression", "failed"), ("rtt/*/50ms/c=0//", "inconclusive", "skipped")]
    out = tmp_path / "verdicts.json"
    res = compare(doc(tmp_path / "ab.json", cells, params={**CTX["params"], "ab": True}), "--json", out)
    assert res.returncode == 1, res.stdout + res.stderr  # no cell failed: the level fails the run
    assert "2 levels (A/B, each level's cells pooled): 1 inconclusive, 1 regression" in res.stdout
    assert "[regression] rtt=0ms, its cells pooled: QPS of its 8 cells is 9.5% below" in res.stdout
    in_compare = {v["cell"]: (v["status"], v["reasons"], v["ends"]) for v in json.loads(out.read_text())}
    assert {k: s for k, (s, _r, _e) in in_compare.items() if k in in_pytest} == in_pytest
    for v in levels:
        assert in_compare[v.key.id] == (v.status, list(v.reasons), gate.level_ends(v))
        write_level(tmp_path / "allure", {**v.to_json(), "ends": gate.level_ends(v)})
    results = (tmp_path / "allure").glob("*-result.json")
    written = {r["fullName"]: r for r in (json.loads(p.read_text()) for p in results)}
    assert set(written) == {"wanbench.ab_levels#rtt-0ms", "wanbench.ab_levels#rtt-50ms"}
    for v in levels:
        r = written[f"wanbench.ab_levels#rtt-{v.key.level}"]
        assert r["status"] == gate.level_ends(v)
        labels = {(la["name"], la["value"]) for la in r["labels"]}
        assert ("wanbench_verdict", v.status) in labels
        assert {("wanbench_reason", code) for code in v.reasons} <= labels
        assert r["statusDetails"]["message"].endswith(v.tag)
        assert r["attachments"][0]["name"] == "level verdict"
