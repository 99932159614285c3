"""The executor protocol and the result of one command."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from wanbench.errors import CommandError


@dataclass(frozen=True)
class CommandResult:
    host: str
    argv: tuple[str, ...]
    exit_status: int
    stdout: str
    stderr: str
    duration: float

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def check(self) -> CommandResult:
        if self.exit_status != 0:
            raise CommandError(self.host, self.command, self.exit_status, self.stderr)
        return self


class Executor(Protocol):
    """Runs argv lists on one host. ``timeout`` is seconds; on timeout a
    ``CommandError`` with ``exit_status=None`` is raised."""

    host: str

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult: ...

    def close(self) -> None: ...
