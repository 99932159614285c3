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


# -- pytest's chain and compare on the same stored results --------------------------------------------------------

#: as selftests/test_gate_plugin.py's throw-away project, with ``record`` (the results JSON gets each cell)
CHAIN_TEST = '''
import json, os
import pytest
from wanbench.results import CellResult, Round, WorkloadResult

with open(os.environ["GATE_BATCHES"]) as fh:
    BATCHES = json.load(fh)["batches"]
PLAN = json.loads(os.environ["GATE_PLAN"])


@pytest.mark.parametrize(("scenario", "tags", "level"), PLAN, ids=[f"{p[0]}-{p[2]}" for p in PLAN])
def test_cell(request, record, gate, scenario, tags, level):
    """``tags``: one recorded batch per invocation (the last one repeats); ``tag*0.6`` scales its QPS."""
    tag, _, factor = tags[min(request.config.invocation_number, len(tags) - 1)].partition("*")
    rounds = tuple(Round.from_json({**r, "qps": r["qps"] * float(factor or 1)}) for r in BATCHES[tag])
    w = WorkloadResult("probe_read", 8, rounds, rounds[0].latency_ms)
    fault = {"kind": "delay", "value": float(level.removesuffix("ms")), "label": level}
    gate.check(record(CellResult("t", "rtt", scenario, fault, 8, w, path="proxy")))
'''
#: five accepted runs of unchanged code within 2 % of each other
TIGHT = (1.0, 1.02, 0.98, 1.015, 0.985)
READ, PROXY, PRIMARY, WRITE = (f"rtt/{s}/50ms/c=8/proxy/probe_read" for s in
                               ("replica_read", "proxy", "primary", "replica_write"))
READ0 = "rtt/replica_read/0ms/c=8/proxy/probe_read"
#: the accepted runs: (scenario, level, factor) of each cell of each run
ACCEPTED = [[("replica_read", "50ms", f), ("proxy", "50ms", f), *([("primary", "50ms", f)] if i == 0 else [])]
            for i, f in enumerate(TIGHT)]
#: level 0 within 0.5 %, the faulted level's drop spread by a few points
BESIDE = [[("replica_read", "0ms", f), ("replica_read", "50ms", 0.5 * g)]
          for f, g in zip((1.0, 1.005, 0.995, 1.003, 0.997), (1.0, 0.97, 1.03, 0.98, 1.02), strict=True)]
CHAIN_PLANS: dict[str, tuple[list[list[Any]], list[list[tuple[str, str, float]]]]] = {
    # unchanged code: one run cannot tell 0 % from the 5 % budget at alpha 0.05 / 3 looks, two runs can
    "decided by a repeat": ([["replica_read", ["same11-base"], "50ms"]], ACCEPTED),
    # the same, with a cell of one accepted run (repeating cannot help) and a cell with none
    "undecided": ([["replica_read", ["same11-base"], "50ms"], ["primary", ["same11-base"], "50ms"],
                   ["replica_write", ["same11-base"], "50ms"]], ACCEPTED),
    # ... and a cell 15 % down
    "mixed": ([["replica_read", ["same11-base"], "50ms"], ["primary", ["same11-base"], "50ms"],
               ["replica_write", ["same11-base"], "50ms"], ["proxy", ["same11-base*0.85"], "50ms"]], ACCEPTED),
    # a drop check: each repeat measures the level-0 cell beside the undecided one again
    "beside its level 0": ([["replica_read", ["same11-base"], "0ms"], ["replica_read", ["same11-base*0.5"], "50ms"]],
                           BESIDE),
}
DROP = QPS_ONLY + "  - drop:\n      qps: 5 points\n"


def chain_store(project: Path, accepted: list[list[tuple[str, str, float]]]) -> Path:
    fp = Fingerprint.from_context(CTX)
    store = BaselineStore(project / "store")
    for i, cells in enumerate(accepted):
        store.save(fp, [cell(s, level, "same11-base", f) for s, level, f in cells],
                   accepted_at=f"2026-11-2{i}T10:00:00+00:00")
    return project / "store" / fp.filename


def verdicts_of(path: Path) -> dict[str, dict[str, Any]]:
    return {c["verdict"]["cell"]: c["verdict"] for c in json.loads(path.read_text())["results"]}


