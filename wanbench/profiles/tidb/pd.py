"""A small PD HTTP client: the PD leader, members, and pending-peer regions.

The leader may have moved since ``tiup cluster display`` was saved, and a
``pd_leader`` fault on the wrong host measures nothing, so the leader is
always asked for at run time. Every PD client URL is tried in turn (a PD
that is down or faulted must not stop discovery); every request has a
timeout; proxies from the environment are ignored (PD is on the cluster
network, not behind the user's HTTP proxy).
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from wanbench.errors import ConfigError, InfrastructureError
from wanbench.profiles.tidb.views import pd_client_urls, pd_leader, with_pd_leader
from wanbench.topology import Topology

LEADER = "/pd/api/v1/leader"
MEMBERS = "/pd/api/v1/members"
PENDING_PEERS = "/pd/api/v1/regions/check/pending-peer"


class PDError(InfrastructureError):
    """No PD client URL gave a usable answer; the message lists what each one said."""

    def __init__(self, path: str, attempts: Sequence[tuple[str, str]]) -> None:
        self.path = path
        self.attempts = list(attempts)
        detail = "; ".join(f"{url}: {why}" for url, why in attempts) or "no PD URL to try"
        super().__init__(f"no PD answered {path}: {detail}")


@dataclass(frozen=True)
class PDMember:
    name: str
    member_id: int
    client_urls: tuple[str, ...]
    peer_urls: tuple[str, ...] = ()
    binary_version: str = ""
    git_hash: str = ""
    deploy_path: str = ""

    @property
    def address(self) -> str:
        """``host:port`` of the first client URL (what `tiup cluster display` calls the ID)."""
        if not self.client_urls:
            return ""
        u = urlsplit(self.client_urls[0])
        return f"{u.hostname}:{u.port or (443 if u.scheme == 'https' else 80)}"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PDMember:
        try:
            return cls(
                name=str(data["name"]),
                member_id=int(data["member_id"]),
                client_urls=tuple(data.get("client_urls") or ()),
                peer_urls=tuple(data.get("peer_urls") or ()),
                binary_version=str(data.get("binary_version", "")),
                git_hash=str(data.get("git_hash", "")),
                deploy_path=str(data.get("deploy_path", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a PD member object ({type(exc).__name__}: {exc})") from None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "member_id": self.member_id, "client_urls": list(self.client_urls),
                "peer_urls": list(self.peer_urls), "binary_version": self.binary_version,
                "git_hash": self.git_hash}


@dataclass(frozen=True)
class PendingPeers:
    """One sample of ``/regions/check/pending-peer`` (the seed's "region pending" observation)."""

    at: float
    count: int
    by_store: Mapping[int, int] = field(default_factory=dict)
    region_ids: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "count": self.count,
                "by_store": {str(k): v for k, v in sorted(self.by_store.items())},
                "region_ids": list(self.region_ids[:20])}


@dataclass(frozen=True)
class LeaderDiscovery:
    """The live PD leader and how it compares with what the topology file said."""

    leader: PDMember
    members: tuple[PDMember, ...]
    answered_by: str
    previous: str | None
    topology: Topology

    @property
    def moved(self) -> bool:
        return self.previous is not None and self.previous != self.leader.address

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader.address,
            "leader_name": self.leader.name,
            "previous": self.previous,
            "moved": self.moved,
            "answered_by": self.answered_by,
            "versions": sorted({m.binary_version for m in self.members if m.binary_version}),
        }


