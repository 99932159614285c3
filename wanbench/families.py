"""The families of cells: one contract each (``Family``), in one registry.

A family is what a test's marker names (``rtt``, ``tpcc``, ``tpch``): its
cells, what they measure and how they are judged, wherever they run (its own
tests, or a fault family's catalog scenario that names its workload). Every
part of wanbench that needs to know something about a family reads it here,
never a table of family names:

================== =====================================================================
``Family`` field   read by
================== =====================================================================
name, description  the markers, progress, xdist (``wanbench/pytest_plugin/families.py``)
kind               the budget file's family and level selectors (``gate/budgets.py``)
fixtures           the plugin table (``wanbench/pytest_plugin/__init__.py``)
engine             the engine table: a catalog scenario's ``workload:`` (``workloads.engine_class``)
workloads          which cells are the family's (``owns``): their ``workload`` names
metrics            the gate's metric table (``gate/budgets.py`` ``METRICS``), Allure's metrics
samples            the gate's per-round values (``gate/baseline.py`` ``samples_of``)
headline           Allure's metric values beyond ``CellResult.metrics()``
integrity          what makes a cell broken (``gate/integrity.py`` ``problems_of``)
fingerprint        the run's fingerprint (``run_context``, ``fixtures/cluster.py``)
load_hosts         ``--load-hosts``: a family that cannot use them is skipped, saying why
tables, summary    the results JSON's tables and the terminal (``pytest_plugin/reporting.py``)
package_data       the wheel (``pyproject.toml``; ``selftests/test_families.py`` checks it)
================== =====================================================================

Built-in families declare themselves beside their code (a module-level
``FAMILY``) and are named in ``BUILT_IN``; the fault families, which are the
machinery's own, are declared here. A plugin or ``conftest.py`` adds one
through the ``pytest_wanbench_families`` hook by returning ``Family``
objects: the plugin registers them here for the session, and from then on
they are read exactly like the built-in ones. Nothing of pytest is imported:
``python -m wanbench compare`` judges results files with the same registry.
"""

from __future__ import annotations

import fnmatch
import importlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import ConfigError

#: the kinds of family: cells at a fault level (``--rtt``, ...), plain workload cells, outages
FAULT, WORKLOAD, OUTAGE = "fault", "workload", "outage"
KINDS = (FAULT, WORKLOAD, OUTAGE)

Cell = Mapping[str, Any]  # a cell's JSON (``CellResult.to_json()``, or a cell of a results file)
Samples = dict[str, list[float]]


@dataclass(frozen=True)
class Metric:
    """A metric a family's cells carry beyond every cell's (QPS, TPS, latency, error rate)."""

    name: str  # as budgets and baselines name it: ``tpmc``, ``ops.READ``, ``query_s.Q1``
    higher_is_better: bool
    title: str = ""  # Allure: ``tpmC``
    unit: str = ""  # Allure: ``tpmC``, ``ms``
    seconds: bool = False  # absolute limits in the budget file read ``5s`` or ``500ms``
    allure: bool = True  # one of the cell's Allure 3 metrics (the report's Metrics page)


@dataclass(frozen=True)
class Integrity:
    """What no budget can trade away in the family's cells: the reason code of
    a broken verdict, and how a failure is read from a cell's JSON. By
    default the failed entries of ``workload_extra.checks`` (each with
    ``passed`` and ``message``) of the cells the family owns, under
    ``headline`` (``{n}``: how many failed); ``failures`` reads something
    else, from any cell (a heartbeat rides beside every family's cells)."""

    code: str
    headline: str = "{n} check(s) failed"
    failures: Callable[[Cell], str | None] | None = None


@dataclass(frozen=True)
class Section:
    """A block of the terminal summary: a title line and the lines under it."""

    title: str
    lines: tuple[str, ...]
    sep: str = "="


