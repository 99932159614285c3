"""A wanbench runner for the lease self-tests: applies one fault and stops at a given stage.

``python -m selftests.lease_runner lab KIND STAGE LEASE READY RUN_DIR PORT_BASE WATCHDOG``
``python -m selftests.lease_runner ssh KIND STAGE LEASE READY ADDRESS PEER KEY KNOWN_HOSTS STATE_DIR``

KIND is delay | rate | loss. At STAGE (applying: right after the rules went in,
verifying: while verification measures, mid: under the fault, clearing: half
way through removing it) the runner writes the stage to READY and hangs until
the test kills it. STAGE ``hung``: apply, write READY, wait for READY + ".go"
(the test SIGSTOPs and SIGCONTs it meanwhile), then check the lease: exit 3
and print BROKEN if it was lost, exit 0 and print HELD if not.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wanbench.errors import FaultLostError
from wanbench.executors.local import LocalExecutor
from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.faults.toxiproxy import ToxiproxyClient

LEVELS = {"delay": Level(FaultKind.DELAY, 37), "rate": Level(FaultKind.RATE, 40), "loss": Level(FaultKind.LOSS, 1)}
CLEARING = {"on": False}


def pause(ready: Path, stage: str) -> None:
    ready.write_text(stage)
    while True:  # a hung runner: only SIGKILL ends it
        time.sleep(60)


def hook(stage: str, ready: Path) -> None:
    """Make every command path stop at ``stage``."""

    def wrap_run(cls: Any) -> None:
        orig = cls.run

        def run(self: Any, argv: Any, **kw: Any) -> Any:
            a = tuple(str(x) for x in argv)
            if stage == "clearing" and CLEARING["on"] and a[:3] in (("tc", "qdisc", "del"), ("nft", "delete", "table")):
                pause(ready, stage)
            res = orig(self, argv, **kw)
            if stage == "applying" and a[:2] in (("tc", "-batch"), ("nft", "-f")):
                pause(ready, stage)
            return res

        cls.run = run

    wrap_run(LocalExecutor)
    try:
        from wanbench.executors.ssh import SSHExecutor

        wrap_run(SSHExecutor)
    except ImportError:
        pass
    add, delete = ToxiproxyClient.add_toxic, ToxiproxyClient.delete_toxic

    def add_toxic(self: Any, *args: Any, **kw: Any) -> None:
        add(self, *args, **kw)
        if stage == "applying":
            pause(ready, stage)  # one direction in place, the other not yet

    def delete_toxic(self: Any, *args: Any, **kw: Any) -> bool:
        done = delete(self, *args, **kw)
        if stage == "clearing" and CLEARING["on"] and done:
            pause(ready, stage)  # one direction removed, the other still there
        return done

    ToxiproxyClient.add_toxic = add_toxic  # type: ignore[method-assign]
    ToxiproxyClient.delete_toxic = delete_toxic  # type: ignore[method-assign]


def finish(stage: str, ready: Path, check: Callable[[], None], clear: Callable[[], Any]) -> int:
    if stage == "mid":
        pause(ready, stage)
    if stage == "hung":
        ready.write_text(stage)
        go = Path(str(ready) + ".go")
        while not go.exists():
            time.sleep(0.05)
        try:
            check()
        except FaultLostError as exc:
            print(f"BROKEN: {exc}", flush=True)
            clear()
            return 3
        print("HELD", flush=True)
        clear()
        return 0
    CLEARING["on"] = True
    clear()
    return 1  # the stage was never reached


def lab(kind: str, stage: str, lease: float, ready: Path, run_dir: str, port_base: str, watchdog: str) -> int:
    import os

    from wanbench.profiles.lab.cluster import LabCluster
    from wanbench.profiles.lab.servers import Lab

    cluster = LabCluster(Lab(run_dir, int(port_base)), tag=str(os.getpid()), grace_s=600, lease_s=lease)
    if watchdog == "1":
        cluster.start_watchdog()
    if stage == "verifying":
        orig = LabCluster.verify

        def verify(self: LabCluster, *args: Any) -> Any:
            pause(ready, stage)
            return orig(self, *args)

        LabCluster.verify = verify  # type: ignore[method-assign,assignment]
    fault = Fault("replica", LEVELS[kind])
    evidence = cluster.apply(fault, expected_duration_s=600)
    return finish(stage, ready, cluster.check_faults, lambda: cluster.clear(fault, evidence))


def ssh(kind: str, stage: str, lease: float, ready: Path, address: str, peer: str, key: str, known_hosts: str,
        state_dir: str) -> int:
    from wanbench.executors.ssh import SSHExecutor
    from wanbench.faults.lease import LeaseKeeper
    from wanbench.faults.nft import NftMechanism
    from wanbench.faults.tc import PeerMatch, TcMechanism

    ex = SSHExecutor(address, user="root", key_filename=key, known_hosts=known_hosts, ssh_config="/nonexistent")
    keeper = LeaseKeeper(lease)
    peers = [PeerMatch(ip=peer)]
    mech: TcMechanism | NftMechanism
    if kind == "rate":
        mech = TcMechanism(ex, "eth0", peers, state_dir=state_dir, keeper=keeper)
    else:
        mech = NftMechanism(ex, peers, interface="eth0", state_dir=state_dir, keeper=keeper)
    fault = Fault("h", LEVELS[kind])
    mech.apply(fault, deadline_s=600)
    return finish(stage, ready, keeper.check, lambda: mech.clear(fault))


def main(argv: list[str]) -> int:
    mode, kind, stage, lease, ready, *rest = argv
    hook(stage, Path(ready))
    if mode == "lab":
        return lab(kind, stage, float(lease), Path(ready), *rest)
    return ssh(kind, stage, float(lease), Path(ready), *rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
