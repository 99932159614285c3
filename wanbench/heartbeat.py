"""A heartbeat that measures availability: how long writes stop (RTO) and
which acknowledged writes go missing (RPO).

A few writer threads insert ``(run, writer, seq, sent_at)`` rows on a fixed
schedule: writer ``w`` plans attempt ``k`` at ``t0 + (w / writers + k) /
rate``, so the writers interleave and together give one attempt every
``1 / (writers * rate)`` seconds: the heartbeat's resolution.

The schedule never waits for the database. Each writer has one connection
and one statement in flight, like an application thread. When a write is
stuck past the next slot, that slot (and every later one that comes due) is
attempted as soon as the writer is free again, one after the other, and its
latency is counted from its *planned* time, not from when it was finally
sent. So a stall shows as a ramp of late attempts instead of disappearing
from the numbers (no coordinated omission), and every planned slot ends as
exactly one attempt. After ``stop()`` writers catch up on the slots planned
before it for at most ``drain_s``; slots still left are recorded as
``skipped``.

Every attempt ends as one of:

* ``ok``: the server acknowledged the commit (autocommit INSERT);
* ``failed``: it certainly did not commit: no connection could be made, the
  statement could not be sent whole, or the server answered with an error;
* ``unknown``: the statement was sent and the connection was lost or timed
  out while waiting for the answer (TiDB closes the connection when a
  commit's outcome is undetermined). Unknown attempts are reported apart: the read-back says
  whether they committed, and they are never counted as lost.

Writers reconnect the way applications do: a short connect timeout, a new
connection at the next slot after any error.

RTO is the longest stretch without an acknowledged write, where a write
counts as acknowledged at the moment its answer arrived and only if it
arrived within the SLO latency (``slo_s``) of its planned time; and the time
from the fault's removal to the first such write. RPO is the number of
acknowledged rows missing from a server when it is read back, and the span
of send times they cover.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import mysql.connector

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.sql import DATABASE
from wanbench.sql import connect as sql_connect
from wanbench.wait import wait_for

OK, FAILED, UNKNOWN, SKIPPED = "ok", "failed", "unknown", "skipped"
OUTCOMES = (OK, FAILED, UNKNOWN, SKIPPED)
TABLE = "wanbench_heartbeat"
#: client-side error numbers (CR_*) start at 2000; below are the server's own answers
_CLIENT_ERRNO = 2000


@dataclass(frozen=True)
class HeartbeatConfig:
    """How the heartbeat writes. Times in seconds."""

    writers: int = 3
    rate_hz: float = 10.0
    slo_s: float = 1.0
    connect_timeout_s: float = 1.0
    read_timeout_s: int = 2  # whole seconds: the connector's read/write timeouts take integers
    drain_s: float = 5.0
    table: str = TABLE

    def __post_init__(self) -> None:
        if not 1 <= self.writers <= 16:
            raise ConfigError(f"heartbeat writers must be 1..16, not {self.writers}")
        if not 0 < self.rate_hz <= 100:
            raise ConfigError(f"heartbeat rate must be in (0, 100] Hz per writer, not {self.rate_hz}")
        if self.slo_s <= 0:
            raise ConfigError(f"heartbeat SLO latency must be positive, not {self.slo_s}")
        if self.read_timeout_s < 1:
            raise ConfigError("heartbeat read timeout must be at least 1 s")

    @property
    def resolution_s(self) -> float:
        """Planned time between two consecutive attempts of all writers together."""
        return 1.0 / (self.writers * self.rate_hz)

    def to_json(self) -> dict[str, Any]:
        return {"writers": self.writers, "rate_hz": self.rate_hz, "slo_s": self.slo_s,
                "connect_timeout_s": self.connect_timeout_s, "read_timeout_s": self.read_timeout_s,
                "resolution_s": round(self.resolution_s, 4)}


@dataclass(frozen=True)
class Endpoint:
    """Where writers connect (the password never appears in repr)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    @classmethod
    def of(cls, target: Any) -> Endpoint:
        """From a ``wanbench.profiles.base.SqlTarget``."""
        return cls(target.host, target.port, target.user, target.password,
                   target.database)


@dataclass(frozen=True)
class Attempt:
    """One planned write. Times are seconds since the heartbeat started."""

    writer: int
    seq: int
    planned: float
    started: float
    ended: float
    outcome: str
    error: str = ""

    @property
    def latency_s(self) -> float:
        """From the planned send time (not the actual one) to the answer."""
        return self.ended - self.planned

    def to_json(self) -> list[Any]:
        """Compact: [writer, seq, planned, started, ended, outcome, error]."""
        return [self.writer, self.seq, round(self.planned, 4), round(self.started, 4), round(self.ended, 4),
                self.outcome, self.error]

    @classmethod
    def from_json(cls, row: Sequence[Any]) -> Attempt:
        return cls(int(row[0]), int(row[1]), float(row[2]), float(row[3]), float(row[4]), str(row[5]),
                   str(row[6]) if len(row) > 6 else "")