@dataclass(frozen=True)
class Family:
    """Everything the machinery knows about one family of cells."""

    name: str  # the pytest marker
    description: str  # as ``pytest --markers`` shows it
    kind: str = WORKLOAD
    #: its module of fixtures, loaded by the plugin (``wanbench.fixtures.tpch``); None: none, or its
    #: plugin / conftest holds them
    fixtures: str | None = None
    #: ``module:Class`` of its workload engine, named by a catalog scenario's ``workload: <name>``
    engine: str | None = None
    #: the ``workload`` names (glob patterns) of its cells, here and in fault scenarios; () = (name,)
    workloads: tuple[str, ...] = ()
    metrics: tuple[Metric, ...] = ()
    #: a cell's per-round values of its ``metrics``, by metric (the gate's raw material)
    samples: Callable[[Cell], Samples] | None = None
    #: a cell's headline value of its ``metrics``, for Allure (default: the median of ``samples``)
    headline: Callable[[Cell], Mapping[str, float]] | None = None
    integrity: Integrity | None = None
    #: options (``dest`` names) that fingerprint every run, whatever it measures
    fingerprint: tuple[str, ...] = ()
    #: options that fingerprint a run unless at this value (a family added after runs were recorded
    #: leaves the fingerprint of runs that do not use it as it was)
    fingerprint_unless: Mapping[str, Any] = field(default_factory=dict)
    #: its load can be drawn from ``--load-hosts``; a family that cannot has its cells skipped there
    load_hosts: bool = False
    #: its tables for the results JSON (``tables``), from the session's cells: name -> rows, or None
    tables: Callable[[Sequence[Cell]], Mapping[str, Any] | None] | None = None
    #: its blocks of the terminal summary, from the session's cells
    summary: Callable[[Sequence[Cell]], Sequence[Section]] | None = None
    #: files the wheel must carry, as globs relative to the ``wanbench`` package
    package_data: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"family {self.name!r}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.name.isidentifier():
            raise ConfigError(f"family {self.name!r}: its name is a pytest marker, so a Python identifier")

    def owns(self, cell: Cell) -> bool:
        """Is ``cell`` (a cell's JSON) one of this family's, by its family or its workload?"""
        workload = str(cell.get("workload") or "")
        return cell.get("family") == self.name or any(fnmatch.fnmatchcase(workload, p)
                                                      for p in self.workloads or (self.name,))


def median_headline(samples: Callable[[Cell], Samples]) -> Callable[[Cell], dict[str, float]]:
    """The headline a run's summary uses: the median of each metric's rounds."""

    def headline(cell: Cell) -> dict[str, float]:
        out = {}
        for metric, values in samples(cell).items():
            finite = sorted(v for v in values if math.isfinite(v))
            if finite:
                mid = len(finite) // 2
                out[metric] = finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2
        return out

    return headline


# -- the fault families: the machinery's own (their levels: wanbench.faults.base.FAMILY_KIND) ---------------------
#: (the probe engine and its Lua script are theirs; whether a scenario's other workload can draw its load
#: from load hosts its engine says, ``load_hosts`` there)
_PROBE_LUA = ("lua/probe.lua", "lua/wb_hooks.lua")
FAULT_FAMILIES = (
    Family("rtt", "added round-trip time on one component (tests/rtt)", FAULT, load_hosts=True,
           package_data=_PROBE_LUA),
    Family("bandwidth", "aggregate rate cap on one component's links (tests/bandwidth)", FAULT, load_hosts=True,
           package_data=_PROBE_LUA),
    Family("loss", "packet loss on one component's links (tests/loss)", FAULT, load_hosts=True,
           package_data=_PROBE_LUA),
)

#: the modules that declare the other built-in families (each a module-level ``FAMILY``), in marker order
BUILT_IN: tuple[str, ...] = (
    "wanbench.workloads.tables",  # sysbench
    "wanbench.workloads.tpcc",
    "wanbench.workloads.ycsb_stats",  # ycsb
    "wanbench.workloads.tpch_engine",  # tpch
    "wanbench.heartbeat_numbers",  # availability
)


class Registry:
    """The families known to this process: the built-in ones, read on first
    use, then those a plugin registers."""

    def __init__(self, built_in: Sequence[str] = BUILT_IN) -> None:
        self._modules = tuple(built_in)
        self._families: dict[str, Family] = {}
        self._built_in: set[str] = set()
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        found = list(FAULT_FAMILIES)
        for module in self._modules:
            family = getattr(importlib.import_module(module), "FAMILY", None)
            if not isinstance(family, Family):
                raise ConfigError(f"{module} is listed in wanbench.families.BUILT_IN but declares no FAMILY")
            found.append(family)
        for family in found:
            if family.name in self._families:
                raise ConfigError(f"two built-in families are called {family.name!r}")
            self._families[family.name] = family
            self._built_in.add(family.name)

    def all(self) -> tuple[Family, ...]:
        self._load()
        return tuple(self._families.values())

    def get(self, name: str) -> Family | None:
        self._load()
        return self._families.get(name)

    def register(self, family: Family) -> Family:
        """Add a family (a plugin's); registering the same one again is harmless."""
        self._load()
        known = self._families.get(family.name)
        if known is not None and known != family and family.name in self._built_in:
            raise ConfigError(f"family {family.name!r} is built in: a plugin cannot replace it")
        self._families[family.name] = family
        return family

    def unregister(self, name: str) -> None:
        self._load()
        if name in self._built_in:
            raise ConfigError(f"family {name!r} is built in: it cannot be unregistered")
        self._families.pop(name, None)


