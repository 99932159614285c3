"""``python -m wanbench compare BASELINE [BASELINE ...] CURRENT``: the gate outside pytest.

Every argument is a ``--results-json`` document or a baseline-store file.
The baselines together are the accepted runs (one results document is one
run; a store file brings all of its runs): the run is the unit the gate
replicates, so judge against several. The rules are the ones pytest applies
(``wanbench.gate.verdict.Judge``). The verdict table goes to stdout; the exit
status is 1 when a cell regressed or is broken (lost writes, a violated
consistency check), 0 otherwise (2 for unusable input), so a
pipeline can gate on stored results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from wanbench.errors import ConfigError
from wanbench.gate.baseline import (
    ENV_FIELDS,
    BaselineFile,
    Fingerprint,
    Lookup,
    RunCell,
    diff_fields,
    parse_store,
    run_entry_cells,
)
from wanbench.gate.budget_file import default_budgets_path, load_budgets
from wanbench.gate.budgets import Budgets, CellKey
from wanbench.gate.verdict import FAILING, Judge, Pending, Verdict, correct, decide
from wanbench.report.tables import text_table


@dataclass
class Side:
    """One argument of ``compare``, whatever file it came from."""

    path: Path
    fingerprint: Fingerprint | None
    cells: list[RunCell]
    store: BaselineFile
    release: str = ""


def run_context(run: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The fingerprint fields of a results document's ``run`` section: under
    ``run.context`` or directly in ``run``."""
    nested = run.get("context")
    ctx: Mapping[str, Any] = nested if isinstance(nested, Mapping) else run
    if all(k in ctx for k in ENV_FIELDS):
        return {**ctx, "versions": ctx.get("versions", {})}
    return None


def load_side(path: str | Path) -> Side:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read ({exc})") from None
    if isinstance(data, dict) and data.get("kind") == "wanbench-baseline":
        store = parse_store(data, path)
        cells: list[RunCell] = []
        if store.runs:
            newest = store.runs[-1]["cells"]
            keys = [CellKey.parse(cid) for cid in newest]
            cells = [RunCell(k, newest[k.id]["samples"], k.is_level0, census=dict(newest[k.id].get("census") or {}))
                     for k in keys]
        release = str(store.runs[-1].get("release", "")) if store.runs else ""
        return Side(path, store.fingerprint, cells, store, release)
    if not isinstance(data, dict) or "results" not in data:
        raise ConfigError(f"{path}: neither a results document (--results-json) nor a baseline file")
    if data.get("schema") != 1:
        raise ConfigError(f"{path}: results schema {data.get('schema')!r}, this wanbench reads 1")
    run = data.get("run") or {}
    ctx = run_context(run)
    fp = Fingerprint.from_context(ctx) if ctx else None
    results = [r for r in data["results"] if isinstance(r, Mapping)]
    cells = [RunCell.of(r) for r in results]
    when = str(run.get("started") or run.get("finished") or "")
    if not when:
        when = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.timezone.utc).isoformat(timespec="seconds")
    release = str(run.get("release") or (ctx or {}).get("release") or "")
    entry = {
        "id": path.name,
        "accepted_at": when,
        "release": release,
        "versions": dict(fp.versions) if fp else {},
        "cells": run_entry_cells(cells),
    }
    placeholder = fp or Fingerprint("unknown", {}, {}, {})
    return Side(path, fp, cells, BaselineFile(path, placeholder, [entry]), release)


def comparability(base: Side, cur: Side, *, release: str) -> Lookup:
    if base.fingerprint is None or cur.fingerprint is None:
        which = [str(s.path) for s in (base, cur) if s.fingerprint is None]
        return Lookup(None, (f"no run context (environment fingerprint) in {', '.join(which)}",))
    env = diff_fields(base.fingerprint.env(), cur.fingerprint.env())
    if env:
        return Lookup(None, tuple(env), note="the runs were made in different environments")
    versions = diff_fields(dict(base.store.versions()), dict(cur.fingerprint.versions), prefix="versions.")
    if versions and not (release or cur.release):
        return Lookup(
            None, tuple(versions), note="server versions changed; pass --release NAME to gate a new release"
        )
    return Lookup(base.store)


