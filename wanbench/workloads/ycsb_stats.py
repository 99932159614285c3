"""YCSB's numbers: every sysbench thread's ``YCSB_STATS`` line and the files
it left, merged per operation, and go-ycsb's summary lines made from them."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.families import Family, Integrity, Metric, Section, engine_summaries
from wanbench.gate.integrity import YCSB_CORRECTNESS
from wanbench.report.tables import text_table
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


# -- the YCSB family (tests/ycsb; ``workload: ycsb:workloada`` in a fault scenario) --------------------------------

#: tests/ycsb measure the database, not the proxy tier
TESTS_PATH = "direct"


def _is_ycsb(cell: Mapping[str, Any]) -> bool:
    return str(cell.get("workload", "")).startswith("ycsb_")


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def ycsb_samples(cell: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per operation and round: OPS and p99."""
    out: dict[str, list[float]] = {}
    for per_op in (cell.get("workload_extra") or {}).get("per_op_rounds") or ():
        for op, v in per_op.items():
            out.setdefault(f"ops.{op}", []).extend(_finite([v.get("ops")]))
            out.setdefault(f"latency_ms.p99.{op}", []).extend(_finite([v.get("p99_ms")]))
    return {k: v for k, v in out.items() if v}


def ycsb_headline(cell: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for op, v in ((cell.get("workload_extra") or {}).get("per_op") or {}).items():
        if not op.endswith("_ERROR"):
            out[f"ops.{op}"] = float(v["ops"])
            out[f"latency_ms.p99.{op}"] = float(v["p99_us"]) / 1000.0
    return out


def ycsb_rows(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """End-of-run table rows: one per operation of every YCSB cell (seed 004's table)."""
    rows = []
    for c in cells:
        if not _is_ycsb(c):
            continue
        extra = c.get("workload_extra") or {}
        for op, v in (extra.get("per_op") or {}).items():
            rows.append({"test_id": c["test_id"], "workload": extra.get("ycsb_workload"), "op": op,
                         "threads": c["concurrency"], "ops": v.get("ops"), "p99_us": v.get("p99_us"),
                         "count": v.get("count")})
    return rows


def ycsb_tables(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    rows = ycsb_rows(cells)
    return {"ycsb": rows} if rows else None


def ycsb_summary(cells: Sequence[Mapping[str, Any]]) -> list[Section]:
    """go-ycsb's summary block per YCSB cell, and seed 004's OPS/P99 table."""
    mine = [c for c in cells if _is_ycsb(c)]
    if not mine:
        return []
    rows = [[r["test_id"], r["op"], f"{r['ops']:.1f}", f"{r['p99_us']:.0f}"] for r in ycsb_rows(mine)]
    return [engine_summaries(mine, title="wanbench ycsb: go-ycsb summary per cell", checks="correctness",
                             path=TESTS_PATH),
            Section("wanbench ycsb: workload, OP type, OPS, P99(us) (seed 004 layout)",
                    tuple(text_table(["test", "OP type", "OPS", "P99(us)"], rows, right=(2, 3))), sep="-")]


FAMILY = Family(
    "ycsb",
    "the YCSB core workloads A-F (tests/ycsb)",
    fixtures="wanbench.fixtures.ycsb",
    engine="wanbench.workloads.ycsb:YcsbEngine",
    workloads=("ycsb_*",),
    metrics=(*(Metric(f"ops.{op}", True, f"{op} OPS", "ops") for op in OPS),
             *(Metric(f"latency_ms.p99.{op}", False, f"{op} p99 latency", "ms") for op in OPS)),
    samples=ycsb_samples,
    headline=ycsb_headline,
    integrity=Integrity(YCSB_CORRECTNESS, "YCSB correctness violated after the run ({n} check(s))"),
    fingerprint=("duration", "ycsb_records", "ycsb_fields", "ycsb_field_length", "ycsb_operations"),
    tables=ycsb_tables,
    summary=ycsb_summary,
    package_data=("lua/ycsb.lua",),
)
