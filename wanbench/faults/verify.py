"""Measure that a fault is really there (and gone after clearing it).

A fault that cannot be confirmed raises ``FaultVerificationError``: the test
becomes *broken*, never passed. Each ``verify_*`` returns ``Evidence`` with the
measured numbers, for the result JSON and the report.

Transfers run as small Python programs on the hosts themselves (``python3 -c``
through the host's executor, argv only), so the traffic crosses exactly the
interface the fault is on.
"""

from __future__ import annotations

import json
import math
import socket
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from wanbench.errors import CommandError, FaultVerificationError
from wanbench.executors.base import Executor
from wanbench.faults.base import Evidence

#: receives ``conns`` connections and reads each to EOF; when all are done it answers every
#: connection with the aggregate receive timeline (so the rate is measured where bytes arrive)
SINK = r"""
import json, socket, sys, threading, time
host, port, conns, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((host, port)); srv.listen(conns); srv.settimeout(limit)
lock = threading.Lock(); marks = []; total = [0]
done = threading.Barrier(conns, timeout=limit)
def serve(c):
    c.settimeout(limit)
    try:
        while True:
            data = c.recv(1 << 16)
            if not data:
                break
            with lock:
                total[0] += len(data); marks.append((time.monotonic(), total[0]))
        done.wait()
        c.sendall(json.dumps(marks[:: max(1, len(marks) // 2000)] + marks[-1:]).encode())
    finally:
        c.close()
threads = []
for _ in range(conns):
    c, _a = srv.accept()
    t = threading.Thread(target=serve, args=(c,)); t.start(); threads.append(t)
for t in threads:
    t.join(limit)
"""

#: opens ``conns`` connections in parallel, sends ``nbytes`` in total, collects the sink's timeline
SEND = r"""
import json, socket, sys, threading, time
host, port, conns, nbytes, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
def connect():
    end = time.monotonic() + 5
    while True:
        try:
            return socket.create_connection((host, port), timeout=limit)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)
socks = [connect() for _ in range(conns)]
chunk = b"x" * (1 << 16)
errors = []; answers = []
def push(s, n):
    try:
        while n > 0:
            n -= s.send(chunk[: min(n, len(chunk))])
        s.shutdown(socket.SHUT_WR)
        buf = b""
        while True:
            part = s.recv(1 << 16)
            if not part:
                break
            buf += part
        answers.append(buf)
    except OSError as e:
        errors.append(repr(e))
    finally:
        s.close()
start = time.monotonic()
threads = [threading.Thread(target=push, args=(s, nbytes // conns)) for s in socks]
for t in threads: t.start()
for t in threads: t.join(limit)
took = time.monotonic() - start
marks = json.loads(answers[0]) if answers else []
print(json.dumps({"bytes": nbytes // conns * conns, "seconds": took, "errors": errors, "marks": marks}))
"""


@dataclass(frozen=True)
class RateSample:
    """``mbit`` is the steady aggregate rate where the bytes arrive, over the last 75 % of the
    transfer (slow start and the shaper's initial burst excluded); ``whole_mbit`` includes them."""

    mbit: float
    whole_mbit: float
    bytes: int
    seconds: float
    connections: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def steady_rate_mbit(marks: Sequence[Sequence[float]], *, skip: float = 0.25) -> float:
    """Rate between the moment ``skip`` of the bytes had arrived and the last byte."""
    total = marks[-1][1]
    t0, b0 = next((t, b) for t, b in marks if b >= skip * total)
    t1, b1 = marks[-1]
    if t1 <= t0:
        raise ValueError("transfer too short to measure a rate")
    return (b1 - b0) * 8 / (t1 - t0) / 1e6


