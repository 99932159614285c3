"""The one reader of ``/proc`` (``wanbench.procs``): a command name with
spaces and parentheses, a stopped process, a zombie, a process that is gone,
CPU seconds and runnable time of a real busy child, and the CPU model."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys

from wanbench.procs import (
    cpu_model,
    proc_cpu_seconds,
    proc_start_time,
    proc_state,
    proc_threads,
    read_stat,
    stat_fields,
    thread_runnable_seconds,
)
from wanbench.wait import wait_for

#: a stat line as the kernel writes it, for a command named "a) (b c" (field 2)
STAT = ("4242 (a) (b c) T 1 4242 4242 0 -1 4194560 97 0 0 0 150 25 0 0 20 0 3 0 987654 1000 200 "
        + " ".join(["0"] * 30) + "\n")


def test_stat_fields_split_after_the_last_parenthesis() -> None:
    fields = stat_fields(STAT)
    assert fields is not None
    assert fields[0] == "T"
    assert (fields[11], fields[12]) == ("150", "25")
    assert fields[19] == "987654"


def test_stat_fields_refuse_what_is_no_stat_line() -> None:
    assert stat_fields("") is None  # a process that ended while it was read
    assert stat_fields("cat: /proc/1/stat: No such file or directory") is None
    assert stat_fields("1 (x) S 1") is None  # cut short


def test_this_process_is_running_and_has_a_start_and_cpu_time() -> None:
    me = os.getpid()
    assert proc_state(me) in ("R", "S")
    fields = read_stat(me)
    assert fields is not None
    assert proc_start_time(me) == int(fields[19])
    cpu = proc_cpu_seconds(me)
    assert cpu is not None
    assert cpu > 0
    assert os.getpid() in proc_threads(me)


def test_a_stopped_child_a_zombie_and_a_gone_one() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        start = proc_start_time(child.pid)
        assert start is not None
        os.kill(child.pid, signal.SIGSTOP)
        wait_for(lambda: proc_state(child.pid) == "T", what="the child to stop", timeout=10)
        os.kill(child.pid, signal.SIGKILL)
        wait_for(lambda: proc_state(child.pid) == "Z", what="the child to be a zombie", timeout=10)
        assert proc_start_time(child.pid) is None  # a zombie is not alive
        assert proc_cpu_seconds(child.pid) is not None  # but its counters can still be read
    finally:
        child.kill()
        child.wait()
    assert proc_state(child.pid) is None
    assert proc_start_time(child.pid) is None
    assert proc_cpu_seconds(child.pid) is None
    assert proc_threads(child.pid) == []
    assert thread_runnable_seconds(child.pid) == {}


def test_cpu_and_runnable_time_of_a_busy_child_grow() -> None:
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        first = thread_runnable_seconds(child.pid)
        assert list(first) == [child.pid]
        wait_for(lambda: (proc_cpu_seconds(child.pid) or 0.0) >= 0.2, what="the child to use 0.2 s of CPU",
                 timeout=20)
        assert thread_runnable_seconds(child.pid)[child.pid] > first[child.pid]
    finally:
        child.kill()
        child.wait()


def test_cpu_model_is_the_first_model_name_else_the_platforms() -> None:
    with open("/proc/cpuinfo") as fh:
        names = [line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")]
    assert cpu_model() == (names[0] if names else platform.processor() or "")
