"""A session's evidence collector kept in pytest's stash while a fixture holds it (the cluster's
in ``fixtures/evidence.py``, an A/B run's baseline side's in ``fixtures/ab.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from wanbench.profiles.capabilities import EvidenceWindows


@contextmanager
def stashed(config: pytest.Config, key: pytest.StashKey[EvidenceWindows],
            collector: EvidenceWindows) -> Iterator[EvidenceWindows]:
    """``collector`` in the session's stash under ``key`` while the block runs; closed after it."""
    config.stash[key] = collector
    try:
        yield collector
    finally:
        del config.stash[key]
        collector.close()
