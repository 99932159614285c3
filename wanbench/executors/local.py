"""Run commands on this machine, without a shell."""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Sequence

from wanbench.errors import CommandError
from wanbench.executors.base import CommandResult


class LocalExecutor:
    """``prefix`` wraps every command (e.g. ``ip netns exec NS``)."""

    def __init__(self, host: str = "localhost", *, prefix: Sequence[str] = ()) -> None:
        self.host = host
        self.prefix = tuple(prefix)

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        argv = (*self.prefix, *(str(a) for a in argv))
        start = time.monotonic()
        try:
            proc = subprocess.run(  # noqa: S603 - argv list, no shell
                argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandError(self.host, shlex.join(argv), None, str(exc.stderr or "")) from None
        except FileNotFoundError:
            raise CommandError(self.host, shlex.join(argv), 127, f"{argv[0]}: command not found") from None
        result = CommandResult(self.host, argv, proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
        return result.check() if check else result

    def close(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"LocalExecutor({self.host!r})"
