"""Error types that carry the context a user needs to act on them."""

from __future__ import annotations


class WanbenchError(Exception):
    """Base class of every error wanbench raises on purpose."""


class ConfigError(WanbenchError):
    """Bad user input: an option value, a topology file, a budget file."""


class InfrastructureError(WanbenchError):
    """Something the measurement depends on is broken (a server, a tool)."""


class MissingToolError(InfrastructureError):
    def __init__(self, tool: str, hint: str = "run scripts/setup") -> None:
        self.tool = tool
        self.hint = hint
        super().__init__(f"{tool} not found: {hint}")


class CommandError(InfrastructureError):
    """A command on a host failed."""

    def __init__(self, host: str, command: str, exit_status: int | None, stderr: str) -> None:
        self.host = host
        self.command = command
        self.exit_status = exit_status
        self.stderr = stderr
        status = "timed out" if exit_status is None else f"exit {exit_status}"
        tail = stderr.strip().splitlines()[-3:] if stderr else []
        detail = (": " + " | ".join(tail)) if tail else ""
        super().__init__(f"[{host}] `{command}` {status}{detail}")


class FaultError(InfrastructureError):
    """A fault could not be applied, verified or cleared."""

    def __init__(
        self,
        host: str,
        message: str,
        *,
        command: str | None = None,
        exit_status: int | None = None,
        stderr: str = "",
    ) -> None:
        self.host = host
        self.command = command
        self.exit_status = exit_status
        self.stderr = stderr
        parts = [f"[{host}] {message}"]
        if command:
            parts.append(f"command: {command}")
        if exit_status is not None:
            parts.append(f"exit {exit_status}")
        if stderr.strip():
            parts.append(stderr.strip().splitlines()[-1])
        super().__init__("; ".join(parts))


class FaultVerificationError(FaultError):
    """The fault was applied but measuring showed it is not (or not only) there."""


class FaultLostError(FaultError):
    """The fault's lease lapsed (runner stopped, host unreachable) and the host may have cleared it:
    what was measured since then was not measured under the fault, so the cell is broken."""


class WaitTimeout(InfrastructureError):
    """A bounded poll ran out of time; the message says what was last seen."""


class HostUnreachableError(InfrastructureError):
    """An SSH connection to a host could not be made (refused, timed out, no route)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        self.host = host
        self.port = port
        self.reason = reason
        super().__init__(f"[{host}:{port}] cannot connect over SSH: {reason}")


class HostKeyError(InfrastructureError):
    """The host's SSH key is unknown or differs from known_hosts: nothing was run there."""

    def __init__(self, host: str, port: int, message: str) -> None:
        self.host = host
        self.port = port
        super().__init__(f"[{host}:{port}] {message}")
