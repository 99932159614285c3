"""The workload engine table: an unknown name is a clear error, and adding an
engine takes one module and one table entry (a toy engine, run through the
same ``Engines`` the fault fixtures use)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from wanbench import families, workloads
from wanbench.errors import ConfigError
from wanbench.workloads import EngineContext, Engines, split_workload


def test_unknown_engine_names_the_known_ones() -> None:
    known = sorted({"probe", "tpcc", "ycsb", *families.engines()})  # the probe and every family's engine
    with pytest.raises(ConfigError, match=rf"unknown workload engine 'nope' \(known: {', '.join(known)}\)"):
        workloads.engine_class("nope")


def test_workload_names() -> None:
    assert split_workload("read_probe") == ("probe", "read")
    assert split_workload("ycsb:workloadd") == ("ycsb", "workloadd")
    assert split_workload("tpcc") == ("tpcc", "")


def test_every_table_entry_imports() -> None:
    for name in workloads.engines():
        assert callable(getattr(workloads.engine_class(name), "runner", None)), name


def test_a_toy_engine_is_one_module_and_one_entry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(workloads.ENGINES, "toy", "selftests.toy_engine:ToyEngine")  # the one table entry
    said: list[str] = []
    ctx = EngineContext(cluster=None, option={"rounds": 2}.__getitem__, workdir=tmp_path, progress=said.append,
                        step=lambda _title: contextlib.nullcontext())
    engines = Engines(ctx)
    run = engines.runner("toy:fast", "direct")
    assert engines.runner("toy:fast", "direct") is run  # prepared once
    result = run(16)
    assert result.workload == "toy_fast"
    assert result.concurrency == 16
    assert len(result.rounds) == 2
    assert said == ["toy: prepared fast on direct"]
