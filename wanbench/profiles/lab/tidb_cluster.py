"""``TidbLabCluster``: the TiDB lab (``TidbLab``, profile ``tidb-lab``) as a
``Cluster``. Its faults are the lab's (Toxiproxy for delay, tc for rate, nft
for loss, each on the lab's links into and out of tidb-server and HAProxy);
what it offers differs from the MariaDB lab's:

* outages: partition, pause and restart of HAProxy or tidb-server (``LabOutages``);
* evidence: the lab's Prometheus scraping tidb-server's ``/metrics``, asked
  the questions a tiup cluster's Prometheus is asked (``tidb_evidence``, the
  TiDB profile's code path), and the census counters read from that
  ``/metrics`` at each window's edges (``wanbench.evidence.tidb_metrics``);
* lab controls: the handicap and CPU limits;
* no replicas: its storage is in-process (unistore), with no TiKV and no PD.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wanbench.evidence.prometheus import PromClient
from wanbench.evidence.tidb_metrics import MetricsProbe
from wanbench.evidence.windows import TidbWindows
from wanbench.faults.deadman import DEFAULT_LEASE_S
from wanbench.profiles.base import ClusterSetup
from wanbench.profiles.capabilities import EVIDENCE, LAB_CONTROLS, OUTAGES, Offers
from wanbench.profiles.lab import running
from wanbench.profiles.lab.cluster import LabCluster
from wanbench.profiles.lab.flavours import default_lab_dir
from wanbench.profiles.lab.layout import P_TIDB
from wanbench.profiles.lab.offers import RunningLabControls
from wanbench.profiles.lab.server_settings import check_running, settings_of
from wanbench.profiles.lab.tidb import STORAGE_NOTE, TidbLab
from wanbench.profiles.tidb.views import SYSBENCH_IGNORE_ERRORS
from wanbench.sql import SqlTarget

if TYPE_CHECKING:  # typing only: the heartbeat loads mysql-connector
    from wanbench.heartbeat import RowSource


#: how long the session watches tidb-server do its own work before the first cell
BACKGROUND_S = 5.0


class TidbLabEvidence:
    """The lab's Prometheus (started for the session unless it runs) and tidb-server's own counters."""

    def __init__(self, lab: TidbLab) -> None:
        self.lab = lab

    def open(self, note: Callable[[str], None]) -> TidbWindows:
        prom = running.lab_prometheus(self.lab)
        was_running = all(prom.running().values())
        prom = running.start_prometheus(self.lab)
        if not was_running:
            note(f"lab Prometheus on {prom.url} (node exporter and tidb-server's /metrics, 1 s scrapes)")
        note(f"TiDB's own work with no load: measured for {BACKGROUND_S:g} s (the census says where it is "
             "a large share of a count)")
        return TidbWindows(PromClient(prom.url), stop=None if was_running else prom.down,
                           probe=MetricsProbe([self.lab.status_url]), background_s=BACKGROUND_S)


class TidbLabCluster(LabCluster):
    """The TiDB lab: faults as the MariaDB lab's, offers of its own."""

    profile = "tidb-lab"

    def __init__(self, lab: TidbLab, *, tag: str, grace_s: float = 60.0, lease_s: float = DEFAULT_LEASE_S) -> None:
        super().__init__(lab, tag=tag, grace_s=grace_s, lease_s=lease_s)
        outages = self.offers.get(OUTAGES)
        assert outages is not None  # the lab's, which knows any lab's components and processes
        self.offers = (Offers()
                       .add(OUTAGES, outages)
                       .add(EVIDENCE, TidbLabEvidence(lab))
                       .add(LAB_CONTROLS, RunningLabControls(lab)))

    def workload_args(self, path: str) -> list[str]:
        """As on a TiDB cluster: TiDB's retryable errors (write conflicts, lock waits) counted, not fatal."""
        return ["--mysql-ignore-errors=" + ",".join(str(e) for e in SYSBENCH_IGNORE_ERRORS)]

    def run_context(self) -> dict[str, Any]:
        ctx = super().run_context()
        state = self.lab.state()
        ctx["versions"] = {"tidb": state.get("version", ""), "tidb_commit": state.get("tidb_commit", "")}
        ctx["storage"] = STORAGE_NOTE
        return ctx

    def copies(self) -> list[RowSource]:
        """One copy, read straight from tidb-server's port (no faulted link on the way)."""
        from wanbench.heartbeat import Endpoint, SqlRowSource  # loads mysql-connector: only when rows are read

        cred = self.lab.credentials
        target = SqlTarget("127.0.0.1", self.lab.port(P_TIDB), cred.user, cred.password)
        return [SqlRowSource("tidb", Endpoint.of(target))]


@contextmanager
def open_tidb_lab(setup: ClusterSetup) -> Iterator[TidbLabCluster]:
    """The TiDB lab for a session: started unless it already runs (then left running)."""
    opt, note = setup.option, setup.note
    run_dir = Path(opt("lab_dir") or default_lab_dir("tidb", setup.rootpath))
    server = settings_of(opt)
    lab = TidbLab(run_dir, opt("lab_port_base"), opt("lab_cpus"), server=server)
    note(f"starting the TiDB lab in {lab.run_dir} (ports {lab.port_base}..{lab.port_base + 7}): {STORAGE_NOTE}"
         + ("" if server.is_default else f"; tidb-server with {server.describe()}"))
    started = lab.up()
    if not started:
        note("the TiDB lab was already running: using it and leaving it running")
        check_running(server, lab.server_settings, lab.run_dir)
    try:
        yield TidbLabCluster(lab, tag=setup.tag, grace_s=opt("fault_grace"), lease_s=opt("fault_lease"))
    finally:
        if started:
            note("stopping the TiDB lab")
            lab.down()


__all__ = ["TidbLabCluster", "TidbLabEvidence", "open_tidb_lab"]
