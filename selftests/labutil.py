"""Helpers for self-tests that start the real lab or run the real suite."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wanbench.procs import proc_state

ROOT = Path(__file__).resolve().parent.parent


def as_at_a_terminal() -> None:
    """``preexec_fn`` of a child that a test then Ctrl-C's: SIGINT as a
    terminal's shell leaves it. A runner started in the background of a
    non-interactive shell (``cmd &``, as CI launchers may do) has SIGINT
    ignored, every child inherits that, and Python then never raises
    KeyboardInterrupt: the test would measure how it was launched."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def needs(*tools: str) -> None:
    """Skip the calling test unless every tool is here: on PATH, in /usr/sbin, in the project's
    environment or its ``bin/`` (scripts/setup puts toxiproxy-server and tpchgen-cli there). Under
    CI (``CI=true``), which installs them all (.ci/run), a missing one fails the test instead: a
    skipped lab test there would be a check that silently did not run."""
    dirs = [os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin", str(Path(sys.executable).parent),
            str(ROOT / "bin")]
    for tool in tools:
        if shutil.which(tool, path=os.pathsep.join(dirs)) is None:
            if os.environ.get("CI") == "true":
                pytest.fail(f"{tool} is missing, and CI installs it (.ci/run runs scripts/setup)")
            pytest.skip(f"{tool} is not installed (scripts/setup)")


def netns_missing(*tools: str) -> str | None:
    """Why a test of namespace hosts cannot run here (None: it can): root, ``ip`` and
    sshd, which every such test needs, and ``tools``."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ssh-keygen", "/usr/sbin/sshd", *tools):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def suite_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def run_suite(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(suite_cmd(*args), cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def load_results(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["results"]


def recorded_pids(run_dir: Path) -> list[int]:
    """The PIDs a lab recorded in its run directory (``*.pid``: ``ProcessHandle`` JSON)."""
    return [json.loads(p.read_text())["pid"] for p in run_dir.glob("*.pid")]


def pid_alive(pid: int) -> bool:
    """Running (a zombie waiting for a PID 1 that does not reap counts as gone)."""
    return proc_state(pid) not in (None, "Z")


def free_port_base(lo: int, hi: int, span: int = 14, timeout: float = 120.0) -> int:
    """A port base in [lo, hi - span] whose ``span`` ports are all free now.

    The helpers' port ranges overlap the kernel's ephemeral range: other
    clients' TIME-WAIT sockets hold single ports for a minute, so a fixed
    base is sometimes refused; any base inside the range will do."""
    from wanbench.procs import port_free
    from wanbench.wait import wait_for

    def find() -> int | None:
        for base in range(lo, hi - span + 1):
            if all(port_free(base + i) for i in range(span)):
                return base
        return None

    return int(wait_for(find, what=f"{span} free loopback ports in {lo}..{hi}", timeout=timeout, interval=1.0))
