"""The chains of separate invocations: ``--baseline-runs N`` records N
accepted runs, ``--gate-max-runs N`` measures undecided cells again until
decided or N runs are spent, each run a separate ``python -m pytest`` of the
same command (the run, not the round, is the unit of replication).

A chain is driven from outside any test session. The invocation the user
typed is taken over in ``pytest_cmdline_main`` (as pytest-xdist's
``--looponfail`` takes over its loop of runs): that process collects and runs
nothing; it starts each run as a child ``python -m pytest``, one after
another, and its exit status is the worst of the chain. The runs of a gate
chain talk through one chain file (``--gate-chain``): the driver writes the
cells' runs so far into it, the run writes its undecided cells back at the
end of its session (``pytest_sessionfinish``), and nothing else. Each run is
killed by the kernel if the driver dies (``kill -9`` included): its faults
then go with its lease, as for any runner. The chain file lives in a scratch
directory owned by the driver (``wanbench.scratch``): a driver killed with
``kill -9`` cannot remove it, and the next run's sweep does.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from wanbench import scratch
from wanbench.gate.budgets import CellKey
from wanbench.procs import load_preexec
from wanbench.pytest_plugin.gate import BASELINE_CHAIN_ENV, CHAIN_KIND, gate_of, read_chain, tally_of
from wanbench.results import write_json_atomic

#: options a chained invocation must not inherit: (name, takes a value)
_NOT_INHERITED = (("--gate-chain", True), ("--clean-alluredir", False), ("--baseline-runs", True),
                  ("--baseline-save", False), ("--results-json", True))
#: options that show something instead of running tests: never a chain
_SHOWS = ("help", "version", "collectonly", "showfixtures", "show_fixtures_per_test", "markers", "setuponly",
          "setupplan")


def chained_args(args: Sequence[str], *, run: int, results_json: str | None, baseline_save: bool,
                 drop: Sequence[str] = ()) -> list[str]:
    """The command line of run ``run`` of a chain: the user's options, minus
    what a run decides for itself (the chain file; the results file, whose
    name gets ``.runN`` after run 1; ``--baseline-save`` and
    ``--baseline-runs``, which a baseline run gets as ``--baseline-save
    --baseline-runs 1``), minus ``drop`` (a test selection replaced by node
    ids) and, after run 1, ``--clean-alluredir`` (the runs add to one Allure
    directory)."""
    out: list[str] = []
    skip_value = False
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        hit = next((takes for opt, takes in _NOT_INHERITED if name == opt), None)
        if hit is not None:
            skip_value = hit and "=" not in arg
            kept = run == 1 and (name == "--clean-alluredir" or name == "--baseline-save" and not baseline_save)
            if kept:
                out.append(arg)
            continue
        if arg in drop:
            continue
        out.append(arg)
    if results_json:
        stem = Path(results_json)
        out += ["--results-json", results_json if run == 1 else
                str(stem.with_name(f"{stem.stem}.run{run}{stem.suffix or '.json'}"))]
    if baseline_save:
        out += ["--baseline-save", "--baseline-runs", "1"]
    return out


def is_driver(config: pytest.Config) -> bool:
    """Whether this invocation drives a chain rather than running tests:
    the one the user typed, with ``--baseline-save --baseline-runs N`` or
    ``--gate-max-runs N`` (N > 1); never a run of a chain or an xdist worker."""
    if hasattr(config, "workerinput") or config.getoption("gate_chain"):
        return False
    if any(getattr(config.option, name, False) for name in _SHOWS):
        return False
    return bool(config.getoption("baseline_save") and config.getoption("baseline_runs") > 1
                or config.getoption("gate_max_runs") > 1)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if not is_driver(config):
        return None
    driver = Driver(config.invocation_params.args, list(config.args), config.invocation_params.dir,
                    results_json=config.getoption("results_json"))
    if config.getoption("baseline_save") and config.getoption("baseline_runs") > 1:
        return driver.baseline(config.getoption("baseline_runs"))
    return driver.gate(config.getoption("gate_max_runs"))


def say(text: str) -> None:
    sys.stdout.write(f"[wanbench] {text}\n")
    sys.stdout.flush()


def run_pytest(argv: Sequence[str], cwd: Path, env: Mapping[str, str] | None = None) -> int:
    """One run of a chain in the foreground, its output on ours. Ctrl-C
    reaches the run too (one process group): it is waited for while it
    removes its faults, and the chain ends."""
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *argv], cwd=cwd,  # noqa: S603
                            env={**os.environ, **(env or {})},
                            preexec_fn=load_preexec())  # noqa: PLW1509 - a single-threaded driver
    while True:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            continue  # the run got the same SIGINT: let it clean up
        if code >= 0:
            return code
        return int(pytest.ExitCode.INTERRUPTED if -code == signal.SIGINT else pytest.ExitCode.INTERNAL_ERROR)


def worse(code: int, other: int) -> int:
    """The chain's exit status so far, after a run that ended with ``other``:
    a failure anywhere fails the chain."""
    if other == int(pytest.ExitCode.TESTS_FAILED):
        return other
    if other != 0 and code in (0, int(pytest.ExitCode.NO_TESTS_COLLECTED)):
        return other
    return code


class Driver:
    """Runs the invocations of a chain, one after another."""

    def __init__(self, args: Sequence[str], positional: Sequence[str], cwd: Path, *,
                 results_json: str | None) -> None:
        self.args = list(args)
        self.positional = list(positional)
        self.cwd = cwd
        self.results_json = results_json

    def baseline(self, runs: int) -> int:
        """--baseline-runs N: N accepted runs, each a separate invocation.
        The runs carry the chain's id: each is judged against what was
        accepted before the chain, not against the chain's earlier runs
        (the same code: a "regression" between them is the machine's noise,
        and leaving that run out would bias the baseline)."""
        code = 0
        chain = {BASELINE_CHAIN_ENV: uuid.uuid4().hex[:12]}
        for i in range(1, runs + 1):
            say(f"recording baseline run {i} of {runs} as a separate invocation")
            got = run_pytest(chained_args(self.args, run=i, results_json=self.results_json, baseline_save=True),
                             self.cwd, chain)
            code = worse(code, got)
            if got not in (0, int(pytest.ExitCode.TESTS_FAILED)) and i < runs:
                say(f"baseline run {i} ended with exit status {got}: no further runs recorded")
                break
            say(f"baseline run {i} ended with exit status {got}")
        return code

    def gate(self, max_runs: int) -> int:
        """--gate-max-runs N: run 1 as typed, then the undecided cells again
        (with their level-0 siblings) until decided or N runs are spent."""
        for stale, why in scratch.sweep_stale():  # a killed driver's chain file, a killed run's scratch
            say(f"removed stale scratch directory {stale} ({why})")
        work = scratch.make_scratch()
        path = work / "chain.json"
        chain: dict[str, Any] = {"kind": CHAIN_KIND, "run": 1, "max_runs": max_runs, "cells": {}}
        selection: list[str] = []
        code = 0
        try:
            while True:
                run = int(chain["run"])
                write_json_atomic(path, chain)
                argv = chained_args(self.args, run=run, results_json=self.results_json, baseline_save=False,
                                    drop=self.positional if run > 1 else ())
                got = run_pytest([*argv, *selection, "--gate-chain", str(path)], self.cwd)
                code = worse(code, got)
                if run > 1:
                    say(f"run {run} ended with exit status {got}")
                if got == int(pytest.ExitCode.INTERRUPTED) or run >= max_runs:
                    return code
                step = next_run(read_chain(str(path)))
                if step is None:
                    return code
                chain, selection = step
                undecided = len(chain["cells"])
                say(f"{undecided} cell(s) undecided: measuring them again as a separate invocation "
                    f"(run {chain['run']} of at most {max_runs})")
        finally:
            shutil.rmtree(work, ignore_errors=True)


def next_run(done: dict[str, Any]) -> tuple[dict[str, Any], list[str]] | None:
    """From the chain file a run wrote back: the next run's chain file and
    node ids (each undecided cell and its level-0 sibling, so the drop is
    measured in the new run too), or None when nothing is left to decide."""
    report = done.get("report") or {}
    nodeids: dict[str, str] = report.get("nodeids") or {}
    runs: dict[str, Any] = report.get("runs") or {}
    undecided = [cid for cid in report.get("undecided") or [] if nodeids.get(cid) and cid in runs]
    if not undecided:
        return None
    ids: list[str] = []
    for uid in undecided:
        for cid in (_level0_sibling(nodeids, CellKey.parse(uid)), uid):
            if cid and nodeids.get(cid) and nodeids[cid] not in ids:
                ids.append(nodeids[cid])
    earlier = done.get("cells") or {}
    cells = {uid: [*earlier.get(uid, []), runs[uid]] for uid in undecided}
    return {"kind": CHAIN_KIND, "run": int(done.get("run", 1)) + 1, "max_runs": int(done.get("max_runs", 1)),
            "cells": cells}, ids


def _level0_sibling(nodeids: dict[str, str], key: CellKey) -> str | None:
    for cid in nodeids:
        other = CellKey.parse(cid)
        if other.is_level0 and other.level0_group == key.level0_group and cid != key.id:
            return cid
    return None


def handover(config: pytest.Config) -> dict[str, Any] | None:
    """What a run of a gate chain tells its driver: the undecided cells,
    their node ids and their runs (this process's gate, or the workers'
    verdicts on the controller of a run over several clusters)."""
    g, tally = gate_of(config), tally_of(config)
    if g is not None:
        return {"undecided": [v.key.id for v in g.undecided()], "nodeids": dict(g.nodeids),
                "runs": {cid: r.to_json() for cid, r in g.runs.items()}}
    if tally is not None:
        return {"undecided": [e["id"] for e in tally.entries if e.get("undecided")],
                "nodeids": {e["id"]: e["nodeid"] for e in tally.entries if e.get("nodeid")},
                "runs": {e["id"]: e["run"] for e in tally.entries if e.get("run")}}
    return None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run of a gate chain writes its undecided cells into the chain file
    for the driver (the controller or a worker-less session only)."""
    config = session.config
    path = config.getoption("gate_chain")
    if not path or hasattr(config, "workerinput"):
        return
    report = handover(config)
    if report is not None:
        write_json_atomic(path, {**read_chain(path), "report": report})
