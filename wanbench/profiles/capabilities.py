"""What a cluster can do beyond the shape every profile has (``Cluster``,
``wanbench.profiles.base``), in the manner of Jepsen's optional database
protocols (``jepsen/db.clj``: a database offers ``Kill``, ``Pause``,
``Primary``, ``LogFiles`` only if it can, and the nemesis asks
``(satisfies? db/Pause db)``, never the database's name).

A profile decides what it offers once, when its cluster is built
(``Cluster.offers``); code that needs a capability asks the cluster for it,
and gets the object that provides it, or None::

    outages = cluster.offers.get(OUTAGES)  # an ``Outages``, or None

Each capability is a small protocol (what the object offered does) and a
``Capability`` key that names it: ``outages``, ``replicas``, ``evidence``,
``lab``. A scenario of a catalog that needs one says so (``needs: [replicas]``);
its cells are skipped on a cluster without it, with ``Capability.lacking``'s
line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from wanbench.errors import ConfigError
from wanbench.faults.base import Evidence
from wanbench.faults.outage import Outage, OutageKind
from wanbench.topology import Scenario

if TYPE_CHECKING:  # typing only: the heartbeat loads mysql-connector
    from wanbench.heartbeat import RowSource

T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Capability(Generic[T]):
    """The key of one capability: ``Offers.get(OUTAGES)`` is an ``Outages`` or None."""

    #: its name, as a catalog's ``needs:`` says it (``needs: [replicas]``)
    name: str
    #: the protocol an offer of it implements (``selftests/test_profile_shape.py`` checks every offer)
    protocol: type
    #: what it is, as the sentence of a cell that lacks it says: "... needs <what>; ..."
    what: str

    def lacking(self, who: str, profile: str) -> str:
        """The one line a cell that needs this capability is skipped with."""
        return f"{who} needs {self.what}; this cluster (profile {profile}) has none"

    def __repr__(self) -> str:
        return f"Capability({self.name!r})"


# -- the protocols -------------------------------------------------------------------------------------------


class Outages(Protocol):
    """A partition, pause or restart of one component (``wanbench.faults.outage``), put in place
    and removed again: what the availability family does to a scenario's target."""

    def outage_for(self, scenario: Scenario, kind: OutageKind, hold_s: float) -> Outage:
        """The outage ``scenario`` puts on its target (one instance). A profile that cannot act
        now (a dry run) raises ``DryRun`` carrying every command it would run."""
        ...

    def apply(self, outage: Outage) -> Evidence:
        """Put ``outage`` in place and verify it, under a lease that removes it if the runner dies."""
        ...

    def clear(self, outage: Outage, evidence: Evidence) -> Evidence:
        """Remove ``outage`` and verify the component serves again."""
        ...


class Replicas(Protocol):
    """Replicas that acknowledge commits (semi-synchronous replication): a commit
    waits for them, and an acknowledged write may be missing on them."""

    @property
    def components(self) -> tuple[str, ...]:
        """The topology's components that are such replicas."""
        ...

    @property
    def ack_timeout_s(self) -> float:
        """How long a commit waits for a replica's acknowledgement before the primary stops waiting
        (and acknowledges writes the replica does not have)."""
        ...

    def applied(self, component: str, *, wait_s: float) -> RowSource:
        """The rows on replica ``component`` once it has applied what it received (at most
        ``wait_s``): what a failover to it now would keep."""
        ...


class EvidenceWindows(Protocol):
    """Collects the server-side evidence of a cell's measured windows: a sysbench runner's
    ``window_hooks`` (``prepare``, ``begin``, ``end``, ``missed``), emptied by ``reset``,
    read by ``take`` when the cell is recorded, ``close`` at the end of the session."""

    def reset(self) -> None: ...

    def prepare(self) -> None: ...

    def begin(self) -> None: ...

    def end(self) -> None: ...

    def missed(self, reason: str) -> None: ...

    def take(self, *, client: Mapping[str, Any] | None = None, qps: float | None = None) -> dict[str, Any] | None:
        ...

    def close(self) -> None:
        """Stop what ``EvidenceSource.open`` started for it."""
        ...


class EvidenceSource(Protocol):
    """Where a measured window's server-side evidence comes from (the lab: ``/proc`` and the
    servers' counters, ``wanbench.evidence.collect``; TiDB: its Prometheus,
    ``wanbench.evidence.prometheus``)."""

    def open(self, note: Callable[[str], None]) -> EvidenceWindows | None:
        """This session's collector; None when there is nothing to ask (``note`` said why)."""
        ...


class LabControls(Protocol):
    """Knobs of a lab whose servers run on this machine."""

    def is_up(self) -> bool: ...

    def set_handicap(self, rate_kbps: int | None) -> None:
        """Slow the proxy's answers by a small, adjustable amount (``--lab-handicap``); None removes it."""
        ...

    def set_cpu_limit(self, service: str, cores: float | None) -> None:
        """Put one server under a CPU quota (``--lab-cpu-limit``); None removes it."""
        ...


# -- the keys ------------------------------------------------------------------------------------------------

OUTAGES: Capability[Outages] = Capability(
    "outages", Outages, "outages (a partition, pause or restart of one component)")
REPLICAS: Capability[Replicas] = Capability("replicas", Replicas, "a replica that acknowledges commits")
EVIDENCE: Capability[EvidenceSource] = Capability("evidence", EvidenceSource, "a source of server-side evidence")
LAB_CONTROLS: Capability[LabControls] = Capability(
    "lab", LabControls, "lab controls (the handicap, CPU limits of its servers)")

#: every capability by name (a catalog's ``needs:``)
CAPABILITIES: Mapping[str, Capability[Any]] = MappingProxyType(
    {c.name: c for c in (OUTAGES, REPLICAS, EVIDENCE, LAB_CONTROLS)})


def by_name(name: str) -> Capability[Any]:
    try:
        return CAPABILITIES[name]
    except KeyError:
        raise ConfigError(f"unknown capability {name!r} (known: {', '.join(CAPABILITIES)})") from None


# -- what one cluster offers -------------------------------------------------------------------------------


class Offers:
    """The capabilities one cluster offers, fixed when it is built::

        self.offers = Offers().add(OUTAGES, LabOutages(...)).add(REPLICAS, LabReplicas(lab))

    ``add`` returns a new ``Offers`` (this one never changes), and mypy checks
    each provider against its capability's protocol (a provider that does not
    fit reads: Cannot infer value of type parameter "T" of "add")."""

    __slots__ = ("_by",)

    def __init__(self, by: Mapping[Capability[Any], Any] | None = None) -> None:
        self._by: Mapping[Capability[Any], Any] = MappingProxyType(dict(by or {}))

    def add(self, capability: Capability[T], provider: T) -> Offers:
        if capability in self._by:
            raise ConfigError(f"{capability.name} offered twice")
        return Offers({**self._by, capability: provider})

    def get(self, capability: Capability[T]) -> T | None:
        """What provides ``capability`` on this cluster, or None if it has none."""
        found: T | None = self._by.get(capability)
        return found

    def __contains__(self, capability: object) -> bool:
        return capability in self._by

    def __iter__(self) -> Iterator[Capability[Any]]:
        return iter(self._by)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self._by)

    def __repr__(self) -> str:
        return f"Offers({', '.join(self.names)})"


__all__ = ["CAPABILITIES", "EVIDENCE", "LAB_CONTROLS", "OUTAGES", "REPLICAS", "Capability", "EvidenceSource",
           "EvidenceWindows", "LabControls", "Offers", "Outages", "Replicas", "by_name"]
