"""Reading sysbench's report: wanbench's ``WBJSON`` lines (one per report, at
the warm-up checkpoint, at the end, and per worker thread), turned into
rounds, a time series and a ``WorkloadResult``; several runs merged into one
result; a failed run explained with sysbench's FATAL lines and a hint per
MySQL error code.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.results import Round, SeriesPoint, WorkloadResult
from wanbench.workloads.clientcpu import (
    ClientLoad,
    assess,
    merge_client,
)
from wanbench.workloads.histogram import Histogram, merge_histograms, parse_histogram
from wanbench.workloads.hostrecord import merge_records

_ERRNO = re.compile(r"(?:errno\s*=\s*|FATAL: error\s+)(\d+)")
_ERROR_HINTS: Mapping[str, str] = {
    "1040": "the server ran out of connections: raise max_connections or lower --threads",
    "1045": "access denied: check the user and password of the cluster",
    "1046": "no database selected: prepare the data first",
    "1049": "the database does not exist: prepare the data first",
    "1146": "a table is missing: prepare the data first (or run without --sysbench-cleanup)",
    "1461": "too many prepared statements: raise max_prepared_stmt_count or lower --threads/--tables",
    "2002": "cannot connect to the server (socket)",
    "2003": "cannot connect to the server: is it running and is the port right?",
    "2013": "the server closed the connection during a query",
}
_TAIL_LINES = 12


# --------------------------------------------------------------------------
# Parsing sysbench output
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SysbenchOutput:
    """One sysbench process's output, parsed.

    ``cumulative`` holds every cumulative report in order: with a warm-up the
    first is the warm-up checkpoint and the last the steady state.
    """

    intervals: tuple[Mapping[str, Any], ...]
    cumulative: tuple[Mapping[str, Any], ...]
    histogram: Histogram
    errors_by_code: Mapping[str, int]
    warmup_errors_by_code: Mapping[str, int]
    fatal: tuple[str, ...]

    @property
    def final(self) -> Mapping[str, Any] | None:
        return self.cumulative[-1] if self.cumulative else None

    @property
    def had_checkpoint(self) -> bool:
        return len(self.cumulative) > 1


def parse_output(text: str) -> SysbenchOutput:
    """Parse the ``WBJSON`` lines, the histogram and any ``FATAL`` lines.

    Lines that are not ours (sysbench's own text, interleaved output) are
    skipped. A final or per-thread ``WBJSON`` line that is not valid JSON is
    an error (a half-printed report means the numbers cannot be trusted); a
    broken per-second line only loses one point of the series.
    """
    intervals: list[Mapping[str, Any]] = []
    cumulative: list[Mapping[str, Any]] = []
    codes: dict[str, int] = {}
    warm: dict[str, int] = {}
    fatal: list[str] = []
    for line in text.splitlines():
        pos = line.find("WBJSON ")
        if pos >= 0:
            payload = line[pos + len("WBJSON "):].strip()
            try:
                rec = json.loads(payload)
            except json.JSONDecodeError as exc:
                if payload.startswith('{"type":"interval"'):
                    continue  # a per-second sample only feeds the series
                raise InfrastructureError(f"unreadable sysbench report line {line.strip()!r}: {exc}") from None
            kind = rec.get("type")
            if kind == "interval":
                intervals.append(rec)
            elif kind == "cumulative":
                cumulative.append(rec)
            elif kind == "thread":
                for k, v in rec.get("errors", {}).items():
                    codes[str(k)] = codes.get(str(k), 0) + int(v)
                for k, v in rec.get("warmup_errors", {}).items():
                    warm[str(k)] = warm.get(str(k), 0) + int(v)
        elif line.startswith("FATAL:") or "FATAL:" in line[:40]:
            fatal.append(line.strip())
    return SysbenchOutput(
        intervals=tuple(intervals),
        cumulative=tuple(cumulative),
        histogram=parse_histogram(text),
        errors_by_code=dict(sorted(codes.items())),
        warmup_errors_by_code=dict(sorted(warm.items())),
        fatal=tuple(fatal),
    )


def _f(rec: Mapping[str, Any], key: str) -> float:
    v = rec.get(key)
    return math.nan if v is None else float(v)


def round_from_output(out: SysbenchOutput) -> Round:
    """The steady-state numbers of one sysbench process as a ``Round``."""
    final = out.final
    if final is None:
        raise InfrastructureError("sysbench printed no final report (no cumulative WBJSON line)")
    seconds = _f(final, "interval")
    queries = int(_f(final, "reads") + _f(final, "writes") + _f(final, "other"))
    events = int(_f(final, "events"))
    latency = out.histogram.latency(
        avg=_f(final, "latency_avg_ms"), min_ms=_f(final, "latency_min_ms"), max_ms=_f(final, "latency_max_ms")
    )
    return Round(
        seconds=seconds,
        queries=queries,
        qps=queries / seconds if seconds > 0 else math.nan,
        tps=events / seconds if seconds > 0 else math.nan,
        latency_ms=latency,
        errors=int(_f(final, "errors")),
        reconnects=int(_f(final, "reconnects")),
    )


def series_from_output(out: SysbenchOutput, *, offset: float = 0.0) -> tuple[SeriesPoint, ...]:
    points = []
    for rec in out.intervals:
        interval = _f(rec, "interval") or 1.0
        queries = _f(rec, "reads") + _f(rec, "writes") + _f(rec, "other")
        points.append(SeriesPoint(
            t=round(offset + _f(rec, "t"), 3),
            qps=queries / interval,
            latency_ms=_f(rec, "latency_pct_ms"),
            errors=_f(rec, "errors") / interval,
        ))
    return tuple(points)


def result_from_output(
    workload: str, concurrency: int, out: SysbenchOutput, *, report: str, client: ClientLoad | None,
    command: str = "", extra: Mapping[str, Any] | None = None,
) -> WorkloadResult:
    """One sysbench process as a one-round ``WorkloadResult`` (see ``merge_results``)."""
    rnd = round_from_output(out)
    final = out.final or {}
    return WorkloadResult(
        workload=workload,
        concurrency=concurrency,
        rounds=(rnd,),
        latency_ms=rnd.latency_ms,
        errors=rnd.errors,
        errors_by_code=dict(out.errors_by_code),
        ignored_errors=rnd.errors,
        reconnects=rnd.reconnects,
        series=series_from_output(out),
        reports=(report,),
        client=assess([client] if client else []),
        extra={
            "histogram": out.histogram.to_json(),
            "events": int(_f(final, "events")),
            "warmup_excluded": out.had_checkpoint,
            "warmup_errors_by_code": dict(out.warmup_errors_by_code),
            "commands": [command] if command else [],
            **(extra or {}),
        },
    )


def merge_results(results: Sequence[WorkloadResult]) -> WorkloadResult:
    """Several one-round results of the same cell as one result.

    Percentiles come from the merged histograms (bucket counts add up);
    averages are weighted by events; series are laid end to end.
    """
    if not results:
        raise ValueError("merge_results needs at least one result")
    first = results[0]
    hist = merge_histograms(Histogram(tuple((float(v), int(c)) for v, c in r.extra.get("histogram", ())))
                            for r in results)
    events = [int(r.extra.get("events", r.queries)) for r in results]
    total_events = sum(events)
    avg = (sum(r.latency_ms.avg * e for r, e in zip(results, events, strict=True)) / total_events
           if total_events else math.nan)
    mins = [r.latency_ms.min for r in results if not math.isnan(r.latency_ms.min)]
    maxs = [r.latency_ms.max for r in results if not math.isnan(r.latency_ms.max)]
    latency = hist.latency(avg=avg, min_ms=min(mins) if mins else None, max_ms=max(maxs) if maxs else None)
    codes: dict[str, int] = {}
    warm: dict[str, int] = {}
    for r in results:
        for k, v in r.errors_by_code.items():
            codes[k] = codes.get(k, 0) + v
        for k, v in r.extra.get("warmup_errors_by_code", {}).items():
            warm[k] = warm.get(k, 0) + v
    series: list[SeriesPoint] = []
    offset = 0.0
    for r in results:
        for p in r.series:
            series.append(SeriesPoint(round(p.t + offset, 3), p.qps, p.latency_ms, p.errors))
        if r.series:
            offset = series[-1].t
    extra: dict[str, Any] = {k: v for k, v in first.extra.items()
                             if k not in ("histogram", "events", "commands", "warmup_errors_by_code", "warnings",
                                          "load_hosts")}
    if any("load_hosts" in r.extra for r in results):  # rounds drawn from several load hosts
        extra["load_hosts"] = merge_records([r.extra["load_hosts"] for r in results if "load_hosts" in r.extra])
    extra.update(
        histogram=hist.to_json(),
        events=total_events,
        warmup_excluded=all(r.extra.get("warmup_excluded", False) for r in results),
        warmup_errors_by_code=dict(sorted(warm.items())),
        commands=[c for r in results for c in r.extra.get("commands", ())],
        warnings=[w for r in results for w in r.extra.get("warnings", ())],
    )
    return WorkloadResult(
        workload=first.workload,
        concurrency=first.concurrency,
        rounds=tuple(rnd for r in results for rnd in r.rounds),
        latency_ms=latency,
        errors=sum(r.errors for r in results),
        errors_by_code=dict(sorted(codes.items())),
        ignored_errors=sum(r.ignored_errors for r in results),
        reconnects=sum(r.reconnects for r in results),
        series=tuple(series),
        reports=tuple(rep for r in results for rep in r.reports),
        client=merge_client(r.client for r in results),
        extra=extra,
    )


def check_output(text: str, exit_status: int, what: str) -> SysbenchOutput:
    """Parse a finished run; raise ``InfrastructureError`` with sysbench's
    FATAL lines and a hint per MySQL error code when it did not succeed."""
    out = parse_output(text)
    if exit_status != 0 or out.final is None:
        codes = sorted({m for line in out.fatal for m in _ERRNO.findall(line)})
        hints = [f"error {c}: {_ERROR_HINTS[c]}" for c in codes if c in _ERROR_HINTS]
        distinct = list(dict.fromkeys(out.fatal))
        detail = " | ".join(distinct[-4:]) if distinct else tail_of(text)
        msg = f"{what}: sysbench exited {exit_status}"
        if out.final is None and exit_status == 0:
            msg = f"{what}: sysbench printed no final report"
        raise InfrastructureError("; ".join([msg, detail, *hints]))
    return out


def rate_summary(rate: float, out: SysbenchOutput) -> dict[str, Any]:
    final = out.final or {}
    seconds = _f(final, "interval")
    events = _f(final, "events")
    achieved = events / seconds if seconds > 0 else math.nan
    queues = [_f(r, "queue") for r in out.intervals if r.get("queue") is not None]
    # sysbench's open loop arrives as a Poisson process (exponential gaps), so the count itself varies
    # by sqrt(expected): over 8 s at 200/s a 5 % shortfall is 2 standard deviations and happens to a
    # system with room to spare in about 1 run of 40. Falling behind is called only when the count is both
    # 5 % short and 3 standard deviations short (1 run in 700 by chance); long runs keep the 5 % rule.
    expected = rate * seconds
    sustained = bool(seconds > 0 and events >= min(0.95 * expected, expected - 3 * math.sqrt(expected)))
    return {
        "target": rate,
        "achieved": achieved,
        "max_queue": max(queues) if queues else None,
        "sustained": sustained,
        "message": "" if sustained else (
            f"open loop: asked for {rate:g} events/s, got {achieved:.0f}: the system is overloaded at this rate "
            "and latency includes queueing"),
    }


def tail_of(text: str, n: int = _TAIL_LINES) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not re.match(r"^\s*\d+\.\d+ \|", ln)]
    return " | ".join(lines[-n:]) if lines else "(no output)"
