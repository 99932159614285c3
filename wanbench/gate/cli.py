"""``python -m wanbench compare BASELINE [BASELINE ...] CURRENT``: the gate outside pytest;
``python -m wanbench compare AB_RESULTS``: an A/B run (``--ab``) against its own baseline side.

Every argument is a ``--results-json`` document or a baseline-store file.
The baselines together are the accepted runs (one results document is one
run; a store file brings all of its runs): the run is the unit the gate
replicates, so judge against several. The rules are the ones pytest applies
(``wanbench.gate.verdict.Judge``), and so are its options: ``--gate-max-runs
N`` judges CURRENT as run 1 of such a chain (alpha split over N looks, no
check left advisory that a repeat could decide), and each ``--rerun FILE``
(``results.run2.json``, ...) as the next run, its repeated cells with their
earlier runs; ``--gate-strict`` fails inconclusive and incomparable cells.
The verdict table (each cell's last verdict) goes to stdout; the exit status
is 1 when any verdict of any run fails its cell as pytest would (a
regression, a broken cell: lost writes, a violated consistency check; with
``--gate-strict`` an undecided one), 0 otherwise (2 for unusable input), so
a pipeline can gate on stored results.

An A/B run's results document holds its baseline side beside every cell
(``wanbench.ab``): given alone, it is judged against that side pair by pair
(``wanbench.gate.ab_checks``), then each fault level's cells pooled
(``wanbench.gate.ab_levels``: a row per level after the cells, ``rtt=0ms,
its cells pooled``), as pytest judged it; a level's regression exits 1.
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
from wanbench.gate import ab_levels
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
from wanbench.gate.integrity import Problem
from wanbench.gate.outcome import RunSummary
from wanbench.gate.verdict import FAILED, Judge, Pending, Verdict, correct, decide, ends_as, is_undecided, repeats
from wanbench.report.tables import text_table
from wanbench.units import parse_positive_int


@dataclass
class Side:
    """One argument of ``compare``, whatever file it came from."""

    path: Path
    fingerprint: Fingerprint | None
    cells: list[RunCell]
    store: BaselineFile
    release: str = ""

    @property
    def ab(self) -> bool:
        """An A/B run's document: each cell carries its baseline side."""
        return any(c.ab is not None for c in self.cells)


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


def compare(base: Side | None, cur: Side, budgets: Budgets, *, release: str = "",
            earlier: Mapping[str, Sequence[RunSummary]] | None = None, look: int = 1,
            looks: int = 1) -> tuple[list[Verdict], dict[str, RunSummary]]:
    """Every cell of ``cur`` judged against ``base`` exactly as pytest judges
    it (``Judge.verdict``: Bonferroni over the cells and the ``looks`` of a
    chain; ``earlier``: each repeated cell's runs before this one, ``look``:
    which run this is), with each cell's run as a chain carries it on. An A/B
    run's level verdicts (``wanbench.gate.ab_levels``) follow its cells, each
    level one more comparison, as in pytest.
    ``gate.correction: holm | bh | none`` in the budget file spreads alpha
    over the whole file at once instead, which pytest cannot do while tests
    are still running."""
    if base is None:  # an A/B run: its cells carry their baseline side
        lookup = Lookup(None, note="an A/B run is judged against its baseline side")
    else:
        lookup = comparability(base, cur, release=release)
    judge = Judge(budgets, lookup, earlier)
    for c in cur.cells:
        judge.remember(c.key, c.samples, is_level0=c.level0, reference=c.reference)
    levels = ab_levels.levels_of(cur.cells) if base is None else []
    n = max(1, len(cur.cells) + len(levels))
    if budgets.policy.correction == "bonferroni":
        judged = [judge.verdict(c.key, c.samples, cells=n, looks=looks, look=look, client=c.client,
                                problems=c.problems, census=c.census, reference=c.reference,
                                not_counts=c.not_counts, ab=c.ab) for c in cur.cells]
        verdicts = [v for v, _p in judged] + (judge.level_verdicts(cur.cells, comparisons=n) if levels else [])
        return verdicts, {p.key.id: p.run for _v, p in judged}
    alpha = budgets.policy.alpha / max(1, looks)
    pending: list[Pending] = [judge.pending(c.key, c.samples, alpha_cell=alpha / n, client=c.client,
                                            census=c.census, reference=c.reference, not_counts=c.not_counts,
                                            ab=c.ab)
                              for c in cur.cells]
    problems: list[Sequence[Problem]] = [c.problems for c in cur.cells]
    for level, members in levels:
        got = ab_levels.level_pending(level, members, budgets, alpha_each=alpha / n)
        if got is not None:
            pending.append(got)
            problems.append(())
    correct(pending, budgets.policy.correction)
    m = sum(1 for p in pending for o in p.outcomes if o.statistical)
    verdicts = [decide(p, alpha=alpha, comparisons=m, problems=pr, repeating=looks > 1)
                for p, pr in zip(pending, problems, strict=True)]
    return verdicts, {p.key.id: p.run for p in pending if not p.key.pooled}


