"""Where TiDB's KV requests per operation are a count: its statements seldom waited on locks.

TiDB's transactions are pessimistic by default: every UPDATE, DELETE or
INSERT inside an explicit transaction locks its keys first. A statement that
meets another transaction's lock waits, then is run again (a pessimistic
retry), re-reading and re-locking its keys with a new timestamp. Its KV
requests and its TSO requests and waits then count the waits as well as the
work, and the waits move with the machine's pace: TPC-C on one warehouse of
the TiDB lab retried 12 % of its locking statements at 10 terminals with no
fault and 272 % at 100 terminals with 50 ms, where it sent 32.6
PessimisticLock requests per transaction against 5.6 (2026-11-29,
docs/tidb.md). A transaction's Prewrite and Commit are sent once, at its
end, whatever its statements did, and TiDB counts a retried statement once.

tidb-server counts both sides (``wanbench.evidence.tidb_metrics``): the
statements that locked keys and their retries, on every build here and in
the v6.5-v8.5 dashboards ("Statement Lock Keys", "Pessimistic Statement
Retry OPS").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: where more than this share of the statements that lock keys were retried (``lock_retries`` over
#: ``locking_statements``), the KV requests per operation count those waits, not the workload's work
#: alone. At 5 % the retries move a count by about half a 10 % budget
MAX_LOCK_RETRY_SHARE = 0.05
#: the counters that tell it: statements that locked keys, and their retries
LOCK_COUNTERS = ("locking_statements", "lock_retries")
#: the KV requests a transaction sends once, at its end, however often its statements were retried
SENT_AT_COMMIT = ("Prewrite", "Commit")
#: work a retried statement does again besides its KV requests: it takes a new timestamp (for_update_ts)
RETRIED_WORK = ("tso_requests", "tso_waits")


def lock_retries_of(counters: Mapping[str, Any]) -> dict[str, float] | None:
    """A TiDB server's lock retries over the windows: retries, statements that locked keys, and their
    share (None where the server does not count them, or no statement locked a key)."""
    values = [counters.get(name) for name in LOCK_COUNTERS]
    locking, retries = (float(v) if isinstance(v, (int, float)) else math.nan for v in values)
    if not (math.isfinite(locking) and math.isfinite(retries)) or locking <= 0:
        return None
    return {"retries": retries, "locking_statements": locking, "share": round(retries / locking, 4)}


def lock_why_not(contention: Mapping[str, float] | None) -> str | None:
    """Why a TiDB server's KV requests per operation (but Prewrite and Commit) and its TSO requests and
    waits are not a count of the workload's work: too many of its locking statements were retried after
    another transaction's lock."""
    if contention is None or contention["share"] <= MAX_LOCK_RETRY_SHARE:
        return None
    return (f"{contention['retries']:.0f} pessimistic retries over {contention['locking_statements']:.0f} "
            f"statements that locked keys ({contention['share']:.0%}; a count needs at most "
            f"{MAX_LOCK_RETRY_SHARE:.0%}): a statement that met another transaction's lock waited and ran again, "
            "re-reading and re-locking its keys with a new timestamp, so this counts lock waits, not the workload's "
            "work alone")
