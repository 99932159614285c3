"""The WAN cost census of a cell: what a network fault acts on, per operation.

A WAN fault does not act on QPS: it acts on every round trip that crosses the
faulted link, and on every byte that must squeeze through a capped one. QPS
follows from those and from the machine's speed of the minute, which on a
shared VM drifts by 25-35 % (docs/calibration.md). So the census counts the
physics, which drift cannot move:

- ``round_trips``: round trips per operation across the faulted links, from
  the latency the level adds over its added round-trip time, against the
  level-0 rounds beside the faulted ones (interleaved) or level 0 of the
  same run. Where every operation is alike (the probes) it is the fastest
  operation's: ``(min_N - min_0) / RTT_N``. The fastest operation met no
  queue, so this holds where level 0 is saturated (100 clients on a 2-core
  lab wait 20 ms at level 0, of which a 50 ms RTT hides most) and where the
  machine is busy: 0.99-1.03 for a semi-sync commit in every run measured
  (docs/calibration.md), where the mean moved between 0.62 and 1.64.
  Elsewhere (TPC-C and YCSB mix operations of different costs; a level with
  jitter) the mean: ``(L_N - L_0) / RTT_N``. A commit that waits for the
  replica's acknowledgement costs 1; a read served by the SQL tier 0.
- ``bytes_per_op.<server>``: bytes each server sent and received per
  operation (MariaDB's ``Bytes_sent`` + ``Bytes_received``: every link into
  that server, clients and replication alike), exact counters over the
  measured windows divided by the operations in them (totals over totals:
  a rate over a window that opened late would not be). The per-link split from
  the sockets (``link_bytes_per_op``) is reported beside it, not gated: a
  socket's counters die with it, so a link loses up to its last second.
- ``work.<server>.<counter>``: server work per operation from ``SHOW GLOBAL
  STATUS``: statements, commits, rows read and written, handler calls,
  fsyncs, semi-sync acknowledgements.

Each value holds as a count only in a range (``round_trips_why_not``,
``connection_why_not``; docs/census.md "Where a count is a count"): where
queues or each connection's own set-up take over, the value is reported with
why it is not a count (``"count": false``) and never gated.

An *operation* is a sysbench event: one statement for the probes, one
transaction for sysbench OLTP and TPC-C, one operation for YCSB; one query
for TPC-H (its rounds' QPS, where they have no TPS). The gate
compares each metric with the accepted runs of the same cell in the metric's
own unit (``census`` checks of the budget file, ``wanbench.gate.census_checks``):
one run decides.

The census also predicts each faulted cell's QPS in a closed loop from the
round trips measured at the previous level of the same run,
``c / (L_0 + k * RTT_N)``, and reports measured against predicted: a large
gap is a finding (a window limit, head-of-line blocking, a queue).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from wanbench.census_locks import RETRIED_WORK, SENT_AT_COMMIT, lock_retries_of, lock_why_not
from wanbench.census_mix import mix_why_not
from wanbench.interleave import KEY as INTERLEAVE_KEY
from wanbench.interleave import reference_rounds

#: units of the census metrics, by their first name part
UNITS = {
    "round_trips": "round trips per operation across the faulted links",
    "bytes_per_op": "bytes per operation the server sent and received",
    "work": "per operation",
}
#: server counters -> census work names (per operation): MariaDB's status counters, and TiDB's census
#: counters (``wanbench.evidence.tidb_metrics``), which carry the census names themselves
WORK = {
    "statements": ("Questions", "statements"),
    "commits": ("Com_commit", "commits"),
    "rows_read": ("Innodb_rows_read",),
    "rows_written": ("Innodb_rows_inserted", "Innodb_rows_updated", "Innodb_rows_deleted"),
    "handler_calls": ("Handler_read_first", "Handler_read_key", "Handler_read_last", "Handler_read_next",
                      "Handler_read_prev", "Handler_read_rnd", "Handler_read_rnd_next", "Handler_write",
                      "Handler_update", "Handler_delete"),
    "fsyncs": ("Innodb_data_fsyncs", "Innodb_os_log_fsyncs"),
    "semisync_acks": ("Rpl_semi_sync_master_yes_tx",),
    # TiDB: TSO requests to PD (a real cluster) and waits on a TSO (every build)
    "tso_requests": ("tso_requests",),
    "tso_waits": ("tso_waits",),
}
#: TiDB's KV requests by type: ``kv_requests.<Type>`` counters -> ``work.tidb.kv_requests.<Type>``
KV_PREFIX = "kv_requests."
#: where TiDB's KV requests were counted (``kv_source`` counter): RPCs to TiKV, or the transaction layer
KV_SOURCES = {1.0: "rpc", 0.0: "txn"}
#: a prediction this far off (either way) is reported as a finding
GAP_FINDING = 0.25
#: round trips from latency hold only where neither side's fastest operation met a queue: level 0's
#: fastest operation within this share of the added RTT ...
QUEUE_FREE_LEVEL0 = 0.10
#: ... and the faulted rounds' median operation within this share of it above their fastest (a
#: queue that holds the typical operation a while holds the fastest one too, sooner or later)
QUEUE_FREE_FAULTED = 0.50
#: operations that are all alike cross the faulted links a whole number of times: an estimate
#: further than this from a whole number met a queue or overlapped another operation's wait
WHOLE_NUMBER = 0.15
#: the mean (mixed operations) holds only where the faulted level runs at most this share of level
#: 0's throughput (below it, the server has idle time and operations queue little)
NETWORK_BOUND = 0.50
#: statements and bytes per operation include each connection's own set-up and teardown (a
#: handshake, a prepare, a quit: on the lab 1 statement and about 530 bytes), spread over the
#: connection's operations, however many fitted into a round cut short. Below this many operations
#: per connection that part can move by more than half a 10 % budget between runs of unchanged code
#: (a read's own bytes are about 175: 530 / 60 = 5 % of them; a statement is 1: 1 / 20 = 5 %), so
#: the value is not a count. Seen: read bytes 225 at 10.6 operations per connection against 195 at 26
#: in two same-code runs (replica_read 100 ms c=250, 2026-11-27), when 10 per connection was the rule.
MIN_OPS_PER_CONNECTION = {"bytes_per_op": 60.0, "statements": 20.0}
#: a MariaDB replica cleans mysql.gtid_slave_pos up every 64 applied transactions
#: (gtid_cleanup_batch_size): its handler calls and rows come in batches, so they are counts per
#: operation only over enough operations that one batch more or less stays small
REPLICA_BATCH = 64
REPLICA_BATCHED = ("handler_calls", "rows_read", "rows_written")
MIN_REPLICA_BATCHES = 5
#: below this many operations per second the per-operation rates are not worth keeping (counter totals over
#: the windows, divided by the operations in them, are exact at any pace: a TPC-H query at SF 1 takes 30 s)
MIN_OPS_PER_S = 1.0


def _f(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def operations(cell: Mapping[str, Any]) -> tuple[float, float, int]:
    """(operations, seconds, rounds) over the cell's measured rounds: sysbench
    events (transactions; one statement each for the probes), whose latency
    the rounds report, so a release that adds a statement to each operation
    shows as more statements and round trips per operation."""
    events = seconds = 0.0
    n = 0
    for r in cell.get("rounds") or []:
        sec = _f(r.get("seconds"))
        rate = _f(r.get("tps"))
        if not math.isfinite(rate):
            rate = _f(r.get("qps"))
        if math.isfinite(sec) and sec > 0 and math.isfinite(rate):
            events += rate * sec
            seconds += sec
            n += 1
    return events, seconds, n


def ops_per_s(cell: Mapping[str, Any]) -> float:
    """Operations per second over the cell's measured rounds (``operations``)."""
    events, seconds, _n = operations(cell)
    return events / seconds if seconds > 0 else math.nan


