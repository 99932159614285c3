"""SSH as data centres configure it: a bastion (ProxyJump / ProxyCommand), tiup's key, manage_host.

h1 is the bastion. h2's sshd is made reachable only from h1 (an nft rule in h2's own
namespace resets every other SSH connection), so a command that runs on h2 proves the
connection went through h1; ``$SSH_CONNECTION`` on h2 names h1 as the client as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from wanbench.errors import ConfigError, HostUnreachableError
from wanbench.executors.ssh import SSHExecutor
from wanbench.faults.base import Fault, FaultKind, Level
from wanbench.faults.tc import PeerMatch, TcMechanism
from wanbench.netns import NetnsNetwork
from wanbench.profiles.tidb.plan import plan_fault
from wanbench.profiles.tidb.preflight import ssh_executors
from wanbench.profiles.tidb.tcplan import ssh_bypass_ports, tc_mechanisms
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.topology import load_catalog

pytestmark = pytest.mark.netns

_TABLE = "jumptest"


@pytest.fixture
def only_via_h1(netns_net: NetnsNetwork) -> Iterator[NetnsNetwork]:
    """h2 accepts SSH from h1 only, for the duration of one test."""
    h1, h2 = netns_net.host("h1"), netns_net.host("h2")
    rules = textwrap.dedent(f"""\
        table inet {_TABLE} {{
          chain input {{
            type filter hook input priority 0; policy accept;
            tcp dport {h2.ssh_port} ip saddr != {h1.address} reject with tcp reset
          }}
        }}
        """)
    ns = ["ip", "netns", "exec", h2.netns]
    subprocess.run([*ns, "nft", "-f", "-"], input=rules, text=True, check=True, capture_output=True, timeout=10)
    try:
        yield netns_net
    finally:
        subprocess.run([*ns, "nft", "delete", "table", "inet", _TABLE], check=False, capture_output=True, timeout=10)


def _config(net: NetnsNetwork, path: Path, target_lines: str) -> Path:
    h1, h2 = net.host("h1"), net.host("h2")
    path.write_text(textwrap.dedent(f"""\
        Host bastion
          HostName {h1.address}
          User root
          IdentityFile {net.client_key}
        Host db-2
          HostName {h2.address}
          User root
        """) + textwrap.indent(textwrap.dedent(target_lines), "  "))
    return path


def _client_of(ex: SSHExecutor) -> str:
    """The client address h2's sshd saw for this connection."""
    return ex.run(["sh", "-c", 'echo "$SSH_CONNECTION"']).stdout.split()[0]


def _opts(net: NetnsNetwork) -> dict[str, Any]:
    return {"key_filename": str(net.client_key), "known_hosts": str(net.known_hosts), "connect_timeout": 5.0}


def test_direct_connection_to_h2_is_refused(only_via_h1: NetnsNetwork) -> None:
    ex = only_via_h1.ssh("h2")
    with pytest.raises(HostUnreachableError):
        ex.run(["true"])
    ex.close()


def test_proxyjump_from_ssh_config(only_via_h1: NetnsNetwork, tmp_path: Path) -> None:
    net = only_via_h1
    cfg = _config(net, tmp_path / "config", "ProxyJump bastion\n")
    ex = SSHExecutor("db-2", ssh_config=str(cfg), **_opts(net))
    try:
        assert ex.proxy_jump == "bastion"
        assert _client_of(ex) == net.host("h1").address
        assert net.host("h2").address in ex.run(["ip", "-o", "-4", "addr", "show", "eth0"]).stdout
        assert ex.bypass_ports == (22,)
        assert ex.route.startswith(f"{net.host('h1').address}:22 -> ")
        # the kept connection (and its jump) survives a second command
        assert ex.run(["true"]).ok
    finally:
        ex.close()


def test_proxyjump_inline_chain(only_via_h1: NetnsNetwork, tmp_path: Path) -> None:
    """``ProxyJump root@h3,root@h1``: h3 first, then h1, then h2 (h2 still sees h1)."""
    net = only_via_h1
    h1, h3 = net.host("h1"), net.host("h3")
    cfg = tmp_path / "config"
    cfg.write_text(f"Host *\n  IdentityFile {net.client_key}\n")
    ex = SSHExecutor(net.host("h2").address, user="root", ssh_config=str(cfg),
                     proxy_jump=f"root@{h3.address}:22,root@{h1.address}", **_opts(net))
    try:
        assert _client_of(ex) == h1.address
        assert ex.route == f"{h3.address}:22 -> {h1.address}:22 -> {net.host('h2').address}:22"
    finally:
        ex.close()


