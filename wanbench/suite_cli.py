"""``wanbench run [PYTEST ARGS...]``: the performance suite, from anywhere.

The suite (``tests/`` in the checkout) ships in the package as
``wanbench.suite``; this runs ``pytest --pyargs wanbench.suite`` with the
given arguments: this process becomes that pytest (exec), so it is exactly
``python -m pytest --pyargs wanbench.suite ARGS`` (a fresh interpreter: pytest
can rewrite the plugin's asserts, and signals and the exit status are pytest's).
Every pytest and wanbench option works as with ``pytest`` itself.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

SUITE = "wanbench.suite"


def register(sub: Any) -> None:
    # Listed here for `wanbench --help`; wanbench.cli passes `run ...` straight to run_pytest.
    p = sub.add_parser("run", help="run the performance suite (pytest --pyargs wanbench.suite ...)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="PYTEST ARGS",
                   help="arguments for pytest, e.g. -k 'rtt and replica_write' --rtt 0,50ms "
                        "(a leading -- is dropped)")
    p.set_defaults(func=run)


def pytest_argv(extra: list[str]) -> list[str]:
    """pytest's arguments: the suite package unless a part of it is named."""
    if extra[:1] == ["--"]:
        extra = extra[1:]
    targets = [] if any(a == SUITE or a.startswith(SUITE + ".") for a in extra) else [SUITE]
    return ["--pyargs", *targets, *extra]


def run(args: argparse.Namespace) -> int:
    return run_pytest(list(args.pytest_args))


def run_pytest(extra: list[str]) -> int:
    """What ``wanbench run ...`` does (wanbench.cli hands it the raw arguments;
    ``wanbench run --help`` is pytest's help, wanbench's options included)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *pytest_argv(extra)])
    return 0  # not reached: execv replaces this process