@dataclass(frozen=True)
class RttSample:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def measure_rate(
    sender: Executor,
    receiver: Executor,
    address: str,
    port: int,
    *,
    nbytes: int,
    connections: int = 4,
    timeout: float = 60.0,
) -> RateSample:
    """Goodput of ``nbytes`` sent from ``sender``'s host to a sink on ``receiver``'s host at address:port,
    over ``connections`` parallel TCP connections (aggregate, like a link cap)."""
    if connections < 1 or nbytes < connections:
        raise ValueError("need at least one connection and one byte per connection")
    started = receiver.run(
        ["sh", "-c", 'setsid python3 -c "$1" "$2" "$3" "$4" "$5" </dev/null >/dev/null 2>&1 & echo $!',
         "sh", SINK, address, str(port), str(connections), str(timeout)], timeout=15)
    sink_pid = started.stdout.strip()
    try:
        res = sender.run(["python3", "-c", SEND, address, str(port), str(connections), str(nbytes), str(timeout)],
                         timeout=timeout + 15)
    finally:
        receiver.run(["sh", "-c", 'kill "$1" 2>/dev/null; true', "sh", sink_pid], timeout=15)
    data = json.loads(res.stdout)
    if data["errors"] or not data["marks"]:
        raise CommandError(sender.host, "rate transfer", 1, "; ".join(data["errors"][:3]) or "no answer from sink")
    whole = data["bytes"] * 8 / data["seconds"] / 1e6
    return RateSample(steady_rate_mbit(data["marks"]), whole, data["bytes"], data["seconds"], connections)


def measure_connect_rtt(address: str, port: int, *, samples: int = 20, timeout: float = 5.0) -> RttSample:
    """Round trip of TCP connects from this process (SYN -> SYN/ACK) to address:port."""
    times: list[float] = []
    for _ in range(samples):
        start = time.perf_counter()
        with socket.create_connection((address, port), timeout=timeout):
            times.append((time.perf_counter() - start) * 1000)
    return _rtt(times)


def measure_echo_rtt(address: str, port: int, *, samples: int = 20, timeout: float = 5.0) -> RttSample:
    """Round trip of 1-byte request/answer exchanges on one connection to an echo service
    (through a userspace proxy a TCP connect is answered by the proxy itself)."""
    times: list[float] = []
    with socket.create_connection((address, port), timeout=timeout) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(samples):
            start = time.perf_counter()
            s.sendall(b"p")
            if not s.recv(1):
                raise ConnectionError(f"{address}:{port} closed the echo connection")
            times.append((time.perf_counter() - start) * 1000)
    return _rtt(times)


def _rtt(times: Sequence[float]) -> RttSample:
    q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return RttSample(statistics.median(times), q[0], q[-1], len(times))


# -- judgements --
def rtt_tolerance_ms(asked_ms: float, *, abs_ms: float = 2.0, rel: float = 0.05) -> float:
    """+-2 ms or +-5 %, whichever is larger."""
    return max(abs_ms, rel * asked_ms)


def verify_rtt(host: str, asked_ms: float, baseline: RttSample, faulted: RttSample, *,
               mechanism: str) -> Evidence:
    added = faulted.median_ms - baseline.median_ms
    tol = rtt_tolerance_ms(asked_ms)
    measured = {"asked_rtt_ms": asked_ms, "added_rtt_ms": round(added, 3), "tolerance_ms": tol,
                "baseline": baseline.to_json(), "faulted": faulted.to_json()}
    if abs(added - asked_ms) > tol:
        raise FaultVerificationError(host, f"asked for +{asked_ms:g}ms RTT but measured +{added:.1f}ms "
                                           f"(tolerance {tol:.1f}ms; baseline median {baseline.median_ms:.2f}ms)")
    return Evidence(mechanism, measured=measured, verified=True)


