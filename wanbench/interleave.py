"""Interleaved levels: a faulted cell measures its own level 0, seconds apart.

On a shared VM the machine's speed drifts 25-35 % over minutes
(docs/calibration.md), so a level-0 cell measured minutes before a faulted
one is not the level 0 the faulted cell ran beside. An interleaved cell runs
its rounds in ABBA order, ``A`` under the fault and ``B`` with the fault
lifted (its rules removed, its lease and dead-man timer kept), so each
faulted round has a level-0 round next to it::

    A B B A A B B A ...   (rounds faulted rounds, as many reference rounds)

Each pair (the faulted round and the reference round beside it) gives a QPS
ratio and an added mean latency; drift that moves both rounds of a pair
cancels in them. The cell keeps its faulted rounds as its rounds (the seed
tables' numbers) and the reference rounds beside them
(``workload_extra.interleave``), from which the gate takes its level 0: the
``drop`` and ``level0`` checks and the census' round trips per operation.

The fault's own switch is the cluster's: ``Cluster.suspend`` /
``Cluster.resume`` (the lab: Toxiproxy toxics, tc or nft rules on ``lo``;
TiDB: the tc rules on every host of the plan), each verified.

A cell may stop early: after each whole ABBA block, while pairs are left,
the switch's ``enough`` (the gate's ``wanbench.gate.curtail`` rule, given
by the ``run_workload`` fixture) is asked whether the pairs left could
still change the cell's verdict; when they could not, the cell ends there
and its record says so (``early_stop``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from wanbench.results import WorkloadResult

#: ``workload_extra`` key of an interleaved cell
KEY = "interleave"
T = TypeVar("T")


class Switch(Protocol):
    """Puts the cell's fault in place (True) or lifts it (False), verified."""

    def __call__(self, faulted: bool, /) -> None: ...


class Enough(Protocol):
    """Whether a cell may stop: (faulted rounds so far, the level-0 rounds
    beside them, the pairs planned) -> why it may (a JSON-able record with
    a ``why``), or None to go on."""

    def __call__(self, faulted: WorkloadResult, reference: WorkloadResult, planned: int
                 ) -> Mapping[str, Any] | None: ...


@dataclass(frozen=True)
class CellSwitch:
    """A cell's fault switch with the rule that may end its rounds early."""

    toggle: Switch
    enough: Enough | None = None

    def __call__(self, faulted: bool) -> None:
        self.toggle(faulted)


def schedule(rounds: int) -> list[bool]:
    """ABBA order of ``rounds`` faulted rounds and as many reference rounds
    (True: under the fault). It starts under the fault, as the level is
    applied, and every pair holds one round of each side."""
    if rounds <= 0:
        raise ValueError(f"an interleaved cell needs at least one round, not {rounds}")
    out: list[bool] = []
    for i in range(rounds):
        out += [True, False] if i % 2 == 0 else [False, True]
    return out


def _mean_latency(r: Mapping[str, Any]) -> float:
    v = (r.get("latency_ms") or {}).get("avg")
    return float(v) if v is not None else math.nan


