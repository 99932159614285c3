"""``wanbench <command>`` (or ``python -m wanbench <command>``): lab control,
faults, topology, compare, watchdog, run.

Each command lives in its own module, which exposes ``register(subparsers)``;
the module list below is the whole command table.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from wanbench.errors import WanbenchError

COMMAND_MODULES = [
    "wanbench.profiles.lab.cli",
    "wanbench.watchdog",
    "wanbench.faults_cli",
    "wanbench.suite_cli",
    # -- commands: add modules below --
    "wanbench.gate.cli",
    "wanbench.profiles.tidb.cli",
]


def build_parser() -> argparse.ArgumentParser:
    # `wanbench` (the console script) or `python -m wanbench`
    prog = "python -m wanbench" if sys.argv[0].endswith("__main__.py") else "wanbench"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["run"]:  # everything after `run` belongs to pytest (argparse would reorder it)
        from wanbench.suite_cli import run_pytest

        return run_pytest(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WanbenchError as exc:
        print(f"wanbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wanbench: interrupted", file=sys.stderr)
        return 130
