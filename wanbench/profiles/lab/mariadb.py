"""The lab's two MariaDB servers, as SQL sees them: where each keeps its
files, the command line it runs with, the root connection over its UNIX
socket (never TCP), the users and replication set up at start, and the
semi-sync state of the pair. Needs no running ``Lab``: a run directory,
the ports and the password are enough.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mysql.connector

from wanbench.errors import InfrastructureError
from wanbench.procs import find_binary, log_tail
from wanbench.profiles.base import DATABASE, Credentials
from wanbench.profiles.lab.layout import SQL_USER, socket_path
from wanbench.profiles.lab.server_settings import ServerSettings
from wanbench.sql import connect as sql_connect
from wanbench.wait import wait_for

SERVERS = ("primary", "replica")


def socket_of(run_dir: Path, name: str) -> Path:
    """The UNIX socket of server ``name`` of the lab in ``run_dir`` (known without its credentials)."""
    return socket_path(run_dir / name / "mysqld.sock")


def server_argv(binary: str, *, data: Path, socket: Path, tmp: Path, port: int, server_id: int = 1) -> list[str]:
    """The settings of every lab server (and of the self-tests' private ones): TCP on loopback only,
    row binlog, a private tmpdir, and nothing that makes the lab measure this machine's disk."""
    return [
        binary, "--no-defaults", f"--datadir={data}", f"--socket={socket}", f"--port={port}",
        "--bind-address=127.0.0.1", "--user=root", f"--server-id={server_id}", f"--tmpdir={tmp}",
        "--log-bin=mysql-bin", "--binlog-format=ROW", "--max-connections=2000",
        "--max-connect-errors=1000000", "--skip-name-resolve",
        # The lab measures the network, not this machine's disk.
        "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-buffer-pool-size=256M",
        "--performance-schema=OFF", "--table-open-cache=4000", "--max-prepared-stmt-count=1048576",
    ]


@dataclass(frozen=True)
class LabMariadb:
    """The primary and the replica of the lab in ``run_dir``."""

    run_dir: Path
    credentials: Credentials

    def paths(self, name: str) -> dict[str, Path]:
        d = self.run_dir / name
        return {"dir": d, "data": d / "data", "socket": socket_of(self.run_dir, name),
                "log": self.run_dir / f"{name}.log", "tmp": d / "tmp"}

    def install(self, name: str, install_db: str) -> None:
        """A fresh data directory for ``name`` (``mariadb-install-db``), with a private tmpdir: the
        servers' temporary files never meet another program's /tmp clean-up (one removed a
        bootstrap's temp table mid-run)."""
        p = self.paths(name)
        p["tmp"].mkdir(parents=True, exist_ok=True)
        res = subprocess.run(  # noqa: S603
            [install_db, "--no-defaults", f"--datadir={p['data']}", "--auth-root-authentication-method=normal",
             "--user=root", "--skip-test-db", f"--tmpdir={p['tmp']}"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        if res.returncode != 0:
            raise InfrastructureError(f"mariadb-install-db for {name} failed: {res.stderr.strip()[-500:]}")

    def argv(self, name: str, *, port: int, server_id: int, semisync_timeout_ms: int,
             server: ServerSettings | None = None) -> list[str]:
        """``mariadbd``'s command line for one of the two servers; ``server``: another
        binary and extra options (both servers: a release is the primary's and the replica's)."""
        p = self.paths(name)
        server = server or ServerSettings()
        argv = server_argv(server.binary or find_binary("mariadbd", "/usr/sbin/mariadbd"), data=p["data"],
                           socket=p["socket"], tmp=p["tmp"], port=port, server_id=server_id)
        argv.append(f"--pid-file={p['dir'] / 'mysqld.pid'}")
        if name == "primary":
            # AFTER_COMMIT (the default): each commit waits one round trip to the
            # replica, like a TiKV write waits for its Raft followers. AFTER_SYNC
            # would serialise concurrent commits on the acknowledgement.
            argv += ["--rpl-semi-sync-master-enabled=ON",
                     f"--rpl-semi-sync-master-timeout={semisync_timeout_ms}",
                     "--rpl-semi-sync-master-wait-point=AFTER_COMMIT"]
        else:
            argv += ["--rpl-semi-sync-slave-enabled=ON", "--read-only=ON"]
        return argv + list(server.options)  # last: mariadbd takes the last value of an option

    @contextmanager
    def admin(self, name: str, *, password: str | None | bool = True) -> Iterator[Any]:
        """Root connection over the server's UNIX socket (never over TCP)."""
        pw = self.credentials.password if password is True else (password or "")
        conn = sql_connect(unix_socket=str(self.paths(name)["socket"]), user="root", password=pw, timeout=5)
        try:
            yield conn
        finally:
            conn.close()

    def run(self, name: str, *statements: str, password: str | None | bool = True, probe: bool = False) -> Any:
        """Run ``statements`` as root; the last one's rows (True when it has none)."""
        rows: Any = None
        try:
            with self.admin(name, password=password) as conn:
                cur = conn.cursor()
                for st in statements:
                    cur.execute(st)
                    rows = cur.fetchall() if cur.with_rows else None
        except mysql.connector.Error as exc:
            # A fresh server has an empty root password; after init it has ours.
            if probe and password is None and getattr(exc, "errno", None) == 1045:
                return True
            raise
        return rows if rows is not None else True

    def init_primary(self) -> None:
        q = self.credentials.password.replace("'", "''")
        # No replica is connected yet: with semi-sync on, the first binlogged
        # statement would wait the whole semi-sync timeout (30 s by default) for
        # an acknowledgement nobody can send. Off for these statements, on again
        # before the replica connects, so it registers as a semi-sync client.
        self.run(
            "primary",
            "SET GLOBAL rpl_semi_sync_master_enabled=OFF",
            "DELETE FROM mysql.global_priv WHERE User=''",
            f"CREATE USER IF NOT EXISTS '{SQL_USER}'@'127.0.0.1' IDENTIFIED BY '{q}'",
            f"GRANT ALL ON *.* TO '{SQL_USER}'@'127.0.0.1'",
            f"CREATE USER IF NOT EXISTS 'repl'@'127.0.0.1' IDENTIFIED BY '{q}'",
            "GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'",
            f"CREATE DATABASE IF NOT EXISTS {DATABASE}",
            f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{q}'",
            "FLUSH PRIVILEGES",
            "SET GLOBAL rpl_semi_sync_master_enabled=ON",
            password=None,
        )

    def init_replica(self, *, primary_port: int) -> None:
        """Point the replica at the primary through ``primary_port`` (its Toxiproxy link)."""
        q = self.credentials.password.replace("'", "''")
        self.run("replica", f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{q}'", password=None)
        self.run(
            "replica",
            "SET GLOBAL gtid_slave_pos=''",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary_port}, "
            f"MASTER_USER='repl', MASTER_PASSWORD='{q}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            "START SLAVE",
        )

    def semi_sync_status(self) -> dict[str, str]:
        """The primary's semi-sync state: ON while commits wait for the replica, OFF after the fallback."""
        rows = self.run("primary", "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'")
        return {str(k): str(v) for k, v in rows}

    def semi_sync_clients(self) -> int:
        rows = self.run("primary", "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
        return int(rows[0][1]) if rows else 0

    def wait_acks(self, *, timeout: float, again: bool = False) -> None:
        """Until the replica acknowledges commits (``Rpl_semi_sync_master_clients >= 1``), at most ``timeout``."""
        log = self.run_dir / "replica.log"
        try:
            wait_for(lambda: self.semi_sync_clients() >= 1, timeout=timeout, transient=(mysql.connector.Error,),
                     what=f"the replica to acknowledge commits{' again' if again else ''} "
                          "(Rpl_semi_sync_master_clients >= 1)")
        except InfrastructureError as exc:
            raise InfrastructureError(f"{exc}; replica status: {self.replica_status()}; "
                                      f"replica log: {log_tail(log)}") from None

    def replica_status(self) -> str:
        """The head of ``SHOW SLAVE STATUS``, for messages (never raises)."""
        try:
            rows = self.run("replica", "SHOW SLAVE STATUS")
            return str(rows[0][:40]) if rows else "no slave status"
        except Exception as exc:  # noqa: BLE001 - only for the message
            return str(exc)

    def version(self) -> str:
        return str(self.run("primary", "SELECT VERSION()")[0][0])
