"""TPC-C's model and numbers: the mix, keying and think times, the options of a
run; and, as go-tpc reports them, per transaction type, counts, errors and
latency histograms read from tpcc.lua's ``TPCC_STATS`` lines, merged over
rounds and summarised (tpmC, tpmTotal, efficiency, the per-type table), with
the efficiency that keying and think time allow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.results import Latency

TYPES = ("NEW_ORDER", "PAYMENT", "ORDER_STATUS", "DELIVERY", "STOCK_LEVEL")
MIX_PCT = {"NEW_ORDER": 45.0, "PAYMENT": 43.0, "ORDER_STATUS": 4.0, "DELIVERY": 4.0, "STOCK_LEVEL": 4.0}
# Clause 5.2.5.7 keying time and mean think time, seconds (mirrors tpcc.lua).
KEYING_S = {"NEW_ORDER": 18.0, "PAYMENT": 3.0, "ORDER_STATUS": 2.0, "DELIVERY": 2.0, "STOCK_LEVEL": 2.0}
THINK_S = {"NEW_ORDER": 12.0, "PAYMENT": 12.0, "ORDER_STATUS": 10.0, "DELIVERY": 5.0, "STOCK_LEVEL": 5.0}
# The spec's ceiling: 10 terminals per warehouse at zero response time give
# 12.86 New-Orders per minute per warehouse; go-tpc divides by it too.
TPMC_PER_WAREHOUSE = 12.86
LOG_BASE = math.log(1.01)  # tpcc.lua's histogram bucket width
STATS_PREFIX = "TPCC_STATS "
LOAD_PREFIX = "TPCC_LOAD "


@dataclass(frozen=True)
class TpccOptions:
    """One TPC-C run. ``time_scale`` multiplies keying and think times (tests use 0.01)."""

    warehouses: int = 1
    threads: int = 4
    duration: float = 30.0
    wait: bool = False
    time_scale: float = 1.0
    rollback_pct: int = 1
    load_batch: int = 500
    sysbench: str = "sysbench"
    grace: float = 60.0  # beyond duration before the run is killed

    def __post_init__(self) -> None:
        if self.warehouses < 1 or self.threads < 1:
            raise ConfigError(f"tpcc: warehouses ({self.warehouses}) and threads ({self.threads}) must be >= 1")
        if self.duration <= 0 or self.time_scale <= 0:
            raise ConfigError(f"tpcc: duration ({self.duration}) and time_scale ({self.time_scale}) must be > 0")
        if not 0 <= self.rollback_pct <= 100:
            raise ConfigError(f"tpcc: rollback_pct {self.rollback_pct} is not a percentage")

    @property
    def label(self) -> str:
        return f"w{self.warehouses}-t{self.threads}" + ("-wait" if self.wait else "")


# ------------------------------------------------------------------ stats


@dataclass
class Bucketed:
    """Count, sum, min, max and log histogram of one kind of outcome."""

    count: int = 0
    sum_us: float = 0.0
    min_us: float = math.inf
    max_us: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)

    def merge(self, data: Mapping[str, Any]) -> None:
        n = int(data.get("count", 0))
        if not n:
            return
        self.count += n
        self.sum_us += float(data.get("sum_us", 0.0))
        self.max_us = max(self.max_us, float(data.get("max_us", 0.0)))
        mn = float(data.get("min_us", -1))
        if mn >= 0:
            self.min_us = min(self.min_us, mn)
        for k, v in (data.get("hist") or {}).items():
            b = int(k)
            self.hist[b] = self.hist.get(b, 0) + int(v)

    def absorb(self, other: Bucketed) -> None:
        """Add ``other``'s outcomes to these (rounds one after another)."""
        self.merge({"count": other.count, "sum_us": other.sum_us, "max_us": other.max_us,
                    "min_us": other.min_us if other.min_us != math.inf else -1,
                    "hist": {str(k): v for k, v in other.hist.items()}})

    def percentile_ms(self, pct: float) -> float:
        """Upper edge of the bucket holding the pct-th sample (at most the true max)."""
        if not self.count:
            return math.nan
        rank = max(1, math.ceil(pct / 100.0 * self.count))
        seen = 0
        for b in sorted(self.hist):
            seen += self.hist[b]
            if seen >= rank:
                return min(math.exp((b + 1) * LOG_BASE), self.max_us) / 1000.0
        return self.max_us / 1000.0

    def latency(self) -> Latency:
        if not self.count:
            return Latency()
        return Latency(
            avg=self.sum_us / self.count / 1000.0,
            min=(self.min_us if self.min_us != math.inf else math.nan) / 1000.0,
            p50=self.percentile_ms(50), p90=self.percentile_ms(90), p95=self.percentile_ms(95),
            p99=self.percentile_ms(99), p999=self.percentile_ms(99.9), max=self.max_us / 1000.0,
        )


