"""A running lab besides its faults: its status, moving its servers to
another CPU layout, a CPU quota on one server (a bottleneck by
construction), the calibration handicap, and its Prometheus.
"""

from __future__ import annotations

import os
from typing import Any

from wanbench import cpulimit
from wanbench.errors import InfrastructureError
from wanbench.evidence.prometheus import LabPrometheus
from wanbench.procs import proc_threads
from wanbench.profiles.lab.layout import HANDICAP_TOXIC, CpuLayout, lab_cgroup
from wanbench.profiles.lab.servers import Lab


# -- inspection ------------------------------------------------------------------------------------------
def status(lab: Lab) -> dict[str, Any]:
    running = lab.running()
    state = lab.state()
    out: dict[str, Any] = {
        "run_dir": str(lab.run_dir),
        "port_base": lab.port_base,
        "up": all(running.values()),
        "version": state.get("version"),
        "owner": state.get("owner"),
        "cpus": CpuLayout.from_json(state.get("cpus")).to_json() if state else None,
        "flavour": lab.flavour,
        "semisync_timeout_ms": state.get("semisync_timeout_ms") if lab.flavour == "mariadb" else None,
        "components": {},
        "endpoints": {p: "%s:%d" % lab.endpoint(p) for p in ("proxy", "direct")},
        "links": {ln.name: {"src": ln.src, "dst": ln.dst, "listen": ln.listen} for ln in lab.topology.links},
    }
    for s in lab.services:
        h = lab.handle(s)
        out["components"][s] = {"running": running[s], "pid": h.pid if h else None}
    health: dict[str, Any] = {}
    if running.get("primary"):
        try:
            health["Rpl_semi_sync_master_clients"] = lab.semi_sync_clients()
        except Exception as exc:  # noqa: BLE001 - status reports, never raises
            health["primary_error"] = type(exc).__name__
    if running["toxiproxy"]:
        try:
            health["toxics"] = [f"{p}/{t}" for p, t in lab.toxiproxy.our_toxics()]
        except InfrastructureError as exc:
            health["toxiproxy_error"] = str(exc)
    out["health"] = health
    return out


def repin(lab: Lab, layout_name: str) -> CpuLayout:
    """Move the running lab's servers (every thread) to another CPU
    layout; clients started afterwards follow ``cpu_layout.client``.
    Used to compare layouts side by side on one lab (``bench/lab_noise``)."""
    everywhere = os.sched_getaffinity(0)
    layout = CpuLayout.plan(layout_name, everywhere)
    for service in lab.services:
        h = lab.handle(service)
        if h is None or not h.alive():
            raise InfrastructureError(f"cannot repin the lab: {service} is not running")
        cpus = layout.server if service in ("primary", "replica", "tidb") else layout.client
        for tid in proc_threads(h.pid):
            try:
                os.sched_setaffinity(tid, set(cpus) or everywhere)
            except ProcessLookupError:
                pass  # a thread that just ended
    lab.write_state(cpus=layout.to_json())
    return layout


# -- metrics ---------------------------------------------------------------------------------------------
def start_prometheus(lab: Lab) -> LabPrometheus:
    """Prometheus + node and mysqld exporters for this lab (ports base+10..13),
    unless they already run; ``down`` stops them with the lab."""
    prom = lab_prometheus(lab)
    if not all(prom.running().values()):
        prom.down()
        sockets = {} if lab.flavour == "tidb" else {s: lab.mariadb.paths(s)["socket"] for s in ("primary", "replica")}
        prom.up(sockets, lab.credentials.password, cpus=lab.cpu_layout.client)
    return prom


def lab_prometheus(lab: Lab) -> LabPrometheus:
    """The lab's Prometheus (running or not): the TiDB lab's scrapes tidb-server's own ``/metrics``."""
    status = getattr(lab, "status_url", None)
    port = int(status.rsplit(":", 1)[1]) if status else None
    return LabPrometheus(lab.run_dir, lab.port_base, tidb_status_port=port)


# -- CPU limits ------------------------------------------------------------------------------------------
def set_cpu_limit(lab: Lab, service: str, cores: float | None) -> None:
    """Give one lab server a CPU quota (cgroup CFS bandwidth, like a
    Kubernetes CPU limit), or remove it (``None``): a bottleneck made by
    construction, which the evidence's finding must name."""
    if service not in lab.services:
        raise InfrastructureError(f"unknown lab service {service!r} (known: {', '.join(lab.services)})")
    h = lab.handle(service)
    if h is None or not h.alive():
        raise InfrastructureError(f"cannot limit {service}: it is not running")
    if cores is None:
        cpulimit.release(cpulimit.cgroup_path(lab_cgroup(lab.port_base, service)))
    else:
        cpulimit.limit(cpulimit.cgroup_path(lab_cgroup(lab.port_base, service)).name, h.pid, cores)


# -- calibration knob ------------------------------------------------------------------------------------
def set_handicap(lab: Lab, rate_kbps: int | None) -> None:
    """Make the lab slower by a small, adjustable amount: Toxiproxy's
    per-connection bandwidth toxic on the proxy->primary link delays each
    response by (bytes / rate), a sub-millisecond added latency that whole
    -millisecond latency toxics cannot give. ``None`` removes it. The gate
    calibration tunes the rate to the QPS drop it wants to detect."""
    link = next(ln.name for ln in lab.topology.links if ln.src == "proxy")  # proxy -> the SQL tier
    lab.toxiproxy.delete_toxic(link, HANDICAP_TOXIC)
    if rate_kbps:
        lab.toxiproxy.add_toxic(link, HANDICAP_TOXIC, "bandwidth", "downstream", {"rate": int(rate_kbps)})
