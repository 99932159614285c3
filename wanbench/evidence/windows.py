"""The collectors a profile's evidence source hands out
(``wanbench.profiles.capabilities.EvidenceWindows``): each remembers a cell's
measured windows and turns them into the cell's evidence when it is recorded.

* ``LabWindows``: the lab's ``/proc`` and server counters
  (``wanbench.evidence.collect``), plus its own Prometheus' view when that runs;
* ``TidbWindows``: a Prometheus that scrapes TiDB (``tidb_evidence``), asked
  about each window's wall-clock edges, and the census counters read from the
  tidb-servers' own ``/metrics`` at those edges; ``TidbPrometheus`` is the
  evidence source that makes one, for any cluster that has either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.evidence.collect import EvidenceCollector, LabProbe
from wanbench.evidence.prometheus import LabPrometheus, PromClient, tidb_evidence
from wanbench.evidence.tidb_metrics import MetricsProbe, difference


class TidbWindows:
    """Remembers each window's wall-clock edges and asks the Prometheus about
    them when the cell is recorded (its scrape interval, 15 s by default on a
    TiDB cluster, limits the resolution). ``stop``: what ``close`` stops (a
    Prometheus started for the session; a cluster's own is left alone).

    ``probe`` (``wanbench.evidence.tidb_metrics.MetricsProbe``): the census
    counters are read from the tidb-servers' own ``/metrics`` at each window's
    edges, exact totals over the windows (``counters``), as the lab reads
    ``SHOW GLOBAL STATUS``; without it the census divides Prometheus' rates.
    ``client`` None: there is no Prometheus to ask, and the evidence is the
    census counters alone (CPU, QPS per tier, latency and NIC bytes need one)."""

    def __init__(self, client: PromClient | None, *, stop: Callable[[], object] | None = None,
                 probe: MetricsProbe | None = None, background_s: float = 0.0) -> None:
        self.client = client
        self._stop = stop
        self.probe = probe
        #: TiDB's own work per second with no load (statistics, TTL and DDL jobs count as user scope too),
        #: read over ``background_s`` when the session opens: the census says where it is a large share
        self.background: dict[str, float] = self._idle_rates(background_s) if probe and background_s > 0 else {}
        self._edges: list[list[float]] = []
        self._missed: list[str] = []
        self._open: dict[str, float] | None = None
        self._prepared: dict[str, float] | None = None
        self._totals: dict[str, float] = {}
        self._counted = 0
        self._lock = threading.Lock()

    def reset(self) -> None:
        with self._lock:
            self._edges, self._missed = [], []
            self._open, self._totals, self._counted, self._prepared = None, {}, 0, None

    def prepare(self) -> None:
        """Read the census counters now, before the load starts (a scrape of ``/metrics`` takes a
        while, during which a load already started would run uncounted); Prometheus is asked when
        the cell is recorded."""
        snap = self._snapshot()
        with self._lock:
            self._prepared = snap

    def _idle_rates(self, seconds: float) -> dict[str, float]:
        assert self.probe is not None
        try:
            t0, before = time.monotonic(), self.probe.snapshot()
            time.sleep(seconds)  # a window with no load: what TiDB does by itself per second (measured, not waited on)
            after, t1 = self.probe.snapshot(), time.monotonic()
        except InfrastructureError:
            return {}
        return {k: round(v / (t1 - t0), 4) for k, v in difference(before, after).items() if k != "kv_source"}

    def _snapshot(self) -> dict[str, float] | None:
        if self.probe is None:
            return None
        try:
            return self.probe.snapshot()
        except InfrastructureError as exc:
            self.missed(f"census counters: {exc}")
            return None

    def begin(self) -> None:
        with self._lock:
            snap, self._prepared = self._prepared, None
        if snap is None:
            snap = self._snapshot()
        with self._lock:
            self._edges.append([time.time()])
            self._open = snap

    def end(self) -> None:
        snap = self._snapshot()
        with self._lock:
            if self._edges and len(self._edges[-1]) == 1:
                self._edges[-1].append(time.time())
                if self._open is not None and snap is not None:
                    for k, v in difference(self._open, snap).items():
                        self._totals[k] = v if k == "kv_source" else self._totals.get(k, 0.0) + v
                    self._counted += 1
                self._open = None

    def missed(self, reason: str) -> None:
        with self._lock:
            self._missed.append(reason)

    def take(self, *, client: Mapping[str, Any] | None = None, qps: float | None = None) -> dict[str, Any] | None:
        with self._lock:
            edges = [e for e in self._edges if len(e) == 2]
            missed, self._edges, self._missed = self._missed, [], []
            totals, counted, self._totals, self._counted = self._totals, self._counted, {}, 0
            seconds = sum(e[1] - e[0] for e in edges)
        if not edges:
            return {"error": "; ".join(missed)} if missed else None
        start, end = edges[0][0], edges[-1][1]
        if self.client is None:
            ev: dict[str, Any] = {"window_s": round(end - start, 3), "windows": len(edges),
                                  "source": "tidb-server /metrics (no Prometheus: census counters only)"}
        else:
            try:
                ev = tidb_evidence(self.client, start, end)
            except InfrastructureError as exc:
                return {"window_s": round(end - start, 3), "error": str(exc)}
        if qps is not None:
            ev.setdefault("qps", {})["client"] = round(qps, 1)
        if counted == len(edges) and totals:  # every window read at its edges: exact totals for the census
            ev["counters"] = {"tidb": {k: round(v, 3) for k, v in totals.items()}}
            ev["windows"] = counted
            ev["counters_seconds"] = round(seconds, 3)
            if self.background:
                ev["counters_background_per_s"] = {"tidb": dict(self.background)}
            ev["counters_source"] = "tidb-server /metrics at each window's edges: " + ", ".join(self.probe.urls
                                                                                                 if self.probe
                                                                                                 else [])
        if missed:
            ev.setdefault("notes", []).extend(missed)
        return ev

    def close(self) -> None:
        stop, self._stop = self._stop, None
        if stop is not None:
            stop()


class TidbPrometheus:
    """The evidence source of a TiDB cluster: its Prometheus (``url``; None: there is none) and its
    tidb-servers' own ``/metrics`` (``status_urls``: every tidb-server's status port).

    The census counters are read from the tidb-servers themselves at each window's edges when every
    status port answers from this machine when the session opens (a server left out would be counts
    missing); ``background_s``: how long TiDB's own work with no load is watched then. They need no
    Prometheus: a cluster without one (or whose Prometheus this machine cannot reach) still gets the
    census, which the gate compares in one run; Prometheus adds CPU per component, QPS per tier,
    latency and NIC bytes. With neither, there is no evidence, and ``why_none`` says so."""

    def __init__(self, url: str | None, *, why_none: str = "no Prometheus: no server-side evidence",
                 status_urls: Sequence[str] = (), background_s: float = 0.0) -> None:
        self.url = url
        self.why_none = why_none
        self.status_urls = tuple(status_urls)
        self.background_s = background_s

    def open(self, note: Callable[[str], None]) -> TidbWindows | None:
        probe = self._probe(note)
        if self.url is None and probe is None:
            note(self.why_none)
            return None
        if self.url is None:
            note("evidence: no Prometheus to ask: the census counters alone (no CPU per component, QPS per tier, "
                 "latency or NIC bytes)")
        if probe is not None and self.background_s > 0:
            note(f"TiDB's own work with no load: measured for {self.background_s:g} s (the census says where it "
                 "is a large share of a count)")
        return TidbWindows(PromClient(self.url) if self.url else None, probe=probe, background_s=self.background_s)

    def _probe(self, note: Callable[[str], None]) -> MetricsProbe | None:
        if not self.status_urls:
            return None
        probe = MetricsProbe(self.status_urls)
        try:
            probe.snapshot()
        except InfrastructureError as exc:
            rest = "the census divides Prometheus' rates" if self.url else "no census counters"
            note(f"evidence: census counters not read at each window's edge, since every tidb-server's status "
                 f"port must answer from this machine ({exc}): {rest}")
            return None
        note(f"evidence: census counters read from every tidb-server's /metrics at each window's edge "
             f"({', '.join(probe.urls)})")
        return probe


class LabWindows(EvidenceCollector):
    """The lab's collector, plus its Prometheus' view when that runs
    (``started``: the one this session started, stopped by ``close``)."""

    def __init__(self, probe: LabProbe, prom: LabPrometheus | None, *, started: LabPrometheus | None = None) -> None:
        super().__init__(probe)
        self.prom = prom
        self.started = started
        self._wall: list[list[float]] = []

    def reset(self) -> None:
        super().reset()
        self._wall = []

    def begin(self) -> None:
        super().begin()
        self._wall.append([time.time()])

    def end(self) -> None:
        super().end()
        if self._wall and len(self._wall[-1]) == 1:
            self._wall[-1].append(time.time())

    def take(self, *, client: Mapping[str, Any] | None = None, qps: float | None = None) -> dict[str, Any] | None:
        wall = [w for w in self._wall if len(w) == 2]
        self._wall = []
        ev = super().take(client=client, qps=qps)
        if ev is not None and self.prom is not None and wall:
            try:
                ev["prometheus"] = self.prom.evidence(wall[0][0], wall[-1][1])
            except InfrastructureError as exc:
                ev["prometheus"] = {"error": str(exc)}
        return ev

    def close(self) -> None:
        if self.started is not None:
            self.started.down()
            self.started = None


__all__ = ["LabWindows", "TidbPrometheus", "TidbWindows"]
