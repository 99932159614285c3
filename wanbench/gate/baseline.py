"""The baseline store: accepted runs, one JSON file per environment.

A run is only compared with runs made in the same environment: same
profile, topology shape, client hardware and workload parameters (the
*fingerprint*). Each fingerprint has its own schema-versioned file
``<profile>-<hash>.json`` under the store directory, holding the raw
per-round samples of the last N accepted runs of every cell. Server versions
are recorded with each run; a change of version makes the run incomparable
unless the run names the release under test (``--release``), because gating a
new release against the previous one is the point of the gate.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wanbench.ab import AbSide
from wanbench.census import not_counts_of, values_of
from wanbench.errors import ConfigError
from wanbench.gate.budgets import CellKey
from wanbench.gate.census_checks import CENSUS_VERSION, comparable_census
from wanbench.gate.integrity import Problem, problems_of
from wanbench.gate.samples import Samples, ab_side_of, reference_of, samples_of
from wanbench.results import CellResult, write_json_atomic

STORE_SCHEMA = 2
#: schemas this wanbench reads (1: rounds only; the run summaries are derived)
READABLE_SCHEMAS = (1, 2)
#: the parts of a run context that must be equal for two runs to be compared
ENV_FIELDS = ("profile", "topology_shape", "client", "params")
#: the client facts that are hardware; host name, Python version... are not
CLIENT_FIELDS = ("cpu_model", "cores")
#: workloads whose definition changed, by their revision today (1 before any change): an accepted run's cell of
#: another revision measured something else, and is not compared. tpcc 2 (2026-11-28): each terminal starts its
#: mix at a random card of the deck; before, short rounds at many terminals ran almost no Delivery, Order-Status
#: or Stock-Level (docs/tpcc.md)
WORKLOAD_REVISIONS = {"tpcc": 2}
#: where each revised workload's revisions are told (a gate message names it)
REVISION_DOCS = {"tpcc": "docs/tpcc.md"}
DEFAULT_KEEP = 5


@dataclass(frozen=True)
class Fingerprint:
    """What must not change between a baseline and the run it judges."""

    profile: str
    topology_shape: Mapping[str, Any]
    client: Mapping[str, Any]
    params: Mapping[str, Any]
    versions: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_context(cls, ctx: Mapping[str, Any]) -> Fingerprint:
        missing = [k for k in (*ENV_FIELDS, "versions") if k not in ctx]
        if missing:
            raise ConfigError(f"run context lacks {', '.join(missing)}: cannot fingerprint the environment")
        return cls(
            profile=str(ctx["profile"]),
            topology_shape=_plain(ctx["topology_shape"]),
            client=_plain({k: v for k, v in dict(ctx["client"]).items() if k in CLIENT_FIELDS}),
            params=_plain(ctx["params"]),
            versions=_plain(ctx["versions"]),
        )

    def env(self) -> dict[str, Any]:
        return {k: _plain(getattr(self, k)) for k in ENV_FIELDS}

    @property
    def key(self) -> str:
        blob = json.dumps(self.env(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    @property
    def filename(self) -> str:
        safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in self.profile)
        return f"{safe}-{self.key}.json"

    def to_json(self) -> dict[str, Any]:
        return {**self.env(), "versions": _plain(self.versions)}


def _plain(value: Any) -> Any:
    """JSON round-trip, so stored and live values compare equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def diff_fields(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """``["client.cores: 2 -> 4", ...]``: where two fingerprints differ."""
    out: list[str] = []
    for key in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{key}"
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out.extend(diff_fields(a, b, prefix=f"{name}."))
        elif a != b:
            out.append(f"{name}: {_short(a)} -> {_short(b)}")
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str) if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def cell_key(cell: CellResult | Mapping[str, Any]) -> CellKey:
    if isinstance(cell, CellResult):
        level, family, scenario, conc, path, workload = (
            cell.level, cell.family, cell.scenario, cell.concurrency, cell.path, cell.workload.workload,
        )
    else:
        level, family, scenario, conc, path, workload = (
            cell.get("level") or {}, cell["family"], cell["scenario"], cell["concurrency"],
            cell.get("path", ""), cell.get("workload", ""),
        )
    label = str(level.get("label", level.get("value", ""))) if isinstance(level, Mapping) else str(level)
    return CellKey(str(family), str(scenario), label, int(conc), str(path or ""), str(workload or ""))


def is_level0(cell: CellResult | Mapping[str, Any]) -> bool:
    """Level 0 of a fault family (or a plain workload cell, which has no level)."""
    level = cell.level if isinstance(cell, CellResult) else (cell.get("level") or {})
    return isinstance(level, Mapping) and level.get("value") == 0


