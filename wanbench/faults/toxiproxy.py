"""Delay through Toxiproxy, for kernels without ``sch_netem`` (like ours).

A small HTTP client with timeouts (the official Python client is stale) and
a mechanism that puts half the added round trip on each direction of every
link that touches the faulted component (the halves add up to the level:
37 ms is 19 + 18). Toxics are named
``wb-<tag>-<link>-<stream>`` so a sweep recognises ours and only ours.
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import FaultError, InfrastructureError
from wanbench.faults.base import Evidence, Fault, FaultKind
from wanbench.faults.lease import FileLease
from wanbench.results import write_json_atomic
from wanbench.topology import Link, Topology

TOXIC_PREFIX = "wb-"


class ToxiproxyError(InfrastructureError):
    def __init__(self, url: str, status: int | None, body: str) -> None:
        self.url = url
        self.status = status
        self.body = body
        super().__init__(f"Toxiproxy {url}: {'no answer' if status is None else status} {body.strip()[:200]}")


@dataclass(frozen=True)
class ToxiproxyClient:
    """``POST /proxies``, ``POST /proxies/{p}/toxics``, ``DELETE .../toxics/{t}``."""

    base_url: str
    timeout: float = 5.0

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        url = self.base_url.rstrip("/") + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - loopback URL we built
                raw = resp.read().decode()
        except urllib.error.HTTPError as exc:
            raise ToxiproxyError(url, exc.code, exc.read().decode(errors="replace")) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ToxiproxyError(url, None, str(getattr(exc, "reason", exc))) from None
        return json.loads(raw) if raw.strip() else None

    def version(self) -> str:
        url = self.base_url.rstrip("/") + "/version"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as resp:  # noqa: S310
                return resp.read().decode().strip()
        except (urllib.error.URLError, OSError) as exc:
            raise ToxiproxyError(url, None, str(exc)) from None

    def proxies(self) -> dict[str, Any]:
        return self._call("GET", "/proxies") or {}

    def create_proxy(self, name: str, listen: str, upstream: str) -> None:
        existing = self.proxies().get(name)
        if existing and existing.get("listen") == listen and existing.get("upstream") == upstream:
            return
        if existing:
            self._call("DELETE", f"/proxies/{name}")
        self._call("POST", "/proxies", {"name": name, "listen": listen, "upstream": upstream, "enabled": True})

    def set_enabled(self, proxy: str, enabled: bool) -> None:
        """A disabled proxy closes its connections and refuses new ones: a crisp outage."""
        self._call("POST", f"/proxies/{proxy}", {"enabled": enabled})

    def toxics(self, proxy: str) -> list[dict[str, Any]]:
        return self._call("GET", f"/proxies/{proxy}/toxics") or []

    def add_toxic(self, proxy: str, name: str, type_: str, stream: str, attributes: Mapping[str, Any]) -> None:
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {"name": name, "type": type_, "stream": stream, "toxicity": 1.0, "attributes": dict(attributes)},
        )

    def delete_toxic(self, proxy: str, name: str) -> bool:
        """Remove one toxic; False (not an error) when it was not there."""
        try:
            self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")
        except ToxiproxyError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def our_toxics(self, prefix: str = TOXIC_PREFIX) -> list[tuple[str, str]]:
        return [
            (proxy, t["name"])
            for proxy, info in self.proxies().items()
            for t in info.get("toxics", [])
            if str(t.get("name", "")).startswith(prefix)
        ]

    def sweep(self, prefix: str = TOXIC_PREFIX) -> list[str]:
        removed = []
        for proxy, name in self.our_toxics(prefix):
            if self.delete_toxic(proxy, name):
                removed.append(f"toxic {name} on {proxy}")
        return removed


def split_level(ms: float) -> tuple[int, int]:
    """Upstream and downstream shares of a round-trip level, in the whole milliseconds Toxiproxy
    takes, adding up to the level exactly: 37 -> (19, 18), not 2 x round(18.5)."""
    total = int(round(ms))
    up = (total + 1) // 2
    return up, total - up


def write_toxic_lease(lease_dir: Path, prefix: str, *, hard_deadline: float, lease_s: float, label: str
                      ) -> FileLease:
    """The lease of a run's toxics, for the lab watchdog: its mtime is the runner's last renewal."""
    lease_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    path = lease_dir / f"{prefix}.json"
    write_json_atomic(path, {"prefix": prefix, "token": token, "hard_deadline": hard_deadline, "lease_s": lease_s})
    return FileLease(path, token, label)


def expired_toxic_leases(lease_dir: Path, now: float) -> list[tuple[Path, str, str]]:
    """(file, toxic prefix, why) of every lease in ``lease_dir`` past its lease or hard bound."""
    out = []
    for path in sorted(lease_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            idle = now - path.stat().st_mtime
        except (FileNotFoundError, ValueError):
            continue
        # strict JSON (results.write_json_atomic) writes an infinite bound as null: no bound
        lease_s, hard = data.get("lease_s"), data.get("hard_deadline")
        if lease_s is not None and idle > float(lease_s):
            out.append((path, str(data["prefix"]), f"lease of {float(lease_s):g}s lapsed ({idle:.1f}s idle)"))
        elif hard is not None and now > float(hard):
            out.append((path, str(data["prefix"]), "hard bound passed"))
    return out


#: measure(link) -> median round-trip ms of a request through that link
RttProbe = Callable[[Link], float]


class ToxiproxyMechanism:
    """Added RTT on every link of a component: L/2 upstream + L/2 downstream."""

    name = "toxiproxy"

    def __init__(self, client: ToxiproxyClient, topology: Topology, *, tag: str, rtt_probe: RttProbe | None = None):
        self.client = client
        self.topology = topology
        self.tag = tag
        self.rtt_probe = rtt_probe

    def supports(self, kind: FaultKind) -> bool:
        return kind is FaultKind.DELAY

    def links_for(self, fault: Fault) -> list[Link]:
        links = self.topology.links_of(fault.component)
        if fault.peers:
            links = [ln for ln in links if ({ln.src, ln.dst} - {fault.component}) & set(fault.peers)]
        if not links:
            raise FaultError("toxiproxy", f"component {fault.component!r} has no links to put a delay on")
        return links

    def _names(self, link: Link) -> tuple[str, str]:
        base = f"{TOXIC_PREFIX}{self.tag}-{link.name}"
        return f"{base}-up", f"{base}-down"

    def apply(self, fault: Fault, *, deadline_s: float = 0.0) -> Evidence:
        if fault.level.kind is not FaultKind.DELAY:
            raise FaultError("toxiproxy", f"toxiproxy mechanism does delay only, not {fault.level.kind.value}")
        links = self.links_for(fault)
        before = {ln.name: self.rtt_probe(ln) for ln in links} if self.rtt_probe else {}
        self.clear(fault)
        applied = []
        latency, jitter = split_level(fault.level.value), split_level(fault.level.jitter)
        try:
            for ln in links:
                for i, (name, stream) in enumerate(zip(self._names(ln), ("upstream", "downstream"), strict=True)):
                    attrs = {"latency": latency[i], "jitter": jitter[i]}
                    self.client.add_toxic(ln.name, name, "latency", stream, attrs)
                    applied.append(f"{ln.name}: latency {attrs['latency']}ms jitter {attrs['jitter']}ms {stream}")
        except BaseException:
            self.clear(fault)
            raise
        notes: tuple[str, ...] = ()
        if sum(latency) != fault.level.value or sum(jitter) != fault.level.jitter:
            notes = (f"Toxiproxy takes whole milliseconds: installed {sum(latency)}ms~{sum(jitter)}ms "
                     f"for {fault.level.label}",)
        return Evidence(mechanism=self.name, applied=tuple(applied), measured={"before_ms": before}, notes=notes)

    def clear(self, fault: Fault) -> None:
        for ln in self.topology.links_of(fault.component):
            for name in self._names(ln):
                self.client.delete_toxic(ln.name, name)

    def sweep(self) -> list[str]:
        return self.client.sweep()

    def present(self, fault: Fault) -> list[str]:
        wanted = {n for ln in self.topology.links_of(fault.component) for n in self._names(ln)}
        return sorted(name for _p, name in self.client.our_toxics() if name in wanted)


def expected_added_ms(links: Sequence[Link], faulted: Sequence[Link], level_ms: float) -> float:
    """Added round trip for a request whose path crosses ``links``."""
    names = {ln.name for ln in faulted}
    return sum(level_ms for ln in links if ln.name in names)
