"""The profile a session runs against, decided from ``--cluster`` alone, and
the rules that follow from it before anything is collected or started:
which fault families and scenarios exist, which cells cannot use load hosts,
and xdist's refusal of performance cells measured on one cluster.

Machinery, not fixtures: the gate, reporting and the fixtures in
``wanbench.fixtures`` read the profile from here.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from wanbench import families
from wanbench.errors import ConfigError
from wanbench.profiles.capabilities import by_name
from wanbench.profiles.registry import opener_of
from wanbench.pytest_plugin.families import family_marker
from wanbench.pytest_plugin.scaleout import plan_of
from wanbench.topology import Scenario, Topology, load_catalog, load_unavailable


@dataclass(frozen=True)
class Profile:
    name: str
    catalog: dict[str, Scenario]
    topology: Topology | None  # None for the lab until it runs


_PROFILE_KEY = pytest.StashKey[Profile]()


def profile_of(config: pytest.Config) -> Profile:
    """The profile and its catalog, decided from ``--cluster`` alone."""
    if _PROFILE_KEY in config.stash:
        return config.stash[_PROFILE_KEY]
    path = config.getoption("cluster")
    try:
        if path is None:
            name = "tidb-lab" if config.getoption("lab_flavour", "mariadb") == "tidb" else "lab"
            profile = Profile(name, load_catalog(name), None)
        else:
            if config.getoption("lab_flavour", "mariadb") != "mariadb":
                raise ConfigError("--lab-flavour chooses the lab a run starts; with --cluster no lab starts")
            from wanbench.profiles.tidb.topology import load_cluster

            topology = load_cluster(path)
            profile = Profile(topology.profile, load_catalog(topology.profile), topology)
        opener_of(profile.name)  # a profile without a cluster to open: said now, not when the session starts
        for scenario in profile.catalog.values():
            for need in scenario.needs:
                try:
                    by_name(need)
                except ConfigError as exc:
                    raise ConfigError(f"scenario {scenario.name} of the {profile.name} catalog: {exc}") from None
        refused = load_unavailable(profile.name)
        for n in config.getoption("scenario") or ():
            if n in refused:
                raise ConfigError(f"scenario {n} is not available on the {profile.name} profile: {refused[n]}")
        unknown = [n for n in config.getoption("scenario") or () if n not in profile.catalog]
        if unknown:
            raise ConfigError(f"unknown scenario(s) {', '.join(unknown)} for the {profile.name} profile "
                              f"(known: {', '.join(profile.catalog)})")
    except ConfigError as exc:
        raise pytest.UsageError(f"--cluster/--scenario: {exc}") from None
    config.stash[_PROFILE_KEY] = profile
    return profile


def pytest_configure(config: pytest.Config) -> None:
    # Validate --cluster and --scenario before anything is collected or started.
    profile_of(config)


def family_of(node: pytest.Item | pytest.Function) -> str | None:
    """The fault family a test belongs to, from its marker."""
    return next((name for name in families.names(families.FAULT) if node.get_closest_marker(name)), None)


XDIST_REFUSAL = ("performance tests must not run under pytest-xdist (-n): numbers measured while other "
                 "workers load the same cluster are meaningless. Run them without -n; -n is for selftests/ "
                 "(several clusters: docs/scale-out.md).")
_REFUSED = pytest.StashKey[bool]()


def _is_cell(item: pytest.Item) -> bool:
    return family_marker(item) is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """-n with one cluster: every performance test of the worker errors with
    the reason, before any fixture (no lab, no fault). A usage error raised
    here, in a worker's collection, ends in an xdist internal error that
    hides the message. With load hosts, the cells of families that cannot
    use them (``Family.load_hosts``) are skipped, saying why."""
    if load_hosts_of(config):
        for item in items:
            name = family_marker(item)
            fam = families.family(name) if name else None
            if fam is not None and not fam.load_hosts:
                item.add_marker(pytest.mark.skip(reason=f"the {name} family cannot draw its load from load hosts "
                                                        "yet (--load-hosts / load_hosts:)"))
    if hasattr(config, "workerinput") and not plan_of(config).several and any(_is_cell(i) for i in items):
        config.stash[_REFUSED] = True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.stash.get(_REFUSED, False) and _is_cell(item):
        pytest.fail(XDIST_REFUSAL, pytrace=False)


def load_hosts_of(config: pytest.Config) -> tuple[str, ...]:
    """The load hosts this run draws its load from (``--load-hosts``, else the cluster file's), by name."""
    given = config.getoption("load_hosts", None)
    if given:
        return tuple(h.label for h in given)
    topology = profile_of(config).topology
    return tuple(topology.settings.get("load_hosts") or ()) if topology is not None else ()


