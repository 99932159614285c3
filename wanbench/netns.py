"""Network-namespace "hosts" for testing remote-host behaviour for real on one machine.

Each host is a namespace with one veth (``eth0``) into a bridge that lives in
its own namespace, an address in 198.18.N.0/24 (the benchmarking range; ``net``
chooses other first octets) and
its own sshd with a generated host key and one authorized client key. The
root namespace joins the bridge at 198.18.N.1 so the runner reaches the hosts
over real SSH. Teardown deletes only our namespaces and veths and kills only
the sshd PIDs we started.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from wanbench.errors import CommandError, InfrastructureError, MissingToolError
from wanbench.executors.local import LocalExecutor
from wanbench.procs import stop_child
from wanbench.wait import wait_for

SSHD = "/usr/sbin/sshd"
#: the dead-man state directory on a host (``wanbench.faults.deadman.STATE_DIR``)
STATE_DIR = "/run/wanbench"


@dataclass(frozen=True)
class NetnsHost:
    name: str
    netns: str
    address: str
    interface: str = "eth0"
    ssh_port: int = 22

    @property
    def label(self) -> str:
        return f"{self.name}({self.address})"


class NetnsExecutor(LocalExecutor):
    """Runs argv inside one namespace directly (``ip netns exec``): the test's
    independent view of a host, not going through the SSH path under test."""

    def __init__(self, netns: str, host: str | None = None) -> None:
        super().__init__(host or netns, prefix=("ip", "netns", "exec", netns))
        self.netns = netns


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if check and proc.returncode != 0:
        raise CommandError("localhost", shlex.join(argv), proc.returncode, proc.stderr)
    return proc


def _free_octet(start: int, net: str = "198.18") -> int:
    """A third octet N whose ``net``.N.0/24 no interface in the root namespace uses."""
    used = _sh("ip", "-o", "-4", "addr", "show").stdout
    for i in range(150):
        n = 100 + (start + i) % 150
        if f" {net}.{n}." not in used:
            return n
    raise InfrastructureError(f"no free {net}.N.0/24 subnet for namespace hosts")


#: a network of the harness process with this PID (and a letter of its own, when one process makes two)
_OURS = re.compile(r"^wb(\d+)([a-z]?)-(br|h\d+)$")


def _delete_ns(ns: str) -> None:
    # processes left inside our namespaces (sshd, dead-man timers, sinks) were started by this harness
    for pid in _sh("ip", "netns", "pids", ns, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass
    _sh("ip", "netns", "del", ns, check=False)
    _sh("rm", "-rf", NetnsNetwork.state_dir(ns), check=False)


def sweep_stale_networks() -> list[str]:
    """Delete namespace networks of harness processes that died without tearing down (e.g. SIGKILL)."""
    removed = []
    for line in _sh("ip", "netns", "list", check=False).stdout.splitlines():
        ns = line.split()[0] if line.strip() else ""
        m = _OURS.match(ns)
        if not m:
            continue
        try:
            os.kill(int(m[1]), 0)
            continue  # its harness is still running
        except ProcessLookupError:
            pass
        _delete_ns(ns)
        _sh("ip", "link", "del", f"wb{m[1]}{m[2]}r", check=False)
        removed.append(ns)
    return removed


class NetnsNetwork:
    """``hosts`` namespace hosts on one bridge, each with its own sshd.

    Use as a context manager; ``__enter__`` tears down whatever it built if
    setup fails half-way.
    """

    def __init__(self, workdir: str | os.PathLike[str], *, hosts: int = 3, prefix: str | None = None,
                 net: str = "198.18", private_run: bool = False, tag: str = "",
                 octet: int | None = None) -> None:
        """``net``: the first two octets of the hosts' addresses (``net``.N.0/24), so
        suites running side by side can keep to ranges of their own.

        ``octet``: N itself, for a caller that keeps to a range of its own; it must be free
        (``up`` refuses one an interface of this machine uses). Default: a free one of 100-249.

        ``tag``: a letter after the PID in the names (``wb<pid><tag>-h1``), for a process that
        makes two networks at once; either is swept like any other once the process is gone.

        ``private_run``: each host's sshd (and so everything run over SSH there, dead-man
        timers included) sees a ``/run/wanbench`` of its own (a tmpfs in the sshd's mount
        namespace), as a real host has, instead of this machine's: a suite run against the hosts
        keeps its default state directory and shares nothing with runs on this machine.
        ``host_view(name)`` looks at a host as its sshd sees it."""
        if hosts < 1:
            raise ValueError("hosts must be >= 1")
        self.workdir = Path(workdir)
        self.count = hosts
        if not re.fullmatch(r"[a-z]?", tag):
            raise ValueError(f"tag {tag!r}: one lowercase letter, or none")
        self.prefix = prefix or f"wb{os.getpid()}{tag}"
        if not re.fullmatch(r"\d{1,3}\.\d{1,3}", net):
            raise ValueError(f"net {net!r}: give the first two octets, e.g. 198.18")
        self.net = net
        self.private_run = private_run
        if len(self.prefix) > 10 or (len(self.prefix) == 10 and hosts > 9):  # "<prefix>h<N>b" <= 15
            raise ValueError(f"prefix {self.prefix!r} too long for interface names")
        self.bridge_ns = f"{self.prefix}-br"
        self.root_if = f"{self.prefix}r"
        self.hosts: list[NetnsHost] = []
        if octet is not None and not 1 <= octet <= 254:
            raise ValueError(f"octet {octet}: 1-254")
        self._octet = octet
        self.octet = 0
        self.client_key = self.workdir / "id_ed25519"
        self.known_hosts = self.workdir / "known_hosts"
        self._namespaces: list[str] = []
        self._sshd: dict[str, subprocess.Popen[bytes]] = {}

    # -- lifecycle --
    def __enter__(self) -> NetnsNetwork:
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        for tool in ("ip", "ssh-keygen", SSHD):
            if _sh("sh", "-c", f"command -v {shlex.quote(tool)}", check=False).returncode != 0:
                raise MissingToolError(tool, "apt-get install iproute2 openssh-server")
        self.workdir.mkdir(parents=True, exist_ok=True)
        sweep_stale_networks()
        self.octet = _free_octet(os.getpid(), self.net) if self._octet is None else self._claim(self._octet)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "wanbench-netns-client", "-f", str(self.client_key))
        self._add_ns(self.bridge_ns)
        _sh("ip", "-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.bridge_ns, "link", "set", "br0", "up")
        self._veth(self.root_if, None, f"{self.net}.{self.octet}.1/24")
        for i in range(1, self.count + 1):
            host = NetnsHost(name=f"h{i}", netns=f"{self.prefix}-h{i}", address=f"{self.net}.{self.octet}.{10 + i}")
            self._add_ns(host.netns)
            _sh("ip", "-n", host.netns, "link", "set", "lo", "up")
            self._veth(f"{self.prefix}h{i}", host, f"{host.address}/24")
            self.hosts.append(host)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
        lines = [self._start_sshd(h) for h in self.hosts]
        self.known_hosts.write_text("".join(lines))
        for h in self.hosts:
            wait_for(functools.partial(self._banner, h), what=f"sshd on {h.label}", timeout=15,
                     hint=f"see {self.workdir / (h.name + '-sshd.log')}")

    def _claim(self, octet: int) -> int:
        if f" {self.net}.{octet}." in _sh("ip", "-o", "-4", "addr", "show").stdout:
            raise InfrastructureError(f"{self.net}.{octet}.0/24 is already in use on this machine")
        return octet

    def down(self) -> None:
        for name, proc in list(self._sshd.items()):
            stop_child(proc, timeout=5, kill_timeout=5)
            del self._sshd[name]
        for ns in reversed(self._namespaces):
            _delete_ns(ns)
        self._namespaces.clear()
        _sh("ip", "link", "del", self.root_if, check=False)  # normally gone with its peer already
        self.hosts = []

    # -- access --
    def host(self, name: str) -> NetnsHost:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge (where the runner sits)."""
        return f"{self.net}.{self.octet}.1"

    def ssh(self, name: str, **kwargs: object):  # -> SSHExecutor, imported lazily (paramiko)
        from wanbench.executors.ssh import SSHExecutor

        h = self.host(name)
        opts: dict[str, object] = {
            "user": "root",
            "port": h.ssh_port,
            "key_filename": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "ssh_config": str(self.workdir / "no-ssh-config"),
            "connect_timeout": 5.0,
        }
        opts.update(kwargs)
        return SSHExecutor(h.address, **opts)  # type: ignore[arg-type]

    def direct(self, name: str) -> NetnsExecutor:
        h = self.host(name)
        return NetnsExecutor(h.netns, host=h.name)

    def host_view(self, name: str) -> LocalExecutor:
        """Runs argv in the network and mount namespaces of ``name``'s sshd: the host as anything
        started over SSH there sees it (its private ``/run/wanbench`` with ``private_run``), not
        going through the SSH path under test."""
        return LocalExecutor(name, prefix=("nsenter", "-t", str(self.sshd_pid(name)), "-m", "-n", "--"))

    @staticmethod
    def state_dir(netns: str) -> str:
        """A per-host fault state directory: all namespaces share the root's /run."""
        return f"/run/wanbench/netns-{netns}"

    def sshd_pid(self, name: str) -> int:
        return self._sshd[name].pid

    # -- helpers --
    def _add_ns(self, ns: str) -> None:
        _sh("ip", "netns", "add", ns)
        self._namespaces.append(ns)

    def _veth(self, ifname: str, host: NetnsHost | None, cidr: str) -> None:
        peer = f"{ifname}b"
        _sh("ip", "link", "add", ifname, "type", "veth", "peer", "name", peer)
        _sh("ip", "link", "set", peer, "netns", self.bridge_ns)
        _sh("ip", "-n", self.bridge_ns, "link", "set", peer, "master", "br0", "up")
        if host is None:
            _sh("ip", "addr", "add", cidr, "dev", ifname)
            _sh("ip", "link", "set", ifname, "up")
            return
        _sh("ip", "link", "set", ifname, "netns", host.netns)
        _sh("ip", "-n", host.netns, "link", "set", ifname, "name", host.interface)
        _sh("ip", "-n", host.netns, "addr", "add", cidr, "dev", host.interface)
        _sh("ip", "-n", host.netns, "link", "set", host.interface, "up")

    def _start_sshd(self, h: NetnsHost) -> str:
        """Start sshd in ``h``'s namespace; return its known_hosts line."""
        key = self.workdir / f"{h.name}_host_ed25519"
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.name, "-f", str(key))
        auth = self.workdir / "authorized_keys"
        auth.write_text(Path(f"{self.client_key}.pub").read_text())
        cfg = self.workdir / f"{h.name}-sshd_config"
        cfg.write_text(
            "\n".join([
                f"Port {h.ssh_port}",
                f"ListenAddress {h.address}",
                f"HostKey {key}",
                f"AuthorizedKeysFile {auth}",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",
                "PidFile none",
                "LogLevel ERROR",
                "",
            ])
        )
        argv = [SSHD, "-D", "-e", "-f", str(cfg)]
        if self.private_run:
            # `ip netns exec` gives its command a mount namespace of its own (a slave of this machine's):
            # a tmpfs mounted there is seen by this sshd and its children only
            Path(STATE_DIR).mkdir(mode=0o755, parents=True, exist_ok=True)  # the mount point
            argv = ["sh", "-c", 'mount -t tmpfs -o size=4m,mode=0755 "wanbench-$1" "$2" && shift 2 && exec "$@"',
                    "sh", h.netns, STATE_DIR, *argv]
        log = open(self.workdir / f"{h.name}-sshd.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", h.netns, *argv],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            )
        finally:
            log.close()
        self._sshd[h.name] = proc
        pub = Path(f"{key}.pub").read_text().split()
        hostpat = h.address if h.ssh_port == 22 else f"[{h.address}]:{h.ssh_port}"
        return f"{hostpat} {pub[0]} {pub[1]}\n"

    def _banner(self, h: NetnsHost) -> bool:
        proc = self._sshd[h.name]
        if proc.poll() is not None:
            raise InfrastructureError(f"sshd for {h.label} exited with {proc.returncode}; "
                                      f"see {self.workdir / (h.name + '-sshd.log')}")
        with socket.create_connection((h.address, h.ssh_port), timeout=1) as s:
            s.settimeout(1)
            return s.recv(4).startswith(b"SSH-")
