"""What the embedded lab offers beyond the shape of every cluster
(``wanbench.profiles.capabilities``), besides its outages (``outages.py``):
its semi-sync replica, its evidence source, and the knobs of its servers.
``LabCluster`` offers one of each, made when it is built."""

from __future__ import annotations

from collections.abc import Callable

from wanbench.evidence.collect import LabProbe
from wanbench.evidence.prometheus import LabPrometheus
from wanbench.evidence.windows import LabWindows
from wanbench.heartbeat import LabRowSource
from wanbench.profiles.lab import running
from wanbench.profiles.lab.servers import Lab


class LabReplicas:
    """The semi-synchronous MariaDB replica: every commit waits for its
    acknowledgement, for ``rpl_semi_sync_master_timeout`` at most."""

    components = ("replica",)

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    @property
    def ack_timeout_s(self) -> float:
        return self.lab.semisync_timeout_ms / 1000.0

    def applied(self, component: str, *, wait_s: float) -> LabRowSource:
        return LabRowSource(component, self.lab, component, wait="applied", wait_s=wait_s)


class LabEvidence:
    """``/proc`` and the servers' counters around each window
    (``wanbench.evidence.collect``), and with ``prometheus`` (``--lab-prometheus``)
    the lab's own Prometheus' view too, started for the session unless it runs."""

    def __init__(self, lab: Lab, *, prometheus: bool = False) -> None:
        self.lab = lab
        self.prometheus = prometheus

    def open(self, note: Callable[[str], None]) -> LabWindows:
        prom = started = None
        if self.prometheus:
            lab = self.lab
            was_running = all(LabPrometheus(lab.run_dir, lab.port_base).running().values())
            prom = running.start_prometheus(lab)
            if not was_running:
                started = prom
                note(f"lab Prometheus on {prom.url} (node and mysqld exporters, 1 s scrapes)")
        windows = LabWindows(LabProbe(self.lab), prom, started=started)
        windows.at_rest()  # opened before any load: every window waits for the servers to be back at this
        return windows


class RunningLabControls:
    """The running lab's knobs (``wanbench.profiles.lab.running``)."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def is_up(self) -> bool:
        return self.lab.is_up()

    def set_handicap(self, rate_kbps: int | None) -> None:
        running.set_handicap(self.lab, rate_kbps)

    def set_cpu_limit(self, service: str, cores: float | None) -> None:
        running.set_cpu_limit(self.lab, service, cores)


__all__ = ["LabEvidence", "LabReplicas", "RunningLabControls"]
