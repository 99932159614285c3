"""TPC-H on a MySQL-protocol server: a round is the 22 queries of one
power-test stream on one connection, each timed, counted and checked.

    prepared = tpch_load.prepare(target, 0.01)            # generate once, load once
    with tpch_answers.Reference(prepared.dataset) as ref:  # DuckDB, for the answers
        result = run_round(target, 0.01, reference=ref)    # validation parameters
        result = run_round(target, 0.01, seed=7, reference=ref)
    result.power_queries_only, result.failed, result.wrong, result.checks()

Each query is timed on the client from ``execute`` until its last row is
fetched (the rows are decoded by the driver in that time, as a user's client
would). Result bytes are read from the kernel: ``TCP_INFO``'s
``tcpi_bytes_received`` of the connection's socket before and after the
query, so they are what crossed the link (MySQL packet headers, column
definitions and the closing packet included; mysql-connector counts no bytes
itself). Where that counter cannot be read (a UNIX socket, the C extension,
a kernel without it), ``bytes_received`` is None and ``value_bytes`` (every
value's length as text, the text protocol's payload without its framing) is
the approximation.

A query that fails (the connection reset while its result is written, MySQL
errors 2013/2055, a timeout, any server error) fails alone: it is recorded
with its error, the connection is dropped, and the next query runs on a
fresh one.
"""

from __future__ import annotations

import math
import socket
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from wanbench.redact import hide
from wanbench.results import Latency, Round, WorkloadResult
from wanbench.workloads.tpch_answers import Answer, Mismatch, Reference
from wanbench.workloads.tpch_data import sf_label
from wanbench.workloads.tpch_queries import STREAM0_ORDER, Params, query, stream_params

if TYPE_CHECKING:
    from wanbench.sql import SqlTarget

WORKLOAD = "tpch"
#: struct tcp_info (linux/tcp.h): u64 tcpi_bytes_received at byte offset 128 (Linux >= 4.1)
_TCPI_BYTES_RECEIVED = 128
#: clause 5.4.1: when the longest query took more than 1000 times the shortest, every
#: query time below max/1000 counts as max/1000 in the power metric
POWER_CLAMP_RATIO = 1000.0


def socket_bytes_received(cnx: Any) -> int | None:
    """The kernel's count of bytes received on the connection's TCP socket, or None."""
    sock = getattr(getattr(cnx, "_socket", None), "sock", None)  # mysql-connector's pure-Python protocol
    if not isinstance(sock, socket.socket) or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    except OSError:
        return None
    if len(info) < _TCPI_BYTES_RECEIVED + 8:
        return None
    return int(struct.unpack_from("=Q", info, _TCPI_BYTES_RECEIVED)[0])


def value_bytes(rows: Sequence[Sequence[Any]]) -> int:
    """The values' lengths as the text protocol sends them (NULL: 1 byte)."""
    n = 0
    for row in rows:
        for v in row:
            n += 1 if v is None else len(str(v).encode())
    return n


@dataclass(frozen=True)
class QueryRun:
    """One query of a round: its time, rows, bytes, error and answer check."""

    number: int
    position: int  # 1-based place in the stream
    params: Mapping[str, str]
    seconds: float  # execute .. last row fetched (until the error, for a failed query)
    rows: int = 0
    bytes_received: int | None = None
    value_bytes: int = 0
    error: str = ""
    error_code: int | None = None
    connection_id: int | None = None
    checked: bool = False  # its answer was compared with the reference
    problems: tuple[Mismatch, ...] = ()

    @property
    def label(self) -> str:
        return f"Q{self.number}"

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def wrong(self) -> bool:
        return bool(self.problems)

    def describe(self) -> str:
        if self.error:
            code = f" ({self.error_code})" if self.error_code is not None else ""
            return f"{self.label} failed after {self.seconds:.3f}s{code}: {self.error}"
        size = f"{self.bytes_received} B" if self.bytes_received is not None else f"~{self.value_bytes} B of values"
        verdict = ("answer wrong" if self.problems else "answer ok") if self.checked else "answer not checked"
        return f"{self.label} {self.seconds:.3f}s, {self.rows} rows, {size}, {verdict}"

    def to_json(self) -> dict[str, Any]:
        return {"query": self.number, "position": self.position, "params": dict(self.params),
                "seconds": round(self.seconds, 6), "rows": self.rows, "bytes_received": self.bytes_received,
                "value_bytes": self.value_bytes, "error": self.error, "error_code": self.error_code,
                "checked": self.checked, "problems": [p.to_json() for p in self.problems]}


