"""The one way wanbench hides secrets in text it keeps or shows.

Every log line, report, error message and results file that could carry a
password goes through ``hide`` (or a ``redactor`` made once for a run), so
a secret is masked the same way everywhere: ``***``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

MASK = "***"


def hide(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def redactor(secrets: Iterable[str | None]) -> Callable[[str], str]:
    """``hide`` bound to ``secrets`` (kept as a tuple: later changes to the iterable do not count)."""
    kept = tuple(s for s in secrets if s)
    return lambda text: hide(text, kept)
