"""Where a workload's database lives, and a connection to it: shared by the
engines that talk SQL besides sysbench (TPC-C's and YCSB's loaders and checks)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wanbench.sql import connect as sql_connect


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


def connect(conn: Connection, *, with_db: bool = True, who: str = "sql") -> Any:
    """A mysql-connector connection (``wanbench.sql.connect``); a failure is an
    ``InfrastructureError`` naming ``who``."""
    return sql_connect(host=conn.host, port=conn.port, user=conn.user, password=conn.password,
                       database=conn.db if with_db else None, who=who)
