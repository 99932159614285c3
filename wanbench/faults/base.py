"""The fault model and the small protocol every mechanism implements.

A *level* is what the user asks for (``50ms``, ``10mbit``, ``1%``, or the
baseline ``0``); a ``Fault`` puts a level on one component towards its peers;
a mechanism (toxiproxy, tc, nft) turns a fault into rules on hosts and back.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from wanbench.errors import ConfigError
from wanbench.units import fmt_mbit, fmt_ms, fmt_pct, parse_delay, parse_loss_pct, parse_rate_mbit


class FaultKind(str, enum.Enum):
    DELAY = "delay"
    RATE = "rate"
    LOSS = "loss"


#: family name -> the fault kind its levels are made of
FAMILY_KIND: Mapping[str, FaultKind] = {
    "rtt": FaultKind.DELAY,
    "bandwidth": FaultKind.RATE,
    "loss": FaultKind.LOSS,
}

_BASELINE_LABEL = {FaultKind.DELAY: "0ms", FaultKind.RATE: "nolimit", FaultKind.LOSS: "0%"}
#: how level 0 of each fault kind is labelled in test and cell ids
LEVEL0_LABELS = frozenset(_BASELINE_LABEL.values())


def level0_label(family: str) -> str | None:
    """``0ms`` for ``rtt``: how the family's level 0 is labelled; None for a family without levels."""
    kind = FAMILY_KIND.get(family)
    return _BASELINE_LABEL[kind] if kind is not None else None


@dataclass(frozen=True, order=True)
class Level:
    """One fault level. ``value == 0`` is the baseline (no fault).

    delay: added round-trip time in ms (+ jitter ms); rate: Mbit/s aggregate
    per link; loss: percent of packets dropped.
    """

    kind: FaultKind
    value: float
    jitter: float = 0.0

    @property
    def is_baseline(self) -> bool:
        return self.value == 0

    @property
    def label(self) -> str:
        if self.is_baseline:
            return _BASELINE_LABEL[self.kind]
        if self.kind is FaultKind.DELAY:
            return fmt_ms(self.value) + (f"~{fmt_ms(self.jitter)}" if self.jitter else "")
        if self.kind is FaultKind.RATE:
            return fmt_mbit(self.value)
        return fmt_pct(self.value)

    @classmethod
    def parse(cls, kind: FaultKind | str, text: str) -> Level:
        kind = FaultKind(kind)
        stripped = str(text).strip().lower()
        if stripped in ("0", "base", "baseline", _BASELINE_LABEL[kind]):
            return cls(kind, 0.0)
        if kind is FaultKind.DELAY:
            delay, jitter = parse_delay(text)
            return cls(kind, delay, jitter)
        if kind is FaultKind.RATE:
            return cls(kind, parse_rate_mbit(text))
        return cls(kind, parse_loss_pct(text))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value, "value": self.value, "label": self.label}
        if self.jitter:
            out["jitter"] = self.jitter
        return out


def parse_levels(kind: FaultKind | str, text: str) -> list[Level]:
    """``"0,50ms,100ms"`` -> levels, sorted with the baseline first."""
    parts = [p.strip() for p in str(text).split(",")]
    if any(not p for p in parts):
        raise ConfigError(f"{text!r}: empty item in list")
    levels = [Level.parse(kind, p) for p in parts]
    if len(set(levels)) != len(levels):
        raise ConfigError(f"{text!r}: a level is listed twice")
    return sorted(levels, key=lambda lv: (lv.value, lv.jitter))


@dataclass(frozen=True)
class Fault:
    """A level put on one component, towards the given peer components."""

    component: str
    level: Level
    peers: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.component}:{self.level.label}"


@dataclass(frozen=True)
class Evidence:
    """What a mechanism did and what measuring showed, kept with the result."""

    mechanism: str
    applied: tuple[str, ...] = ()  # rules / commands, secrets never included
    measured: Mapping[str, Any] = field(default_factory=dict)
    verified: bool = False
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "applied": list(self.applied),
            "measured": dict(self.measured),
            "verified": self.verified,
            "notes": list(self.notes),
        }


class Mechanism(Protocol):
    """One way of putting a fault in place (toxiproxy, tc, nft).

    ``apply`` is idempotent (clear, then install); ``clear`` tolerates
    "nothing there"; ``sweep`` removes what an earlier, dead run left behind
    and returns a description of each thing removed.
    """

    name: str

    def supports(self, kind: FaultKind) -> bool: ...

    def apply(self, fault: Fault, *, deadline_s: float) -> Evidence: ...

    def clear(self, fault: Fault) -> None: ...

    def sweep(self) -> list[str]: ...
