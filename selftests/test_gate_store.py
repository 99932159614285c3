"""The baseline store: one file per environment fingerprint, the last N
accepted runs per cell, and runs from another environment never compared."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from selftests.gate_context import CTX
from wanbench.errors import ConfigError
from wanbench.gate.baseline import (
    REVISION_DOCS,
    WORKLOAD_REVISIONS,
    BaselineStore,
    Fingerprint,
    RunCell,
    cell_key,
    read_store_file,
    samples_of,
)
from wanbench.results import CellResult, Latency, Round, WorkloadResult


def cell(scenario: str, qps: list[float], level: str = "50ms", value: float = 50) -> CellResult:
    rounds = tuple(
        Round(seconds=20000 / q, queries=20000, qps=q, latency_ms=Latency(p50=0.3, p95=0.5, p99=0.9)) for q in qps
    )
    w = WorkloadResult("probe_read", 8, rounds, Latency(p95=0.5))
    return CellResult(f"test_rtt[{scenario}-{level}-c8]", "rtt", scenario, {"kind": "delay", "value": value,
                      "label": level}, 8, w, path="proxy")


def tpcc_cell(qps: list[float]) -> CellResult:
    """A ``replica_tpcc`` cell: a probe cell whose workload is TPC-C (the revised workload)."""
    probe = cell("replica_tpcc", qps)
    return replace(probe, workload=replace(probe.workload, workload="tpcc"))


def fp(**changes: Any) -> Fingerprint:
    ctx = json.loads(json.dumps(CTX))
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = ctx
        for p in parents:
            target = target[p]
        target[leaf] = value
    return Fingerprint.from_context(ctx)


def test_samples_are_per_round_and_key_names_the_cell() -> None:
    c = cell("replica_read", [100.0, 110.0, 90.0])
    s = samples_of(c)
    assert s["qps"] == [100.0, 110.0, 90.0]
    assert s["latency_ms.p99"] == [0.9, 0.9, 0.9]
    assert "tps" not in s  # the probe does not measure it
    key = cell_key(c)
    assert key.label == "replica_read rtt=50ms c=8"
    assert key.id == "rtt/replica_read/50ms/c=8/proxy/probe_read"
    assert samples_of(c.to_json()) == s


def test_keeps_the_last_n_runs_per_cell(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, keep=3)
    for i in range(5):
        cells = [cell("replica_read", [1000.0 + i] * 2)]
        if i == 0:
            cells.append(cell("primary", [500.0, 501.0]))
        store.save(fp(), cells, accepted_at=f"2026-11-2{i}T10:00:00+00:00")
    bf = read_store_file(tmp_path / fp().filename)
    read = bf.cell(cell_key(cell("replica_read", [1.0])))
    assert read is not None
    assert read.runs == 3
    assert read.samples["qps"] == [1002.0, 1002.0, 1003.0, 1003.0, 1004.0, 1004.0]
    assert read.describe() == "baseline 2026-11-24 mariadb 10.11.19, 3 accepted runs"
    primary = bf.cell(cell_key(cell("primary", [1.0])))
    assert primary is not None
    assert primary.runs == 1
    doc = json.loads((tmp_path / fp().filename).read_text())
    assert doc["schema"] == 2
    assert doc["kind"] == "wanbench-baseline"
    assert len(doc["runs"]) == 4  # run 0 kept for 'primary' only


def test_lookup_same_environment_finds_the_file(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(fp(), [cell("replica_read", [1.0, 2.0])])
    found = store.lookup(fp())
    assert found.file is not None
    assert not found.incomparable


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"client__cores": 4}, "client.cores: 2 -> 4"),
        ({"client__cpu_model": "AMD EPYC"}, "client.cpu_model: Intel Xeon -> AMD EPYC"),
        ({"params__queries": 2000}, "params.queries: 20000 -> 2000"),
        ({"topology_shape__replica": 2}, "topology_shape.replica: 1 -> 2"),
    ],
)
def test_other_environment_is_incomparable_and_says_what_differs(
    tmp_path: Path, change: dict[str, Any], expected: str
) -> None:
    store = BaselineStore(tmp_path)
    store.save(fp(), [cell("replica_read", [1.0, 2.0])])
    found = store.lookup(fp(**change))
    assert found.file is None
    assert list(found.incomparable) == [expected]
    assert "another environment" in found.note


def test_client_host_name_is_not_hardware(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(fp(), [cell("replica_read", [1.0, 2.0])])
    other_host = fp(client={"cpu_model": "Intel Xeon", "cores": 2, "host": "ci-7f3a", "python": "3.11.9"})
    assert store.lookup(other_host).file is not None


def test_server_version_change_needs_a_release_name(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path)
    store.save(fp(), [cell("replica_read", [1.0, 2.0])])
    newer = fp(versions__mariadb="10.11.20")
    assert newer.filename == fp().filename  # versions are not part of the environment
    refused = store.lookup(newer)
    assert refused.file is None
    assert refused.incomparable == ("versions.mariadb: 10.11.19 -> 10.11.20",)
    assert "--release" in refused.note
    assert store.lookup(newer, release="10.11.20-rc1").file is not None


def test_empty_store_means_no_baseline(tmp_path: Path) -> None:
    found = BaselineStore(tmp_path / "none").lookup(fp())
    assert found.file is None
    assert not found.incomparable
    assert "no baseline in" in found.note


def test_old_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / fp().filename
    path.write_text(json.dumps({"schema": 0, "kind": "wanbench-baseline", "fingerprint": CTX, "runs": []}))
    with pytest.raises(ConfigError, match="baseline schema 0, this wanbench reads 1"):
        BaselineStore(tmp_path).lookup(fp())


def test_context_without_fingerprint_fields_is_refused() -> None:
    with pytest.raises(ConfigError, match="run context lacks client, params"):
        Fingerprint.from_context({"profile": "lab", "versions": {}, "topology_shape": {}})


def test_nothing_to_save_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing to save"):
        BaselineStore(tmp_path).save(fp(), [cell("replica_read", [])])


def test_the_runs_of_one_baseline_chain_are_not_each_others_baseline(tmp_path: Path) -> None:
    """--baseline-runs N records N runs of the same code: each is judged
    against what was accepted before the chain, never against the chain's
    own earlier runs."""
    store = BaselineStore(tmp_path)
    store.save(fp(), [cell("replica_read", [100.0, 101.0])], accepted_at="2026-11-20T10:00:00+00:00")
    for i in range(3):
        store.save(fp(), [cell("replica_read", [90.0 + i, 91.0])], chain="c1")
    assert len(store.lookup(fp()).file.runs) == 4  # type: ignore[union-attr]
    inside = store.lookup(fp(), chain="c1").file
    assert inside is not None
    assert len(inside.runs) == 1
    assert inside.runs[0]["accepted_at"].startswith("2026-11-20")
    assert len(store.lookup(fp(), chain="c2").file.runs) == 4  # type: ignore[union-attr]
    fresh = BaselineStore(tmp_path / "fresh")
    fresh.save(fp(), [cell("replica_read", [100.0, 101.0])], chain="c3")
    first = fresh.lookup(fp(), chain="c3")
    assert first.file is None
    assert "before this --baseline-runs chain" in first.note
    stored = json.loads(next((tmp_path / "fresh").glob("*.json")).read_text())
    assert stored["runs"][0]["chain"] == "c3"


def test_statements_counted_before_census_2_are_not_compared(tmp_path: Path) -> None:
    """Census 1 counted the load's teardown in some runs and not in others:
    its statements per operation are left out; its bytes still count."""
    store = BaselineStore(tmp_path)
    path = store.save(fp(), [cell("replica_read", [100.0, 101.0])])
    doc = json.loads(path.read_text())
    run = doc["runs"][0]
    assert run["census_version"] == 4
    cid = next(iter(run["cells"]))
    run["cells"][cid]["census"] = {"work.primary.statements": 1.01, "bytes_per_op.primary": 280.0}
    new = json.loads(json.dumps(run))
    del run["census_version"]  # as a run recorded before census 2
    doc["runs"].append(new)
    path.write_text(json.dumps(doc))
    found = read_store_file(path).cell(cell_key(cell("replica_read", [1.0])))
    assert found is not None
    assert found.run_census == {"work.primary.statements": [1.01], "bytes_per_op.primary": [280.0, 280.0]}


@pytest.mark.parametrize(("version", "redefined", "kept"), [
    # census 2 stored round trips from latency wherever they were measured, estimates that wandered from
    # -0.3 to 2.4 per write at concurrency 500-1000; census 3 stores only counts
    (2, "round_trips", "bytes_per_op.primary"),
    # census 3 could count an earlier, unmeasured round's teardown in the next window at concurrency
    # 500-1000 (1.60-1.75 statements per write instead of 1.50); census 4 waits for it
    (3, "work.primary.statements", "round_trips"),
])
def test_a_metric_redefined_since_a_run_was_accepted_is_not_compared(
        tmp_path: Path, version: int, redefined: str, kept: str) -> None:
    """The older run's value of the redefined metric is left out; its other census values count."""
    store = BaselineStore(tmp_path)
    path = store.save(fp(), [cell("replica_write", [100.0, 101.0])])
    doc = json.loads(path.read_text())
    run = doc["runs"][0]
    cid = next(iter(run["cells"]))
    run["cells"][cid]["census"] = {redefined: 1.502, kept: 280.0}
    old = json.loads(json.dumps(run))
    old["census_version"] = version
    old["cells"][cid]["census"][redefined] = 1.753
    doc["runs"].append(old)
    path.write_text(json.dumps(doc))
    found = read_store_file(path).cell(cell_key(cell("replica_write", [1.0])))
    assert found is not None
    assert found.run_census == {redefined: [1.502], kept: [280.0, 280.0]}


