"""Parsers for the values users type: delays, rates, loss, concurrency lists.

Every parser raises ``ConfigError`` naming the bad text; the pytest option
layer turns that into a ``pytest.UsageError`` naming the option too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from wanbench.errors import ConfigError

T = TypeVar("T")

_DURATION = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>us|ms|s|m|min)?\s*$")
_DURATION_FACTORS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "min": 60_000.0}
_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>kbit|mbit|gbit|kbps|mbps|gbps)\s*$", re.I)
_RATE_FACTORS_MBIT = {"kbit": 0.001, "mbit": 1.0, "gbit": 1000.0, "kbps": 0.008, "mbps": 8.0, "gbps": 8000.0}


def parse_duration_ms(text: str, *, default_unit: str = "ms", allow_zero: bool = True) -> float:
    """``"50ms"`` -> 50.0, ``"1.5s"`` -> 1500.0, ``"0"`` -> 0.0."""
    m = _DURATION.match(str(text))
    if not m:
        raise ConfigError(f"{text!r} is not a duration (examples: 0, 50ms, 1.5s)")
    unit = m.group("unit") or default_unit
    value = float(m.group("num")) * _DURATION_FACTORS_MS[unit]
    if value == 0 and not allow_zero:
        raise ConfigError(f"{text!r}: the duration must be greater than zero")
    return value


def parse_seconds(text: str) -> float:
    """A run length: ``"30s"``, ``"2m"``, or a bare number of seconds."""
    return parse_duration_ms(text, default_unit="s", allow_zero=False) / 1000.0


def parse_delay(text: str) -> tuple[float, float]:
    """``"50ms"`` -> (50, 0); ``"50ms~5ms"`` -> (50, 5): delay and jitter in ms."""
    base, _, jitter = str(text).partition("~")
    delay = parse_duration_ms(base)
    jit = parse_duration_ms(jitter) if jitter else 0.0
    if jit and not delay:
        raise ConfigError(f"{text!r}: jitter needs a non-zero delay")
    if jit > delay:
        raise ConfigError(f"{text!r}: jitter {jit:g}ms is larger than the delay {delay:g}ms")
    return delay, jit


def parse_rate_mbit(text: str) -> float:
    """``"10mbit"`` -> 10.0; ``"500kbit"`` -> 0.5. Zero is not a rate."""
    m = _RATE.match(str(text))
    if not m:
        raise ConfigError(f"{text!r} is not a rate (examples: 30mbit, 500kbit, 1gbit)")
    value = float(m.group("num")) * _RATE_FACTORS_MBIT[m.group("unit").lower()]
    if value <= 0:
        raise ConfigError(f"{text!r}: a rate cap must be greater than zero (use 0 for no cap)")
    return value


def parse_loss_pct(text: str) -> float:
    """``"1%"`` -> 1.0; ``"0.1%"`` -> 0.1. Must be within (0, 100]."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$", str(text))
    if not m:
        raise ConfigError(f"{text!r} is not a loss percentage (examples: 0.1%, 1%)")
    value = float(m.group(1))
    if not 0 < value <= 100:
        raise ConfigError(f"{text!r}: loss must be more than 0% and at most 100%")
    return value


def parse_positive_int(text: str) -> int:
    s = str(text).strip()
    if s.startswith("c=") or s.startswith("t="):
        s = s[2:]
    if not re.fullmatch(r"\d+", s) or int(s) <= 0:
        raise ConfigError(f"{text!r} is not a positive whole number")
    return int(s)


def parse_nonnegative_int(text: str) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise ConfigError(f"{text!r} must be 0 or more")
    return value


def parse_list(text: str | Sequence[str], item: Callable[[str], T]) -> list[T]:
    """Comma-separated list; duplicates are an error, order is kept."""
    parts = [p.strip() for p in (text.split(",") if isinstance(text, str) else text)]
    if not parts or any(p == "" for p in parts):
        raise ConfigError(f"{text!r}: empty item in list")
    values = [item(p) for p in parts]
    seen: list[T] = []
    for v in values:
        if v in seen:
            raise ConfigError(f"{text!r}: {v!r} is listed twice")
        seen.append(v)
    return values


def fmt_ms(value: float) -> str:
    """Label form of a delay: 50.0 -> '50ms', 0.5 -> '0.5ms'."""
    return f"{value:g}ms"


def fmt_mbit(value: float) -> str:
    if value < 1:
        return f"{value * 1000:g}kbit"
    return f"{value:g}mbit"


def fmt_pct(value: float) -> str:
    return f"{value:g}%"


def pct_change(new: float, old: float) -> float:
    """Relative change in percent; nan when the old value is zero."""
    if old == 0:
        return math.nan
    return (new - old) / old * 100.0
