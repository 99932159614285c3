"""What wanbench left on a host, and removing it: for `faults list|clear` and `lab down`.

A host's wanbench faults are our tc root qdisc (handle ``1a57:``) on any
interface, our ``inet wanbench_*`` nft tables, and the dead-man state files
that describe them (``/run/wanbench``). A rule with a state file is removed
with the state's own clear command (the one ``clear()`` runs) and its timer
disarmed; a rule without one (an orphan) is removed directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from wanbench.executors.base import Executor
from wanbench.faults.deadman import STATE_DIR, DeadMan, FaultState
from wanbench.faults.nft import TABLE_PREFIX
from wanbench.faults.tc import HANDLE


@dataclass(frozen=True)
class Found:
    """One wanbench fault on one host."""

    host: str
    kind: str  # tc | nft | toxic
    name: str  # interface, table or toxic name
    state: FaultState | None = None  # None: an orphan (no state file), or a toxic

    @property
    def live(self) -> bool:
        return self.state is not None and not self.state.is_stale()

    @property
    def line(self) -> str:
        what = {"tc": f"tc qdisc {HANDLE} on {self.name}", "nft": f"nft table inet {self.name}",
                "toxic": f"toxic {self.name}"}.get(self.kind, self.name)
        if self.kind == "toxic":
            who = ""
        elif self.state is None:
            who = " (no state file: a dead run's leftover)"
        else:
            who = f" [{'live' if self.live else 'stale'}] {self.state.label}"
        return f"{self.host}: {what}{who}"


def _tc_roots(ex: Executor) -> list[str]:
    res = ex.run(["tc", "-j", "qdisc", "show"], check=False, timeout=15)
    if res.exit_status != 0:
        return []
    return sorted({q["dev"] for q in json.loads(res.stdout or "[]")
                   if q.get("root") and q.get("handle") == HANDLE and q.get("kind") == "htb"})


def _nft_tables(ex: Executor) -> list[str]:
    res = ex.run(["nft", "-j", "list", "tables"], check=False, timeout=15)
    if res.exit_status != 0:
        return []
    data = json.loads(res.stdout or "{}").get("nftables", [])
    return sorted(d["table"]["name"] for d in data if "table" in d and d["table"].get("family") == "inet"
                  and str(d["table"].get("name", "")).startswith(TABLE_PREFIX))


def host_faults(ex: Executor, state_dir: str = STATE_DIR) -> list[Found]:
    """Every tc/nft fault of wanbench on ``ex``'s host, each with its state file if it has one.

    A state file whose rule is already gone is listed too (its timer is still armed)."""
    states = {st.key: st for st in DeadMan(ex, state_dir=state_dir).states()}
    found = [Found(ex.host, "tc", dev, states.pop(f"tc-{dev}", None)) for dev in _tc_roots(ex)]
    found += [Found(ex.host, "nft", t, states.pop(f"nft-{t}", None)) for t in _nft_tables(ex)]
    for key, st in sorted(states.items()):
        kind, _, name = key.partition("-")
        found.append(Found(ex.host, kind if kind in ("tc", "nft") else "state", name, st))
    return found


def clear_found(ex: Executor, found: list[Found], *, state_dir: str = STATE_DIR, dry_run: bool = False,
                keep: Callable[[Found], bool] = lambda f: False) -> list[str]:
    """Remove ``found`` (host faults of ``ex``) except what ``keep`` picks; returns a line per removal."""
    dm = DeadMan(ex, state_dir=state_dir)
    done = []
    for f in found:
        if f.kind == "toxic" or keep(f):
            continue
        if not dry_run:
            if f.state is not None:
                dm.clear_now(f.state)
            elif f.kind == "tc":
                ex.run(["tc", "qdisc", "del", "dev", f.name, "root", "handle", HANDLE], check=False, timeout=15)
            elif f.kind == "nft":
                ex.run(["nft", "delete", "table", "inet", f.name], check=False, timeout=15)
        done.append(("would remove " if dry_run else "removed ") + f.line)
    return done
