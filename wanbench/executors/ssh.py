"""Run commands on a remote host over SSH (paramiko), without shell injection.

The remote side always gets ``shlex.join(argv)``: topology values are quoted,
never interpolated. Host keys are checked against known_hosts; an unknown or
changed key stops the run before anything executes on that host. One
connection per executor is kept and re-opened if it drops.

``~/.ssh/config`` is honoured as OpenSSH users expect: ``HostName``,
``User``, ``Port``, ``IdentityFile``, ``UserKnownHostsFile``, and the two
ways data centres put a bastion in front of their hosts: ``ProxyJump``
(each hop is itself an ``SSHExecutor``, looked up in the same config; the
target is reached through a ``direct-tcpip`` channel of the hop's
connection) and ``ProxyCommand`` (run locally, its stdin/stdout is the
socket). ``bypass_ports`` names every SSH port the connection depends on so
fault mechanisms never shape any of them.
"""

from __future__ import annotations

import os
import select
import shlex
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import paramiko

from wanbench.errors import CommandError, ConfigError, HostKeyError, HostUnreachableError
from wanbench.executors.base import CommandResult
from wanbench.procs import stop_child

_DEFAULT_CONFIG = Path("~/.ssh/config")
_DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    """Refuse unknown host keys with our own error type (no message matching needed)."""

    def __init__(self, port: int) -> None:
        self.port = port

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise HostKeyError(
            hostname,
            self.port,
            f"host key ({key.get_name()} {key.fingerprint}) is not in known_hosts; add it with "
            "`ssh-keyscan` after checking it, or pass --ssh-accept-new-hosts",
        )


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust-on-first-use: record an unknown key in known_hosts. A *changed* key is still refused."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        client.save_host_keys(str(self.known_hosts))


