"""Budget files: every mistake names the file, the line and the reason; the
shipped defaults load; the last matching rule wins."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from wanbench.errors import ConfigError
from wanbench.gate.budget_file import default_budgets_path, load_budgets, parse_budgets
from wanbench.gate.budgets import CellKey

GOOD = """\
version: 1
profile: lab
gate:
  alpha: 0.05
rules:
  - baseline:
      qps: 5%
      latency_ms.p99: 10%
  - family: rtt
    scenario: replica_read
    level0:
      qps: 10%
  - family: rtt
    scenario: replica_write
    level: [200ms]
    concurrency: [1000]
    baseline:
      qps: 8%
      latency_ms.p99: off
  - absolute:
      latency_ms.p95: 250ms
      qps: 100
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "budgets.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_good_file_resolves_checks_last_rule_wins(tmp_path: Path) -> None:
    budgets = load_budgets(write(tmp_path, GOOD), profile="lab")
    plain = {(c.kind, c.metric): c.limit for c in budgets.checks_for(CellKey("rtt", "proxy", "50ms", 10))}
    assert plain == {
        ("baseline", "qps"): 0.05,
        ("baseline", "latency_ms.p99"): 0.10,
        ("absolute", "latency_ms.p95"): 250.0,
        ("absolute", "qps"): 100.0,
    }
    special = {(c.kind, c.metric): c.limit for c in budgets.checks_for(CellKey("rtt", "replica_write", "200ms", 1000))}
    assert special[("baseline", "qps")] == 0.08
    assert ("baseline", "latency_ms.p99") not in special  # switched off by the later rule
    read = {(c.kind, c.metric) for c in budgets.checks_for(CellKey("rtt", "replica_read", "100ms", 10))}
    assert ("level0", "qps") in read
    level0 = {(c.kind, c.metric) for c in budgets.checks_for(CellKey("rtt", "replica_read", "0ms", 10))}
    assert ("level0", "qps") not in level0  # level 0 is not compared with itself


@pytest.mark.parametrize("profile", ["lab", "tidb"])
def test_shipped_default_budgets_load(profile: str) -> None:
    budgets = load_budgets(default_budgets_path(profile), profile=profile)
    assert budgets.profile == profile
    assert budgets.policy.alpha == 0.05
    assert any(c.kind == "baseline" and c.metric == "qps" for c in budgets.checks_for(CellKey("rtt", "x", "50ms", 1)))


