"""Command executors: where a fault mechanism runs its commands.

Picked by name like pytest-testinfra's backends; an unknown name is a clear
error. ``argv`` is always a list: executors never build a shell string from
unquoted topology values.
"""

from __future__ import annotations

from typing import Any

from wanbench.errors import ConfigError
from wanbench.executors.base import CommandResult, Executor
from wanbench.executors.local import LocalExecutor

__all__ = ["CommandResult", "Executor", "LocalExecutor", "get_executor"]


def get_executor(kind: str, **kwargs: Any) -> Executor:
    if kind == "local":
        return LocalExecutor(**kwargs)
    if kind == "ssh":
        from wanbench.executors.ssh import SSHExecutor  # paramiko is imported only when needed

        return SSHExecutor(**kwargs)
    raise ConfigError(f"unknown executor {kind!r} (known: local, ssh)")