def _connect(ep: Endpoint, cfg: HeartbeatConfig) -> Any:
    return sql_connect(host=ep.host, port=ep.port, user=ep.user, password=ep.password, database=ep.database,
                       use_pure=True, timeout=cfg.connect_timeout_s, read_timeout=cfg.read_timeout_s,
                       write_timeout=cfg.read_timeout_s)


def _short(exc: BaseException) -> str:
    errno = getattr(exc, "errno", None)
    text = (str(getattr(exc, "msg", "") or "").strip() or str(exc).strip() or type(exc).__name__).splitlines()[0][:120]
    return f"{errno} {text}" if errno else f"{type(exc).__name__}: {text}"


class Heartbeat:
    """``prepare()``, ``start()``, ``mark(...)`` at the fault's edges, ``stop()``."""

    def __init__(self, endpoints: Sequence[Endpoint], config: HeartbeatConfig | None = None,
                 *, run_id: str | None = None) -> None:
        if not endpoints:
            raise ConfigError("the heartbeat needs at least one SQL endpoint")
        self.endpoints = list(endpoints)
        self.config = config or HeartbeatConfig()
        self.run_id = run_id or secrets.token_hex(6)
        self.t0 = 0.0  # time.monotonic() at start
        self.wall0 = 0.0  # time.time() at start
        self.marks: dict[str, float] = {}
        self._attempts: list[Attempt] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop_at = math.inf
        self._threads: list[threading.Thread] = []
        self.stopped_at: float | None = None

    # -- set-up ---------------------------------------------------------------------
    def prepare(self, timeout: float = 30.0) -> None:
        """Create the heartbeat table (once per cluster; rows of every run are kept apart by ``run``)."""
        t = self.config.table

        def create() -> bool:
            conn = _connect(self.endpoints[0], self.config)
            try:
                cur = conn.cursor()
                cur.execute(f"CREATE TABLE IF NOT EXISTS {t} (run VARCHAR(32) NOT NULL, writer INT NOT NULL, "
                            "seq INT NOT NULL, sent_at DOUBLE NOT NULL, PRIMARY KEY (run, writer, seq))")
                return True
            finally:
                conn.close()

        wait_for(create, what=f"the heartbeat table on {self.endpoints[0].host}:{self.endpoints[0].port}",
                 timeout=timeout, transient=(mysql.connector.Error,))

    # -- running ----------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since start (the attempts' clock)."""
        return time.monotonic() - self.t0

    def start(self) -> Heartbeat:
        if self._threads:
            raise InfrastructureError("heartbeat already started")
        self.t0 = time.monotonic()
        self.wall0 = time.time()
        for w in range(self.config.writers):
            th = threading.Thread(target=self._writer, args=(w,), name=f"heartbeat-{w}", daemon=True)
            self._threads.append(th)
            th.start()
        return self

    def mark(self, name: str) -> float:
        """Remember when something happened (``fault_applied``, ``fault_removed``)."""
        self.marks[name] = self.now()
        return self.marks[name]

    def attempts(self) -> list[Attempt]:
        with self._lock:
            return sorted(self._attempts, key=lambda a: (a.planned, a.writer))

    def stop(self) -> list[Attempt]:
        """Stop planning; writers catch up on slots already due (at most ``drain_s``)."""
        if self.stopped_at is None:
            self.stopped_at = self.now()
            self._stop_at = self.stopped_at
            self._wake.set()
            cfg = self.config
            limit = time.monotonic() + cfg.drain_s + cfg.read_timeout_s + cfg.connect_timeout_s + 5
            for th in self._threads:
                th.join(timeout=max(0.1, limit - time.monotonic()))
            stuck = [th.name for th in self._threads if th.is_alive()]
            if stuck:
                raise InfrastructureError(f"heartbeat writers {stuck} did not end after stop")
        return self.attempts()

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _writer(self, w: int) -> None:
        cfg = self.config
        ep = self.endpoints[w % len(self.endpoints)]
        offset = w / (cfg.writers * cfg.rate_hz)
        conn: Any = None
        cur: Any = None
        k = 0
        sql = f"INSERT INTO {cfg.table} (run, writer, seq, sent_at) VALUES (%s, %s, %s, %s)"
        try:
            while True:
                planned = offset + k / cfg.rate_hz
                if planned >= self._stop_at:
                    return
                wait = planned - self.now()
                if wait > 0 and self._wake.wait(wait):
                    continue  # stopped meanwhile: re-check whether this slot is still before the stop
                if self.stopped_at is not None and self.now() > self.stopped_at + cfg.drain_s:
                    now = self.now()
                    self._record(Attempt(w, k, planned, now, now, SKIPPED, "not attempted before the drain ended"))
                    k += 1
                    continue
                started = self.now()
                sent = False
                outcome, error = OK, ""
                try:
                    if conn is None:
                        conn = _connect(ep, cfg)
                        # One cursor per connection: the connector's cursor() pings the server, which
                        # would cost a round trip per write and hang for the read timeout in a black hole.
                        cur = conn.cursor()
                    sent = True
                    cur.execute(sql, (self.run_id, w, k, self.wall0 + planned))
                except (mysql.connector.Error, OSError) as exc:
                    errno = getattr(exc, "errno", None) or 0
                    server_said_no = isinstance(exc, mysql.connector.Error) and 0 < errno < _CLIENT_ERRNO
                    maybe_committed = sent and _while_receiving(exc) and not server_said_no
                    outcome = UNKNOWN if maybe_committed else FAILED
                    error = _short(exc)
                    _close(conn)
                    conn = cur = None
                self._record(Attempt(w, k, planned, started, self.now(), outcome, error))
                k += 1
        finally:
            _close(conn)

    def _record(self, a: Attempt) -> None:
        with self._lock:
            self._attempts.append(a)

    # -- reading back -------------------------------------------------------------------
    def read_rows(self, source: RowSource) -> set[tuple[int, int]]:
        return source.rows(self.config.table, self.run_id)