def test_proxycommand_from_ssh_config(only_via_h1: NetnsNetwork, tmp_path: Path) -> None:
    net = only_via_h1
    if shutil.which("ssh") is None:
        pytest.skip("the OpenSSH client is not installed")
    h1 = net.host("h1")
    cfg = _config(net, tmp_path / "config", (
        f"ProxyCommand ssh -F /dev/null -q -o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={net.known_hosts} -i {net.client_key} -W %h:%p root@{h1.address}\n"))
    ex = SSHExecutor("db-2", ssh_config=str(cfg), **_opts(net))
    try:
        assert ex.proxy_command is not None
        assert ex.proxy_command.endswith(f"-W {net.host('h2').address}:22 root@{h1.address}")  # %h:%p expanded
        assert _client_of(ex) == h1.address
    finally:
        ex.close()


def test_unreachable_behind_the_jump_host_is_one_clear_error(netns_net: NetnsNetwork, tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text(f"Host *\n  IdentityFile {netns_net.client_key}\n")
    # 198.18.255.254: nothing there; the bastion's connect fails and says so
    bastion = netns_net.host("h1").address
    ex = SSHExecutor("198.18.255.254", user="root", ssh_config=str(cfg), proxy_jump=f"root@{bastion}",
                     key_filename=str(netns_net.client_key), known_hosts=str(netns_net.known_hosts),
                     connect_timeout=3.0)
    with pytest.raises(HostUnreachableError, match=r"jump host .* could not open a connection to 198.18.255.254:22"):
        ex.run(["true"])
    ex.close()


def test_proxyjump_loop_is_a_config_error(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host bastion\n  HostName 192.0.2.1\nHost *\n  ProxyJump bastion\n")
    with pytest.raises(ConfigError, match="ProxyJump loop"):
        SSHExecutor("db-2", ssh_config=str(cfg))


def test_proxyjump_none_and_bad_port(tmp_path: Path) -> None:
    cfg = tmp_path / "config"
    cfg.write_text("Host db-2\n  ProxyJump none\n  ProxyCommand none\n")
    ex = SSHExecutor("db-2", ssh_config=str(cfg))
    assert (ex.proxy_jump, ex.proxy_command, ex.route) == (None, None, "db-2:22")
    with pytest.raises(ConfigError, match="port 'x' is not a number"):
        SSHExecutor("db-2", ssh_config=str(cfg), proxy_jump="bastion:x")


def _cluster_file(tmp_path: Path, service: str, manage: str, jump_host: str) -> Path:
    """A topology whose TiKV is known by a service address but managed on another one."""
    (tmp_path / "topology.yaml").write_text(textwrap.dedent(f"""\
        global: {{user: root}}
        pd_servers: [{{host: {jump_host}}}]
        tikv_servers:
          - host: {service}
            manage_host: {manage}
        """))
    path = tmp_path / "cluster.yaml"
    path.write_text("wanbench_cluster: 1\nname: jumpdemo\ntopology: topology.yaml\n")
    return path


def test_tiup_key_and_manage_host_through_the_bastion(only_via_h1: NetnsNetwork, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """No key in the cluster file: tiup's key for the cluster is used; SSH goes to manage_host
    (h2, via the bastion from ~/.ssh/config) while the executor stays keyed by the service address."""
    net = only_via_h1
    h1, h2 = net.host("h1"), net.host("h2")
    tiup_home = tmp_path / "tiup-home"
    key_dir = tiup_home / "storage" / "cluster" / "clusters" / "jumpdemo" / "ssh"
    key_dir.mkdir(parents=True)
    shutil.copy(net.client_key, key_dir / "id_rsa")
    monkeypatch.setenv("TIUP_HOME", str(tiup_home))
    service = "10.255.0.2"  # the data address; only the management address answers SSH here
    topo = load_cluster(_cluster_file(tmp_path, service, h2.address, h1.address))
    cfg = tmp_path / "config"
    # the bastion takes the user's own key (as with OpenSSH, -i / tiup's key is not passed to a jump host)
    cfg.write_text(f"Host {h2.address}\n  ProxyJump root@{h1.address}\n"
                   f"Host {h1.address}\n  IdentityFile {net.client_key}\n")
    execs = ssh_executors(topo, hosts=[service], ssh_config=str(cfg), known_hosts=str(net.known_hosts))
    ex = execs[service]
    try:
        assert isinstance(ex, SSHExecutor)
        assert ex.key_filename == str(key_dir / "id_rsa")
        assert (ex.host, ex.hostname) == (service, h2.address)
        assert _client_of(ex) == h1.address
    finally:
        ex.close()


class _FakeSSH:
    """Stands for an executor whose SSH goes through a jump host listening on 2222."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.ssh_port = 22
        self.bypass_ports = (22, 2222)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("planning must not run commands")

    def close(self) -> None:
        return None


def test_jump_host_ports_are_in_every_ssh_bypass(tmp_path: Path) -> None:
    """A bastion in the cluster forwards to other hosts' SSH ports: none of them may be shaped."""
    (tmp_path / "topology.yaml").write_text(textwrap.dedent("""\
        global: {user: root}
        pd_servers: [{host: 10.0.0.1}]
        tidb_servers: [{host: 10.0.0.1}]
        tikv_servers: [{host: 10.0.0.2}, {host: 10.0.0.3}]
        """))
    topo = load_cluster(tmp_path / "topology.yaml")
    plan = plan_fault(load_catalog("tidb")["tikv_write"], topo, Level.parse("delay", "50ms"))
    hosts = [hp.host for hp in plan.hosts]
    executors: dict[str, Any] = {h: _FakeSSH(h) for h in {c.host for c in topo.components}}
    interfaces = {hp.host: {m.dst: "eth0" for m in hp.matches if m.dst} for hp in plan.hosts}
    mechs = tc_mechanisms(plan, executors, interfaces)
    assert hosts
    assert mechs
    for mech in mechs:
        assert {22, 2222} <= set(mech.ssh_ports)
        text = "\n".join(mech.plan(Level.parse("delay", "50ms")))
        assert "match ip dport 2222 0xffff flowid" in text
        assert "match ip sport 2222 0xffff flowid" in text


def test_dry_run_shows_the_jump_hosts_port_in_the_bypass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dry run prints the tc commands apply would run, jump-host bypass included (nothing connects)."""
    from wanbench.profiles.base import DryRun
    from wanbench.profiles.tidb.cluster import TidbCluster

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_text("Host 10.0.0.*\n  ProxyJump ops@bastion.example:2222\n")
    (tmp_path / "topology.yaml").write_text(textwrap.dedent("""\
        global: {user: root}
        pd_servers: [{host: 10.0.0.1}]
        tidb_servers: [{host: 10.0.0.1}]
        tikv_servers: [{host: 10.0.0.2}, {host: 10.0.0.3}]
        """))
    tc = TidbCluster(load_cluster(tmp_path / "topology.yaml"), tag="dry", dry_run=True)
    with pytest.raises(DryRun) as info:
        tc.apply(tc.fault_for(load_catalog("tidb")["tikv_write"], Level.parse("delay", "50ms")),
                 expected_duration_s=60)
    text = info.value.text
    assert text.count("match ip dport 2222 0xffff flowid") == text.count("tc -batch - <<'EOF'") > 0


def test_ssh_through_a_capped_bastion_is_not_shaped(only_via_h1: NetnsNetwork, ssh_h: dict[str, SSHExecutor],
                                                    tmp_path: Path) -> None:
    """Everything the bastion h1 sends to h2 is capped at 5 Mbit/s; the SSH connection to h2 that runs
    through h1 (h1 -> h2:22) still moves at full speed, through the unshaped class."""
    net = only_via_h1
    cfg = _config(net, tmp_path / "config", "ProxyJump bastion\n")
    target = SSHExecutor("db-2", ssh_config=str(cfg), **_opts(net))
    mech = TcMechanism(ssh_h["h1"], "eth0", [PeerMatch(ip=net.host("h2").address)],
                       ssh_ports=ssh_bypass_ports({"h2": target}), state_dir=net.state_dir(net.host("h1").netns))
    try:
        assert _client_of(target) == net.host("h1").address
        mech.apply(Fault("h1", Level(FaultKind.RATE, 5)), deadline_s=120)
        nbytes = 4_000_000  # 6.4 s at 5 Mbit/s
        res = target.run(["wc", "-c"], input="0" * nbytes, timeout=60)
        assert int(res.stdout.split()[0]) == nbytes
        stats = ssh_h["h1"].run(["tc", "-s", "class", "show", "dev", "eth0"]).stdout
        sent = {m[1]: int(m[2]) for m in re.finditer(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", stats)}
        assert sent["1a57:1"] >= nbytes, sent  # h1 -> h2:22 went through the unshaped class
        assert all(v < nbytes // 10 for k, v in sent.items() if k != "1a57:1"), sent
        assert res.duration < 5.5, f"4 MB through the bastion took {res.duration:.1f}s: looks capped"
    finally:
        mech.clear()
        target.close()
