"""Release against release: a candidate and a baseline measured side by side.

Stored baselines compare a run with runs made minutes or days before, on a
machine whose speed drifts by 14-21 % between runs (docs/calibration.md): a
database that got slower without sending more round trips, bytes or
statements hides in that drift. An A/B run (``--ab``) measures two clusters
in the same minutes instead (Duet benchmarking, Bulej et al. 2020; RMIT,
Abedi and Brecht 2017; Chromium Pinpoint's paired A/B): the candidate and
the baseline, which differ only by what the user names (a server binary,
server options; on TiDB two clusters). Every cell runs its rounds
alternately on the two, in ABBA order (candidate, baseline, baseline,
candidate, ...; ``wanbench.interleave``), each under the cell's fault on
its own cluster, the other cluster idle meanwhile. Adjacent rounds share
the machine's minute, so the log ratio of a pair, candidate over baseline,
cancels the drift; the pair is the unit of replication
(``wanbench.gate.ab_checks``).

The cell's rounds are the candidate's; the baseline's sit beside them in
``workload_extra.ab`` (``KEY``): the order run, the baseline's rounds (and
their evidence and census, from the baseline's own counters), and per pair
the QPS of both sides and log(QPS ratio).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: ``workload_extra`` key of an A/B cell, and the name of its B side in that record
KEY = "ab"
OTHER = "baseline"
#: the two sides, A and B of the ABBA order
SIDES = ("candidate", "baseline")


@dataclass(frozen=True)
class AbSide:
    """The baseline side of an A/B cell, as the gate reads it."""

    #: its rounds by metric, in pair order (the i-th beside the candidate's i-th)
    samples: dict[str, list[float]]
    #: its WAN cost census values (``wanbench.census.values_of``), from its own cluster's counters
    census: Mapping[str, float] = field(default_factory=dict)
    #: its census values that are not counts where measured (``wanbench.census.not_counts_of``)
    not_counts: Mapping[str, str] = field(default_factory=dict)
    #: the two sides are identical (no difference named, or ``--ab-aa on``): any difference between
    #: them is the labs' or the machine's, and the A/A guard holds the checks against it
    aa: bool = False


def record_of(cell: Mapping[str, Any]) -> Mapping[str, Any]:
    """The A/B record of a cell's JSON; {} when the cell was not measured A/B."""
    return (cell.get("workload_extra") or {}).get(KEY) or {}


def is_ab(cell: Mapping[str, Any]) -> bool:
    return bool(record_of(cell))


def baseline_rounds(cell: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((record_of(cell).get(OTHER) or {}).get("rounds") or [])


def baseline_cell(cell: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline side of an A/B cell as a cell JSON of its own: its rounds,
    latency, errors, load generator and evidence in place of the candidate's
    (what ``wanbench.census.census_of`` reads). A cell that is not A/B comes
    back as it is."""
    record = record_of(cell)
    if not record:
        return dict(cell)
    side = record.get(OTHER) or {}
    rounds = list(side.get("rounds") or [])
    qps = [float(r["qps"]) for r in rounds if r.get("qps")]
    out = {**cell, "rounds": rounds, "latency_ms": side.get("latency_ms") or {}, "errors": side.get("errors", 0),
           "client": side.get("client") or {}, "qps": statistics.median(qps) if qps else None,
           "extra": {"evidence": side["evidence"]} if side.get("evidence") else {},
           "workload_extra": {k: v for k, v in (cell.get("workload_extra") or {}).items() if k != KEY},
           "census": side.get("census") or {}}
    return out


def ratios(candidate: Sequence[float], baseline: Sequence[float]) -> list[tuple[float, float]]:
    """The pairs of one metric that both sides measured (candidate, baseline), in pair order."""
    return [(c, b) for c, b in zip(candidate, baseline, strict=False) if c > 0 and b > 0]


def run_context(candidate: Mapping[str, Any], baseline: Mapping[str, Any], *, aa: bool,
                differences: Sequence[str]) -> dict[str, Any]:
    """What a run's ``ab`` context says: each side's cluster and servers, whether the
    A/A guard holds, and what the user named as the difference."""
    def side(ctx: Mapping[str, Any]) -> dict[str, Any]:
        return {k: ctx[k] for k in ("cluster", "versions", "server", "endpoints", "storage") if k in ctx}

    return {"candidate": side(candidate), "baseline": side(baseline), "aa_guard": aa,
            "differences": list(differences)}


__all__ = ["KEY", "OTHER", "SIDES", "AbSide", "baseline_cell", "baseline_rounds", "is_ab", "ratios", "record_of",
           "run_context"]
