"""TPC-H as an engine and a family: the 22 queries of stream 0 per round,
every answer checked by DuckDB over the same generated files.

The engine (``TpchEngine``, ``workload: tpch`` in a catalog scenario, or
``tpch:sf0.01``) generates the data once per scale factor (tpchgen-cli,
cached), loads it once per database (``wanbench_tpch``; another scale
factor replaces it), and runs ``--rounds`` rounds of one query stream: the
power test's stream 0 with the validation parameters, or parameters drawn
from ``--tpch-seed``. A failed query fails alone (``wanbench.workloads.tpch``);
a wrong answer is a failed check, which the family's integrity rule turns
into a broken cell. Each round is one measured window of the server-side
evidence, so the census counts bytes and work per query (an operation of a
TPC-H cell is one query).

TPC-H runs one query stream: a fault scenario's cells at a concurrency other
than 1 are skipped, saying so (``concurrencies``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError
from wanbench.families import Family, Integrity, Metric, Section
from wanbench.gate.integrity import TPCH_ANSWERS
from wanbench.interleave import Interleaved, interleave_rounds
from wanbench.report.tables import text_table
from wanbench.results import WorkloadResult
from wanbench.sql import SqlTarget
from wanbench.workloads import tpch_load
from wanbench.workloads.tpch import QueryRun, RoundHooks, RoundResult, run_round, to_workload_result
from wanbench.workloads.tpch_answers import Reference
from wanbench.workloads.tpch_data import Dataset, generate, parse_scale_factor, sf_label
from wanbench.workloads.tpch_queries import STREAM0_ORDER, stream_params

#: tests/tpch measure the database, not the proxy tier
TESTS_PATH = "direct"


def parse_seed(text: str) -> int | None:
    """``--tpch-seed``: a whole number, or ``none`` for the specification's validation parameters."""
    if str(text).strip().lower() in ("", "none", "validation"):
        return None
    try:
        seed = int(text)
    except ValueError:
        raise ConfigError(f"{text!r} is not a seed (a whole number, or none: the validation parameters)") from None
    if seed < 0:
        raise ConfigError(f"{text!r}: a seed is a whole number >= 0")
    return seed


def scale_factor_of(variant: str, default: float) -> float:
    """``sf0.01`` (or ``0.01``) -> 0.01; no variant: ``default``."""
    return parse_scale_factor(variant.removeprefix("sf")) if variant else default