@pytest.mark.parametrize(
    ("plan", "max_runs", "strict", "exit_status", "read"),
    [
        ("decided by a repeat", 1, True, 0, (1, "pass")),  # alpha 0.05 over one look decides at once
        ("decided by a repeat", 3, True, 0, (2, "pass")),  # strict judges a cell's last verdict
        ("undecided", 1, False, 0, (1, "inconclusive")),
        ("undecided", 1, True, 1, (1, "inconclusive")),
        ("undecided", 3, True, 1, (2, "pass")),  # primary's one accepted run: no repeat decides it
        ("mixed", 1, True, 1, (1, "inconclusive")),
        ("mixed", 3, False, 1, (2, "pass")),
        ("beside its level 0", 3, False, 0, (3, "inconclusive")),
        ("beside its level 0", 3, True, 1, (3, "inconclusive")),
    ],
)
def test_pytest_and_compare_agree_with_and_without_gate_max_runs_and_gate_strict(
        tmp_path: Path, plan: str, max_runs: int, strict: bool, exit_status: int, read: tuple[int, str]) -> None:
    """A real pytest run (with ``--gate-max-runs 3``, a chain of separate
    invocations) and ``compare`` on what it stored (the baseline file,
    ``r.json``, ``--rerun r.run2.json``, ...) with the same options give
    each cell the same last verdict (run, status, reasons, message) and
    exit alike."""
    from selftests.test_gate_plugin import CONFTEST
    from selftests.test_gate_plugin import run as run_pytest

    cells, accepted = CHAIN_PLANS[plan]
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_cells.py").write_text(CHAIN_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\nfilterwarnings = error\n")
    (tmp_path / "budgets.yaml").write_text(DROP if plan == "beside its level 0" else QPS_ONLY)
    store = chain_store(tmp_path, accepted)
    options = [*(["--gate-max-runs", str(max_runs)] if max_runs > 1 else []), *(["--gate-strict"] if strict else [])]
    ran = run_pytest(tmp_path, cells, "--budgets", "budgets.yaml", "--results-json", "r.json", *options)
    assert ran.returncode == exit_status, ran.stdout + ran.stderr
    runs = [tmp_path / "r.json", *sorted(tmp_path.glob("r.run*.json"))]
    assert len(runs) == int((tmp_path / "invocations").read_text())
    in_pytest = {cid: {**v, "run": i} for i, path in enumerate(runs, 1) for cid, v in verdicts_of(path).items()}

    out = tmp_path / "verdicts.json"
    reruns = [a for path in runs[1:] for a in ("--rerun", path)]
    res = compare(store, runs[0], *reruns, "--budgets", tmp_path / "budgets.yaml", "--json", out, *options)
    assert res.returncode == exit_status, res.stdout + res.stderr
    assert res.stderr == ""
    in_compare = {v["cell"]: v for v in json.loads(out.read_text())}
    assert sorted(in_compare) == sorted(in_pytest)
    for cid, v in in_pytest.items():
        got = in_compare[cid]
        assert (got["run"], got["status"], got["reasons"], got["message"]) == (
            v["run"], v["status"], v["reasons"], v["message"]), cid

    assert (in_pytest[READ]["run"], in_pytest[READ]["status"]) == read
    if max_runs > 1:
        first = verdicts_of(runs[0])[READ]
        assert (first["status"], first["reasons"]) == ("inconclusive", ["RUNS_TOO_NOISY"])
        assert f"[run {read[0]} of at most 3]" in in_pytest[READ]["message"]
    if plan in ("undecided", "mixed"):
        assert in_pytest[PRIMARY]["reasons"] == ["TOO_FEW_BASELINE_RUNS"]
        assert in_pytest[WRITE]["status"] == "no-baseline"
    if plan == "mixed":
        assert in_pytest[PROXY]["status"] == "regression"
    if plan == "beside its level 0":  # decided in run 1, measured again beside the undecided cell, judged afresh
        assert verdicts_of(runs[0])[READ0]["status"] == "pass"
        assert all(READ0 in verdicts_of(path) for path in runs)
        assert in_pytest[READ0]["run"] == 3
        assert "drop" in {c["kind"] for c in in_pytest[READ]["checks"]}


