"""The runner's dead-man for Toxiproxy faults.

Toxics never expire and outlive the client that made them. The session
starts this watchdog as a detached process; it removes every toxic of the
run (``wb-<tag>-*``) as soon as the runner process disappears (SIGKILL
included) or a fault's deadline passes while the runner hangs, then exits.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from wanbench.errors import InfrastructureError
from wanbench.faults.toxiproxy import TOXIC_PREFIX, ToxiproxyClient
from wanbench.procs import proc_start_time


def register(sub: Any) -> None:
    p = sub.add_parser("watchdog", help="(internal) clear a run's toxics when the runner dies")
    p.add_argument("--runner-pid", type=int, required=True)
    p.add_argument("--runner-start", type=int, required=True)
    p.add_argument("--toxiproxy", required=True, help="Toxiproxy API URL (loopback)")
    p.add_argument("--tag", required=True)
    p.add_argument("--deadlines", required=True, help="JSON file: {toxic prefix: unix deadline}")
    p.add_argument("--interval", type=float, default=0.5)
    p.set_defaults(func=run)


def clear(client: ToxiproxyClient, prefix: str) -> list[str]:
    try:
        return client.sweep(prefix)
    except InfrastructureError:
        return []


def run(args: argparse.Namespace) -> int:
    client = ToxiproxyClient(args.toxiproxy, timeout=3.0)
    run_prefix = f"{TOXIC_PREFIX}{args.tag}-"
    deadlines = Path(args.deadlines)
    while True:
        if proc_start_time(args.runner_pid) != args.runner_start:
            removed = clear(client, run_prefix)
            print(f"watchdog: runner {args.runner_pid} is gone; removed {removed}", flush=True)
            return 0
        try:
            pending: dict[str, float] = json.loads(deadlines.read_text())
        except (FileNotFoundError, ValueError):
            pending = {}
        now = time.time()
        for prefix, deadline in pending.items():
            if now > deadline:
                removed = clear(client, prefix)
                if removed:
                    print(f"watchdog: deadline passed for {prefix}; removed {removed}", flush=True)
        time.sleep(args.interval)