@dataclass
class Outcomes:
    """One kind of operation's successes and failures (latencies by bucket)
    and its errors by code: what TPC-C's transactions and YCSB's operations
    both count."""

    ok: Bucketed = field(default_factory=Bucketed)
    err: Bucketed = field(default_factory=Bucketed)
    codes: dict[str, int] = field(default_factory=dict)

    @property
    def attempts(self) -> int:
        return self.ok.count + self.err.count

    def absorb(self, other: Outcomes) -> None:
        """``other``'s counts added to these (rounds one after another),
        with a subclass's own whole-number counters."""
        self.ok.absorb(other.ok)
        self.err.absorb(other.err)
        add_counts(self.codes, other.codes)
        for f in dataclasses.fields(self):
            if f.type in ("int", int):
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name, 0))


OutcomesT = TypeVar("OutcomesT", bound=Outcomes)


def merge_outcomes(names: Sequence[str], parts: Iterable[Mapping[str, OutcomesT]],
                   make: Callable[[], OutcomesT]) -> dict[str, OutcomesT]:
    """Each name's outcomes over ``parts``, added up (every name in ``names`` present)."""
    out = {name: make() for name in names}
    for part in parts:
        for name, o in part.items():
            out.setdefault(name, make()).absorb(o)
    return out


@dataclass
class TypeStats(Outcomes):
    rollbacks: int = 0


@dataclass
class RunStats:
    """Per-thread TPCC_STATS lines merged."""

    seconds: float
    threads: int
    types: dict[str, TypeStats]
    waits: int = 0
    wait_requested_s: float = 0.0
    wait_actual_s: float = 0.0

    def waits_json(self) -> dict[str, float]:
        over = (self.wait_actual_s - self.wait_requested_s) / self.waits * 1000.0 if self.waits else 0.0
        return {"count": self.waits, "requested_s": round(self.wait_requested_s, 3),
                "actual_s": round(self.wait_actual_s, 3), "oversleep_ms_avg": round(over, 3)}


def parse_output(text: str) -> RunStats:
    """Merge every thread's ``TPCC_STATS`` line of a sysbench run's stdout."""
    types = {t: TypeStats() for t in TYPES}
    seconds = 0.0
    threads = 0
    waits, requested, actual = 0, 0.0, 0.0
    for line in text.splitlines():
        if not line.startswith(STATS_PREFIX):
            continue
        try:
            data = json.loads(line[len(STATS_PREFIX):])
        except ValueError as exc:
            raise InfrastructureError(f"tpcc: unreadable stats line from sysbench ({exc}): {line[:200]}") from None
        threads += 1
        seconds = max(seconds, float(data.get("seconds", 0.0)))
        w = data.get("waits") or {}
        waits += int(w.get("count", 0))
        requested += float(w.get("requested_us", 0.0)) / 1e6
        actual += float(w.get("actual_us", 0.0)) / 1e6
        for name, d in (data.get("types") or {}).items():
            ts = types.setdefault(name, TypeStats())
            ts.ok.merge(d)
            ts.rollbacks += int(d.get("rollbacks", 0))
            err = d.get("err") or {}
            ts.err.merge(err)
            for code, n in (err.get("codes") or {}).items():
                ts.codes[str(code)] = ts.codes.get(str(code), 0) + int(n)
    if not threads:
        raise InfrastructureError("tpcc: sysbench printed no TPCC_STATS line (did every thread die?)")
    return RunStats(seconds=seconds, threads=threads, types=types, waits=waits, wait_requested_s=requested,
                    wait_actual_s=actual)


# ---------------------------------------------------------------- summary


@dataclass(frozen=True)
class SummaryRow:
    """One go-tpc ``[Summary]`` line."""

    name: str
    takes_s: float
    count: int
    tpm: float
    sum_ms: float
    latency: Latency

    def render(self) -> str:
        lat = self.latency
        return (f"[Summary] {self.name} - Takes(s): {self.takes_s:.1f}, Count: {self.count}, TPM: {self.tpm:.1f}, "
                f"Sum(ms): {self.sum_ms:.1f}, Avg(ms): {lat.avg:.1f}, 50th(ms): {lat.p50:.1f}, "
                f"90th(ms): {lat.p90:.1f}, 95th(ms): {lat.p95:.1f}, 99th(ms): {lat.p99:.1f}, "
                f"99.9th(ms): {lat.p999:.1f}, Max(ms): {lat.max:.1f}")

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "tpm": self.tpm, "sum_ms": self.sum_ms, "takes_s": self.takes_s,
                **{k: v for k, v in self.latency.to_json().items()}}


