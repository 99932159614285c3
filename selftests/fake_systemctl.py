#!/usr/bin/env python3
"""A stand-in for ``systemctl`` on namespace test hosts (they have no systemd).

It understands what wanbench's TiDB availability faults run, with
systemctl's command line: ``start|stop|is-active UNIT`` and ``show -p MainPID
--value UNIT``. A unit ``<role>-<port>.service`` is a small Python TCP echo
server on that port, started in the caller's network namespace; its PID is
kept in a directory per namespace next to this file. Only self-tests use it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SERVER = r"""
import socket, sys, threading
def serve(c):
    try:
        while True:
            data = c.recv(4096)
            if not data:
                return
            c.sendall(data)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def _units() -> Path:
    ns = os.stat("/proc/self/ns/net").st_ino
    d = Path(__file__).resolve().parent / "units" / str(ns)
    d.mkdir(parents=True, exist_ok=True)
    return d


def _pid(unit: str) -> int:
    try:
        pid = int((_units() / f"{unit}.pid").read_text())
    except (OSError, ValueError):
        return 0
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return 0
    return 0 if state in ("Z", "X") else pid


def _port(unit: str) -> int:
    return int(unit.removesuffix(".service").rsplit("-", 1)[1])


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def start(unit: str) -> int:
    if _pid(unit):
        return 0
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(_port(unit))], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    (_units() / f"{unit}.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _listening(_port(unit)):
            return 0
        time.sleep(0.05)
    print(f"{unit}: not listening after 10 s", file=sys.stderr)
    return 1


def stop(unit: str) -> int:
    pid = _pid(unit)
    if pid:
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)  # systemd does the same for a stopped process
        deadline = time.monotonic() + 10
        while _pid(unit) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid(unit):
            os.kill(pid, signal.SIGKILL)
    (_units() / f"{unit}.pid").unlink(missing_ok=True)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] in ("start", "stop"):
        return start(argv[1]) if argv[0] == "start" else stop(argv[1])
    if len(argv) == 2 and argv[0] == "is-active":
        active = bool(_pid(argv[1]))
        print("active" if active else "inactive")
        return 0 if active else 3
    if argv[:4] == ["show", "-p", "MainPID", "--value"] and len(argv) == 5:
        print(_pid(argv[4]))
        return 0
    print(f"fake systemctl: unsupported {argv}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
