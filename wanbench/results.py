"""Measured numbers: one ``Round`` per repetition, one ``WorkloadResult`` per
workload run, one ``CellResult`` per test (a cell of the scenario matrix), and
the ``--results-json`` document that holds them.

Latencies are milliseconds, rates are per second. Secrets never enter here:
``CellResult.to_json`` is the only way out and carries no credentials.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1
PERCENTILES = ("p50", "p90", "p95", "p99", "p999")


#: YCSB's operations, as go-ycsb names them in its summary (per-operation
#: metrics ``ops.READ`` and ``latency_ms.p99.READ`` in budgets and reports)
YCSB_OPS = ("READ", "UPDATE", "INSERT", "SCAN", "READ_MODIFY_WRITE")

@dataclass(frozen=True)
class Latency:
    """Latency summary in milliseconds (``p999`` is the 99.9th percentile)."""

    avg: float = math.nan
    min: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p95: float = math.nan
    p99: float = math.nan
    p999: float = math.nan
    max: float = math.nan

    def to_json(self) -> dict[str, float | None]:
        return {k: finite_or_none(getattr(self, k)) for k in ("avg", "min", "p50", "p90", "p95", "p99", "p999", "max")}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Latency:
        fields = [k for k in cls.__dataclass_fields__ if k in data]
        return cls(**{k: math.nan if data.get(k) is None else float(data[k]) for k in fields})


@dataclass(frozen=True)
class Round:
    """One repetition: a fixed number of queries (probes) or a fixed time (OLTP)."""

    seconds: float
    queries: int
    qps: float
    tps: float = math.nan
    latency_ms: Latency = field(default_factory=Latency)
    errors: int = 0
    reconnects: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": finite_or_none(self.seconds),
            "queries": self.queries,
            "qps": finite_or_none(self.qps),
            "tps": finite_or_none(self.tps),
            "latency_ms": self.latency_ms.to_json(),
            "errors": self.errors,
            "reconnects": self.reconnects,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Round:
        return cls(
            seconds=_float(data["seconds"]),
            queries=int(data["queries"]),
            qps=_float(data["qps"]),
            tps=math.nan if data.get("tps") is None else float(data["tps"]),
            latency_ms=Latency.from_json(data.get("latency_ms", {})),
            errors=int(data.get("errors", 0)),
            reconnects=int(data.get("reconnects", 0)),
        )


@dataclass(frozen=True)
class SeriesPoint:
    """One per-second sample of a run (``t`` seconds since the run started)."""

    t: float
    qps: float
    latency_ms: float  # the interval's 95th percentile (or avg when that is all we have)
    errors: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {"t": self.t, "qps": self.qps, "latency_ms": self.latency_ms, "errors": self.errors}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SeriesPoint:
        return cls(_float(data["t"]), _float(data["qps"]), _float(data["latency_ms"]), _float(data.get("errors", 0)))


@dataclass(frozen=True)
class WorkloadResult:
    """What one workload engine measured for one cell, over all its rounds."""

    workload: str
    concurrency: int
    rounds: tuple[Round, ...]
    latency_ms: Latency
    errors: int = 0
    errors_by_code: Mapping[str, int] = field(default_factory=dict)
    ignored_errors: int = 0
    reconnects: int = 0
    series: tuple[SeriesPoint, ...] = ()
    reports: tuple[str, ...] = ()  # raw load-generator output, one per round
    client: Mapping[str, Any] = field(default_factory=dict)  # cpu, saturation flag
    extra: Mapping[str, Any] = field(default_factory=dict)  # engine-specific (tpmC, ...)

    @property
    def qps(self) -> float:
        """Median of the rounds' QPS: robust to one disturbed round."""
        return statistics.median(r.qps for r in self.rounds) if self.rounds else math.nan

    @property
    def tps(self) -> float:
        vals = [r.tps for r in self.rounds if not math.isnan(r.tps)]
        return statistics.median(vals) if vals else math.nan

    @property
    def queries(self) -> int:
        return sum(r.queries for r in self.rounds)

    @property
    def error_rate(self) -> float:
        total = self.queries + self.errors
        return self.errors / total if total else 0.0

    def seconds_summary(self) -> dict[str, float]:
        """The seed tables' avg/min/max seconds per round."""
        secs = [r.seconds for r in self.rounds]
        if not secs:
            return {"avg": math.nan, "min": math.nan, "max": math.nan}
        return {"avg": statistics.fmean(secs), "min": min(secs), "max": max(secs)}

    @classmethod
    def from_json(cls, cell: Mapping[str, Any]) -> WorkloadResult:
        """The workload part of a cell's ``to_json`` (the raw load-generator
        reports are not in it: they stay with the process that measured)."""
        return cls(
            workload=str(cell["workload"]),
            concurrency=int(cell["concurrency"]),
            rounds=tuple(Round.from_json(r) for r in cell.get("rounds") or ()),
            latency_ms=Latency.from_json(cell.get("latency_ms") or {}),
            errors=int(cell.get("errors", 0)),
            errors_by_code=dict(cell.get("errors_by_code") or {}),
            ignored_errors=int(cell.get("ignored_errors", 0)),
            reconnects=int(cell.get("reconnects", 0)),
            series=tuple(SeriesPoint.from_json(p) for p in cell.get("series") or ()),
            client=dict(cell.get("client") or {}),
            # load_hosts sits at the cell's top level in to_json (several load hosts): back into extra
            extra={**dict(cell.get("workload_extra") or {}),
                   **({"load_hosts": cell["load_hosts"]} if cell.get("load_hosts") is not None else {})},
        )