_REGISTRY = Registry()


def families(kind: str | None = None) -> tuple[Family, ...]:
    """Every known family (of ``kind``), built-in ones first, in marker order."""
    return tuple(f for f in _REGISTRY.all() if kind is None or f.kind == kind)


def names(kind: str | None = None) -> tuple[str, ...]:
    return tuple(f.name for f in families(kind))


def family(name: str) -> Family | None:
    return _REGISTRY.get(name)


def register(fam: Family) -> Family:
    return _REGISTRY.register(fam)


def unregister(name: str) -> None:
    _REGISTRY.unregister(name)


@contextmanager
def registered(fam: Family) -> Iterator[Family]:
    """``fam`` registered for the ``with`` block (tests)."""
    register(fam)
    try:
        yield fam
    finally:
        unregister(fam.name)


def owners(cell: Cell) -> tuple[Family, ...]:
    """The families that own ``cell`` (its own, and that of its workload)."""
    return tuple(f for f in families() if f.owns(cell))


def metrics() -> dict[str, Metric]:
    """Every family's metrics by name (the first family to declare a name wins)."""
    out: dict[str, Metric] = {}
    for f in families():
        for m in f.metrics:
            out.setdefault(m.name, m)
    return out


def samples_of(cell: Cell) -> Samples:
    """The per-round values the families that own ``cell`` read from it."""
    out: Samples = {}
    for f in owners(cell):
        if f.samples is not None:
            for metric, values in f.samples(cell).items():
                out.setdefault(metric, []).extend(values)
    return out


def headline_of(cell: Cell) -> dict[str, float]:
    """The families' headline values of ``cell`` (Allure)."""
    out: dict[str, float] = {}
    for f in owners(cell):
        if f.headline is not None:
            out.update(f.headline(cell))
        elif f.samples is not None:
            out.update(median_headline(f.samples)(cell))
    return out


def engine_of(name: str) -> str | None:
    """``module:Class`` of the engine a family offers under ``name``."""
    f = family(name)
    return f.engine if f is not None else None


def engines() -> dict[str, str]:
    return {f.name: f.engine for f in families() if f.engine}


def fixture_modules() -> list[str]:
    """The built-in families' fixture modules, in marker order (the plugin table)."""
    return [f.fixtures for f in families() if f.fixtures]


def fingerprint_params(option: Callable[[str], Any]) -> dict[str, Any]:
    """The families' options that fingerprint a run (``option``: pytest's
    ``config.getoption``): each ``fingerprint`` option, and each
    ``fingerprint_unless`` option not at its value."""
    out: dict[str, Any] = {}
    for f in families():
        for dest in f.fingerprint:
            out[dest] = _option(option, dest, f)
        for dest, unless in f.fingerprint_unless.items():
            value = _option(option, dest, f)
            if value != unless:
                out[dest] = value
    return out


def _option(option: Callable[[str], Any], dest: str, fam: Family) -> Any:
    try:
        return option(dest)
    except (ValueError, AttributeError, KeyError):
        raise ConfigError(f"family {fam.name!r} fingerprints runs with option {dest!r}, which no plugin "
                          "registers") from None


def engine_summaries(cells: Sequence[Cell], *, title: str, checks: str, path: str) -> Section:
    """Per cell of an engine with its own summary text (TPC-C, YCSB): that
    text as its users know it (``workload_extra.summary_text``), then how many
    of the cell's ``checks`` (consistency, correctness) passed."""
    lines: list[str] = []
    for c in cells:
        extra = c.get("workload_extra") or {}
        done = extra.get("checks", []) or []
        failed = [k["name"] for k in done if not k.get("passed")]
        lines.append(f"--- {c['test_id']} ({c['scenario']}, path {c.get('path') or path})")
        lines.append(str(extra.get("summary_text", "")))
        lines.append(f"{checks}: {len(done) - len(failed)}/{len(done)} checks passed"
                     + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return Section(title, tuple(lines))
