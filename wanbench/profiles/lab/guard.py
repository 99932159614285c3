"""The lab's guard: stops a lab whose starting session died before that
session's watchdog was up.

A session starts the lab's servers, then sweeps stale faults, then spawns
its watchdog (``wanbench/watchdog.py``), which stops the lab when the session
dies. A ``kill -9`` in between (seen: the runner killed two seconds into a
lab start) left the servers running with nobody to stop them. So the lab
spawns this guard before it starts any server: once a second it checks the
session that owns the lab, and when that session is gone it stops the lab
under the lab's lock (``Lab.down_if_owned_by``: a lab another run has taken
over since is left alone), after removing the dead session's scratch
directories (its watchdog, which does the same, may be stopped with the lab
before it got there). It exits when the lab is stopped or taken over,
so it lives exactly as long as the lab it guards. A lab started by hand
(``lab up``) has no guard.

``python -m wanbench.profiles.lab.guard --lab-dir DIR --port-base P --owner-pid PID --owner-start T``
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path

from wanbench import scratch
from wanbench.procs import proc_start_time

POLL_S = 1.0


def owner_of(state_file: Path) -> dict[str, object] | None:
    try:
        return dict(json.loads(state_file.read_text()).get("owner") or {})
    except (FileNotFoundError, ValueError):
        return None


def guard(lab_dir: Path, port_base: int, pid: int, start: int, *, poll_s: float = POLL_S,
          stop: threading.Event | None = None) -> str:
    """Watch until the lab is gone, taken over, or its owner died (then stop it); say which."""
    from wanbench.profiles.lab.servers import Lab

    stop = stop or threading.Event()
    state = lab_dir / "lab.json"
    while True:
        owner = owner_of(state)
        if owner is None:
            return "the lab was stopped"
        if owner.get("pid") != pid or owner.get("start_time") != start:
            return "another run owns the lab now"
        if proc_start_time(pid) != start:
            # the dead owner's scratch first, as its watchdog does: stopping the lab stops that watchdog,
            # which may not have got to it yet (the two race for the same dead runner)
            swept = [f"removed {path}" for path, _why in scratch.sweep_stale(owner_pid=pid)]
            done = swept + Lab(lab_dir, port_base).down_if_owned_by(pid, start)
            return f"owner pid {pid} died; " + ("; ".join(done) if done else "nothing left to stop")
        if stop.wait(poll_s):
            return "asked to stop"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wanbench.profiles.lab.guard", description=__doc__)
    ap.add_argument("--lab-dir", required=True, type=Path)
    ap.add_argument("--port-base", required=True, type=int)
    ap.add_argument("--owner-pid", required=True, type=int)
    ap.add_argument("--owner-start", required=True, type=int)
    args = ap.parse_args(argv)
    print(guard(args.lab_dir, args.port_base, args.owner_pid, args.owner_start), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
