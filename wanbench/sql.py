"""The one way wanbench opens a MySQL-protocol connection.

Every connection has a connect timeout; a failure can be turned into an
``InfrastructureError`` that says where it tried and why, with the password
hidden. mysql-connector is imported on first use, so a module that only
plans (a dry run, ``--collect-only``) never loads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.redact import hide

#: the database the workloads use on every profile
DATABASE = "wanbench"


@dataclass(frozen=True)
class SqlTarget:
    """Where and as whom a client connects: a workload, a loader, a check,
    the facts query. ``password`` is held in memory only, never in repr, argv
    or logs. ``client_cpus``: the CPUs a load generator on this machine may
    use (the lab's split layout; () = any)."""

    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    database: str = DATABASE
    connect_timeout: float = 10.0
    client_cpus: tuple[int, ...] = ()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        return f"{self.user}@{self.host}:{self.port}/{self.database}"

    def connect(self, *, with_db: bool = True, who: str | None = "sql", **options: Any) -> Any:
        """A connection (``connect`` below) to this target, in its database
        unless ``with_db`` is false."""
        return connect(host=self.host, port=self.port, user=self.user, password=self.password,
                       database=self.database if with_db else None, timeout=self.connect_timeout, who=who,
                       **options)


def connect(*, user: str, password: str = "", host: str | None = None, port: int | None = None,
            unix_socket: str | None = None, database: str | None = None, timeout: float = 10.0,
            autocommit: bool = True, who: str | None = None, **options: Any) -> Any:
    """A mysql-connector connection to ``host:port`` (or ``unix_socket``).

    ``timeout``: seconds to connect (whole seconds, at least 1, unless
    ``use_pure=True``, which takes fractions). ``who``:
    when given, a failure raises ``InfrastructureError("<who>: cannot
    connect to user@where: <reason>")``; otherwise mysql-connector's own
    error goes to the caller (who may retry on it). ``options``: any other
    mysql-connector argument (``read_timeout``, ``use_pure``, ...)."""
    import mysql.connector

    where = unix_socket if unix_socket else f"{host}:{port}"
    # the C extension takes whole seconds; the pure-Python protocol a socket timeout (the heartbeat's 0.5 s)
    seconds = timeout if options.get("use_pure") else max(1, round(timeout))
    kw: dict[str, Any] = {"user": user, "password": password, "autocommit": autocommit,
                          "connection_timeout": seconds, **options}
    if unix_socket:
        kw["unix_socket"] = unix_socket
    else:
        kw.update(host=host, port=port)
    if database:
        kw["database"] = database
    try:
        return mysql.connector.connect(**kw)
    except mysql.connector.Error as exc:
        if who is None:
            raise
        reason = hide(str(getattr(exc, "msg", None) or exc), [password])
        raise InfrastructureError(f"{who}: cannot connect to {user}@{where}: {reason}") from None


def answers(host: str, port: int, user: str, password: str, database: str | None = None) -> bool:
    """``SELECT 1`` through ``host:port`` as ``user`` comes back (a server, or a path to one, is ready);
    mysql-connector's error goes to the caller, who may wait on it."""
    conn = connect(host=host, port=port, user=user, password=password, database=database, timeout=5)
    try:
        cur = conn.cursor()
        cur.execute("SELECT 1")
        return bool(cur.fetchall() == [(1,)])
    finally:
        conn.close()
