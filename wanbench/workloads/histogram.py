"""sysbench's latency histogram: parse it, merge rounds, compute percentiles.

sysbench 1.0.20 keeps latencies in 1024 logarithmic buckets between 1 us and
100 s (each ~1.8 % wide) and prints the non-empty ones with ``--histogram``::

    Latency histogram (values are in milliseconds)
           value  ------------- distribution ------------- count
           0.021 |*                                        611

Its single ``--percentile`` answer is the value of the first bucket whose
cumulative count reaches ``floor(N * p / 100 + 0.5)``; ``percentile`` below
uses the same rule, so p95 from the histogram equals sysbench's own p95 (to
the printed 3 decimals), and any other percentile can be read the same way.
Merging histograms of several rounds is exact (bucket counts add up), which
averaging per-round percentiles is not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from wanbench.results import Latency

_HEADER = "Latency histogram (values are in milliseconds)"
_ROW = re.compile(r"^\s*(?P<value>\d+(?:\.\d+)?)\s+\|[*\s]*?(?P<count>\d+)\s*$")


@dataclass(frozen=True)
class Histogram:
    """Bucket value (ms) -> count, sorted by value; only non-empty buckets."""

    buckets: tuple[tuple[float, int], ...] = ()

    @property
    def count(self) -> int:
        return sum(c for _, c in self.buckets)

    def __bool__(self) -> bool:
        return self.count > 0

    def merge(self, other: Histogram) -> Histogram:
        return merge_histograms((self, other))

    def percentile(self, pct: float) -> float:
        """sysbench's rule: first bucket whose running count reaches
        ``floor(N * pct / 100 + 0.5)`` (at least 1). NaN when empty."""
        if not 0 < pct <= 100:
            raise ValueError(f"percentile must be in (0, 100], not {pct!r}")
        total = self.count
        if total == 0:
            return math.nan
        target = max(1, math.floor(total * pct / 100.0 + 0.5))
        running = 0
        for value, count in self.buckets:
            running += count
            if running >= target:
                return value
        return self.buckets[-1][0]

    def mean(self) -> float:
        """Mean of the bucket values: within one bucket width (~1.8 %) of the
        true mean; prefer sysbench's exact average when there is one."""
        total = self.count
        if total == 0:
            return math.nan
        return sum(v * c for v, c in self.buckets) / total

    def latency(self, *, avg: float | None = None, min_ms: float | None = None,
                max_ms: float | None = None) -> Latency:
        """A ``Latency`` from the buckets; exact avg/min/max from sysbench's
        counters win over bucket values when given."""
        if not self:
            return Latency(
                avg=math.nan if avg is None else avg,
                min=math.nan if min_ms is None else min_ms,
                max=math.nan if max_ms is None else max_ms,
            )
        return Latency(
            avg=self.mean() if avg is None else avg,
            min=self.buckets[0][0] if min_ms is None else min_ms,
            p50=self.percentile(50),
            p90=self.percentile(90),
            p95=self.percentile(95),
            p99=self.percentile(99),
            p999=self.percentile(99.9),
            max=self.buckets[-1][0] if max_ms is None else max_ms,
        )

    def to_json(self) -> list[list[float]]:
        return [[v, c] for v, c in self.buckets]


def merge_histograms(histograms: Iterable[Histogram]) -> Histogram:
    counts: dict[float, int] = {}
    for h in histograms:
        for value, count in h.buckets:
            counts[value] = counts.get(value, 0) + count
    return Histogram(tuple(sorted(counts.items())))


def parse_histogram(text: str) -> Histogram:
    """The last histogram block in a sysbench output (empty if none).

    Rows are read until the first line that is not a row, so interleaved
    report lines after the block never end up as buckets.
    """
    lines = text.splitlines()
    start = None
    for i, line in enumerate(lines):
        if line.strip() == _HEADER:
            start = i
    if start is None:
        return Histogram()
    counts: dict[float, int] = {}
    for line in lines[start + 2:]:
        m = _ROW.match(line)
        if not m:
            if counts or line.strip():
                break
            continue
        value = float(m.group("value"))
        counts[value] = counts.get(value, 0) + int(m.group("count"))
    return Histogram(tuple(sorted(counts.items())))