@dataclass
class Judged:
    """One verdict of a chain, with the run that gave it and how it ends its cell."""

    verdict: Verdict
    look: int
    ends: str


def compare_chain(base: Side | None, runs: Sequence[Side], budgets: Budgets, *, release: str = "", looks: int = 1,
                  strict: bool = False, warn: TextIO | None = None) -> list[Judged]:
    """The runs of a ``--gate-max-runs`` chain judged as the chain judged
    them: run 1 every cell, each later run with the cells the one before
    left undecided carrying their earlier runs (``wanbench.pytest_plugin.chain.next_run``).
    Every verdict of every run, in order; each ends its cell as pytest ended
    it (``ends_as``)."""
    out: list[Judged] = []
    earlier: dict[str, list[RunSummary]] = {}
    for look, side in enumerate(runs, 1):
        if look > 1 and warn is not None:
            _check_rerun(side, earlier, look, warn)
        verdicts, summaries = compare(base, side, budgets, release=release, earlier=earlier, look=look,
                                      looks=looks)
        for v in verdicts:
            again = repeats(v, look=look, looks=looks)
            out.append(Judged(v, look, ends_as(v, strict=strict, repeated=again)))
        earlier = {v.key.id: [*earlier.get(v.key.id, []), summaries[v.key.id]] for v in verdicts
                   if is_undecided(v) and v.key.id in summaries}
    return out


def _check_rerun(side: Side, earlier: Mapping[str, Sequence[RunSummary]], look: int, warn: TextIO) -> None:
    """Say so when a later run is not the one the chain would have started:
    the cells the run before left undecided, and the level-0 cells of their
    groups (``wanbench.pytest_plugin.chain.next_run``)."""
    got = {c.key.id: c.key for c in side.cells}
    undecided = {CellKey.parse(cid) for cid in earlier}
    groups = {k.level0_group for k in undecided}
    missing = sorted(k.id for k in undecided if k.id not in got)
    extra = sorted(cid for cid, k in got.items()
                   if k not in undecided and not (k.is_level0 and k.level0_group in groups))
    for cells, what in ((missing, f"does not measure {len(missing)} cell(s) run {look - 1} left undecided"),
                        (extra, f"measures {len(extra)} cell(s) run {look - 1} did not leave undecided")):
        if cells:
            warn.write(f"compare: {side.path} {what} ({', '.join(cells)}): is it run {look} of this chain?\n")


def last_verdicts(judged: Sequence[Judged]) -> list[Judged]:
    """Each cell's last verdict (a repeated cell's from the run that repeated it), in the order first judged."""
    last: dict[str, Judged] = {}
    for j in judged:  # in run order: a later run's verdict replaces, the cell keeps its place
        last[j.verdict.key.id] = j
    return list(last.values())


def _headline(v: Verdict) -> str:
    for o in v.outcomes:
        if o.check.kind in ("baseline", "ab") and o.check.metric == "qps" and not math.isnan(o.change):
            return f"{o.change * 100:+.1f}%"
    return ""


