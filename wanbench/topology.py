"""The cluster model shared by every profile: components, links, scenarios.

A profile (``lab``, ``tidb``) builds a ``Topology``; its scenario catalog
(``wanbench/catalogs/<profile>.yaml``) says which components each scenario
faults, towards which peers, and which workload measures the effect.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from wanbench.errors import ConfigError
from wanbench.strictyaml import load_yaml
from wanbench.units import parse_list


@dataclass(frozen=True)
class Component:
    """One server process of the cluster (an instance, not a host)."""

    name: str
    role: str
    host: str
    ports: tuple[int, ...]
    status: str = ""
    labels: frozenset[str] = frozenset()

    @property
    def port(self) -> int:
        return self.ports[0]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def label(self) -> str:
        return self.name

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "host": self.host,
            "ports": list(self.ports),
            "status": self.status,
            "labels": sorted(self.labels),
        }


@dataclass(frozen=True)
class Link:
    """A connection from ``src`` (the side that connects) to ``dst``.

    In the lab every link passes through a Toxiproxy proxy listening on
    ``listen`` and forwarding to ``dst``'s port.
    """

    name: str
    src: str
    dst: str
    listen: int | None = None

    def touches(self, component: str) -> bool:
        return component in (self.src, self.dst)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "src": self.src, "dst": self.dst, "listen": self.listen}


@dataclass(frozen=True)
class Topology:
    profile: str
    name: str
    components: tuple[Component, ...]
    links: tuple[Link, ...] = ()
    version: str = ""
    settings: Mapping[str, Any] = field(default_factory=dict)

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.components)
        raise ConfigError(f"unknown component {name!r} in {self.profile} topology (known: {known})")

    def by_role(self, role: str) -> list[Component]:
        return [c for c in self.components if c.role == role]

    def roles(self) -> list[str]:
        return sorted({c.role for c in self.components})

    def links_of(self, component: str) -> list[Link]:
        return [ln for ln in self.links if ln.touches(component)]

    def select(self, selector: str) -> list[Component]:
        """``role``, ``role:label`` (``pd:leader``) or ``role:!label``."""
        role, _, label = selector.partition(":")
        found = [c for c in self.components if fnmatch.fnmatchcase(c.role, role)]
        if label.startswith("!"):
            found = [c for c in found if label[1:] not in c.labels]
        elif label:
            found = [c for c in found if label in c.labels]
        return found

    def shape(self) -> dict[str, int]:
        """Role -> instance count: the topology part of a run's fingerprint."""
        out: dict[str, int] = {}
        for c in self.components:
            out[c.role] = out.get(c.role, 0) + 1
        return dict(sorted(out.items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "name": self.name,
            "version": self.version,
            "components": [c.to_json() for c in self.components],
            "links": [ln.to_json() for ln in self.links],
            "shape": self.shape(),
        }


@dataclass(frozen=True)
class Scenario:
    """Which components get the fault, towards whom, and what measures it.

    ``target`` and ``peers`` are selectors for ``Topology.select``; empty
    ``peers`` means every other component the target talks to.
    """

    name: str
    target: str
    workload: str
    path: str = "proxy"
    peers: tuple[str, ...] = ()
    families: tuple[str, ...] = ("rtt", "bandwidth", "loss")
    description: str = ""
    #: capabilities its cells need beyond the shape of every cluster (``wanbench.profiles.capabilities``,
    #: by name, e.g. ``replicas``): on a cluster without one they are skipped, saying which
    needs: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return self.name


_SCENARIO_KEYS = {"target", "workload", "path", "peers", "families", "description", "needs"}


def load_catalog(profile: str) -> dict[str, Scenario]:
    """Read ``wanbench/catalogs/<profile>.yaml``."""
    try:
        text = resources.files("wanbench.catalogs").joinpath(f"{profile}.yaml").read_text()
    except FileNotFoundError:
        raise ConfigError(f"no scenario catalog for profile {profile!r}") from None
    return parse_catalog(text, source=f"catalogs/{profile}.yaml")


def parse_catalog(text: str, *, source: str) -> dict[str, Scenario]:
    data = load_yaml(text, source=source) or {}
    raw = data.get("scenarios")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{source}: needs a non-empty 'scenarios' mapping")
    out: dict[str, Scenario] = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{source}: scenario {name!r} must be a mapping")
        unknown = set(spec) - _SCENARIO_KEYS
        if unknown:
            raise ConfigError(f"{source}: scenario {name!r} has unknown keys {sorted(unknown)}")
        for key in ("target", "workload"):
            if key not in spec:
                raise ConfigError(f"{source}: scenario {name!r} lacks {key!r}")
        needs = spec.get("needs", [])
        if not isinstance(needs, list) or not all(isinstance(n, str) for n in needs):
            raise ConfigError(f"{source}: scenario {name!r}: 'needs' must be a list of capability names")
        out[name] = Scenario(
            name=name,
            target=spec["target"],
            workload=spec["workload"],
            path=spec.get("path", "proxy"),
            peers=tuple(spec.get("peers", ())),
            families=tuple(spec.get("families", ("rtt", "bandwidth", "loss"))),
            description=spec.get("description", ""),
            needs=tuple(needs),
        )
    return out


def load_unavailable(profile: str) -> dict[str, str]:
    """The scenarios a profile's catalog refuses (``unavailable:`` name -> why), e.g. the TiDB lab's
    replica scenarios: a user asking for one by name gets the reason, not "unknown scenario"."""
    try:
        text = resources.files("wanbench.catalogs").joinpath(f"{profile}.yaml").read_text()
    except FileNotFoundError:
        return {}
    raw = (load_yaml(text, source=f"catalogs/{profile}.yaml") or {}).get("unavailable") or {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise ConfigError(f"catalogs/{profile}.yaml: 'unavailable' must map scenario names to the reason")
    return {str(k): str(v) for k, v in raw.items()}


def select_scenarios(catalog: Mapping[str, Scenario], names: Iterable[str] | None, family: str) -> list[Scenario]:
    """The catalog's scenarios for ``family``, optionally narrowed to ``names``."""
    chosen = [s for s in catalog.values() if family in s.families]
    if names is None:
        return chosen
    wanted = list(names)
    unknown = [n for n in wanted if n not in catalog]
    if unknown:
        raise ConfigError(f"unknown scenario(s) {', '.join(unknown)} (known: {', '.join(catalog)})")
    return [s for s in chosen if s.name in wanted]


# -- load hosts ---------------------------------------------------------------------------------------------------

_LOAD_HOST_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,253}$")
_SQL_HOST = re.compile(r"^[A-Za-z0-9_.:-]{1,253}$")


@dataclass(frozen=True)
class LoadHost:
    """One load host: an SSH destination (a ``~/.ssh/config`` Host or an
    address) and, optionally, the address it connects to instead of the
    cluster's SQL host (a NAT, a VIP, or the lab's relay)."""

    name: str
    sql_host: str | None = None

    @property
    def label(self) -> str:
        return self.name if self.sql_host is None else f"{self.name}={self.sql_host}"


def parse_load_host_spec(text: str) -> LoadHost:
    """``NAME`` or ``NAME=SQL_HOST``."""
    name, sep, sql = str(text).strip().partition("=")
    name, sql = name.strip(), sql.strip()
    if not _LOAD_HOST_NAME.match(name):
        raise ConfigError(f"{text!r}: a load host is an SSH host name or address, optionally =SQL_HOST")
    if sep and not _SQL_HOST.match(sql):
        raise ConfigError(f"{text!r}: {sql!r} after '=' is not an address or host name")
    return LoadHost(name, sql or None)


def parse_load_hosts(text: str | Sequence[str]) -> tuple[LoadHost, ...]:
    """``--load-hosts``: comma-separated ``NAME[=SQL_HOST]``; a host listed twice is an error."""
    hosts = parse_list(text, parse_load_host_spec)
    names = [h.name for h in hosts]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(f"{text!r}: load host {', '.join(twice)} listed twice")
    return tuple(hosts)
