"""Profiles of one shape: the lab and TiDB implement every member of
``Cluster`` (``wanbench/profiles/base.py``) with the protocol's parameters,
none of them a stub, so the fixtures never ask which profile they have
(mypy checks the same statically: the registry's openers return a
``Cluster``). What a profile offers beyond the shape
(``wanbench/profiles/capabilities.py``) implements its capability's protocol
the same way, and the registry opens every profile by name."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wanbench.errors import ConfigError
from wanbench.profiles.base import Cluster
from wanbench.profiles.capabilities import (
    CAPABILITIES,
    EVIDENCE,
    LAB_CONTROLS,
    OUTAGES,
    REPLICAS,
    Offers,
    by_name,
)
from wanbench.profiles.lab.cluster import LabCluster
from wanbench.profiles.lab.offers import LabReplicas
from wanbench.profiles.lab.servers import Lab
from wanbench.profiles.lab.tidb_cluster import TidbLabCluster
from wanbench.profiles.registry import PROFILES, opener_of
from wanbench.profiles.tidb.cluster import TidbCluster
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.topology import load_catalog, parse_catalog

ROOT = Path(__file__).resolve().parent.parent
PROFILES_DIR = ROOT / "wanbench" / "profiles"
#: the profile packages (lab/, tidb/, ...): what only the registry may import
PROFILE_PACKAGES = sorted(f"wanbench.profiles.{d.name}" for d in PROFILES_DIR.iterdir() if (d / "__init__.py").exists())

METHODS = sorted(n for n, v in vars(Cluster).items() if inspect.isfunction(v) and not n.startswith("_"))


def _params(fn: Callable[..., Any]) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_is_what_the_fixtures_use() -> None:
    assert set(METHODS) >= {"sql_targets", "apply", "clear", "sweep", "start_watchdog", "check_faults",
                            "run_context", "copies", "close"}
    assert set(Cluster.__annotations__) == {"profile", "topology", "offers"}


@pytest.mark.parametrize("impl", [LabCluster, TidbCluster], ids=["lab", "tidb"])
def test_every_profile_implements_every_member(impl: type) -> None:
    for name in METHODS:
        method = getattr(impl, name, None)
        assert callable(method), f"{impl.__name__} has no {name}()"
        assert _params(method) == _params(getattr(Cluster, name)), f"{impl.__name__}.{name} differs from Cluster"
        body = ast.parse(textwrap.dedent(inspect.getsource(method))).body[0]
        raises = [n for n in ast.walk(body) if isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)]
        assert not raises, f"{impl.__name__}.{name} is a stub"
    assert isinstance(vars(impl).get("profile"), str)



def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    out = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    return out + [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]


@pytest.mark.parametrize("module", ["base.py", "capabilities.py"])
def test_the_shape_depends_on_no_profile(module: str) -> None:
    """``profiles/base.py`` and ``profiles/capabilities.py`` are below every profile: they import
    none of them, lazily or not (Credentials, DryRun and the database name live in base)."""
    assert PROFILE_PACKAGES == ["wanbench.profiles.lab", "wanbench.profiles.tidb"]
    imported = _imports(PROFILES_DIR / module)
    assert not [m for m in imported if m.startswith(tuple(PROFILE_PACKAGES))], imported


# -- capabilities ------------------------------------------------------------------------------------------


def _lab_cluster(tmp_path: Path) -> LabCluster:
    return LabCluster(Lab(tmp_path / "lab", 24500), tag="shape")  # nothing started, nothing connected


def _tidb_cluster() -> TidbCluster:
    return TidbCluster(load_cluster(ROOT / "selftests" / "data" / "tiup_display_seed000.txt"), tag="shape",
                       dry_run=True)


def _members(protocol: type) -> list[str]:
    return sorted(n for n in vars(protocol) if not n.startswith("_"))


def test_what_each_profile_offers(tmp_path: Path) -> None:
    """Decided when the cluster is built: the lab offers all four, TiDB outages and its Prometheus."""
    lab, tidb = _lab_cluster(tmp_path), _tidb_cluster()
    assert lab.offers.names == ("outages", "replicas", "evidence", "lab")
    assert tidb.offers.names == ("outages", "evidence")
    assert tidb.offers.get(REPLICAS) is None
    assert tidb.offers.get(LAB_CONTROLS) is None
    replicas = lab.offers.get(REPLICAS)
    assert replicas is not None
    assert replicas.components == ("replica",)


def test_every_offer_implements_its_capability(tmp_path: Path) -> None:
    """Every member of the capability's protocol, with the protocol's parameters, none a stub."""
    for cluster in (_lab_cluster(tmp_path), _tidb_cluster()):
        for capability in cluster.offers:
            provider = cluster.offers.get(capability)
            assert provider is not None
            for name in _members(capability.protocol):
                want = getattr(capability.protocol, name)
                got = getattr(type(provider), name, None)
                where = f"{cluster.profile}: {type(provider).__name__}.{name} ({capability.name})"
                if isinstance(want, property):
                    assert hasattr(provider, name), f"{where} is missing"
                    continue
                assert callable(got), f"{where} is missing"
                assert _params(got) == _params(want), f"{where} differs from {capability.protocol.__name__}"
                body = ast.parse(textwrap.dedent(inspect.getsource(got))).body[0]
                raises = [n for n in ast.walk(body)
                          if isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)]
                assert not raises, f"{where} is a stub"


def test_every_capability_has_a_name_a_protocol_and_a_sentence() -> None:
    assert set(CAPABILITIES) == {"outages", "replicas", "evidence", "lab"}
    assert [CAPABILITIES[n] for n in ("outages", "replicas", "evidence", "lab")] == [OUTAGES, REPLICAS, EVIDENCE,
                                                                                      LAB_CONTROLS]
    assert REPLICAS.lacking("heartbeat_replica", "tidb-lab") == (
        "heartbeat_replica needs a replica that acknowledges commits; this cluster (profile tidb-lab) has none")
    for c in CAPABILITIES.values():
        assert _members(c.protocol), c


def test_offers_are_fixed_once_made(tmp_path: Path) -> None:
    replicas = LabReplicas(Lab(tmp_path / "lab", 24500))
    empty = Offers()
    one = empty.add(REPLICAS, replicas)
    assert empty.get(REPLICAS) is None
    assert one.get(REPLICAS) is replicas
    assert REPLICAS in one
    assert OUTAGES not in one
    with pytest.raises(ConfigError, match="replicas offered twice"):
        one.add(REPLICAS, replicas)


def test_the_registry_opens_every_profile_by_name() -> None:
    """One opener per profile, each profile with its catalog and its default budgets; an unknown
    name is refused, saying which are known."""
    assert sorted(PROFILES) == ["lab", "tidb", "tidb-lab"]
    assert [LabCluster.profile, TidbCluster.profile, TidbLabCluster.profile] == ["lab", "tidb", "tidb-lab"]
    for name in PROFILES:
        assert callable(opener_of(name))
        assert load_catalog(name)
        assert (ROOT / "wanbench" / "budgets" / f"{name}.yaml").exists()
    with pytest.raises(ConfigError, match=r"unknown profile 'tikv' \(known: lab, tidb, tidb-lab\)"):
        opener_of("tikv")


def test_catalogs_name_the_capabilities_their_scenarios_need() -> None:
    """``needs:`` names known capabilities; the lab's replica scenarios need its replica."""
    for name in PROFILES:
        for scenario in load_catalog(name).values():
            for need in scenario.needs:
                assert by_name(need) in CAPABILITIES.values(), (name, scenario.name)
    lab = load_catalog("lab")
    assert sorted(s.name for s in lab.values() if "replicas" in s.needs) == [
        "heartbeat_replica", "replica_read", "replica_tpcc", "replica_write", "replica_ycsb"]
    assert load_catalog("tidb")["heartbeat_tikv"].needs == ()
    with pytest.raises(ConfigError, match=r"unknown capability 'replica' \(known: outages, replicas, evidence, lab\)"):
        by_name("replica")
    bad = "scenarios:\n  x:\n    target: a\n    workload: w\n    needs: replicas\n"
    with pytest.raises(ConfigError, match="'needs' must be a list of capability names"):
        parse_catalog(bad, source="t.yaml")
