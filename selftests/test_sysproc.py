"""The one sysbench supervisor (``wanbench/workloads/sysproc.py``), without a
database: sysbench runs a Lua command of its own. A Ctrl-C that lands right
after ``Popen`` (the drift TPC-C's old copy had) leaves no sysbench behind;
secrets never reach the command line; the scratch directory's files come
back and the directory goes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from wanbench.errors import InfrastructureError
from wanbench.workloads import sysproc

SCRIPT = """
local ffi = require("ffi")
ffi.cdef("int usleep(unsigned int usec);")
function cmd_hold()
   local f = assert(io.open(os.getenv("WB_SCRATCH") .. "/note.txt", "w"))
   f:write("from lua\\n")
   f:close()
   io.stdout:write("holding in " .. os.getenv("WB_SCRATCH") .. "\\n")
   io.stdout:flush()
   for _ = 1, tonumber(os.getenv("WB_HOLD_TENTHS") or "0") do ffi.C.usleep(100000) end
   io.stdout:write("secret was " .. (sysbench.opt.mysql_password or "?") .. "\\n")
end
sysbench.cmdline.commands = { hold = { cmd_hold } }
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    if shutil.which("sysbench") is None:
        pytest.skip("sysbench is not installed (run scripts/setup)")
    path = tmp_path / "hold.lua"
    path.write_text(SCRIPT)
    return path


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_files_come_back_secret_is_redacted_and_scratch_goes(script: Path) -> None:
    res = sysproc.run(["sysbench", str(script), "hold"], what="hold", timeout=60, threads=1,
                      secrets=["mysql-password=Sup3r-s3cret"], env={"WB_HOLD_TENTHS": "0"})
    assert res.exit_status == 0
    assert res.files == {"note.txt": "from lua\n"}
    assert "secret was ***" in res.text  # sysbench got it, from the options file
    assert "Sup3r-s3cret" not in res.text + res.command
    options = Path(res.command.split("--config-file=")[1].split()[0])
    assert not options.exists(), "the options file was left behind"
    work = Path(res.text.split("holding in ")[1].split()[0])
    assert work.name.startswith("wanbench-run-")
    assert options.parent == work  # a runner killed with kill -9 leaves it to the next run's sweep
    assert not work.exists(), "the scratch directory was left behind"


def test_timeout_kills_and_reaps(script: Path) -> None:
    outputs: list[str] = []
    with pytest.raises(InfrastructureError, match=r"no result after 1s, sysbench \(pid (\d+)\) was killed") as info:
        sysproc.run(["sysbench", str(script), "hold"], what="hold", timeout=1, threads=1,
                    env={"WB_HOLD_TENTHS": "300"}, on_output=outputs.append)
    pid = int(str(info.value).split("(pid ")[1].split(")")[0])
    assert not _alive(pid)
    assert outputs
    assert "holding" in outputs[0]


def test_interrupt_right_after_popen_leaves_no_sysbench(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    real_start = sysproc._start

    def start(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - passes through
        proc = real_start(*args, **kwargs)
        started.append(proc.pid)
        return proc

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt  # lands between Popen and the wait

    monkeypatch.setattr(sysproc, "_start", start)
    monkeypatch.setattr(sysproc, "RunnableSampler", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sysproc.run(["sysbench", str(script), "hold"], what="hold", timeout=60, threads=1,
                    env={"WB_HOLD_TENTHS": "300"})
    assert started
    assert not _alive(started[0]), f"sysbench {started[0]} survived the interrupt"


class _Hooks:
    """Window hooks that record their calls; ``begin`` is slow, as a snapshot
    under load can be, so a load that ends right after its marker line races it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")

    def begin(self) -> None:
        time.sleep(1.0)  # longer than the load's 0.5 s after its marker
        self.calls.append("begin")

    def end(self) -> None:
        self.calls.append("end")

    def missed(self, reason: str) -> None:
        self.calls.append(f"missed: {reason}")


def test_a_load_that_ends_at_its_marker_closes_the_window_it_opened(script: Path) -> None:
    """The output reader opens the window at the marker line and the reaper
    closes it: the end never overtakes the begin (CI saw the reaper stop an
    evidence poller the reader had not yet started)."""
    hooks = _Hooks()
    res = sysproc.run(["sysbench", str(script), "hold"], what="hold", timeout=60, threads=1,
                      env={"WB_HOLD_TENTHS": "5"}, window_marker="holding in", window=hooks)
    assert res.exit_status == 0
    assert hooks.calls == ["prepare", "begin", "end"]


def test_a_marker_read_after_the_load_ended_opens_no_window(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader thread that reaches the marker only after the load has ended
    (a busy machine: CI saw 0 % CPU on every server for such a window) opens
    no window; the hooks are told it was missed, and why."""
    real = sysproc.proc_cpu_seconds

    def stalled(pid: int) -> float | None:
        time.sleep(1.0)  # the reader is descheduled here; the load ends meanwhile
        return real(pid)

    monkeypatch.setattr(sysproc, "proc_cpu_seconds", stalled)
    hooks = _Hooks()
    res = sysproc.run(["sysbench", str(script), "hold"], what="hold", timeout=60, threads=1,
                      env={"WB_HOLD_TENTHS": "0"}, window_marker="holding in", window=hooks)
    assert res.exit_status == 0
    assert hooks.calls[0] == "prepare"
    assert hooks.calls[1].startswith("missed: hold: its output reader reached 'holding in' only after the load")
    assert hooks.calls[2:] == ["end"]
