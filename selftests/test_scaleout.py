"""Several clusters under pytest-xdist, without servers: the plan (option
values, lab dirs and ports, CPU sets, equivalence), the checks of -n and
--dist, the grouping of cells, the scheduler's deal and its handling of a
dead worker, the cell's round trip to the controller, and the usage errors
of real pytest invocations."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from wanbench.errors import ConfigError
from wanbench.pytest_plugin.scaleout import ClusterScheduling, Controller, group_of, split_crashed
from wanbench.results import CellResult, Latency, Round, SeriesPoint, WorkloadResult
from wanbench.scaleout import LAB_PORT_STRIDE, check_workers, lab_dir_of, plan_clusters, split_cpus

ROOT = Path(__file__).resolve().parent.parent


# -- the plan -------------------------------------------------------------------------------


def test_labs_get_their_own_dirs_ports_and_cpus() -> None:
    plan = plan_clusters(None, 2, lab_dir="/r/.run/lab", port_base=25000, cpus={0, 1})
    assert plan.kind == "lab"
    assert plan.several
    assert plan.equivalent
    one, two = plan.members
    assert (one.name, one.lab_dir, one.port_base, one.cpus) == ("lab1", "/r/.run/lab", 25000, (0,))
    assert (two.name, two.lab_dir, two.port_base, two.cpus) == ("lab2", "/r/.run/lab-2", 25000 + LAB_PORT_STRIDE, (1,))
    assert LAB_PORT_STRIDE >= 14  # a lab's servers, links and Prometheus (base..base+13) never overlap
    assert two.to_json() == {"name": "lab2", "index": 1, "port_base": 25020, "cpus": [1]}


def test_one_lab_or_none_is_todays_run() -> None:
    for labs in (None, 1):
        plan = plan_clusters(None, labs, lab_dir="/r/.run/lab", port_base=23300, cpus={0, 1})
        assert not plan.several
        assert plan.members[0].lab_dir == "/r/.run/lab"
        assert plan.members[0].port_base == 23300
        assert plan.members[0].cpus == ()  # one lab: nothing is pinned, as before
    assert not plan_clusters(["a.yaml"], None, lab_dir="x", port_base=1).several


@pytest.mark.parametrize(("cpus", "n", "want"), [
    ({0, 1}, 2, [(0,), (1,)]),
    ({0}, 2, [(), ()]),  # fewer CPUs than clusters: shared
    ({0, 1}, 3, [(), (), ()]),
    ({0, 1, 2, 3, 4}, 2, [(0, 1), (2, 3)]),  # equal sets; CPU 4 unused
    ({2, 3, 6, 7}, 2, [(2, 3), (6, 7)]),  # what this process may use, not CPU numbers 0..n
])
def test_cpu_sets_are_disjoint_and_equal(cpus: set[int], n: int, want: list[tuple[int, ...]]) -> None:
    assert split_cpus(cpus, n) == want


def test_lab_dirs() -> None:
    assert lab_dir_of("/a/lab", 0) == "/a/lab"
    assert lab_dir_of("/a/lab", 2) == "/a/lab-3"


def test_cluster_files(tmp_path: Path) -> None:
    a, b = str(tmp_path / "east.yaml"), str(tmp_path / "west.yaml")
    plan = plan_clusters([a, b], None, lab_dir="x", port_base=1, cpus={0, 1}, cluster_names=["east", "west"])
    assert plan.kind == "file"
    assert not plan.equivalent
    assert [(m.name, m.file, m.cpus) for m in plan.members] == [("east", a, (0,)), ("west", b, (1,))]
    assert plan_clusters([a, b], None, lab_dir="x", port_base=1, equivalent=True).equivalent
    assert "not equivalent" in plan.describe()


@pytest.mark.parametrize(("files", "labs", "equivalent", "names", "message"), [
    (["a.yaml"], 2, False, None, "give one or the other"),
    (None, 0, False, None, "at least one lab"),
    (["a.yaml", "./a.yaml"], None, False, None, "given twice"),
    (["a.yaml", "b.yaml"], None, False, ["demo", "demo"], "describe the cluster demo"),
    (["a.yaml"], None, True, None, "needs two or more --cluster files"),
    (None, 2, True, None, "equivalent by construction"),
])
def test_plans_that_cannot_work(files: list[str] | None, labs: int | None, equivalent: bool,
                                names: list[str] | None, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_clusters(files, labs, lab_dir="x", port_base=1, equivalent=equivalent, cluster_names=names)


def test_workers_must_match_the_clusters() -> None:
    two = plan_clusters(None, 2, lab_dir="x", port_base=1)
    check_workers(two, 2, "load")  # xdist's default --dist with -n
    check_workers(two, 2, "loadgroup")
    with pytest.raises(ConfigError, match="need -n 2"):
        check_workers(two, None, "no")
    with pytest.raises(ConfigError, match="-n 3 with 2 clusters"):
        check_workers(two, 3, "load")
    with pytest.raises(ConfigError, match="--dist each"):
        check_workers(two, 2, "each")
    check_workers(plan_clusters(None, 1, lab_dir="x", port_base=1), None, "no")  # one cluster: not our business


# -- grouping -------------------------------------------------------------------------------


#: a config with the built-in families only (no plugin adds one through pytest_wanbench_families)
_CONFIG = SimpleNamespace(stash={}, hook=SimpleNamespace(pytest_wanbench_families=lambda: []))


def _item(nodeid: str, marker: str | None, **params: Any) -> Any:
    return SimpleNamespace(nodeid=nodeid, callspec=SimpleNamespace(params=params), config=_CONFIG,
                           get_closest_marker=lambda name: object() if name == marker else None)


def test_a_scenarios_levels_and_concurrencies_form_one_group() -> None:
    sc = SimpleNamespace(name="replica_write")
    ids = [f"t.py::test_rtt[replica_write-{lv}-c{c}]" for lv in ("0ms", "20ms") for c in (1, 4)]
    groups = {group_of(_item(i, "rtt", fault=(sc, object()), concurrency=1)) for i in ids}
    assert groups == {"rtt/replica_write"}
    other = group_of(_item("t.py::test_rtt[primary-0ms-c1]", "rtt", fault=(SimpleNamespace(name="primary"), 0)))
    assert other == "rtt/primary"
    assert group_of(_item("t.py::test_bandwidth[replica_write-0ms-c1]", "bandwidth",
                          fault=(sc, 0))) == "bandwidth/replica_write"  # families never mix
    oltp = SimpleNamespace(workload="oltp_read_only")
    assert group_of(_item("t.py::test_oltp[a]", "sysbench", oltp_cell=oltp)) == "sysbench/oltp_read_only"
    assert group_of(_item("t.py::test_tpcc[w1-t4]", "tpcc", tpcc_cell=object())) == "t.py::test_tpcc[w1-t4]"
    plain = SimpleNamespace(nodeid="t.py::test_x", config=_CONFIG, get_closest_marker=lambda name: None)
    assert group_of(plain) == "t.py::test_x"


# -- the scheduler ----------------------------------------------------------------------------


class FakeNode:
    def __init__(self, wid: str) -> None:
        self.gateway = SimpleNamespace(id=wid)
        self.shutting_down = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(tmp_path: Path, groups: dict[str, str], *, equivalent: bool) -> tuple[ClusterScheduling, list[Any]]:
    (tmp_path / "groups-gw0.json").write_text(json.dumps(groups))
    reports: list[Any] = []
    config = SimpleNamespace(
        getvalue=lambda name: {"tx": ["2*popen"], "numprocesses": 2}.get(name),
        option=SimpleNamespace(loadscopereorder=False),
        hook=SimpleNamespace(pytest_runtest_logreport=lambda report: reports.append(report)),
    )
    kind = "lab" if equivalent else "file"
    files = None if equivalent else ["a.yaml", "b.yaml"]
    plan = plan_clusters(files, 2 if equivalent else None, lab_dir="x", port_base=1)
    assert plan.kind == kind
    controller = Controller(plan, str(tmp_path))
    sched = ClusterScheduling(config, None, controller)  # type: ignore[arg-type]
    controller.sched = sched
    return sched, reports


def _deal(sched: ClusterScheduling, collection: list[str]) -> tuple[FakeNode, FakeNode]:
    nodes = FakeNode("gw0"), FakeNode("gw1")
    for i, node in enumerate(nodes):
        sched.controller.owner[node.gateway.id] = i
        sched.add_node(node)
        sched.add_node_collection(node, collection)
    sched.schedule()
    return nodes


COLLECTION = [f"t.py::test_rtt[{sc}-{lv}-c{c}]" for sc in ("a", "b", "c") for lv in ("0ms", "20ms") for c in (1, 4)]
GROUPS = {nodeid: "rtt/" + nodeid.split("[")[1].split("-")[0] for nodeid in COLLECTION}


def test_clusters_that_are_not_equivalent_get_the_same_deal_every_run(tmp_path: Path) -> None:
    sched, _ = _scheduler(tmp_path, GROUPS, equivalent=False)
    gw0, gw1 = _deal(sched, COLLECTION)
    # whole scenarios, dealt in collection order: a -> cluster 1, b -> cluster 2, c -> cluster 1
    assert gw0.sent == [list(range(0, 4))]
    assert gw1.sent == [list(range(4, 8))]
    assert gw1.shutting_down  # nothing else it may run: it ends what it has, without waiting for a next test
    sched.mark_test_complete(gw1, 4)
    sched.mark_test_complete(gw1, 5)
    assert gw1.sent == [list(range(4, 8))]  # c is cluster 1's even though cluster 2 is free first
    sched.mark_test_complete(gw0, 0)
    sched.mark_test_complete(gw0, 1)
    assert gw0.sent == [list(range(0, 4)), list(range(8, 12))]


def test_equivalent_clusters_take_the_next_scenario(tmp_path: Path) -> None:
    sched, _ = _scheduler(tmp_path, GROUPS, equivalent=True)
    gw0, gw1 = _deal(sched, COLLECTION)
    assert (gw0.sent, gw1.sent) == ([list(range(0, 4))], [list(range(4, 8))])
    sched.mark_test_complete(gw1, 4)
    sched.mark_test_complete(gw1, 5)
    assert gw1.sent == [list(range(4, 8)), list(range(8, 12))]  # the first free worker takes c
    assert not sched.workqueue


def test_a_dead_workers_scenario_is_broken_and_its_unstarted_scenarios_go_back(tmp_path: Path) -> None:
    sched, reports = _scheduler(tmp_path, GROUPS, equivalent=True)
    gw0, gw1 = _deal(sched, COLLECTION)
    sched.mark_test_complete(gw0, 0)
    sched.mark_test_complete(gw0, 1)  # a at level 0 measured; gw0 takes c next
    assert gw0.sent[-1] == list(range(8, 12))
    sched.controller.owner.pop("gw0")  # what pytest_testnodedown does first
    sched.controller.crashed.append(("gw0", 0, "kill -9"))
    crash = sched.remove_node(gw0)  # it died in a, 20ms, c1
    assert crash == COLLECTION[2]  # xdist reports this one failed
    assert [r.nodeid for r in reports] == [COLLECTION[3]]  # the rest of scenario a: broken, never rerun elsewhere
    assert all(r.failed and r.when == "setup" and "Worker gw0 (cluster lab1) died" in r.longrepr for r in reports)
    assert list(sched.workqueue) == ["rtt/c"]  # never started: back in the queue for whoever comes
    assert [b["test_id"] for b in sched.controller.broken] == ["test_rtt[a-20ms-c1]", "test_rtt[a-20ms-c4]"]


def test_split_crashed() -> None:
    workload = {"x": {"1": True, "2": False, "3": False}, "y": {"4": False}}
    assert split_crashed(workload) == ("2", ["3"], {"y": {"4": False}})
    assert workload["x"] == {"1": True, "2": True, "3": True}  # never sent again


# -- the cell's way to the controller ---------------------------------------------------------


def test_a_cell_survives_its_trip_to_the_controller() -> None:
    lat = Latency(avg=2.0, min=1.0, p50=2.0, p90=3.0, p95=3.5, p99=4.0, p999=math.nan, max=9.0)
    rounds = (Round(1.5, 200, 133.3, latency_ms=lat, errors=1), Round(0.0, 0, math.inf))
    w = WorkloadResult("write_probe", 4, rounds, lat, errors=1, errors_by_code={"1062": 1}, reconnects=2,
                       series=(SeriesPoint(1.0, 130.0, 3.0, 0.0),), reports=("raw",), client={"saturated": False},
                       extra={"tpmc": 5.0})
    cell = CellResult("test_rtt[a-0ms-c4]", "rtt", "a", {"kind": "delay", "value": 0, "label": "0ms"}, 4, w,
                      fault={"mechanism": "none"}, path="proxy", verdict={"status": "pass", "message": "ok"},
                      started="2026-11-23T10:00:00+00:00", finished="2026-11-23T10:00:02+00:00",
                      extra={"fault_active_s": 1.0}, cluster={"name": "lab2", "index": 1, "cpus": [1]})
    doc = cell.to_json()
    assert doc["cluster"]["name"] == "lab2"
    assert CellResult.from_json(json.loads(json.dumps(doc))).to_json() == doc
    cell.cluster = None
    assert "cluster" not in cell.to_json()  # a one-cluster run's record is unchanged


# -- real invocations: refused before anything starts ------------------------------------------


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize(("args", "message"), [
    (["--labs", "2", "tests/rtt"], "2 clusters (--labs) need -n 2"),
    (["--labs", "2", "-n", "3", "tests/rtt"], "-n 3 with 2 clusters (--labs): give -n 2"),
    (["--labs", "2", "-n", "2", "--dist", "loadfile", "tests/rtt"], "--dist loadfile"),
    (["--labs", "0", "tests/rtt"], "--labs: '0'"),
    (["--labs", "2", "--cluster-equivalent", "-n", "2", "tests/rtt"], "equivalent by construction"),
])
def test_usage_errors(args: list[str], message: str) -> None:
    proc = _pytest(*args)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert message in proc.stderr, proc.stderr


@pytest.mark.slow
def test_two_cluster_files_without_n_are_refused() -> None:
    display = ROOT / "selftests" / "data" / "tiup_display_seed000.txt"
    topology = ROOT / "selftests" / "data" / "tiup_topology_seed000.yaml"
    if not topology.exists():
        pytest.skip("no second cluster description in selftests/data")
    proc = _pytest("--cluster", str(display), "--cluster", str(topology), "tests/rtt")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "need -n 2" in proc.stderr or "cannot be measured by two workers" in proc.stderr, proc.stderr


@pytest.mark.slow
def test_n_with_one_cluster_keeps_todays_refusal() -> None:
    proc = _pytest("-n", "2", "tests/rtt", "--rtt", "0", "--concurrency", "1")
    assert proc.returncode != 0
    assert "performance tests must not run under pytest-xdist (-n)" in proc.stdout + proc.stderr


# -- the gate's repeat of undecided cells, from the workers' verdicts --------------------------


def test_the_controller_hands_the_workers_undecided_cells_to_the_chain(tmp_path: Path) -> None:
    """--gate-max-runs over several clusters: the controller writes the
    workers' undecided cells into the chain file; the next run gets them and
    their level-0 siblings by node id, with each undecided cell's run so
    far, as after a one-process run."""
    from wanbench.pytest_plugin import chain
    from wanbench.pytest_plugin import gate as gate_mod

    meta = {"run_index": 1, "max_runs": 3, "alpha": 0.05, "cells_planned": 3, "source": "b.yaml", "fingerprint": {}}
    level0 = "rtt/replica_write/0ms/c=4/proxy/write_probe"
    faulted = "rtt/replica_write/20ms/c=4/proxy/write_probe"
    other = "rtt/primary/20ms/c=4/proxy/read_probe"
    tally = gate_mod.GateTally([
        {"id": level0, "nodeid": "t.py::test_rtt[replica_write-0ms-c4]", "status": "pass", "message": "",
         "undecided": False, "run": {"summary": {"qps": 100.0}, "drop": {}}, "meta": meta, "cluster": "lab1"},
        {"id": faulted, "nodeid": "t.py::test_rtt[replica_write-20ms-c4]", "status": "inconclusive", "message": "",
         "undecided": True, "run": {"summary": {"qps": 50.0}, "drop": {"qps": 0.5}}, "meta": meta, "cluster": "lab1"},
        {"id": other, "nodeid": "t.py::test_rtt[primary-20ms-c4]", "status": "pass", "message": "",
         "undecided": False, "run": {"summary": {"qps": 9.0}, "drop": {}}, "meta": meta, "cluster": "lab2"},
    ])
    path = tmp_path / "chain.json"
    path.write_text(json.dumps({"kind": gate_mod.CHAIN_KIND, "run": 1, "max_runs": 3, "cells": {}}))
    stash = {gate_mod._TALLY_KEY: tally}
    config = SimpleNamespace(getoption=lambda name, default=None: str(path) if name == "gate_chain" else default,
                             stash=SimpleNamespace(get=lambda key, default=None: stash.get(key, default)))
    chain.pytest_sessionfinish(SimpleNamespace(config=config), 0)  # type: ignore[arg-type]
    step = chain.next_run(json.loads(path.read_text()))
    assert step is not None
    nxt, ids = step
    assert ids == ["t.py::test_rtt[replica_write-0ms-c4]", "t.py::test_rtt[replica_write-20ms-c4]"]
    assert nxt["run"] == 2
    assert nxt["cells"] == {faulted: [{"summary": {"qps": 50.0}, "drop": {"qps": 0.5}}]}
    argv = chain.chained_args(("-n", "2", "--labs", "2", "tests/rtt", "--clean-alluredir"), run=2,
                              results_json=None, baseline_save=False, drop=["tests/rtt"])
    assert argv == ["-n", "2", "--labs", "2"]  # the same clusters again, the selection by node id
