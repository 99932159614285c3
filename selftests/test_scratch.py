"""Scratch directories: a run owns its own, and the next run sweeps those
whose owner is gone (a runner killed with ``kill -9`` cannot remove its own)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from wanbench import scratch
from wanbench.procs import ProcessHandle, proc_start_time


def _dead_owner(tmp_path: Path) -> Path:
    proc = subprocess.Popen(["sleep", "30"])
    start = proc_start_time(proc.pid)
    assert start is not None
    path = tmp_path / f"{scratch.PREFIX}killed"
    path.mkdir()
    (path / "probe").mkdir()
    (path / "probe" / "out.txt").write_text("rounds")
    ProcessHandle("wanbench run", proc.pid, start, "pytest").save(path / scratch.OWNER_FILE)
    proc.kill()
    proc.wait()
    return path


def test_make_scratch_records_this_process_as_owner(tmp_path: Path) -> None:
    path = scratch.make_scratch(tmp_path)
    assert path.name.startswith(scratch.PREFIX)
    owner = ProcessHandle.load(path / scratch.OWNER_FILE)
    assert owner is not None
    assert owner.pid == os.getpid()
    assert owner.alive()
    assert scratch.sweep_stale(tmp_path) == []
    assert path.exists()


def test_sweep_removes_the_scratch_of_a_run_that_is_gone(tmp_path: Path) -> None:
    dead = _dead_owner(tmp_path)
    alive = scratch.make_scratch(tmp_path)
    removed = scratch.sweep_stale(tmp_path)
    assert [p for p, _ in removed] == [dead]
    assert "is gone" in removed[0][1]
    assert not dead.exists()
    assert alive.exists()


def test_a_recycled_pid_does_not_keep_a_stale_directory(tmp_path: Path) -> None:
    path = tmp_path / f"{scratch.PREFIX}recycled"
    path.mkdir()
    start = proc_start_time(os.getpid())
    assert start is not None
    # our own PID, but another start time: the PID was reused by someone else
    ProcessHandle("wanbench run", os.getpid(), start + 1, "pytest").save(path / scratch.OWNER_FILE)
    assert scratch.stale_reason(path)
    assert [p for p, _ in scratch.sweep_stale(tmp_path)] == [path]


def test_ownerless_directories_are_swept_only_when_old(tmp_path: Path) -> None:
    young = tmp_path / f"{scratch.PREFIX}young"
    old = tmp_path / f"{scratch.PREFIX}old"
    young.mkdir()
    old.mkdir()
    long_ago = time.time() - 2 * scratch.OWNERLESS_GRACE_S
    os.utime(old, (long_ago, long_ago))
    assert [p for p, _ in scratch.sweep_stale(tmp_path)] == [old]
    assert young.exists()


def test_other_names_and_plain_files_are_left_alone(tmp_path: Path) -> None:
    other = tmp_path / "not-wanbench"
    other.mkdir()
    plain = tmp_path / f"{scratch.PREFIX}file"
    plain.write_text("x")
    long_ago = time.time() - 2 * scratch.OWNERLESS_GRACE_S
    for p in (other, plain):
        os.utime(p, (long_ago, long_ago))
    assert scratch.sweep_stale(tmp_path) == []
    assert other.exists()
    assert plain.exists()