def test_compare_judged_run_1_of_a_chain_as_a_lone_run(tmp_path: Path) -> None:
    """Why compare needs ``--gate-max-runs``: the first run of a chain spends
    a third of alpha, and leaves a check that a repeat could decide
    undecided; judged as a lone run, the same file passes."""
    store = chain_store(tmp_path, ACCEPTED)
    (tmp_path / "budgets.yaml").write_text(QPS_ONLY)
    current = doc(tmp_path / "r.json", [cell("replica_read", "50ms", "same11-base")])
    alone = compare(store, current, "--budgets", tmp_path / "budgets.yaml")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "[pass] replica_read rtt=50ms c=8" in alone.stdout
    chained = compare(store, current, "--budgets", tmp_path / "budgets.yaml", "--gate-max-runs", "3", "--gate-strict")
    assert chained.returncode == 0, chained.stdout + chained.stderr  # a later run measures it again
    assert "[inconclusive] replica_read rtt=50ms c=8" in chained.stdout
    second = compare(store, current, "--budgets", tmp_path / "budgets.yaml", "--gate-max-runs", "3", "--gate-strict",
                     "--rerun", current)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "[pass] replica_read rtt=50ms c=8" in second.stdout
    assert "[run 2 of at most 3]" in second.stdout
    # a third run of a cell the second decided: not this chain's (a stale results.run3.json), and compare says so
    stale = compare(store, current, "--budgets", tmp_path / "budgets.yaml", "--gate-max-runs", "3",
                    "--rerun", current, "--rerun", current)
    assert "r.json measures 1 cell(s) run 2 did not leave undecided (rtt/replica_read/50ms/c=8/proxy/probe_read): " \
           "is it run 3 of this chain?" in stale.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--rerun", "r.json"], "--rerun: the later runs of a chain need --gate-max-runs N"),
     (["--gate-max-runs", "2", "--rerun", "r.json", "--rerun", "r.json"], "allows at most 1")],
)
def test_compare_refuses_more_reruns_than_the_chain_has(tmp_path: Path, args: list[str], message: str) -> None:
    store = chain_store(tmp_path, ACCEPTED)
    current = doc(tmp_path / "r.json", [cell("replica_read", "50ms", "same11-base")])
    res = compare(store, current, *[str(tmp_path / a) if a == "r.json" else a for a in args])
    assert res.returncode == 2
    assert message in res.stderr


def test_an_ab_run_gets_the_same_verdicts_in_pytest_and_in_compare_alone(tmp_path: Path) -> None:
    """An A/B run's document carries its baseline side: ``compare RESULTS``
    judges it alone, pair by pair and count by count, as pytest's gate did
    (a slower candidate, an extra round trip, the A/A guard, a pass)."""
    from selftests.test_ab import ab_cell, rounds
    from wanbench.gate.baseline import cell_key
    from wanbench.gate.budget_file import default_budgets_path, load_budgets
    from wanbench.pytest_plugin.gate import Gate

    counts = {"round_trips": 1.0, "bytes_per_op.primary": 200.0}
    current = [
        ab_cell(rounds("same7-base", 0.5), rounds("same7-current"), level="0ms", census=counts, base_census=counts),
        ab_cell(rounds("same8-base"), rounds("same8-current"), level="50ms",
                census={**counts, "round_trips": 2.0}, base_census=counts),
        ab_cell(rounds("same9-base", 0.5), rounds("same9-current"), level="100ms", aa=True, census=counts,
                base_census=counts),
    ]
    for c in current[1:]:
        c.scenario = "proxy" if c.level["label"] == "50ms" else "replica_read"
    fp = Fingerprint.from_context({**CTX, "params": {**CTX["params"], "ab": True}})
    gate = Gate(load_budgets(default_budgets_path("lab"), profile="lab"), BaselineStore(tmp_path / "store"), fp,
                cells_planned=len(current), ab=True)
    in_pytest = {cell_key(c).id: gate.judge_cell(c).status for c in current}
    out = tmp_path / "verdicts.json"
    res = compare(doc(tmp_path / "ab.json", current, params={**CTX["params"], "ab": True}), "--json", out)
    assert res.returncode == 1, res.stdout + res.stderr
    in_compare = {v["cell"]: v["status"] for v in json.loads(out.read_text())}
    assert in_compare == in_pytest
    assert in_pytest["rtt/primary/0ms/c=8/proxy/probe_read"] == "regression"
    assert in_pytest["rtt/proxy/50ms/c=8/proxy/probe_read"] == "regression"  # one more round trip, counted
    assert in_pytest["rtt/replica_read/100ms/c=8/proxy/probe_read"] != "regression"  # identical sides: guarded
    assert not (tmp_path / "store").exists(), "an A/B run reads and writes no stored baseline"
    # an A/B document is judged alone: BASELINE files beside it are refused
    refused = compare(tmp_path / "ab.json", tmp_path / "ab.json")
    assert refused.returncode == 2
    assert "is an A/B run (--ab): it is judged against its own baseline side" in refused.stderr
    lone = compare(base_runs(tmp_path)[0])
    assert lone.returncode == 2
    assert "give the accepted runs to judge it against first" in lone.stderr
