"""``python -m wanbench topology FILE``: what wanbench understood of a cluster file.

Prints the parsed model as JSON (no connection is made, no password is
read). With ``--plan SCENARIO --level LEVEL`` it prints the dry run of that
fault instead: every command per host, nothing executed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from wanbench.faults.base import FAMILY_KIND, Level
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.plan import plan_fault, render_dry_run
from wanbench.profiles.tidb.tcplan import tc_renderer
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.topology import load_catalog


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "topology",
        help="parse a tiup topology / `tiup cluster display` output / wanbench cluster YAML and print it",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE",
                   help="cluster file (display text or --format json, tiup YAML or wanbench YAML, pasted as is)")
    p.add_argument("--plan", metavar="SCENARIO", default=None,
                   help="print the dry run of this scenario of the tidb catalog instead of the topology")
    p.add_argument("--family", choices=sorted(FAMILY_KIND), default="rtt",
                   help="fault family of --level. Default: %(default)s")
    p.add_argument("--level", metavar="LEVEL", default="100ms",
                   help="fault level for --plan (50ms, 10mbit, 1%%). Default: %(default)s")
    p.add_argument("--load-host", metavar="ADDR", default=None,
                   help="address sysbench runs from (scopes client-facing rules). Default: from the file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    topology = load_cluster(args.file)
    if args.plan is None:
        doc = topology.to_json()
        doc["settings"] = cluster_settings(topology).to_json()
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    catalog = load_catalog("tidb")
    scenario = catalog.get(args.plan)
    if scenario is None:
        print(f"unknown scenario {args.plan!r} (known: {', '.join(catalog)})", file=sys.stderr)
        return 2
    level = Level.parse(FAMILY_KIND[args.family], args.level)
    plan = plan_fault(scenario, topology, level, load_host=args.load_host)
    sys.stdout.write(render_dry_run(plan, commands=tc_renderer(), ssh_user=cluster_settings(topology).ssh_user))
    return 0
