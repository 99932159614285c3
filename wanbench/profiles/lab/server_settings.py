"""What a lab's SQL servers run with beyond the lab's own settings: another
server binary, extra command-line options and, for the TiDB flavour, a
config fragment merged over the lab's ``tidb.toml``.

A release-against-release run (``--ab``, docs/gate.md) starts two labs
whose servers differ by exactly these: the candidate's and the baseline's
(``--candidate-server-binary``, ``--baseline-server-option`` ...). A lab
records its settings in ``lab.json`` when it starts, so a restart (the
availability family's) runs the same server, and the run context says what
each side ran.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError

#: options the lab sets itself on mariadbd (where its data, sockets and ports are): a lab given another
#: value would not be the lab any more
RESERVED_MARIADB = ("--no-defaults", "--defaults-file", "--defaults-extra-file", "--defaults-group-suffix",
                    "--datadir", "--socket", "--port", "--bind-address", "--user", "--server-id", "--tmpdir",
                    "--pid-file", "--skip-networking")
#: ... and on tidb-server
RESERVED_TIDB = ("--store", "-store", "--path", "-path", "--config", "-config", "--host", "-host", "-P", "--P",
                 "--status-host", "-status-host", "--status", "-status", "--log-file", "-log-file")


def parse_server_option(text: str) -> str:
    """One extra server option as given: ``--performance-schema=ON``, or
    without its dashes (``performance-schema=ON``), which is easier to pass
    to pytest (``--candidate-server-option performance-schema=ON``)."""
    value = text.strip()
    if not value or "\0" in value or "\n" in value:
        raise ConfigError(f"{text!r} is not a server option (e.g. performance-schema=ON)")
    return value if value.startswith("-") else f"--{value}"


def parse_server_binary(text: str) -> str:
    """A server binary that exists and may be run."""
    path = Path(text).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"{text!r} is not an executable file")
    return str(path.resolve())


def parse_server_config(text: str) -> str:
    """A TOML fragment that exists and parses (the TiDB flavour merges it over the lab's config)."""
    import tomllib

    path = Path(text).expanduser()
    try:
        tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"{text!r}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{text!r} is not TOML: {exc}") from None
    return str(path.resolve())


@dataclass(frozen=True)
class ServerSettings:
    """A lab's SQL servers: which binary, which extra options, which config fragment."""

    binary: str | None = None
    options: tuple[str, ...] = ()
    config: str | None = None

    @property
    def is_default(self) -> bool:
        return self.binary is None and not self.options and self.config is None

    def check(self, reserved: Sequence[str], flavour: str) -> None:
        """Refuse an option the lab sets itself, naming it."""
        for opt in self.options:
            name = opt.split("=", 1)[0]
            if name in reserved or name.replace("_", "-") in reserved:
                raise ConfigError(f"{opt!r}: the {flavour} lab sets {name} itself (its data, sockets and ports)")

    def config_text(self) -> str:
        return Path(self.config).read_text() if self.config else ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"binary": self.binary, "options": list(self.options)}
        if self.config:
            text = self.config_text()
            out["config"] = {"path": self.config, "sha256": hashlib.sha256(text.encode()).hexdigest()[:16]}
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> ServerSettings:
        data = data or {}
        config = data.get("config") or {}
        return cls(data.get("binary") or None, tuple(str(o) for o in data.get("options") or ()),
                   (config.get("path") if isinstance(config, Mapping) else str(config)) or None)

    def describe(self) -> str:
        parts = [f"binary {self.binary}"] if self.binary else []
        parts += [" ".join(self.options)] if self.options else []
        parts += [f"config {self.config}"] if self.config else []
        return "; ".join(parts) or "the lab's own settings"


def settings_of(option: Any) -> ServerSettings:
    """The settings a lab is opened with (``ClusterSetup.option``: ``server_binary``,
    ``server_options``, ``server_config``; set per side by an A/B run, absent otherwise)."""
    return ServerSettings(option("server_binary", None) or None, tuple(option("server_options", None) or ()),
                          option("server_config", None) or None)


def check_running(asked: ServerSettings, running: ServerSettings, run_dir: Path) -> None:
    """A lab that was already up keeps its servers: refuse to measure it as other settings."""
    if asked != running and not asked.is_default:
        raise ConfigError(f"the lab in {run_dir} is already running with {running.describe()}, not "
                          f"{asked.describe()}: stop it first (python -m wanbench lab down --dir {run_dir})")


__all__ = ["RESERVED_MARIADB", "RESERVED_TIDB", "ServerSettings", "parse_server_binary", "parse_server_config",
           "check_running", "parse_server_option", "settings_of"]
