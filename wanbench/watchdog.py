"""The lab runner's watchdog: the run's faults go within a second of the runner's death.

Toxics never expire and outlive the client that made them, and the host-side
dead-man of a tc/nft fault waits for its lease to lapse. The session starts
this watchdog as a detached process; as soon as the runner process
disappears (SIGKILL included) it removes every toxic of the run
(``wb-<tag>-*``) and every tc/nft fault whose state file names the run
(with the state file's own clear command); then, if the runner started the
lab (the lab's state names it as owner, PID and start time), it stops the lab
by PID like ``lab down``, and removes the runner's scratch directories, then
exits. A lab started by hand (``lab up``) or by another run is left running.
While the runner lives but hangs (SIGSTOP), it removes a toxic whose lease
(or hard bound) lapsed; tc/nft faults are cleared by their own host-side
timers then.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from wanbench import scratch
from wanbench.errors import InfrastructureError
from wanbench.executors.local import LocalExecutor
from wanbench.faults.deadman import STATE_DIR, DeadMan, clear_states
from wanbench.faults.toxiproxy import TOXIC_PREFIX, ToxiproxyClient, expired_toxic_leases
from wanbench.procs import proc_start_time


def register(sub: Any) -> None:
    p = sub.add_parser("watchdog", help="(internal) clear a run's lab faults when the runner dies")
    p.add_argument("--runner-pid", type=int, required=True)
    p.add_argument("--runner-start", type=int, required=True)
    p.add_argument("--toxiproxy", required=True, help="Toxiproxy API URL (loopback)")
    p.add_argument("--tag", required=True)
    p.add_argument("--leases", required=True, help="directory of the run's toxic lease files")
    p.add_argument("--run-id", default=None, help="run id in the state files of the run's tc/nft faults")
    p.add_argument("--state-dir", default=STATE_DIR, help="dead-man state directory of this machine")
    p.add_argument("--lab-dir", default=None, help="run directory of the lab: stopped if the runner started it")
    p.add_argument("--lab-port-base", type=int, default=None)
    p.add_argument("--interval", type=float, default=0.5)
    p.set_defaults(func=run)


def clear(client: ToxiproxyClient, prefix: str) -> list[str]:
    try:
        return client.sweep(prefix)
    except InfrastructureError:
        return []


def clear_host_faults(run_id: str, state_dir: str) -> list[str]:
    dm = DeadMan(LocalExecutor("localhost"), state_dir=state_dir)
    try:
        return clear_states(dm, lambda st: st.run.run_id == run_id)
    except InfrastructureError as exc:
        return [f"could not clear tc/nft faults: {exc}"]


def stop_lab_of(runner_pid: int, runner_start: int, lab_dir: Path, port_base: int | None) -> list[str]:
    """Stop the lab in ``lab_dir`` if the runner started it (and only then): what ``lab down`` stops."""
    from wanbench.profiles.lab.servers import Lab

    lab = Lab(lab_dir, port_base)
    try:
        return lab.down_if_owned_by(runner_pid, runner_start)
    except (InfrastructureError, OSError) as exc:
        return [f"could not stop the lab in {lab_dir}: {exc}"]


def run(args: argparse.Namespace) -> int:
    client = ToxiproxyClient(args.toxiproxy, timeout=3.0)
    run_prefix = f"{TOXIC_PREFIX}{args.tag}-"
    leases = Path(args.leases)
    while True:
        if proc_start_time(args.runner_pid) != args.runner_start:
            removed = clear(client, run_prefix)
            if args.run_id:
                removed += clear_host_faults(args.run_id, args.state_dir)
            # the scratch first: the lab's run directory going is the last sign that all is clear
            removed += [f"removed {path}" for path, _ in scratch.sweep_stale(owner_pid=args.runner_pid)]
            if args.lab_dir:
                removed += stop_lab_of(args.runner_pid, args.runner_start, Path(args.lab_dir), args.lab_port_base)
            print(f"watchdog: runner {args.runner_pid} is gone; removed {removed}", flush=True)
            return 0
        for path, prefix, why in expired_toxic_leases(leases, time.time()):
            path.unlink(missing_ok=True)  # first: the resumed runner finds its lease gone
            removed = clear(client, prefix)
            print(f"watchdog: {why} for {prefix}; removed {removed}", flush=True)
        time.sleep(args.interval)
