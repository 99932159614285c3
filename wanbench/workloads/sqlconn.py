"""Where a workload's database lives, and a connection to it: shared by the
engines that talk SQL besides sysbench (TPC-C's and YCSB's loaders and checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import InfrastructureError


@dataclass(frozen=True)
class Connection:
    """Where the database lives. ``password`` never appears in repr or argv."""

    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    db: str = "tpcc"
    #: CPUs the load generator may use (the lab's split layout); () = any
    client_cpus: tuple[int, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.user}@{self.host}:{self.port}/{self.db}"

    def connector_kwargs(self, *, with_db: bool = True) -> dict[str, Any]:
        kw: dict[str, Any] = {"host": self.host, "port": self.port, "user": self.user, "password": self.password,
                              "connection_timeout": 10, "autocommit": True}
        if with_db:
            kw["database"] = self.db
        return kw


def connect(conn: Connection, *, with_db: bool = True, who: str = "sql") -> Any:
    """A mysql-connector connection; a failure is an ``InfrastructureError`` naming ``who``."""
    import mysql.connector

    try:
        return mysql.connector.connect(**conn.connector_kwargs(with_db=with_db))
    except mysql.connector.Error as exc:
        raise InfrastructureError(f"{who}: cannot connect to {conn.label}: {exc.msg}") from None
