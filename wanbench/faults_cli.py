"""``python -m wanbench faults list|clear [--cluster FILE] [--dry-run]``.

Without ``--cluster``: the embedded lab on this machine (its toxics, its tc
and nft faults, and dead runs' leftovers; live faults of other runs here are
listed and left alone). With ``--cluster``: every host of the topology, over
SSH, each host's wanbench tc qdiscs, nft tables and dead-man state files;
``clear`` removes all of them, live or not (a run whose fault was removed
reports its cells broken).
"""

from __future__ import annotations

import argparse
from typing import Any

from wanbench.faults.deadman import STATE_DIR


def register(sub: Any) -> None:
    p = sub.add_parser("faults", help="list or remove wanbench's faults on the lab or on every host of a cluster",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=("list", "clear"))
    p.add_argument("--cluster", metavar="FILE", default=None,
                   help="cluster file (tiup topology, `tiup cluster display` output, wanbench cluster YAML); "
                        "default: the embedded lab")
    p.add_argument("--dry-run", action="store_true", help="clear: say what would be removed, remove nothing")
    p.add_argument("--dir", metavar="DIR", default=None, help="lab run directory (default: .run/lab)")
    p.add_argument("--port-base", metavar="PORT", type=int, default=None,
                   help="the lab's first port (default: 23300 or $WANBENCH_LAB_PORT_BASE)")
    p.add_argument("--state-dir", metavar="DIR", default=STATE_DIR,
                   help=f"dead-man state directory on the hosts (default: {STATE_DIR})")
    p.add_argument("--ssh-accept-new-hosts", action="store_true",
                   help="trust and record SSH host keys not yet in known_hosts (a changed key is always refused)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.cluster is None:
        return _lab(args)
    return _cluster(args)


def _lab(args: argparse.Namespace) -> int:
    from wanbench.profiles.lab.servers import Lab

    lab = Lab(args.dir, args.port_base)
    mine, others = lab.faults()
    if args.action == "list":
        for f in mine:
            print(f.line)
        for f in others:
            print(f"{f.line} (another live run's: `clear` leaves it)")
        print(f"{len(mine)} fault(s) of the lab at port base {lab.port_base} or of dead runs, "
              f"{len(others)} of other live runs")
        return 0
    done = lab.clear_faults(dry_run=args.dry_run)
    for line in done:
        print(line)
    for f in others:
        print(f"left {f.line} (another live run's)")
    print(f"{'would remove' if args.dry_run else 'removed'} {len(done)} fault(s)")
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from wanbench.faults.inventory import clear_found, host_faults
    from wanbench.profiles.tidb.preflight import ssh_executors
    from wanbench.profiles.tidb.topology import load_cluster

    topology = load_cluster(args.cluster)
    executors = ssh_executors(topology, accept_new_host_keys=args.ssh_accept_new_hosts)
    total = 0
    try:
        for host, ex in executors.items():
            found = host_faults(ex, args.state_dir)
            total += len(found)
            if args.action == "list":
                for f in found:
                    print(f.line)
                if not found:
                    print(f"{host}: no wanbench fault")
            else:
                for line in clear_found(ex, found, state_dir=args.state_dir, dry_run=args.dry_run):
                    print(line)
    finally:
        for ex in executors.values():
            ex.close()
    verb = {"list": "found", "clear": "would remove" if args.dry_run else "removed"}[args.action]
    print(f"{verb} {total} fault(s) on {len(executors)} host(s)")
    return 0