@dataclass(frozen=True)
class RunCell:
    """One measured cell of a run, as the gate and the store read it."""

    key: CellKey
    samples: Samples
    level0: bool
    client: Mapping[str, Any] = field(default_factory=dict)
    #: integrity failures recorded in the cell (``wanbench.gate.integrity``)
    problems: tuple[Problem, ...] = ()
    #: the cell's WAN cost census values (``wanbench.census.values_of``)
    census: Mapping[str, float] = field(default_factory=dict)
    #: an interleaved cell's own level-0 rounds (``reference_of``); empty when not interleaved
    reference: Samples = field(default_factory=dict)
    #: census values that are not counts where they were measured (``wanbench.census.not_counts_of``)
    not_counts: Mapping[str, str] = field(default_factory=dict)
    #: an accepted run keeps only this cell's census (its verdict failed on census checks that fewer
    #: than ``min_runs`` accepted runs backed: ``census_only_keep``), never its rounds
    census_only: bool = False
    #: an A/B cell's baseline side (``wanbench.ab``); None in a run of one cluster
    ab: AbSide | None = None

    @classmethod
    def of(cls, cell: CellResult | Mapping[str, Any]) -> RunCell:
        data = cell.to_json() if isinstance(cell, CellResult) else cell
        client = dict(data.get("client") or {})
        return cls(cell_key(cell), samples_of(data), is_level0(cell), client, problems_of(data),
                   values_of(data.get("census")), reference_of(data), not_counts_of(data.get("census")),
                   ab=ab_side_of(data))


def run_entry_cells(cells: Sequence[RunCell]) -> dict[str, dict[str, Any]]:
    """A run's cells as the store keeps them: rounds, the run's summary, and
    for faulted cells the drop against the same run's level 0 (an
    interleaved cell's own level-0 rounds when it has them)."""
    level0 = {c.key.level0_group: summary_of(c.samples) for c in cells if c.level0 and c.samples}
    out: dict[str, dict[str, Any]] = {}
    for c in cells:
        if c.census_only:
            if c.census:
                out[c.key.id] = {"census": dict(c.census), "census_only": True}
            continue
        if not c.samples:
            continue
        summary = summary_of(c.samples)
        entry: dict[str, Any] = {"samples": c.samples, "summary": summary}
        if c.census:
            entry["census"] = dict(c.census)
        ref = None if c.level0 else (summary_of(c.reference) if c.reference else level0.get(c.key.level0_group))
        if ref and (drop := drops_of(summary, ref)):
            entry["drop"] = drop
        out[c.key.id] = entry
    return out


def within_run_spread(runs: Sequence[Samples]) -> dict[str, tuple[float, int]]:
    """Per metric, the pooled sd of log(round value) around each run's own
    mean, with its degrees of freedom (rounds less one per run): how far one
    round of a run strays from the others, whatever the machine's speed that
    day. Metrics with a value of 0 or less, or no run of two rounds, have none."""
    sums: dict[str, float] = {}
    dfs: dict[str, int] = {}
    for samples in runs:
        for metric, values in samples.items():
            logs = [math.log(v) for v in values if v > 0 and math.isfinite(v)]
            if len(logs) < 2 or len(logs) != len(values):
                continue
            mean = statistics.fmean(logs)
            sums[metric] = sums.get(metric, 0.0) + sum((x - mean) ** 2 for x in logs)
            dfs[metric] = dfs.get(metric, 0) + len(logs) - 1
    return {m: (math.sqrt(sums[m] / dfs[m]), dfs[m]) for m in sums}


def summary_of(samples: Samples) -> dict[str, float]:
    """One value per metric for a whole run: the median of its rounds. The
    run, not the round, is what the gate replicates."""
    return {m: statistics.median(v) for m, v in samples.items() if v}


def worsening(metric_higher_is_better: bool, value: float, reference: float) -> float:
    """How much worse ``value`` is than ``reference``, as a fraction (0.25 =
    25 % less QPS, or 25 % more latency); ``nan`` without a reference."""
    if not reference or math.isnan(reference) or math.isnan(value):
        return math.nan
    return (1.0 - value / reference) if metric_higher_is_better else (value / reference - 1.0)


def drops_of(summary: Mapping[str, float], level0: Mapping[str, float]) -> dict[str, float]:
    """The seeds' "% drop": each metric of a faulted cell against level 0 of
    the same run. Measured minutes apart in one run, it cancels how fast the
    machine happens to be today."""
    from wanbench.gate.budgets import METRICS  # the metric table lives with the budgets

    out: dict[str, float] = {}
    for metric, value in summary.items():
        if metric in METRICS and metric in level0 and metric != "error_rate":
            d = worsening(METRICS[metric], value, level0[metric])
            if not math.isnan(d):
                out[metric] = d
    return out


