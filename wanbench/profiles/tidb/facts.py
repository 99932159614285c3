"""TiDB versions at run time, for the environment fingerprint.

Baselines are only comparable between runs of the same versions: the
fingerprint holds ``tidb_version()`` (release, edition, git hash) and every
instance's version from ``information_schema.cluster_info``, plus the
cluster's shape. Connection errors never carry the password.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.redact import hide
from wanbench.sql import SqlTarget
from wanbench.topology import Topology

CLUSTER_INFO_SQL = (
    "SELECT TYPE, INSTANCE, STATUS_ADDRESS, VERSION, GIT_HASH, START_TIME, UPTIME "
    "FROM information_schema.cluster_info ORDER BY TYPE, INSTANCE"
)
_ER_SP_DOES_NOT_EXIST = 1305  # "FUNCTION x.tidb_version does not exist": not a TiDB server


@dataclass(frozen=True)
class InstanceInfo:
    type: str
    instance: str
    status_address: str
    version: str
    git_hash: str
    start_time: str = ""
    uptime: str = ""

    @property
    def release(self) -> str:
        """``8.0.11-TiDB-v8.5.3`` -> ``v8.5.3``; ``8.5.3`` -> ``v8.5.3``."""
        v = self.version.split("-TiDB-", 1)[-1]
        return v if v.startswith("v") else f"v{v}"


@dataclass(frozen=True)
class TiDBFacts:
    tidb_version: Mapping[str, str]
    instances: tuple[InstanceInfo, ...] = ()
    server_version: str = ""

    @property
    def release(self) -> str:
        return self.tidb_version.get("Release Version", "")

    def fingerprint(self, topology: Topology | None = None) -> dict[str, Any]:
        return fingerprint(self, topology)


def parse_tidb_version(text: str) -> dict[str, str]:
    """The ``Key: value`` lines of ``SELECT tidb_version()``."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            out[key.strip()] = value.strip()
    if "Release Version" not in out:
        raise ConfigError(f"not tidb_version() output (no 'Release Version' line): {text[:120]!r}")
    return out


def parse_cluster_info(rows: Iterable[Sequence[Any]]) -> tuple[InstanceInfo, ...]:
    out = []
    for row in rows:
        vals = ["" if v is None else str(v) for v in row]
        vals += [""] * (7 - len(vals))
        out.append(InstanceInfo(*vals[:7]))
    return tuple(out)


def fingerprint(facts: TiDBFacts, topology: Topology | None = None) -> dict[str, Any]:
    """What must match for two runs' numbers to be compared."""
    versions: dict[str, list[str]] = {}
    hashes: dict[str, list[str]] = {}
    for i in facts.instances:
        versions.setdefault(i.type, [])
        if i.release not in versions[i.type]:
            versions[i.type].append(i.release)
        hashes.setdefault(i.type, [])
        if i.git_hash and i.git_hash not in hashes[i.type]:
            hashes[i.type].append(i.git_hash)
    out: dict[str, Any] = {
        "product": "tidb",
        "release": facts.release,
        "edition": facts.tidb_version.get("Edition", ""),
        "git_hash": facts.tidb_version.get("Git Commit Hash", ""),
        "store": facts.tidb_version.get("Store", ""),
        "versions": {k: sorted(v) for k, v in sorted(versions.items())},
        "git_hashes": {k: sorted(v) for k, v in sorted(hashes.items())},
        "mixed_versions": sorted(k for k, v in versions.items() if len(v) > 1),
    }
    if topology is not None:
        out["shape"] = topology.shape()
        out["topology_version"] = topology.version
    return out


def collect_facts(target: SqlTarget) -> TiDBFacts:
    """Ask one TiDB (or a TiProxy in front of one) for its versions."""
    import mysql.connector  # imported only when a real cluster is asked

    where = f"{target.user}@{target.host}:{target.port}"
    conn = target.connect(with_db=False, use_pure=True, autocommit=False, who="reading cluster facts")
    try:
        cur: Any = conn.cursor()
        server_version = str(getattr(conn, "server_info", "") or getattr(conn, "get_server_info", lambda: "")())
        try:
            cur.execute("SELECT tidb_version()")
        except mysql.connector.Error as exc:
            if getattr(exc, "errno", None) == _ER_SP_DOES_NOT_EXIST:
                raise ConfigError(
                    f"{where} is not a TiDB server (server version {server_version!r}; tidb_version() does not exist)"
                ) from None
            raise InfrastructureError(f"{where}: SELECT tidb_version() failed: {_safe(exc, target.password)}") from None
        row = cur.fetchone()
        info = parse_tidb_version(str(row[0]) if row else "")
        try:
            cur.execute(CLUSTER_INFO_SQL)
            instances = parse_cluster_info(cur.fetchall())
        except mysql.connector.Error as exc:
            raise InfrastructureError(
                f"{where}: reading information_schema.cluster_info failed: {_safe(exc, target.password)}"
            ) from None
        return TiDBFacts(tidb_version=info, instances=instances, server_version=server_version)
    finally:
        conn.close()


def _safe(exc: BaseException, password: str) -> str:
    text = str(exc)
    return hide(text, [password])


_VERSION = re.compile(r"\bv?\d+\.\d+\.\d+")


def looks_like_tidb(server_version: str) -> bool:
    """``8.0.11-TiDB-v8.5.3`` (what TiDB answers in the handshake)."""
    return "-TiDB-" in server_version and bool(_VERSION.search(server_version))