class _ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, but closing it also reaps the process and its pipes (paramiko
    only signals it, which leaves a zombie and three open pipes per reconnect on long runs)."""

    def close(self) -> None:
        proc = self.process
        stop_child(proc, timeout=5, kill_timeout=5)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


class SSHExecutor:
    """Executor over one reused SSH connection; every call has a timeout."""

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int | None = None,
        key_filename: str | None = None,
        known_hosts: str | os.PathLike[str] | None = None,
        accept_new_host_keys: bool = False,
        connect_timeout: float = 10.0,
        ssh_config: str | os.PathLike[str] | None = None,
        connect_to: str | None = None,
        proxy_jump: str | None = None,
        proxy_command: str | None = None,
        _chain: tuple[str, ...] = (),
    ) -> None:
        self.host = host
        # connect_to: tiup's manage_host, the address SSH goes to when it is not the service address
        target = connect_to or host
        cfg = self._lookup_config(target, ssh_config)
        self.hostname: str = cfg.get("hostname", target)
        try:
            self.port: int = int(port if port is not None else cfg.get("port", 22))
        except ValueError:
            raise ConfigError(f"ssh config for {target}: Port {cfg.get('port')!r} is not a number") from None
        self.user: str | None = user or cfg.get("user")
        identity = cfg.get("identityfile") or []
        self.key_filename: str | None = key_filename or (os.path.expanduser(identity[0]) if identity else None)
        kh = known_hosts or (cfg.get("userknownhostsfile", "").split() or [str(_DEFAULT_KNOWN_HOSTS)])[0]
        self.known_hosts = Path(os.path.expanduser(str(kh)))
        self.accept_new_host_keys = accept_new_host_keys
        self.connect_timeout = connect_timeout
        self._ssh_config = ssh_config
        self._known_hosts_arg = known_hosts
        jump = proxy_jump if proxy_jump is not None else cfg.get("proxyjump")
        command = proxy_command if proxy_command is not None else cfg.get("proxycommand")
        # OpenSSH: "none" switches either off; when both are set, ProxyJump wins
        self.proxy_jump: str | None = jump if jump and jump.lower() != "none" else None
        self.proxy_command: str | None = (command if command and command.lower() != "none" and not self.proxy_jump
                                          else None)
        me = f"{self.hostname}:{self.port}"
        if me in _chain:
            raise ConfigError(f"ProxyJump loop: {' -> '.join((*_chain, me))} (exclude the jump host from the "
                              "`Host` pattern that sets ProxyJump)")
        chain = (*_chain, me)
        self._jump: SSHExecutor | None = self._jump_executor(self.proxy_jump, chain) if self.proxy_jump else None
        self._client: paramiko.SSHClient | None = None
        self._lock = threading.Lock()

    def _jump_executor(self, spec: str, chain: tuple[str, ...]) -> SSHExecutor:
        """The last hop of ``ProxyJump a,b,c`` (``c``), itself reached through ``a,b``."""
        hops = [h.strip() for h in spec.split(",") if h.strip()]
        *earlier, last = hops
        user, _, hostport = last.rpartition("@")
        host, port = hostport, None
        if hostport.startswith("["):  # [v6::addr]:port
            host, _, rest = hostport[1:].partition("]")
            port = rest.lstrip(":") or None
        elif hostport.count(":") == 1:
            host, port = hostport.split(":")
        if port is not None and not port.isdigit():
            raise ConfigError(f"ProxyJump {spec!r} for {self.host}: port {port!r} is not a number")
        hop = SSHExecutor(
            host, user=user or None, port=int(port) if port else None, known_hosts=self._known_hosts_arg,
            accept_new_host_keys=self.accept_new_host_keys, connect_timeout=self.connect_timeout,
            ssh_config=self._ssh_config, proxy_jump=",".join(earlier) if earlier else None, _chain=chain,
        )
        return hop

    @property
    def bypass_ports(self) -> tuple[int, ...]:
        """Every SSH port this connection depends on: its own and its jump hosts'."""
        ports = {self.port}
        if self._jump is not None:
            ports.update(self._jump.bypass_ports)
        return tuple(sorted(ports))

    @property
    def route(self) -> str:
        """How the connection is made, for error messages and logs (no secrets)."""
        if self._jump is not None:
            return f"{self._jump.route} -> {self.hostname}:{self.port}"
        if self.proxy_command:
            return f"ProxyCommand({self.proxy_command}) -> {self.hostname}:{self.port}"
        return f"{self.hostname}:{self.port}"

    def _proxy_sock(self) -> Any:
        """The socket to run SSH over when a jump host or a proxy command is configured, else None."""
        if self._jump is not None:
            try:
                with self._jump._lock:
                    transport = self._jump._ensure().get_transport()
                    assert transport is not None
                    return transport.open_channel("direct-tcpip", (self.hostname, self.port), ("127.0.0.1", 0),
                                                  timeout=self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise HostUnreachableError(
                    self.host, self.port,
                    f"the jump host {self._jump.hostname}:{self._jump.port} could not open a connection to "
                    f"{self.hostname}:{self.port} ({type(exc).__name__}: {exc})") from None
        if self.proxy_command:
            try:
                return _ProxyCommand(self.proxy_command)
            except (paramiko.SSHException, OSError) as exc:
                raise HostUnreachableError(self.host, self.port, f"ProxyCommand failed to start: {exc}") from None
        return None

    @staticmethod
    def _lookup_config(host: str, ssh_config: str | os.PathLike[str] | None) -> dict[str, Any]:
        path = Path(os.path.expanduser(str(ssh_config or _DEFAULT_CONFIG)))
        if not path.is_file():
            return {}
        return dict(paramiko.SSHConfig.from_path(str(path)).lookup(host))

    @property
    def ssh_port(self) -> int:
        """The port fault mechanisms must never touch on this host."""
        return self.port

    def _connect(self) -> paramiko.SSHClient:
        client = paramiko.SSHClient()
        if self.known_hosts.is_file():
            client.load_host_keys(str(self.known_hosts))
        policy: paramiko.MissingHostKeyPolicy = (
            _AcceptNew(self.known_hosts) if self.accept_new_host_keys else _RejectUnknown(self.port)
        )
        client.set_missing_host_key_policy(policy)
        sock = self._proxy_sock()
        try:
            client.connect(
                self.hostname,
                port=self.port,
                username=self.user,
                key_filename=self.key_filename,
                timeout=self.connect_timeout,
                banner_timeout=self.connect_timeout,
                auth_timeout=self.connect_timeout,
                channel_timeout=self.connect_timeout,
                allow_agent=self.key_filename is None,
                look_for_keys=self.key_filename is None,
                sock=sock,
            )
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                self.host,
                self.port,
                f"HOST KEY MISMATCH: known_hosts ({self.known_hosts}) has {exc.expected_key.get_name()} "
                f"{exc.expected_key.fingerprint} but the server offered {exc.key.fingerprint}; "
                "refusing to connect (possible man-in-the-middle, or the host was reinstalled)",
            ) from None
        except HostKeyError:
            client.close()
            raise
        except paramiko.AuthenticationException as exc:
            client.close()
            who = self.user or "the current user"
            raise HostUnreachableError(self.host, self.port,
                                       f"authentication as {who} failed ({type(exc).__name__})") from None
        except (OSError, paramiko.SSHException, EOFError) as exc:  # refused, timeout, no route, banner
            client.close()
            via = f" (via {self.route})" if sock is not None else ""
            raise HostUnreachableError(self.host, self.port, f"{type(exc).__name__}: {exc}{via}") from None
        return client

    def _ensure(self) -> paramiko.SSHClient:
        client = self._client
        transport = client.get_transport() if client else None
        if client is None or transport is None or not transport.is_active():
            if client is not None:
                client.close()
            self._client = client = self._connect()
        return client

    def _open_channel(self, timeout: float) -> paramiko.Channel:
        """A fresh session channel; reconnects once if the kept connection died."""
        for attempt in (1, 2):
            client = self._ensure()
            transport = client.get_transport()
            try:
                assert transport is not None
                return transport.open_session(timeout=timeout)
            except (paramiko.SSHException, EOFError, OSError):
                client.close()
                self._client = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def run(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float = 30.0,
        check: bool = True,
    ) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        command = shlex.join(argv)
        start = time.monotonic()
        deadline = start + timeout
        with self._lock:
            try:
                chan = self._open_channel(min(timeout, self.connect_timeout))
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise HostUnreachableError(self.host, self.port, f"{type(exc).__name__}: {exc}") from None
            try:
                chan.exec_command(command)
                if input is not None:
                    chan.sendall(input.encode())
                chan.shutdown_write()
                try:
                    out, err = self._drain(chan, deadline)
                except ConnectionResetError as exc:
                    self.close()
                    raise HostUnreachableError(self.host, self.port, f"while running `{command}`: {exc}") from None
                if out is None:
                    raise CommandError(self.host, command, None, f"no exit within {timeout:g}s")
                status = chan.recv_exit_status()
            finally:
                chan.close()
        result = CommandResult(self.host, argv, status, out, err, time.monotonic() - start)
        return result.check() if check else result

    def start(self, argv: Sequence[str]) -> paramiko.Channel:
        """``argv`` left running on a channel of its own, stdout and stderr merged.

        For a long-lived remote process the caller talks to (a load host's
        sysbench): the caller writes its stdin, reads its output and closes the
        channel, which the remote side sees as the end of its stdin. ``run``
        on the same executor keeps working meanwhile (another channel)."""
        command = shlex.join(str(a) for a in argv)
        with self._lock:
            try:
                chan = self._open_channel(self.connect_timeout)
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise HostUnreachableError(self.host, self.port, f"{type(exc).__name__}: {exc}") from None
        try:
            chan.set_combine_stderr(True)
            chan.exec_command(command)
        except BaseException:
            chan.close()
            raise
        return chan

    @staticmethod
    def _drain(chan: paramiko.Channel, deadline: float) -> tuple[str | None, str]:
        """Read stdout and stderr until the command exits or the deadline passes."""
        out: list[bytes] = []
        err: list[bytes] = []
        while True:
            while chan.recv_ready():
                out.append(chan.recv(65536))
            while chan.recv_stderr_ready():
                err.append(chan.recv_stderr(65536))
            pending = chan.recv_ready() or chan.recv_stderr_ready()
            # sshd may report the exit before all output crossed the window: wait for EOF too
            if chan.exit_status_ready() and chan.eof_received and not pending:
                break
            if chan.closed and not pending:
                if chan.exit_status == -1:  # closed (connection lost) without an exit status
                    raise ConnectionResetError("the SSH connection closed before the command reported its exit")
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, b"".join(err).decode(errors="replace")
            # data wakes select at once; the exit status does not, hence the short re-check interval
            select.select([chan], [], [], min(remaining, 0.01))
        return b"".join(out).decode(errors="replace"), b"".join(err).decode(errors="replace")

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._jump is not None:
            self._jump.close()

    def __enter__(self) -> SSHExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SSHExecutor({self.host!r}, user={self.user!r}, port={self.port})"

