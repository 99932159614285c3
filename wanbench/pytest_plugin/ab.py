"""Release against release in pytest (``--ab``, ``wanbench.ab``): which
options go together, the options each side's cluster is opened with, whether
the A/A guard holds, and the A/B table at the end of the run.

An A/B run opens two clusters in one process: the candidate (the session's
``cluster``, as in any run) and the baseline (``baseline_cluster``,
``wanbench.fixtures.ab``). On the lab they are two labs: the candidate's
where a one-lab run's would be, the baseline's in ``<lab dir>-baseline`` on
the next block of ports (``--lab-port-base`` + 20), their servers differing
by the ``--candidate-server-*`` and ``--baseline-server-*`` options. On TiDB
they are ``--cluster`` and ``--baseline-cluster``. Neither lab is pinned to
CPUs of its own: the side being measured has the machine, the other idles.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from wanbench.gate.verdict import Judge, Verdict
    from wanbench.results import CellResult

from wanbench import ab
from wanbench.errors import ConfigError
from wanbench.gate import curtail
from wanbench.profiles.base import ClusterSetup
from wanbench.scaleout import LAB_PORT_STRIDE

SIDE_OPTIONS = ("server_option", "server_binary", "server_config")
#: options that make the candidate differ from the baseline (the A/A guard's ``auto`` looks for them)
DIFFERENCES = ("candidate_server_option", "baseline_server_option", "candidate_server_binary",
               "baseline_server_binary", "candidate_server_config", "baseline_server_config", "lab_cpu_limit",
               "lab_handicap", "probe_extra_round_trips", "probe_extra_bytes", "probe_extra_reads")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def ab_mode(config: pytest.Config) -> bool:
    """Does this run measure a candidate and a baseline side by side?"""
    return bool(config.getoption("ab", False) or config.getoption("baseline_cluster", None))


def named_differences(config: pytest.Config) -> list[str]:
    """What the user named as the difference between the sides (``--candidate-server-option=...``)."""
    out = []
    for name in DIFFERENCES:
        value = config.getoption(name, None)
        if isinstance(value, dict):
            value = ",".join(f"{k}={v:g}" for k, v in value.items())
        elif isinstance(value, list):
            value = ",".join(map(str, value))
        if value:
            out.append(f"{_flag(name)}={value}")
    if config.getoption("baseline_cluster", None):
        out.append(f"--cluster={config.getoption('cluster')} vs --baseline-cluster="
                   f"{config.getoption('baseline_cluster')}")
    return out


def aa_guard(config: pytest.Config) -> bool:
    """Does the A/A guard hold (``--ab-aa``): always, never, or when no difference is named."""
    mode = config.getoption("ab_aa", "auto")
    return mode == "on" or (mode == "auto" and not named_differences(config))


def _lab_dir(config: pytest.Config) -> Path:
    from wanbench.profiles.lab.flavours import default_lab_dir

    given = config.getoption("lab_dir", None)
    return Path(given) if given else default_lab_dir(config.getoption("lab_flavour", "mariadb"), config.rootpath)


def side_option(config: pytest.Config, side: str) -> Callable[..., Any]:
    """The options one side's cluster is opened with (``ClusterSetup.option``):
    the run's, with that side's server settings (``server_options``,
    ``server_binary``, ``server_config``) and, for the baseline's lab, its own
    run directory and ports."""
    overrides: dict[str, Any] = {
        "server_options": tuple(config.getoption(f"{side}_server_option", None) or ()),
        "server_binary": config.getoption(f"{side}_server_binary", None),
        "server_config": config.getoption(f"{side}_server_config", None),
    }
    if side == "baseline" and not config.getoption("cluster", None):
        from wanbench.profiles.lab.flavours import CLASSES

        lab_dir = _lab_dir(config)
        flavour = CLASSES[config.getoption("lab_flavour", "mariadb")]
        overrides["lab_dir"] = str(lab_dir.with_name(f"{lab_dir.name}-baseline"))
        candidate = flavour(lab_dir, config.getoption("lab_port_base", None))
        overrides["lab_port_base"] = candidate.port_base + LAB_PORT_STRIDE

    def option(name: str, *default: Any) -> Any:
        if name in overrides:
            return overrides[name]
        return config.getoption(name, *default)

    return option


def baseline_setup(config: pytest.Config, note: Callable[[str], None]) -> ClusterSetup:
    """How the baseline's cluster is opened: its side's options, its own lab
    directory and ports (lab) or ``--baseline-cluster`` (TiDB), a tag of its own."""
    topology = None
    path = config.getoption("baseline_cluster", None)
    if path:
        from wanbench.profiles.tidb.topology import load_cluster
        from wanbench.pytest_plugin.profile import profile_of

        try:
            topology = load_cluster(path)
        except ConfigError as exc:
            raise pytest.UsageError(f"--baseline-cluster: {exc}") from None
        want = profile_of(config).name
        if topology.profile != want:
            raise pytest.UsageError(f"--baseline-cluster: {path} is a {topology.profile} cluster, the candidate "
                                    f"(--cluster) a {want} one: an A/B run compares like with like")
    return ClusterSetup(option=side_option(config, "baseline"), note=note, topology=topology,
                        tag=f"{os.getpid()}b", rootpath=config.rootpath)


def candidate_option(config: pytest.Config) -> Callable[..., Any]:
    """The options the session's cluster is opened with: the candidate's side in an A/B run."""
    return side_option(config, "candidate") if ab_mode(config) else config.getoption


def baseline_census(cell: CellResult, level0: CellResult | None, lower: CellResult | None) -> None:
    """An A/B cell's baseline side gets its census as the candidate's was made
    (``Gate.census``): against the baseline side of the run's level-0 cell, its
    prediction from the baseline side of the level below, its own counters."""
    from wanbench.census import census_of

    record = cell.workload.extra.get(ab.KEY)
    if not record:
        return
    below = (lower.workload.extra.get(ab.KEY) or {}).get(ab.OTHER, {}).get("census") if lower is not None else None
    record[ab.OTHER]["census"] = census_of(
        ab.baseline_cell(cell.to_json()), ab.baseline_cell(level0.to_json()) if level0 is not None else None,
        {**below, "test_id": lower.test_id} if below and lower is not None else None)


def ab_settled(judge: Judge, cell: CellResult, *, cells: int, looks: int, planned: int) -> curtail.Settled | None:
    """Whether an A/B cell measured so far may stop (``wanbench.gate.curtail``): the
    pairs left can move the mean log ratio by t(0.995, df) times a pair's noise
    (``ab_checks.pair_noise``) times sqrt(1/k - 1/K); the candidate's rounds are moved that far both
    ways (the baseline's stay: the spread is of the pairs), and the cell stops
    when every QPS and latency check stands the same all three times."""
    from dataclasses import replace

    from wanbench.gate.ab_checks import pair_spread
    from wanbench.gate.baseline import RunCell
    from wanbench.gate.verdict import looks_worse

    c = RunCell.of(cell)
    side = c.ab
    if side is None:
        return None
    spread = pair_spread(c.samples, side)

    def standings_of(samples: dict[str, list[float]], reference: dict[str, list[float]]) -> list[curtail.Standing]:
        verdict, _pending = judge.verdict(c.key, samples, cells=cells, looks=looks, client=c.client,
                                          problems=c.problems, ab=replace(side, samples=reference))
        return [curtail.Standing(f"{o.check.kind} {o.check.metric}", o.status, o.reason, looks_worse(o),
                                 o.check.per_run) for o in verdict.outcomes if o.check.kind != "census"]

    return curtail.settled(standings_of, c.samples, side.samples, within=spread,
                           reference_within={m: (0.0, df) for m, (_sd, df) in spread.items()},
                           done=len(cell.workload.rounds), planned=planned)


def _level_of(item: pytest.Item) -> tuple[str, str] | None:
    """The (family, level label) of a fault cell's test, None for other tests."""
    from wanbench.pytest_plugin.families import family_marker

    fault = getattr(getattr(item, "callspec", None), "params", {}).get("fault")
    label = getattr(fault[1], "label", None) if isinstance(fault, tuple) and len(fault) == 2 else None
    family = family_marker(item)
    return (family, str(label)) if family and label is not None else None


def planned_levels(items: list[pytest.Item]) -> int:
    """How many level verdicts an A/B run of these gated tests gives
    (``wanbench.gate.ab_levels``): each one more comparison for the session's alpha."""
    from wanbench.gate.ab_levels import planned_levels as count

    return count(lv for lv in map(_level_of, items) if lv)


def end_levels(session: pytest.Session, levels: list[tuple[Verdict, str]]) -> None:
    """An A/B run's level verdicts, each with how it ends the run (the gate
    judged them at the end of the session): kept beside the cells for the
    results JSON, the summary and Allure (``ResultsSink.levels``); a level
    that regressed fails the run as a failed cell would, though every cell
    passed (an undecided level never does, ``ends_as``)."""
    from wanbench.gate.verdict import FAILED
    from wanbench.pytest_plugin.reporting import sink_of

    sink_of(session.config).levels = [{**v.to_json(), "ends": ends} for v, ends in levels]
    if any(ends == FAILED for _v, ends in levels) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _level_lines(config: pytest.Config) -> list[str]:
    """The A/B run's levels, each its cells pooled, as the summary prints them."""
    from wanbench.gate.outcome import FAILED, tag_of
    from wanbench.pytest_plugin.reporting import sink_of

    levels = sink_of(config).levels
    if not levels:
        return []
    lines = ["", "levels (each fault level's cells pooled, QPS candidate / baseline):"]
    for v in levels:
        fails = " -- fails the run" if v["ends"] == FAILED else ""
        lines.append(f"[{v['status']}] {v['message']} {tag_of(v['status'], v['reasons'])}{fails}")
    return lines


def _same_cluster(candidate: str, baseline: str) -> str | None:
    """Why two cluster files cannot be the two sides of an A/B run: they are one cluster."""
    from wanbench.profiles.tidb.topology import load_cluster

    if Path(candidate).expanduser().resolve() == Path(baseline).expanduser().resolve():
        return "--baseline-cluster: the same file as --cluster; the two sides must be two clusters"
    try:
        a, b = load_cluster(candidate), load_cluster(baseline)
    except ConfigError as exc:
        return f"--cluster/--baseline-cluster: {exc}"
    names = (a.name or Path(candidate).stem, b.name or Path(baseline).stem)
    if names[0] == names[1]:
        return f"--baseline-cluster: {baseline} describes {names[0]}, the candidate's cluster too; the two sides " \
               "must be two clusters"
    return None


def _refusal(config: pytest.Config) -> str | None:
    """Why this combination of options cannot run, in one line; None when it can."""
    given = [n for side in ("candidate", "baseline") for n in (f"{side}_{o}" for o in SIDE_OPTIONS)
             if config.getoption(n, None)]
    value = config.getoption("cluster", None)  # one file is a string once scale-out has read the list
    files = [value] if isinstance(value, str) else list(value or [])
    if not ab_mode(config):
        if given:
            return f"{_flag(given[0])} names one side of an A/B run: add --ab (two labs side by side)"
        return None
    if config.getoption("baseline_cluster", None) and not files:
        return "--baseline-cluster: the candidate's cluster is --cluster FILE; give both"
    if files and not config.getoption("baseline_cluster", None):
        return "--ab with --cluster: name the baseline's cluster with --baseline-cluster FILE"
    if len(files) > 1:
        return "--ab: one --cluster (the candidate) and one --baseline-cluster; several clusters are --labs/-n runs"
    if files and given:
        return (f"{_flag(given[0])} sets a lab's servers; on TiDB the two cluster files are the two sides "
                "(--cluster, --baseline-cluster)")
    if files:
        same = _same_cluster(files[0], config.getoption("baseline_cluster"))
        if same:
            return same
    flavour = config.getoption("lab_flavour", "mariadb")
    if flavour != "tidb" and any(n.endswith("server_config") for n in given):
        name = next(n for n in given if n.endswith("server_config"))
        return f"{_flag(name)} is for the TiDB lab (--lab-flavour tidb); give mariadbd options instead"
    for opt, why in (("labs", "runs its two clusters in one process: leave out --labs"),
                     ("numprocesses", "runs its two clusters in one process: leave out -n"),
                     ("baseline_save", "is judged against its baseline side and records no accepted run: "
                                       "run without --ab to record baselines"),
                     ("no_interleave", "alternates its two sides in every cell (ABBA) by design"),
                     ("load_hosts", "draws its load from this machine (the probe engine's A/B is local)")):
        if config.getoption(opt, None):
            return f"--ab {why}" if opt != "no_interleave" else f"--no-interleave: an A/B run {why}"
    if config.getoption("gate_max_runs", 1) > 1:
        return "--gate-max-runs: an A/B run decides within its run; raise --rounds (the pairs per cell) instead"
    from wanbench.profiles.lab.server_settings import RESERVED_MARIADB, RESERVED_TIDB, ServerSettings

    for side in ("candidate", "baseline"):
        settings = ServerSettings(options=tuple(config.getoption(f"{side}_server_option", None) or ()))
        try:
            settings.check(RESERVED_TIDB if flavour == "tidb" else RESERVED_MARIADB, flavour)
        except ConfigError as exc:
            return f"--{side}-server-option: {exc}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    why = _refusal(config)
    if why:
        raise pytest.UsageError(why)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An A/B run measures the fault families' cells; the others are skipped, saying why."""
    if not ab_mode(config):
        return
    from wanbench import families
    from wanbench.pytest_plugin.families import family_marker

    measured = families.names(families.FAULT)  # the fault matrix's families, on the probe engine
    for item in items:
        family = family_marker(item)
        if family is not None and family not in measured:
            item.add_marker(pytest.mark.skip(reason=f"--ab: the {family} family does not run A/B yet (only the "
                                                    f"fault families on the probe engine do: {', '.join(measured)})"))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not ab_mode(config):
        return
    from wanbench.pytest_plugin.reporting import sink_of
    from wanbench.report.ab_table import ab_rows

    rows = ab_rows([c.to_json() for c in sink_of(config).cells])
    if not rows:
        return
    tr = terminalreporter
    guard = "on (identical sides)" if aa_guard(config) else "off"
    tr.section(f"wanbench A/B: candidate against baseline, pair by pair (A/A guard {guard})")
    differences = named_differences(config)
    tr.write_line("difference named: " + ("; ".join(differences) if differences else "none (an A/A run)"))
    from wanbench.report.tables import text_table

    head = ["cell", "pairs", "QPS cand / base", "QPS change (sd/pair)", "p95 change", "p99 change", "verdict"]
    for line in text_table(head, rows, right=(1, 3, 4, 5)):
        tr.write_line(line)
    for line in _level_lines(config):
        tr.write_line(line)


__all__ = ["aa_guard", "ab_mode", "baseline_setup", "candidate_option", "end_levels", "named_differences",
           "planned_levels", "side_option"]