def _counts(verdicts: Sequence[Verdict]) -> str:
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.status] = counts.get(v.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def print_table(verdicts: Sequence[Verdict], out: TextIO) -> None:
    rows = [[v.key.label, v.status, _headline(v)] for v in verdicts]
    for line in text_table(["cell", "verdict", "QPS"], rows, right=(2,), frame=False):
        out.write(line + "\n")
    out.write("\n")
    for v in verdicts:
        out.write(f"[{v.status}] {v.message}\n")
    cells = [v for v in verdicts if not v.key.pooled]
    levels = [v for v in verdicts if v.key.pooled]
    out.write(f"\n{len(cells)} cells: {_counts(cells) or 'nothing to compare'}\n")
    if levels:
        out.write(f"{len(levels)} levels (A/B, each level's cells pooled): {_counts(levels)}\n")


def run(args: argparse.Namespace) -> int:
    if args.rerun and args.gate_max_runs < 2:
        raise ConfigError("--rerun: the later runs of a chain need --gate-max-runs N (N > 1), as pytest was given")
    if len(args.rerun) >= args.gate_max_runs > 1:
        raise ConfigError(f"--rerun: {len(args.rerun)} later run(s) but --gate-max-runs {args.gate_max_runs} "
                          f"allows at most {args.gate_max_runs - 1}")
    *baselines, current = args.files
    runs = [load_side(current), *(load_side(p) for p in args.rerun)]
    cur = runs[0]
    if cur.ab and (baselines or args.rerun or args.gate_max_runs > 1):
        raise ConfigError(f"{current} is an A/B run (--ab): it is judged against its own baseline side; give it "
                          "alone, without BASELINE files, --rerun or --gate-max-runs")
    if not cur.ab and not baselines:
        raise ConfigError(f"{current}: give the accepted runs to judge it against first (BASELINE ... CURRENT); "
                          "only an A/B run's results (--ab) are judged alone")
    base = merge_sides([load_side(p) for p in baselines]) if baselines else None
    profile = (cur.fingerprint or (base.fingerprint if base else None) or Fingerprint("lab", {}, {}, {})).profile
    budgets_path = Path(args.budgets) if args.budgets else default_budgets_path(profile)
    budgets = load_budgets(budgets_path, profile=profile if profile != "unknown" else None)
    judged = compare_chain(base, runs, budgets, release=args.release or "", looks=args.gate_max_runs,
                           strict=args.gate_strict, warn=sys.stderr)
    last = last_verdicts(judged)
    print_table([j.verdict for j in last], sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps([{**j.verdict.to_json(), "run": j.look, "ends": j.ends}
                                               for j in last], indent=2) + "\n")
    return 1 if any(j.ends == FAILED for j in judged) else 0


def _runs(value: str) -> int:
    """``parse_positive_int`` as argparse reports a bad value (exit 2, naming the option)."""
    try:
        return parse_positive_int(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare",
        help="judge a run against a baseline and exit 1 on a regression or an integrity failure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("files", metavar="FILE", nargs="+",
                   help="BASELINE [BASELINE ...] CURRENT: results JSON or baseline-store files to compare against "
                        "(the accepted runs), then the results JSON (or baseline-store file) of the run to judge; "
                        "or the results JSON of an A/B run (--ab) alone, judged against its own baseline side")
    p.add_argument("--budgets", metavar="FILE", default=None,
                   help="budget file. Default: wanbench/budgets/<profile>.yaml of CURRENT's profile.")
    p.add_argument("--release", metavar="NAME", default=None,
                   help="the release under test: allows comparing across server versions. Default: %(default)r.")
    p.add_argument("--gate-max-runs", metavar="N", type=_runs, default=1,
                   help="CURRENT is run 1 of a pytest --gate-max-runs N chain: judge it as that chain did "
                        "(alpha split over N looks). Default: %(default)r.")
    p.add_argument("--rerun", metavar="FILE", action="append", default=[],
                   help="results JSON of the chain's next run (results.run2.json, then results.run3.json, ...): "
                        "its repeated cells are judged with their earlier runs. Default: none.")
    p.add_argument("--gate-strict", action="store_true", default=False,
                   help="inconclusive and incomparable cells fail (exit 1), as with pytest --gate-strict. "
                        "Default: %(default)r.")
    p.add_argument("--json", metavar="PATH", default=None,
                   help="also write each cell's last verdict as JSON to PATH (with the run that gave it and how it "
                        "ends the cell: passed, failed, skipped).")
    p.set_defaults(func=run)
