"""Which function opens a cluster of each profile: one table by profile name
(pytest-testinfra's backends), with a clear error for a name it does not
know. A profile's package is imported only when its cluster is opened.

An opener takes a ``ClusterSetup`` (the run's options, where to say what it
does, the ``--cluster`` topology, the run's tag) and is a context manager:
it builds the cluster (and whatever the cluster runs on, such as the lab's
servers), yields it, and at the end stops what it started. The fixtures
open ``profile_of(config).name`` through ``open_cluster`` and never ask
which profile they got: what a cluster can do, it offers
(``wanbench.profiles.capabilities``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from types import MappingProxyType

from wanbench.errors import ConfigError
from wanbench.profiles.base import Cluster, ClusterSetup

Opener = Callable[[ClusterSetup], AbstractContextManager[Cluster]]


def _lab(setup: ClusterSetup) -> AbstractContextManager[Cluster]:
    from wanbench.profiles.lab.cluster import open_lab

    return open_lab(setup)


def _tidb_lab(setup: ClusterSetup) -> AbstractContextManager[Cluster]:
    from wanbench.profiles.lab.tidb_cluster import open_tidb_lab

    return open_tidb_lab(setup)


def _tidb(setup: ClusterSetup) -> AbstractContextManager[Cluster]:
    from wanbench.profiles.tidb.cluster import open_tidb

    return open_tidb(setup)


#: profile name -> its opener; a new profile adds one line here (and its catalog and budgets)
PROFILES: Mapping[str, Opener] = MappingProxyType({
    "lab": _lab,
    "tidb-lab": _tidb_lab,
    "tidb": _tidb,
})


def opener_of(profile: str) -> Opener:
    try:
        return PROFILES[profile]
    except KeyError:
        raise ConfigError(f"unknown profile {profile!r} (known: {', '.join(sorted(PROFILES))})") from None


def open_cluster(profile: str, setup: ClusterSetup) -> AbstractContextManager[Cluster]:
    """``with open_cluster(name, setup) as cluster:`` the session's cluster of ``profile``."""
    return opener_of(profile)(setup)


__all__ = ["PROFILES", "Opener", "open_cluster", "opener_of"]