def _per_op(ev: Mapping[str, Any], cell: Mapping[str, Any]) -> tuple[Mapping[str, Any], float]:
    """The server counters and what divides them into per-operation values.

    Totals over the windows (``counters``) divided by the operations of the
    same rounds, when every round has its window: exact whatever the
    machine's pace. Otherwise (a lost window; TiDB, whose counters are
    Prometheus rates) rates divided by operations per second."""
    events, _seconds, rounds = operations(cell)
    totals = ev.get("counters")
    if isinstance(totals, Mapping) and totals and ev.get("windows") == rounds and events > 0:
        return totals, events
    return ev.get("counters_per_s") or {}, ops_per_s(cell)


def _exact_totals(ev: Mapping[str, Any], cell: Mapping[str, Any]) -> bool:
    """Every measured round has its window's counter totals (``_per_op`` divides totals, not rates)."""
    events, _seconds, rounds = operations(cell)
    return bool(ev.get("counters")) and ev.get("windows") == rounds and events > 0


def mean_latency_ms(cell: Mapping[str, Any]) -> float:
    """The cell's mean latency per operation over its rounds, weighted by each round's operations."""
    num = den = 0.0
    for r in cell.get("rounds") or []:
        avg = _f((r.get("latency_ms") or {}).get("avg"))
        rate = _f(r.get("tps")) if math.isfinite(_f(r.get("tps"))) else _f(r.get("qps"))
        n = rate * _f(r.get("seconds"))
        if math.isfinite(avg) and math.isfinite(n) and n > 0:
            num += avg * n
            den += n
    return num / den if den else math.nan