def power_queries_only(seconds: Sequence[float], scale_factor: float) -> tuple[float, float, int]:
    """``(power, geometric mean, clamped)`` of the 22 query times of a power stream.

    TPC-H's Power@Size (clause 5.4.1) is 3600 * SF / (prod QI(i,0) * prod RI(j,0)) ** (1/24)
    over the 22 queries *and* the two refresh functions. No refresh function
    runs here, so this is the same formula over the 22 queries alone:
    3600 * SF / (prod QI(i,0)) ** (1/22), "power (queries only)", not a TPC-H
    Power@Size. The clause's 1000x rule is applied (``clamped``: how many times
    were raised to max/1000); its rounding of reported times to 0.1 s is not
    (at small scale factors every query would count as 0.1 s)."""
    if not seconds or any(s <= 0 or not math.isfinite(s) for s in seconds):
        return math.nan, math.nan, 0
    floor = max(seconds) / POWER_CLAMP_RATIO
    clamped = sum(1 for s in seconds if s < floor)
    used = [max(s, floor) for s in seconds]
    geomean = math.exp(sum(math.log(s) for s in used) / len(used))
    return 3600.0 * scale_factor / geomean, geomean, clamped


@dataclass(frozen=True)
class RoundResult:
    """A stream of the 22 queries on one connection (a new one after each failure)."""

    scale_factor: float
    seed: int | None  # None: the validation parameters
    queries: tuple[QueryRun, ...]  # in the order they ran
    wall_seconds: float  # the whole round, connects and checks included
    reconnects: int = 0
    stream: int = 0

    @property
    def failed(self) -> tuple[QueryRun, ...]:
        return tuple(q for q in self.queries if not q.ok)

    @property
    def wrong(self) -> tuple[QueryRun, ...]:
        return tuple(q for q in self.queries if q.wrong)

    @property
    def query_seconds(self) -> float:
        """The successful queries' times added up (the stream's time in queries)."""
        return sum(q.seconds for q in self.queries if q.ok)

    @property
    def complete(self) -> bool:
        """All 22 queries answered (right or wrong)."""
        return len(self.queries) == 22 and not self.failed

    @property
    def power(self) -> tuple[float, float, int]:
        if not self.complete:
            return math.nan, math.nan, 0
        return power_queries_only([q.seconds for q in self.queries], self.scale_factor)

    @property
    def power_queries_only(self) -> float:
        """3600 * SF / geometric mean of the 22 query times (NaN unless all 22 succeeded)."""
        return self.power[0]

    @property
    def geomean_s(self) -> float:
        return self.power[1]

    @property
    def queries_per_hour(self) -> float:
        """Successful queries x 3600 / their summed times: the stream's throughput,
        one stream at a time (not TPC-H's Throughput@Size, which runs concurrent streams)."""
        s = self.query_seconds
        ok = sum(1 for q in self.queries if q.ok)
        return ok * 3600.0 / s if s > 0 else math.nan

    @property
    def bytes_received(self) -> int | None:
        """Result bytes of the successful queries from the socket counter; None if any could not be read."""
        counts = [q.bytes_received for q in self.queries if q.ok]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    @property
    def bytes_source(self) -> str:
        return "tcp_info" if self.bytes_received is not None else "values"

    def checks(self) -> list[dict[str, Any]]:
        """One entry per checked query, as the integrity rules read them
        (``wanbench.gate.integrity``): ``passed`` False names a wrong answer."""
        out = []
        for q in self.queries:
            if not q.checked:
                continue
            lines = [p.message() for p in q.problems]
            shown = "; ".join(lines[:5]) + (f" (+{len(lines) - 5} more)" if len(lines) > 5 else "")
            out.append({"name": q.label, "clause": "2.1.3.5", "passed": not q.problems,
                        "message": f"{q.label}: answer matches the reference" if not q.problems
                        else f"{q.label} answer differs from the reference: {shown}",
                        "problems": [p.to_json() for p in q.problems[:20]]})
        return out

    def summary(self) -> str:
        head = (f"TPC-H SF {sf_label(self.scale_factor)} stream {self.stream} "
                f"({'validation parameters' if self.seed is None else f'seed {self.seed}'}): "
                f"{len(self.queries) - len(self.failed)}/{len(self.queries)} queries ok, "
                f"{len(self.wrong)} wrong, {self.query_seconds:.3f}s in queries")
        if self.complete:
            head += (f", power (queries only) {self.power_queries_only:.1f}, geomean {self.geomean_s * 1000:.2f} ms"
                     f", {self.queries_per_hour:.0f} queries/h")
        return "\n".join([head, *("  " + q.describe() for q in self.queries)])

    def to_json(self) -> dict[str, Any]:
        power, geomean, clamped = self.power
        return {"scale_factor": self.scale_factor, "seed": self.seed, "stream": self.stream,
                "wall_seconds": round(self.wall_seconds, 3), "query_seconds": round(self.query_seconds, 6),
                "power_queries_only": _finite(power), "geomean_s": _finite(geomean), "clamped": clamped,
                "queries_per_hour": _finite(self.queries_per_hour), "bytes_received": self.bytes_received,
                "bytes_source": self.bytes_source, "reconnects": self.reconnects,
                "failed": [q.label for q in self.failed], "wrong": [q.label for q in self.wrong],
                "queries": [q.to_json() for q in self.queries]}


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


