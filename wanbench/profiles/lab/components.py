"""One lab component at a time (availability faults): stop, start and
restart the process that is a component, and find its PID. A mixin of
``Lab`` (``wanbench.profiles.lab.servers``), which knows its processes;
the TiDB flavour restarts its SQL tier its own way (``_restart_sql_service``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from wanbench.errors import InfrastructureError
from wanbench.procs import ProcessHandle

if TYPE_CHECKING:
    from wanbench.profiles.lab.mariadb import LabMariadb


class LabComponents:
    """Start, stop and find the process behind each lab component."""

    if TYPE_CHECKING:  # provided by Lab
        component_services: dict[str, str]
        run_dir: Path

        def handle(self, service: str) -> ProcessHandle | None: ...
        def _start_haproxy(self) -> None: ...
        def _spawn_mariadb(self, name: str, *, password: str | None | bool) -> None: ...
        def semi_sync_clients(self) -> int: ...
        @property
        def mariadb(self) -> LabMariadb: ...

    def service_of(self, component: str) -> str:
        try:
            return self.component_services[component]
        except KeyError:
            raise InfrastructureError(f"lab component {component!r} has no process of its own "
                                      f"(known: {', '.join(self.component_services)})") from None

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
            self._restart_sql_service(service)
        return self.pid_of(component)

    def _restart_sql_service(self, service: str) -> None:
        """Start a stopped SQL server from its data, and wait until the tier is whole again."""
        self._spawn_mariadb(service, password=True)
        self._wait_replica_acks()

    def restart_component(self, component: str) -> tuple[int, int]:
        """Stop and start one component; (old PID, new PID)."""
        old = self.stop_component(component)
        return old, self.start_component(component)

    def _wait_replica_acks(self, timeout: float = 60.0) -> None:
        self.mariadb.wait_acks(timeout=timeout, again=True)
