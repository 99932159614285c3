"""The TiDB census queries (wanbench.evidence.prometheus.CENSUS_SERIES)
select metrics, labels and label values that a real TiDB exports: checked
against lines of a real tidb-server scrape (selftests/data/tidb-metrics,
v5.3.0-alpha, with its source and licence). Request units are not among
them: no public scrape or dashboard expression of a v7/v8 cluster has them
(docs/census.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wanbench.census import WORK
from wanbench.evidence.prometheus import CENSUS_SERIES, census_queries

SCRAPE = Path(__file__).parent / "data" / "tidb-metrics" / "v5.3.0-alpha-tidb-census-lines.txt"
_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def real_series() -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in SCRAPE.read_text().splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2) or ""))))
    return out


@pytest.mark.parametrize("counter", sorted(CENSUS_SERIES))
def test_each_census_series_selects_real_samples(counter: str) -> None:
    selector = CENSUS_SERIES[counter]
    name, _, labels = selector.partition("{")
    wanted = dict(_LABEL.findall(labels))
    found = [lb for n, lb in real_series() if n == name and all(lb.get(k) == v for k, v in wanted.items())]
    assert found, f"{selector} selects nothing in the real scrape"


def test_the_queries_are_rates_over_the_window_and_feed_the_census() -> None:
    q = census_queries(12.4)
    assert q["census.kv_requests"] == "sum(rate(tidb_tikvclient_request_seconds_count[12s]))"
    named = {c for sources in WORK.values() for c in sources}
    assert set(CENSUS_SERIES) <= named  # every counter becomes a work.tidb.<name> per operation
