"""SSHExecutor against real sshd processes in namespace hosts."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from wanbench.errors import CommandError, HostKeyError, HostUnreachableError
from wanbench.executors import get_executor
from wanbench.executors.ssh import SSHExecutor
from wanbench.netns import NetnsNetwork

pytestmark = pytest.mark.netns


def test_argv_is_quoted_not_interpolated(ssh_h: dict[str, SSHExecutor]) -> None:
    args = ["a b", "$(echo INJECTED)", "'q'", "x;echo INJECTED", "*"]
    res = ssh_h["h1"].run(["printf", "%s|", *args])
    assert res.stdout == "|".join(args) + "|"
    assert res.ok
    assert res.host == ssh_h["h1"].host


def test_input_status_and_check(ssh_h: dict[str, SSHExecutor]) -> None:
    ex = ssh_h["h1"]
    assert ex.run(["cat"], input="hello\n").stdout == "hello\n"
    res = ex.run(["sh", "-c", "echo oops >&2; exit 3"], check=False)
    assert (res.exit_status, res.stderr.strip()) == (3, "oops")
    with pytest.raises(CommandError, match="exit 3") as info:
        ex.run(["sh", "-c", "echo oops >&2; exit 3"])
    assert info.value.exit_status == 3


def test_timeout_then_connection_is_reused(ssh_h: dict[str, SSHExecutor]) -> None:
    ex = ssh_h["h2"]
    start = time.monotonic()
    with pytest.raises(CommandError, match="timed out") as info:
        ex.run(["sleep", "20"], timeout=0.5)
    assert info.value.exit_status is None
    assert time.monotonic() - start < 10
    transport = ex._client.get_transport() if ex._client else None  # noqa: SLF001 - checking reuse
    assert ex.run(["echo", "ok"]).stdout == "ok\n"
    assert ex._client is not None
    assert ex._client.get_transport() is transport


def test_reconnects_after_the_connection_drops(ssh_h: dict[str, SSHExecutor]) -> None:
    ex = ssh_h["h3"]
    # kill the sshd session process that serves this very connection
    with pytest.raises(HostUnreachableError, match="closed before the command reported"):
        ex.run(["sh", "-c", "kill -9 $PPID; sleep 30"], timeout=20)
    assert ex.run(["echo", "back"]).stdout == "back\n"


def test_unreachable_host_is_one_clear_error(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    refused = SSHExecutor(netns_net.host("h1").address, port=2, user="root", known_hosts=tmp_path / "kh",
                          ssh_config=tmp_path / "none", connect_timeout=3)
    with pytest.raises(HostUnreachableError, match=r"cannot connect over SSH"):
        refused.run(["true"])
    nobody = f"198.18.{netns_net.octet}.250"  # inside our own subnet, no host there
    silent = SSHExecutor(nobody, user="root", known_hosts=tmp_path / "kh", ssh_config=tmp_path / "none",
                         connect_timeout=1.5)
    with pytest.raises(HostUnreachableError, match=nobody):
        silent.run(["true"], timeout=5)


def test_host_key_mismatch_refuses_to_connect(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    h1, h2 = netns_net.host("h1"), netns_net.host("h2")
    lines = netns_net.known_hosts.read_text().splitlines()
    h2_key = next(ln for ln in lines if ln.startswith(h2.address + " ")).split(" ", 1)[1]
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{h1.address} {h2_key}\n")  # h1's address with another host's key
    ex = netns_net.ssh("h1", known_hosts=str(forged))
    with pytest.raises(HostKeyError, match="HOST KEY MISMATCH"):
        ex.run(["touch", "/tmp/should-not-exist"])
    # a changed key is refused even when new hosts may be accepted
    ex = netns_net.ssh("h1", known_hosts=str(forged), accept_new_host_keys=True)
    with pytest.raises(HostKeyError, match="HOST KEY MISMATCH"):
        ex.run(["true"])
    assert forged.read_text() == f"{h1.address} {h2_key}\n"


def test_unknown_host_rejected_unless_accept_new(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    kh = tmp_path / "ssh" / "known_hosts"
    with pytest.raises(HostKeyError, match="not in known_hosts"):
        netns_net.ssh("h2", known_hosts=str(kh)).run(["true"])
    assert not kh.exists()
    ex = netns_net.ssh("h2", known_hosts=str(kh), accept_new_host_keys=True)
    assert ex.run(["echo", "hi"]).stdout == "hi\n"
    ex.close()
    assert netns_net.host("h2").address in kh.read_text()
    # from now on the recorded key is trusted without the option
    strict = netns_net.ssh("h2", known_hosts=str(kh))
    assert strict.run(["true"]).ok
    strict.close()


def test_user_port_identity_from_ssh_config(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    h3 = netns_net.host("h3")
    cfg = tmp_path / "config"
    cfg.write_text(
        f"Host db-node-3\n  HostName {h3.address}\n  User root\n  Port {h3.ssh_port}\n"
        f"  IdentityFile {netns_net.client_key}\n  UserKnownHostsFile {netns_net.known_hosts}\n"
    )
    ex = get_executor("ssh", host="db-node-3", ssh_config=str(cfg))
    assert isinstance(ex, SSHExecutor)
    assert (ex.hostname, ex.user, ex.port) == (h3.address, "root", h3.ssh_port)
    out = ex.run(["ip", "-o", "-4", "addr", "show", "eth0"]).stdout
    ex.close()
    assert h3.address in out


def test_secrets_never_in_repr_or_errors(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    key_text = netns_net.client_key.read_text()
    ex = netns_net.ssh("h1", known_hosts=str(tmp_path / "empty"))
    with pytest.raises(HostKeyError) as info:
        ex.run(["true"])
    secret_line = key_text.splitlines()[1]
    assert secret_line not in str(info.value)
    assert secret_line not in repr(ex)


def test_teardown_ends_ssh_sessions_a_client_left_open(tmp_path: Path, alive: Callable[[int], bool]) -> None:
    """sshd forks a process per connection; ending only the listener left those
    behind (``sshd: root@notty``) once their namespace was gone."""
    net = NetnsNetwork(tmp_path, hosts=1, prefix="wbleak")
    with net:
        ex = net.ssh("h1")
        assert ex.run(["true"]).ok  # an open session: sshd has forked its session process
        ns = net.host("h1").netns
        inside = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, check=True)
        pids = [int(p) for p in inside.stdout.split()]
        assert len(pids) >= 2, "expected the sshd listener and the session's process"
    try:
        assert not [p for p in pids if alive(p)], "processes of a deleted namespace host survived teardown"
    finally:
        ex.close()


def test_a_dead_processs_tagged_network_is_swept_and_a_live_ones_kept() -> None:
    """``wb<pid><tag>-*`` namespaces (a process with two networks at once) are swept like
    ``wb<pid>-*`` once that process is gone, and never while it runs."""
    from wanbench import netns

    dead = subprocess.Popen(["true"])
    dead.wait()  # a PID that no process has now
    names = [f"wb{dead.pid}l-br", f"wb{os.getpid()}z-br"]
    for ns in names:
        subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        removed = netns.sweep_stale_networks()  # (another worker's sweep may have taken the dead one first)
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()
        assert names[0] not in listed
        assert names[1] not in removed
        assert names[1] in listed
    finally:
        for ns in names:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
    with pytest.raises(ValueError, match="one lowercase letter"):
        NetnsNetwork("/nonexistent", tag="ab")


def test_a_given_range_in_use_is_refused_and_nothing_is_left(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    """``octet=``: a caller's own range (the TiDB tests keep to 64 and 66); one an interface of
    this machine already uses (here the session's own network's) is refused before anything is
    made, and its error says which."""
    from wanbench.errors import InfrastructureError

    taken = netns_net.octet
    with pytest.raises(InfrastructureError, match=rf"198\.18\.{taken}\.0/24 is already in use"):
        with NetnsNetwork(tmp_path, hosts=1, tag="o", octet=taken):
            pass
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"wb{os.getpid()}o-" not in listed
    with pytest.raises(ValueError, match="1-254"):
        NetnsNetwork(tmp_path, octet=0)
