"""A TiDB fault verified on the wire, from this machine, through the flows the
workload itself uses.

Reading the rules back (``tcplan``) shows they are installed as planned; this
shows they act. The only flows this machine can drive through a real host's
rules are the answers of the SQL endpoints that a fault scopes towards the
clients (the ``tidb`` and ``tiproxy`` scenarios: replies from :4000 or :6000
to the load host, which is this machine when sysbench runs here). So:

* rate: bulk answers (``SELECT REPEAT(...)``) over 4 connections at once,
  the aggregate goodput where the bytes arrive (here) within -12 %..+2 % of
  the cap, plus the share of the token bucket a transfer of this length gets
  through at once (the lab's band, ``profiles/lab/faults.py``), up to three
  attempts (noise only ever makes a transfer slower);
* loss (nft): 1,500 ``SELECT 1`` round trips, then the table's counters
  (packets that met the rule, packets dropped) within a binomial range.

A plan with no such flow (TiKV, PD), or whose load runs on load hosts over
SSH, is verified by the rules read back only, and its evidence says so; so is
loss by tc netem (no counters to read). A measurement that fails names the
address this machine reaches the host from when the rules name another one
(a wrong ``load_host``: the workload would not cross the fault either); the
addresses alone decide nothing, since a NAT between may make both right.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from wanbench.errors import FaultVerificationError
from wanbench.faults.base import FaultKind, Level
from wanbench.faults.tc import BURST_S
from wanbench.faults.verify import verify_loss
from wanbench.profiles.tidb.plan import CLIENT, FaultPlan
from wanbench.sql import SqlTarget

#: seconds of traffic at the cap one rate check moves
TRANSFER_S = 3.0
#: the band of goodput around a cap (headers and connection set-up take their share)
RATE_LOW, RATE_HIGH = -0.12, 0.02
LOSS_QUERIES = 1500
LOSS_MIN_PACKETS = 1000


def client_flows(plan: FaultPlan) -> list[tuple[str, int, str | None]]:
    """(host, SQL port, the client address the rule names; None = any) of every rule that
    faults answers to the clients."""
    out = []
    for hp in plan.hosts:
        for m in hp.matches:
            if CLIENT in m.peers and m.src_port is not None:
                out.append((hp.host, m.src_port, m.dst))
    return out


def source_address(host: str, port: int) -> str:
    """The address this machine sends from towards ``host`` (a routing lookup: no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, port))
        return str(s.getsockname()[0])


def verify_on_wire(plan: FaultPlan, level: Level, mechs: Sequence[Any], target_of: Any, *,
                   load_hosts: bool = False) -> dict[str, Any]:
    """Measure ``plan``'s fault at ``level`` through its client flows; ``target_of(host, port)`` is the
    ``SqlTarget`` of an endpoint. Returns the evidence; raises ``FaultVerificationError``."""
    flows = client_flows(plan)
    if load_hosts:
        return {"measured": False, "why": "the load runs on load hosts over SSH: not measured from this machine; "
                                          "the rules were read back on every host"}
    if not flows:
        return {"measured": False, "why": "no rule of this plan faults a flow this machine takes part in "
                                          "(only answers to the clients are); the rules were read back on "
                                          "every host"}
    if level.kind not in (FaultKind.RATE, FaultKind.LOSS):
        return {"measured": False, "why": f"{level.kind.value} is not measured on the wire here: the rules were "
                                          "read back on every host"}
    nft = {m.ex.host: m for m in mechs if getattr(m, "name", "") == "nft"}
    if level.kind is FaultKind.LOSS and any(h not in nft for h, _, _ in flows):
        return {"measured": False, "why": "loss by tc netem has no packet counters: the rules were read back on "
                                          "every host"}
    checks = []
    for host, port in dict.fromkeys((h, p) for h, p, _ in flows):
        target = target_of(host, port)
        try:
            checks.append(measure_rate(target, level.value) if level.kind is FaultKind.RATE
                          else measure_loss(target, nft[host], level.value))
        except FaultVerificationError as exc:
            hint = elsewhere(plan, host, port)
            if not hint:
                raise
            said = str(exc).removeprefix(f"[{exc.host}] ")
            raise FaultVerificationError(exc.host, f"{said}{hint}") from None
    return {"measured": True, level.kind.value: checks}


