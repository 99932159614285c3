"""wanbench: a pytest-based performance regression suite for distributed SQL
databases under degraded networks (added RTT, bandwidth caps, packet loss)."""

from __future__ import annotations

__version__ = "0.1.0"