class PDClient:
    def __init__(self, urls: Sequence[str], *, timeout: float = 5.0, ssl_context: ssl.SSLContext | None = None) -> None:
        cleaned = [u.rstrip("/") for u in urls if u and u.strip()]
        for u in cleaned:
            if urlsplit(u).scheme not in ("http", "https") or not urlsplit(u).hostname:
                raise ConfigError(f"PD URL {u!r} must look like http://host:2379")
        if not cleaned:
            raise ConfigError("no PD URL: the topology has no pd instance and --pd-url was not given")
        self.urls = cleaned
        self.timeout = timeout
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    def get(self, path: str) -> tuple[Any, str]:
        """The first good JSON answer for ``path`` and the URL that gave it."""
        attempts: list[tuple[str, str]] = []
        for base in self.urls:
            url = base + path
            try:
                with self._opener.open(url, timeout=self.timeout) as resp:
                    body = resp.read()
                return json.loads(body), base
            except urllib.error.HTTPError as exc:
                text = exc.read(300).decode(errors="replace").strip()
                attempts.append((base, f"HTTP {exc.code} {text}".strip()))
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                attempts.append((base, f"{type(reason).__name__}: {reason}"))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                attempts.append((base, f"answer is not JSON ({exc})"))
        raise PDError(path, attempts)

    def leader(self) -> tuple[PDMember, str]:
        data, url = self.get(LEADER)
        try:
            return PDMember.from_json(data), url
        except ValueError as exc:
            raise PDError(LEADER, [(url, str(exc))]) from None

    def members(self) -> tuple[tuple[PDMember, ...], PDMember | None, str]:
        data, url = self.get(MEMBERS)
        try:
            members = tuple(PDMember.from_json(m) for m in data.get("members") or ())
            leader = PDMember.from_json(data["leader"]) if data.get("leader") else None
        except (ValueError, AttributeError) as exc:
            raise PDError(MEMBERS, [(url, str(exc))]) from None
        return members, leader, url

    def pending_peers(self) -> PendingPeers:
        data, url = self.get(PENDING_PEERS)
        now = time.time()
        try:
            regions = data.get("regions") or []
            by_store: dict[int, int] = {}
            for r in regions:
                for p in r.get("pending_peers") or ():
                    sid = int(p.get("store_id", 0))
                    by_store[sid] = by_store.get(sid, 0) + 1
            return PendingPeers(now, int(data.get("count", len(regions))), by_store,
                                tuple(int(r["id"]) for r in regions))
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise PDError(PENDING_PEERS, [(url, f"unexpected answer ({exc})")]) from None


def discover_leader(
    topology: Topology, *, pd_url: str | Sequence[str] | None = None, timeout: float = 5.0
) -> LeaderDiscovery:
    """Ask PD who leads now; return the topology relabelled with the live leader.

    The live answer always wins over the file; ``moved`` says whether it differs.
    """
    client = PDClient(pd_client_urls(topology, pd_url), timeout=timeout)
    leader, url = client.leader()
    members, _, _ = client.members()
    pds = topology.by_role("pd")
    match = next((c for c in pds if c.address == leader.address), None)
    if match is None:  # client URLs may use names; tiup names PDs pd-<host>-<port>
        match = next((c for c in pds if leader.name == f"pd-{c.host}-{c.port}"), None)
    if match is None:
        known = ", ".join(c.address for c in pds)
        raise ConfigError(
            f"PD leader {leader.name} ({', '.join(leader.client_urls)}) is not among the PDs of cluster "
            f"{topology.name!r} ({known}): is the topology file from another cluster?"
        )
    before = pd_leader(topology)
    previous = before.address if before is not None else None
    updated = with_pd_leader(topology, match.address)
    return LeaderDiscovery(leader=leader, members=members, answered_by=url, previous=previous,
                           topology=updated)


class PendingPeerSampler:
    """Samples pending-peer regions in the background during a run (bandwidth family).

    Errors are kept as samples' absence plus a message, never raised into
    the measurement: a PD slowed by the fault must not abort the run.
    """

    def __init__(self, client: PDClient, *, interval: float = 5.0) -> None:
        self.client = client
        self.interval = interval
        self.samples: list[PendingPeers] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PendingPeerSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="pd-pending-peers", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.client.timeout * len(self.client.urls) + 1)

    def _loop(self) -> None:
        while True:
            try:
                self.samples.append(self.client.pending_peers())
            except InfrastructureError as exc:
                self.errors.append(str(exc))
            if self._stop.wait(self.interval):  # the sampling period, not a wait for a condition
                return

    def summary(self) -> dict[str, Any]:
        counts = [s.count for s in self.samples]
        return {
            "samples": len(self.samples),
            "max_pending_regions": max(counts) if counts else None,
            "last_pending_regions": counts[-1] if counts else None,
            "series": [s.to_json() for s in self.samples],
            "errors": self.errors[-5:],
        }


__all__ = [
    "LEADER", "MEMBERS", "PENDING_PEERS", "LeaderDiscovery", "PDClient", "PDError", "PDMember",
    "PendingPeerSampler", "PendingPeers", "discover_leader",
]
