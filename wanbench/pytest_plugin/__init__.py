"""wanbench's pytest plugin, registered under the ``pytest11`` entry point.

pytest loads entry-point plugins before it parses the command line, so every
``--cluster``-style option, the markers and the fixtures are known wherever
pytest runs: in the checkout, in another directory, from a wheel. (Options
registered only by a root ``conftest.py`` are unknown until pytest has found
that conftest, and by then ``--cluster /abs/path`` has already been taken for
a test path.)

The fixture and hook modules below are loaded as this module's own plugins;
the list is the whole table. A module that imports another one at its top
must come after it (pytest marks each for assertion rewriting as it loads it,
and warns about one imported earlier). Markers are registered here too, so
``--strict-markers`` works with no ``pytest.ini`` at all.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import pytest

from wanbench.families import fixture_modules
from wanbench.pytest_plugin.families import families_of

pytest_plugins = [
    # the machinery: options, the hand-over between xdist processes, progress,
    # scheduling over several clusters, the profile, the results, the gate, Allure
    "wanbench.pytest_plugin.options",
    "wanbench.pytest_plugin.handover",
    "wanbench.pytest_plugin.progress",
    "wanbench.pytest_plugin.scaleout",
    "wanbench.pytest_plugin.profile",
    "wanbench.pytest_plugin.ab",
    "wanbench.pytest_plugin.reporting",
    "wanbench.pytest_plugin.gate",
    "wanbench.pytest_plugin.chain",
    "wanbench.pytest_plugin.allure_report",
    # the fixtures the tests use (fixtures/ in the checkout, wanbench.fixtures in the wheel)
    "wanbench.fixtures.cluster",
    "wanbench.fixtures.ab",
    "wanbench.fixtures.faults",
    "wanbench.fixtures.evidence",
    "wanbench.fixtures.workloads",
    "wanbench.fixtures.results",
    # the families' fixture modules (one each: its matrix and fixtures), as the family registry names
    # them (``Family.fixtures``, wanbench/families.py)
    *fixture_modules(),
]

#: marker name -> description: the self-tests' markers. With the families' (``families_of``: the
#: family registry's and the ``pytest_wanbench_families`` hook's), the only place markers are
#: registered (``pytest.ini`` lists none), so the list cannot drift.
MARKERS = {
    "lab": "self-test that starts real lab servers (MariaDB, HAProxy, Toxiproxy)",
    "netns": "self-test that builds network-namespace hosts (needs root)",
    "slow": "self-test that takes more than a few seconds",
}


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from wanbench.pytest_plugin import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_configure(config: pytest.Config) -> None:
    # A user's own pytest.ini may declare the same markers: add only the
    # missing ones, so `pytest --markers` lists each once.
    known = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in config.getini("markers")}
    for name, text in {**families_of(config), **MARKERS}.items():
        if name not in known:
            config.addinivalue_line("markers", f"{name}: {text}")


@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: around pytest-benchmark's own wrapper
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """When every cell errored (the lab did not start, say), pytest-benchmark
    warns at the end that it saved nothing (--benchmark-json/-autosave). With
    ``filterwarnings = error`` that warning was an exception inside
    pytest_sessionfinish: a traceback instead of the run's summary and the
    errors that explain it. Shown as a warning instead."""
    from pytest_benchmark.logger import PytestBenchmarkWarning

    with warnings.catch_warnings():
        warnings.filterwarnings("default", message="Not saving anything", category=PytestBenchmarkWarning)
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    restart_with_joined_values(early_config)


#: set in the environment of a restarted pytest, so it restarts at most once
RESTARTED = "WANBENCH_RESTARTED_WITH_JOINED_VALUES"


def joined_values(args: list[str], value_options: set[str]) -> list[str]:
    """``args`` with every ``--opt VALUE`` of ours whose value is a path that
    exists written as ``--opt=VALUE``: the form pytest cannot take for a test
    path."""
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in value_options and i + 1 < len(args) and os.path.exists(args[i + 1]):
            out.append(f"{arg}={args[i + 1]}")
            i += 2
            continue
        out.append(arg)
        i += 1
    return out


def restart_with_joined_values(config: pytest.Config) -> None:
    """pytest picks the rootdir and reads ``pytest.ini`` before it knows any
    plugin's options, so in ``pytest --cluster /elsewhere/display.txt`` it
    takes the option's value for a test path: the rootdir becomes
    ``/elsewhere``, the project's ``pytest.ini`` (``testpaths``, ``addopts``)
    is never read and ``selftests/`` is collected with the suite. When that
    happened (pytest found no ini file, and a value of ours is an existing
    path), the same command is started again in this process's place
    (``exec``: same PID, same terminal, nothing has run yet) with
    ``--cluster=/elsewhere/display.txt``, which pytest reads as an option
    from the start. Only the command line's own process is replaced, never
    a program that called ``pytest.main()``."""
    from wanbench.pytest_plugin.options import VALUE_OPTIONS

    given = list(config.invocation_params.args)
    if config.inipath is not None or os.environ.get(RESTARTED) or sys.argv[1:] != given:
        return
    joined = joined_values(given, VALUE_OPTIONS)
    if joined == given:
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # pytest already captures fds 1 and 2: give the new process the real ones
        capture.suspend_global_capture(in_=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "pytest", *joined], {**os.environ, RESTARTED: "1"})
