"""Budget files: how much worse a cell may get before the gate fails it.

A budget file is YAML::

    version: 1
    profile: lab                 # the scenario catalog rules are checked against
    gate:
      alpha: 0.05                # family-wise false-positive rate of one session
      correction: bonferroni     # as pytest; compare may use holm | bh | none
    rules:
      - family: "*"              # selectors: family, scenario, level,
        scenario: "*"            #   concurrency, path, workload (globs / lists)
        baseline:                # against the stored baseline of the same cell
          qps: 5%                #   may drop at most 5 %
          latency_ms.p99: 10%    #   may rise at most 10 %
      - family: rtt
        scenario: replica_read
        level0:                  # against level 0 of the same run
          qps: 10%
      - family: [rtt, bandwidth, loss]
        drop:                    # the fault's cost against level 0 of the same
          qps: 5 points          #   run may grow at most 5 points over the
                                 #   baseline runs' drop (seeds' "% drop")
      - absolute:                # fixed limits
          latency_ms.p95: 250ms  #   at most 250 ms (qps/tps/tpmc: at least)
      - ab:                      # an A/B run (--ab): against its baseline side,
          qps: 5%                #   pair by pair (wanbench.gate.ab_checks)

``baseline`` and ``drop`` checks compare whole runs: one summary per run
(the median of its rounds), against the spread between accepted runs.

Every rule that matches a cell applies; for the same check (kind and
metric) the last matching rule wins, so specific rules go below general
ones, and ``off`` switches a check off. Mistakes are reported with the file,
the line and the reason, before anything runs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field

from wanbench import families
from wanbench.faults.base import LEVEL0_LABELS, level0_label

#: every cell's metrics -> True when higher is better; each family adds its own (``wanbench.families``)
BASE_METRICS: Mapping[str, bool] = {
    "qps": True,
    "tps": True,
    "latency_ms.p50": False,
    "latency_ms.p95": False,
    "latency_ms.p99": False,
    "error_rate": False,
}


class _Metrics(Mapping[str, bool]):
    """metric -> True when higher is better: every cell's and every known family's (read when asked, so
    a family a plugin registers later is in it)."""

    def _table(self) -> dict[str, bool]:
        return {**BASE_METRICS, **{m.name: m.higher_is_better for m in families.metrics().values()}}

    def __getitem__(self, metric: str) -> bool:
        return self._table()[metric]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


METRICS: Mapping[str, bool] = _Metrics()


class _SecondsMetrics(Collection[str]):
    """Metrics measured in seconds (absolute limits read ``5s`` or ``500ms``), from the families."""

    def _names(self) -> list[str]:
        return [m.name for m in families.metrics().values() if m.seconds]

    def __contains__(self, metric: object) -> bool:
        return metric in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


SECONDS_METRICS: Collection[str] = _SecondsMetrics()
OUTAGE_LEVELS = ("partition", "pause", "restart")


def fault_families() -> tuple[str, ...]:
    """Families whose cells carry a fault level; the others are plain workloads or outages."""
    return families.names(families.FAULT)


def outage_families() -> tuple[str, ...]:
    """Families whose cells are labelled by an outage kind (partition, pause, restart) instead of a level."""
    return families.names(families.OUTAGE)


def all_families() -> tuple[str, ...]:
    return fault_families() + families.names(families.WORKLOAD) + outage_families()


#: the scenario of a level's pooled key (``CellKey.pooled``): every scenario and concurrency of the level
POOLED = "*"
CHECK_KINDS = ("baseline", "drop", "level0", "absolute", "census", "ab")
#: census metrics (``wanbench.census``), by first name part: a census rule's keys are
#: glob patterns over these (``round_trips``, ``bytes_per_op.*``, ``work.*.statements``)
CENSUS_PREFIXES = ("round_trips", "bytes_per_op", "work")
#: checks judged with one summary per run against the accepted runs' spread
RUN_KINDS = ("baseline", "drop")


@dataclass(frozen=True)
class CellKey:
    """The identity of a cell across runs: what is compared with what."""

    family: str
    scenario: str
    level: str
    concurrency: int
    path: str = ""
    workload: str = ""

    @property
    def id(self) -> str:
        return f"{self.family}/{self.scenario}/{self.level}/c={self.concurrency}/{self.path}/{self.workload}"

    @property
    def label(self) -> str:
        """``replica_write rtt=200ms c=1000``: how a DBA names the cell; a
        level of an A/B run (``pooled``): ``rtt=0ms, its cells pooled``."""
        if self.pooled:
            return f"{self.family}={self.level}, its cells pooled"
        text = f"{self.scenario} {self.family}={self.level} c={self.concurrency}"
        if self.path not in ("", "proxy"):
            text += f" via {self.path}"
        return text

    @property
    def pooled(self) -> bool:
        """The key of a fault level's cells pooled (an A/B run's level verdict,
        ``wanbench.gate.ab_levels``), not of one cell."""
        return self.scenario == POOLED

    @property
    def is_level0(self) -> bool:
        """The fault family's level 0: the reference of ``level0`` and ``drop`` checks."""
        return self.level in LEVEL0_LABELS

    @property
    def level0_key(self) -> CellKey | None:
        """The cell of the same group at the family's level 0 (None: the family has no levels)."""
        label = level0_label(self.family)
        return None if label is None else dataclasses.replace(self, level=label)

    @property
    def level0_group(self) -> tuple[str, str, int, str, str]:
        """Cells that share one level-0 reference: everything but the level."""
        return (self.family, self.scenario, self.concurrency, self.path, self.workload)

    @classmethod
    def parse(cls, text: str) -> CellKey:
        family, scenario, level, conc, path, workload = text.split("/")
        return cls(family, scenario, level, int(conc.removeprefix("c=")), path, workload)


