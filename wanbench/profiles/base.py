"""The shape every profile has: ``Cluster``, the protocol the fixtures, the
workload engines and the gate's fingerprint use, and what it hands out.

A profile is a kind of cluster under test: the embedded lab
(``wanbench.profiles.lab.cluster.LabCluster``) or a tiup-deployed TiDB cluster
(``wanbench.profiles.tidb.cluster.TidbCluster``). Each implements every method
below for real, so the fixtures call them without asking which profile they
have (``fixtures/cluster.py`` types its cluster as ``Cluster`` and
mypy checks both classes against it). How a profile puts a fault in place
(which mechanism, on which host) is its own business, behind ``apply`` and
``clear``; it is not part of the shape. What only some profiles can do
(outages, replicas that acknowledge commits, an evidence source, lab
controls) is offered as capabilities (``offers``,
``wanbench.profiles.capabilities``), decided when the cluster is built.

A profile opens its cluster for a session from a ``ClusterSetup``; which
function opens which profile is the table in ``wanbench.profiles.registry``.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wanbench.errors import WanbenchError
from wanbench.faults.base import Evidence, Fault
from wanbench.procs import cpu_model
from wanbench.profiles.capabilities import Offers
from wanbench.sql import DATABASE, SqlTarget
from wanbench.topology import Scenario, Topology

if TYPE_CHECKING:  # typing only: the heartbeat loads mysql-connector
    from wanbench.heartbeat import RowSource


@dataclass(frozen=True)
class Credentials:
    user: str
    password: str

    def __repr__(self) -> str:  # never print the password
        return f"Credentials(user={self.user!r}, password='***')"


class DryRun(WanbenchError):
    """Raised instead of applying a fault under ``--dry-run``; ``text`` is every command per host."""

    def __init__(self, text: str) -> None:
        self.text = text
        super().__init__("dry run: no fault applied, no workload run")


class Cluster(Protocol):
    """A cluster under test, whatever its profile."""

    #: the profile's name ("lab", "tidb"): picks the scenario catalog and the default budgets, and
    #: names the profile in messages; never asked to decide what the cluster can do (``offers`` says)
    profile: str
    topology: Topology
    #: the capabilities this cluster offers (``wanbench.profiles.capabilities``), fixed when it was built
    offers: Offers

    def sql_targets(self, path: str) -> list[SqlTarget]:
        """Where clients connect on ``path`` ("proxy" or "direct")."""
        ...

    def workload_args(self, path: str) -> list[str]:
        """Extra sysbench options this profile needs on ``path`` (TiDB: which errors are retryable)."""
        ...

    def client_cpus(self) -> tuple[int, ...]:
        """The CPUs the load generator is pinned to (empty: not pinned)."""
        ...

    def fault_for(self, scenario: Scenario, level: Any) -> Fault:
        """The fault ``scenario`` puts at ``level`` (a ``faults.base.Level``)."""
        ...

    def apply(self, fault: Fault, *, expected_duration_s: float) -> Evidence:
        """Put ``fault`` in place and verify it, under a lease and a dead-man timer that
        removes it ``expected_duration_s`` plus grace later at the latest."""
        ...

    def clear(self, fault: Fault, evidence: Evidence) -> Evidence:
        """Remove ``fault`` and verify it is gone."""
        ...

    def suspend(self, fault: Fault) -> None:
        """Lift ``fault`` for a level-0 block of an interleaved cell: its rules
        removed and verified gone, its lease and dead-man timer kept."""
        ...

    def resume(self, fault: Fault, *, expected_duration_s: float) -> None:
        """Put a suspended ``fault`` back in place and verify its rules are there."""
        ...

    def sweep(self) -> list[str]:
        """Remove faults an earlier, dead run left behind; what was removed."""
        ...

    def start_watchdog(self) -> None:
        """Arm whatever removes this run's faults if the runner dies (a profile whose
        hosts' own timers do that arms nothing here)."""
        ...

    def check_faults(self) -> None:
        """Raise ``FaultLostError`` if the lease of a fault in place was lost."""
        ...

    def run_context(self) -> dict[str, Any]:
        """The facts that fingerprint a run (profile, versions, shape, client)."""
        ...

    def copies(self) -> list[RowSource]:
        """Every server that holds a copy of what a commit acknowledged, each read once it has
        caught up, past any fault: where a lost acknowledged write shows (the heartbeat's RPO)."""
        ...

    def close(self) -> None:
        """Clear what is still in place and let go of connections."""
        ...


@dataclass(frozen=True)
class ClusterSetup:
    """What a profile is given to open its cluster for a session (``wanbench.profiles.registry``)."""

    #: the run's options by name, as ``pytest.Config.getoption`` takes them (name, default)
    option: Callable[..., Any]
    #: says one line of what is being done (the run's progress)
    note: Callable[[str], None]
    #: what ``--cluster`` described (None: the profile builds its own, like the lab)
    topology: Topology | None
    #: this run's tag: names what the run puts in place (its faults, leases, watchdog)
    tag: str
    #: where the run started (the lab's default run directory is under it)
    rootpath: Path


def client_facts() -> dict[str, Any]:
    """The load generator's hardware: part of every profile's fingerprint."""
    return {"host": platform.node(), "cpu_model": cpu_model(), "cores": os.cpu_count(),
            "python": sys.version.split()[0]}


__all__ = ["DATABASE", "Cluster", "ClusterSetup", "Credentials", "SqlTarget", "client_facts"]
