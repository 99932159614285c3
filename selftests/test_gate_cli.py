"""``python -m wanbench compare``: the verdict table and the exit status a
pipeline gates on, from results documents and baseline-store files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX
from wanbench.gate.baseline import BaselineStore, Fingerprint
from wanbench.results import CellResult, Round, WorkloadResult, results_document

ROOT = Path(__file__).resolve().parent.parent
BATCHES = json.loads((ROOT / "selftests" / "data" / "gate" / "probe_read_batches.json").read_text())["batches"]
QPS_ONLY = "profile: lab\nrules:\n  - baseline:\n      qps: 5%\n"


def cell(scenario: str, level: str, tag: str, factor: float = 1.0, *, saturated: bool = False) -> CellResult:
    """A cell from a recorded batch; ``factor`` scales its QPS (a made-up slowdown)."""
    rounds = tuple(Round.from_json({**r, "qps": r["qps"] * factor}) for r in BATCHES[tag])
    client = {"saturated": True, "message": "client CPU 99% of 1 core"} if saturated else {}
    w = WorkloadResult("probe_read", 8, rounds, rounds[0].latency_ms, client=client)
    value = 0 if level == "0ms" else float(level.removesuffix("ms"))
    return CellResult(f"t[{scenario}-{level}]", "rtt", scenario, {"kind": "delay", "value": value, "label": level},
                      8, w, path="proxy")


def doc(path: Path, cells: list[CellResult], **ctx_changes: Any) -> Path:
    ctx = json.loads(json.dumps(CTX))
    for k, v in ctx_changes.items():
        ctx[k] = v
    run = {"id": path.stem, "started": "2026-11-22T17:40:00+00:00", **ctx}
    path.write_text(json.dumps(results_document(run, cells)))
    return path


def base_runs(tmp_path: Path, scenarios: tuple[str, ...] = ("replica_read",), **ctx: Any) -> list[Path]:
    """Five accepted runs (results documents), one recorded batch each."""
    return [doc(tmp_path / f"base{i}.json", [cell(s, "50ms", f"same{i}-base") for s in scenarios], **ctx)
            for i in range(11, 16)]


def compare(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wanbench", "compare", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def budgets(tmp_path: Path) -> Path:
    path = tmp_path / "budgets.yaml"
    path.write_text(QPS_ONLY)
    return path


def test_regression_exits_1_and_prints_the_table(tmp_path: Path, budgets: Path) -> None:
    base = base_runs(tmp_path, ("replica_read", "proxy"))
    cur = doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "same10-base", 0.6),
                                      cell("proxy", "50ms", "same10-base")])
    res = compare(*base, cur, "--budgets", budgets, "--json", tmp_path / "verdicts.json")
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["cell", "verdict", "QPS"]
    assert any(line.split()[-2:] == ["regression", "-41.4%"] for line in lines if line.startswith("replica_read"))
    assert "[regression] replica_read rtt=50ms c=8: QPS 13289 is 41.4% below baseline 22684 (budget 5%, p=0.004, " \
        in res.stdout
    assert "1 run vs 5 accepted, baseline 2026-11-22 mariadb 10.11.19, 5 accepted runs)" in res.stdout
    assert "2 cells: 1 inconclusive, 1 regression" in res.stdout  # the runs differ too much to judge 5 % on proxy
    verdicts = json.loads((tmp_path / "verdicts.json").read_text())
    assert [v["status"] for v in verdicts] == ["regression", "inconclusive"]


def test_one_baseline_run_is_never_enough_for_a_regression(tmp_path: Path, budgets: Path) -> None:
    """The run is the unit: against one accepted run there is no spread between runs to judge with."""
    base = doc(tmp_path / "base.json", [cell("replica_read", "50ms", "same11-base")])
    cur = doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "same10-base", 0.6)])
    res = compare(base, cur, "--budgets", budgets)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the gate needs 3 to know how much separate runs differ: record 2 more" in res.stdout


def test_same_code_exits_0(tmp_path: Path, budgets: Path) -> None:
    res = compare(*base_runs(tmp_path), doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "same16-base")]),
                  "--budgets", budgets)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 cells: 1 " in res.stdout
    assert "regression" not in res.stdout


def test_default_budgets_of_the_profile_are_used(tmp_path: Path) -> None:
    cells = [cell("replica_read", "0ms", "handicap5-base"), cell("replica_read", "50ms", "handicap5-current")]
    base = doc(tmp_path / "base.json", cells)
    res = compare(base, base)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "2 cells:" in res.stdout


def test_other_environment_is_incomparable_and_exits_0(tmp_path: Path, budgets: Path) -> None:
    base = doc(tmp_path / "base.json", [cell("replica_read", "50ms", "handicap6-base")])
    cur = doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "handicap6-current")],
              client={"cpu_model": "Intel Xeon", "cores": 4})
    res = compare(base, cur, "--budgets", budgets)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "[incomparable] replica_read rtt=50ms c=8: incomparable with the stored baseline: client.cores: 2 -> 4" in (
        res.stdout
    )


def test_new_server_version_needs_release(tmp_path: Path, budgets: Path) -> None:
    base = base_runs(tmp_path)
    cur = doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "same10-base", 0.6)],
              versions={"mariadb": "10.11.20"})
    refused = compare(*base, cur, "--budgets", budgets)
    assert refused.returncode == 0
    assert "versions.mariadb: 10.11.19 -> 10.11.20" in refused.stdout
    gated = compare(*base, cur, "--budgets", budgets, "--release", "10.11.20")
    assert gated.returncode == 1, gated.stdout
    assert "[regression]" in gated.stdout


def test_baseline_store_file_as_baseline(tmp_path: Path, budgets: Path) -> None:
    store = BaselineStore(tmp_path / "store")
    fp = Fingerprint.from_context(CTX)
    for tag in ("handicap6-base", "handicap2-base", "handicap3-base"):
        store.save(fp, [cell("replica_read", "50ms", tag)], accepted_at="2026-11-20T10:00:00+00:00")
    cur = doc(tmp_path / "cur.json", [cell("replica_read", "50ms", "handicap6-current", 0.6)])
    res = compare(tmp_path / "store" / fp.filename, cur, "--budgets", budgets)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 run vs 3 accepted, baseline 2026-11-20 mariadb 10.11.19, 3 accepted runs)" in res.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "cannot read"),
        ('{"schema": 1}', "neither a results document"),
        ('{"schema": 7, "results": []}', "results schema 7"),
    ],
)
def test_unusable_input_exits_2(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    res = compare(bad, bad)
    assert res.returncode == 2
    assert "wanbench: error:" in res.stderr
    assert message in res.stderr


def test_bad_budget_file_exits_2_with_line(tmp_path: Path) -> None:
    base = doc(tmp_path / "base.json", [cell("replica_read", "50ms", "handicap6-base")])
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: lab\nrules:\n  - baseline:\n      qps: 5%\n      latency_ms.p42: 5%\n")
    res = compare(base, base, "--budgets", bad)
    assert res.returncode == 2
    assert f"{bad}:5: unknown metric 'latency_ms.p42'" in res.stderr


def test_pytest_and_compare_give_the_same_verdict_on_the_same_data(tmp_path: Path) -> None:
    """The gate as pytest runs it (``Gate.judge_cell``, cell by cell) and
    ``compare`` on the results file decide every cell alike: regression,
    inconclusive, pass, the drop against level 0 and the saturated client."""
    from wanbench.gate.baseline import cell_key
    from wanbench.gate.budget_file import default_budgets_path, load_budgets
    from wanbench.pytest_plugin.gate import Gate

    fp = Fingerprint.from_context(CTX)
    store = BaselineStore(tmp_path / "store")
    for i in range(11, 16):
        store.save(fp, [cell(s, lvl, f"same{i}-base", 0.5 if lvl == "50ms" else 1.0)
                        for s in ("replica_read", "proxy", "primary") for lvl in ("0ms", "50ms")],
                   accepted_at=f"2026-11-2{i - 10}T10:00:00+00:00")
    current = [
        cell("replica_read", "0ms", "same10-base"), cell("replica_read", "50ms", "same10-base", 0.2),
        cell("proxy", "0ms", "same16-base"), cell("proxy", "50ms", "same16-base", 0.5),
        cell("primary", "0ms", "same10-base", 0.6, saturated=True), cell("primary", "50ms", "same10-base", 0.3),
    ]
    gate = Gate(load_budgets(default_budgets_path("lab"), profile="lab"), store, fp, cells_planned=len(current))
    in_pytest = {cell_key(c).id: gate.judge_cell(c).status for c in current}
    out = tmp_path / "verdicts.json"
    res = compare(tmp_path / "store" / fp.filename, doc(tmp_path / "cur.json", current), "--json", out)
    assert res.returncode in (0, 1), res.stderr
    in_compare = {v["cell"]: v["status"] for v in json.loads(out.read_text())}
    assert in_compare == in_pytest
    assert in_pytest["rtt/replica_read/50ms/c=8/proxy/probe_read"] == "regression"  # a drop 60 points deeper
    assert in_pytest["rtt/primary/0ms/c=8/proxy/probe_read"] == "inconclusive"  # 40 % down, but client-bound
    assert len(set(in_pytest.values())) >= 2, in_pytest


def tpcc_cell(*, failed: bool) -> CellResult:
    """A TPC-C-like cell whose consistency checks passed, or one of which failed."""
    rounds = tuple(Round.from_json(r) for r in BATCHES["same10-base"])
    checks = [{"name": "3.3.2.1", "passed": True, "message": "W_YTD = sum(D_YTD)"},
              {"name": "3.3.2.2", "passed": not failed, "message": "D_NEXT_O_ID - 1 = max(O_ID): 2 districts differ"}]
    w = WorkloadResult("tpcc", 8, rounds, rounds[0].latency_ms, extra={"checks": checks})
    return CellResult("t[tpcc-0ms]", "tpcc", "tpcc", {"kind": "none", "value": 0, "label": "0ms"}, 8, w, path="proxy")


def test_integrity_failure_exits_1_in_compare_and_fails_in_pytest_alike(tmp_path: Path, budgets: Path) -> None:
    """Integrity is judged from the recorded data by the one gate: ``compare``
    exits 1 on it whatever the budgets say, with the message pytest fails the
    cell with (same Judge, same verdict)."""
    from wanbench.gate.baseline import RunCell
    from wanbench.gate.budget_file import load_budgets
    from wanbench.gate.verdict import BROKEN, Judge

    base = doc(tmp_path / "base.json", [tpcc_cell(failed=False)])
    good = doc(tmp_path / "good.json", [tpcc_cell(failed=False)])
    bad = doc(tmp_path / "bad.json", [tpcc_cell(failed=True)])
    assert compare(base, good, "--budgets", budgets).returncode == 0
    res = compare(base, bad, "--budgets", budgets, "--json", tmp_path / "v.json")
    assert res.returncode == 1, res.stdout + res.stderr
    verdict = json.loads((tmp_path / "v.json").read_text())[0]
    assert verdict["status"] == BROKEN
    assert verdict["reasons"][0] == "INTEGRITY_TPCC_CONSISTENCY"
    assert "TPC-C consistency violated after the run (1 check(s))" in res.stdout
    # pytest's side: Gate.check asks the same Judge with the cell's own problems
    c = RunCell.of(tpcc_cell(failed=True))
    judge = Judge(load_budgets(budgets, profile="lab"), BaselineStore(tmp_path / "store").lookup(
        Fingerprint("lab", {}, {}, {})))
    v, _ = judge.verdict(c.key, c.samples, cells=1, problems=c.problems)
    assert v.status == BROKEN
    assert v.failing
    assert v.message.split(": ", 1)[1] in res.stdout


def interleaved(scenario: str, tag: str, factor: float, ref_tag: str, ref_factor: float = 1.0) -> CellResult:
    """A faulted cell whose rounds ran beside level-0 rounds (``wanbench.interleave``)."""
    from wanbench.interleave import Interleaved

    fault, ref = cell(scenario, "50ms", tag, factor), cell(scenario, "0ms", ref_tag, ref_factor)
    n = min(len(fault.workload.rounds), len(ref.workload.rounds))
    faulted = WorkloadResult("probe_read", 8, fault.workload.rounds[:n], fault.workload.latency_ms)
    beside = WorkloadResult("probe_read", 8, ref.workload.rounds[:n], ref.workload.latency_ms)
    plan = tuple(x for i in range(n) for x in ((True, False) if i % 2 == 0 else (False, True)))
    fault.workload = Interleaved(faulted, beside, plan).result()
    return fault


def test_interleaved_cells_get_the_same_verdict_in_pytest_and_compare(tmp_path: Path) -> None:
    """Level 0 from the rounds beside the fault, in pytest and in ``compare``
    alike: a level-0 cell of the run on a fast minute (QPS x 1.5) moves
    neither the drop nor the replica-read level-0 check."""
    from wanbench.gate.baseline import cell_key
    from wanbench.gate.budget_file import default_budgets_path, load_budgets
    from wanbench.pytest_plugin.gate import Gate

    fp = Fingerprint.from_context(CTX)
    store = BaselineStore(tmp_path / "store")
    for i in range(11, 16):
        store.save(fp, [cell("replica_read", "0ms", f"same{i}-base"),
                        interleaved("replica_read", f"same{i}-base", 1.0, f"same{i}-base"),
                        cell("primary", "0ms", f"same{i}-base"),
                        interleaved("primary", f"same{i}-base", 0.5, f"same{i}-base")],
                   accepted_at=f"2026-11-2{i - 10}T10:00:00+00:00")
    current = [
        cell("replica_read", "0ms", "same10-base", 1.5), interleaved("replica_read", "same16-base", 1.0, "same16-base"),
        cell("primary", "0ms", "same10-base", 1.5), interleaved("primary", "same16-base", 0.2, "same16-base"),
    ]
    gate = Gate(load_budgets(default_budgets_path("lab"), profile="lab"), store, fp, cells_planned=len(current))
    verdicts = {cell_key(c).id: gate.judge_cell(c) for c in current}
    in_pytest = {k: v.status for k, v in verdicts.items()}
    out = tmp_path / "verdicts.json"
    res = compare(tmp_path / "store" / fp.filename, doc(tmp_path / "cur.json", current), "--json", out)
    assert res.returncode in (0, 1), res.stderr
    in_compare = {v["cell"]: v["status"] for v in json.loads(out.read_text())}
    assert in_compare == in_pytest
    read = verdicts["rtt/replica_read/50ms/c=8/proxy/probe_read"]
    level0 = next(o for o in read.outcomes if o.check.kind == "level0")
    assert "interleaved" in level0.ref_what
    assert abs(level0.worse) < 0.01, "beside its own level 0 a replica read loses nothing"
    assert read.status != "regression"
    assert in_pytest["rtt/primary/50ms/c=8/proxy/probe_read"] == "regression"  # 80 % down beside, not 50 %


def test_an_interleaved_cell_stops_early_only_on_the_verdict_its_end_would_give(tmp_path: Path) -> None:
    """``Gate.settled`` (the early stop): two pairs of five, judged by the
    session's rules with the accepted runs' within-run spread around them."""
    from wanbench.gate.baseline import cell_key
    from wanbench.gate.budget_file import default_budgets_path, load_budgets
    from wanbench.interleave import Interleaved
    from wanbench.pytest_plugin.gate import Gate

    def partial(tag: str, factor: float, pairs: int) -> CellResult:
        full = interleaved("primary", tag, factor, tag)
        rec = full.workload.extra["interleave"]
        beside = WorkloadResult("probe_read", 8, tuple(Round.from_json(r) for r in rec["reference"]["rounds"][:pairs]),
                                full.workload.latency_ms)
        faulted = WorkloadResult("probe_read", 8, full.workload.rounds[:pairs], full.workload.latency_ms)
        full.workload = Interleaved(faulted, beside, (True, False, False, True)[: 2 * pairs]).result()
        return full

    fp = Fingerprint.from_context(CTX)
    budgets = load_budgets(default_budgets_path("lab"), profile="lab")
    empty = Gate(budgets, BaselineStore(tmp_path / "none"), fp, cells_planned=2)
    assert empty.settled(partial("same16-base", 0.2, 2), planned=5) is None, "no accepted runs: all rounds run"
    store = BaselineStore(tmp_path / "store")
    for i in range(11, 16):
        store.save(fp, [cell("primary", "0ms", f"same{i}-base"), interleaved("primary", f"same{i}-base", 0.5,
                                                                            f"same{i}-base")],
                   accepted_at=f"2026-11-2{i - 10}T10:00:00+00:00")
    gate = Gate(budgets, store, fp, cells_planned=2)
    gate.judge_cell(cell("primary", "0ms", "same16-base"))
    slow = partial("same16-base", 0.2, 2)  # 80 % below level 0 where the accepted runs lost 50 %
    done = gate.settled(slow, planned=5)
    assert done is not None
    assert done.to_json()["checks"]["drop qps"] == "regression"
    assert (done.pairs, done.planned) == (2, 5)
    assert gate.settled(slow, planned=2) is None, "no pairs left"
    fresh = Gate(budgets, store, fp, cells_planned=2)
    fresh.judge_cell(cell("primary", "0ms", "same16-base"))
    end = fresh.judge_cell(slow)  # what the cell's end gives on the rounds it ran
    assert end.status == "regression"
    assert {f"{o.check.kind} {o.check.metric}": o.status for o in end.outcomes
            if o.check.kind != "census"} == done.to_json()["checks"]
    for tag in ("same17-base", "same18-base", "same19-base"):
        same = partial(tag, 0.5, 2)  # the accepted runs' own drop: on two pairs it could still turn either way
        assert gate.settled(same, planned=5) is None, cell_key(same).id
