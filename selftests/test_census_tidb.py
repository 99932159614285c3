"""The TiDB census's selectors (wanbench.evidence.tidb_metrics) on real
tidb-server scrapes of three builds (selftests/data/tidb-metrics, with their
sources): v4.0 and v5.3 count RPCs to TiKV by type, the 2025 build with
in-process storage counts the same requests at the transaction layer; the
PromQL the Prometheus path sends selects the same series."""

from __future__ import annotations

from pathlib import Path

import pytest

from wanbench.census import KV_PREFIX, WORK, census_of, not_counts_of, values_of
from wanbench.census_locks import LOCK_COUNTERS
from wanbench.evidence.prometheus import census_queries
from wanbench.evidence.tidb_metrics import SELECTORS, census_counters, difference, parse_exposition

DATA = Path(__file__).parent / "data" / "tidb-metrics"
BUILDS = {"v4.0": "v4.0-tidb-census-lines.txt", "v5.3": "v5.3.0-alpha-tidb-census-lines.txt",
          "2025 unistore": "e4e814fdc0af-unistore-census-lines.txt",
          "2025 unistore, TPC-C": "e4e814fdc0af-unistore-tpcc-lock-lines.txt"}


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
        assert sel.counter in named or sel.counter in ("kv_rpc", "kv_txn", "Bytes_sent", "Bytes_received",
                                                       *LOCK_COUNTERS), sel
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


@pytest.mark.parametrize(("build", "locking", "retries"), [
    ("v4.0", 4, 0), ("v5.3", 0, 0), ("2025 unistore, TPC-C", 37384, 13290),
])
def test_every_build_counts_statements_that_locked_keys_and_their_retries(build: str, locking: int,
                                                                          retries: int) -> None:
    """Real scrapes: two idle clusters, and the lab's tidb-server after TPC-C at up to 100 terminals
    with 50 ms on its link (2026-11-29; Payment waited on the district row's lock)."""
    c = counters(build)
    assert (c["locking_statements"], c["lock_retries"]) == (locking, retries)


def _tidb_cell(**tidb: float) -> dict[str, object]:
    """A TiDB cell of 1000 transactions over one round, with one window of ``tidb`` counter totals."""
    return {"test_id": "test_rtt[tidb_tpcc-50ms-c100]", "level": {"value": 0},
            "rounds": [{"seconds": 10.0, "tps": 100.0, "latency_ms": {"avg": 40.0}}],
            "extra": {"evidence": {"windows": 1, "counters": {"tidb": tidb}}}}


def test_kv_requests_where_statements_waited_on_locks_are_not_counts() -> None:
    """31.3 PessimisticLock requests per transaction at 100 terminals (2026-11-28) were lock waits:
    where more than 5 % of the locking statements were retried, every KV request a retried statement
    sends again is said not to be a count, with why; Prewrite and Commit (once per transaction) stay."""
    kv = {"kv_requests.PessimisticLock": 31300.0, "kv_requests.Get": 2500.0, "kv_requests.Prewrite": 4100.0,
          "kv_requests.Commit": 4100.0, "kv_source": 0.0, "statements": 16800.0, "tso_waits": 6500.0}
    contended = census_of(_tidb_cell(**kv, locking_statements=6000.0, lock_retries=1800.0))
    why = not_counts_of(contended)
    # a retried statement also takes a new timestamp: TSO waits 2.15 per transaction at 10 terminals, 6.47
    # at 100 with 50 ms (2026-11-29); statements 16.2-17.8 (TiDB counts a retried statement once)
    assert set(why) == {"work.tidb.kv_requests.PessimisticLock", "work.tidb.kv_requests.Get",
                        "work.tidb.tso_waits"}, why
    assert values_of(contended)["work.tidb.statements"] == pytest.approx(16.8)
    assert "1800 pessimistic retries over 6000 statements that locked keys (30%" in why["work.tidb.kv_requests.Get"]
    assert values_of(contended)["work.tidb.kv_requests.Prewrite"] == pytest.approx(4.1)
    assert contended["lock_retries"] == {"tidb": {"retries": 1800.0, "locking_statements": 6000.0, "share": 0.3}}
    quiet = census_of(_tidb_cell(**kv, locking_statements=6000.0, lock_retries=300.0))  # 5 %: the limit
    assert values_of(quiet)["work.tidb.kv_requests.PessimisticLock"] == pytest.approx(31.3)
    assert not not_counts_of(quiet)
    unknown = census_of(_tidb_cell(**kv))  # a build that does not count them: nothing to say
    assert "work.tidb.kv_requests.PessimisticLock" in values_of(unknown)
    assert "lock_retries" not in unknown
