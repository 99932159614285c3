"""The TiDB flavour of the lab: TiDB's real SQL tier on loopback.

    client --[client_proxy]--> HAProxy --[proxy_tidb]--> tidb-server (unistore)
    client --[client_tidb]--------------------------------> tidb-server

What it is: tidb-server built from TiDB's source at one pinned commit
(``scripts/setup --tidb``: master of 2025-11-26, e4e814fdc0af), speaking the
MySQL protocol, planning and executing SQL, with TiDB's transactions,
pessimistic locking, AUTO_INCREMENT caching and its own ``/metrics``. HAProxy
stands in front of it as TiDB's docs recommend (TiProxy cannot be built
here). Every link passes through Toxiproxy, as in the MariaDB lab.

What it is not: a cluster. Its storage is in-process (``--store=unistore``):
there is no PD and no TiKV, so the links TiDB -> PD and TiDB -> TiKV that
the seeds fault do not exist here, and a KV request never crosses a network.
Scenarios that fault a replica, TiKV or PD are refused
(``wanbench/catalogs/tidb-lab.yaml``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mysql.connector

from wanbench.errors import InfrastructureError
from wanbench.procs import find_binary, log_tail, spawn
from wanbench.profiles.base import DATABASE
from wanbench.profiles.lab.layout import (
    P_HAPROXY,
    P_TIDB,
    P_TIDB_STATUS,
    PROJECT_ROOT,
    SQL_USER,
    TIDB_COMPONENT_SERVICE,
    TIDB_SERVICES,
    socket_path,
    tidb_lab_topology,
)
from wanbench.profiles.lab.server_settings import RESERVED_TIDB, ServerSettings
from wanbench.profiles.lab.servers import Lab
from wanbench.sql import connect as sql_connect
from wanbench.topology import Topology
from wanbench.wait import wait_for

#: the TiDB lab's own ports, apart from a MariaDB lab's default block (23300..23313), so both can run
DEFAULT_TIDB_PORT_BASE = 23350
#: what this SQL tier is and is not, wherever a run says which cluster it measured
STORAGE_NOTE = ("TiDB's SQL tier (tidb-server, storage in-process: unistore); no PD, no TiKV, so nothing "
                "behind TiDB crosses a network")
#: what ``scripts/setup-tidb`` builds into bin/
TIDB_BINARY = PROJECT_ROOT / "bin" / "tidb-server"
#: tidb-server's own settings in the lab (a TOML file next to its data)
TIDB_CONFIG = """\
# wanbench's TiDB lab: loopback only, no telemetry, logs in the lab's run directory.
host = "127.0.0.1"
status.status-host = "127.0.0.1"
status.report-status = true
token-limit = 2000
# its own files in the lab's run directory, not /tmp (a socket, DDL and spill directories TiDB leaves there)
socket = "{socket}"
temp-dir = "{run_dir}/tidb-tmp"
tmp-storage-path = "{run_dir}/tidb-tmp-storage"
[instance]
# the seeds run 1000 clients: no server-side cap below that
max_connections = 0
[log]
level = "warn"
# (TiDB writes its slow-query log to its working directory otherwise)
slow-query-file = "{run_dir}/tidb-slow.log"
"""


def merged_config(base: str, fragment: str) -> str:
    """The lab's tidb-server config with a user's TOML fragment merged over
    it (``--candidate-server-config``): the fragment's values win, tables
    merge key by key (TOML forbids a key or table given twice, so the two
    cannot simply be concatenated)."""
    if not fragment.strip():
        return base
    import tomllib

    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for k, v in b.items():
            out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        return out

    return "# wanbench's TiDB lab config with a server config fragment merged over it\n" + _toml(
        merge(tomllib.loads(base), tomllib.loads(fragment)))


def _toml(table: dict[str, Any], prefix: str = "") -> str:
    """A TOML document of ``table`` (strings, numbers, booleans, lists of them, nested tables)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    def key(k: str) -> str:
        return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else value(k)

    lines = [f"{key(k)} = {value(v)}" for k, v in table.items() if not isinstance(v, dict)]
    for k, v in table.items():
        if isinstance(v, dict):
            name = f"{prefix}{key(k)}"
            lines.append(f"\n[{name}]\n" + _toml(v, f"{name}.").rstrip("\n"))
    return "\n".join(lines) + "\n"


def parse_tidb_version(text: str) -> dict[str, str]:
    """``SELECT tidb_version()`` -> {"version": release, "commit": git hash, "store": ...}."""
    out: dict[str, str] = {}
    for key, name in (("Release Version", "version"), ("Git Commit Hash", "commit"), ("Store", "store"),
                      ("Edition", "edition")):
        m = re.search(rf"^{re.escape(key)}:\s*(\S+)", text, re.MULTILINE)
        if m:
            out[name] = m.group(1)
    return out