class TpchEngine:
    """TPC-H for the fixtures: ``runner(variant, path)`` for tests/tpch and
    for a fault scenario's cells. One cache of what is generated, loaded and
    answered by DuckDB, since both use the same database."""

    #: one query stream per cell (clause 5.3.3's power test): other concurrencies do not apply
    concurrencies = (1,)

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._loaded: dict[str, float] = {}  # database address -> the scale factor it holds
        self._datasets: dict[float, Dataset] = {}
        self._references: dict[float, Reference] = {}

    def _dataset(self, sf: float) -> Dataset:
        if sf not in self._datasets:
            cache = self.ctx.option("tpch_cache")
            self._datasets[sf] = generate(sf, Path(cache) if cache else None)
        return self._datasets[sf]

    def target(self, sf: float, path: str) -> SqlTarget:
        """A connection to ``wanbench_tpch`` holding scale factor ``sf``;
        generates and loads only what is not there yet."""
        target = dataclasses.replace(self.ctx.cluster.sql_targets(path)[0], database=tpch_load.DATABASE)
        if self._loaded.get(target.address) != sf:
            ds = self._dataset(sf)
            self.ctx.progress(f"tpch: {ds.label} {'found in' if ds.reused else 'generated into'} {ds.path}")
            res = tpch_load.ensure_loaded(target, ds, progress=self.ctx.progress)
            self.ctx.progress(res.summary())
            self._loaded[target.address] = sf
        return target

    def reference(self, sf: float) -> Reference:
        """DuckDB over the same files: the answers every query is checked against."""
        if sf not in self._references:
            self._references[sf] = Reference(self._dataset(sf))
        return self._references[sf]

    def runner(self, variant: str, path: str, *, hooks: RoundHooks | None = None) -> Callable[[int], WorkloadResult]:
        """``run(concurrency)`` of scale factor ``variant`` (``sf0.01``; plain
        ``tpch``: the first ``--tpch-sf``) on ``path``; generates, loads and
        builds the reference now (before a fault is applied). ``hooks`` hear
        of every query (a test that faults one query's result)."""
        ctx = self.ctx
        sf = scale_factor_of(variant, float(list(ctx.option("tpch_sf"))[0]))
        self.target(sf, path)
        self.reference(sf)

        def run(concurrency: int) -> WorkloadResult:
            if concurrency != 1:
                raise ConfigError(f"tpch runs one query stream: concurrency {concurrency} does not apply")
            return self.run(sf, path, hooks=hooks)

        return run

    def run(self, sf: float, path: str, *, hooks: RoundHooks | None = None) -> WorkloadResult:
        """``--rounds`` rounds of stream 0, interleaved with level-0 rounds when the cell's fault switch says so."""
        ctx = self.ctx
        target = self.target(sf, path)  # another scale factor may have been loaded since
        reference = self.reference(sf)
        seed = ctx.option("tpch_seed")
        timeout = float(ctx.option("tpch_query_timeout"))
        rounds = int(ctx.option("rounds"))
        params = stream_params(sf, seed)
        for n in STREAM0_ORDER:  # DuckDB's answers, before any window opens
            reference.answer(n, params[n])
        window = ctx.window()

        def one(faulted: bool, i: int, total: int) -> RoundResult:
            w = window if faulted else None
            if w is not None:
                w.prepare()
                w.begin()
            try:
                r = run_round(target, sf, params=params, reference=reference, query_timeout=timeout,
                              hooks=hooks if w is None else _EndsWindow(hooks or RoundHooks(), w.end))
            finally:
                if w is not None:
                    w.end()  # (a no-op when the round ended it)
            r = dataclasses.replace(r, seed=seed)
            ctx.progress(f"  tpch SF {sf_label(sf)} round {i}/{total}{'' if faulted else ' (level 0)'}: "
                         + round_line(r))
            for q in r.failed:
                ctx.progress(f"    {q.describe()}")
            return r

        switch = ctx.interleave()
        if switch is None:
            return _result([one(True, i, rounds) for i in range(1, rounds + 1)], timeout)
        ran = interleave_rounds(rounds, switch, one, lambda rs: _result(rs, timeout))
        return Interleaved(_result(ran.faulted, timeout), _result(ran.reference, timeout), ran.plan,
                           ran.early_stop).result()

    def close(self) -> None:
        for ref in self._references.values():
            ref.close()
        self._references.clear()


class _EndsWindow(RoundHooks):
    """The cell's hooks, and the measured window ended when the round's last answer is in, before
    its one connection closes: the socket counters of the links die with the connection, and a
    round of a second or less could end between two of the window's polls and count no bytes."""

    def __init__(self, hooks: RoundHooks, end: Callable[[], None]) -> None:
        self.hooks, self.end = hooks, end

    def before_query(self, number: int, connection_id: int | None) -> None:
        self.hooks.before_query(number, connection_id)

    def after_query(self, run: QueryRun) -> None:
        self.hooks.after_query(run)

    def round_done(self) -> None:
        self.hooks.round_done()
        self.end()


def round_line(r: RoundResult) -> str:
    ok = len(r.queries) - len(r.failed)
    text = (f"{ok}/{len(r.queries)} queries ok, {len(r.wrong)} wrong, {r.query_seconds:.3f} s in queries, "
            f"{r.queries_per_hour:.0f} queries/h")
    if r.complete:
        text += f", power (queries only) {r.power_queries_only:.1f}"
    return text


def _result(rounds: Sequence[RoundResult], timeout: float) -> WorkloadResult:
    result = to_workload_result(rounds)
    seeds = {r.seed for r in rounds}
    return dataclasses.replace(result, extra={
        **result.extra, "seed": next(iter(seeds)) if len(seeds) == 1 else None, "stream": 0,
        "queries_per_round": len(STREAM0_ORDER), "query_timeout_s": timeout})


