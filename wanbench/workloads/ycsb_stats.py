"""YCSB's numbers: every sysbench thread's ``YCSB_STATS`` line and the files
it left, merged per operation, and go-ycsb's summary lines made from them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.results import YCSB_OPS
from wanbench.workloads.tpcc_model import Bucketed, Outcomes, merge_outcomes

OPS = YCSB_OPS
STATS_PREFIX = "YCSB_STATS "


@dataclass
class OpStats(Outcomes):
    not_found: int = 0


@dataclass
class RunStats:
    """Every thread's YCSB_STATS line, merged, and the files they left."""

    seconds: float
    threads: int
    ops: dict[str, OpStats]
    acked_inserts: list[int] = field(default_factory=list)
    unsure_inserts: list[int] = field(default_factory=list)
    key_counts: dict[int, int] = field(default_factory=dict)


def parse_output(text: str, files: Mapping[str, str] | None = None) -> RunStats:
    ops = {op: OpStats() for op in OPS}
    seconds, threads = 0.0, 0
    for line in text.splitlines():
        if not line.startswith(STATS_PREFIX):
            continue
        try:
            data = json.loads(line[len(STATS_PREFIX):])
        except ValueError as exc:
            raise InfrastructureError(f"ycsb: unreadable stats line from sysbench ({exc}): {line[:200]}") from None
        threads += 1
        seconds = max(seconds, float(data.get("seconds", 0.0)))
        for name, d in (data.get("ops") or {}).items():
            st = ops.setdefault(name, OpStats())
            st.ok.merge(d.get("ok") or {})
            st.err.merge(d.get("err") or {})
            st.not_found += int(d.get("not_found", 0))
            for code, n in (d.get("codes") or {}).items():
                st.codes[str(code)] = st.codes.get(str(code), 0) + int(n)
    if not threads:
        raise InfrastructureError("ycsb: sysbench printed no YCSB_STATS line (did every thread die?)")
    stats = RunStats(seconds=seconds, threads=threads, ops=ops)
    for name, body in (files or {}).items():
        if not name.endswith(".txt"):
            continue  # acks.bin: the threads' shared insert counters
        nums = [int(x) for x in body.split()]
        if name.startswith("inserts-"):
            stats.acked_inserts += nums
        elif name.startswith("unsure-"):
            stats.unsure_inserts += nums
        elif name.startswith("keys-"):
            for k, n in zip(nums[::2], nums[1::2], strict=True):
                stats.key_counts[k] = stats.key_counts.get(k, 0) + n
    return stats


# ---------------------------------------------------------------- summary


@dataclass(frozen=True)
class OpRow:
    """One go-ycsb summary line (``READ`` or ``READ_ERROR``)."""

    name: str
    takes_s: float
    count: int
    avg_us: float
    min_us: float
    max_us: float
    pct_us: Mapping[str, float]  # "50", "90", "95", "99", "99.9", "99.99"

    @property
    def ops(self) -> float:
        return self.count / self.takes_s if self.takes_s > 0 else math.nan

    def render(self) -> str:
        """go-ycsb's plain output: ``%-6s - Takes(s): ..., 99.99th(us): ...``."""
        pct = ", ".join(f"{p}th(us): {self.pct_us[p]:.0f}" for p in PCTS)
        return (f"{self.name:<6} - Takes(s): {self.takes_s:.1f}, Count: {self.count}, OPS: {self.ops:.1f}, "
                f"Avg(us): {self.avg_us:.0f}, Min(us): {self.min_us:.0f}, Max(us): {self.max_us:.0f}, {pct}")

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "ops": self.ops, "takes_s": self.takes_s, "avg_us": self.avg_us,
                "min_us": self.min_us, "max_us": self.max_us, **{f"p{p}_us": v for p, v in self.pct_us.items()}}


PCTS = ("50", "90", "95", "99", "99.9", "99.99")


def op_row(name: str, b: Bucketed, seconds: float) -> OpRow:
    return OpRow(name, seconds, b.count, b.sum_us / b.count, b.min_us if b.min_us != math.inf else math.nan,
                 b.max_us, {p: b.percentile_ms(float(p)) * 1000.0 for p in PCTS})


def summary_rows(stats: RunStats) -> list[OpRow]:
    """go-ycsb prints its operations sorted by name, errors as ``OP_ERROR``."""
    rows = []
    for name in sorted(stats.ops):
        st = stats.ops[name]
        if st.ok.count:
            rows.append(op_row(name, st.ok, stats.seconds))
        if st.err.count:
            rows.append(op_row(f"{name}_ERROR", st.err, stats.seconds))
    return sorted(rows, key=lambda r: r.name)


def merge_stats(parts: Sequence[RunStats]) -> RunStats:
    ops = merge_outcomes(OPS, (p.ops for p in parts), OpStats)
    keys: dict[int, int] = {}
    for p in parts:
        for k, n in p.key_counts.items():
            keys[k] = keys.get(k, 0) + n
    return RunStats(seconds=sum(p.seconds for p in parts), threads=max(p.threads for p in parts), ops=ops,
                    acked_inserts=[k for p in parts for k in p.acked_inserts],
                    unsure_inserts=[k for p in parts for k in p.unsure_inserts], key_counts=keys)


def all_ops(stats: RunStats) -> Bucketed:
    """Every operation's own latency (RMW's parts are in READ and UPDATE)."""
    total = Bucketed()
    for name, st in stats.ops.items():
        if name == "READ_MODIFY_WRITE":
            continue
        b = st.ok
        total.merge({"count": b.count, "sum_us": b.sum_us, "max_us": b.max_us,
                     "min_us": b.min_us if b.min_us != math.inf else -1,
                     "hist": {str(k): v for k, v in b.hist.items()}})
    return total


def per_op_metrics(stats: RunStats) -> dict[str, dict[str, float]]:
    """``{op: {"ops": per second, "p99_ms": ...}}`` for the gate."""
    out = {}
    for name, st in stats.ops.items():
        if st.ok.count:
            out[name] = {"ops": st.ok.count / stats.seconds if stats.seconds else math.nan,
                         "p99_ms": st.ok.percentile_ms(99)}
    return out