@dataclass(frozen=True)
class TpccSummary:
    seconds: float
    warehouses: int
    threads: int
    wait: bool
    time_scale: float
    rows: tuple[SummaryRow, ...]
    tpmc: float
    tpm_total: float
    efficiency: float
    mix: Mapping[str, float]
    rollbacks: int
    errors_by_code: Mapping[str, int]

    def row(self, name: str) -> SummaryRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def render(self) -> str:
        """go-tpc's summary block, then a line that says what efficiency means here."""
        lines = [r.render() for r in self.rows]
        lines.append(f"tpmC: {self.tpmc:.1f}, tpmTotal: {self.tpm_total:.1f}, efficiency: {self.efficiency:.1f}%")
        if self.wait:
            scale = "" if self.time_scale == 1 else f", keying/think times x{self.time_scale:g} (efficiency scaled)"
            lines.append(f"# efficiency = tpmC / ({TPMC_PER_WAREHOUSE} x {self.warehouses} warehouses) with "
                         f"keying and think times{scale}; 100% needs {10 * self.warehouses} terminals")
        else:
            lines.append("# efficiency is only meaningful with --tpcc-wait (keying and think times); "
                         "without waits it only shows how far past the spec's ceiling the closed loop runs")
        return "\n".join(lines)


def summarize(stats: RunStats, opts: TpccOptions) -> TpccSummary:
    """tpmC = New-Orders (rolled-back ones included, clause 5.4.2) per minute."""
    secs = stats.seconds if stats.seconds > 0 else opts.duration
    rows: list[SummaryRow] = []
    codes: dict[str, int] = {}
    for name in sorted(stats.types):
        ts = stats.types[name]
        for suffix, b in (("", ts.ok), ("_ERR", ts.err)):
            if b.count:
                rows.append(SummaryRow(name + suffix, secs, b.count, b.count / secs * 60.0, b.sum_us / 1000.0,
                                       b.latency()))
        for code, n in ts.codes.items():
            codes[code] = codes.get(code, 0) + n
    no = stats.types.get("NEW_ORDER", TypeStats()).ok.count
    tpmc = no / secs * 60.0
    tpm_total = sum(ts.ok.count for ts in stats.types.values()) / secs * 60.0
    ceiling = TPMC_PER_WAREHOUSE * opts.warehouses / (opts.time_scale if opts.wait else 1.0)
    attempts = sum(ts.attempts for ts in stats.types.values())
    mix = {t: (stats.types[t].attempts / attempts * 100.0 if attempts else math.nan) for t in TYPES}
    return TpccSummary(
        seconds=secs, warehouses=opts.warehouses, threads=opts.threads, wait=opts.wait,
        time_scale=opts.time_scale, rows=tuple(rows), tpmc=tpmc, tpm_total=tpm_total,
        efficiency=tpmc / ceiling * 100.0, mix=mix,
        rollbacks=stats.types.get("NEW_ORDER", TypeStats()).rollbacks, errors_by_code=codes,
    )


def expected_efficiency(summary: TpccSummary, *, oversleep_s: float = 0.0) -> float:
    """Efficiency the waits allow given the measured response times: each
    terminal's mean cycle is keying + response + think, weighted by the mix.
    ``oversleep_s`` (mean per wait, two waits per cycle) accounts for a loaded
    client that wakes up late."""
    cycle = 2 * oversleep_s
    for t in TYPES:
        row = summary.row(t)
        resp_s = row.latency.avg / 1000.0 if row and row.count else 0.0
        cycle += MIX_PCT[t] / 100.0 * ((KEYING_S[t] + THINK_S[t]) * summary.time_scale + resp_s)
    tpmc = summary.threads * (MIX_PCT["NEW_ORDER"] / 100.0) / cycle * 60.0
    return tpmc / (TPMC_PER_WAREHOUSE * summary.warehouses / summary.time_scale) * 100.0


_QUERIES = re.compile(r"^\s*queries:\s+(\d+)", re.M)


def add_counts(into: dict[str, int], more: Mapping[str, int]) -> None:
    """Counts by name (error codes, ...) added into ``into``."""
    for name, n in more.items():
        into[name] = into.get(name, 0) + n


def merge_stats(parts: Sequence[RunStats]) -> RunStats:
    """Rounds one after another: counts and histograms add, and so do seconds."""
    types = merge_outcomes(TYPES, (p.types for p in parts), TypeStats)
    return RunStats(seconds=sum(p.seconds for p in parts), threads=max((p.threads for p in parts), default=0),
                    types=types, waits=sum(p.waits for p in parts),
                    wait_requested_s=sum(p.wait_requested_s for p in parts),
                    wait_actual_s=sum(p.wait_actual_s for p in parts))
