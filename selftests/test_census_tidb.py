"""The TiDB census's selectors (wanbench.evidence.tidb_metrics) on real
tidb-server scrapes of three builds (selftests/data/tidb-metrics, with their
sources): v4.0 and v5.3 count RPCs to TiKV by type, the 2025 build with
in-process storage counts the same requests at the transaction layer; the
PromQL the Prometheus path sends selects the same series."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanbench.census import KV_PREFIX, WORK
from wanbench.evidence.prometheus import census_queries
from wanbench.evidence.tidb_metrics import SELECTORS, census_counters, difference, parse_exposition

DATA = Path(__file__).parent / "data" / "tidb-metrics"
BUILDS = {"v4.0": "v4.0-tidb-census-lines.txt", "v5.3": "v5.3.0-alpha-tidb-census-lines.txt",
          "2025 unistore": "e4e814fdc0af-unistore-census-lines.txt"}


def counters(build: str) -> dict[str, float]:
    return census_counters(parse_exposition((DATA / BUILDS[build]).read_text()))


@pytest.mark.parametrize("build", ["v4.0", "v5.3"])
def test_a_cluster_counts_rpcs_to_tikv_by_type(build: str) -> None:
    c = counters(build)
    assert c["kv_source"] == 1.0
    assert {"kv_requests.Get", "kv_requests.Prewrite", "kv_requests.Commit", "kv_requests.Cop"} <= set(c)
    assert c["tso_requests"] > 0  # PD's TSO, through the PD client
    assert {"commits", "statements"} <= set(c)


def test_v53_counts_what_its_scrape_holds() -> None:
    c = counters("v5.3")
    assert (c["kv_requests.Get"], c["kv_requests.Prewrite"], c["kv_requests.Commit"]) == (850, 140, 130)
    assert "kv_requests.StoreSafeTS" not in c  # store="0": PD-side, not a request to a TiKV store


def test_in_process_storage_counts_the_transaction_layer() -> None:
    """No RPC series on unistore; ``scope="internal"`` (TiDB's own SQL) left out."""
    c = counters("2025 unistore")
    assert c["kv_source"] == 0.0
    assert c["kv_requests.Get"] == 118  # scope="general" only (internal: 1363)
    assert c["kv_requests.Prewrite"] == 114  # 2PC batches, one per region
    assert "tso_requests" not in c  # no PD client
    assert c["tso_waits"] > 0


def test_a_window_is_the_difference_of_two_snapshots() -> None:
    before = {"statements": 10.0, "kv_requests.Get": 5.0, "kv_source": 0.0}
    after = {"statements": 1010.0, "kv_requests.Get": 1005.0, "kv_requests.Commit": 3.0, "kv_source": 0.0}
    assert difference(before, after) == {"statements": 1000.0, "kv_requests.Get": 1000.0,
                                         "kv_requests.Commit": 3.0, "kv_source": 0.0}


def test_every_counter_feeds_the_census() -> None:
    named = {c for sources in WORK.values() for c in sources}
    for sel in SELECTORS:
        assert sel.counter in named or sel.counter in ("kv_rpc", "kv_txn", "Bytes_sent", "Bytes_received"), sel
    assert KV_PREFIX == "kv_requests."


def test_the_promql_selects_what_the_scrape_path_reads() -> None:
    q = census_queries(12.4)
    assert q["census.kv_rpc:tidb_tikvclient_request_seconds_count"] == (
        'sum by (type) (rate(tidb_tikvclient_request_seconds_count{scope!="true", store!="0"}[12s]))')
    assert q["census.commits:tidb_session_transaction_duration_seconds_count"] == (
        'sum(rate(tidb_session_transaction_duration_seconds_count{type="commit", scope!="internal"}[12s]))')


def test_bytes_between_clients_and_tidb_on_every_build_that_counts_them() -> None:
    """v5.3's histogram sum (type read/write) and the 2025 counter (type In/Out); v4.0 has neither."""
    assert (counters("v5.3")["Bytes_sent"], counters("v5.3")["Bytes_received"]) == (198, 0)
    assert (counters("2025 unistore")["Bytes_sent"], counters("2025 unistore")["Bytes_received"]) == (996, 725)
    assert "Bytes_sent" not in counters("v4.0")
