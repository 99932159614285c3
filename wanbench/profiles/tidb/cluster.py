"""``TidbCluster``: the ``Cluster`` (``wanbench.profiles.base``) of a real
tiup-deployed TiDB cluster.

Faults are the tc mechanism over SSH on the hosts the plan names, scoped to
the target's own flows (``wanbench.profiles.tidb.plan``). Before the first fault
every host is checked (``preflight``); the PD leader is asked live before
each fault; a bandwidth fault samples PD's pending-peer regions until it is
cleared. With ``dry_run`` nothing connects anywhere: ``apply`` raises
``DryRun`` carrying the rendered commands.

It offers outages over SSH (``TidbClusterOutages``, ``outages.py``) and its
Prometheus as the evidence source (``wanbench.profiles.capabilities``); no
replica that acknowledges commits (TiKV's Raft followers cannot be read
apart). ``open_tidb`` opens it for a session (``wanbench.profiles.registry``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from wanbench.errors import ConfigError, FaultError, FaultVerificationError, InfrastructureError, WanbenchError
from wanbench.evidence.prometheus import find_prometheus
from wanbench.evidence.windows import TidbPrometheus
from wanbench.executors.base import Executor
from wanbench.faults.base import Evidence, Fault, FaultKind
from wanbench.faults.deadman import DEFAULT_LEASE_S, RunInfo
from wanbench.faults.lease import LeaseKeeper
from wanbench.faults.outage import Outage, OutageKind
from wanbench.profiles.base import ClusterSetup, DryRun, SqlTarget, client_facts
from wanbench.profiles.capabilities import EVIDENCE, OUTAGES, Offers
from wanbench.profiles.tidb.facts import collect_facts
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.outages import TidbOutages
from wanbench.profiles.tidb.pd import LeaderDiscovery, PDClient, PendingPeerSampler, discover_leader
from wanbench.profiles.tidb.plan import FaultPlan, plan_fault, render_dry_run
from wanbench.profiles.tidb.preflight import PreflightReport, preflight, resolve_interfaces, ssh_executors
from wanbench.profiles.tidb.tcplan import (
    installed_filters,
    matches_by_interface,
    planned_filters,
    ssh_bypass_ports,
    tc_mechanisms,
    tc_renderer,
)
from wanbench.profiles.tidb.views import pd_client_urls, sql_endpoints, workload_settings
from wanbench.topology import LoadHost, Scenario, Topology, parse_load_hosts

if TYPE_CHECKING:
    from wanbench.heartbeat import RowSource

#: what the evidence says when the cluster has no Prometheus to ask
NO_PROMETHEUS = "evidence: the topology has no Prometheus and --prometheus is not given: no server-side evidence"


@dataclasses.dataclass
class _Active:
    plan: FaultPlan
    mechanisms: list[Any]
    discovery: LeaderDiscovery | None
    sampler: PendingPeerSampler | None = None


class TidbCluster:
    profile = "tidb"

    def __init__(
        self,
        topology: Topology,
        *,
        tag: str,
        dry_run: bool = False,
        pd_url: str | list[str] | None = None,
        load_host: str | None = None,
        load_hosts: tuple[LoadHost, ...] | None = None,
        grace_s: float = 60.0,
        lease_s: float = DEFAULT_LEASE_S,
        executors: Mapping[str, Executor] | None = None,
        pending_interval_s: float = 5.0,
        state_dir_for: Callable[[str], str] | None = None,
        accept_new_host_keys: bool = False,
        prometheus: str | None = None,
    ) -> None:
        self.topology = topology
        self.tag = tag
        self.dry_run = dry_run
        self.pd_url = pd_url
        self.settings = cluster_settings(topology)
        self.load_host = load_host or self.settings.load_host
        #: hosts sysbench runs on over SSH (``--load-hosts``, else the cluster file's ``load_hosts``)
        self.load_hosts: tuple[LoadHost, ...] = tuple(load_hosts) if load_hosts else (
            parse_load_hosts(self.settings.load_hosts) if self.settings.load_hosts else ())
        self._client_addresses: tuple[str, ...] | None = None
        self.grace_s = grace_s
        self.leases = LeaseKeeper(lease_s)
        self.pending_interval_s = pending_interval_s
        self.state_dir_for = state_dir_for  # per-host dead-man directory (namespace test hosts share /run)
        self.accept_new_host_keys = accept_new_host_keys
        self.run = RunInfo.current()
        self._executors: dict[str, Executor] | None = dict(executors) if executors is not None else None
        self._preflight: PreflightReport | None = None
        self._plans: dict[Fault, tuple[FaultPlan, LeaderDiscovery | None]] = {}
        self._active: dict[Fault, _Active] = {}
        self.last_discovery: LeaderDiscovery | None = None
        self.offers = (Offers()
                       .add(OUTAGES, TidbClusterOutages(self))
                       .add(EVIDENCE, TidbPrometheus(find_prometheus(topology, prometheus), why_none=NO_PROMETHEUS)))

    # -- hosts -----------------------------------------------------------------------------------------
    @property
    def executors(self) -> dict[str, Executor]:
        if self.dry_run:
            raise InfrastructureError("dry run: no host is contacted")
        if self._executors is None:
            self._executors = ssh_executors(self.topology, accept_new_host_keys=self.accept_new_host_keys)
        return self._executors

    def preflight(self) -> PreflightReport:
        """Once per session, before anything else touches a host."""
        if self._preflight is None:
            self._preflight = preflight(self.topology, self.executors)
        return self._preflight

    # -- connections ----------------------------------------------------------------------------------
    def client_cpus(self) -> tuple[int, ...]:
        """The load host is the user's to arrange: no pinning."""
        return ()

    def workload_args(self, path: str) -> list[str]:
        """TiDB-aware sysbench settings: retryable errors counted, not fatal; ps-mode auto."""
        settings = workload_settings(self.topology, path)
        return [a for a in settings.sysbench_args() if a.startswith(("--mysql-ignore-errors=", "--db-ps-mode="))]

    def sql_targets(self, path: str) -> list[SqlTarget]:
        """Every endpoint of ``path`` (round robin is the workload's job); none under dry run."""
        if self.dry_run:
            raise DryRun("no workload runs under --dry-run")
        user, password = self.settings.sql_user, self.settings.password()
        return [SqlTarget(h, p, user, password, self.settings.database, self.settings.connect_timeout)
                for h, p in sql_endpoints(self.topology, path)]

    # -- faults -----------------------------------------------------------------------------------------
    def _live_topology(self) -> tuple[Topology, LeaderDiscovery | None]:
        if self.dry_run or not self.topology.by_role("pd"):
            return self.topology, None
        found = discover_leader(self.topology, pd_url=self.pd_url)
        self.last_discovery = found
        return found.topology, found

    def live_topology(self) -> Topology:
        """The topology with the PD leader as PD says it is now (the file's, under dry run)."""
        return self._live_topology()[0]

    @property
    def client_addresses(self) -> tuple[str, ...]:
        """Where the load comes from, as the cluster sees it: each load host's SSH ``HostName``
        (``~/.ssh/config``, else its name); faults scoped to the client cover all of them."""
        if self._client_addresses is None:
            from wanbench.executors.ssh import SSHExecutor  # builds no connection: reads ~/.ssh/config

            self._client_addresses = tuple(dict.fromkeys(SSHExecutor(h.name).hostname for h in self.load_hosts))
        return self._client_addresses

    def fault_for(self, scenario: Scenario, level: Any) -> Fault:
        live, found = self._live_topology()
        plan = plan_fault(scenario, live, level, load_host=self.load_host, load_hosts=self.client_addresses)
        component = ",".join(name for hp in plan.hosts for name in hp.faulted)
        peers = tuple(sorted({p for hp in plan.hosts for m in hp.matches for p in m.peers}))
        fault = Fault(component, level, peers)
        self._plans[fault] = (plan, found)
        return fault

    def dry_run_text(self, fault: Fault) -> str:
        plan, _ = self._plans[fault]
        # executors are only built (from the cluster file and ~/.ssh/config), never connected
        execs = self._executors if self._executors is not None else ssh_executors(self.topology)
        try:
            ports = ssh_bypass_ports(execs)
        finally:
            if execs is not self._executors:
                for ex in execs.values():
                    ex.close()
        return render_dry_run(plan, commands=tc_renderer(ssh_ports=ports), ssh_user=self.settings.ssh_user)

    def apply(self, fault: Fault, *, expected_duration_s: float) -> Evidence:
        plan, found = self._plans[fault]
        if self.dry_run:
            raise DryRun(self.dry_run_text(fault))
        self.preflight()
        interfaces = resolve_interfaces(plan, self.executors)
        mechs = tc_mechanisms(plan, self.executors, interfaces, run=self.run, state_dir_for=self.state_dir_for,
                              keeper=self.leases)
        active = _Active(plan, [], found)
        self._active[fault] = active
        try:
            applied = []
            for mech in mechs:
                active.mechanisms.append(mech)
                applied.append(mech.apply(fault, deadline_s=expected_duration_s + self.grace_s))
            checks = self._verify(plan, interfaces, present=True)
            self.leases.check()  # still held after verifying (not lost while the runner was stopped)
            if fault.level.kind is FaultKind.RATE:
                active.sampler = PendingPeerSampler(
                    PDClient(pd_client_urls(self.topology, self.pd_url)), interval=self.pending_interval_s)
                active.sampler.start()
        except BaseException:
            self._clear_mechs(fault, active)
            raise
        return Evidence(
            mechanism="tc",
            applied=tuple(f"[{m.ex.host} {m.interface}] {line}" for m, ev in zip(mechs, applied, strict=True)
                          for line in ev.applied),
            measured={"plan": plan.to_json(), "filters": checks,
                      "pd_leader": found.to_json() if found else None},
            verified=True,
            notes=self._notes(plan, found),
        )

    def _notes(self, plan: FaultPlan, found: LeaderDiscovery | None) -> tuple[str, ...]:
        notes = list(plan.notes)
        for hp in plan.hosts:
            if hp.shares_host_with:
                notes.append(f"{hp.host}: {', '.join(hp.faulted)} shared the host with "
                             f"{', '.join(hp.shares_host_with)} (not faulted)")
            notes.extend(f"{hp.host}: {c}" for c in hp.collateral)
        if found is not None and found.moved:
            notes.append(f"PD leader moved since the topology file: {found.previous} -> {found.leader.address}")
        return tuple(notes)

    def _verify(self, plan: FaultPlan, interfaces: Mapping[str, Mapping[str, str]], *, present: bool
                ) -> dict[str, Any]:
        """Read the rules back with ``tc`` on every host and compare with the plan."""
        out: dict[str, Any] = {}
        for hp in plan.hosts:
            for dev, matches in matches_by_interface(hp, interfaces[hp.host]).items():
                root, shaped, bypass = installed_filters(self.executors[hp.host], dev)
                want = planned_filters(matches) if present else set()
                ok = shaped == want and (not present or hp.ssh_port in bypass)
                out[f"{hp.host} {dev}"] = {"root": root, "filters": len(shaped), "expected": len(want), "ok": ok}
                if not ok:
                    extra = sorted(map(str, shaped - want))[:5]
                    missing = sorted(map(str, want - shaped))[:5]
                    state = "in place" if present else "gone"
                    raise FaultVerificationError(
                        hp.host, f"tc rules on {dev} are not as planned ({state} expected): "
                                 f"extra {extra}, missing {missing}, SSH bypass {sorted(bypass)}")
        return out

    def clear(self, fault: Fault, evidence: Evidence) -> Evidence:
        active = self._active.get(fault)
        if active is None:
            return evidence
        summary = self._clear_mechs(fault, active)
        interfaces = resolve_interfaces(active.plan, self.executors)
        self._verify(active.plan, interfaces, present=False)
        measured = dict(evidence.measured)
        if summary is not None:
            measured["pending_peers"] = summary
        return dataclasses.replace(evidence, measured=measured, notes=(*evidence.notes, "cleared and verified absent"))

    def suspend(self, fault: Fault) -> None:
        """The plan's tc rules removed on every host (read back: gone); the
        hosts' dead-man timers are re-armed when the rules come back."""
        active = self._active[fault]
        for mech in active.mechanisms:
            mech.clear(fault)
        self._verify(active.plan, resolve_interfaces(active.plan, self.executors), present=False)

    def resume(self, fault: Fault, *, expected_duration_s: float) -> None:
        active = self._active[fault]
        for mech in active.mechanisms:
            mech.apply(fault, deadline_s=expected_duration_s + self.grace_s)
        self._verify(active.plan, resolve_interfaces(active.plan, self.executors), present=True)

    def _clear_mechs(self, fault: Fault, active: _Active) -> dict[str, Any] | None:
        summary = None
        if active.sampler is not None:
            active.sampler.stop()
            summary = active.sampler.summary()
        errors = []
        for mech in active.mechanisms:
            try:
                mech.clear(fault)
            except WanbenchError as exc:  # keep clearing the other hosts
                errors.append(str(exc))
        self._active.pop(fault, None)
        if errors:
            raise FaultError("tidb", "could not clear every host: " + " | ".join(errors))
        return summary

    def sweep(self) -> list[str]:
        """Remove wanbench qdiscs and dead-man state that dead runs left on any host of the cluster."""
        if self.dry_run:
            return []
        from wanbench.faults.tc import PeerMatch, TcMechanism

        self.preflight()
        removed: list[str] = []
        for host, ex in self.executors.items():
            extra: dict[str, Any] = {"state_dir": self.state_dir_for(host)} if self.state_dir_for else {}
            mech = TcMechanism(ex, "lo", [PeerMatch(port=9)], run=self.run,
                               ssh_ports=(self.settings.ssh_port_of(host),), **extra)
            removed += mech.sweep()
        return removed

    def start_watchdog(self) -> None:
        """Nothing to start on the runner's side: every fault on a TiDB host is armed with a
        dead-man timer *on that host* (``faults.deadman``), which removes it if this runner dies."""

    def check_faults(self) -> None:
        """Raise ``FaultLostError`` if a host's lease of the faults in place was lost (see ``faults.lease``)."""
        self.leases.check()

    # -- fingerprint -------------------------------------------------------------------------------------
    def run_context(self) -> dict[str, Any]:
        ctx: dict[str, Any] = {
            "profile": self.profile,
            "cluster": self.topology.name,
            "topology_version": self.topology.version,
            "topology_shape": self.topology.shape(),
            "client": client_facts(),
            "mechanisms": {"delay": "tc netem", "rate": "tc htb", "loss": "tc netem"},
            "endpoints": {p: [f"{h}:{port}" for h, port in sql_endpoints(self.topology, p)]
                          for p in ("proxy", "direct")},
            "dry_run": self.dry_run,
        }
        if self.dry_run:  # nothing is asked of the cluster: no versions, and nothing is measured or stored
            return {**ctx, "versions": {}}
        self.preflight()
        _, found = self._live_topology()
        ctx["pd_leader"] = found.to_json() if found else None
        h, p = sql_endpoints(self.topology, "direct")[0]
        facts = collect_facts(SqlTarget(h, p, self.settings.sql_user, self.settings.password(),
                                        connect_timeout=self.settings.connect_timeout))
        fp = facts.fingerprint(self.topology)
        ctx["versions"] = fp["versions"]
        ctx["fingerprint"] = fp
        return ctx

    def copies(self) -> list[RowSource]:
        """One copy as SQL sees it, through the first TiDB server: TiKV's replicas are not read apart."""
        from wanbench.heartbeat import Endpoint, SqlRowSource  # loads mysql-connector: only when rows are read

        return [SqlRowSource("tidb", Endpoint.of(self.sql_targets("direct")[0]))]

    def close(self) -> None:
        self.leases.close()
        for fault, active in list(self._active.items()):
            try:
                self._clear_mechs(fault, active)
            except WanbenchError:
                pass  # the hosts' dead-man timers remove what could not be cleared
        if self._executors is not None:
            for ex in self._executors.values():
                ex.close()


