"""Helpers for self-tests that start the real lab or run the real suite."""

from __future__ import annotations

import json
import os
import re
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


def passed_or_only_level0_regressions(res: subprocess.CompletedProcess[str], results: Path) -> list[str]:
    """Assert that a suite run passed, or that every test it failed is a cell whose
    only regressions are its ``level0`` checks (QPS or latency against the rounds
    of level 0 beside it); return those checks' messages.

    For lab runs that examine something else (interleaving, round trips, fault
    evidence): a ``level0`` check is a statistical verdict on a few rounds of a
    few hundredths of a second, with the false-alarm rate it is designed to
    have, on a machine the other CI lane loads. Anything else that failed (an
    error, a broken cell, a census or absolute check) still fails the caller."""
    tail = res.stdout[-4000:] + res.stderr[-2000:]
    if res.returncode == 0:
        return []
    assert res.returncode == 1, tail  # 1: tests failed; anything else is an error of the run itself
    summary = res.stdout.strip().splitlines()[-1]
    failed = int(m.group(1)) if (m := re.search(r"(\d+) failed", summary)) else 0
    assert "error" not in summary, tail
    messages: list[str] = []
    timing_only = 0
    for cell in load_results(results):
        verdict = cell.get("verdict") or {}
        worse = [c for c in verdict.get("checks", []) if c.get("status") == "regression"]
        if verdict.get("status") == "regression" and worse and all(c["kind"] == "level0" for c in worse):
            timing_only += 1
            messages += [c["message"] for c in worse]
    assert failed == timing_only, f"{failed} failed, {timing_only} on level-0 checks alone\n" + tail
    return messages


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


class PrivateMariadb:
    """A throw-away MariaDB on ``127.0.0.1:port`` with the lab's server settings
    (``wanbench.profiles.lab.mariadb.server_argv``), one SQL user with every grant, its
    files in a temporary directory; stopped by PID and removed by ``stop``."""

    def __init__(self, port: int, *, user: str, password: str, prefix: str = "wanbench-db-") -> None:
        import tempfile

        self.port, self.user, self.password = port, user, password
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.socket, self.log = self.dir / "mysqld.sock", self.dir / "mariadb.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        from wanbench.errors import InfrastructureError
        from wanbench.procs import find_binary, log_tail
        from wanbench.profiles.lab.mariadb import server_argv
        from wanbench.wait import wait_for

        needs("mariadbd", "mariadb-install-db", "mariadb")
        data, tmp = self.dir / "data", self.dir / "tmp"
        tmp.mkdir()
        subprocess.run([find_binary("mariadb-install-db"), "--no-defaults",
                        f"--datadir={data}", "--user=root", "--auth-root-authentication-method=normal",
                        "--skip-test-db"], capture_output=True, text=True, timeout=120, check=True)
        argv = server_argv(find_binary("mariadbd", "/usr/sbin/mariadbd"), data=data, socket=self.socket, tmp=tmp,
                           port=self.port)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise InfrastructureError(f"mariadbd exited: {log_tail(self.log)}")
            return self._client("SELECT 1", check=False).returncode == 0

        wait_for(ready, what=f"MariaDB on port {self.port}", timeout=60, interval=0.2,
                 hint=f"log: {self.log}")
        self.root_sql(f"DELETE FROM mysql.user WHERE User=''; CREATE USER '{self.user}'@'127.0.0.1' IDENTIFIED BY "
                      f"'{self.password}'; GRANT ALL ON *.* TO '{self.user}'@'127.0.0.1'; FLUSH PRIVILEGES;")

    def _client(self, sql: str, *, check: bool) -> subprocess.CompletedProcess[str]:
        # the statements on stdin, not in argv: a CREATE USER's password stays out of the process list
        return subprocess.run(["mariadb", "-S", str(self.socket), "-uroot", "-N"], input=sql,
                              capture_output=True, text=True, timeout=30, check=check)

    def root_sql(self, sql: str) -> str:
        """``sql`` as root over the UNIX socket; what the client printed (tab-separated, no header)."""
        return self._client(sql, check=True).stdout

    def __enter__(self) -> PrivateMariadb:
        try:
            self.start()
        except BaseException:  # __exit__ does not run when __enter__ raises: stop what did start
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        from wanbench.procs import stop_child

        try:
            if self.proc is not None:
                stop_child(self.proc, timeout=60, kill_timeout=30)  # by PID: the server this helper started
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
