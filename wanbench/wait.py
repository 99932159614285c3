"""Bounded polling: the only way wanbench waits for something to become true."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from wanbench.errors import WaitTimeout

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 0.1,
    transient: tuple[type[BaseException], ...] = (OSError,),
    hint: str = "",
    max_interval: float = 1.0,
) -> T:
    """Call ``probe`` until it returns a truthy value or ``timeout`` passes.

    Exceptions listed in ``transient`` count as "not yet"; the last one seen is
    reported in the timeout message together with ``hint``.
    """
    deadline = time.monotonic() + timeout
    last: str = "nothing"
    delay = interval
    while True:
        try:
            value = probe()
        except transient as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if value:
                return value
            last = f"probe returned {value!r}"
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.1f}s waiting for {what}; last seen: {last}"
            if hint:
                msg += f"; {hint}"
            raise WaitTimeout(msg)
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, max_interval)
