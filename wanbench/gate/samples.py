"""What a cell's rounds say, by metric: the raw material of every verdict
(``samples_of``), an interleaved cell's level-0 rounds beside its faulted
ones (``reference_of``), and an A/B cell's baseline side (``ab_side_of``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from wanbench import ab, families
from wanbench.census import not_counts_of, values_of
from wanbench.interleave import reference_rounds
from wanbench.results import CellResult

Samples = dict[str, list[float]]


def _finite(values: Sequence[Any]) -> list[float]:
    out = []
    for v in values:
        if v is None:
            continue
        f = float(v)
        if not math.isnan(f):
            out.append(f)
    return out


def round_samples(rounds: Sequence[Mapping[str, Any]]) -> Samples:
    """What every round says, by metric: QPS, TPS, error rate, latency percentiles."""
    out: Samples = {
        "qps": _finite([r.get("qps") for r in rounds]),
        "tps": _finite([r.get("tps") for r in rounds]),
        "error_rate": _finite(
            [r.get("errors", 0) / (r.get("queries", 0) + r.get("errors", 0)) for r in rounds
             if (r.get("queries", 0) + r.get("errors", 0)) > 0]
        ),
    }
    for p in ("p50", "p95", "p99"):
        out[f"latency_ms.{p}"] = _finite([(r.get("latency_ms") or {}).get(p) for r in rounds])
    return out


def reference_of(cell: CellResult | Mapping[str, Any]) -> Samples:
    """An interleaved cell's level-0 rounds (``wanbench.interleave``) as
    samples; empty when its rounds were not interleaved."""
    data = cell.to_json() if isinstance(cell, CellResult) else cell
    return {k: v for k, v in round_samples(reference_rounds(data)).items() if v}


def samples_of(cell: CellResult | Mapping[str, Any]) -> Samples:
    """Per-round values by metric name: the raw material of every verdict.
    Every cell's (``round_samples``) and what the families that own the cell
    read from it (``wanbench.families``: TPC-C's tpmC, YCSB's per operation,
    a heartbeat's RTO, ...)."""
    data = cell.to_json() if isinstance(cell, CellResult) else cell
    out = round_samples(list(data.get("rounds") or []))
    out.update(families.samples_of(data))
    return {k: v for k, v in out.items() if v}


def ab_side_of(cell: CellResult | Mapping[str, Any]) -> ab.AbSide | None:
    """An A/B cell's baseline side as the gate reads it (``wanbench.ab``): its
    rounds in pair order, its census; None for a cell of a run of one cluster."""
    data = cell.to_json() if isinstance(cell, CellResult) else cell
    record = ab.record_of(data)
    if not record:
        return None
    census = (record.get(ab.OTHER) or {}).get("census")
    return ab.AbSide({k: v for k, v in round_samples(ab.baseline_rounds(data)).items() if v}, values_of(census),
                     not_counts_of(census), bool(record.get("aa_guard")))
