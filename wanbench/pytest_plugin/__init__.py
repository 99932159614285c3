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

import copy
import warnings
from typing import Any

import pytest

from wanbench.pytest_plugin.families import families_of

pytest_plugins = [
    # the machinery: options, the hand-over between xdist processes, progress,
    # scheduling over several clusters, the profile, the results, the gate, Allure
    "wanbench.pytest_plugin.options",
    "wanbench.pytest_plugin.handover",
    "wanbench.pytest_plugin.progress",
    "wanbench.pytest_plugin.scaleout",
    "wanbench.pytest_plugin.profile",
    "wanbench.pytest_plugin.reporting",
    "wanbench.pytest_plugin.gate",
    "wanbench.pytest_plugin.chain",
    "wanbench.pytest_plugin.allure_report",
    # the fixtures the tests use (fixtures/ in the checkout, wanbench.fixtures in the wheel)
    "wanbench.fixtures.cluster",
    "wanbench.fixtures.faults",
    "wanbench.fixtures.evidence",
    "wanbench.fixtures.workloads",
    "wanbench.fixtures.results",
    # the families (one module each: its matrix, fixtures, tables and summary)
    "wanbench.fixtures.sysbench",
    "wanbench.fixtures.tpcc",
    "wanbench.fixtures.ycsb",
    "wanbench.fixtures.availability",
]

#: marker name -> description: the self-tests' markers. With the families' (``families_of``: the
#: built-in ``FAMILIES`` and the ``pytest_wanbench_families`` hook's), the only place markers are
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
    retake_rootdir(early_config, parser, args)


def retake_rootdir(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Choose the rootdir and ini file again, now that our options are known.

    pytest picks the rootdir and reads ``pytest.ini`` before it loads any
    plugin, so in ``pytest --cluster /elsewhere/display.txt`` it takes the
    option's value for a test path: the rootdir becomes ``/elsewhere``, the
    project's ``pytest.ini`` (``testpaths``, ``addopts``, ...) is never read
    and ``selftests/`` is collected with the suite. No hook runs earlier than
    this one, so here the choice is made again with the options parsed
    properly, and, if it differs, what pytest does with an ini file is done
    now: its ``addopts`` go in front of the arguments, its ``pythonpath``
    onto ``sys.path``, ``--confcutdir`` defaults to its directory. This uses
    pytest internals (pinned pytest); selftests/test_plugin.py guards it.
    """
    from _pytest.config.findpaths import determine_setup

    ns = parser.parse_known_args(args, namespace=copy.copy(config.option))
    rootpath, inipath, inicfg, _ignored = determine_setup(
        inifile=ns.inifilename, override_ini=ns.override_ini, args=ns.file_or_dir,
        rootdir_cmd_arg=ns.rootdir or None, invocation_dir=config.invocation_params.dir,
    )
    if (rootpath, inipath) == (config.rootpath, config.inipath) or config.inipath is not None:
        return  # the same choice, or pytest found an ini file itself: keep it
    cfg: Any = config  # private attributes, set exactly where Config.parse sets them
    cfg._rootpath, cfg._inipath, cfg._inicfg = rootpath, inipath, inicfg
    cfg._inicache.clear()
    parser.extra_info["rootdir"] = str(rootpath)
    parser.extra_info["inifile"] = str(inipath)
    args[:] = cfg._validate_args(config.getini("addopts"), "via addopts config") + args
    config.known_args_namespace = parser.parse_known_args(args, namespace=copy.copy(config.option))
    if config.known_args_namespace.confcutdir is None:  # as Config.parse: unless given
        config.known_args_namespace.confcutdir = str(inipath.parent if inipath else rootpath)
    cfg._configure_python_path()