@dataclass
class CellResult:
    """One test's outcome: the cell (family, scenario, level, concurrency),
    the fault that was in place and the workload's numbers."""

    test_id: str
    family: str
    scenario: str
    level: Mapping[str, Any]
    concurrency: int
    workload: WorkloadResult
    fault: Mapping[str, Any] = field(default_factory=dict)  # kind, value, mechanism, evidence
    path: str = ""
    verdict: Mapping[str, Any] | None = None
    started: str = ""
    finished: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    #: the cluster that measured the cell, in a run over several (docs/scale-out.md); None in a one-cluster run
    cluster: Mapping[str, Any] | None = None
    #: the WAN cost census (``wanbench.census``): round trips, bytes and work per operation
    census: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CellResult:
        """A cell back from its ``to_json`` (how an xdist worker's cells reach the controller)."""
        return cls(
            test_id=str(data["test_id"]),
            family=str(data["family"]),
            scenario=str(data["scenario"]),
            level=dict(data.get("level") or {}),
            concurrency=int(data["concurrency"]),
            workload=WorkloadResult.from_json(data),
            fault=dict(data.get("fault") or {}),
            path=str(data.get("path") or ""),
            verdict=dict(data["verdict"]) if data.get("verdict") else None,
            started=str(data.get("started") or ""),
            finished=str(data.get("finished") or ""),
            extra=dict(data.get("extra") or {}),
            cluster=dict(data["cluster"]) if data.get("cluster") else None,
            census=dict(data.get("census") or {}),
        )

    def metrics(self) -> dict[str, float]:
        """Headline numbers by metric name, as budgets and baselines use them."""
        w = self.workload
        out = {
            "qps": w.qps,
            "tps": w.tps,
            "error_rate": w.error_rate,
        }
        for k in ("avg",) + PERCENTILES + ("max",):
            out[f"latency_ms.{k}"] = getattr(w.latency_ms, k)
        if "tpmc" in w.extra:
            out["tpmc"] = float(w.extra["tpmc"])
        for op, v in (w.extra.get("per_op") or {}).items():  # YCSB
            if not op.endswith("_ERROR"):
                out[f"ops.{op}"] = float(v["ops"])
                out[f"latency_ms.p99.{op}"] = float(v["p99_us"]) / 1000.0
        return out

    def to_json(self) -> dict[str, Any]:
        w = self.workload
        extra = {k: v for k, v in w.extra.items() if k != "load_hosts"}
        remote = {"load_hosts": w.extra["load_hosts"]} if "load_hosts" in w.extra else {}
        return sanitize({
            "test_id": self.test_id,
            "family": self.family,
            "scenario": self.scenario,
            "level": dict(self.level),
            "path": self.path,
            "fault": dict(self.fault),
            "workload": w.workload,
            "concurrency": self.concurrency,
            "rounds": [r.to_json() for r in w.rounds],
            "seconds": w.seconds_summary(),
            "qps": finite_or_none(w.qps),
            "tps": finite_or_none(w.tps),
            "latency_ms": w.latency_ms.to_json(),
            "errors": w.errors,
            "errors_by_code": dict(w.errors_by_code),
            "ignored_errors": w.ignored_errors,
            "reconnects": w.reconnects,
            "error_rate": w.error_rate,
            "series": [p.to_json() for p in w.series],
            "client": dict(w.client),
            "workload_extra": extra,
            **remote,
            "verdict": dict(self.verdict) if self.verdict else None,
            "started": self.started,
            "finished": self.finished,
            "extra": self.extra,
            **({"cluster": dict(self.cluster)} if self.cluster else {}),
            **({"census": self.census} if self.census else {}),
        })


