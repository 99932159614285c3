"""Release against release (``--ab``, ``wanbench.ab``): the pair statistics,
the verdict of an A/B cell (its baseline side, its census against the
baseline's, the A/A guard), the early stop on recorded rounds, and the
options an A/B run refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from selftests.test_options import run_pytest
from wanbench import ab
from wanbench.gate.ab_checks import assess_ab, pair_logs, pair_spread
from wanbench.gate.baseline import Lookup, RunCell
from wanbench.gate.budget_file import default_budgets_path, load_budgets, parse_budgets
from wanbench.gate.budgets import Check
from wanbench.gate.verdict import Judge
from wanbench.interleave import Interleaved
from wanbench.results import CellResult, Round, WorkloadResult

ROOT = Path(__file__).resolve().parent.parent
BATCHES = json.loads((ROOT / "selftests" / "data" / "gate" / "probe_read_batches.json").read_text())["batches"]
QPS = Check("ab", "qps", 0.05, 1, "t")
P95 = Check("ab", "latency_ms.p95", 0.10, 2, "t")


def rounds(tag: str, factor: float = 1.0, n: int = 5) -> tuple[Round, ...]:
    """Recorded rounds (a batch of the read probe); ``factor`` scales their QPS
    and divides their latency (a server that much faster)."""
    out = []
    for r in BATCHES[tag][:n]:
        lat = {k: v / factor for k, v in r["latency_ms"].items()}
        out.append(Round.from_json({**r, "qps": r["qps"] * factor, "tps": r["tps"] * factor, "latency_ms": lat}))
    return tuple(out)


def ab_cell(cand: tuple[Round, ...], base: tuple[Round, ...], *, aa: bool = False, level: str = "0ms",
            census: dict[str, float] | None = None, base_census: dict[str, float] | None = None) -> CellResult:
    """An A/B cell: candidate rounds beside baseline rounds, ABBA."""
    n = min(len(cand), len(base))
    plan = tuple(x for i in range(n) for x in ((True, False) if i % 2 == 0 else (False, True)))
    w = Interleaved(WorkloadResult("probe_read", 8, cand[:n], cand[0].latency_ms),
                    WorkloadResult("probe_read", 8, base[:n], base[0].latency_ms), plan,
                    key=ab.KEY, other=ab.OTHER).result()
    w.extra[ab.KEY]["aa_guard"] = aa
    value = 0 if level == "0ms" else float(level.removesuffix("ms"))
    cell = CellResult(f"t[primary-{level}]", "rtt", "primary", {"kind": "delay", "value": value, "label": level},
                      8, w, path="proxy")

    def metrics(values: dict[str, float] | None) -> dict[str, Any]:
        return {"metrics": {k: {"value": v, "unit": "u"} for k, v in (values or {}).items()}}

    cell.census = metrics(census)
    w.extra[ab.KEY][ab.OTHER]["census"] = metrics(base_census)
    return cell


def judge(cell: CellResult, cells: int = 24) -> Any:
    c = RunCell.of(cell)
    j = Judge(load_budgets(default_budgets_path("lab"), profile="lab"), Lookup(None, note="A/B"))
    verdict, _pending = j.verdict(c.key, c.samples, cells=cells, census=c.census, ab=c.ab)
    return verdict


def test_the_pairs_log_ratios_and_their_spread() -> None:
    assert pair_logs([110.0, 90.0, 0.0], [100.0, 100.0, 50.0]) == pytest.approx([math.log(1.1), math.log(0.9)])
    side = ab.AbSide({"qps": [100.0, 100.0, 100.0]})
    sd, df = pair_spread({"qps": [100.0, 110.0, 90.0]}, side)["qps"]
    assert df == 6 - 2 - 1  # six rounds, two blocks (ABBA, AB), one release difference
    assert sd == pytest.approx(0.0907, abs=0.001)


def test_a_consistently_slower_candidate_is_a_regression_and_a_steady_equal_one_passes() -> None:
    base = [1000.0 * (1 + 0.01 * (i % 3)) for i in range(8)]
    slow = assess_ab(QPS, [b * 0.8 for b in base], base, alpha_each=0.0007)
    assert slow is not None
    assert slow.change == pytest.approx(-0.2)
    assert slow.worse == pytest.approx(0.2)
    assert slow.p_worse < 1e-6
    same = assess_ab(QPS, [b * (1 + 0.005 * (-1) ** i) for i, b in enumerate(base)], base, alpha_each=0.0007)
    assert same is not None
    assert same.detectable < 0.05
    assert same.unit == "pair"
    assert same.test == "paired-t (ABBA blocks, df 11)"  # 16 rounds, 4 blocks, one release difference
    one = assess_ab(QPS, [900.0], [1000.0], alpha_each=0.0007)
    assert one is not None
    assert math.isinf(one.detectable)


def test_latency_is_worse_when_it_rises() -> None:
    o = assess_ab(P95, [12.0, 12.2, 11.9, 12.1], [10.0, 10.1, 9.9, 10.0], alpha_each=0.01)
    assert o is not None
    assert o.worse == pytest.approx(0.2, abs=0.01)
    assert o.p_worse < 0.001 < o.p_better


def test_a_verdict_from_recorded_pairs_regression_inconclusive_and_the_aa_guard() -> None:
    # recorded rounds of one setup beside each other: the same server, whatever the machine did
    same = judge(ab_cell(rounds("same3-base"), rounds("same3-current")))
    qps = next(o for o in same.outcomes if o.check.kind == "ab" and o.check.metric == "qps")
    assert qps.status in ("pass", "inconclusive"), qps.message
    assert same.status != "regression"
    # the same rounds, the candidate at half the speed in every pair: with 5 pairs 15 % apart
    # (this machine under load), 24 cells' Bonferroni needs about 40 % to be sure
    slow_cell = ab_cell(rounds("same3-base", 0.5), rounds("same3-current"))
    slow = judge(slow_cell)
    assert slow.status == "regression", slow.message
    assert "BEYOND_BUDGET" in slow.reasons
    assert "below the baseline side" in slow.message
    # identical sides (an A/A run): a shift beyond the budget is the machine's, not a release's
    guarded = judge(ab_cell(rounds("same3-base", 0.5), rounds("same3-current"), aa=True))
    assert guarded.status == "inconclusive"
    assert "MACHINE_TOO_NOISY_NOW" in guarded.reasons
    check = next(o for o in guarded.outcomes if o.check.metric == "qps")
    assert check.to_json()["guard"]["tripped"] is True


def test_the_census_of_an_ab_cell_is_judged_against_its_baseline_side() -> None:
    counts = {"round_trips": 1.0, "bytes_per_op.primary": 200.0}
    same = ab_cell(rounds("same4-base"), rounds("same4-current"), level="50ms", census=counts, base_census=counts)
    v = judge(same)
    census = [o for o in v.outcomes if o.check.kind == "census"]
    assert {o.check.metric for o in census} == set(counts)
    assert all(o.status == "pass" for o in census)
    assert "in the baseline side" in v.message or v.status == "pass"
    more = ab_cell(rounds("same4-base"), rounds("same4-current"), level="50ms",
                   census={"round_trips": 2.0, "bytes_per_op.primary": 200.0}, base_census=counts)
    v = judge(more)
    assert v.status == "regression"
    assert "CENSUS_BEYOND_BUDGET" in v.reasons
    assert "round_trips 2 vs 1 in the baseline side" in v.message
    missing = judge(ab_cell(rounds("same4-base"), rounds("same4-current"), level="50ms", census=counts,
                            base_census={"round_trips": 1.0}))
    assert any("the baseline side did not count bytes_per_op.primary" in n for n in missing.notes)


def test_the_baseline_side_reads_as_a_cell_of_its_own() -> None:
    cell = ab_cell(rounds("same5-base", 2.0), rounds("same5-current")).to_json()
    side = ab.baseline_cell(cell)
    assert [r["qps"] for r in side["rounds"]] == [r["qps"] for r in ab.baseline_rounds(cell)]
    assert ab.KEY not in side["workload_extra"]
    assert side["qps"] < cell["qps"]
    assert ab.baseline_cell({"rounds": []}) == {"rounds": []}


def test_an_ab_cell_stops_early_only_when_its_checks_stand_whatever_the_pairs_left_do() -> None:
    from wanbench.pytest_plugin.ab import ab_settled

    budgets = load_budgets(default_budgets_path("lab"), profile="lab")
    j = Judge(budgets, Lookup(None, note="A/B"))
    base = rounds("same6-current", n=4)
    # after 4 of 8 pairs, a candidate at 30 % of the baseline's speed in every pair (its rounds the
    # baseline's own, slowed; they fell 35 % over the four) stays a regression whatever the pairs left do
    slow = ab_settled(j, ab_cell(rounds("same6-current", 0.3, n=4), base), cells=24, looks=1, planned=8)
    assert slow is not None
    assert "regression" in slow.why()
    # identical recorded rounds: its QPS check is undecided by noise, and more pairs could decide it
    assert ab_settled(j, ab_cell(rounds("same6-base", n=4), base), cells=24, looks=1, planned=8) is None
    # one pair: no spread yet, nothing to stop on
    assert ab_settled(j, ab_cell(rounds("same6-current", 0.3, n=1), base[:1]), cells=24, looks=1, planned=8) is None


def test_an_ab_rule_in_a_budget_file() -> None:
    b = parse_budgets("profile: lab\nrules:\n  - ab:\n      qps: 5%\n      latency_ms.p99: 10%\n", source="b.yaml")
    from wanbench.gate.budgets import CellKey

    checks = {(c.kind, c.metric): c.limit for c in b.checks_for(CellKey("rtt", "primary", "0ms", 10, "proxy", ""))}
    assert checks == {("ab", "qps"): 0.05, ("ab", "latency_ms.p99"): 0.10}
    from wanbench.errors import ConfigError

    with pytest.raises(ConfigError, match="ab limit '5 points' must be a percentage"):
        parse_budgets("profile: lab\nrules:\n  - ab:\n      qps: 5 points\n", source="b.yaml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidate-server-option", "performance-schema=ON"],
         "--candidate-server-option names one side of an A/B run: add --ab"),
        (["--ab", "--labs", "2"], "--ab runs its two clusters in one process: leave out --labs"),
        (["--ab", "--baseline-save"], "--ab is judged against its baseline side and records no accepted run"),
        (["--ab", "--gate-max-runs", "3"], "--gate-max-runs: an A/B run decides within its run"),
        (["--ab", "--no-interleave"], "--no-interleave: an A/B run alternates its two sides"),
        (["--ab", "--candidate-server-config", "pyproject.toml"],
         "--candidate-server-config is for the TiDB lab (--lab-flavour tidb)"),
        (["--ab", "--baseline-server-option", "port=3306"], "the mariadb lab sets --port itself"),
        (["--ab", "--candidate-server-binary", "/nonexistent/mariadbd"],
         "--candidate-server-binary: '/nonexistent/mariadbd' is not an executable file"),
        (["--baseline-cluster", "x.yaml"], "--baseline-cluster: the candidate's cluster is --cluster FILE"),
    ],
)
def test_an_ab_run_refuses_what_makes_no_sense_in_one_line(args: list[str], message: str) -> None:
    res = run_pytest("--collect-only", "-q", "tests/rtt", *args)
    assert res.returncode == 4, res.stdout + res.stderr
    assert message in res.stderr


def test_an_ab_run_collects_the_fault_matrix_and_skips_the_other_families(tmp_path: Path) -> None:
    res = run_pytest("--collect-only", "-q", "--ab", "tests/rtt", "tests/sysbench", "--rtt", "0,50ms",
                     "--concurrency", "10", "--scenario", "primary", "--lab-dir", str(tmp_path / "lab"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "test_rtt[primary-50ms-c10]" in res.stdout
    assert not (tmp_path / "lab").exists(), "collection must not start a lab"
    res = run_pytest("-rs", "--ab", "tests/sysbench", "--concurrency", "10", "--lab-dir", str(tmp_path / "lab"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("--ab: the sysbench family does not run A/B yet (only the fault families on the probe engine do: "
            "rtt, bandwidth, loss)") in res.stdout
    assert " passed" not in res.stdout
    assert not (tmp_path / "lab").exists(), "skipped cells must not start a lab"


def test_ab_on_tidb_opens_both_clusters_and_dry_runs_both_plans(tmp_path: Path) -> None:
    """``--cluster`` the candidate, ``--baseline-cluster`` the baseline: under
    --dry-run both are opened (nothing contacted) and each level's plan is
    printed for both; one cluster given as both sides is refused."""
    data = ROOT / "selftests" / "data"
    display, topology = data / "tiup_display_seed000.txt", data / "tiup_topology_seed000.yaml"
    res = run_pytest("tests/rtt", "-k", "rtt and tikv_write", "--cluster", str(display), "--baseline-cluster",
                     str(topology), "--rtt", "50ms", "--concurrency", "10", "--dry-run", "-s", "-p", "no:randomly",
                     timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "dry run of tikv_write 50ms" in res.stdout
    assert "on the baseline's cluster:" in res.stdout
    same = run_pytest("--collect-only", "-q", "tests/rtt", "--cluster", str(display), "--baseline-cluster",
                      str(display))
    assert same.returncode == 4
    assert "--baseline-cluster: the same file as --cluster" in same.stderr


def test_the_noise_of_a_pair_comes_from_every_round_of_its_abba_blocks() -> None:
    """Stationary noise of 10 % per round: a pair's log ratio strays by 14 %
    (sqrt 2 x 10 %), estimated with rounds - blocks - 1 degrees of freedom;
    a false alarm at p <= 0.01 one time in a hundred, drift or not."""
    import random

    from wanbench.gate.ab_checks import pair_noise
    from wanbench.interleave import schedule

    rng = random.Random(7)
    assert pair_noise([1.0], [1.0]) == (pytest.approx(math.nan, nan_ok=True), 0)
    assert pair_noise([1.0] * 3, [1.0] * 3)[1] == 6 - 2 - 1
    sds, alarms = [], 0
    for _ in range(2000):
        cand, base, level = [], [], 0.0
        for a in schedule(8):
            level += rng.gauss(0, 0.05)  # the machine drifts between rounds
            (cand if a else base).append(math.exp(level + rng.gauss(0, 0.1)))
        sds.append(pair_noise(cand, base)[0])
        o = assess_ab(QPS, cand, base, alpha_each=0.01)
        assert o is not None
        alarms += o.p_worse <= 0.01
    assert math.sqrt(sum(sd * sd for sd in sds) / len(sds)) == pytest.approx(0.1 * math.sqrt(2), rel=0.25)
    assert alarms / 2000 < 0.02


def test_a_sides_server_settings(tmp_path: Path) -> None:
    """What a lab's servers run with: options as given (dashes optional), the
    lab's own options refused by name, a TiDB config fragment merged over the
    lab's (TOML forbids a key twice, so the two cannot be concatenated)."""
    import tomllib

    from wanbench.errors import ConfigError
    from wanbench.profiles.base import Credentials
    from wanbench.profiles.lab.mariadb import LabMariadb
    from wanbench.profiles.lab.server_settings import (
        RESERVED_MARIADB,
        ServerSettings,
        parse_server_config,
        parse_server_option,
    )
    from wanbench.profiles.lab.tidb import TIDB_CONFIG, merged_config

    assert parse_server_option("performance-schema=ON") == "--performance-schema=ON"
    assert parse_server_option("--general-log") == "--general-log"
    settings = ServerSettings(options=("--performance-schema=ON",))
    argv = LabMariadb(tmp_path, Credentials("u", "p")).argv("primary", port=1, server_id=1, semisync_timeout_ms=100,
                                                              server=settings)
    assert argv[-1] == "--performance-schema=ON"  # last: mariadbd takes the last value of an option
    assert "--performance-schema=OFF" in argv
    with pytest.raises(ConfigError, match="sets --datadir itself"):
        ServerSettings(options=("--datadir=/tmp/x",)).check(RESERVED_MARIADB, "mariadb")
    assert ServerSettings.from_json(settings.to_json()) == settings
    fragment = tmp_path / "tidb.toml"
    fragment.write_text("token-limit = 100\n[log]\nlevel = \"info\"\n[performance]\nmax-procs = 1\n")
    merged = tomllib.loads(merged_config(TIDB_CONFIG, Path(parse_server_config(str(fragment))).read_text()))
    assert merged["token-limit"] == 100
    assert merged["log"]["level"] == "info"
    assert merged["performance"]["max-procs"] == 1
    assert merged["status"]["status-host"] == "127.0.0.1"  # the lab's own settings stay
    (tmp_path / "bad.toml").write_text("= nonsense")
    with pytest.raises(ConfigError, match="is not TOML"):
        parse_server_config(str(tmp_path / "bad.toml"))