class TidbLab(Lab):
    """The lab with one tidb-server (in-process storage) as its SQL tier."""

    flavour = "tidb"
    services = TIDB_SERVICES
    component_services = TIDB_COMPONENT_SERVICE
    default_port_base = DEFAULT_TIDB_PORT_BASE

    @property
    def topology(self) -> Topology:
        return tidb_lab_topology(self.port_base, self.state().get("version", ""))

    def upstream_port(self, component: str) -> int:
        return {"proxy": self.port(P_HAPROXY), "tidb": self.port(P_TIDB)}[component]

    @property
    def status_url(self) -> str:
        """tidb-server's status port: ``/metrics``, ``/status``."""
        return f"http://127.0.0.1:{self.port(P_TIDB_STATUS)}"

    @property
    def mariadb(self) -> Any:
        raise InfrastructureError("this is the TiDB lab: it has no MariaDB servers")

    def semi_sync_clients(self) -> int:
        return 0

    @property
    def tidb_socket(self) -> Path:
        return socket_path(self.run_dir / "tidb.sock")

    def sockets(self) -> list[Path]:
        return [self.tidb_socket]

    # -- SQL as root -------------------------------------------------------------------------------------
    def admin_run(self, *statements: str, password: str | None = None) -> Any:
        """Run ``statements`` as TiDB's root over loopback; the last one's rows."""
        pw = self.credentials.password if password is None else password
        conn = sql_connect(host="127.0.0.1", port=self.port(P_TIDB), user="root", password=pw, timeout=10)
        rows: Any = None
        try:
            cur = conn.cursor()
            for st in statements:
                cur.execute(st)
                rows = cur.fetchall() if cur.with_rows else None
        finally:
            conn.close()
        return rows

    # -- start-up ------------------------------------------------------------------------------------------
    def sql_tools(self) -> dict[str, str]:
        try:
            return {"tidb-server": find_binary("tidb-server", str(TIDB_BINARY))}
        except InfrastructureError:
            raise InfrastructureError(
                f"tidb-server not found (looked in PATH and {TIDB_BINARY}): the TiDB lab needs it built once "
                "with `scripts/setup --tidb` (about 2 min of downloads and 4-8 min of compile)") from None

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "tidb" / "data"

    def check_server(self, server: ServerSettings) -> None:
        server.check(RESERVED_TIDB, self.flavour)

    def _start_sql_tier(self) -> None:
        conf = self.run_dir / "tidb" / "tidb.toml"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        conf.write_text(merged_config(TIDB_CONFIG.format(run_dir=self.run_dir, socket=self.tidb_socket),
                                      self.server_settings.config_text()))
        self._spawn_tidb()
        pw = self.credentials.password.replace("'", "''")
        # a fresh unistore has root without a password; give it ours first, then the SQL user
        self.admin_run(f"ALTER USER 'root'@'%' IDENTIFIED BY '{pw}'", password="")
        self.admin_run(
            f"CREATE USER IF NOT EXISTS '{SQL_USER}'@'%' IDENTIFIED BY '{pw}'",
            f"GRANT ALL ON *.* TO '{SQL_USER}'@'%'",
            f"CREATE DATABASE IF NOT EXISTS {DATABASE}",
        )

    def _spawn_tidb(self) -> None:
        log = self.run_dir / "tidb.log"
        server = self.server_settings
        argv = [server.binary or self.sql_tools()["tidb-server"],
                "--store=unistore", f"--path={self.data_dir}", f"--config={self.run_dir / 'tidb' / 'tidb.toml'}",
                "--host=127.0.0.1", f"-P={self.port(P_TIDB)}", "--status-host=127.0.0.1",
                f"--status={self.port(P_TIDB_STATUS)}", f"--log-file={log}", *server.options]
        h = spawn("tidb", argv, log=self.run_dir / "tidb.out", pid_file=self._pid_file("tidb"),
                  cpus=self.cpu_layout.server, cwd=self.run_dir)  # any file it writes stays in the lab
        fresh = not (self.run_dir / "tidb" / ".initialised").exists()

        def answers() -> bool:
            self._alive_or_fail(h)
            try:
                self.admin_run("SELECT 1", password="" if fresh else None)
            except mysql.connector.Error as exc:
                if getattr(exc, "errno", None) == 1045 and fresh:  # initialised by an earlier start after all
                    self.admin_run("SELECT 1")
                    return True
                raise
            return True

        wait_for(answers, what=f"tidb-server on port {self.port(P_TIDB)}", timeout=120,
                 transient=(mysql.connector.Error, OSError),
                 hint=f"log: {log_tail(self.run_dir / 'tidb.out')} {log_tail(log)}")
        (self.run_dir / "tidb" / ".initialised").touch()

    def _restart_sql_service(self, service: str) -> None:
        if service != "tidb":
            raise InfrastructureError(f"the TiDB lab has no {service} server")
        self._spawn_tidb()

    def _wait_ready(self) -> None:
        self._wait_paths(timeout=30)

    def sql_versions(self) -> dict[str, str]:
        rows = self.admin_run("SELECT tidb_version()")
        facts = parse_tidb_version(str(rows[0][0]))
        return {"version": facts.get("version", "unknown"), "tidb_commit": facts.get("commit", ""),
                "tidb_store": facts.get("store", "")}


__all__ = ["DEFAULT_TIDB_PORT_BASE", "STORAGE_NOTE", "TidbLab", "parse_tidb_version"]
