"""Reading a budget file (the format is described in ``budgets.py``): strict
YAML, every rule, selector and limit validated against the profile's
scenario catalog, mistakes reported with the file, the line and the reason
before anything runs.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError
from wanbench.faults.base import FAMILY_KIND, LEVEL0_LABELS, Level
from wanbench.gate.budgets import (
    CENSUS_PREFIXES,
    CHECK_KINDS,
    METRICS,
    OUTAGE_LEVELS,
    SECONDS_METRICS,
    Budgets,
    GatePolicy,
    Rule,
    all_families,
    fault_families,
    outage_families,
)
from wanbench.strictyaml import LineDict, LineList, load_yaml
from wanbench.topology import Scenario, load_catalog

_PLUS = re.compile(r"^\s*\+?\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")
_SELECTORS = ("family", "scenario", "level", "concurrency", "path", "workload")
_RULE_KEYS = set(_SELECTORS) | set(CHECK_KINDS) | {"name", "description"}
_TOP_KEYS = {"version", "profile", "gate", "rules", "description"}
_GATE_KEYS = {"alpha", "correction", "min_rounds", "min_runs", "min_run_spread"}
_CORRECTIONS = ("holm", "bonferroni", "bh", "none")
_PCT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_MS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_POINTS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(points?|pts?|pp)\s*$")

# ---------------------------------------------------------------- loading


def default_budgets_path(profile: str) -> Path:
    return Path(str(resources.files("wanbench.budgets").joinpath(f"{profile}.yaml")))


def load_budgets(
    path: str | Path, *, profile: str | None = None, catalog: Mapping[str, Scenario] | None = None
) -> Budgets:
    """Read and validate a budget file; ``ConfigError("FILE:LINE: reason")``
    on any mistake. ``profile`` (the run's) must agree with the file's."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the budget file ({exc.strerror or exc})") from None
    return parse_budgets(text, source=str(path), profile=profile, catalog=catalog)


def parse_budgets(
    text: str, *, source: str, profile: str | None = None, catalog: Mapping[str, Scenario] | None = None
) -> Budgets:
    data = load_yaml(text, source=source)
    return _Validator(source, profile, catalog).budgets(data)


