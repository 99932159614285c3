"""One round drawn from several load hosts, as one result: the hosts'
histograms, errors by code and per-second series added up, throughput the
sum, latency from the merged histogram, and how far apart the hosts'
starts and ends were.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.results import Round, SeriesPoint, WorkloadResult
from wanbench.topology import LoadHost
from wanbench.workloads.clientcpu import ClientLoad, assess
from wanbench.workloads.histogram import Histogram, merge_histograms
from wanbench.workloads.hostrecord import finish_record, histogram_of
from wanbench.workloads.sysbench_output import check_output, result_from_output


@dataclass
class HostRun:
    """What one load host did in one round (``text`` is redacted)."""

    host: LoadHost
    address: str
    threads: int
    command: str
    text: str = ""
    exit_status: int | None = None
    marker_at: float | None = None  # runner's monotonic clock: the window opened
    end_at: float | None = None  # the final report arrived
    released_at: float | None = None  # the host's own wall clock when its threads were released
    client: ClientLoad | None = None
    error: str = ""


@dataclass(frozen=True)
class RoundSpec:
    """How to run one round on every host: ``build(threads)`` -> (argv, env) of
    the local command (``SysbenchRunner.probe_command`` / ``oltp_command``)."""

    workload: str
    what: str
    threads: int
    build: Callable[[int], tuple[list[str], Mapping[str, str]]]
    marker: str
    limit_s: float
    extra: Mapping[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------------------------------
# Merging hosts into a round, rounds into a cell
# ----------------------------------------------------------------------------------------------------------------


def combine_hosts(spec: RoundSpec, runs: Sequence[HostRun]) -> WorkloadResult:
    """One round on K hosts as a one-round ``WorkloadResult``: counts and
    rates add up, percentiles come from the summed histogram, and the per-host
    numbers go to ``extra["load_hosts"]``."""
    parts: list[WorkloadResult] = []
    for run in runs:
        where = f"{spec.what} on load host {run.host.name}"
        if run.error:
            raise InfrastructureError(f"{where}: {run.error}")
        out = check_output(run.text, run.exit_status if run.exit_status is not None else -1, where)
        parts.append(result_from_output(spec.workload, run.threads, out, report=run.text, client=run.client,
                                        command=f"[{run.host.name}] {run.command}",
                                        extra={"sysbench_p95_ms": (out.final or {}).get("latency_pct_ms")}))
    hist = merge_histograms(_histogram(p) for p in parts)
    events = [int(p.extra.get("events", 0)) for p in parts]
    total = sum(events)
    avg = sum(p.latency_ms.avg * e for p, e in zip(parts, events, strict=True)) / total if total else math.nan
    mins = [p.latency_ms.min for p in parts if not math.isnan(p.latency_ms.min)]
    maxs = [p.latency_ms.max for p in parts if not math.isnan(p.latency_ms.max)]
    latency = hist.latency(avg=avg, min_ms=min(mins) if mins else None, max_ms=max(maxs) if maxs else None)
    rounds = [p.rounds[0] for p in parts]
    tps = [r.tps for r in rounds if not math.isnan(r.tps)]
    rnd = Round(seconds=max(r.seconds for r in rounds), queries=sum(r.queries for r in rounds),
                qps=sum(r.qps for r in rounds), tps=sum(tps) if tps else math.nan, latency_ms=latency,
                errors=sum(r.errors for r in rounds), reconnects=sum(r.reconnects for r in rounds))
    marks = [r.marker_at for r in runs if r.marker_at is not None]
    ends = [r.end_at for r in runs if r.end_at is not None]
    first = min(marks) if marks else None
    hosts = []
    for run, part, rr in zip(runs, parts, rounds, strict=True):
        hosts.append({
            "host": run.host.name, "address": run.address, "sql_host": run.host.sql_host, "threads": run.threads,
            "histogram": part.extra["histogram"],
            "rounds": [{
                "seconds": rr.seconds, "queries": rr.queries, "qps": rr.qps, "tps": rr.tps, "errors": rr.errors,
                "start_offset_ms": None if first is None or run.marker_at is None
                else round((run.marker_at - first) * 1000, 3),
                "sysbench_p95_ms": part.extra.get("sysbench_p95_ms"),
                "client": run.client.to_json() if run.client else None,
            }],
        })
    codes: dict[str, int] = {}
    for p in parts:
        for k, v in p.errors_by_code.items():
            codes[k] = codes.get(k, 0) + v
    record = {
        "hosts": hosts,
        "rounds": [{"qps": rnd.qps, "start_skew_ms": _spread(marks), "end_skew_ms": _spread(ends),
                    "release_skew_ms": _spread([r.released_at for r in runs if r.released_at is not None])}],
    }
    warnings = list(spec.extra.get("warnings", ()))
    skipped = [run.host.name for run, p in zip(runs, parts, strict=True) if not p.extra.get("warmup_excluded")]
    if spec.extra.get("warmup_s") and skipped:
        # sysbench skips a checkpoint whose time passed before its checkpoint thread got the CPU
        warnings.append(f"load host(s) {', '.join(skipped)} skipped the warm-up checkpoint (client starved of "
                        "CPU?): their numbers include the warm-up")
    extra: dict[str, Any] = {
        **{k: v for k, v in spec.extra.items()},
        "warnings": warnings,
        "histogram": hist.to_json(),
        "events": total,
        "warmup_excluded": all(p.extra.get("warmup_excluded", False) for p in parts),
        "warmup_errors_by_code": _sum_codes(p.extra.get("warmup_errors_by_code", {}) for p in parts),
        "commands": [c for p in parts for c in p.extra.get("commands", ())],
        "load_hosts": finish_record(record),
    }
    return WorkloadResult(
        workload=spec.workload, concurrency=spec.threads, rounds=(rnd,), latency_ms=latency,
        errors=rnd.errors, errors_by_code=dict(sorted(codes.items())),
        ignored_errors=sum(p.ignored_errors for p in parts), reconnects=rnd.reconnects,
        series=_sum_series(parts),
        reports=tuple(f"# load host {run.host.name} ({run.threads} threads)\n{run.text}" for run in runs),
        client=assess([r.client for r in runs if r.client is not None]),
        extra=extra,
    )


def _histogram(result: WorkloadResult) -> Histogram:
    return histogram_of(result.extra.get("histogram", ()))


def _spread(times: Sequence[float]) -> float | None:
    return round((max(times) - min(times)) * 1000, 3) if len(times) > 1 else (0.0 if times else None)


def _sum_codes(maps: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for k, v in m.items():
            out[str(k)] = out.get(str(k), 0) + int(v)
    return dict(sorted(out.items()))


def _sum_series(parts: Sequence[WorkloadResult]) -> tuple[SeriesPoint, ...]:
    """Per-second samples of all hosts by second: QPS and errors add up; the
    latency is the worst host's interval p95 (percentiles of different hosts
    cannot be combined per second without their histograms)."""
    by_t: dict[int, list[SeriesPoint]] = {}
    for p in parts:
        for pt in p.series:
            by_t.setdefault(int(round(pt.t)), []).append(pt)
    return tuple(SeriesPoint(float(t), sum(p.qps for p in pts), max(p.latency_ms for p in pts),
                             sum(p.errors for p in pts)) for t, pts in sorted(by_t.items()))
