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
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mysql.connector

from wanbench import cpulimit
from wanbench.errors import ConfigError, InfrastructureError
from wanbench.evidence.prometheus import LabPrometheus
from wanbench.faults.toxiproxy import ToxiproxyClient
from wanbench.procs import (
    ProcessHandle,
    find_binary,
    log_tail,
    port_free,
    proc_start_time,
    spawn,
)
from wanbench.profiles.base import DATABASE, Credentials
from wanbench.profiles.lab.components import LabComponents
from wanbench.profiles.lab.layout import (
    COMPONENT_SERVICE,
    DEFAULT_CPU_LAYOUT,
    DEFAULT_PORT_BASE,
    DEFAULT_SEMISYNC_TIMEOUT_MS,
    IN_CHECKOUT,
    P_CLIENT_PRIMARY,
    P_CLIENT_PROXY,
    P_HAPROXY,
    P_PRIMARY,
    P_REPLICA,
    P_REPLICA_PRIMARY,
    P_TOXIPROXY,
    PROJECT_ROOT,
    SERVICES,
    SQL_USER,
    CpuLayout,
    check_layout_name,
    default_run_dir,
    haproxy_config,
    lab_cgroup,
    lab_topology,
)
from wanbench.profiles.lab.mariadb import LabMariadb, socket_of
from wanbench.profiles.lab.server_settings import RESERVED_MARIADB, ServerSettings
from wanbench.results import write_json_atomic
from wanbench.sql import answers
from wanbench.topology import Topology
from wanbench.wait import wait_for

if TYPE_CHECKING:
    from wanbench.faults.inventory import Found

#: every service a lab of any flavour may run, in the order ``down`` stops them: a stop needs no
#: knowledge of the flavour (a dead run's guard or watchdog stops whatever it recorded)
ALL_SERVICES = ("haproxy", "replica", "primary", "tidb", "toxiproxy")


