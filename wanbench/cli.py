"""``python -m wanbench <command>``: lab control, faults, topology, compare, watchdog.

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
    "wanbench.lab_cli",
    "wanbench.watchdog",
    "wanbench.faults_cli",
    # -- commands: add modules below --
    "wanbench.gate.cli",
    "wanbench.profiles.tidb_cli",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m wanbench", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WanbenchError as exc:
        print(f"wanbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wanbench: interrupted", file=sys.stderr)
        return 130
