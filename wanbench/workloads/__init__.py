"""Workload engines: one module per load generator, picked by name from a table.

Like testinfra's backends (a dict of name -> class path, a clear error for an
unknown name), ``ENGINES`` maps an engine name to ``module:Class``. A fault
scenario names its workload ``<engine>`` or ``<engine>:<variant>`` (e.g.
``tpcc``, ``ycsb:workloada``; ``read_probe`` and ``write_probe`` are the
probe engine's variants under their old names). The fixtures make one
engine per session and ask it for a runner per scenario.

Adding an engine: write one module with a class that takes an
``EngineContext`` and has ``runner(variant, path)``, and name it in its
family's ``Family.engine`` (``wanbench.families``), or, for an engine of no
family, add one line to ``ENGINES`` (``selftests/test_engines.py`` does
both with a toy).
Every engine that runs sysbench runs it through ``sysproc.run``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from wanbench import families
from wanbench.errors import ConfigError
from wanbench.results import WorkloadResult

#: engine name -> "module:Class": the fault families' own probe; every family that offers an engine
#: adds it under its name (``Family.engine``, ``wanbench.families``): ``engines()`` is the whole table
ENGINES: dict[str, str] = {
    "probe": "wanbench.workloads.probe:ProbeEngine",
}
#: scenario workload names kept from before the table
ALIASES: dict[str, str] = {"read_probe": "probe:read", "write_probe": "probe:write"}


@dataclass(frozen=True)
class EngineContext:
    """What an engine may use: the cluster, the run's options, a scratch
    directory, and ways to tell the user what happens."""

    cluster: Any  # wanbench.profiles.base.Cluster
    option: Callable[[str], Any]  # pytest's config.getoption
    workdir: Path
    progress: Callable[[str], None]
    step: Callable[[str], AbstractContextManager[Any]]  # an Allure step (or nothing)
    #: the hooks a measured run reports its window to (``sysproc.WindowHooks``,
    #: server-side evidence), fresh for each measured run; None: nobody listens
    window: Callable[[], Any] = lambda: None
    #: the running cell's fault switch (``wanbench.interleave.Switch``) when its
    #: rounds are to be interleaved with level-0 rounds; None: all rounds as they are.
    #: In an A/B run: the cell's ``CellSwitch`` (its early stop), with nothing to toggle
    interleave: Callable[[], Any] = lambda: None
    #: an A/B run (``wanbench.ab``): the baseline's cluster, whose rounds alternate with the
    #: candidate's (``cluster``) in every cell; None in a run of one cluster. An engine that can
    #: do this says so (``ab = True`` on its class); the fixtures refuse A/B for the others
    baseline: Any = None
    #: the hooks the baseline side's measured windows report to (its own evidence)
    baseline_window: Callable[[], Any] = lambda: None


class WorkloadEngine(Protocol):
    """What the fixtures need from an engine."""

    def __init__(self, ctx: EngineContext) -> None: ...

    def runner(self, variant: str, path: str) -> Callable[[int], WorkloadResult]:
        """Prepare the data ``variant`` needs on ``path`` (once) and return
        ``run(concurrency)``; called before the scenario's fault is applied."""
        ...


def split_workload(name: str) -> tuple[str, str]:
    """``ycsb:workloada`` -> (``ycsb``, ``workloada``); aliases resolved."""
    engine, _, variant = ALIASES.get(name, name).partition(":")
    return engine, variant


def engines() -> dict[str, str]:
    """Every engine: ``ENGINES`` and the families' (``Family.engine``)."""
    return {**families.engines(), **ENGINES}


def engine_class(name: str) -> type[WorkloadEngine]:
    """The engine class of ``name``; ``ConfigError`` naming the known ones."""
    table = engines()
    target = table.get(name)
    if target is None:
        raise ConfigError(f"unknown workload engine {name!r} (known: {', '.join(sorted(table))})")
    module, _, cls = target.partition(":")
    found: type[WorkloadEngine] = getattr(importlib.import_module(module), cls)
    return found


class Engines:
    """The session's engines, made on first use."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._made: dict[str, WorkloadEngine] = {}
        self._runners: dict[tuple[str, str], Callable[[int], WorkloadResult]] = {}

    def get(self, name: str) -> WorkloadEngine:
        if name not in self._made:
            self._made[name] = engine_class(name)(self.ctx)
        return self._made[name]

    def runner(self, workload: str, path: str) -> Callable[[int], WorkloadResult]:
        """``run(concurrency)`` for a scenario's workload; the data is
        prepared on the first call for (workload, path) only."""
        key = (workload, path)
        if key not in self._runners:
            engine, variant = split_workload(workload)
            self._runners[key] = self.get(engine).runner(variant, path)
        return self._runners[key]

    def __iter__(self) -> Iterator[WorkloadEngine]:
        return iter(self._made.values())
