"""Availability faults: a component partitioned, paused or restarted.

Three kinds, each put on ONE component (one instance) for ``hold_s``:

* ``partition``: 100 % packet loss, both directions, on the component's
  links (its own flows only; the SSH port is never matched). TCP sees a black
  hole: no reset, no refusal, only silence and retransmissions.
* ``pause``: SIGSTOP of the component's process, SIGCONT at the end: a
  brownout. Connections stay open, the kernel still accepts new ones, nothing
  answers.
* ``restart``: a clean stop (SIGTERM), then a start, waiting until the
  component serves again.

This module holds what an outage is (``OutageKind``, ``Outage``); each
profile carries it out. On the lab (``wanbench.profiles.lab.outages``) the
component is one of the lab's processes and its links are Toxiproxy ports on
``lo``: a partition is an nftables drop on those ports (the nft mechanism,
with its dead-man lease), a pause a signal to the PID the lab recorded
(leased by a local dead-man that sends SIGCONT), a restart
``Lab.restart_component``. On a TiDB cluster
(``wanbench.profiles.tidb.outages``) the commands go over SSH, tiup
style: ``systemctl stop|start <role>-<port>.service``, ``kill -STOP|-CONT``
of the unit's MainPID, and nft drop scoped by the fault plan
(``wanbench.profiles.tidb.plan``); ``render`` prints them all for
``--dry-run`` and runs nothing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from wanbench.errors import ConfigError
from wanbench.faults.base import FaultKind, Level
from wanbench.units import parse_list

PARTITION_LEVEL = Level(FaultKind.LOSS, 100.0)
#: label added to the one instance an availability scenario faults (see ``pick_target``)
TARGET_LABEL = "availability-target"


class OutageKind(str, enum.Enum):
    PARTITION = "partition"
    PAUSE = "pause"
    RESTART = "restart"


def parse_outage_kinds(text: str) -> list[OutageKind]:
    """``--outages partition,pause``: known kinds, each once, in the order given."""
    def one(s: str) -> OutageKind:
        try:
            return OutageKind(s.strip().lower())
        except ValueError:
            raise ConfigError(f"unknown outage {s!r} (known: {', '.join(k.value for k in OutageKind)})") from None

    kinds = parse_list(text, one)
    if len(set(kinds)) != len(kinds):
        raise ConfigError(f"{text!r}: an outage is listed twice")
    return kinds


@dataclass(frozen=True)
class Outage:
    """One availability fault on one component, held for ``hold_s`` seconds."""

    kind: OutageKind
    component: str
    hold_s: float

    @property
    def label(self) -> str:
        return f"{self.component}:{self.kind.value}"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "component": self.component, "hold_s": self.hold_s, "label": self.label}


# -- the lab -------------------------------------------------------------------------------------------------------