class TidbClusterOutages:
    """The cluster's ``Outages``: ``TidbOutages`` over the cluster's SSH connections (made on
    first use), planned on the live topology (the PD leader as PD says it is now), printed
    and refused under a dry run, and only after every host passed the preflight otherwise."""

    def __init__(self, cluster: TidbCluster) -> None:
        self.cluster = cluster
        self._driver: TidbOutages | None = None

    @property
    def driver(self) -> TidbOutages:
        if self._driver is None:
            c = self.cluster
            self._driver = TidbOutages(c.topology, executors=None if c.dry_run else c.executors, dry_run=c.dry_run,
                                       load_host=c.load_host, grace_s=c.grace_s, run=c.run,
                                       state_dir_for=c.state_dir_for, keeper=c.leases)
        return self._driver

    def outage_for(self, scenario: Scenario, kind: OutageKind, hold_s: float) -> Outage:
        c = self.cluster
        driver = self.driver
        plan = driver.plan(scenario, kind, hold_s, topology=None if c.dry_run else c.live_topology())
        if c.dry_run:
            raise DryRun(driver.render(plan))
        c.preflight()
        return plan.outage

    def apply(self, outage: Outage) -> Evidence:
        return self.driver.apply(outage)

    def clear(self, outage: Outage, evidence: Evidence) -> Evidence:
        return self.driver.clear(outage, evidence)


@contextmanager
def open_tidb(setup: ClusterSetup) -> Iterator[TidbCluster]:
    """The cluster ``--cluster`` described, for a session; nothing connects before it is used."""
    if setup.topology is None:
        raise ConfigError("the tidb profile needs --cluster")
    opt = setup.option
    yield TidbCluster(setup.topology, tag=setup.tag, dry_run=bool(opt("dry_run")), pd_url=opt("pd_url"),
                      load_host=opt("load_host"), load_hosts=opt("load_hosts"), grace_s=float(opt("fault_grace")),
                      lease_s=float(opt("fault_lease")), accept_new_host_keys=bool(opt("ssh_accept_new_hosts")),
                      prometheus=opt("prometheus"))


__all__ = ["DryRun", "TidbCluster", "TidbClusterOutages", "open_tidb"]