def test_a_census_only_entry_adds_its_census_and_no_rounds(tmp_path: Path) -> None:
    """An accepted run that kept only a failed cell's census (``census_only_keep``)
    adds that census to the cell's reference, and nothing to its rounds or run count."""
    store = BaselineStore(tmp_path)
    first = cell("replica_read", [100.0, 101.0])
    store.save(fp(), [first])
    path = store.save(fp(), [replace(RunCell.of(first), census={"round_trips": 1.0}, census_only=True)])
    runs = json.loads(path.read_text())["runs"]
    assert list(runs[1]["cells"].values()) == [{"census": {"round_trips": 1.0}, "census_only": True}]
    found = read_store_file(path).cell(cell_key(first))
    assert found is not None
    assert found.runs == 1
    assert found.run_census.get("round_trips") == [1.0]


def test_a_tpcc_cell_accepted_before_its_mix_was_fixed_is_not_compared(tmp_path: Path) -> None:
    """TPC-C revision 2 starts each terminal at a random card of its deck: a
    revision-1 run's TPC-C cells (short rounds ran almost no Delivery) are
    not its baseline, and the gate says why; its other cells still are."""
    probe = cell("replica_read", [100.0, 101.0])
    tpcc = tpcc_cell([90.0, 91.0])
    store = BaselineStore(tmp_path)
    path = store.save(fp(), [probe, tpcc])
    doc = json.loads(path.read_text())
    assert doc["runs"][0]["workload_revisions"] == {"tpcc": 2}
    del doc["runs"][0]["workload_revisions"]  # as a run recorded before revisions were
    path.write_text(json.dumps(doc))
    old = read_store_file(path)
    assert old.cell(cell_key(tpcc)) is None
    assert "holds tpcc cells of revision 1 only; this wanbench runs revision 2" in old.missing_why(cell_key(tpcc))
    assert old.cell(cell_key(probe)) is not None
    store.save(fp(), [tpcc])  # a new accepted run makes the baseline again
    found = read_store_file(path).cell(cell_key(tpcc))
    assert found is not None
    assert found.runs == 1


def test_every_revised_workload_names_the_doc_that_tells_its_revisions() -> None:
    root = Path(__file__).resolve().parent.parent
    assert set(REVISION_DOCS) == set(WORKLOAD_REVISIONS)
    for workload, revision in WORKLOAD_REVISIONS.items():
        assert f"Revision {revision}" in (root / REVISION_DOCS[workload]).read_text()


def test_a_cell_kept_only_as_census_is_not_called_another_revision(tmp_path: Path) -> None:
    """A failed cell's census is kept without its rounds: the gate then has
    no baseline rounds, and must say that, not that the revision differs."""
    tpcc = tpcc_cell([90.0, 91.0])
    kept = replace(RunCell.of(tpcc), census_only=True, census={"work.primary.handler_calls": 40.0})
    path = BaselineStore(tmp_path).save(fp(), [kept])
    found = read_store_file(path)
    assert found.cell(cell_key(tpcc)) is None
    assert "holds only the census of this cell" in found.missing_why(cell_key(tpcc))