@dataclass(frozen=True)
class BaselineCell:
    """The pooled samples of one cell over the accepted runs that hold it."""

    key: CellKey
    samples: Samples
    runs: int
    accepted_at: str  # of the newest run
    versions: Mapping[str, Any]
    release: str
    #: per metric, the median of each accepted run: how much runs differ
    run_medians: Mapping[str, list[float]] = field(default_factory=dict)
    #: per metric, each accepted run's drop against its own level 0
    run_drops: Mapping[str, list[float]] = field(default_factory=dict)
    #: per census metric, each accepted run's value (``wanbench.census``)
    run_census: Mapping[str, list[float]] = field(default_factory=dict)
    #: per metric, how much the rounds of one accepted run differ: the pooled
    #: within-run sd of log(round value) and its degrees of freedom (``within_run_spread``)
    within: Mapping[str, tuple[float, int]] = field(default_factory=dict)

    def describe(self) -> str:
        """``baseline 2026-11-20 mariadb 10.11.19`` for verdict messages."""
        day = self.accepted_at[:10] if self.accepted_at else "unknown date"
        parts = [f"baseline {day}"]
        if self.release:
            parts.append(self.release)
        parts.extend(f"{k} {v}" for k, v in sorted(self.versions.items()))
        text = " ".join(parts)
        return text + (f", {self.runs} accepted runs" if self.runs > 1 else "")


@dataclass
class BaselineFile:
    path: Path
    fingerprint: Fingerprint
    runs: list[dict[str, Any]]

    def _recorded(self, key: CellKey) -> list[dict[str, Any]]:
        """The accepted runs that recorded the cell, of any revision of its workload."""
        return [r for r in self.runs if key.id in r.get("cells", {})]

    def cell(self, key: CellKey) -> BaselineCell | None:
        counted = [r for r in self._recorded(key) if _revision(r, key.workload) == _today(key)]
        holding = [r for r in counted if not r["cells"][key.id].get("census_only")]
        if not holding:
            return None
        pooled: Samples = {}
        medians: dict[str, list[float]] = {}
        drops: dict[str, list[float]] = {}
        census: dict[str, list[float]] = {}
        per_run: list[Samples] = []
        for run in holding:
            entry = run["cells"][key.id]
            samples = {m: [float(v) for v in vals] for m, vals in entry.get("samples", {}).items()}
            per_run.append(samples)
            for metric, vals in samples.items():
                pooled.setdefault(metric, []).extend(vals)
            summary = entry.get("summary") or summary_of(samples)
            for metric, value in summary.items():
                medians.setdefault(metric, []).append(float(value))
            for metric, value in (entry.get("drop") or {}).items():
                drops.setdefault(metric, []).append(float(value))
        for run in counted:  # the census of every accepted run, also where it kept only the census
            version = int(run.get("census_version", 1))
            for metric, value in comparable_census(run["cells"][key.id].get("census") or {}, version).items():
                census.setdefault(metric, []).append(float(value))
        newest = holding[-1]
        return BaselineCell(
            key, pooled, len(holding), str(newest.get("accepted_at", "")),
            dict(newest.get("versions", {})), str(newest.get("release", "")), medians, drops, census,
            within_run_spread(per_run),
        )

    def versions(self) -> Mapping[str, Any]:
        return dict(self.runs[-1].get("versions", {})) if self.runs else {}

    def missing_why(self, key: CellKey) -> str:
        """Why ``cell(key)`` found no accepted rounds of the cell: none recorded, only of another revision,
        or only its census (kept from a failed cell)."""
        revisions = {_revision(r, key.workload) for r in self._recorded(key)}
        if _today(key) in revisions:
            return f"{self.path.name} holds only the census of this cell (its accepted runs failed it), no rounds"
        if revisions:
            return (f"{self.path.name} holds {key.workload} cells of revision {', '.join(map(str, sorted(revisions)))}"
                    f" only; this wanbench runs revision {_today(key)}, which measures something else "
                    f"({REVISION_DOCS[key.workload]}): accept new runs (--baseline-save)")
        return f"{self.path.name} has no rounds of this cell"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": STORE_SCHEMA,
            "kind": "wanbench-baseline",
            "fingerprint": self.fingerprint.to_json(),
            "key": self.fingerprint.key,
            "runs": self.runs,
        }


def _revision(run: Mapping[str, Any], workload: str) -> int:
    """The revision of ``workload`` an accepted run measured (1: recorded before revisions were)."""
    return int((run.get("workload_revisions") or {}).get(workload, 1))


def _today(key: CellKey) -> int:
    return WORKLOAD_REVISIONS.get(key.workload, 1)