def _while_receiving(exc: BaseException) -> bool:
    """Did the connector fail while waiting for the server's answer?

    Only then may the statement have reached the server and committed: the
    outcome is unknown. A failure while still sending (the server never had
    the whole packet) or in the connector's own checks before sending is a
    plain failure. The connector raises the same error number (2055) for a
    broken socket in either phase, so the phase is read from where it was
    raised.
    """
    if isinstance(exc, mysql.connector.errors.ReadTimeoutError) or getattr(exc, "errno", None) == 2013:
        return True
    frames = traceback.extract_tb(exc.__traceback__)
    return any(f.name in ("recv", "_recv_chunk", "_recv_compressed_pkt") and "mysql" in f.filename
               for f in frames)


def _close(conn: Any) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001, S110 - a dead connection cannot be closed politely
            pass


class RowSource(Protocol):
    """A server the heartbeat's rows are read back from (primary, replica, TiDB)."""

    @property
    def name(self) -> str: ...

    def rows(self, table: str, run_id: str) -> set[tuple[int, int]]: ...


@dataclass(frozen=True)
class SqlRowSource:
    """Rows read over SQL (TiDB, or any endpoint)."""

    name: str
    endpoint: Endpoint

    def rows(self, table: str, run_id: str) -> set[tuple[int, int]]:
        return select_rows(lambda: _connect(self.endpoint, HeartbeatConfig(read_timeout_s=10)), table, run_id)


def select_rows(connect: Callable[[], Any], table: str, run_id: str) -> set[tuple[int, int]]:
    conn = connect()
    try:
        cur = conn.cursor()
        cur.execute(f"SELECT writer, seq FROM {table} WHERE run = %s", (run_id,))
        return {(int(w), int(s)) for w, s in cur.fetchall()}
    finally:
        conn.close()


@dataclass(frozen=True)
class LabRowSource:
    """A lab server read over its root UNIX socket, which no lab fault touches.

    ``wait`` says what the replica must have done first: ``"applied"`` (its
    SQL thread has applied every event it has *received*: what semi-sync's
    acknowledgement promises, for a read while the fault is in place) or
    ``"caught_up"`` (it has applied the primary's whole binlog: after
    recovery). The wait is bounded; the result says whether it settled.
    """

    name: str
    lab: Any
    server: str = "primary"
    wait: str = ""
    wait_s: float = 30.0

    def rows(self, table: str, run_id: str) -> set[tuple[int, int]]:
        with self.lab.admin(self.server) as conn:
            cur = conn.cursor()
            if self.wait:
                cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (self._target_gtid(cur), self.wait_s))
                settled = cur.fetchall()[0][0]
                if settled != 0:
                    raise InfrastructureError(f"the {self.server} did not settle ({self.wait}) within "
                                              f"{self.wait_s:g}s; its rows would not say what was lost")
            cur.execute(f"SELECT writer, seq FROM {DATABASE}.{table} WHERE run = %s", (run_id,))
            return {(int(w), int(s)) for w, s in cur.fetchall()}

    def _target_gtid(self, cur: Any) -> str:
        if self.wait == "caught_up":
            with self.lab.admin("primary") as primary:
                pc = primary.cursor()
                pc.execute("SELECT @@GLOBAL.gtid_binlog_pos")
                return str(pc.fetchall()[0][0])
        if self.wait == "applied":
            cur.execute("SHOW SLAVE STATUS")
            names = [d[0] for d in cur.description]
            row = cur.fetchall()[0]
            return str(row[names.index("Gtid_IO_Pos")])
        raise ConfigError(f"unknown replica wait {self.wait!r} (applied, caught_up)")