class RoundHooks:
    """Told about each query of a round (no-ops here): evidence windows, tests."""

    def before_query(self, number: int, connection_id: int | None) -> None:
        """Right before query ``number`` is sent on connection ``connection_id``."""

    def after_query(self, run: QueryRun) -> None:
        """Right after it ended (answer check included)."""

    def round_done(self) -> None:
        """After the round's last query, while its connection is still open (a measured window
        ends here, so its last look at the link's socket still finds the round's bytes)."""


@dataclass
class _Session:
    target: SqlTarget
    query_timeout: float
    cnx: Any = None
    connects: int = 0
    opts: dict[str, Any] = field(default_factory=dict)

    def get(self) -> Any:
        if self.cnx is None:
            wait = max(1, math.ceil(self.query_timeout))  # mysql-connector takes whole seconds
            self.cnx = self.target.connect(who=None, read_timeout=wait, write_timeout=wait, **self.opts)
            self.connects += 1
            _limit_statement_time(self.cnx, self.query_timeout)
        return self.cnx

    def drop(self) -> None:
        cnx, self.cnx = self.cnx, None
        if cnx is None:
            return
        try:
            cnx.close()
        except Exception:  # a broken connection may fail to close in any way
            pass

    def connection_id(self) -> int | None:
        try:
            return int(self.cnx.connection_id) if self.cnx is not None else None
        except (TypeError, ValueError, AttributeError):
            return None


def _limit_statement_time(cnx: Any, seconds: float) -> None:
    """The server stops a query the client stopped waiting for (MariaDB's
    max_statement_time, in s; MySQL's and TiDB's max_execution_time, in ms);
    best effort: a server without either still gets the client's read timeout."""
    import mysql.connector

    cur = cnx.cursor()
    for stmt in (f"SET SESSION max_statement_time = {seconds:g}",
                 f"SET SESSION max_execution_time = {round(seconds * 1000)}"):
        try:
            cur.execute(stmt)
            break
        except mysql.connector.Error:
            continue
    cur.close()


def _run_one(session: _Session, number: int, position: int, params: Params, reference: Reference | None,
             hooks: RoundHooks) -> QueryRun:
    sql = query(number).sql(params)
    try:
        cnx = session.get()
    except Exception as exc:  # this query fails, the round goes on
        return QueryRun(number, position, params, 0.0, error=_message(exc, session.target),
                        error_code=getattr(exc, "errno", None))
    cid = session.connection_id()
    hooks.before_query(number, cid)
    before = socket_bytes_received(cnx)
    start = time.perf_counter()
    try:
        cur = cnx.cursor()
        cur.execute(sql)
        rows = cur.fetchall()
        seconds = time.perf_counter() - start
        after = socket_bytes_received(cnx)
        columns = tuple(d[0] for d in cur.description or ())
        cur.close()
    except Exception as exc:  # this query fails, the round goes on with a fresh connection
        seconds = time.perf_counter() - start
        session.drop()
        return QueryRun(number, position, params, seconds, error=_message(exc, session.target),
                        error_code=getattr(exc, "errno", None), connection_id=cid)
    received = after - before if before is not None and after is not None else None
    problems: tuple[Mismatch, ...] = ()
    if reference is not None:
        problems = tuple(reference.check(number, params, Answer(columns, tuple(tuple(r) for r in rows))))
    return QueryRun(number, position, params, seconds, len(rows), received, value_bytes(rows),
                    connection_id=cid, checked=reference is not None, problems=problems)


def _message(exc: BaseException, target: SqlTarget) -> str:
    text = str(getattr(exc, "msg", None) or exc) or type(exc).__name__
    return hide(f"{type(exc).__name__}: {text}", [target.password])


