"""``TidbCluster``: the ``Cluster`` (``wanbench.profiles.base``) of a real
tiup-deployed TiDB cluster.

Faults are put in place over SSH on the hosts the plan names, scoped to the
target's own flows (``wanbench.profiles.tidb.plan``), by the mechanism each
host's kernel allows (a capability probe per host: tc for rate caps, tc netem
for delay and loss, nft for loss where the kernel has no netem; delay without
netem stops before anything is applied). Before the first fault every host is
checked (``preflight``); the PD leader is asked live before each fault; the
rules are read back on every host and, where the workload's own flows cross
them, measured on the wire (``wire``); a bandwidth fault samples PD's
pending-peer regions until it is cleared. With ``dry_run`` nothing connects
anywhere: ``apply`` raises ``DryRun`` carrying the rendered commands.

It offers outages over SSH (``TidbClusterOutages``, ``outages.py``) and, as
the evidence source (``wanbench.profiles.capabilities``), its Prometheus and
the census counters of every tidb-server's own ``/metrics``; no
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
from wanbench.faults.probe import Capabilities, probe
from wanbench.profiles.base import ClusterSetup, DryRun, SqlTarget, client_facts
from wanbench.profiles.capabilities import EVIDENCE, OUTAGES, Offers
from wanbench.profiles.tidb.facts import collect_facts
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.outages import TidbOutages
from wanbench.profiles.tidb.pd import LeaderDiscovery, PDClient, PendingPeerSampler, discover_leader
from wanbench.profiles.tidb.plan import FaultPlan, plan_fault, render_dry_run
from wanbench.profiles.tidb.preflight import PreflightReport, preflight, resolve_interfaces, ssh_executors
from wanbench.profiles.tidb.tcplan import (
    FilterKey,
    choose_mechanisms,
    fault_mechanisms,
    installed_filters,
    installed_nft,
    ssh_bypass_ports,
    tc_renderer,
)
from wanbench.profiles.tidb.views import pd_client_urls, sql_endpoints, workload_settings
from wanbench.profiles.tidb.wire import verify_on_wire
from wanbench.topology import LoadHost, Scenario, Topology, parse_load_hosts

if TYPE_CHECKING:
    from wanbench.heartbeat import RowSource

#: what the evidence says when the cluster has no Prometheus to ask (and no tidb-server's /metrics answers)
NO_PROMETHEUS = "evidence: the topology has no Prometheus and --prometheus is not given: no server-side evidence"
#: how long the session watches the tidb-servers do their own work before the first cell
BACKGROUND_S = 5.0


def tidb_status_urls(topology: Topology) -> list[str]:
    """Every tidb-server's status port (``/metrics``), from the topology."""
    return [f"http://{c.host}:{c.ports[1]}" for c in topology.by_role("tidb") if len(c.ports) > 1]


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
        self._caps: dict[str, Capabilities] = {}
        self._plans: dict[Fault, tuple[FaultPlan, LeaderDiscovery | None]] = {}
        self._active: dict[Fault, _Active] = {}
        self.last_discovery: LeaderDiscovery | None = None
        self.offers = (Offers()
                       .add(OUTAGES, TidbClusterOutages(self))
                       .add(EVIDENCE, TidbPrometheus(find_prometheus(topology, prometheus), why_none=NO_PROMETHEUS,
                                                     status_urls=tidb_status_urls(topology),
                                                     background_s=BACKGROUND_S)))

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

    def capabilities(self, hosts: list[str]) -> dict[str, Capabilities]:
        """What each host's kernel and tools can do (``faults.probe``: tried on throwaway objects), probed
        once per host and session."""
        for host in hosts:
            if host not in self._caps:
                self._caps[host] = probe(self.executors[host])
        return {h: self._caps[h] for h in hosts}

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
        return render_dry_run(plan, commands=tc_renderer(ssh_ports=ports, run=self.run),
                              ssh_user=self.settings.ssh_user)

    def apply(self, fault: Fault, *, expected_duration_s: float) -> Evidence:
        plan, found = self._plans[fault]
        if self.dry_run:
            raise DryRun(self.dry_run_text(fault))
        self.preflight()
        caps = self.capabilities([hp.host for hp in plan.hosts])
        chosen = choose_mechanisms(plan, caps, fault.level)  # a host that cannot take it: stop before any change
        interfaces = resolve_interfaces(plan, self.executors)
        mechs = fault_mechanisms(plan, self.executors, interfaces, chosen=chosen, capabilities=caps, run=self.run,
                                 state_dir_for=self.state_dir_for, keeper=self.leases)
        active = _Active(plan, [], found)
        self._active[fault] = active
        notes = list(self._notes(plan, found))
        try:
            applied = []
            for mech in mechs:
                active.mechanisms.append(mech)
                applied.append(mech.apply(fault, deadline_s=expected_duration_s + self.grace_s))
            checks = self._verify(mechs, present=True)
            wire = verify_on_wire(plan, fault.level, mechs, self._sql_target, load_hosts=bool(self.load_hosts))
            self.leases.check()  # still held after verifying (not lost while the runner was stopped)
            if fault.level.kind is FaultKind.RATE:
                active.sampler = self.pending_sampler()
                if active.sampler is None:
                    notes.append("no PD in the topology and no pd_url: pending-peer regions not sampled")
                else:
                    active.sampler.start()
        except BaseException:
            self._clear_mechs(fault, active)
            raise
        return Evidence(
            mechanism="+".join(sorted(set(chosen.values()))),
            applied=tuple(f"[{m.ex.host} {m.interface}] {line}" for m, ev in zip(mechs, applied, strict=True)
                          for line in ev.applied),
            measured={"plan": plan.to_json(), "mechanisms": chosen, "filters": checks, "wire": wire,
                      "pd_leader": found.to_json() if found else None},
            verified=True,
            notes=tuple(notes),
        )

    def pending_sampler(self) -> PendingPeerSampler | None:
        """What samples PD's pending-peer regions during a bandwidth fault; None without a PD to ask (an
        observation, not a precondition: the fault goes on without it)."""
        urls = pd_client_urls(self.topology, self.pd_url)
        return PendingPeerSampler(PDClient(urls), interval=self.pending_interval_s) if urls else None

    def _sql_target(self, host: str, port: int) -> SqlTarget:
        return SqlTarget(host, port, self.settings.sql_user, self.settings.password(),
                         connect_timeout=self.settings.connect_timeout)

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

    def _verify(self, mechs: list[Any], *, present: bool) -> dict[str, Any]:
        """Read the rules back on every host (``tc``, or ``nft`` for an nft table) and compare with the plan."""
        out: dict[str, Any] = {}
        for mech in mechs:
            host, dev = mech.ex.host, mech.interface
            want: set[FilterKey] = {_planned(p) for p in mech.peers} if present else set()
            if mech.name == "nft":
                there, shaped, bypass = installed_nft(mech.ex, mech.table)
                root = mech.table if there else None
                gone = not there
            else:
                root, shaped, bypass = installed_filters(mech.ex, dev)
                gone = not shaped
            ok = shaped == want and (self.settings.ssh_port_of(host) in bypass if present else gone)
            out[f"{host} {dev}"] = {"mechanism": mech.name, "root": root, "filters": len(shaped),
                                    "expected": len(want), "ok": ok}
            if not ok:
                extra = sorted(map(str, shaped - want))[:5]
                missing = sorted(map(str, want - shaped))[:5]
                state = "in place" if present else "gone"
                raise FaultVerificationError(
                    host, f"{mech.name} rules on {dev} are not as planned ({state} expected): "
                          f"extra {extra}, missing {missing}, SSH bypass {sorted(bypass)}")
        return out

    def clear(self, fault: Fault, evidence: Evidence) -> Evidence:
        active = self._active.get(fault)
        if active is None:
            return evidence
        mechs = list(active.mechanisms)
        summary = self._clear_mechs(fault, active)
        self._verify(mechs, present=False)
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
        self._verify(active.mechanisms, present=False)

    def resume(self, fault: Fault, *, expected_duration_s: float) -> None:
        active = self._active[fault]
        for mech in active.mechanisms:
            mech.apply(fault, deadline_s=expected_duration_s + self.grace_s)
        self._verify(active.mechanisms, present=True)

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
        """Remove wanbench qdiscs, nft tables (loss, partitions) and dead-man state that dead runs left on
        any host of the cluster."""
        if self.dry_run:
            return []
        from wanbench.faults.nft import NftMechanism
        from wanbench.faults.tc import PeerMatch, TcMechanism

        self.preflight()
        removed: list[str] = []
        caps = self.capabilities(sorted(self.executors))
        for host, ex in self.executors.items():
            extra: dict[str, Any] = {"state_dir": self.state_dir_for(host)} if self.state_dir_for else {}
            ssh = (self.settings.ssh_port_of(host),)
            for mech in (TcMechanism(ex, "lo", [PeerMatch(port=9)], run=self.run, ssh_ports=ssh,
                                     capabilities=caps[host], **extra),
                         NftMechanism(ex, [PeerMatch(port=9)], run=self.run, ssh_ports=ssh, capabilities=caps[host],
                                      **extra)):
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
            # what each faulted host's probe allows decides, per fault (its evidence: measured.mechanisms)
            "mechanisms": {"delay": "tc netem (a host without sch_netem is refused)", "rate": "tc htb",
                           "loss": "tc netem, else nft (numgen)"},
            "endpoints": {p: [f"{h}:{port}" for h, port in sql_endpoints(self.topology, p)]
                          for p in ("proxy", "direct")},
            "dry_run": self.dry_run,
        }
        if self.dry_run:
            # Every run context names the versions (the gate fingerprints the run when the session opens,
            # before any cell's fault prints its plan). A dry run asks no server: the versions are what
            # the cluster file says, and say so; nothing of a dry run is measured, judged or stored.
            ctx["versions"] = {"tidb": self.topology.version or "unknown",
                               "source": "the cluster file (--dry-run asks no server)"}
            return ctx
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


def _planned(peer: Any) -> FilterKey:
    """The (dst, sport, dport) a directed peer's rule matches (``tcplan.DirectedPeer``)."""
    return (peer.ip, peer.port if peer.direction == "sport" else None, peer.port if peer.direction == "dport" else None)


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