@dataclass(frozen=True)
class Check:
    """One resolved limit on one metric of one cell."""

    kind: str  # baseline | drop | level0 | absolute | census | ab (an A/B run: against its baseline side)
    metric: str
    limit: float  # relative (0.05 = 5 %) for baseline/level0, points (0.05) for drop, a value for absolute
    line: int
    source: str
    #: census checks: the limit is relative (0.10 = +10 %) rather than in the metric's own unit
    relative: bool = False

    @property
    def higher_is_better(self) -> bool:
        return False if self.kind == "census" else METRICS[self.metric]

    def describe_limit(self) -> str:
        if self.kind == "census":
            return f"+{self.limit * 100:g}%" if self.relative else f"+{self.limit:g}"
        if self.kind == "absolute":
            op = ">=" if self.higher_is_better else "<="
            return f"{op} {format_value(self.metric, self.limit)}"
        if self.metric == "error_rate" or self.kind == "drop":
            return f"{self.limit * 100:g} points"
        return f"{self.limit * 100:g}%"

    @property
    def per_run(self) -> bool:
        """Judged on run summaries (the run is the unit of replication)."""
        return self.kind in RUN_KINDS


@dataclass(frozen=True)
class Rule:
    line: int
    name: str
    selectors: Mapping[str, tuple[str, ...]]
    #: kind, metric (a glob pattern for census), limit (None = off), line, relative (census)
    checks: tuple[tuple[str, str, float | None, int, bool], ...]

    def matches(self, key: CellKey) -> bool:
        for sel, patterns in self.selectors.items():
            value = str(getattr(key, sel))
            if not any(fnmatch.fnmatchcase(value, p) for p in patterns):
                return False
        return True


@dataclass(frozen=True)
class GatePolicy:
    alpha: float = 0.05
    correction: str = "bonferroni"
    min_rounds: int = 3
    #: accepted baseline runs a run-level check needs before it may call a regression
    min_runs: int = 3
    #: the least spread between separate runs a baseline check assumes (a fraction:
    #: 0.10 = runs differ by 10 % sd), whatever a few accepted runs recorded back to
    #: back show: a machine that drifts over minutes makes them agree more closely
    #: than runs an hour apart will. 0 = trust the accepted runs' own spread.
    min_run_spread: float = 0.0


@dataclass(frozen=True)
class Budgets:
    source: str
    profile: str
    rules: tuple[Rule, ...]
    policy: GatePolicy = field(default_factory=GatePolicy)

    def checks_for(self, key: CellKey) -> list[Check]:
        """The checks in force for ``key``: last matching rule wins per check."""
        chosen: dict[tuple[str, str], Check | None] = {}
        for rule in self.rules:
            if not rule.matches(key):
                continue
            for kind, metric, limit, line, relative in rule.checks:
                chosen[(kind, metric)] = (None if limit is None
                                          else Check(kind, metric, limit, line, self.source, relative))
        out = [c for c in chosen.values() if c is not None]
        if key.is_level0:
            out = [c for c in out if c.kind not in ("level0", "drop")]
        return out


def format_value(metric: str, value: float) -> str:
    if metric in SECONDS_METRICS:
        return f"{value:.2f} s"
    if metric.startswith("latency_ms"):
        return f"{value:.3g} ms" if value < 10 else f"{value:.0f} ms"
    if metric == "error_rate":
        return f"{value * 100:.2g}%"
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


