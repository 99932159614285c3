"""Preflight: refuse a run that would fail for a reason we can see coming.

At high concurrency a sysbench run fails half-way (errors 1040 "Too many
connections", 1461 "Can't create more than max_prepared_stmt_count
statements", or "Too many open files" in the client) and leaves numbers that
look like a database regression. Checking the limits first turns that into
one message with the fix.
"""

from __future__ import annotations

import resource
from collections.abc import Mapping
from dataclasses import dataclass

from wanbench.errors import InfrastructureError

#: Connections that other clients (monitoring, the suite's own checks,
#: replication) may hold while the run is going on.
CONNECTION_MARGIN = 10
#: File descriptors the client needs besides one socket per thread.
FD_MARGIN = 64

# Server-side prepared statements one sysbench thread holds, per table and in
# total, for the bundled scripts with --db-ps-mode=auto (see oltp_common.lua).
_PS_PER_TABLE: Mapping[str, int] = {
    "oltp_point_select": 1,
    "oltp_read_only": 5,
    "oltp_read_write": 9,
    "oltp_write_only": 4,
    "oltp_update_index": 1,
    "oltp_update_non_index": 1,
    "oltp_delete": 1,
    "oltp_insert": 0,
    "select_random_points": 0,
    "select_random_ranges": 0,
}
_PS_FIXED: Mapping[str, int] = {
    "oltp_read_only": 2,
    "oltp_read_write": 2,
    "oltp_write_only": 2,
    "select_random_points": 1,
    "select_random_ranges": 1,
    "probe_read": 1,
    "probe_write": 1,
}


class PreflightError(InfrastructureError):
    """The run would fail because of a limit; the message says how to fix it."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("preflight: " + "; ".join(problems))


@dataclass(frozen=True)
class ServerLimits:
    """What the server allows, read before the run. 0 or less = unlimited."""

    max_connections: int
    connections_in_use: int = 0
    max_prepared_stmt_count: int = -1
    prepared_stmt_in_use: int = 0
    server: str = "server"


def prepared_statements_needed(workload: str, threads: int, tables: int = 1) -> int:
    """Server-side prepared statements the run will hold at once."""
    per_thread = _PS_PER_TABLE.get(workload, 0) * tables + _PS_FIXED.get(workload, 0)
    return per_thread * threads


def check(
    *,
    workload: str,
    threads: int,
    tables: int,
    server: ServerLimits,
    nofile: tuple[int, int] | None = None,
) -> list[str]:
    """Problems that would make the run fail (empty list = go).

    ``nofile`` is the client's (soft, hard) RLIMIT_NOFILE; a soft limit that
    is too low but below the hard limit is not a problem (``raise_nofile``
    lifts it for the child), a hard limit that is too low is.
    """
    problems: list[str] = []
    if server.max_connections > 0:
        need = threads + server.connections_in_use + CONNECTION_MARGIN
        if need > server.max_connections:
            problems.append(
                f"{threads} threads need {need} connections ({server.connections_in_use} in use + "
                f"{CONNECTION_MARGIN} spare) but {server.server} max_connections is {server.max_connections}: "
                f"run SET GLOBAL max_connections = {max(need, 2 * threads)} (or start the server with "
                f"--max-connections={max(need, 2 * threads)}), or lower --threads"
            )
    if server.max_prepared_stmt_count >= 0:
        need_ps = prepared_statements_needed(workload, threads, tables) + server.prepared_stmt_in_use
        if need_ps > server.max_prepared_stmt_count:
            problems.append(
                f"{workload} with {threads} threads x {tables} tables prepares about {need_ps} statements but "
                f"{server.server} max_prepared_stmt_count is {server.max_prepared_stmt_count}: run "
                f"SET GLOBAL max_prepared_stmt_count = {min(1048576, 2 * need_ps)}, or lower --threads/--tables"
            )
    if nofile is not None:
        _soft, hard = nofile
        need_fd = threads + FD_MARGIN
        if hard != resource.RLIM_INFINITY and need_fd > hard:
            problems.append(
                f"{threads} threads need about {need_fd} open files but the client's hard limit "
                f"(ulimit -Hn) is {hard}: raise it (e.g. `ulimit -Hn {2 * need_fd}` as root, or nofile in "
                "/etc/security/limits.conf) or lower --threads"
            )
    return problems


def raise_nofile(threads: int) -> tuple[int, int]:
    """Lift this process's soft open-file limit (inherited by sysbench) to
    what ``threads`` connections need, within the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = threads + FD_MARGIN
    if soft != resource.RLIM_INFINITY and soft < need:
        new = need if hard == resource.RLIM_INFINITY else min(hard, max(need, 4096))
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft, hard


def ensure(*, workload: str, threads: int, tables: int, server: ServerLimits) -> None:
    """Raise ``PreflightError`` with every problem and its fix; else lift the
    client's soft open-file limit if needed."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    problems = check(workload=workload, threads=threads, tables=tables, server=server, nofile=nofile)
    if problems:
        raise PreflightError(problems)
    raise_nofile(threads)