def verify_rate(host: str, asked_mbit: float, sample: RateSample, *, mechanism: str,
                low: float = -0.08, high: float = 0.02) -> Evidence:
    """Aggregate goodput within -8 % / +2 % of the cap (goodput sits a few % under the
    wire rate because of headers, so the band is asymmetric)."""
    rel = sample.mbit / asked_mbit - 1
    measured = {"asked_mbit": asked_mbit, "measured_mbit": round(sample.mbit, 3), "deviation_pct": round(rel * 100, 2),
                **{f"transfer_{k}": v for k, v in sample.to_json().items()}}
    if not low <= rel <= high:
        raise FaultVerificationError(host, f"asked for a {asked_mbit:g} Mbit/s cap but {sample.connections} "
                                           f"connections moved {sample.mbit:.2f} Mbit/s ({rel * 100:+.1f}%, allowed "
                                           f"{low * 100:+.0f}%/{high * 100:+.0f}%)")
    return Evidence(mechanism, measured=measured, verified=True)


def verify_rate_by_transfer(sender: Executor, receiver: Executor, address: str, port: int, asked_mbit: float, *,
                            mechanism: str, seconds: float = 2.0, connections: int = 4,
                            attempts: int = 3) -> Evidence:
    """Transfer ~``seconds`` worth of the cap and check the rate; retry up to ``attempts`` times.

    On a busy machine a transfer can only come out *slower* than the link (a
    retransmission timeout, a starved receiver), never faster, so a missing or
    too-loose cap fails every attempt while noise fails only some.
    """
    nbytes = max(connections * 65536, int(asked_mbit * 1e6 / 8 * seconds))
    tries: list[dict[str, Any]] = []
    last: FaultVerificationError | None = None
    for _ in range(attempts):
        sample = measure_rate(sender, receiver, address, port, nbytes=nbytes, connections=connections)
        tries.append({"mbit": round(sample.mbit, 3), "whole_mbit": round(sample.whole_mbit, 3)})
        try:
            ev = verify_rate(sender.host, asked_mbit, sample, mechanism=mechanism)
        except FaultVerificationError as exc:
            last = exc
            if sample.mbit > asked_mbit:
                break  # faster than the cap: retrying cannot change that
            continue
        return Evidence(mechanism, measured={**ev.measured, "attempts": tries}, verified=True)
    assert last is not None
    raise FaultVerificationError(sender.host, f"{last} (attempts: {', '.join(str(t['mbit']) for t in tries)})")


def binomial_bounds(n: int, pct: float, *, z: float = 4.0) -> tuple[float, float]:
    """Range of dropped packets out of ``n`` that is consistent with ``pct`` % loss (z sigmas)."""
    p = pct / 100
    mean = n * p
    half = z * math.sqrt(n * p * (1 - p)) + 1
    return max(0.0, mean - half), mean + half


def verify_loss(host: str, asked_pct: float, matched: int, dropped: int, *, mechanism: str,
                min_packets: int = 0) -> Evidence:
    lo, hi = binomial_bounds(matched, asked_pct)
    measured = {"asked_pct": asked_pct, "packets": matched, "dropped": dropped,
                "measured_pct": round(100 * dropped / matched, 4) if matched else None,
                "binomial_range": [round(lo, 1), round(hi, 1)]}
    if matched < min_packets:
        raise FaultVerificationError(host, f"only {matched} packets crossed the loss rule (need {min_packets}) "
                                           "so the loss rate cannot be confirmed")
    if not lo <= dropped <= hi:
        raise FaultVerificationError(host, f"asked for {asked_pct:g}% loss but {dropped} of {matched} packets "
                                           f"were dropped ({100 * dropped / matched:.3f}%; expected "
                                           f"{lo:.0f}..{hi:.0f})")
    return Evidence(mechanism, measured=measured, verified=True)


#: sends ``count`` 1-byte UDP datagrams (fire and forget) and prints how many the kernel accepted
UDP_SEND = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ok = 0
for _ in range(int(sys.argv[3])):
    try:
        s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
        ok += 1
    except OSError:
        pass  # a drop in the output hook surfaces as EPERM
print(ok)
"""


def send_udp(sender: Executor, address: str, port: int, count: int, *, timeout: float = 60.0) -> int:
    """Send ``count`` UDP packets from ``sender``'s host; returns how many left the host."""
    res = sender.run(["python3", "-c", UDP_SEND, address, str(port), str(count)], timeout=timeout)
    return int(res.stdout.strip())