def paired(faulted: Sequence[Mapping[str, Any]], reference: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pairs of an interleaved cell (rounds as JSON) and what they say:
    per pair the QPS ratio and the added mean latency; over the pairs the
    geometric mean ratio (``qps_ratio``), its drop, the spread of
    log(ratio) between pairs and the mean added latency."""
    out_pairs = []
    logs: list[float] = []
    added: list[float] = []
    for a, b in zip(faulted, reference, strict=False):
        qa, qb = float(a.get("qps") or math.nan), float(b.get("qps") or math.nan)
        la, lb = _mean_latency(a), _mean_latency(b)
        pair: dict[str, Any] = {"qps": [qa, qb], "mean_latency_ms": [la, lb]}
        if qa > 0 and qb > 0:
            pair["log_ratio"] = round(math.log(qa / qb), 6)
            logs.append(math.log(qa / qb))
        if math.isfinite(la) and math.isfinite(lb):
            pair["added_ms"] = round(la - lb, 4)
            added.append(la - lb)
        out_pairs.append(pair)
    summary: dict[str, Any] = {"pairs": out_pairs}
    if logs:
        ratio = math.exp(statistics.fmean(logs))
        summary["qps_ratio"] = round(ratio, 6)
        summary["drop"] = round(1.0 - ratio, 6)
        summary["log_ratio_sd"] = round(statistics.stdev(logs), 6) if len(logs) > 1 else None
    if added:
        summary["added_latency_ms"] = round(statistics.fmean(added), 4)
    return summary


@dataclass(frozen=True)
class Interleaved:
    """What an interleaved cell ran: its faulted rounds and its reference rounds."""

    faulted: WorkloadResult
    reference: WorkloadResult
    plan: tuple[bool, ...]
    #: why the cell ended before its planned rounds (``Enough``), else empty
    early_stop: Mapping[str, Any] | None = None
    #: the ``workload_extra`` key of the record, and the name of the B side in it: a faulted cell's
    #: level 0 (``interleave``, ``reference``) or an A/B run's baseline side (``wanbench.ab``)
    key: str = KEY
    other: str = "reference"

    def result(self) -> WorkloadResult:
        """The cell's result: the A rounds as its rounds, the B side's beside them."""
        f, ref = self.faulted, self.reference
        rounds_a = [r.to_json() for r in f.rounds]
        rounds_b = [r.to_json() for r in ref.rounds]
        record = {
            "order": "".join("A" if x else "B" for x in self.plan),
            self.other: {"rounds": rounds_b, "latency_ms": ref.latency_ms.to_json(),
                         "errors": ref.errors, "client": dict(ref.client)},
            **paired(rounds_a, rounds_b),
        }
        if self.early_stop:
            record["early_stop"] = dict(self.early_stop)
        return WorkloadResult(
            workload=f.workload, concurrency=f.concurrency, rounds=f.rounds, latency_ms=f.latency_ms,
            errors=f.errors, errors_by_code=f.errors_by_code, ignored_errors=f.ignored_errors,
            reconnects=f.reconnects, series=f.series, reports=(*f.reports, *ref.reports), client=f.client,
            extra={**f.extra, self.key: record},
        )


@dataclass
class Run(Generic[T]):
    """What ``interleave_rounds`` ran."""

    faulted: list[T]
    reference: list[T]
    #: the order run (True: under the fault)
    plan: tuple[bool, ...]
    #: why it ended before its planned rounds (``Enough``), else None
    early_stop: Mapping[str, Any] | None = None


def interleave_rounds(rounds: int, switch: Switch, run_round: Callable[[bool, int, int], T],
                      merge: Callable[[Sequence[T]], WorkloadResult] | None = None) -> Run[T]:
    """Run ``rounds`` faulted rounds and as many reference rounds in ABBA
    order: ``run_round(faulted, index, total)`` runs one round, whatever an
    engine calls a round. The fault is in place again when this returns or
    raises (the rounds that follow, other concurrencies of the level, run
    under it).

    When the switch carries an ``enough`` rule (``CellSwitch``) and
    ``merge`` turns an engine's rounds into a result, the rule is asked
    after each whole ABBA block while pairs are left, and the rounds end
    when it says so."""
    plan = schedule(rounds)
    enough = getattr(switch, "enough", None) if merge is not None else None
    done: dict[bool, list[T]] = {True: [], False: []}
    state = True  # the level is applied when the cell starts
    stop: Mapping[str, Any] | None = None
    ran = 0
    try:
        for i, faulted in enumerate(plan, start=1):
            if faulted != state:
                switch(faulted)
                state = faulted
            done[faulted].append(run_round(faulted, i, len(plan)))
            ran = i
            if enough is not None and merge is not None and i % 4 == 0 and i < len(plan):
                stop = enough(merge(done[True]), merge(done[False]), rounds)
                if stop:
                    break
    finally:
        if not state:
            switch(True)
    return Run(done[True], done[False], tuple(plan[:ran]), stop)


def run_interleaved(rounds: int, switch: Switch, run_round: Callable[[bool, int, int], T],
                    merge: Callable[[Sequence[T]], WorkloadResult], *, key: str = KEY,
                    other: str = "reference") -> Interleaved:
    """``interleave_rounds``, each side merged into one result (``merge``);
    ``key`` and ``other`` name the record (``Interleaved``)."""
    run = interleave_rounds(rounds, switch, run_round, merge)
    return Interleaved(merge(run.faulted), merge(run.reference), run.plan, run.early_stop, key, other)


def reference_rounds(cell: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The reference (level-0) rounds of an interleaved cell's JSON; [] when it was not interleaved."""
    record = (cell.get("workload_extra") or {}).get(KEY) or {}
    return list((record.get("reference") or {}).get("rounds") or [])

