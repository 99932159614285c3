"""The embedded lab: real servers from Debian's packages on loopback.

    client --[client_proxy]--> HAProxy --[proxy_primary]--> MariaDB primary
    client --[client_primary]-----------------------------> MariaDB primary
    MariaDB replica (semi-sync) --[replica_primary]-------> MariaDB primary

Every link passes through a Toxiproxy proxy, so a fault can be put on any
component and the baseline path is the same as the faulted one. The tiers
mirror TiDB's: proxy ~ TiProxy, primary ~ TiDB (SQL), replica ~ TiKV (every
commit waits for its acknowledgement).

Everything lives in one run directory: data, sockets, logs, PID files and
``lab.json`` (ports, owner). ``down`` stops exactly the processes recorded
there, by PID and start time, so it also cleans up after a killed run.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mysql.connector

from wanbench import cpulimit
from wanbench.errors import InfrastructureError
from wanbench.evidence.prometheus import LabPrometheus
from wanbench.executors.local import LocalExecutor
from wanbench.faults.deadman import STATE_DIR
from wanbench.faults.toxiproxy import TOXIC_PREFIX, ToxiproxyClient
from wanbench.procs import (  # find_binary, port_free: used here and imported from here by callers
    ProcessHandle,
    find_binary,
    log_tail,
    port_free,
    proc_start_time,
    proc_threads,
    spawn,
)
from wanbench.profiles.base import DATABASE, Credentials
from wanbench.results import write_json_atomic
from wanbench.topology import Component, Link, Topology
from wanbench.wait import wait_for

if TYPE_CHECKING:
    from wanbench.faults.inventory import Found

PROJECT_ROOT = Path(__file__).resolve().parents[3]  # wanbench/profiles/lab/servers.py -> the checkout
#: a source checkout keeps the lab's run directory and tools (bin/) in itself;
#: an installed wheel has no such place (PROJECT_ROOT is site-packages there)
IN_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file()
DEFAULT_PORT_BASE = 23300
SQL_USER = "wanbench"
HANDICAP_TOXIC = f"{TOXIC_PREFIX}handicap"

# Offsets from the port base.
P_TOXIPROXY, P_CLIENT_PROXY, P_HAPROXY, P_PROXY_PRIMARY, P_REPLICA_PRIMARY, P_CLIENT_PRIMARY = range(6)
P_PRIMARY, P_REPLICA = 6, 7
SERVICES = ("toxiproxy", "primary", "replica", "haproxy")
#: lab component -> the service (process) that is that component
COMPONENT_SERVICE = {"proxy": "haproxy", "primary": "primary", "replica": "replica"}
#: how long a commit waits for the replica's acknowledgement before the primary
#: falls back to asynchronous replication (MariaDB's rpl_semi_sync_master_timeout)
DEFAULT_SEMISYNC_TIMEOUT_MS = 30000


def default_run_dir(base: str | os.PathLike[str] | None = None) -> Path:
    """Where the lab lives when no directory is given: ``$WANBENCH_LAB_DIR``,
    else ``.run/lab`` in the checkout, else (installed package) ``.run/lab``
    under ``base`` (pytest's rootdir) or the current directory."""
    env = os.environ.get("WANBENCH_LAB_DIR")
    if env:
        return Path(env)
    root = PROJECT_ROOT if IN_CHECKOUT else Path(base) if base else Path.cwd()
    return root / ".run" / "lab"


def lab_links(base: int) -> tuple[Link, ...]:
    return (
        Link("client_proxy", "client", "proxy", base + P_CLIENT_PROXY),
        Link("proxy_primary", "proxy", "primary", base + P_PROXY_PRIMARY),
        Link("replica_primary", "replica", "primary", base + P_REPLICA_PRIMARY),
        Link("client_primary", "client", "primary", base + P_CLIENT_PRIMARY),
    )


def lab_topology(base: int, version: str = "") -> Topology:
    host = "127.0.0.1"
    return Topology(
        profile="lab",
        name="wanbench-lab",
        version=version,
        components=(
            Component("client", "client", host, ()),
            Component("proxy", "proxy", host, (base + P_HAPROXY,)),
            Component("primary", "primary", host, (base + P_PRIMARY,)),
            Component("replica", "replica", host, (base + P_REPLICA,)),
        ),
        links=lab_links(base),
    )


CPU_LAYOUTS = ("split", "shared")
#: Separate invocations on a fresh lab each, write probe at level 0 (2026-11-23 and the
#: measurements in issue 18): invocation medians spread 5-15 % with ``shared`` and 22-34 %
#: with ``split``, whose commits cross the two CPU sets several times each. The gate's
#: unit is the run, so the steadier run wins; docs/calibration.md has the numbers.
DEFAULT_CPU_LAYOUT = "shared"


def check_layout_name(name: str) -> str:
    if name not in CPU_LAYOUTS:
        raise InfrastructureError(f"unknown lab CPU layout {name!r} (known: {', '.join(CPU_LAYOUTS)})")
    return name


@dataclass(frozen=True)
class CpuLayout:
    """Which CPUs the lab's processes may run on.

    ``split`` keeps the SQL servers on the upper half of the CPUs and the
    load generator and the fault points (Toxiproxy, HAProxy) on the lower
    half: read rounds inside one lab wander less from one minute to the
    next, but every commit crosses the two CPU sets several times and write
    throughput swings between separate runs. ``shared`` (the default) leaves
    placement to the scheduler. ``bench/lab_noise`` measures both, inside one
    lab and (``--invocations``) between separate runs.
    """

    name: str
    server: tuple[int, ...] = ()  # () = wherever the scheduler likes
    client: tuple[int, ...] = ()

    @classmethod
    def plan(cls, name: str, available: Collection[int]) -> CpuLayout:
        cpus = sorted(available)
        if check_layout_name(name) == "shared" or len(cpus) < 2:
            return cls("shared")
        half = len(cpus) // 2
        return cls("split", tuple(cpus[half:]), tuple(cpus[:half]))

    def to_json(self) -> dict[str, Any]:
        return {"layout": self.name, "server": list(self.server), "client": list(self.client)}

    @classmethod
    def from_json(cls, data: Any) -> CpuLayout:
        if not isinstance(data, dict):
            return cls("shared")
        return cls(str(data.get("layout", "shared")), tuple(int(c) for c in data.get("server", ())),
                   tuple(int(c) for c in data.get("client", ())))

    def describe(self) -> str:
        if self.name != "split":
            return "shared (no CPU pinning)"
        return (f"split: SQL servers on CPU {_cpu_list(self.server)}, "
                f"clients and fault points on CPU {_cpu_list(self.client)}")


def _cpu_list(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)


class Lab:
    """Start, inspect and stop the lab. Usable as a context manager: it
    starts the lab unless it already runs, and stops it only if it started it."""

    def __init__(self, run_dir: str | os.PathLike[str] | None = None, port_base: int | None = None,
                 cpu_layout: str = DEFAULT_CPU_LAYOUT, semisync_timeout_ms: int | None = None) -> None:
        self.run_dir = Path(run_dir) if run_dir else default_run_dir()
        self.requested_layout = check_layout_name(cpu_layout)
        if semisync_timeout_ms is not None and semisync_timeout_ms <= 0:
            raise InfrastructureError(f"semi-sync timeout must be positive, not {semisync_timeout_ms!r} ms")
        self.requested_semisync_timeout_ms = semisync_timeout_ms or DEFAULT_SEMISYNC_TIMEOUT_MS
        env_base = os.environ.get("WANBENCH_LAB_PORT_BASE")
        self.port_base = port_base or (int(env_base) if env_base else DEFAULT_PORT_BASE)
        self._started_here = False

    # -- paths and identities -------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.run_dir / "lab.json"

    def _pid_file(self, service: str) -> Path:
        return self.run_dir / f"{service}.pid"

    def handle(self, service: str) -> ProcessHandle | None:
        return ProcessHandle.load(self._pid_file(service))

    def port(self, offset: int) -> int:
        return self.port_base + offset

    @property
    def topology(self) -> Topology:
        return lab_topology(self.port_base, self.state().get("version", ""))

    @property
    def cpu_layout(self) -> CpuLayout:
        """The layout the running lab was started with (from its state file)."""
        return CpuLayout.from_json(self.state().get("cpus"))

    @property
    def semisync_timeout_ms(self) -> int:
        """The running lab's rpl_semi_sync_master_timeout (a lab that was
        already up keeps the value it was started with)."""
        return int(self.state().get("semisync_timeout_ms", DEFAULT_SEMISYNC_TIMEOUT_MS))

    @property
    def toxiproxy(self) -> ToxiproxyClient:
        return ToxiproxyClient(f"http://127.0.0.1:{self.port(P_TOXIPROXY)}")

    @property
    def credentials(self) -> Credentials:
        secret_file = self.run_dir / "secret"
        try:
            return Credentials(SQL_USER, secret_file.read_text().strip())
        except FileNotFoundError:
            raise InfrastructureError(
                f"the lab in {self.run_dir} is not set up (no credentials): run `python -m wanbench lab up`"
            ) from None

    def endpoint(self, path: str = "proxy") -> tuple[str, int]:
        """Where clients connect: through the proxy tier, or straight to the SQL tier."""
        if path == "proxy":
            return "127.0.0.1", self.port(P_CLIENT_PROXY)
        if path == "direct":
            return "127.0.0.1", self.port(P_CLIENT_PRIMARY)
        raise InfrastructureError(f"unknown lab path {path!r} (known: proxy, direct)")

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_file.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def _write_state(self, **updates: Any) -> None:
        write_json_atomic(self.state_file, self.state() | updates)

    def running(self) -> dict[str, bool]:
        return {s: bool((h := self.handle(s)) and h.alive()) for s in SERVICES}

    def is_up(self) -> bool:
        return all(self.running().values())

    def owner_alive(self) -> bool:
        owner = self.state().get("owner")
        if not owner:
            return False
        if owner.get("kind") == "manual":
            return True
        return proc_start_time(int(owner["pid"])) == owner.get("start_time")

    # -- lifecycle -------------------------------------------------------------
    def __enter__(self) -> Lab:
        try:
            self.up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started_here:
            self.down()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One start or stop of this lab at a time, across processes: a dead
        runner's watchdog stopping the lab must not meet a new run starting it
        in the same directory (xdist's replacement worker does exactly that).
        The lock file sits next to the run directory, which ``down`` removes."""
        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir.parent / f".{self.run_dir.name}.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def up(self, *, owner: str = "session") -> bool:
        """Start what is not running; True if this call started the lab."""
        with self._locked():
            return self._up(owner)

    def down(self) -> list[str]:
        """Stop every process recorded in the run directory and remove the run
        directory's data. Returns what was stopped or removed."""
        with self._locked():
            return self._down()

    def down_if_owned_by(self, pid: int, start_time: int | None) -> list[str]:
        """``down``, only if the session ``pid`` (with that start time) started
        this lab; checked under the lock, so a lab another run has taken over
        since is left alone. For a dead runner's watchdog: it is the calling
        process, so it is not stopped mid-way."""
        with self._locked():
            owner = self.state().get("owner") or {}
            if owner.get("kind") != "session" or owner.get("pid") != pid or owner.get("start_time") != start_time:
                return []
            return self._down(spare=os.getpid())

    def down_if_orphaned(self) -> tuple[dict[str, Any], list[str]] | None:
        """``down``, only if a session started this lab and that session is
        gone (a dead xdist worker's lab); checked under the lock, so a lab a
        new run took over meanwhile, or one started by hand, is left alone.
        Returns the dead owner and what was stopped, None when nothing was."""
        with self._locked():
            owner = self.state().get("owner") or {}
            if owner.get("kind") != "session" or self.owner_alive() or not any(self.running().values()):
                return None
            return dict(owner), self._down()

    def _up(self, owner: str) -> bool:
        if self.is_up() and self.owner_alive():
            self.sweep_toxics()
            return False
        if any(self.running().values()):
            # Left by a dead run (or half-started): clean slate.
            self._down()
        self._check_tools_and_ports()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        password = secrets.token_urlsafe(18)
        secret_file = self.run_dir / "secret"
        secret_file.write_text(password)
        os.chmod(secret_file, 0o600)
        owner_info: dict[str, Any] = {"kind": "manual"} if owner == "manual" else {
            "kind": "session", "pid": os.getpid(), "start_time": proc_start_time(os.getpid())}
        layout = CpuLayout.plan(self.requested_layout, os.sched_getaffinity(0))
        self._write_state(port_base=self.port_base, owner=owner_info, started=time.time(), cpus=layout.to_json(),
                          semisync_timeout_ms=self.requested_semisync_timeout_ms)
        self._started_here = True
        try:
            if owner_info["kind"] == "session":
                self._start_guard(int(owner_info["pid"]), int(owner_info["start_time"]))
            self._start_toxiproxy()
            self._start_mariadb("primary", server_id=1)
            self._init_primary(password)
            self._start_mariadb("replica", server_id=2)
            self._init_replica(password)
            self._start_haproxy()
            self._wait_ready()
            version = self._server_version()
            self._write_state(version=version)
        except BaseException:
            self._down()
            raise
        return True

    def _start_guard(self, pid: int, start: int) -> None:
        """The guard (``profiles/lab/guard.py``) stops this lab if its session dies before the
        session's watchdog is up; spawned before any server, so no window is left."""
        spawn("guard", [sys.executable, "-m", "wanbench.profiles.lab.guard", "--lab-dir", str(self.run_dir),
                        "--port-base", str(self.port_base), "--owner-pid", str(pid), "--owner-start", str(start)],
              log=self.run_dir / "guard.log", pid_file=self.run_dir / "guard.pid",
              cwd=PROJECT_ROOT if IN_CHECKOUT else None)

    def _down(self, *, spare: int | None = None) -> list[str]:
        done: list[str] = []
        done += LabPrometheus(self.run_dir, self.port_base).down()  # started with --lab-prometheus
        for helper in ("watchdog", "guard"):
            h = ProcessHandle.load(self.run_dir / f"{helper}.pid")
            if h and h.pid != spare and h.stop(timeout=5):
                done.append(f"stopped {helper} pid {h.pid}")
        done += self.clear_faults()
        for service in ("haproxy", "replica", "primary", "toxiproxy"):
            h = self.handle(service)
            if h and h.alive():
                os.kill(h.pid, signal.SIGCONT)  # a paused server (availability fault) could not shut down
            if h and h.stop(timeout=30):
                done.append(f"stopped {service} pid {h.pid}")
            self._pid_file(service).unlink(missing_ok=True)
            if cpulimit.release(self._cgroup(service)):
                done.append(f"removed CPU limit cgroup of {service}")
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
            done.append(f"removed {self.run_dir}")
        return done

    def faults(self) -> tuple[list[Found], list[Found]]:
        """(this lab's faults: its toxics, tc/nft faults of its scope, dead runs' leftovers on this machine;
        live faults of other runs here, which are left alone)."""
        from wanbench.faults.inventory import Found, host_faults
        from wanbench.profiles.lab.faults import lab_scope

        mine: list[Found] = []
        if (toxiproxy := self.handle("toxiproxy")) and toxiproxy.alive():
            try:
                mine += [Found("lab toxiproxy", "toxic", f"{name} on {proxy}")
                         for proxy, name in self.toxiproxy.our_toxics()]
            except InfrastructureError:
                pass
        scope = lab_scope(self.port_base)
        others: list[Found] = []
        for f in host_faults(LocalExecutor("localhost"), STATE_DIR):
            (others if f.live and f.state is not None and f.state.scope != scope else mine).append(f)
        return mine, others

    def clear_faults(self, *, dry_run: bool = False) -> list[str]:
        """Remove every fault of this lab (see ``faults``); one line per thing removed."""
        from wanbench.faults.inventory import clear_found

        mine, _ = self.faults()
        done = []
        toxics = [f for f in mine if f.kind == "toxic"]
        if toxics and not dry_run:
            done += [f"removed {line}" for line in self.sweep_toxics()]
        elif toxics:
            done += [f"would remove {f.line}" for f in toxics]
        return done + clear_found(LocalExecutor("localhost"), mine, state_dir=STATE_DIR, dry_run=dry_run)

    def sweep_toxics(self) -> list[str]:
        """Remove toxics an earlier run left (the handicap included)."""
        return self.toxiproxy.sweep()

    # -- start-up pieces ---------------------------------------------------------
    def _check_tools_and_ports(self) -> None:
        self.tools = {
            "mariadbd": find_binary("mariadbd", "/usr/sbin/mariadbd"),
            "mariadb-install-db": find_binary("mariadb-install-db", "/usr/bin/mariadb-install-db"),
            "haproxy": find_binary("haproxy", "/usr/sbin/haproxy"),
            "toxiproxy-server": find_binary("toxiproxy-server", str(PROJECT_ROOT / "bin" / "toxiproxy-server")),
        }
        busy = [self.port(i) for i in range(8) if not port_free(self.port(i))]
        if busy:
            raise InfrastructureError(
                f"lab ports {busy} on 127.0.0.1 are in use: stop what holds them "
                f"(`python -m wanbench lab down --dir {self.run_dir}` if it is an old lab) "
                f"or choose another --lab-port-base"
            )

    def _start_toxiproxy(self) -> None:
        h = spawn(
            "toxiproxy",
            [self.tools["toxiproxy-server"], "-host", "127.0.0.1", "-port", str(self.port(P_TOXIPROXY))],
            log=self.run_dir / "toxiproxy.log",
            pid_file=self._pid_file("toxiproxy"),
            cpus=self.cpu_layout.client,
        )
        wait_for(lambda: self._alive_or_fail(h) and self.toxiproxy.version(), what="Toxiproxy API", timeout=20,
                 transient=(InfrastructureError,), hint=f"log: {log_tail(self.run_dir / 'toxiproxy.log')}")
        for ln in self.topology.links:
            upstream = {
                "proxy": self.port(P_HAPROXY),
                "primary": self.port(P_PRIMARY),
            }[ln.dst]
            self.toxiproxy.create_proxy(ln.name, f"127.0.0.1:{ln.listen}", f"127.0.0.1:{upstream}")

    def _alive_or_fail(self, h: ProcessHandle) -> bool:
        if not h.alive():
            raise InfrastructureError(f"{h.name} exited during start-up; log tail:\n"
                                      f"{log_tail(self.run_dir / (h.name + '.log'))}")
        return True

    def _mariadb_paths(self, name: str) -> dict[str, Path]:
        d = self.run_dir / name
        return {"dir": d, "data": d / "data", "socket": d / "mysqld.sock", "log": self.run_dir / f"{name}.log",
                "tmp": d / "tmp"}

    def _start_mariadb(self, name: str, *, server_id: int) -> None:
        p = self._mariadb_paths(name)
        p["tmp"].mkdir(parents=True, exist_ok=True)
        # A private tmpdir: the servers' temporary files never meet another
        # program's /tmp clean-up (one removed a bootstrap's temp table mid-run).
        res = subprocess.run(  # noqa: S603
            [self.tools["mariadb-install-db"], "--no-defaults", f"--datadir={p['data']}",
             "--auth-root-authentication-method=normal", "--user=root", "--skip-test-db", f"--tmpdir={p['tmp']}"],
            capture_output=True, text=True, timeout=120, check=False,
        )
        if res.returncode != 0:
            raise InfrastructureError(f"mariadb-install-db for {name} failed: {res.stderr.strip()[-500:]}")
        self._write_state(**{f"{name}_server_id": server_id})
        self._spawn_mariadb(name, password=None)

    def _mariadbd_argv(self, name: str) -> list[str]:
        p = self._mariadb_paths(name)
        server_id = int(self.state().get(f"{name}_server_id", 1 if name == "primary" else 2))
        port = self.port(P_PRIMARY if name == "primary" else P_REPLICA)
        argv = [
            find_binary("mariadbd", "/usr/sbin/mariadbd"), "--no-defaults", f"--datadir={p['data']}",
            f"--socket={p['socket']}",
            f"--port={port}", "--bind-address=127.0.0.1", "--user=root", f"--server-id={server_id}",
            f"--tmpdir={p['tmp']}",
            "--log-bin=mysql-bin", "--binlog-format=ROW", "--max-connections=2000",
            "--max-connect-errors=1000000", "--skip-name-resolve", f"--pid-file={p['dir'] / 'mysqld.pid'}",
            # The lab measures the network, not this machine's disk.
            "--innodb-flush-log-at-trx-commit=2", "--sync-binlog=0", "--innodb-buffer-pool-size=256M",
            "--performance-schema=OFF", "--table-open-cache=4000", "--max-prepared-stmt-count=1048576",
        ]
        if name == "primary":
            # AFTER_COMMIT (the default): each commit waits one round trip to the
            # replica, like a TiKV write waits for its Raft followers. AFTER_SYNC
            # would serialise concurrent commits on the acknowledgement.
            argv += ["--rpl-semi-sync-master-enabled=ON",
                     f"--rpl-semi-sync-master-timeout={self.semisync_timeout_ms}",
                     "--rpl-semi-sync-master-wait-point=AFTER_COMMIT"]
        else:
            argv += ["--rpl-semi-sync-slave-enabled=ON", "--read-only=ON"]
        return argv

    def _spawn_mariadb(self, name: str, *, password: str | None | bool) -> None:
        p = self._mariadb_paths(name)
        port = self.port(P_PRIMARY if name == "primary" else P_REPLICA)
        h = spawn(name, self._mariadbd_argv(name), log=p["log"], pid_file=self._pid_file(name),
                  cpus=self.cpu_layout.server)
        wait_for(lambda: self._alive_or_fail(h) and self._admin(name, "SELECT 1", password=password, probe=True),
                 what=f"MariaDB {name} on port {port}", timeout=60,
                 transient=(mysql.connector.Error, InfrastructureError),
                 hint=f"log: {log_tail(p['log'])}")

    @contextmanager
    def admin(self, name: str, *, password: str | None | bool = True) -> Iterator[Any]:
        """Root connection over the server's UNIX socket (never over TCP)."""
        pw = self.credentials.password if password is True else (password or "")
        conn = mysql.connector.connect(unix_socket=str(self._mariadb_paths(name)["socket"]), user="root",
                                       password=pw, autocommit=True, connection_timeout=5)
        try:
            yield conn
        finally:
            conn.close()

    def _admin(self, name: str, *statements: str, password: str | None | bool = True, probe: bool = False) -> Any:
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

    def _init_primary(self, password: str) -> None:
        q = password.replace("'", "''")
        # No replica is connected yet: with semi-sync on, the first binlogged
        # statement would wait the whole semi-sync timeout (30 s by default) for
        # an acknowledgement nobody can send. Off for these statements, on again
        # before the replica connects, so it registers as a semi-sync client.
        self._admin(
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

    def _init_replica(self, password: str) -> None:
        q = password.replace("'", "''")
        self._admin(
            "replica",
            f"ALTER USER 'root'@'localhost' IDENTIFIED BY '{q}'",
            password=None,
        )
        self._admin(
            "replica",
            "SET GLOBAL gtid_slave_pos=''",
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.port(P_REPLICA_PRIMARY)}, "
            f"MASTER_USER='repl', MASTER_PASSWORD='{q}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
            "START SLAVE",
        )

    def _start_haproxy(self) -> None:
        cfg = self.run_dir / "haproxy.cfg"
        self._write_haproxy_cfg(cfg)  # the same text every time: ports follow from the port base
        h = spawn("haproxy", [find_binary("haproxy", "/usr/sbin/haproxy"), "-db", "-f", str(cfg)],
                  log=self.run_dir / "haproxy.log", pid_file=self._pid_file("haproxy"), cpus=self.cpu_layout.client)

        def listening() -> bool:
            self._alive_or_fail(h)
            with socket.create_connection(("127.0.0.1", self.port(P_HAPROXY)), timeout=1):
                return True

        wait_for(listening, what="HAProxy", timeout=20, transient=(OSError,),
                 hint=f"log: {log_tail(self.run_dir / 'haproxy.log')}")

    def _write_haproxy_cfg(self, cfg: Path) -> None:
        cfg.write_text(
            "global\n    maxconn 8000\n\n"
            "defaults\n    mode tcp\n    timeout connect 5s\n    timeout client 1h\n    timeout server 1h\n\n"
            f"frontend sql\n    bind 127.0.0.1:{self.port(P_HAPROXY)}\n    default_backend primary\n\n"
            f"backend primary\n    server primary 127.0.0.1:{self.port(P_PROXY_PRIMARY)} maxconn 4000\n"
        )

    # -- one component at a time (availability faults) -------------------------------
    def service_of(self, component: str) -> str:
        try:
            return COMPONENT_SERVICE[component]
        except KeyError:
            raise InfrastructureError(f"lab component {component!r} has no process of its own "
                                      f"(known: {', '.join(COMPONENT_SERVICE)})") from None

    def pid_of(self, component: str) -> int:
        """PID of the process that is ``component`` (proxy, primary, replica)."""
        h = self.handle(self.service_of(component))
        if h is None or not h.alive():
            raise InfrastructureError(f"lab component {component} is not running")
        return h.pid

    def stop_component(self, component: str, *, timeout: float = 60.0) -> int:
        """Stop one component cleanly (SIGTERM: MariaDB shuts down, HAProxy closes its
        connections). Returns the PID that was stopped."""
        service = self.service_of(component)
        h = self.handle(service)
        if h is None or not h.alive():
            raise InfrastructureError(f"cannot stop lab component {component}: it is not running")
        h.stop(timeout=timeout)
        return h.pid

    def start_component(self, component: str) -> int:
        """Start one stopped component from its existing data and wait until the lab is
        ready again: the server answers and the replica acknowledges commits."""
        service = self.service_of(component)
        h = self.handle(service)
        if h is not None and h.alive():
            raise InfrastructureError(f"lab component {component} is already running (pid {h.pid})")
        if service == "haproxy":
            self._start_haproxy()
        else:
            self._spawn_mariadb(service, password=True)
            self._wait_replica_acks()
        return self.pid_of(component)

    def restart_component(self, component: str) -> tuple[int, int]:
        """Stop and start one component; (old PID, new PID)."""
        old = self.stop_component(component)
        return old, self.start_component(component)

    def _wait_replica_acks(self, timeout: float = 60.0) -> None:
        wait_for(lambda: self.semi_sync_clients() >= 1,
                 what="the replica to acknowledge commits again (Rpl_semi_sync_master_clients >= 1)",
                 timeout=timeout, transient=(mysql.connector.Error,),
                 hint=f"replica log: {log_tail(self.run_dir / 'replica.log')}")

    def semi_sync_status(self) -> dict[str, str]:
        """The primary's semi-sync state: ON while commits wait for the replica, OFF after the fallback."""
        rows = self._admin("primary", "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_%'")
        return {str(k): str(v) for k, v in rows}

    def semi_sync_clients(self) -> int:
        rows = self._admin("primary", "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
        return int(rows[0][1]) if rows else 0

    def _wait_ready(self) -> None:
        def replica_acks() -> bool:
            return self.semi_sync_clients() >= 1

        def replica_status() -> str:
            try:
                rows = self._admin("replica", "SHOW SLAVE STATUS")
                return str(rows[0][:40]) if rows else "no slave status"
            except Exception as exc:  # noqa: BLE001 - only for the message
                return str(exc)

        try:
            wait_for(replica_acks, what="the replica to acknowledge commits (Rpl_semi_sync_master_clients >= 1)",
                     timeout=60, transient=(mysql.connector.Error,))
        except InfrastructureError as exc:
            raise InfrastructureError(f"{exc}; replica status: {replica_status()}; "
                                      f"replica log: {log_tail(self.run_dir / 'replica.log')}") from None
        # Clients through both paths really reach the primary.
        for path in ("proxy", "direct"):
            host, port = self.endpoint(path)
            wait_for(functools.partial(self._client_ok, host, port), what=f"SQL through the {path} path",
                     timeout=20, transient=(mysql.connector.Error,))

    def _client_ok(self, host: str, port: int) -> bool:
        cred = self.credentials
        conn = mysql.connector.connect(host=host, port=port, user=cred.user, password=cred.password,
                                       database=DATABASE, connection_timeout=5)
        try:
            cur = conn.cursor()
            cur.execute("SELECT 1")
            return cur.fetchall() == [(1,)]
        finally:
            conn.close()

    def _server_version(self) -> str:
        rows = self._admin("primary", "SELECT VERSION()")
        return str(rows[0][0])

    # -- inspection --------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        running = self.running()
        state = self.state()
        out: dict[str, Any] = {
            "run_dir": str(self.run_dir),
            "port_base": self.port_base,
            "up": all(running.values()),
            "version": state.get("version"),
            "owner": state.get("owner"),
            "cpus": CpuLayout.from_json(state.get("cpus")).to_json() if state else None,
            "semisync_timeout_ms": state.get("semisync_timeout_ms"),
            "components": {},
            "endpoints": {p: "%s:%d" % self.endpoint(p) for p in ("proxy", "direct")},
            "links": {ln.name: {"src": ln.src, "dst": ln.dst, "listen": ln.listen} for ln in self.topology.links},
        }
        for s in SERVICES:
            h = self.handle(s)
            out["components"][s] = {"running": running[s], "pid": h.pid if h else None}
        health: dict[str, Any] = {}
        if running["primary"]:
            try:
                health["Rpl_semi_sync_master_clients"] = self.semi_sync_clients()
            except Exception as exc:  # noqa: BLE001 - status reports, never raises
                health["primary_error"] = type(exc).__name__
        if running["toxiproxy"]:
            try:
                health["toxics"] = [f"{p}/{t}" for p, t in self.toxiproxy.our_toxics()]
            except InfrastructureError as exc:
                health["toxiproxy_error"] = str(exc)
        out["health"] = health
        return out

    def repin(self, layout_name: str) -> CpuLayout:
        """Move the running lab's servers (every thread) to another CPU
        layout; clients started afterwards follow ``cpu_layout.client``.
        Used to compare layouts side by side on one lab (``bench/lab_noise``)."""
        everywhere = os.sched_getaffinity(0)
        layout = CpuLayout.plan(layout_name, everywhere)
        for service in SERVICES:
            h = self.handle(service)
            if h is None or not h.alive():
                raise InfrastructureError(f"cannot repin the lab: {service} is not running")
            cpus = layout.server if service in ("primary", "replica") else layout.client
            for tid in proc_threads(h.pid):
                try:
                    os.sched_setaffinity(tid, set(cpus) or everywhere)
                except ProcessLookupError:
                    pass  # a thread that just ended
        self._write_state(cpus=layout.to_json())
        return layout

    # -- metrics ------------------------------------------------------------------------
    def start_prometheus(self) -> LabPrometheus:
        """Prometheus + node and mysqld exporters for this lab (ports base+10..13),
        unless they already run; ``down`` stops them with the lab."""
        prom = LabPrometheus(self.run_dir, self.port_base)
        if not all(prom.running().values()):
            prom.down()
            sockets = {s: self._mariadb_paths(s)["socket"] for s in ("primary", "replica")}
            prom.up(sockets, self.credentials.password, cpus=self.cpu_layout.client)
        return prom

    # -- CPU limits --------------------------------------------------------------------
    def _cgroup(self, service: str) -> Path:
        try:
            root = cpulimit._controller_root()[0]
        except InfrastructureError:
            root = cpulimit.CGROUP_ROOT
        return root / f"wanbench-lab-{self.port_base}-{service}"

    def set_cpu_limit(self, service: str, cores: float | None) -> None:
        """Give one lab server a CPU quota (cgroup CFS bandwidth, like a
        Kubernetes CPU limit), or remove it (``None``): a bottleneck made by
        construction, which the evidence's finding must name."""
        if service not in SERVICES:
            raise InfrastructureError(f"unknown lab service {service!r} (known: {', '.join(SERVICES)})")
        h = self.handle(service)
        if h is None or not h.alive():
            raise InfrastructureError(f"cannot limit {service}: it is not running")
        if cores is None:
            cpulimit.release(self._cgroup(service))
        else:
            cpulimit.limit(self._cgroup(service).name, h.pid, cores)

    # -- calibration knob ----------------------------------------------------------
    def set_handicap(self, rate_kbps: int | None) -> None:
        """Make the lab slower by a small, adjustable amount: Toxiproxy's
        per-connection bandwidth toxic on the proxy->primary link delays each
        response by (bytes / rate), a sub-millisecond added latency that whole
        -millisecond latency toxics cannot give. ``None`` removes it. The gate
        calibration tunes the rate to the QPS drop it wants to detect."""
        self.toxiproxy.delete_toxic("proxy_primary", HANDICAP_TOXIC)
        if rate_kbps:
            self.toxiproxy.add_toxic("proxy_primary", HANDICAP_TOXIC, "bandwidth", "downstream",
                                     {"rate": int(rate_kbps)})