def elsewhere(plan: FaultPlan, host: str, port: int) -> str:
    """A hint when the rules towards the clients name an address other than the one this machine sends
    from towards ``host`` (a wrong ``load_host``); '' when they agree."""
    here = source_address(host, port)
    named = sorted({dst for h, p, dst in client_flows(plan) if h == host and p == port and dst not in (None, here)})
    if not named:
        return ""
    return (f"; the rules towards the clients name the load host {', '.join(named)}, but this machine, where the "
            f"load runs, reaches {host}:{port} from {here}: unless a NAT between makes them the same, the "
            f"workload does not cross the fault (set load_host: {here} in the cluster file, or --load-host)")


def _bulk(conn: Any, nbytes: int, start: threading.Barrier, out: list[Any]) -> None:
    try:
        cur = conn.cursor()
        start.wait(timeout=60)
        cur.execute(f"SELECT REPEAT('x', {int(nbytes)})")
        rows: list[Any] = list(cur.fetchall())
        out.append((len(str(rows[0][0])), time.perf_counter()))
    except Exception as exc:  # noqa: BLE001 - reported by the caller
        out.append(exc)


def transfer(target: SqlTarget, nbytes: int, connections: int) -> tuple[int, float]:
    """(bytes, seconds) of ``connections`` bulk answers of ``nbytes`` in all, asked at the same moment
    once every connection is open (connection set-up is not timed)."""
    conns = [target.connect(with_db=False, who="verifying the rate cap") for _ in range(connections)]
    try:
        start = threading.Barrier(connections + 1)
        out: list[Any] = []
        threads = [threading.Thread(target=_bulk, args=(c, nbytes // connections, start, out)) for c in conns]
        for t in threads:
            t.start()
        start.wait(timeout=60)
        t0 = time.perf_counter()
        for t in threads:
            t.join(timeout=120)
    finally:
        for c in conns:
            c.close()
    errors = [str(r) for r in out if isinstance(r, Exception)]
    if errors or len(out) != connections:
        raise FaultVerificationError(target.host, f"rate transfer from {target.address} failed: {errors[:2]}")
    return sum(n for n, _ in out), max(t for _, t in out) - t0


def measure_rate(target: SqlTarget, mbit: float, *, connections: int = 4, seconds: float = TRANSFER_S,
                 attempts: int = 3) -> dict[str, Any]:
    """Aggregate goodput of bulk answers from ``target`` against a cap of ``mbit``."""
    nbytes = max(connections * 20_000, int(mbit * 1e6 / 8 * seconds))
    high = RATE_HIGH + BURST_S / seconds
    tries: list[float] = []
    for _ in range(attempts):
        got, took = transfer(target, nbytes, connections)
        measured = got * 8 / took / 1e6
        tries.append(round(measured, 3))
        dev = measured / mbit - 1
        if RATE_LOW <= dev <= high:
            return {"endpoint": target.address, "asked_mbit": mbit, "measured_mbit": round(measured, 3),
                    "deviation_pct": round(dev * 100, 2), "allowed_pct": [RATE_LOW * 100, round(high * 100, 2)],
                    "bytes": got, "seconds": round(took, 3), "connections": connections, "attempts": tries}
        if dev > high:
            break  # faster than the cap: retrying cannot change that
    raise FaultVerificationError(
        target.host, f"asked for a {mbit:g} Mbit/s cap on the answers of {target.address} but {connections} "
                     f"connections received {', '.join(map(str, tries))} Mbit/s (allowed {RATE_LOW * 100:+.0f}%/"
                     f"{high * 100:+.1f}%)")


def measure_loss(target: SqlTarget, nft: Any, pct: float, *, queries: int = LOSS_QUERIES) -> dict[str, Any]:
    """``queries`` round trips through ``target``, then ``nft``'s counters (``NftMechanism``) against ``pct``."""
    before = nft.counters()
    conn = target.connect(with_db=False, who="verifying packet loss")
    try:
        cur = conn.cursor()
        for _ in range(queries):
            cur.execute("SELECT 1")
            cur.fetchall()
    finally:
        conn.close()
    after = nft.counters()
    matched, dropped = after[0] - before[0], after[1] - before[1]
    ev = verify_loss(target.host, pct, matched, dropped, mechanism="nft", min_packets=LOSS_MIN_PACKETS)
    return {"endpoint": target.address, "queries": queries, **ev.measured}