def fastest_latency_ms(cell: Mapping[str, Any]) -> float:
    """The fastest operation of the cell's rounds: the one that met no queue."""
    mins = [_f((r.get("latency_ms") or {}).get("min")) for r in cell.get("rounds") or []]
    mins = [m for m in mins if math.isfinite(m)]
    return min(mins) if mins else math.nan


def uniform_operations(cell: Mapping[str, Any]) -> bool:
    """Every operation of the cell does the same thing (a probe statement),
    and the level's delay is fixed (no jitter): its fastest operation then
    crossed the faulted links as often as every other one."""
    level = cell.get("level") or {}
    return str(cell.get("workload", "")).startswith("probe_") and not _f(level.get("jitter") or 0) > 0


def added_rtt_ms(cell: Mapping[str, Any]) -> float:
    """The round-trip time the cell's level adds on every faulted link (0 when it adds none)."""
    level = cell.get("level") or {}
    if level.get("kind") != "delay":
        return 0.0
    v = _f(level.get("value"))
    return v if math.isfinite(v) and v > 0 else 0.0


def _metric(value: float, unit: str, digits: int = 3, *, why_not: str | None = None) -> dict[str, Any]:
    """A census metric; ``why_not``: why this value is not a count here (it is then reported, never gated)."""
    out: dict[str, Any] = {"value": round(value, digits), "unit": unit}
    if why_not:
        out.update(count=False, why=why_not)
    return out


def _p50_above_fastest_ms(cell: Mapping[str, Any]) -> float:
    """How long the typical operation of the round that holds the fastest one
    waited beyond it: a queue's share of the faulted rounds."""
    best = math.inf
    gap = math.nan
    for r in cell.get("rounds") or []:
        lat = r.get("latency_ms") or {}
        low, mid = _f(lat.get("min")), _f(lat.get("p50"))
        if math.isfinite(low) and low < best:
            best, gap = low, mid - low
    return gap


def round_trips_why_not(cell: Mapping[str, Any], level0: Mapping[str, Any], k: float, rtt: float,
                        by_fastest: bool) -> str | None:
    """None where added latency over added RTT is a count of round trips, else why not.

    Fastest operation (the probes): both sides' fastest operations must have
    met no queue. Level 0's fastest must be a small share of the RTT (at
    concurrency 1000 on the 2-core lab it waited 40 ms with no fault at all);
    the faulted rounds' median operation must be close to their fastest (a
    queue at the faulted level inflated the fastest operation by up to 1.4
    RTTs at concurrency 500-1000, 2026-11-27); and alike operations cross the
    links a whole number of times. Mean (mixed operations): level 0's mean
    must be a small share of the RTT and the faulted level must leave the
    server idle half the time, or queues at either side move the mean; and
    each side's window must have run the workload's mix (``mix_why_not``)."""
    if by_fastest:
        fast0 = fastest_latency_ms(level0)
        if fast0 > QUEUE_FREE_LEVEL0 * rtt:
            return (f"level 0's fastest operation took {fast0:.1f} ms, {fast0 / rtt:.0%} of the added {rtt:g} ms "
                    "RTT: every operation met a queue there")
        gap = _p50_above_fastest_ms(cell)
        if math.isfinite(gap) and gap > QUEUE_FREE_FAULTED * rtt:
            return (f"the faulted rounds' median operation waited {gap:.1f} ms ({gap / rtt:.2f} RTT) longer than "
                    "their fastest: a queue at the faulted level reaches the fastest operation too")
        if abs(k - round(k)) > WHOLE_NUMBER:
            return (f"{k:.2f} is not a whole number of round trips, which alike operations cross: the fastest "
                    "operation met a queue or overlapped another's wait")
        return None
    mixed = mix_why_not(cell) or mix_why_not(level0)  # the mean of mixed operations moves with their shares
    if mixed:
        return mixed
    lat0 = mean_latency_ms(level0)
    if lat0 > QUEUE_FREE_LEVEL0 * rtt:
        return (f"level 0's mean operation took {lat0:.1f} ms, {lat0 / rtt:.0%} of the added {rtt:g} ms RTT: "
                "queues at level 0 move the mean")
    if not network_paced(cell, level0):
        qps0 = ops_per_s(level0)
        share = f"{ops_per_s(cell) / qps0:.0%}" if qps0 > 0 else "an unknown share"
        return (f"the faulted level ran at {share} of level 0's throughput (a pace the network sets needs at most "
                f"{NETWORK_BOUND:.0%}): the server was busy, and operations queued there")
    return None


