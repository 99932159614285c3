"""TiDB's census counters, read from tidb-server's own ``/metrics``.

The census counts per operation (``wanbench.census``): statements,
transactions, KV requests by type and TSO waits. A Prometheus answers those
as rates over its scrape interval (15 s on a tiup cluster), too coarse for a
window of a few seconds. So the counters are read where Prometheus reads
them, from every tidb-server's status port (10080 on a tiup cluster), when
a measured window opens and when it closes: exact differences, like the
lab's ``SHOW GLOBAL STATUS``. The selectors are the ones ``CENSUS_PROMQL``
gives Prometheus, so both paths count the same series.

Which series hold depends on the build (checked against the recorded v4.0
and v5.3 scrapes in ``../shared/data/tidb-metrics`` and a live tidb-server
of 2025-11-26 in ``selftests/test_tidb_metrics.py``; docs/evidence.md):

- KV requests by type: ``tidb_tikvclient_request_seconds_count`` (one per
  RPC to TiKV, by ``type``: Get, BatchGet, Prewrite, Commit, Cop, ...) where
  the build sends RPCs. With storage in-process (unistore) that series does
  not exist; there the same requests are counted at the transaction layer:
  point reads by ``tidb_tikvclient_txn_cmd_duration_seconds_count``
  (``get``, ``batch_get``) and the two-phase commit and coprocessor batches,
  one per region, by ``tidb_tikvclient_txn_regions_num_sum``.
- ``scope="internal"`` (v6+) marks TiDB's own background SQL: left out. v4
  and v5.3 have no ``scope`` label; ``scope!="internal"`` matches them too.
"""

from __future__ import annotations

import math
import re
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from wanbench.errors import InfrastructureError

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]


def parse_exposition(text: str) -> list[Sample]:
    """Prometheus' text format -> (name, labels, value); comments and bad lines skipped."""
    out: list[Sample] = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _LINE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\\\", "\\") for k, v in _LABEL.findall(m.group(3) or "")}
        out.append((m.group(1), labels, value))
    return out


@dataclass(frozen=True)
class Selector:
    """One census counter: a metric and label matchers (``=`` / ``!=`` / ``=~``), summed, optionally by
    one label (each value its own counter ``<counter>.<Rename>``)."""

    counter: str
    metric: str
    equal: Mapping[str, str] = field(default_factory=dict)
    not_equal: Mapping[str, str] = field(default_factory=dict)
    regex: Mapping[str, str] = field(default_factory=dict)
    by: str = ""
    rename: Mapping[str, str] = field(default_factory=dict)

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if name != self.metric:
            return False
        if any(labels.get(k, "") != v for k, v in self.equal.items()):
            return False
        if any(labels.get(k, "") == v for k, v in self.not_equal.items()):
            return False
        return all(re.fullmatch(v, labels.get(k, "")) for k, v in self.regex.items())

    def key(self, labels: Mapping[str, str]) -> str | None:
        if not self.by:
            return self.counter
        raw = labels.get(self.by, "")
        names = self.rename
        if names and raw not in names:
            return None
        return f"{self.counter}.{names.get(raw, raw)}"

    def promql(self, window: str) -> str:
        """The same counter as a rate over ``window`` (``CENSUS_PROMQL``)."""
        parts = [f'{k}="{v}"' for k, v in self.equal.items()]
        parts += [f'{k}!="{v}"' for k, v in self.not_equal.items()]
        parts += [f'{k}=~"{v}"' for k, v in self.regex.items()]
        sel = f"{self.metric}{{{', '.join(parts)}}}" if parts else self.metric
        return f"sum by ({self.by}) (rate({sel}[{window}]))" if self.by else f"sum(rate({sel}[{window}]))"


