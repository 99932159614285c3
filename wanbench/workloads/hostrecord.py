"""The ``load_hosts`` record of a cell: each load host's share, kept exact
across rounds (its own histogram, its rounds), from which the per-host
summaries are recomputed. Its own module so that ``sysbench_output.merge_results``
can merge it without importing the load-host runner."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from wanbench.workloads.clientcpu import ClientLoad, assess
from wanbench.workloads.histogram import Histogram, merge_histograms


def merge_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``load_hosts`` records of several rounds of one cell as one."""
    by_host: dict[str, dict[str, Any]] = {}
    rounds: list[Any] = []
    for rec in records:
        rounds.extend(rec.get("rounds", ()))
        for h in rec.get("hosts", ()):
            mine = by_host.setdefault(h["host"], {k: h[k] for k in ("host", "address", "sql_host", "threads")}
                                      | {"histogram": [], "rounds": []})
            both = [histogram_of(mine["histogram"]), histogram_of(h["histogram"])]
            mine["histogram"] = merge_histograms(both).to_json()
            mine["rounds"] = [*mine["rounds"], *h["rounds"]]
    return finish_record({"hosts": list(by_host.values()), "rounds": rounds})


def finish_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """Per-host summaries (median QPS over rounds, latency from the host's own
    histogram, client CPU) recomputed from the rounds, so merging stays exact."""
    hosts = []
    for h in record["hosts"]:
        rs = h["rounds"]
        loads = [ClientLoad(c["cpu_seconds"], c["wall_seconds"], int(c["threads"]), int(c["cores"]), c.get("runnable"))
                 for r in rs if (c := r.get("client"))]
        client = assess(loads)
        client.pop("rule", None)
        hosts.append({
            **{k: h[k] for k in ("host", "address", "sql_host", "threads")},
            "qps": statistics.median(r["qps"] for r in rs) if rs else math.nan,
            "queries": sum(int(r["queries"]) for r in rs),
            "latency_ms": histogram_of(h["histogram"]).latency().to_json(),
            "client": client,
            "histogram": h["histogram"],
            "rounds": rs,
        })
    skews = [r["start_skew_ms"] for r in record["rounds"] if r.get("start_skew_ms") is not None]
    return {"hosts": hosts, "rounds": list(record["rounds"]), "max_start_skew_ms": max(skews) if skews else None}


def histogram_of(pairs: Any) -> Histogram:
    """A histogram from its JSON form (``[[bucket ms, count], ...]``)."""
    return Histogram(tuple((float(v), int(c)) for v, c in pairs or ()))