BAD = [
    ("not yaml", "rules: [\n  - baseline: {qps: 5%\n", 2, "not valid YAML"),
    ("duplicate key", "profile: lab\nprofile: lab\nrules: []\n", 2, "duplicate key 'profile' (first at line 1)"),
    ("no profile", "rules:\n  - baseline: {qps: 5%}\n", 1, "needs 'profile: NAME'"),
    ("unknown top key", "profile: lab\nrulez: []\n", 2, "unknown key 'rulez'"),
    ("wrong profile", "profile: tidb\nrules:\n  - baseline: {qps: 5%}\n", 1,
     "budgets are for profile 'tidb' but this run uses 'lab'"),
    ("no rules", "profile: lab\nrules: []\n", 2, "needs a non-empty 'rules' list"),
    ("bad version", "version: 2\nprofile: lab\nrules: []\n", 1, "unsupported version 2"),
    ("unknown metric", "profile: lab\nrules:\n  - baseline:\n      qps: 5%\n      latency_ms.p42: 5%\n", 5,
     "unknown metric 'latency_ms.p42'"),
    ("unknown scenario", "profile: lab\nrules:\n  - scenario: tikv_write\n    baseline: {qps: 5%}\n", 3,
     "unknown scenario 'tikv_write'"),
    ("unknown family", "profile: lab\nrules:\n  - family: latency\n    baseline: {qps: 5%}\n", 3,
     "unknown family 'latency': the rule can never match"),
    ("level of another kind", "profile: lab\nrules:\n  - family: rtt\n    level: 10mbit\n    baseline: {qps: 5%}\n",
     4, "level '10mbit' can never match a rtt cell"),
    ("level spelled differently", "profile: lab\nrules:\n  - family: rtt\n    level: 0.2s\n    baseline: {qps: 5%}\n",
     4, "level '0.2s' can never match: cells are labelled '200ms'"),
    ("level without family", "profile: lab\nrules:\n  - level: 50ms\n    baseline: {qps: 5%}\n", 3,
     "a level selector needs one fault family"),
    ("level0 on level 0", "profile: lab\nrules:\n  - family: rtt\n    level: 0ms\n    level0: {qps: 5%}\n", 5,
     "a level0 rule on level 0 compares a cell with itself"),
    ("level0 on a workload family", "profile: lab\nrules:\n  - family: sysbench\n    level0: {qps: 5%}\n", 4,
     "a level0 rule can never match"),
    ("bad concurrency", "profile: lab\nrules:\n  - concurrency: [10, -4]\n    baseline: {qps: 5%}\n", 3,
     "concurrency -4 is not a positive whole number"),
    ("empty selector", "profile: lab\nrules:\n  - scenario: []\n    baseline: {qps: 5%}\n", 3,
     "'scenario' is an empty list: the rule can never match"),
    ("unmatched glob", "profile: lab\nrules:\n  - family: loss\n    scenario: nope*\n    baseline: {qps: 5%}\n", 4,
     "unknown scenario 'nope*'"),
    ("bad relative limit", "profile: lab\nrules:\n  - baseline:\n      qps: five\n", 4,
     "qps: baseline limit 'five' must be a percentage"),
    ("impossible drop", "profile: lab\nrules:\n  - baseline:\n      qps: 100%\n", 4,
     "a drop of 100% or more can never be exceeded"),
    ("bad absolute limit", "profile: lab\nrules:\n  - absolute:\n      latency_ms.p95: fast\n", 4,
     "absolute limit 'fast' is not a value such as 250ms"),
    ("no checks", "profile: lab\nrules:\n  - family: rtt\n", 3, "rule has no checks"),
    ("unknown rule key", "profile: lab\nrules:\n  - famly: rtt\n    baseline: {qps: 5%}\n", 3,
     "unknown rule key 'famly'"),
    ("bad alpha", "profile: lab\ngate:\n  alpha: 0.9\nrules:\n  - baseline: {qps: 5%}\n", 3,
     "alpha must be a number in (0, 0.5)"),
    ("bad correction", "profile: lab\ngate:\n  correction: fisher\nrules:\n  - baseline: {qps: 5%}\n", 3,
     "unknown correction 'fisher'"),
    ("rule not a mapping", "profile: lab\nrules:\n  - qps\n", 3, "each rule is a mapping"),
    ("drop in percent", "profile: lab\nrules:\n  - family: rtt\n    drop:\n      qps: 5%\n", 5,
     "qps: drop limit '5%' must be percentage points such as '5 points'"),
    ("drop of the error rate", "profile: lab\nrules:\n  - family: rtt\n    drop:\n      error_rate: 1 point\n", 5,
     "error_rate has no drop check"),
    ("drop on a workload family", "profile: lab\nrules:\n  - family: tpcc\n    drop: {qps: 5 points}\n", 4,
     "a drop rule can never match"),
    ("bad min_runs", "profile: lab\ngate:\n  min_runs: 1\nrules:\n  - baseline: {qps: 5%}\n", 3,
     "min_runs must be an integer >= 2"),
    ("bad min_run_spread", "profile: lab\ngate:\n  min_runs: 3\n  min_run_spread: ten\nrules:\n"
     "  - baseline: {qps: 5%}\n", 4, "min_run_spread must be a percentage such as 10%"),
]


def test_drop_checks_are_in_points_and_skip_level_zero(tmp_path: Path) -> None:
    text = "profile: lab\ngate:\n  min_runs: 4\nrules:\n  - family: [rtt, bandwidth]\n    drop:\n" \
           "      qps: 5 points\n      latency_ms.p99: 10pt\n"
    budgets = load_budgets(write(tmp_path, text), profile="lab")
    assert budgets.policy.min_runs == 4
    assert budgets.policy.min_run_spread == 0.0  # not given: the accepted runs' own spread is trusted
    checks = {(c.kind, c.metric): c for c in budgets.checks_for(CellKey("rtt", "proxy", "50ms", 10))}
    assert checks[("drop", "qps")].limit == pytest.approx(0.05)
    assert checks[("drop", "qps")].describe_limit() == "5 points"
    assert checks[("drop", "qps")].per_run
    assert checks[("drop", "latency_ms.p99")].limit == pytest.approx(0.10)
    assert not budgets.checks_for(CellKey("rtt", "proxy", "0ms", 10))


@pytest.mark.parametrize(("text", "line", "reason"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_every_mistake_names_file_line_and_reason(tmp_path: Path, text: str, line: int, reason: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_budgets(path, profile="lab")
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert reason in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the budget file"):
        load_budgets(tmp_path / "absent.yaml")


def test_unknown_profile_has_no_catalog() -> None:
    with pytest.raises(ConfigError, match=r"^b.yaml:1: no scenario catalog for profile 'mysql'"):
        parse_budgets("profile: mysql\nrules:\n  - baseline: {qps: 5%}\n", source="b.yaml")


def test_the_lab_budgets_assume_runs_differ_by_at_least_10_percent() -> None:
    from wanbench.gate.budget_file import default_budgets_path

    budgets = load_budgets(default_budgets_path("lab"), profile="lab")
    assert budgets.policy.min_run_spread == pytest.approx(0.10)