# -- the TPC-H family (tests/tpch; ``workload: tpch`` in a fault scenario) -----------------------------------------

QUERIES = tuple(f"Q{n}" for n in range(1, 23))


def _finite(values: Sequence[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


def tpch_samples(cell: Mapping[str, Any]) -> dict[str, list[float]]:
    """Per round: power (queries only), queries per hour, and each query's time."""
    extra = cell.get("workload_extra") or {}
    out = {"power": _finite(extra.get("power_queries_only") or ()),
           "queries_per_hour": _finite(extra.get("queries_per_hour") or ())}
    for label, q in (extra.get("per_query") or {}).items():
        out[f"query_s.{label}"] = _finite(q.get("seconds") or ())
    return {k: v for k, v in out.items() if v}


def _median(values: Sequence[Any]) -> float | None:
    finite = _finite(values)
    return statistics.median(finite) if finite else None


def cap_mbit(cell: Mapping[str, Any]) -> float | None:
    """The rate cap the cell ran under (Mbit/s), None without one."""
    level = cell.get("level") or {}
    value = level.get("value")
    return float(value) if level.get("kind") == "rate" and value else None


def predicted_s(result_bytes: float | None, mbit: float | None) -> float | None:
    """How long ``result_bytes`` take through a cap of ``mbit`` Mbit/s alone: bytes / cap."""
    if result_bytes is None or not mbit:
        return None
    return result_bytes * 8.0 / (mbit * 1e6)


def query_rows(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per query of every TPC-H cell: rows, result bytes (TCP_INFO on
    the client's socket), the median measured time, and under a rate cap the
    time the bytes alone take through it."""
    rows = []
    for c in cells:
        if c.get("workload") != "tpch":
            continue
        mbit = cap_mbit(c)
        per = (c.get("workload_extra") or {}).get("per_query") or {}
        for label in QUERIES:
            q = per.get(label)
            if q is None:
                continue
            got = _median(q.get("bytes_received") or ())
            rows.append({"test_id": c["test_id"], "query": label, "rows": _median(q.get("rows") or ()),
                         "result_bytes": got, "seconds": _median(q.get("seconds") or ()),
                         "cap_mbit": mbit, "predicted_s": predicted_s(got, mbit), "errors": q.get("errors", 0)})
    return rows


def cell_rows(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per TPC-H cell: its headline numbers and its answers."""
    rows = []
    for c in cells:
        if c.get("workload") != "tpch":
            continue
        extra = c.get("workload_extra") or {}
        checks = extra.get("checks") or []
        census = (c.get("census") or {}).get("metrics") or {}
        rows.append({
            "test_id": c["test_id"], "scenario": c.get("scenario"), "level": (c.get("level") or {}).get("label"),
            "scale_factor": extra.get("scale_factor"), "seed": extra.get("seed"), "rounds": len(c.get("rounds") or ()),
            "power": _median(extra.get("power_queries_only") or ()),
            "queries_per_hour": _median(extra.get("queries_per_hour") or ()),
            "geomean_ms": (g * 1000.0 if (g := _median(extra.get("geomean_s") or ())) is not None else None),
            "answers_checked": len(checks), "answers_wrong": sorted({k["name"] for k in checks if not k.get("passed")}),
            "queries_failed": sorted({q["query"] for r in extra.get("failed") or () for q in r},
                                     key=lambda n: int(n)),
            "result_bytes_per_round": _median(extra.get("bytes_received") or ()),
            # the census (wanbench.census): bytes per query by server (exact counters) and by link (sockets)
            "bytes_per_query": {k.split(".", 1)[1]: m.get("value") for k, m in census.items()
                                if k.startswith("bytes_per_op.")},
            "link_bytes_per_query": dict((c.get("census") or {}).get("link_bytes_per_op") or {}),
        })
    return rows


def tpch_tables(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    rows = cell_rows(cells)
    return {"tpch": rows, "tpch_queries": query_rows(cells)} if rows else None


def _f(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _census_bytes(row: Mapping[str, Any]) -> str:
    servers = ", ".join(f"{k} {v:.0f}" for k, v in sorted(row["bytes_per_query"].items()) if v is not None)
    links = ", ".join(f"{k} {v:.0f}" for k, v in sorted(row["link_bytes_per_query"].items()) if v)
    return "; ".join(p for p in (servers, links) if p) or "-"


def tpch_summary(cells: Sequence[Mapping[str, Any]]) -> list[Section]:
    """The cells' power, queries per hour and answers; per cell each query's
    rows, result bytes and time, and under a rate cap the time its bytes
    alone take through it (result bytes / cap) beside the measured one."""
    rows = cell_rows(cells)
    if not rows:
        return []
    head = ["cell", "SF", "params", "rounds", "power (queries only)", "queries/h", "geomean ms", "answers",
            "failed", "census bytes/query: servers (exact); links (sockets)"]
    table = [[r["test_id"], _f(r["scale_factor"], "g"), "validation" if r["seed"] is None else f"seed {r['seed']}",
              str(r["rounds"]), _f(r["power"], ".1f"), _f(r["queries_per_hour"], ".0f"), _f(r["geomean_ms"], ".2f"),
              f"{r['answers_checked'] - len(r['answers_wrong'])}/{r['answers_checked']} right"
              + (f" (wrong: {', '.join(r['answers_wrong'])})" if r["answers_wrong"] else ""),
              ", ".join(f"Q{n}" for n in r["queries_failed"]) or "-", _census_bytes(r)] for r in rows]
    out = [Section("wanbench tpch: power (queries only), queries per hour, answers checked by DuckDB",
                   tuple(text_table(head, table, right=range(3, 7))))]
    by_cell: dict[str, list[dict[str, Any]]] = {}
    for q in query_rows(cells):
        by_cell.setdefault(q["test_id"], []).append(q)
    for test_id, qs in by_cell.items():
        mbit = qs[0]["cap_mbit"]
        head = ["query", "rows", "result bytes", "measured s"] + (
            [f"bytes / {mbit:g} Mbit/s s", "measured / predicted"] if mbit else [])
        lines = []
        for q in qs:
            line = [q["query"], _f(q["rows"], ".0f"), _f(q["result_bytes"], ".0f"), _f(q["seconds"], ".4f")]
            if mbit:
                pred = q["predicted_s"]
                ratio = q["seconds"] / pred if pred and q["seconds"] is not None else None
                line += [_f(pred, ".4f"), _f(ratio, ".1f") + ("x" if ratio is not None else "")]
            if q["errors"]:
                line[3] += f" ({q['errors']} failed)"
            lines.append(line)
        title = f"wanbench tpch {test_id}: per query (median of rounds)" + (
            f", predicted at the {mbit:g} Mbit/s cap = result bytes / cap" if mbit else "")
        out.append(Section(title, tuple(text_table(head, lines, right=range(1, len(head)))), sep="-"))
    return out


FAMILY = Family(
    "tpch",
    "TPC-H: the 22 queries of stream 0 per round, every answer checked by DuckDB (tests/tpch)",
    fixtures="wanbench.fixtures.tpch",
    engine="wanbench.workloads.tpch_engine:TpchEngine",
    metrics=(Metric("power", True, "power (queries only)", "/h"),
             Metric("queries_per_hour", True, "queries per hour", "/h"),
             *(Metric(f"query_s.{q}", False, f"{q} time", "s", seconds=True, allure=False) for q in QUERIES)),
    samples=tpch_samples,
    integrity=Integrity(TPCH_ANSWERS, "TPC-H answers differ from the reference engine's ({n} query(s))"),
    fingerprint_unless={"tpch_sf": [1.0], "tpch_seed": None},
    tables=tpch_tables,
    summary=tpch_summary,
    package_data=("workloads/tpch_sql/q*.sql",),
)