def _float(x: Any) -> float:
    """A number read back from JSON, where ``null`` stands for NaN."""
    return math.nan if x is None else float(x)


def finite_or_none(x: float | None) -> float | None:
    """``x``, or None for NaN and +/-Infinity (JSON's ``null``)."""
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def sanitize(obj: Any) -> Any:
    """A strict-JSON copy of ``obj``: NaN and +/-Infinity become ``null``
    (a zero-second round or a missing latency must not write a bare ``NaN``,
    which JSON does not have), tuples become lists, mapping keys strings."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


def dumps_strict(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` of ``sanitize(data)`` that refuses any non-finite number."""
    return json.dumps(sanitize(data), allow_nan=False, **kwargs)


def results_schema_path() -> Path:
    """The JSON Schema of the ``--results-json`` document (shipped in the package)."""
    return Path(__file__).resolve().parent / "schemas" / "results.schema.json"


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) via a temporary file in the same directory, then
    rename: a crash never leaves a half-written file, and readers (the lab
    watchdog polling a lease, Allure) see the old file or the new one. The
    temporary file has a unique hidden name (``.NAME.XXXXXXXX``), so two
    writers never share it and no ``*.json`` glob picks it up. The file is
    readable by its owner only (``mkstemp``), as wanbench's state files are."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> None:
    """Write strict JSON (see ``sanitize``) atomically (see ``write_text_atomic``):
    every JSON file wanbench writes (results, baselines, lab state, PID files,
    toxic leases, Allure's files) goes through here."""
    text = dumps_strict(data, indent=2, sort_keys=False)  # before the file exists: a bad value leaves none
    write_text_atomic(path, text + "\n")


def results_document(
    run: Mapping[str, Any], cells: Iterable[CellResult], tables: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": SCHEMA, "run": dict(run), "results": [c.to_json() for c in cells]}
    if tables:
        doc["tables"] = dict(tables)
    return sanitize(doc)


def drop_table(cells: Sequence[Mapping[str, Any]], family: str) -> list[dict[str, Any]]:
    """The seed 000 summary: per scenario and concurrency, QPS at each level
    and the drop against level 0 (positive = slower). Input: result dicts."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for c in cells:
        if c["family"] != family or c.get("qps") is None:
            continue
        key = (c["scenario"], c["concurrency"])
        row = rows.setdefault(key, {"scenario": c["scenario"], "concurrency": c["concurrency"], "levels": {}})
        row["levels"][c["level"]["label"]] = {"value": c["level"]["value"], "qps": c["qps"]}
        if c.get("cluster"):  # a run over several clusters: a scenario's levels all ran on one
            clusters = row.setdefault("clusters", [])
            if c["cluster"]["name"] not in clusters:
                clusters.append(c["cluster"]["name"])
    out = []
    for (_scenario, _conc), row in sorted(rows.items()):
        levels = row["levels"]
        base = next((v["qps"] for v in levels.values() if v["value"] == 0), None)
        for v in levels.values():
            v["drop_pct"] = None if not base else (base - v["qps"]) / base * 100.0
        row["baseline_qps"] = base
        out.append(row)
    return out
