"""Profiles of one shape: the lab and TiDB implement every member of
``Cluster`` (``wanbench/profiles/base.py``) with the protocol's parameters,
none of them a stub, so the fixtures never ask which profile they have
(mypy checks the same statically: the ``cluster`` fixture's ``c: Cluster``)."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wanbench.profiles.base import Cluster
from wanbench.profiles.lab.cluster import LabCluster
from wanbench.profiles.tidb.cluster import TidbCluster

METHODS = sorted(n for n, v in vars(Cluster).items() if inspect.isfunction(v) and not n.startswith("_"))


def _params(fn: Callable[..., Any]) -> list[tuple[str, object]]:
    return [(p.name, p.kind) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_is_what_the_fixtures_use() -> None:
    assert set(METHODS) >= {"sql_targets", "apply", "clear", "sweep", "start_watchdog", "check_faults",
                            "run_context", "close"}
    assert set(Cluster.__annotations__) == {"profile", "topology"}


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



def test_the_shape_depends_on_no_profile() -> None:
    """``profiles/base.py`` is below every profile: it imports none of them,
    lazily or not (Credentials, DryRun and the database name live in it)."""
    src = (Path(__file__).resolve().parent.parent / "wanbench" / "profiles" / "base.py").read_text()
    imported = [n.module or "" for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ImportFrom)]
    imported += [a.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.startswith("wanbench.profiles.")], imported