NOT_INTERNAL = {"scope": "internal"}
#: the census counters of a TiDB cell (``counters["tidb"]``), by census name
SELECTORS: tuple[Selector, ...] = (
    # statements TiDB executed (Select, Insert, ...; not protocol commands such as Quit or Prepare)
    Selector("statements", "tidb_executor_statement_total"),
    # transactions committed by user sessions
    Selector("commits", "tidb_session_transaction_duration_seconds_count", {"type": "commit"}, NOT_INTERNAL),
    # RPCs to TiKV by type (a real cluster)
    Selector("kv_rpc", "tidb_tikvclient_request_seconds_count", {}, {"scope": "true", "store": "0"}, by="type"),
    # the same requests at the transaction layer (unistore has no RPCs)
    Selector("kv_txn", "tidb_tikvclient_txn_cmd_duration_seconds_count", {}, NOT_INTERNAL,
             by="type", rename={"get": "Get", "batch_get": "BatchGet"}),
    Selector("kv_txn", "tidb_tikvclient_txn_regions_num_sum", {}, NOT_INTERNAL, by="type",
             rename={"2pc_prewrite": "Prewrite", "2pc_commit": "Commit", "2pc_pessimistic_lock": "PessimisticLock",
                     "coprocessor": "Cop", "batch_coprocessor": "BatchCop"}),
    # bytes between clients and TiDB (the census's bytes_per_op.tidb): a histogram's sum up to v5, a counter
    # with type In/Out later (v8.5's dashboards select type=~"In|read" and "Out|write")
    Selector("Bytes_received", "tidb_server_packet_io_bytes", regex={"type": "In|read"}),
    Selector("Bytes_received", "tidb_server_packet_io_bytes_sum", regex={"type": "In|read"}),
    Selector("Bytes_sent", "tidb_server_packet_io_bytes", regex={"type": "Out|write"}),
    Selector("Bytes_sent", "tidb_server_packet_io_bytes_sum", regex={"type": "Out|write"}),
    # lock contention (pessimistic transactions, TiDB's default): statements that locked keys, and how many
    # times such statements were retried after meeting another transaction's lock (dashboard "Transaction":
    # Statement Lock Keys, Pessimistic Statement Retry OPS, v6.5-v8.5; both in the recorded v4.0/v5.3 scrapes)
    Selector("locking_statements", "tidb_session_statement_lock_keys_count_count"),
    Selector("lock_retries", "tidb_session_statement_pessimistic_retry_count_sum"),
    # TSO requests TiDB's PD client made (a real cluster), and waits on a TSO (every build)
    Selector("tso_requests", "pd_client_cmd_handle_cmds_duration_seconds_count", {"type": "tso"}),
    Selector("tso_waits", "tidb_tikvclient_ts_future_wait_seconds_count"),
)


def census_counters(samples: Iterable[Sample], selectors: Sequence[Selector] = SELECTORS) -> dict[str, float]:
    """The census counters in ``samples`` (one or several tidb-servers' scrapes, summed).

    ``kv_requests.<Type>`` comes from the RPC series where the build has it,
    else from the transaction layer (``kv_source`` says which: 1 = RPC, 0 = txn)."""
    raw: dict[str, float] = {}
    for name, labels, value in samples:
        if not math.isfinite(value):
            continue
        for sel in selectors:
            if sel.matches(name, labels) and (key := sel.key(labels)) is not None:
                raw[key] = raw.get(key, 0.0) + value
    out = {k: v for k, v in raw.items() if not k.startswith(("kv_rpc.", "kv_txn."))}
    rpc = {k.split(".", 1)[1]: v for k, v in raw.items() if k.startswith("kv_rpc.")}
    txn = {k.split(".", 1)[1]: v for k, v in raw.items() if k.startswith("kv_txn.")}
    kv, source = (rpc, 1.0) if rpc else (txn, 0.0)
    for typ, v in kv.items():
        out[f"kv_requests.{typ}"] = v
    if kv:
        out["kv_source"] = source
    return out


def census_promql(window: str) -> dict[str, str]:
    """Each selector as PromQL (the Prometheus path, when no status port is reachable)."""
    return {f"{sel.counter}:{sel.metric}": sel.promql(window) for sel in SELECTORS}


class MetricsProbe:
    """Reads the census counters from tidb-servers' ``/metrics`` (``urls``: status ports)."""

    def __init__(self, urls: Sequence[str], *, timeout: float = 5.0) -> None:
        if not urls:
            raise InfrastructureError("no tidb-server status port to read the census from")
        self.urls = [u.rstrip("/") for u in urls]
        self.timeout = timeout

    def scrape(self, url: str) -> str:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=self.timeout) as resp:  # noqa: S310 - TiDB status
                return resp.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            raise InfrastructureError(f"tidb-server metrics at {url}/metrics not readable: {exc}") from None

    def snapshot(self) -> dict[str, float]:
        samples: list[Sample] = []
        for url in self.urls:
            samples += parse_exposition(self.scrape(url))
        return census_counters(samples)


def difference(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """What grew between two snapshots (a series that appeared counts from 0)."""
    out = {k: v - before.get(k, 0.0) for k, v in after.items() if k != "kv_source"}
    if "kv_source" in after:
        out["kv_source"] = after["kv_source"]
    return out