class Lab(LabComponents):
    """Start, inspect and stop the lab. Usable as a context manager: it
    starts the lab unless it already runs, and stops it only if it started it.

    This is the MariaDB flavour (a primary and its semi-sync replica); the
    TiDB flavour (``wanbench.profiles.lab.tidb.TidbLab``) replaces the SQL tier
    by one tidb-server. ``wanbench.profiles.lab.flavours.open_lab`` picks the
    class from a running lab's state."""

    #: which SQL tier this lab runs (recorded in ``lab.json``)
    flavour = "mariadb"
    #: the processes that make this flavour's lab
    services: tuple[str, ...] = SERVICES
    #: lab component -> the service (process) that is that component
    component_services: dict[str, str] = COMPONENT_SERVICE
    #: the first of its ports when neither the caller, a running lab nor $WANBENCH_LAB_PORT_BASE says
    default_port_base = DEFAULT_PORT_BASE

    def __init__(self, run_dir: str | os.PathLike[str] | None = None, port_base: int | None = None,
                 cpu_layout: str = DEFAULT_CPU_LAYOUT, semisync_timeout_ms: int | None = None,
                 server: ServerSettings | None = None) -> None:
        self.run_dir = Path(run_dir) if run_dir else default_run_dir()
        #: what this lab's SQL servers are to run with when it starts (``server_settings``: what they run with)
        self.server = server or ServerSettings()
        self.requested_layout = check_layout_name(cpu_layout)
        if semisync_timeout_ms is not None and semisync_timeout_ms <= 0:
            raise InfrastructureError(f"semi-sync timeout must be positive, not {semisync_timeout_ms!r} ms")
        self.requested_semisync_timeout_ms = semisync_timeout_ms or DEFAULT_SEMISYNC_TIMEOUT_MS
        env_base = os.environ.get("WANBENCH_LAB_PORT_BASE")
        # a lab that runs in run_dir keeps the ports it was started with (lab.json), unless told otherwise
        recorded = self.state().get("port_base")
        self.port_base = port_base or recorded or (int(env_base) if env_base else self.default_port_base)
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

    def upstream_port(self, component: str) -> int:
        """The port a Toxiproxy link towards ``component`` forwards to."""
        return {"proxy": self.port(P_HAPROXY), "primary": self.port(P_PRIMARY)}[component]

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
    def server_settings(self) -> ServerSettings:
        """The binary, extra options and config the running lab's SQL servers were started with."""
        return ServerSettings.from_json(self.state().get("server"))

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

    @property
    def mariadb(self) -> LabMariadb:
        """The primary and the replica, as SQL sees them."""
        return LabMariadb(self.run_dir, self.credentials)

    def sockets(self) -> list[Path]:  # the servers' UNIX sockets: in /tmp for a long run directory
        return [socket_of(self.run_dir, s) for s in ("primary", "replica")]

    def admin(self, name: str) -> AbstractContextManager[Any]:
        """Root connection to ``primary`` or ``replica`` over its UNIX socket."""
        return self.mariadb.admin(name)

    def semi_sync_status(self) -> dict[str, str]:
        return self.mariadb.semi_sync_status()

    def semi_sync_clients(self) -> int:
        return self.mariadb.semi_sync_clients()

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

    def write_state(self, **updates: Any) -> None:
        write_json_atomic(self.state_file, self.state() | updates)

    def running(self) -> dict[str, bool]:
        return {s: bool((h := self.handle(s)) and h.alive()) for s in self.services}

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
        other = self.state().get("flavour", "mariadb") if self.state() else self.flavour
        if other != self.flavour and any(self.running().values()) and self.owner_alive():
            raise InfrastructureError(
                f"a {other} lab runs in {self.run_dir}: stop it first (`python -m wanbench lab down --dir "
                f"{self.run_dir}`) or give this {self.flavour} lab another --lab-dir and --lab-port-base")
        if self.is_up() and self.owner_alive():
            self.sweep_toxics()
            return False
        if any(self.running().values()):
            # Left by a dead run (or half-started): clean slate.
            self._down()
        self._check_tools_and_ports()
        self.check_server(self.server)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        password = secrets.token_urlsafe(18)
        secret_file = self.run_dir / "secret"
        secret_file.write_text(password)
        os.chmod(secret_file, 0o600)
        owner_info: dict[str, Any] = {"kind": "manual"} if owner == "manual" else {
            "kind": "session", "pid": os.getpid(), "start_time": proc_start_time(os.getpid())}
        layout = CpuLayout.plan(self.requested_layout, os.sched_getaffinity(0))
        self.write_state(port_base=self.port_base, owner=owner_info, started=time.time(), cpus=layout.to_json(),
                          semisync_timeout_ms=self.requested_semisync_timeout_ms, flavour=self.flavour,
                          server=self.server.to_json())
        self._started_here = True
        try:
            if owner_info["kind"] == "session":
                self._start_guard(int(owner_info["pid"]), int(owner_info["start_time"]))
            self._start_toxiproxy()
            self._start_sql_tier()
            self._start_haproxy()
            self._wait_ready()
            self.write_state(**self.sql_versions())
        except BaseException:
            self._down()
            raise
        return True

    def _start_sql_tier(self) -> None:
        self._start_mariadb("primary", server_id=1)
        self.mariadb.init_primary()
        self._start_mariadb("replica", server_id=2)
        self.mariadb.init_replica(primary_port=self.port(P_REPLICA_PRIMARY))

    def check_server(self, server: ServerSettings) -> None:
        """Refuse settings this flavour cannot run with (``ConfigError`` naming the option)."""
        server.check(RESERVED_MARIADB, self.flavour)
        if server.config:
            raise ConfigError("a config fragment is for the TiDB lab (tidb-server); give mariadbd options instead")

    def sql_versions(self) -> dict[str, str]:
        """What the running SQL tier says it is (``version`` in ``lab.json``, the run's fingerprint)."""
        return {"version": self.mariadb.version()}

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
        for service in ALL_SERVICES:
            h = self.handle(service)
            if h and h.alive():
                os.kill(h.pid, signal.SIGCONT)  # a paused server (availability fault) could not shut down
            if h and h.stop(timeout=30):
                done.append(f"stopped {service} pid {h.pid}")
            self._pid_file(service).unlink(missing_ok=True)
            if cpulimit.release(cpulimit.cgroup_path(lab_cgroup(self.port_base, service))):
                done.append(f"removed CPU limit cgroup of {service}")
        for sock in self.sockets():  # a stand-in outside the run directory, left by a killed server
            sock.unlink(missing_ok=True)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
            done.append(f"removed {self.run_dir}")
        return done

    def faults(self) -> tuple[list[Found], list[Found]]:
        """(this lab's faults: its toxics, tc/nft faults of its scope, dead runs' leftovers on this machine;
        live faults of other runs here, which are left alone)."""
        from wanbench.profiles.lab.faults import faults_of_lab

        return faults_of_lab(self)

    def clear_faults(self, *, dry_run: bool = False) -> list[str]:
        """Remove every fault of this lab (see ``faults``); one line per thing removed."""
        from wanbench.profiles.lab.faults import clear_faults_of_lab

        return clear_faults_of_lab(self, dry_run=dry_run)

    def sweep_toxics(self) -> list[str]:
        """Remove toxics an earlier run left (the handicap included)."""
        return self.toxiproxy.sweep()

    # -- start-up pieces ---------------------------------------------------------
    def sql_tools(self) -> dict[str, str]:
        """The SQL tier's programs (``find_binary``: a clear error naming what to install)."""
        return {"mariadbd": find_binary("mariadbd", "/usr/sbin/mariadbd"),
                "mariadb-install-db": find_binary("mariadb-install-db", "/usr/bin/mariadb-install-db")}

    def _check_tools_and_ports(self) -> None:
        self.tools = {
            **self.sql_tools(),
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
            self.toxiproxy.create_proxy(ln.name, f"127.0.0.1:{ln.listen}", f"127.0.0.1:{self.upstream_port(ln.dst)}")

    def _alive_or_fail(self, h: ProcessHandle) -> bool:
        if not h.alive():
            raise InfrastructureError(f"{h.name} exited during start-up; log tail:\n"
                                      f"{log_tail(self.run_dir / (h.name + '.log'))}")
        return True

    def _start_mariadb(self, name: str, *, server_id: int) -> None:
        self.mariadb.install(name, self.tools["mariadb-install-db"])
        self.write_state(**{f"{name}_server_id": server_id})
        self._spawn_mariadb(name, password=None)

    def _spawn_mariadb(self, name: str, *, password: str | None | bool) -> None:
        p = self.mariadb.paths(name)
        port = self.port(P_PRIMARY if name == "primary" else P_REPLICA)
        server_id = int(self.state().get(f"{name}_server_id", 1 if name == "primary" else 2))
        argv = self.mariadb.argv(name, port=port, server_id=server_id, semisync_timeout_ms=self.semisync_timeout_ms,
                                 server=self.server_settings)
        h = spawn(name, argv, log=p["log"], pid_file=self._pid_file(name), cpus=self.cpu_layout.server)
        wait_for(lambda: self._alive_or_fail(h) and self.mariadb.run(name, "SELECT 1", password=password, probe=True),
                 what=f"MariaDB {name} on port {port}", timeout=60,
                 transient=(mysql.connector.Error, InfrastructureError),
                 hint=f"log: {log_tail(p['log'])}")

    def _start_haproxy(self) -> None:
        cfg = self.run_dir / "haproxy.cfg"
        cfg.write_text(haproxy_config(self.port_base))  # the same text every time: ports follow from the port base
        h = spawn("haproxy", [find_binary("haproxy", "/usr/sbin/haproxy"), "-db", "-f", str(cfg)],
                  log=self.run_dir / "haproxy.log", pid_file=self._pid_file("haproxy"), cpus=self.cpu_layout.client)

        def listening() -> bool:
            self._alive_or_fail(h)
            with socket.create_connection(("127.0.0.1", self.port(P_HAPROXY)), timeout=1):
                return True

        wait_for(listening, what="HAProxy", timeout=20, transient=(OSError,),
                 hint=f"log: {log_tail(self.run_dir / 'haproxy.log')}")

    def _wait_ready(self) -> None:
        self.mariadb.wait_acks(timeout=60)
        self._wait_paths()

    def _wait_paths(self, timeout: float = 20.0) -> None:
        """Clients through both paths really reach the SQL tier."""
        cred = self.credentials
        for path in ("proxy", "direct"):
            host, port = self.endpoint(path)
            wait_for(functools.partial(answers, host, port, cred.user, cred.password, DATABASE),
                     what=f"SQL through the {path} path", timeout=timeout, transient=(mysql.connector.Error,))
