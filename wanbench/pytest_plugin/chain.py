"""The chains of separate invocations: ``--baseline-runs N`` records N
accepted runs, ``--gate-max-runs N`` measures undecided cells again until
decided or N runs are spent, each run a separate ``python -m pytest`` of the
same command (the run, not the round, is the unit of replication).

The next invocation starts after this session's summary, from the end of
``pytest_sessionfinish``, and its output follows this one's; the session's
exit status is the worst of the chain.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from wanbench.gate.budgets import CellKey
from wanbench.pytest_plugin.gate import CHAIN_KIND, Gate, GateTally, _say, gate_of, read_chain, tally_of
from wanbench.results import write_json_atomic

#: options a chained invocation must not inherit: (name, takes a value)
_NOT_INHERITED = (("--gate-chain", True), ("--clean-alluredir", False), ("--baseline-runs", True),
                  ("--baseline-save", False), ("--results-json", True))


def chained_args(args: Sequence[str], positional: Sequence[str], *, results_json: str | None, run: int,
                 baseline_save: bool) -> list[str]:
    """The command line of the next invocation of a chain: the user's
    options, minus what belongs to this invocation only (its positional test
    selection, the chain file, --clean-alluredir, the results file, whose
    name gets ``.runN``)."""
    out: list[str] = []
    skip_value = False
    drop = set(positional)
    for arg in args:
        if skip_value:
            skip_value = False
            continue
        name = arg.split("=", 1)[0]
        hit = next((takes for opt, takes in _NOT_INHERITED if name == opt), None)
        if hit is not None:
            skip_value = hit and "=" not in arg
            continue
        if arg in drop:
            continue
        out.append(arg)
    if results_json:
        stem = Path(results_json)
        out += ["--results-json", str(stem.with_name(f"{stem.stem}.run{run}{stem.suffix or '.json'}"))]
    if baseline_save:
        out += ["--baseline-save", "--baseline-runs", "1"]
    return out


def _run_chained(config: pytest.Config, argv: list[str]) -> int:
    """Run the next invocation of a chain in the foreground, its output on ours."""
    cmd = [sys.executable, "-m", "pytest", *argv]
    try:
        return subprocess.run(cmd, cwd=config.invocation_params.dir, check=False).returncode  # noqa: S603
    except KeyboardInterrupt:
        return int(pytest.ExitCode.INTERRUPTED)


def _chain_file(data: dict[str, Any]) -> str:
    fd, path = tempfile.mkstemp(prefix="wanbench-chain-", suffix=".json")
    os.close(fd)
    write_json_atomic(path, data)
    return path


def _repeat_undecided(session: pytest.Session, g: Gate) -> None:
    """--gate-max-runs: the undecided cells once more, as a separate
    invocation that carries their runs so far. Faulted cells bring their
    level-0 sibling along, so their drop is measured in the new run too."""
    undecided = [v.key.id for v in g.undecided() if v.key.id in g.nodeids]
    runs = {cid: r.to_json() for cid, r in g.runs.items()}
    _repeat(session, undecided, g.nodeids, runs, chain=g.chain, run_index=g.run_index, max_runs=g.max_runs)


def _repeat_merged(session: pytest.Session, tally: GateTally) -> None:
    """--gate-max-runs on the controller of a run over several clusters."""
    meta = tally.meta()
    nodeids = {e["id"]: e["nodeid"] for e in tally.entries if e.get("nodeid")}
    undecided = [e["id"] for e in tally.entries if e.get("undecided") and e["id"] in nodeids and e.get("run")]
    runs = {e["id"]: e["run"] for e in tally.entries if e.get("run")}
    _repeat(session, undecided, nodeids, runs, chain=read_chain(session.config.getoption("gate_chain")),
            run_index=int(meta.get("run_index", 1)), max_runs=int(meta.get("max_runs", 1)))


def _repeat(session: pytest.Session, undecided: list[str], nodeids: dict[str, str], runs: dict[str, Any], *,
            chain: dict[str, Any], run_index: int, max_runs: int) -> None:
    config = session.config
    if not undecided or run_index >= max_runs:
        return
    ids: list[str] = []
    for uid in undecided:
        for cid in (_level0_sibling(nodeids, CellKey.parse(uid)), uid):
            if cid and nodeids.get(cid) and nodeids[cid] not in ids:
                ids.append(nodeids[cid])
    earlier = chain.get("cells") or {}
    cells = {uid: [*earlier.get(uid, []), runs[uid]] for uid in undecided}
    nxt = run_index + 1
    path = _chain_file({"kind": CHAIN_KIND, "run": nxt, "max_runs": max_runs, "cells": cells})
    _say(config, f"{len(undecided)} cell(s) undecided: measuring them again as a separate invocation "
                 f"(run {nxt} of at most {max_runs})")
    argv = chained_args(config.invocation_params.args, config.args,
                        results_json=config.getoption("results_json"), run=nxt, baseline_save=False)
    try:
        code = _run_chained(config, [*argv, *ids, "--gate-chain", path])
    finally:
        Path(path).unlink(missing_ok=True)
    _merge_exit(session, code, what=f"run {nxt}")


def _level0_sibling(nodeids: dict[str, str], key: CellKey) -> str | None:
    for cid in nodeids:
        other = CellKey.parse(cid)
        if other.is_level0 and other.level0_group == key.level0_group and cid != key.id:
            return cid
    return None


def _more_baseline_runs(session: pytest.Session, runs: int) -> None:
    """--baseline-runs N: N-1 more accepted runs, each a separate invocation."""
    config = session.config
    for i in range(2, runs + 1):
        _say(config, f"recording baseline run {i} of {runs} as a separate invocation")
        argv = chained_args(config.invocation_params.args, [], results_json=config.getoption("results_json"),
                            run=i, baseline_save=True)
        code = _run_chained(config, argv)
        _merge_exit(session, code, what=f"baseline run {i}")
        if code not in (0, int(pytest.ExitCode.TESTS_FAILED)):
            _say(config, f"baseline run {i} ended with exit status {code}: no further runs recorded")
            return


def _merge_exit(session: pytest.Session, code: int, *, what: str) -> None:
    """The whole chain's exit status: a failure anywhere fails the session."""
    if code != 0 and session.exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = code
    elif code == int(pytest.ExitCode.TESTS_FAILED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    _say(session.config, f"{what} ended with exit status {code}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
    """After the summary, the next invocation of a chain (``--baseline-runs``,
    ``--gate-max-runs``), whose output follows ours. Only a worker-less
    session or the controller does this."""
    result = yield
    config = session.config
    if hasattr(config, "workerinput") or session.shouldstop or exitstatus == pytest.ExitCode.INTERRUPTED:
        return result
    g, tally = gate_of(config), tally_of(config)
    if config.getoption("baseline_save") and config.getoption("baseline_runs") > 1:
        _more_baseline_runs(session, config.getoption("baseline_runs"))
    elif g is not None and g.max_runs > 1:
        _repeat_undecided(session, g)
    elif g is None and tally is not None and int(tally.meta().get("max_runs", 1)) > 1:
        _repeat_merged(session, tally)
    return result