class _Validator:
    def __init__(self, source: str, profile: str | None, catalog: Mapping[str, Scenario] | None) -> None:
        self.source = source
        self.run_profile = profile
        self.catalog = catalog

    def fail(self, line: int, reason: str) -> ConfigError:
        return ConfigError(f"{self.source}:{line}: {reason}")

    def budgets(self, data: Any) -> Budgets:
        if not isinstance(data, LineDict):
            raise self.fail(getattr(data, "line", 1), "a budget file is a mapping with 'profile' and 'rules'")
        for key in data:
            if key not in _TOP_KEYS:
                raise self.fail(data.lines[key], f"unknown key {key!r} (known: {', '.join(sorted(_TOP_KEYS))})")
        version = data.get("version", 1)
        if version != 1:
            raise self.fail(data.lines.get("version", data.line), f"unsupported version {version!r} (this is 1)")
        file_profile = data.get("profile")
        if not isinstance(file_profile, str) or not file_profile:
            raise self.fail(data.lines.get("profile", data.line), "needs 'profile: NAME' (lab, tidb)")
        if self.run_profile and file_profile != self.run_profile:
            raise self.fail(
                data.lines["profile"],
                f"budgets are for profile {file_profile!r} but this run uses {self.run_profile!r}",
            )
        if self.catalog is None:
            try:
                self.catalog = load_catalog(file_profile)
            except ConfigError as exc:
                raise self.fail(data.lines["profile"], str(exc)) from None
        policy = self.policy(data.get("gate"), data.lines.get("gate", data.line))
        rules_raw = data.get("rules")
        if not isinstance(rules_raw, LineList) or not rules_raw:
            raise self.fail(data.lines.get("rules", data.line), "needs a non-empty 'rules' list")
        rules = tuple(self.rule(r, line) for r, line in zip(rules_raw, rules_raw.lines, strict=True))
        return Budgets(self.source, file_profile, rules, policy)

    def policy(self, raw: Any, line: int) -> GatePolicy:
        if raw is None:
            return GatePolicy()
        if not isinstance(raw, LineDict):
            raise self.fail(line, "'gate' must be a mapping (alpha, correction, min_rounds, min_runs, min_run_spread)")
        for key in raw:
            if key not in _GATE_KEYS:
                known = ", ".join(sorted(_GATE_KEYS))
                raise self.fail(raw.lines[key], f"unknown gate setting {key!r} (known: {known})")
        alpha = raw.get("alpha", 0.05)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 < alpha < 0.5:
            raise self.fail(raw.lines.get("alpha", line), f"alpha must be a number in (0, 0.5), not {alpha!r}")
        correction = raw.get("correction", "bonferroni")
        if correction not in _CORRECTIONS:
            raise self.fail(
                raw.lines.get("correction", line),
                f"unknown correction {correction!r} (known: {', '.join(_CORRECTIONS)})",
            )
        min_rounds = raw.get("min_rounds", 3)
        if isinstance(min_rounds, bool) or not isinstance(min_rounds, int) or min_rounds < 2:
            raise self.fail(
                raw.lines.get("min_rounds", line), f"min_rounds must be an integer >= 2, not {min_rounds!r}"
            )
        min_runs = raw.get("min_runs", 3)
        if isinstance(min_runs, bool) or not isinstance(min_runs, int) or min_runs < 2:
            raise self.fail(
                raw.lines.get("min_runs", line), f"min_runs must be an integer >= 2, not {min_runs!r}"
            )
        spread_raw = raw.get("min_run_spread", "0%")
        m = _PCT.match(str(spread_raw))
        if not m or not 0 <= float(m.group(1)) < 100:
            raise self.fail(
                raw.lines.get("min_run_spread", line),
                f"min_run_spread must be a percentage such as 10% (the least spread between runs), not {spread_raw!r}",
            )
        return GatePolicy(float(alpha), correction, min_rounds, min_runs, float(m.group(1)) / 100.0)

    def rule(self, raw: Any, line: int) -> Rule:
        if not isinstance(raw, LineDict):
            raise self.fail(line, "each rule is a mapping of selectors and checks")
        for key in raw:
            if key not in _RULE_KEYS:
                known = ", ".join(sorted(_RULE_KEYS))
                raise self.fail(raw.lines[key], f"unknown rule key {key!r} (known: {known})")
        selectors: dict[str, tuple[str, ...]] = {}
        for sel in _SELECTORS:
            if sel in raw:
                selectors[sel] = self.patterns(raw[sel], raw.lines[sel], sel)
        families = self.check_families(selectors, raw)
        self.check_scenarios(selectors, families, raw)
        self.check_levels(selectors, families, raw)
        checks: list[tuple[str, str, float | None, int, bool]] = []
        for kind in CHECK_KINDS:
            if kind not in raw:
                continue
            block = raw[kind]
            kline = raw.lines[kind]
            if not isinstance(block, LineDict) or not block:
                raise self.fail(kline, f"{kind!r} must map metrics to limits, e.g. {kind}: {{qps: 5%}}")
            for metric, value in block.items():
                mline = block.lines[metric]
                if kind == "census":
                    checks.append(("census", str(metric), *self.census_limit(str(metric), value, mline)))
                    continue
                if metric not in METRICS:
                    raise self.fail(mline, f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
                checks.append((kind, metric, self.limit(kind, metric, value, mline), mline, False))
        if not checks:
            raise self.fail(line, "rule has no checks: add 'baseline', 'drop', 'level0', 'absolute', 'census' or 'ab'")
        for kind in ("level0", "drop"):
            if not any(k == kind for k, *_ in checks):
                continue
            if families and not set(families) & set(fault_families()):
                raise self.fail(
                    raw.lines[kind], f"a {kind} rule can never match: its families have no fault levels"
                )
            levels = selectors.get("level", ())
            if levels and all(p in LEVEL0_LABELS for p in levels):
                raise self.fail(raw.lines[kind], f"a {kind} rule on level 0 compares a cell with itself")
        name = str(raw.get("name", f"rule at line {line}"))
        return Rule(line, name, selectors, tuple(checks))

    def patterns(self, value: Any, line: int, sel: str) -> tuple[str, ...]:
        items = list(value) if isinstance(value, list) else [value]
        if not items:
            raise self.fail(line, f"{sel!r} is an empty list: the rule can never match")
        out = []
        for item in items:
            if sel == "concurrency":
                if isinstance(item, str) and item.strip() == "*":
                    out.append("*")
                    continue
                text = str(item).strip().removeprefix("c=")
                if isinstance(item, bool) or not text.isdigit() or int(text) <= 0:
                    raise self.fail(line, f"concurrency {item!r} is not a positive whole number or '*'")
                out.append(str(int(text)))
            else:
                if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                    raise self.fail(line, f"{sel} {item!r} must be a name or a glob")
                out.append(str(item))
        return tuple(out)

    def check_families(self, selectors: Mapping[str, tuple[str, ...]], raw: LineDict) -> list[str]:
        pats = selectors.get("family")
        if pats is None:
            return list(all_families())
        found: list[str] = []
        for p in pats:
            hit = fnmatch.filter(all_families(), p)
            if not hit:
                known = ", ".join(all_families())
                raise self.fail(
                    raw.lines["family"], f"unknown family {p!r}: the rule can never match (known: {known})"
                )
            found.extend(hit)
        return found

    def check_scenarios(
        self, selectors: Mapping[str, tuple[str, ...]], families: Sequence[str], raw: LineDict
    ) -> None:
        pats = selectors.get("scenario")
        if pats is None or self.catalog is None:
            return
        faulted = [f for f in families if f in (*fault_families(), *outage_families())]
        if not faulted:
            return  # workload families name their own scenarios (sysbench tests, tpcc)
        for p in pats:
            named = fnmatch.filter(list(self.catalog), p)
            if not named:
                raise self.fail(
                    raw.lines["scenario"],
                    f"unknown scenario {p!r} in catalog {self.catalog_name()} (known: {', '.join(self.catalog)})",
                )
            if not any(f in self.catalog[s].families for s in named for f in faulted):
                raise self.fail(
                    raw.lines["scenario"],
                    f"scenario {p!r} never runs in family {'/'.join(faulted)}: the rule can never match",
                )

    def catalog_name(self) -> str:
        return repr(self.run_profile) if self.run_profile else "of the file's profile"

    def check_levels(self, selectors: Mapping[str, tuple[str, ...]], families: Sequence[str], raw: LineDict) -> None:
        pats = selectors.get("level")
        if pats is None or pats == ("*",):
            return
        if "family" in raw and families and all(f in outage_families() for f in families):
            for p in pats:
                if not any(ch in p for ch in "*?[") and p not in OUTAGE_LEVELS:
                    raise self.fail(raw.lines["level"], f"outage {p!r} can never match an availability cell "
                                                            f"(known: {', '.join(OUTAGE_LEVELS)})")
            return
        kinds = {FAMILY_KIND[f] for f in families if f in fault_families()}
        if "family" not in raw or len(kinds) != 1 or any(f not in fault_families() for f in families):
            raise self.fail(
                raw.lines["level"], "a level selector needs one fault family (family: rtt, bandwidth or loss)"
            )
        kind = next(iter(kinds))
        for p in pats:
            if any(ch in p for ch in "*?["):
                continue
            try:
                level = Level.parse(kind, p)
            except ConfigError as exc:
                raise self.fail(
                    raw.lines["level"], f"level {p!r} can never match a {families[0]} cell: {exc}"
                ) from None
            if level.label != p:
                raise self.fail(
                    raw.lines["level"], f"level {p!r} can never match: cells are labelled {level.label!r}"
                )

    def census_limit(self, pattern: str, value: Any, line: int) -> tuple[float | None, int, bool]:
        """A census limit: how far the metric may grow over the accepted runs,
        in its own unit (``0.25`` round trips) or relative (``10%``)."""
        if pattern.split(".", 1)[0] not in CENSUS_PREFIXES:
            raise self.fail(line, f"census metric {pattern!r} must start with one of {', '.join(CENSUS_PREFIXES)} "
                                  "(e.g. round_trips, bytes_per_op.*, work.*.statements)")
        if value is None or value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return None, line, False
        m = _PLUS.match(str(value))
        if not m or isinstance(value, bool):
            raise self.fail(line, f"{pattern}: census limit {value!r} must be an increase in the metric's own unit "
                                  "such as 0.25 or +0.25, or a percentage such as 10%")
        return (float(m.group(1)) / 100.0 if m.group(2) else float(m.group(1))), line, bool(m.group(2))

    def limit(self, kind: str, metric: str, value: Any, line: int) -> float | None:
        if value is None or value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return None
        text = str(value)
        if kind == "drop":
            m = _POINTS.match(text)
            if not m or metric == "error_rate":
                raise self.fail(
                    line, f"{metric}: drop limit {value!r} must be percentage points such as '5 points' "
                    "(how far the drop against level 0 may grow over the baseline's drop)"
                    + ("; error_rate has no drop check (use absolute)" if metric == "error_rate" else "")
                )
            return float(m.group(1)) / 100.0
        if kind in ("baseline", "level0", "ab"):
            m = _PCT.match(text)
            if not m:
                raise self.fail(line, f"{metric}: {kind} limit {value!r} must be a percentage such as 5%")
            pct = float(m.group(1))
            if metric in METRICS and METRICS[metric] and pct >= 100:
                raise self.fail(line, f"{metric}: a drop of {pct:g}% or more can never be exceeded")
            return pct / 100.0
        if metric in SECONDS_METRICS:
            m = _MS.match(text)
            if m:
                return float(m.group(1)) / (1000.0 if m.group(2) == "ms" else 1.0)
        elif metric.startswith("latency_ms"):
            m = _MS.match(text)
            if m:
                return float(m.group(1)) * (1000.0 if m.group(2) == "s" else 1.0)
        elif metric == "error_rate":
            m = _PCT.match(text)
            if m:
                return float(m.group(1)) / 100.0
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return float(value)
        example = {"error_rate": "1%", "rto_s": "5s", "recovery_s": "5s"}.get(
            metric, "250ms" if metric.startswith("latency_ms") else "1000")
        raise self.fail(line, f"{metric}: absolute limit {value!r} is not a value such as {example}")


def rules_summary(budgets: Budgets) -> Iterable[str]:
    for rule in budgets.rules:
        sel = " ".join(f"{k}={'|'.join(v)}" for k, v in rule.selectors.items()) or "every cell"
        for kind, metric, limit, _line, relative in rule.checks:
            shown = "off" if limit is None else f"{limit * 100:g}%" if relative else f"{limit:g}"
            yield f"line {rule.line}: {sel}: {kind} {metric} {shown}"


def parse_budgets_path(text: str) -> str:
    """``--budgets``: the file must exist; its content is checked at collection,
    when the profile (and so the scenario catalog) is known."""
    path = Path(text).expanduser()
    if not path.is_file():
        raise ConfigError(f"{text!r}: no such budget file")
    return str(path)


def parse_release(text: str) -> str:
    """``--release``: a non-empty name without control characters."""
    name = str(text).strip()
    if not name or any(ord(ch) < 32 for ch in name):
        raise ConfigError(f"{text!r} is not a release name (example: v8.5.4-rc1)")
    return name