def connections_of(cell: Mapping[str, Any]) -> int:
    """Connections the load opened over the cell's measured windows: each
    round's clients (one connection each) and their reconnects."""
    _events, _seconds, rounds = operations(cell)
    c = int(_f(cell.get("concurrency")) if math.isfinite(_f(cell.get("concurrency"))) else 0)
    reconnects = _f(cell.get("reconnects"))
    return c * rounds + (int(reconnects) if math.isfinite(reconnects) else 0)


def _planned_rounds(cell: Mapping[str, Any]) -> bool:
    """Every measured round ran all the operations it planned (no --round-cap
    cut it short): the window's operations are the same in every run."""
    planned = _f((cell.get("workload_extra") or {}).get("queries_per_round"))
    rounds = cell.get("rounds") or []
    return bool(rounds) and math.isfinite(planned) and all(_f(r.get("queries")) >= planned for r in rounds)


def network_paced(cell: Mapping[str, Any], level0: Mapping[str, Any] | None) -> bool:
    """The faulted level ran at most ``NETWORK_BOUND`` of level 0's throughput:
    the network, not the machine, set its pace."""
    if level0 is None or _f((cell.get("level") or {}).get("value")) == 0:
        return False
    qps, qps0 = ops_per_s(cell), ops_per_s(level0)
    return math.isfinite(qps) and math.isfinite(qps0) and qps0 > 0 and qps / qps0 <= NETWORK_BOUND


def connection_why_not(cell: Mapping[str, Any], level0: Mapping[str, Any] | None = None, *,
                       minimum: float = MIN_OPS_PER_CONNECTION["statements"]) -> str | None:
    """None where statements and bytes per operation are counts, else why not.

    Each connection's own set-up and teardown is in the window (census 2): a
    fixed cost per connection (on the lab about one statement and 490 bytes)
    spread over the window's operations. Where those are few per connection,
    that part is large, and it is a count only if the number of operations is
    the same in every run: every round ran all it planned. Rounds cut short by
    --round-cap are not, even where the network sets the pace (how many
    operations fit after hundreds of connections start at 200 ms is not fixed:
    bytes per operation 281 and 327 in two same-code runs at c=250): at
    concurrency 1000 on the lab a write cost 1.20-1.64 statements as 841-2000
    operations fitted into a round."""
    events, _seconds, _rounds = operations(cell)
    conns = connections_of(cell)
    if conns <= 0 or events <= 0:
        return None
    per = events / conns
    if per >= minimum or _planned_rounds(cell):
        return None
    return (f"{events:.0f} operations over {conns} connections ({per:.1f} each), as many as fitted into rounds "
            f"cut short: each connection's own set-up and teardown is a large part of the value and moves with "
            f"how many fitted (a count needs {minimum:g} operations per connection, or all planned "
            f"operations run)")


#: a count of which the server's own work with no load (measured idle) is more than this share is not a
#: count of the operations' work
MAX_BACKGROUND_SHARE = 0.10


def background_why_not(ev: Mapping[str, Any]) -> Callable[..., str | None]:
    """``why(server, *counters)``: None where the server's own work with no load (TiDB: statistics,
    TTL and DDL jobs, which count as user work too; ``counters_background_per_s``, measured when the
    session opened) is a small share of the counted total over the windows' seconds, else why not."""
    rates = ev.get("counters_background_per_s") or {}
    seconds = _f(ev.get("counters_seconds"))
    totals = ev.get("counters") or {}

    def why(server: str, *names: str) -> str | None:
        bg = sum(_f((rates.get(server) or {}).get(n, 0.0)) for n in names) * seconds
        total = sum(_f((totals.get(server) or {}).get(n, 0.0)) for n in names)
        if not (math.isfinite(bg) and bg > 0 and math.isfinite(total)):
            return None
        if total <= 0 or bg / total > MAX_BACKGROUND_SHARE:
            share = "all" if total <= 0 else f"{bg / total:.0%}"
            return (f"the server's own work with no load ({bg / seconds:.2g}/s, measured idle when the session "
                    f"opened) would be {share} of this count over the windows' {seconds:.1f} s: not the "
                    "operations' work")
        return None

    return why


