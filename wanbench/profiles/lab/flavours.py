"""Which lab: the MariaDB flavour (``Lab``) or the TiDB flavour (``TidbLab``).

A running lab records its flavour in ``lab.json``; ``open_lab`` reads it, so
whoever inspects or stops a lab (``lab status``, ``faults``, the watchdog)
gets the right class without being told."""

from __future__ import annotations

import json
import os
from pathlib import Path

from wanbench.errors import ConfigError
from wanbench.profiles.lab.layout import DEFAULT_CPU_LAYOUT, FLAVOURS, default_run_dir
from wanbench.profiles.lab.server_settings import ServerSettings
from wanbench.profiles.lab.servers import Lab
from wanbench.profiles.lab.tidb import TidbLab

CLASSES: dict[str, type[Lab]] = {"mariadb": Lab, "tidb": TidbLab}


def recorded_flavour(run_dir: str | os.PathLike[str] | None) -> str | None:
    """The flavour the lab in ``run_dir`` was started with (None: no lab there)."""
    state = Path(run_dir or default_run_dir()) / "lab.json"
    try:
        return str(json.loads(state.read_text()).get("flavour") or "mariadb")
    except (FileNotFoundError, ValueError):
        return None


def default_lab_dir(flavour: str, rootpath: str | os.PathLike[str] | None = None) -> Path:
    """Where a lab of ``flavour`` lives when no --lab-dir is given (the TiDB lab beside the MariaDB one)."""
    base = default_run_dir(rootpath)
    return base.with_name("tidb-lab") if flavour == "tidb" else base


def check_flavour(name: str) -> str:
    if name not in FLAVOURS:
        raise ConfigError(f"unknown lab flavour {name!r} (known: {', '.join(FLAVOURS)})")
    return name


def open_lab(run_dir: str | os.PathLike[str] | None = None, port_base: int | None = None,
             cpu_layout: str = DEFAULT_CPU_LAYOUT, semisync_timeout_ms: int | None = None,
             flavour: str | None = None, server: ServerSettings | None = None) -> Lab:
    """The lab in ``run_dir`` as its flavour's class: ``flavour`` when given
    (a lab to start), else the one it was started with (MariaDB when none runs)."""
    name = check_flavour(flavour) if flavour else (recorded_flavour(run_dir) or "mariadb")
    return CLASSES[name](run_dir, port_base, cpu_layout, semisync_timeout_ms=semisync_timeout_ms, server=server)
