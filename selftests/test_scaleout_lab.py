"""``pytest -n 2 --labs 2`` on real labs: the same cells, with the same ids,
merged into one result as one lab measures them one after the other; and a
worker killed with ``kill -9`` mid-run, while its level is in place (rtt:
Toxiproxy toxics; loss: an nft table on lo), leaves no fault behind and its
cells reported broken, never silently missing.

Two scenarios, level 0 and one level, one concurrency: the cells of a
scenario stay on one lab, so two scenarios are what it takes to use both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from selftests.labutil import ROOT, free_port_base, pid_alive, suite_cmd
from wanbench.executors.local import LocalExecutor
from wanbench.faults.deadman import STATE_DIR
from wanbench.faults.inventory import host_faults
from wanbench.procs import port_free
from wanbench.profiles.lab.faults import lab_run_id, lab_scope
from wanbench.profiles.lab.layout import SERVICES
from wanbench.profiles.lab.servers import Lab
from wanbench.results import results_schema_path
from wanbench.scaleout import LAB_PORT_STRIDE, split_cpus
from wanbench.wait import wait_for

pytestmark = [pytest.mark.lab, pytest.mark.slow]

#: this helper's port range (RULES.md): 25000-25499
PORTS = (25000, 25499)
SCENARIOS = ["tests/rtt", "--scenario", "replica_write,primary", "--rounds", "2"]
MATRIX = [*SCENARIOS, "--rtt", "0,20ms", "--concurrency", "4", "--queries", "200"]


def _run(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(suite_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def _doc(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    jsonschema.Draft202012Validator(json.loads(results_schema_path().read_text())).validate(doc)
    return doc


def _labs_gone(lab_dir: Path, base: int, n: int) -> None:
    for k in range(n):
        run_dir = lab_dir if k == 0 else lab_dir.with_name(f"{lab_dir.name}-{k + 1}")
        lab = Lab(run_dir, base + k * LAB_PORT_STRIDE)
        assert not any(lab.running().values()), f"lab {k + 1} still runs"
        assert all(port_free(base + k * LAB_PORT_STRIDE + i) for i in range(8)), f"ports of lab {k + 1} in use"


def _no_faults_of(bases: list[int], tags: list[str]) -> None:
    """No tc/nft fault (or dead-man state) of these labs or of these runners is left on this machine."""
    scopes = {lab_scope(b) for b in bases}
    runs = {lab_run_id(t) for t in tags}
    left = [f.line for f in host_faults(LocalExecutor("localhost"), STATE_DIR)
            if (f.state is not None and f.state.scope in scopes) or any(r in f.name for r in runs)]
    assert not left, left


def test_two_labs_under_n2_give_the_cells_and_result_of_one_lab(tmp_path: Path) -> None:
    base = free_port_base(PORTS[0], PORTS[0] + 100, span=14)
    seq = _run(*MATRIX, "--lab-dir", str(tmp_path / "seq"), "--lab-port-base", str(base),
               "--results-json", str(tmp_path / "seq.json"), "--baseline-dir", str(tmp_path / "b-seq"))
    assert seq.returncode == 0, seq.stdout[-4000:] + seq.stderr[-2000:]

    pbase = free_port_base(PORTS[0] + 100, PORTS[0] + 250, span=LAB_PORT_STRIDE + 14)
    par = _run("-n", "2", "--labs", "2", *MATRIX, "--lab-dir", str(tmp_path / "par"), "--lab-port-base", str(pbase),
               "--results-json", str(tmp_path / "par.json"), "--baseline-dir", str(tmp_path / "b-par"),
               "--baseline-save")
    out = par.stdout + par.stderr
    assert par.returncode == 0, par.stdout[-4000:] + par.stderr[-2000:]

    one, two = _doc(tmp_path / "seq.json"), _doc(tmp_path / "par.json")
    # the same cells, with the same ids, in the same order
    assert [c["test_id"] for c in two["results"]] == [c["test_id"] for c in one["results"]]
    assert len(one["results"]) == 4
    key = [(c["family"], c["scenario"], c["level"]["label"], c["concurrency"]) for c in one["results"]]
    assert [(c["family"], c["scenario"], c["level"]["label"], c["concurrency"]) for c in two["results"]] == key
    # a one-lab run's record is unchanged; each cell of the merged one names its lab, a scenario keeps to one lab
    assert all("cluster" not in c for c in one["results"])
    assert "clusters" not in one["run"]
    where = {c["scenario"]: set() for c in two["results"]}
    for c in two["results"]:
        where[c["scenario"]].add(c["cluster"]["name"])
    # the gate decides as in one process (each with an empty store): level 0 of a scenario was on its lab
    assert [c["verdict"]["status"] for c in two["results"]] == [c["verdict"]["status"] for c in one["results"]]
    assert all(len(v) == 1 for v in where.values()), where
    assert set().union(*where.values()) == {"lab1", "lab2"}
    ports = {c["cluster"]["name"]: c["cluster"]["port_base"] for c in two["results"]}
    assert ports == {"lab1": pbase, "lab2": pbase + LAB_PORT_STRIDE}
    assert sorted(c["name"] for c in two["run"]["clusters"]) == ["lab1", "lab2"]
    assert two["run"]["params"]["clusters"] == 2
    assert "clusters" not in one["run"]["params"]
    # one merged table with both scenarios, each row naming its lab
    rows = two["tables"]["rtt"]
    assert {r["scenario"] for r in rows} == {"replica_write", "primary"}
    assert all(len(r["clusters"]) == 1 for r in rows)
    assert "wanbench rtt: QPS per level and drop against level 0" in out
    assert "| cluster" in out
    assert "wanbench gate" in out
    assert "over 4 cells" in out
    # one accepted run in one baseline file (labs are equivalent), holding the cells of both labs
    files = list((tmp_path / "b-par").glob("*.json"))
    assert len(files) == 1, files
    store = json.loads(files[0].read_text())
    assert store["fingerprint"]["params"]["clusters"] == 2
    assert len(store["runs"]) == 1
    assert len(store["runs"][0]["cells"]) == 4
    _labs_gone(tmp_path / "par", pbase, 2)
    _labs_gone(tmp_path / "seq", base, 1)


def _faults_in_place(family: str, lab: Lab) -> list[str]:
    """What of ``lab``'s fault is in place now: its toxics (rtt), its nft/tc rules (loss)."""
    if family == "rtt":
        try:
            return [f"toxic {name} on {proxy}" for proxy, name in lab.toxiproxy.our_toxics()] if lab.is_up() else []
        except Exception:  # noqa: BLE001 - the lab is still starting
            return []
    return [f.line for f in host_faults(LocalExecutor("localhost"), STATE_DIR)
            if f.state is not None and f.state.scope == lab_scope(lab.port_base)]