def read_store_file(path: str | Path) -> BaselineFile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable baseline file ({exc})") from None
    return parse_store(data, path)


def parse_store(data: Any, path: Path) -> BaselineFile:
    if not isinstance(data, dict) or data.get("kind") != "wanbench-baseline":
        raise ConfigError(f"{path}: not a wanbench baseline file")
    if data.get("schema") not in READABLE_SCHEMAS:
        raise ConfigError(
            f"{path}: baseline schema {data.get('schema')!r}, this wanbench reads "
            f"{', '.join(map(str, READABLE_SCHEMAS))}; move the old store aside and record new baselines"
        )
    fp = data["fingerprint"]
    return BaselineFile(path, Fingerprint.from_context(fp), list(data.get("runs", [])))


@dataclass(frozen=True)
class Lookup:
    """What the store holds for a run: a file, or why there is none."""

    file: BaselineFile | None
    incomparable: tuple[str, ...] = ()  # differing fields, when the environment changed
    note: str = ""


class BaselineStore:
    def __init__(self, directory: str | Path, *, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ConfigError(f"--baseline-keep must be at least 1, not {keep}")
        self.directory = Path(directory)
        self.keep = keep

    def files(self, profile: str | None = None) -> list[Path]:
        if not self.directory.is_dir():
            return []
        found = sorted(self.directory.glob("*.json"), key=lambda p: p.stat().st_mtime)
        return [p for p in found if profile is None or p.name.startswith(f"{profile}-")]

    def lookup(self, fp: Fingerprint, *, release: str = "", chain: str = "") -> Lookup:
        """The baseline file for ``fp``; a store file for another environment
        of the same profile makes the run incomparable, never compared.
        ``chain``: the runs a ``--baseline-runs`` chain is recording are left
        out, so the runs of one chain (the same code, by the user's word) are
        each judged against what was accepted before it, never against each
        other."""
        path = self.directory / fp.filename
        if path.exists():
            bf = read_store_file(path)
            if chain:
                bf.runs = [r for r in bf.runs if r.get("chain") != chain]
                if not bf.runs:
                    return Lookup(None, note=f"no baseline in {self.directory} from before this --baseline-runs "
                                             "chain")
            if bf.fingerprint.env() != fp.env():  # hash collision or edited file
                return Lookup(None, tuple(diff_fields(bf.fingerprint.env(), fp.env())))
            changed = diff_fields(dict(bf.versions()), dict(fp.versions), prefix="versions.")
            if changed and not release:
                return Lookup(
                    None,
                    tuple(changed),
                    note="server versions changed; name the release under test with --release to gate it "
                    "against this baseline",
                )
            return Lookup(bf)
        others = self.files(fp.profile)
        if not others:
            return Lookup(None, note=f"no baseline in {self.directory} for profile {fp.profile!r}")
        closest = read_store_file(others[-1])
        return Lookup(
            None,
            tuple(diff_fields(closest.fingerprint.env(), fp.env())),
            note=f"the store has baselines for another environment ({closest.path.name})",
        )

    def save(
        self,
        fp: Fingerprint,
        cells: Sequence[RunCell | CellResult | Mapping[str, Any]],
        *,
        release: str = "",
        accepted_at: str | None = None,
        run_id: str = "",
        chain: str = "",
    ) -> Path:
        """Record ``cells`` as one accepted run; keep the last N runs per cell.
        Each cell keeps its rounds, the run's summary (median per metric) and,
        for faulted cells, the drop against the run's own level 0."""
        path = self.directory / fp.filename
        bf = read_store_file(path) if path.exists() else BaselineFile(path, fp, [])
        when = accepted_at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        entry: dict[str, Any] = {
            "id": run_id or when,
            "accepted_at": when,
            "census_version": CENSUS_VERSION,
            "workload_revisions": dict(WORKLOAD_REVISIONS),
            "release": release,
            "versions": _plain(fp.versions),
            "cells": run_entry_cells([c if isinstance(c, RunCell) else RunCell.of(c) for c in cells]),
        }
        if chain:
            entry["chain"] = chain
        if not entry["cells"]:
            raise ConfigError("nothing to save: no cell of this run has per-round samples")
        bf.runs.append(entry)
        prune(bf.runs, self.keep)
        write_json_atomic(path, bf.to_json())
        return path


def prune(runs: list[dict[str, Any]], keep: int) -> None:
    """Per cell, drop the samples of all but the newest ``keep`` runs holding
    it; drop runs left with no cells."""
    seen: dict[str, int] = {}
    for run in reversed(runs):
        for cid in list(run["cells"]):
            seen[cid] = seen.get(cid, 0) + 1
            if seen[cid] > keep:
                del run["cells"][cid]
    runs[:] = [r for r in runs if r["cells"]]
