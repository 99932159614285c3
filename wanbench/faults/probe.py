"""What a host's kernel and tools can do, decided by exit status, never by error text.

Each qdisc is tried for real on a throwaway device that the probe creates and
deletes; nftables on a throwaway table whose only chain has no hook (so its
rule never sees a packet). All in one remote call.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass
from typing import Any

from wanbench.errors import FaultError
from wanbench.executors.base import Executor
from wanbench.faults.base import FaultKind


@dataclass(frozen=True)
class Capabilities:
    host: str
    root: bool
    netem: bool
    htb: bool
    tbf: bool
    u32: bool
    ifb: bool
    clsact: bool
    nft: bool
    nft_numgen: bool
    systemd: bool
    setsid: bool
    python3: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        on = [k for k, v in asdict(self).items() if v is True]
        return f"{self.host}: " + ",".join(on)


#: Runs on the host in one call (one SSH round trip). Every capability line is
#: decided by the exit status of a real attempt; error text is never looked at.
_SCRIPT = r"""
dev="wbprobe$1"; ifb="wbifb$1"; table="wanbench_probe_$1"
say() { if [ "$2" -eq 0 ]; then echo "$1=1"; else echo "$1=0"; fi; }
q() {
  tc qdisc add dev "$dev" root handle 1: "$@" >/dev/null 2>&1; r=$?
  tc qdisc del dev "$dev" root >/dev/null 2>&1; return $r
}
[ "$(id -u)" = 0 ]; say root $?
ip link add "$ifb" type ifb >/dev/null 2>&1; r=$?; say ifb $r; [ $r -eq 0 ] && ip link del "$ifb"
# a throwaway device: dummy, else ifb, else veth (kernels lack some of them)
made=1
if ip link add "$dev" type dummy >/dev/null 2>&1 || ip link add "$dev" type ifb >/dev/null 2>&1 \
   || ip link add "$dev" type veth peer name "${dev}p" >/dev/null 2>&1; then made=0; fi
if [ $made -eq 0 ]; then
  q netem delay 1ms; say netem $?
  q tbf rate 1mbit burst 32kbit latency 50ms; say tbf $?
  tc qdisc add dev "$dev" root handle 1: htb default 1 >/dev/null 2>&1; r=$?; say htb $r
  if [ $r -eq 0 ]; then
    tc filter add dev "$dev" parent 1: protocol ip prio 1 u32 match ip dport 1 0xffff flowid 1:1 >/dev/null 2>&1
    say u32 $?; tc qdisc del dev "$dev" root >/dev/null 2>&1
  fi
  tc qdisc add dev "$dev" clsact >/dev/null 2>&1; r=$?; say clsact $r
  [ $r -eq 0 ] && tc qdisc del dev "$dev" clsact >/dev/null 2>&1
  ip link del "$dev" >/dev/null 2>&1
fi
nft add table inet "$table" >/dev/null 2>&1; r=$?; say nft $r
if [ $r -eq 0 ]; then
  nft "add chain inet $table c; add rule inet $table c numgen random mod 100 < 1 counter drop" >/dev/null 2>&1
  say nft_numgen $?; nft delete table inet "$table" >/dev/null 2>&1
fi
[ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && command -v systemd-run >/dev/null 2>&1; say systemd $?
command -v setsid >/dev/null 2>&1; say setsid $?
command -v python3 >/dev/null 2>&1; say python3 $?
"""
_FIELDS = ("root", "netem", "htb", "tbf", "u32", "ifb", "clsact", "nft", "nft_numgen", "systemd", "setsid", "python3")


def probe(ex: Executor) -> Capabilities:
    """Probe ``ex``'s host; the script deletes every device/table it makes."""
    res = ex.run(["sh", "-c", _SCRIPT, "sh", secrets.token_hex(3)], timeout=60)
    seen = dict(line.split("=", 1) for line in res.stdout.split() if "=" in line)
    return Capabilities(ex.host, **{f: seen.get(f) == "1" for f in _FIELDS})


def choose_mechanism(kind: FaultKind, caps: Capabilities) -> str:
    """Which mechanism puts ``kind`` in place on a host with ``caps``: "tc", "nft" or "toxiproxy".

    netem does delay and loss where the kernel has it; without it delay needs a
    userspace proxy and loss nftables. Rate is always htb: Toxiproxy's bandwidth
    toxic is per connection, not per link.
    """
    if kind is FaultKind.RATE:
        if caps.htb and caps.u32:
            return "tc"
        raise FaultError(caps.host, f"no way to cap rate here: htb/u32 missing (probe: {caps.label})")
    if caps.netem and caps.htb and caps.u32:
        return "tc"
    if kind is FaultKind.LOSS:
        if caps.nft and caps.nft_numgen:
            return "nft"
        raise FaultError(caps.host, f"no way to drop packets here: no netem and no nftables numgen "
                                    f"(probe: {caps.label})")
    return "toxiproxy"