def run_round(target: SqlTarget, scale_factor: float, *, seed: int | None = None,
              params: Mapping[int, Params] | None = None, order: Sequence[int] = STREAM0_ORDER,
              reference: Reference | None = None, query_timeout: float = 600.0,
              hooks: RoundHooks | None = None, connect_options: Mapping[str, Any] | None = None) -> RoundResult:
    """Run the queries in ``order`` (stream 0 of the power test) one after
    another on one connection and check each answer against ``reference``.

    Parameters: ``params`` if given, else drawn from ``seed``, else the
    validation parameters. ``query_timeout``: seconds a query may take (the
    client's read timeout and, where the server has one, its statement time
    limit). Never raises for a query's failure: see ``RoundResult.failed``."""
    chosen = dict(params) if params is not None else stream_params(scale_factor, seed)
    hooks = hooks or RoundHooks()
    if reference is not None:  # DuckDB's work done before the timed stream starts
        for n in order:
            reference.answer(n, chosen[n])
    session = _Session(target, query_timeout, opts=dict(connect_options or {}))
    start = time.monotonic()
    runs: list[QueryRun] = []
    try:
        for position, number in enumerate(order, 1):
            run = _run_one(session, number, position, chosen[number], reference, hooks)
            runs.append(run)
            hooks.after_query(run)
    finally:
        try:
            hooks.round_done()
        finally:
            session.drop()
    return RoundResult(scale_factor, seed if params is None else None, tuple(runs), time.monotonic() - start,
                       reconnects=max(0, session.connects - 1))


# ---------------------------------------------------------------- a cell's numbers

def _latency(seconds: Sequence[float]) -> Latency:
    if not seconds:
        return Latency()
    ms = sorted(s * 1000.0 for s in seconds)

    def pct(p: float) -> float:
        return ms[min(len(ms) - 1, max(0, math.ceil(p / 100.0 * len(ms)) - 1))]

    return Latency(avg=sum(ms) / len(ms), min=ms[0], p50=pct(50), p90=pct(90), p95=pct(95), p99=pct(99),
                   p999=pct(99.9), max=ms[-1])


def to_workload_result(rounds: Sequence[RoundResult]) -> WorkloadResult:
    """The rounds as a cell's result: per round the successful queries, their
    summed time and queries per second (``qps``: the stream's throughput);
    ``extra`` holds power (queries only) per round, every query's time, rows
    and bytes, and ``checks`` (one per checked query) that the integrity
    rules read: a wrong answer makes the cell broken."""
    errors_by_code: dict[str, int] = {}
    for r in rounds:
        for q in r.failed:
            key = str(q.error_code) if q.error_code is not None else q.error.split(":", 1)[0]
            errors_by_code[key] = errors_by_code.get(key, 0) + 1
    per_round = []
    for r in rounds:
        ok = [q for q in r.queries if q.ok]
        secs = r.query_seconds
        per_round.append(Round(seconds=secs, queries=len(ok), qps=len(ok) / secs if secs > 0 else math.nan,
                               latency_ms=_latency([q.seconds for q in ok]), errors=len(r.failed),
                               reconnects=r.reconnects))
    per_query: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for q in r.queries:
            d = per_query.setdefault(q.label, {"seconds": [], "rows": [], "bytes_received": [], "errors": 0})
            if q.ok:
                d["seconds"].append(round(q.seconds, 6))
                d["rows"].append(q.rows)
                d["bytes_received"].append(q.bytes_received)
            else:
                d["errors"] += 1
    checks = [c | {"round": i} for i, r in enumerate(rounds) for c in r.checks()]
    sf = rounds[0].scale_factor if rounds else math.nan
    return WorkloadResult(
        workload=WORKLOAD, concurrency=1, rounds=tuple(per_round),
        latency_ms=_latency([q.seconds for r in rounds for q in r.queries if q.ok]),
        errors=sum(len(r.failed) for r in rounds), errors_by_code=errors_by_code,
        reconnects=sum(r.reconnects for r in rounds),
        reports=tuple(r.summary() for r in rounds),
        extra={"scale_factor": sf, "power_queries_only": [_finite(r.power_queries_only) for r in rounds],
               "geomean_s": [_finite(r.geomean_s) for r in rounds],
               "queries_per_hour": [_finite(r.queries_per_hour) for r in rounds],
               "bytes_received": [r.bytes_received for r in rounds], "bytes_source": sorted({r.bytes_source
                                                                                            for r in rounds}),
               "failed": [[q.to_json() for q in r.failed] for r in rounds],
               "per_query": per_query, "checks": checks},
    )
