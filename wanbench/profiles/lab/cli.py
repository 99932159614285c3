"""``python -m wanbench lab up | status | down``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from wanbench.profiles.lab import running
from wanbench.profiles.lab.flavours import open_lab
from wanbench.profiles.lab.layout import CPU_LAYOUTS, DEFAULT_CPU_LAYOUT, FLAVOURS


def register(sub: Any) -> None:
    p = sub.add_parser("lab", help="start, inspect or stop the embedded lab",
                       description="Control the embedded lab (MariaDB primary + semi-sync replica + HAProxy, "
                                   "or with --flavour tidb one tidb-server with in-process storage + HAProxy; "
                                   "every link through Toxiproxy) by hand.")
    p.add_argument("action", choices=("up", "status", "down"))
    p.add_argument("--dir", metavar="DIR", default=None, help="run directory (default: .run/lab)")
    p.add_argument("--port-base", metavar="PORT", type=int, default=None,
                   help="first of the lab's ports (default: 23300 or $WANBENCH_LAB_PORT_BASE)")
    p.add_argument("--cpus", metavar="LAYOUT", choices=CPU_LAYOUTS, default=DEFAULT_CPU_LAYOUT,
                   help="'split': SQL servers on their own CPUs, clients and fault points on the others; "
                        "'shared': no pinning (default: " + DEFAULT_CPU_LAYOUT + ")")
    p.add_argument("--semisync-timeout", metavar="MS", type=int, default=None,
                   help="rpl_semi_sync_master_timeout of a lab this command starts, in ms: how long a commit "
                        "waits for the replica before the primary falls back to asynchronous replication "
                        "(default: 30000; a running lab keeps its value)")
    p.add_argument("--flavour", metavar="NAME", choices=FLAVOURS, default=None,
                   help="with 'up': 'mariadb' (a primary and its semi-sync replica) or 'tidb' (TiDB's SQL tier, "
                        "storage in-process; build it once with scripts/setup --tidb). Default: the running lab's, "
                        "else mariadb")
    p.add_argument("--prometheus", action="store_true",
                   help="with 'up': also start Prometheus (1 s scrapes) with node and mysqld exporters on "
                        "ports base+10..13 (the TiDB lab: node exporter, and tidb-server's own /metrics); "
                        "'down' stops them (default: off)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    lab = open_lab(args.dir, args.port_base, args.cpus, semisync_timeout_ms=args.semisync_timeout,
                   flavour=args.flavour if args.action == "up" else None)
    if args.action == "up":
        started = lab.up(owner="manual")
        status = running.status(lab)
        if args.prometheus:
            status["prometheus"] = running.start_prometheus(lab).url
        print(json.dumps({"started": started, **status}, indent=2))
        return 0
    if args.action == "status":
        status = running.status(lab)
        print(json.dumps(status, indent=2))
        return 0 if status["up"] else 3
    for line in lab.down():
        print(line)
    return 0