@pytest.mark.parametrize(("family", "levels"), [("rtt", "0,20ms"), ("loss", "0,1%")])
def test_a_killed_worker_leaves_no_fault_and_its_cells_broken(tmp_path: Path, family: str, levels: str) -> None:
    """rtt: the fault is Toxiproxy toxics; loss: an nft table of the worker's run on lo."""
    pbase = free_port_base(PORTS[0] + 250, PORTS[1], span=LAB_PORT_STRIDE + 14)
    lab_dir = tmp_path / "lab"
    labs = [Lab(lab_dir, pbase), Lab(lab_dir.with_name("lab-2"), pbase + LAB_PORT_STRIDE)]
    # one faulted level per scenario at two concurrencies: a worker killed as its level is applied
    # leaves that level's two cells broken (c=4, not 1: a 20 ms round trip per query costs less time)
    matrix = [f"tests/{family}", *SCENARIOS[1:], f"--{family}", levels, "--concurrency", "4,8", "--queries", "300"]
    listed = _run("--collect-only", "-q", *matrix, timeout=300)
    every = {line.split("::")[-1] for line in listed.stdout.splitlines() if "::" in line}
    assert len(every) == 8, listed.stdout
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen(  # noqa: S603
        suite_cmd("-n", "2", "--labs", "2", *matrix, "--lab-dir", str(lab_dir), "--lab-port-base", str(pbase),
                  "--results-json", str(tmp_path / "r.json"), "--baseline-dir", str(tmp_path / "b"),
                  "--max-worker-restart", "0", "-v"),
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True)
    killed: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + 600
        while not killed and time.monotonic() < deadline and proc.poll() is None:
            for k, lab in enumerate(labs):
                faults = _faults_in_place(family, lab)
                if faults:  # a level is in place: kill the worker that owns this lab
                    pinned = {j: {svc: os.sched_getaffinity(h.pid) for svc in SERVICES
                                  if (h := other.handle(svc)) is not None and h.alive()}
                              for j, other in enumerate(labs)}
                    pid = int(lab.state()["owner"]["pid"])
                    servers = [h.pid for svc in SERVICES if (h := lab.handle(svc)) is not None and h.alive()]
                    os.kill(pid, signal.SIGKILL)
                    killed = {"lab": k, "pid": pid, "at": time.monotonic(), "faults": faults, "pinned": pinned,
                              "servers": servers}
                    break
            time.sleep(0.2)
        assert killed, "no fault was ever applied"
        sets = split_cpus(os.sched_getaffinity(0), 2)
        for j, services in killed["pinned"].items():  # each lab's servers on its own CPUs (or shared)
            assert all(cpus == (set(sets[j]) or os.sched_getaffinity(0)) for cpus in services.values()), killed
        # the watchdog of the dead worker removes its fault within a second or so, while the run goes on
        lab = labs[killed["lab"]]
        while _faults_in_place(family, lab) and time.monotonic() - killed["at"] < 10:
            time.sleep(0.2)
        assert not _faults_in_place(family, lab), "the killed worker's fault outlived it"
        cleared_after = time.monotonic() - killed["at"]
        # then it stops the worker's lab (the worker started it), while the other worker's run goes on
        wait_for(lambda: not any(pid_alive(p) for p in killed["servers"]), what="the dead worker's lab to stop",
                 timeout=60, interval=0.5)
        assert proc.poll() is None or proc.returncode == 1
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    out = (tmp_path / "run.log").read_text()
    assert proc.returncode == 1, out[-5000:]
    assert "crashed while running" in out, out[-5000:]
    assert "broken: not measured" in out, out[-5000:]
    doc = _doc(tmp_path / "r.json")
    measured = {c["test_id"] for c in doc["results"]}
    broken = {b["test_id"] for b in doc["broken"]}
    crashed = {line.split("crashed while running ")[1].split("::")[-1].strip("'\" ")
               for line in out.splitlines() if "crashed while running" in line}
    assert len(crashed) == 1, crashed
    assert crashed <= broken  # failed by xdist, and listed with the cells it could not measure
    assert measured | broken == every, (measured, broken)  # nothing silently missing
    assert not measured & broken
    assert len(broken) >= 2  # the cell it died in, and at least the rest of that level
    assert all(b["cluster"] == f"lab{killed['lab'] + 1}" for b in doc["broken"])
    # the controller's own stop of an orphaned lab (for a watchdog killed too) found nothing left to stop
    assert f"lab{killed['lab'] + 1}: its worker (pid {killed['pid']}) died; stopped its lab" not in out
    _labs_gone(lab_dir, pbase, 2)
    _no_faults_of([pbase, pbase + LAB_PORT_STRIDE], [str(killed["pid"])])
    print(f"{family}: killed worker {killed['pid']} (lab {killed['lab'] + 1}) with {killed['faults']}; "
          f"its fault was gone {cleared_after:.1f}s later")