def merge_sides(sides: Sequence[Side]) -> Side:
    """Several baseline arguments as one: their runs, in the order given. They
    must share one environment (the first one's fingerprint is checked against
    the run to judge; a different one among them is refused)."""
    first = sides[0]
    runs: list[dict[str, Any]] = []
    for side in sides:
        if side.fingerprint is not None and first.fingerprint is not None:
            diff = diff_fields(first.fingerprint.env(), side.fingerprint.env())
            if diff:
                raise ConfigError(f"{side.path}: another environment than {first.path} ({'; '.join(diff)})")
        runs.extend(side.store.runs)
    store = BaselineFile(first.path, first.store.fingerprint, runs)
    return Side(first.path, first.fingerprint, first.cells, store, sides[-1].release)


def compare(base: Side, cur: Side, budgets: Budgets, *, release: str = "") -> list[Verdict]:
    """Every cell of ``cur`` judged against ``base`` exactly as pytest judges
    it (``Judge.verdict``: Bonferroni over the cells). ``gate.correction:
    holm | bh | none`` in the budget file spreads alpha over the whole file
    at once instead, which pytest cannot do while tests are still running."""
    lookup = comparability(base, cur, release=release)
    judge = Judge(budgets, lookup)
    for c in cur.cells:
        judge.remember(c.key, c.samples, is_level0=c.level0, reference=c.reference)
    n = max(1, len(cur.cells))
    if budgets.policy.correction == "bonferroni":
        return [judge.verdict(c.key, c.samples, cells=n, client=c.client, problems=c.problems, census=c.census,
                              reference=c.reference, not_counts=c.not_counts)[0] for c in cur.cells]
    alpha = budgets.policy.alpha
    pending: list[Pending] = [judge.pending(c.key, c.samples, alpha_cell=alpha / n, client=c.client,
                                            census=c.census, reference=c.reference, not_counts=c.not_counts)
                              for c in cur.cells]
    correct(pending, budgets.policy.correction)
    m = sum(1 for p in pending for o in p.outcomes if o.statistical)
    return [decide(p, alpha=alpha, comparisons=m, problems=c.problems) for p, c in zip(pending, cur.cells, strict=True)]


def _headline(v: Verdict) -> str:
    for o in v.outcomes:
        if o.check.kind == "baseline" and o.check.metric == "qps" and not math.isnan(o.change):
            return f"{o.change * 100:+.1f}%"
    return ""


def print_table(verdicts: Sequence[Verdict], out: TextIO) -> None:
    rows = [[v.key.label, v.status, _headline(v)] for v in verdicts]
    for line in text_table(["cell", "verdict", "QPS"], rows, right=(2,), frame=False):
        out.write(line + "\n")
    out.write("\n")
    for v in verdicts:
        out.write(f"[{v.status}] {v.message}\n")
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    out.write(f"\n{len(verdicts)} cells: {summary or 'nothing to compare'}\n")


def run(args: argparse.Namespace) -> int:
    base = merge_sides([load_side(p) for p in args.baseline])
    cur = load_side(args.current)
    profile = (cur.fingerprint or base.fingerprint or Fingerprint("lab", {}, {}, {})).profile
    budgets_path = Path(args.budgets) if args.budgets else default_budgets_path(profile)
    budgets = load_budgets(budgets_path, profile=profile if profile != "unknown" else None)
    verdicts = compare(base, cur, budgets, release=args.release or "")
    print_table(verdicts, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps([v.to_json() for v in verdicts], indent=2) + "\n")
    return 1 if any(v.status in FAILING for v in verdicts) else 0


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare",
        help="judge a run against a baseline and exit 1 on a regression or an integrity failure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("baseline", metavar="BASELINE", nargs="+",
                   help="results JSON or baseline-store files to compare against: the accepted runs")
    p.add_argument("current", metavar="CURRENT", help="results JSON (or baseline-store file) of the run to judge")
    p.add_argument("--budgets", metavar="FILE", default=None,
                   help="budget file. Default: wanbench/budgets/<profile>.yaml of CURRENT's profile.")
    p.add_argument("--release", metavar="NAME", default=None,
                   help="the release under test: allows comparing across server versions. Default: %(default)r.")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the verdicts as JSON to PATH.")
    p.set_defaults(func=run)
