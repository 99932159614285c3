"""Scratch directories of a run's load generators, and of a chain driver's
chain file (``wanbench.pytest_plugin.chain``).

Each is made with an owner file naming the process that made it (PID *and*
start time). A run that ends in any ordinary way removes its own; a runner
killed with ``kill -9`` cannot, so every run first sweeps the scratch
directories whose owner is gone, as it sweeps stale faults.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from wanbench.procs import ProcessHandle, proc_start_time

PREFIX = "wanbench-run-"
OWNER_FILE = "owner.json"
#: an ownerless directory younger than this may be one another run is making
#: right now (between mkdtemp and writing its owner file): left alone
OWNERLESS_GRACE_S = 300.0


def make_scratch(base: Path | None = None) -> Path:
    """A new scratch directory owned by this process."""
    path = Path(tempfile.mkdtemp(prefix=PREFIX, dir=base))
    pid = os.getpid()
    start = proc_start_time(pid)
    assert start is not None, "this process has no /proc entry"
    ProcessHandle("wanbench run", pid, start, sys.argv[0] if sys.argv else "").save(path / OWNER_FILE)
    return path


def stale_reason(path: Path, *, now: float | None = None) -> str:
    """Why ``path`` is a stale scratch directory, or '' when it is not (its
    owner still runs, it is young and ownerless, or it is not ours)."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return ""
    if not path.is_dir() or path.is_symlink() or st.st_uid != os.getuid():
        return ""
    owner = ProcessHandle.load(path / OWNER_FILE)
    if owner is not None:
        return "" if owner.alive() else f"its run (pid {owner.pid}) is gone"
    age = (time.time() if now is None else now) - st.st_mtime
    if age < OWNERLESS_GRACE_S:
        return ""
    return f"no owner file and untouched for {age / 60:.0f} min"


def sweep_stale(base: Path | None = None, *, owner_pid: int | None = None) -> list[tuple[Path, str]]:
    """Remove the scratch directories of runs that are gone (only those of
    the run ``owner_pid``, if given); returns what was removed and why."""
    root = Path(base) if base is not None else Path(tempfile.gettempdir())
    removed = []
    for path in sorted(root.glob(PREFIX + "*")):
        if owner_pid is not None:
            owner = ProcessHandle.load(path / OWNER_FILE)
            if owner is None or owner.pid != owner_pid:
                continue
        why = stale_reason(path)
        if why:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append((path, why))
    return removed