def census_of(cell: Mapping[str, Any], level0: Mapping[str, Any] | None = None,
              lower: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The census of ``cell`` (a cell's JSON): ``{"metrics": {name: {value, unit}}, ...}``.

    ``level0``: the same scenario and concurrency at level 0 of the same run
    (for round trips), unless the cell interleaved its own level-0 rounds
    (``wanbench.interleave``): those, measured beside its faulted rounds;
    ``lower``: the census of the same group's previous faulted level of this
    run (for the prediction). Missing inputs leave
    their metrics out, never a guess.
    """
    metrics: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {"metrics": metrics}
    ops = ops_per_s(cell)
    out["ops_per_s"] = None if not math.isfinite(ops) else round(ops, 3)
    rtt = added_rtt_ms(cell)
    lat = mean_latency_ms(cell)
    beside = reference_rounds(cell)
    if beside:  # interleaved: the cell's own level-0 rounds, each run next to a faulted one
        level0, level0_id = {"rounds": beside}, "interleaved"
        record = (cell.get("workload_extra") or {}).get(INTERLEAVE_KEY) or {}
        out["interleaved"] = {k: record.get(k) for k in ("order", "drop", "log_ratio_sd", "added_latency_ms")}
        out["interleaved"]["pairs"] = len(record.get("pairs") or ())
        if (cell.get("level") or {}).get("value") == 0:  # a level-0 cell's two halves: the A/A guard
            out["interleaved"]["aa_guard"] = True
    else:
        level0_id = str((level0 or {}).get("test_id", ""))
    if level0 is not None and rtt > 0:
        lat0 = mean_latency_ms(level0)
        fast, fast0 = fastest_latency_ms(cell), fastest_latency_ms(level0)
        by_fastest = uniform_operations(cell) and math.isfinite(fast) and math.isfinite(fast0)
        if math.isfinite(lat) and math.isfinite(lat0):
            k = (fast - fast0) / rtt if by_fastest else (lat - lat0) / rtt
            metrics["round_trips"] = _metric(k, UNITS["round_trips"],
                                             why_not=round_trips_why_not(cell, level0, k, rtt, by_fastest))
            out["round_trips"] = {"added_rtt_ms": rtt, "method": "fastest" if by_fastest else "mean",
                                  "mean_latency_ms": round(lat, 3), "level0_mean_latency_ms": round(lat0, 3),
                                  "level0": level0_id}
            if by_fastest:
                out["round_trips"].update(fastest_ms=round(fast, 3), level0_fastest_ms=round(fast0, 3),
                                          by_mean=round((lat - lat0) / rtt, 3))
            prediction = _predict(cell, lat0, rtt, lower)
            if prediction:
                out["prediction"] = prediction
    ev = (cell.get("extra") or {}).get("evidence") or {}
    if math.isfinite(ops) and isinstance(ev, Mapping) and (ops >= MIN_OPS_PER_S or _exact_totals(ev, cell)):
        links = {}
        for link, rates in sorted((ev.get("links") or {}).items()):
            total = _f(rates.get("in_bytes_per_s")) + _f(rates.get("out_bytes_per_s"))
            if math.isfinite(total):
                links[link] = round(total / ops, 1)
        if links:  # a picture, not gated: socket counters lose a closing socket's last second
            out["link_bytes_per_op"] = links
        counted, divisor = _per_op(ev, cell)
        borne = {name: connection_why_not(cell, level0, minimum=least)
                 for name, least in MIN_OPS_PER_CONNECTION.items()}
        idle = background_why_not(ev)
        mixed = mix_why_not(cell)  # TPC-C, YCSB: a window that ran another mix than the workload's
        events = operations(cell)[0]
        batched = (None if events >= MIN_REPLICA_BATCHES * REPLICA_BATCH else
                   f"over {events:.0f} operations: the replica cleans its GTID table up every {REPLICA_BATCH} "
                   f"applied transactions, and one batch more or less moves this by {2 * REPLICA_BATCH / events:.2f} "
                   f"per operation or more (a count needs {MIN_REPLICA_BATCHES * REPLICA_BATCH} operations)")
        for server, counters in sorted(counted.items()):
            contention = lock_retries_of(counters)
            locked = lock_why_not(contention)
            sent, received = _f(counters.get("Bytes_sent")), _f(counters.get("Bytes_received"))
            if math.isfinite(sent) and math.isfinite(received):
                metrics[f"bytes_per_op.{server}"] = _metric((sent + received) / divisor, UNITS["bytes_per_op"], 1,
                                                            why_not=borne["bytes_per_op"] or mixed
                                                            or idle(server, "Bytes_sent", "Bytes_received"))
            for name, sources in WORK.items():
                vals = [_f(counters.get(c)) for c in sources if c in counters]
                if vals and all(math.isfinite(v) for v in vals):
                    why = (borne.get(name) or mixed or idle(server, *sources)
                           or (batched if server == "replica" and name in REPLICA_BATCHED else None)
                           or (locked if name in RETRIED_WORK else None))
                    metrics[f"work.{server}.{name}"] = _metric(sum(vals) / divisor, f"{name} {UNITS['work']}",
                                                               why_not=why)
            kv = {k: _f(v) for k, v in counters.items() if str(k).startswith(KV_PREFIX)}
            if contention is not None:
                out.setdefault("lock_retries", {})[server] = contention
            for name, v in sorted(kv.items()):
                typ = name.split(".", 1)[1]
                if math.isfinite(v):
                    why = mixed or idle(server, name) or (None if typ in SENT_AT_COMMIT else locked)
                    metrics[f"work.{server}.{name}"] = _metric(v / divisor, f"{typ} KV requests {UNITS['work']}",
                                                               why_not=why)
            if kv and "kv_source" in counters:
                out["kv_source"] = KV_SOURCES.get(_f(counters["kv_source"]), "unknown")
    return out


def _predict(cell: Mapping[str, Any], lat0: float, rtt: float, lower: Mapping[str, Any] | None) -> dict[str, Any]:
    """Closed loop: ``c`` clients each wait ``L_0 + k * RTT`` per operation,
    with ``k`` the round trips measured at the previous level of this run."""
    if not lower:
        return {}
    measured = (lower.get("metrics") or {}).get("round_trips")
    if not measured or measured.get("count") is False:  # no count of round trips to predict from
        return {}
    k = float(measured["value"])
    c = int(cell.get("concurrency") or 0)
    if k * rtt < lat0:  # round trips are not most of the wait: a busy loop, which this model does not describe
        return {}
    wait_ms = lat0 + k * rtt
    qps = ops_per_s(cell)
    if c <= 0 or wait_ms <= 0 or not math.isfinite(qps):
        return {}
    predicted = c / (wait_ms / 1000.0)
    gap = qps / predicted - 1.0
    out = {"model": "closed loop c / (L0 + k * RTT), operations per second",
           "k_from": lower.get("test_id", "the previous level"), "round_trips_used": round(k, 3),
           "predicted_qps": round(predicted, 1), "measured_qps": round(qps, 1), "gap": round(gap, 4)}
    if abs(gap) > GAP_FINDING:
        more = "more" if gap > 0 else "less"
        out["finding"] = (f"measured QPS {qps:.0f} is {abs(gap) * 100:.0f}% {more} than the {predicted:.0f} a "
                          f"closed loop of {c} predicts from {k:.2f} round trips per operation: "
                          + ("a window limit, a queue or head-of-line blocking costs more than the round trips"
                             if gap < 0 else "operations overlap their round trips (pipelining, group commit)"))
    return out


def values_of(census: Mapping[str, Any] | None) -> dict[str, float]:
    """The census's counts by name (what the gate judges and the baseline store
    keeps): a value that is not a count where it was measured is left out."""
    out: dict[str, float] = {}
    for name, m in ((census or {}).get("metrics") or {}).items():
        if isinstance(m, Mapping) and m.get("count") is False:
            continue
        v = _f(m.get("value") if isinstance(m, Mapping) else m)
        if math.isfinite(v):
            out[str(name)] = v
    return out


def not_counts_of(census: Mapping[str, Any] | None) -> dict[str, str]:
    """The census values that are not counts where they were measured: name -> the value and why."""
    out: dict[str, str] = {}
    for name, m in ((census or {}).get("metrics") or {}).items():
        if isinstance(m, Mapping) and m.get("count") is False:
            out[str(name)] = f"{_f(m.get('value')):.3g}: {m.get('why', 'not a count here')}"
    return out
