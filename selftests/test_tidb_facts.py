"""Versions for the fingerprint: real `tidb_version()` output, cluster_info rows, safe errors."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.profiles.tidb.facts import (
    InstanceInfo,
    TiDBFacts,
    collect_facts,
    looks_like_tidb,
    parse_cluster_info,
    parse_tidb_version,
)
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.sql import SqlTarget

DATA = Path(__file__).parent / "data"


def _cluster_info_rows() -> list[list[str]]:
    lines = [ln for ln in (DATA / "cluster_info_seed000.tsv").read_text().splitlines() if not ln.startswith("#")]
    return [ln.split("\t") for ln in lines[1:]]


def test_parse_real_tidb_version_output() -> None:
    info = parse_tidb_version((DATA / "tidb_version_v8.5.2.txt").read_text())
    assert info["Release Version"] == "v8.5.2"
    assert info["Edition"] == "Community"
    assert info["Git Commit Hash"] == "f43a13324440f92209e2a9f04c0bbe9cf763978d"
    assert info["Store"] == "tikv"
    assert info["UTC Build Time"] == "2025-05-29 03:30:55"


def test_mysql_version_text_is_not_tidb() -> None:
    with pytest.raises(ConfigError, match="Release Version"):
        parse_tidb_version("10.11.6-MariaDB-0+deb12u1")
    assert looks_like_tidb("8.0.11-TiDB-v8.5.2")
    assert not looks_like_tidb("10.11.6-MariaDB-0+deb12u1")


def test_fingerprint_of_seed_cluster() -> None:
    instances = parse_cluster_info(_cluster_info_rows())
    assert len(instances) == 14
    assert instances[6].release == "v8.5.3"  # 8.0.11-TiDB-v8.5.3
    assert instances[0].release == "v8.5.3"  # 8.5.3
    facts = TiDBFacts(tidb_version={"Release Version": "v8.5.3", "Edition": "Community", "Store": "tikv",
                                    "Git Commit Hash": "3f1c9c0e6b3d5c3b7a1f0e2d4c6b8a9f1e3d5c7b"},
                      instances=instances)
    topo = load_cluster(DATA / "tiup_display_seed000.txt")
    fp = facts.fingerprint(topo)
    assert fp["release"] == "v8.5.3"
    assert fp["versions"] == {"pd": ["v8.5.3"], "tidb": ["v8.5.3"], "tikv": ["v8.5.3"]}
    assert fp["mixed_versions"] == []
    assert fp["shape"]["tikv"] == 2
    assert fp["topology_version"] == "v8.5.3"


def test_fingerprint_flags_mixed_versions() -> None:
    rows = _cluster_info_rows()
    rows[-1][3] = "8.5.4"  # one TiKV upgraded ahead of the others
    facts = TiDBFacts(tidb_version={"Release Version": "v8.5.3"}, instances=parse_cluster_info(rows))
    fp = facts.fingerprint()
    assert fp["versions"]["tikv"] == ["v8.5.3", "v8.5.4"]
    assert fp["mixed_versions"] == ["tikv"]


def test_short_rows_are_padded() -> None:
    (row,) = parse_cluster_info([("tiproxy", "10.0.0.1:6000", "10.0.0.1:3080", "v1.3.0", None)])
    assert row == InstanceInfo("tiproxy", "10.0.0.1:6000", "10.0.0.1:3080", "v1.3.0", "", "", "")
    assert row.release == "v1.3.0"


def test_connection_errors_never_show_the_password() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = SqlTarget("127.0.0.1", port, "bench", password="Sup3r-Secret-pw", connect_timeout=2)
    assert "Sup3r" not in repr(target)
    with pytest.raises(InfrastructureError) as info:
        collect_facts(target)
    assert f"bench@127.0.0.1:{port}" in str(info.value)
    assert "Sup3r" not in str(info.value)
