"""The TiDB profile's cluster model, read from files a DBA already has.

Four inputs give the same ``Topology(profile="tidb")``:

* the text of ``tiup cluster display <name>`` (status flags ``L`` = PD
  leader, ``UI`` = dashboard), also as people paste it (``inputs.clean_pasted``);
* the JSON of ``tiup cluster display <name> --format json`` (which also
  carries ``manage_host``, the address tiup itself uses for SSH);
* a tiup topology YAML (``pd_servers``, ``tidb_servers``, ...; tiup's default
  ports fill what the file leaves out);
* a wanbench cluster YAML that points at one of the two and adds what tiup
  does not know: the SQL user, the *name* of the environment variable holding
  the password (never the password), SSH key and port, the load host.

Nothing here connects anywhere: collecting tests with ``--cluster`` must work
on a laptop without a route to the cluster.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError
from wanbench.profiles.tidb.inputs import clean_pasted, get_float, get_int, get_str, where, yaml_body
from wanbench.strictyaml import load_yaml
from wanbench.topology import Component, Topology, parse_load_hosts

PROFILE = "tidb"

#: roles a fault may target or be scoped towards
FAULT_ROLES = frozenset(
    {"pd", "tidb", "tikv", "tiflash", "tiproxy", "cdc", "tikv-cdc", "tso", "scheduling", "pump", "drainer",
     "tidb-dashboard"}
)
#: kept in the model (they share hosts with the cluster) but never faulted
MONITORING_ROLES = frozenset({"prometheus", "grafana", "alertmanager"})

LABEL_LEADER = "leader"
LABEL_DASHBOARD = "dashboard"
LABEL_MONITORING = "monitoring"
LABEL_UNKNOWN = "unknown"
#: labels that describe the cluster's state at one moment, not its shape
RUNTIME_LABELS = frozenset({LABEL_LEADER, LABEL_DASHBOARD})
_STATUS_FLAGS = {"L": LABEL_LEADER, "UI": LABEL_DASHBOARD}

# tiup topology section -> (role, [(port key, tiup default)]) in the order
# `tiup cluster display` prints the ports.
_SECTIONS: dict[str, tuple[str, tuple[tuple[str, int | None], ...]]] = {
    "pd_servers": ("pd", (("client_port", 2379), ("peer_port", 2380))),
    "tidb_servers": ("tidb", (("port", 4000), ("status_port", 10080))),
    "tikv_servers": ("tikv", (("port", 20160), ("status_port", 20180))),
    "tiflash_servers": ("tiflash", (("tcp_port", 9000), ("flash_service_port", 3930), ("flash_proxy_port", 20170),
                                    ("flash_proxy_status_port", 20292), ("metrics_port", 8234))),
    "tiproxy_servers": ("tiproxy", (("port", 6000), ("status_port", 3080))),
    "cdc_servers": ("cdc", (("port", 8300),)),
    "kvcdc_servers": ("tikv-cdc", (("port", 8600),)),
    "tso_servers": ("tso", (("port", 3379),)),
    "scheduling_servers": ("scheduling", (("port", 3379),)),
    "pump_servers": ("pump", (("port", 8250),)),
    "drainer_servers": ("drainer", (("port", 8249),)),
    "tidb_dashboard_servers": ("tidb-dashboard", (("port", 12333),)),
    "tispark_masters": ("tispark-master", (("port", 7077), ("web_port", 8080))),
    "tispark_workers": ("tispark-worker", (("port", 7078), ("web_port", 8081))),
    # prometheus: tiup display lists the exporters' ports between port and ng_port
    "monitoring_servers": ("prometheus", (("port", 9090), ("@blackbox_exporter_port", 9115),
                                          ("@node_exporter_port", 9100), ("ng_port", None))),
    "grafana_servers": ("grafana", (("port", 3000),)),
    "alertmanager_servers": ("alertmanager", (("web_port", 9093), ("cluster_port", 9094))),
}
_MONITORED_DEFAULTS = {"blackbox_exporter_port": 9115, "node_exporter_port": 9100}

_DISPLAY_HEADER = re.compile(r"^( *)ID\s+Role\s+Host\s+Ports\s+OS/Arch\s+Status\b.*$", re.M)
_DISPLAY_INFO = re.compile(r"^ *(Cluster type|Cluster name|Cluster version|Deploy user|SSH type|Dashboard URL|"
                           r"Grafana URL):\s*(.*?)\s*$", re.M)
_TOTAL = re.compile(r"^ *Total nodes:\s*(\d+)\s*$", re.M)
#: the display table's column titles, in tiup's order (Since only with --uptime)
_COLUMNS = ("ID", "Role", "Host", "Ports", "OS/Arch", "Status", "Since", "Data Dir", "Deploy Dir")
_PATCHED = " (patched)"  # tiup appends it to the role of an instance running a patched binary


def component_name(role: str, host: str, port: int) -> str:
    """``tikv-10.160.152.24:20160``: the role and tiup's instance ID."""
    return f"{role}-{host}:{port}"


def _labels_for(role: str, flags: Iterable[str] = ()) -> frozenset[str]:
    labels = {_STATUS_FLAGS[f] for f in flags if f in _STATUS_FLAGS}
    if role in MONITORING_ROLES:
        labels.add(LABEL_MONITORING)
    elif role not in FAULT_ROLES:
        labels.add(LABEL_UNKNOWN)
    return frozenset(labels)


def _sorted(components: Iterable[Component]) -> tuple[Component, ...]:
    return tuple(sorted(components, key=lambda c: (c.role, c.host, c.ports)))


# -- settings ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterSettings:
    """What wanbench needs beyond the shape: how to log in, where to load from.

    ``password_env`` names an environment variable; the password itself is
    read only when a connection is made (``password()``) and never stored.
    """

    name: str = ""
    source: str = ""
    source_format: str = ""
    deploy_user: str = ""
    ssh_user: str = "tidb"
    ssh_port: int = 22
    ssh_ports: Mapping[str, int] = dataclasses.field(default_factory=dict)
    ssh_key: str | None = None
    #: host -> the address tiup (and wanbench) uses for SSH when it differs (tiup's ``manage_host``)
    manage_hosts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    known_hosts: str | None = None
    connect_timeout: float = 10.0
    sql_user: str = "root"
    password_env: str | None = None
    database: str = "sbtest"
    endpoints: str | tuple[str, ...] = "tiproxy"
    load_host: str | None = None
    #: hosts that run sysbench over SSH (``NAME`` or ``NAME=SQL_HOST``, as ``--load-hosts`` takes them)
    load_hosts: tuple[str, ...] = ()
    pd_urls: tuple[str, ...] = ()

    def ssh_port_of(self, host: str) -> int:
        return int(self.ssh_ports.get(host, self.ssh_port))

    def ssh_host_of(self, host: str) -> str:
        """Where to SSH to for ``host``: its ``manage_host`` if it has one. Faults stay scoped to ``host``."""
        return str(self.manage_hosts.get(host, host))

    def password(self) -> str:
        """The SQL password from the environment ('' when no variable is named)."""
        if not self.password_env:
            return ""
        value = os.environ.get(self.password_env)
        if value is None:
            raise ConfigError(
                f"cluster {self.name!r}: environment variable {self.password_env} (the SQL password) is not set"
            )
        return value

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ssh_ports"] = dict(self.ssh_ports)
        out["manage_hosts"] = dict(self.manage_hosts)
        out["pd_urls"] = list(self.pd_urls)
        out["load_hosts"] = list(self.load_hosts)
        out["endpoints"] = self.endpoints if isinstance(self.endpoints, str) else list(self.endpoints)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterSettings:
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("pd_urls", "load_hosts"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        if isinstance(kwargs.get("endpoints"), list):
            kwargs["endpoints"] = tuple(kwargs["endpoints"])
        return cls(**kwargs)


def cluster_settings(topology: Topology) -> ClusterSettings:
    return ClusterSettings.from_json(topology.settings)


# -- tiup cluster display ------------------------------------------------------------------------------------------


def is_display_text(text: str) -> bool:
    return bool(_DISPLAY_HEADER.search(clean_pasted(text)))


def parse_display(text: str, *, source: str = "<display>") -> Topology:
    """Parse ``tiup cluster display`` output, also as pasted (prompt lines, tiup's banners, quoting,
    colours and the trailing ``Total nodes`` are ignored)."""
    text = clean_pasted(text)
    header = _DISPLAY_HEADER.search(text)
    if not header:
        raise ConfigError(f"{source}: no `ID Role Host Ports OS/Arch Status` table found")
    indent = header.group(1)
    info = {m.group(1): m.group(2) for m in _DISPLAY_INFO.finditer(text[: header.start()])}
    cols = _column_starts(header.group(0)[len(indent):])
    header_line = text.count("\n", 0, header.start()) + 1
    rows = text[header.end():].splitlines()[1:]
    components: list[Component] = []
    for lineno, line in enumerate(rows, start=header_line + 1):
        line = line[len(indent):] if line.startswith(indent) else line.lstrip()
        if not line.strip() or set(line.strip()) <= {"-", " "}:
            if components:  # the table ends at the first blank line after its rows
                break
            continue
        if line.startswith("Total nodes:"):
            break
        components.append(_display_row(line, cols, source=f"{source}:{lineno}"))
    if not components:
        raise ConfigError(f"{source}: the display table has no rows")
    total = _TOTAL.search(text, header.end())
    if total and int(total.group(1)) != len(components):
        raise ConfigError(
            f"{source}: 'Total nodes: {total.group(1)}' but {len(components)} rows were read "
            "(was the output cut or wrapped?)"
        )
    deploy_user = info.get("Deploy user", "")
    settings = ClusterSettings(
        name=info.get("Cluster name", ""),
        source=source,
        source_format="tiup-display",
        deploy_user=deploy_user,
        ssh_user=deploy_user or "tidb",
    )
    return _display_topology(components, settings, info.get("Cluster version", ""), source=source)


def _display_topology(components: list[Component], settings: ClusterSettings, version: str, *,
                      source: str) -> Topology:
    names = [c.name for c in components]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{source}: instances listed twice: {', '.join(dupes)}")
    return Topology(
        profile=PROFILE,
        name=settings.name,
        components=_sorted(components),
        version=version,
        settings=settings.to_json(),
    )


def _column_starts(header: str) -> list[tuple[str, int]]:
    """Where each known column title starts (by name: tabs may have turned into single spaces)."""
    out = []
    for name in _COLUMNS:
        m = re.search(r"(?<!\S)" + re.escape(name) + r"(?!\S)", header)
        if m:
            out.append((name, m.start()))
    return sorted(out, key=lambda c: c[1])


def _aligned(line: str, cols: Sequence[tuple[str, int]]) -> bool:
    """True when the first six columns of ``line`` start exactly under their titles."""
    for name, start in cols:
        if name not in _COLUMNS[:6]:
            continue
        if start >= len(line) or line[start] == " " or (start > 0 and line[start - 1] != " "):
            return False
    return True


def _display_row(line: str, cols: Sequence[tuple[str, int]], *, source: str) -> Component:
    fields: dict[str, str] = {}
    if _aligned(line, cols):
        for i, (name, start) in enumerate(cols):
            end = cols[i + 1][1] if i + 1 < len(cols) else None
            fields[name] = line[start:end].strip()
    else:
        # columns not under their titles (tabs, a tool that trims spaces, colour codes padded by tiup):
        # the first six columns are single words, except a role's " (patched)"
        words = line.split()
        if len(words) > 2 and words[2] == _PATCHED.strip():
            words[1:3] = [words[1] + _PATCHED]
        if len(words) < 6:
            raise ConfigError(f"{source}: cannot read the display row {line.strip()!r} "
                              "(expected ID, Role, Host, Ports, OS/Arch, Status, ...)")
        fields = dict(zip(_COLUMNS[:6], words[:6], strict=True))
    if not all(fields.get(k) for k in ("ID", "Role", "Host", "Ports")):
        raise ConfigError(f"{source}: cannot read the display row {line.strip()!r}")
    return _instance(fields["ID"], fields["Role"], fields["Host"], fields["Ports"], fields.get("Status", ""),
                     source=source)


def _instance(ident: str, role: str, host: str, ports_text: str, status: str, *, source: str) -> Component:
    role = role.removesuffix(_PATCHED).strip()
    try:
        ports = tuple(int(p) for p in ports_text.split("/"))
    except ValueError:
        raise ConfigError(f"{source}: ports {ports_text!r} of {ident} are not numbers") from None
    if not all(0 < p < 65536 for p in ports):
        raise ConfigError(f"{source}: ports {ports_text!r} of {ident} are not port numbers")
    flags = status.split("|")[1:]
    return Component(
        name=component_name(role, host, ports[0]),
        role=role,
        host=host,
        ports=ports,
        status=status,
        labels=_labels_for(role, flags),
    )


# -- tiup cluster display --format json ------------------------------------------------------------------------------

_JSON_START = re.compile(r"^\s*\{", re.M)


def find_display_json(text: str) -> tuple[dict[str, Any], int] | None:
    """The ``--format json`` object in ``text`` (after any preamble) and the line it starts on, if any."""
    import json

    for m in _JSON_START.finditer(text):
        try:
            data, _ = json.JSONDecoder(object_pairs_hook=_no_duplicate_pairs).raw_decode(text, m.end() - 1)
        except json.JSONDecodeError as exc:
            if '"cluster_meta"' in text or '"instances"' in text:
                raise ConfigError(f"line {exc.lineno}: not valid JSON ({exc.msg})") from None
            return None
        if isinstance(data, dict) and ("instances" in data or "cluster_meta" in data):
            return data, text.count("\n", 0, m.start()) + 1
        return None
    return None


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ConfigError(f"duplicate JSON key {k!r}")
        out[k] = v
    return out


def parse_display_json(data: Mapping[str, Any], *, source: str = "<display json>") -> Topology:
    """Parse ``tiup cluster display <name> --format json`` (tiup's ``JSONOutput``)."""
    meta = data.get("cluster_meta") or {}
    instances = data.get("instances")
    if not isinstance(meta, dict) or not isinstance(instances, list) or not instances:
        raise ConfigError(f"{source}: `--format json` output needs 'cluster_meta' and a non-empty 'instances' list")
    components: list[Component] = []
    manage: dict[str, str] = {}
    for i, inst in enumerate(instances):
        where_ = f"{source}: instances[{i}]"
        if not isinstance(inst, dict):
            raise ConfigError(f"{where_} must be an object")
        missing = [k for k in ("id", "role", "host", "ports") if not inst.get(k)]
        if missing:
            raise ConfigError(f"{where_} lacks {', '.join(missing)}")
        host = str(inst["host"])
        comp = _instance(str(inst["id"]), str(inst["role"]), host, str(inst["ports"]), str(inst.get("status", "")),
                         source=where_)
        components.append(comp)
        mh = str(inst.get("manage_host") or "")
        if mh and mh != host:
            if manage.get(host, mh) != mh:
                raise ConfigError(f"{where_}: host {host} has two manage_host values ({manage[host]}, {mh})")
            manage[host] = mh
    deploy_user = str(meta.get("deploy_user") or "")
    settings = ClusterSettings(
        name=str(meta.get("cluster_name") or ""),
        source=source,
        source_format="tiup-display-json",
        deploy_user=deploy_user,
        ssh_user=deploy_user or "tidb",
        manage_hosts=manage,
    )
    return _display_topology(components, settings, str(meta.get("cluster_version") or ""), source=source)


# -- tiup topology YAML ------------------------------------------------------------------------------------------


def is_tiup_topology(data: Any) -> bool:
    return isinstance(data, dict) and (
        any(isinstance(k, str) and (k.endswith("_servers") or k in _SECTIONS) for k in data)
    )


def parse_tiup_topology(data: Mapping[str, Any], *, source: str = "<topology>", name: str = "") -> Topology:
    """Build the model from a tiup topology mapping, filling tiup's default ports.

    Every bad value is a ``ConfigError`` at its ``file:line`` (``wanbench.strictyaml.load_yaml`` keeps the lines).
    """
    glob = data.get("global") or {}
    if not isinstance(glob, dict):
        raise ConfigError(f"{where(source, data, 'global')}: 'global' must be a mapping")
    monitored_raw = data.get("monitored") or {}
    if not isinstance(monitored_raw, dict):
        raise ConfigError(f"{where(source, data, 'monitored')}: 'monitored' must be a mapping")
    monitored: dict[str, Any] = {k: get_int(monitored_raw, k, v, source=source, what=f"monitored.{k}")
                                 for k, v in _MONITORED_DEFAULTS.items()}
    ssh_port = get_int(glob, "ssh_port", 22, source=source, what="global.ssh_port")
    components: list[Component] = []
    ssh_ports: dict[str, int] = {}
    manage: dict[str, str] = {}
    for key, instances in data.items():
        if not (isinstance(key, str) and (key in _SECTIONS or key.endswith("_servers"))):
            continue
        if instances is None:
            continue
        if not isinstance(instances, list):
            raise ConfigError(f"{where(source, data, key)}: {key} must be a list of instances")
        role, port_spec = _SECTIONS.get(key, (key.removesuffix("_servers").replace("_", "-"), ()))
        for i, inst in enumerate(instances):
            at = where(source, instances, i)
            if not isinstance(inst, dict) or not inst.get("host"):
                raise ConfigError(f"{at}: {key}[{i}] needs a 'host'")
            host = get_str(inst, "host", "", source=source, what=f"{key}[{i}].host") or ""
            ports = _instance_ports(inst, port_spec, monitored, source=source, what=f"{key}[{i}]")
            if "ssh_port" in inst:
                ssh_ports[host] = get_int(inst, "ssh_port", ssh_port, source=source, what=f"{key}[{i}].ssh_port")
            mh = get_str(inst, "manage_host", None, source=source, what=f"{key}[{i}].manage_host")
            if mh and mh != host:
                if manage.get(host, mh) != mh:
                    raise ConfigError(f"{where(source, inst, 'manage_host')}: host {host} already has manage_host "
                                      f"{manage[host]}; one machine has one management address")
                manage[host] = mh
            components.append(
                Component(name=component_name(role, host, ports[0]), role=role, host=host, ports=ports,
                          labels=_labels_for(role))
            )
    if not components:
        raise ConfigError(f"{source}: no *_servers section with instances")
    user = get_str(glob, "user", "tidb", source=source, what="global.user") or "tidb"
    settings = ClusterSettings(
        name=name,
        source=source,
        source_format="tiup-topology",
        deploy_user=user,
        ssh_user=user,
        ssh_port=ssh_port,
        ssh_ports={h: p for h, p in ssh_ports.items() if p != ssh_port},
        manage_hosts=manage,
    )
    names = [c.name for c in components]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{source}: instances listed twice: {', '.join(dupes)}")
    return Topology(profile=PROFILE, name=name, components=_sorted(components), settings=settings.to_json())


def _instance_ports(
    inst: Mapping[str, Any], spec: Sequence[tuple[str, int | None]], monitored: Mapping[str, Any], *,
    source: str, what: str,
) -> tuple[int, ...]:
    ports: list[int] = []
    if not spec:  # an unknown section: every *port field except SSH, in file order
        spec = tuple((k, None) for k in inst if isinstance(k, str) and k.endswith("port") and k != "ssh_port")
    for key, default in spec:
        if key.startswith("@"):
            value = monitored.get(key[1:], default)
        else:
            value = default if inst.get(key) is None else get_int(inst, key, 0, source=source, what=f"{what}.{key}")
        if value is not None:
            ports.append(int(value))
    if not ports:
        raise ConfigError(f"{where(source, inst)}: {what}: no port found")
    return tuple(ports)


# -- wanbench cluster YAML ---------------------------------------------------------------------------------------

_WB_KEYS = {"wanbench_cluster", "name", "topology", "display", "sql", "ssh", "load_host", "load_hosts", "pd_url",
            "pd_urls"}
_SQL_KEYS = {"user", "password_env", "database", "endpoints"}
_SSH_KEYS = {"user", "port", "key", "known_hosts", "connect_timeout"}


def is_wanbench_cluster(data: Any) -> bool:
    return isinstance(data, dict) and ("wanbench_cluster" in data or "topology" in data or "display" in data)


def parse_wanbench_cluster(data: Mapping[str, Any], *, path: Path) -> Topology:
    source = str(path)
    unknown = set(data) - _WB_KEYS
    if unknown:
        first = min(unknown, key=lambda k: getattr(data, "lines", {}).get(k, 0))
        raise ConfigError(f"{where(source, data, first)}: unknown keys {sorted(map(str, unknown))} "
                          f"(known: {sorted(_WB_KEYS)})")
    refs = [k for k in ("topology", "display") if data.get(k)]
    if len(refs) != 1:
        raise ConfigError(f"{source}: give exactly one of 'topology' (tiup YAML) or 'display' (saved display output)")
    ref_text = get_str(data, refs[0], "", source=source) or ""
    ref = (path.parent / os.path.expanduser(ref_text))
    inner = _load_path(ref, allow_wanbench=False)
    base = cluster_settings(inner)
    sql = _section(data, "sql", _SQL_KEYS, source)
    ssh = _section(data, "ssh", _SSH_KEYS, source)
    endpoints: Any = sql.get("endpoints", base.endpoints)
    if isinstance(endpoints, list):
        for i, e in enumerate(endpoints):
            if not re.fullmatch(r"[^\s:]+:\d{1,5}", str(e)) or not 0 < int(str(e).rpartition(":")[2]) < 65536:
                raise ConfigError(f"{where(source, endpoints, i)}: sql.endpoints[{i}] {e!r} is not host:port")
        endpoints = tuple(str(e) for e in endpoints)
    elif endpoints not in ("tiproxy", "tidb"):
        raise ConfigError(f"{where(source, sql, 'endpoints')}: sql.endpoints must be 'tiproxy', 'tidb' "
                          "or a list of host:port")
    pd_urls: Any = data.get("pd_urls") or ([data["pd_url"]] if data.get("pd_url") else [])
    if not isinstance(pd_urls, list):
        raise ConfigError(f"{where(source, data, 'pd_urls')}: pd_urls must be a list of URLs")
    try:
        pd_urls = parse_pd_urls(",".join(str(u) for u in pd_urls)) if pd_urls else []
    except ConfigError as exc:
        raise ConfigError(f"{where(source, data, 'pd_urls' if 'pd_urls' in data else 'pd_url')}: {exc}") from None
    load_host = get_str(data, "load_host", None, source=source)
    if load_host:
        try:
            load_host = parse_load_host(load_host)
        except ConfigError as exc:
            raise ConfigError(f"{where(source, data, 'load_host')}: load_host: {exc}") from None
    load_hosts: Any = data.get("load_hosts") or []
    if not isinstance(load_hosts, list) or not all(isinstance(h, str) for h in load_hosts):
        raise ConfigError(f"{where(source, data, 'load_hosts')}: load_hosts must be a list of SSH host names "
                          "(NAME or NAME=SQL_HOST)")
    try:
        load_hosts = [h.label for h in parse_load_hosts(load_hosts)] if load_hosts else []
    except ConfigError as exc:
        raise ConfigError(f"{where(source, data, 'load_hosts')}: load_hosts: {exc}") from None
    password_env = get_str(sql, "password_env", None, source=source, what="sql.password_env")
    if password_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", password_env):
        raise ConfigError(f"{where(source, sql, 'password_env')}: sql.password_env must be the NAME of an "
                          "environment variable")
    settings = dataclasses.replace(
        base,
        name=get_str(data, "name", None, source=source) or base.name or path.stem,
        source=source,
        source_format=f"wanbench+{base.source_format}",
        ssh_user=get_str(ssh, "user", base.ssh_user, source=source, what="ssh.user") or base.ssh_user,
        ssh_port=get_int(ssh, "port", base.ssh_port, source=source, what="ssh.port"),
        ssh_key=_expand(get_str(ssh, "key", None, source=source, what="ssh.key")),
        known_hosts=_expand(get_str(ssh, "known_hosts", None, source=source, what="ssh.known_hosts")),
        connect_timeout=get_float(ssh, "connect_timeout", base.connect_timeout, source=source,
                                  what="ssh.connect_timeout"),
        sql_user=get_str(sql, "user", base.sql_user, source=source, what="sql.user") or base.sql_user,
        password_env=password_env,
        database=get_str(sql, "database", base.database, source=source, what="sql.database") or base.database,
        endpoints=endpoints,
        load_host=load_host or None,
        load_hosts=tuple(load_hosts),
        pd_urls=tuple(pd_urls),
    )
    return dataclasses.replace(inner, name=settings.name, settings=settings.to_json())


def _section(data: Mapping[str, Any], key: str, allowed: set[str], source: str) -> dict[str, Any]:
    sec = data.get(key) or {}
    if not isinstance(sec, dict):
        raise ConfigError(f"{where(source, data, key)}: '{key}' must be a mapping")
    if "password" in sec:
        raise ConfigError(
            f"{where(source, sec, 'password')}: {key}.password is not accepted: put the password in an "
            f"environment variable and give its name as {key}.password_env"
        )
    unknown = set(sec) - allowed
    if unknown:
        raise ConfigError(f"{where(source, data, key)}: unknown keys in '{key}': {sorted(map(str, unknown))} "
                          f"(known: {sorted(allowed)})")
    return sec


def _expand(value: Any) -> str | None:
    return os.path.expanduser(str(value)) if value else None


# -- tiup's own files ----------------------------------------------------------------------------------------------


def tiup_home() -> Path:
    """``$TIUP_HOME`` or ``~/.tiup``, where tiup keeps each cluster's metadata and SSH key."""
    return Path(os.path.expanduser(os.environ.get("TIUP_HOME") or "~/.tiup"))


def tiup_ssh_key(cluster_name: str) -> str | None:
    """The private key ``tiup cluster deploy`` generated for ``cluster_name``, if this machine has it.

    tiup logs in to every host of the cluster with it, so it is the key most likely to work.
    """
    if not cluster_name or "/" in cluster_name or cluster_name in (".", ".."):
        return None
    key = tiup_home() / "storage" / "cluster" / "clusters" / cluster_name / "ssh" / "id_rsa"
    return str(key) if key.is_file() else None


# -- entry point -------------------------------------------------------------------------------------------------


def load_cluster(path: str | os.PathLike[str]) -> Topology:
    """Read a cluster file of any supported kind; never connects anywhere.

    Every problem with the file is a ``ConfigError`` naming it; a value error this module did not
    foresee becomes one too, so pytest reports one usage error instead of an INTERNALERROR.
    """
    try:
        return _load_path(Path(path), allow_wanbench=True)
    except ConfigError:
        raise
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read it as a cluster description ({type(exc).__name__}: {exc})") from None


def _load_path(path: Path, *, allow_wanbench: bool) -> Topology:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read cluster file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        try:
            text = raw.decode("utf-16")  # Windows "Unicode" text files (PowerShell's `>` redirection)
        except UnicodeDecodeError:
            raise ConfigError(f"{path}: not a text file (expected UTF-8 text of a cluster description)") from None
    return parse_cluster_text(text, source=str(path), path=path, allow_wanbench=allow_wanbench)


_EXPECTED = (
    "expected `tiup cluster display` output (a table with ID/Role/Host/Ports/OS/Arch/Status), its "
    "`--format json` output, a tiup topology YAML (pd_servers, tidb_servers, ...) or a wanbench cluster YAML "
    "(with 'topology:' or 'display:')"
)


def parse_cluster_text(text: str, *, source: str, path: Path | None = None, allow_wanbench: bool = True) -> Topology:
    raw = text
    text = clean_pasted(text)
    if is_display_text(text):
        return parse_display(text, source=source)
    try:
        found = find_display_json(text)
    except ConfigError as exc:
        raise ConfigError(f"{source}: `--format json` output that is {exc}") from None
    if found is not None:
        return parse_display_json(found[0], source=source)
    data = _load_yaml_any_tabs(raw, source)
    if allow_wanbench and is_wanbench_cluster(data):
        return parse_wanbench_cluster(data, path=path or Path(source))
    if is_tiup_topology(data):
        return parse_tiup_topology(data, source=source)
    raise ConfigError(f"{source}: not a cluster description wanbench knows: {_EXPECTED}")


def _load_yaml_any_tabs(raw: str, source: str) -> Any:
    """Strict YAML of a pasted file. Indentation made of tabs has no width in YAML: a tab that
    replaced 2, 4 or 8 spaces is tried in that order, and the first reading that parses wins."""
    widths = (2, 4, 8) if re.search(r"(?m)^[ >]*\t", raw) else (8,)
    error: ConfigError | None = None
    for width in widths:
        try:
            return load_yaml(yaml_body(clean_pasted(raw, tabsize=width)), source=source)
        except ConfigError as exc:
            if "duplicate key" in str(exc):
                raise
            error = error or exc
    assert error is not None
    raise ConfigError(f"{error}; {_EXPECTED}") from None


# -- views of the model ------------------------------------------------------------------------------------------


def fault_components(topology: Topology) -> list[Component]:
    """Components a fault may target or be scoped towards (not monitoring, not unknown roles)."""
    return [c for c in topology.components if not c.labels & {LABEL_MONITORING, LABEL_UNKNOWN}]


def static_view(topology: Topology) -> tuple[Component, ...]:
    """The shape without run-time state (status, leader, dashboard): equal for display and YAML input."""
    return tuple(
        dataclasses.replace(c, status="", labels=c.labels - RUNTIME_LABELS) for c in topology.components
    )


def pd_leader(topology: Topology) -> Component | None:
    leaders = topology.select(f"pd:{LABEL_LEADER}")
    return leaders[0] if leaders else None


def with_pd_leader(topology: Topology, address: str) -> Topology:
    """A copy with the ``leader`` label on the PD whose client address is ``host:port``."""
    pds = topology.by_role("pd")
    if not any(c.address == address for c in pds):
        known = ", ".join(c.address for c in pds)
        raise ConfigError(f"PD leader {address} is not a PD of cluster {topology.name!r} (PDs: {known})")
    comps = []
    for c in topology.components:
        if c.role == "pd":
            labels = (c.labels | {LABEL_LEADER}) if c.address == address else (c.labels - {LABEL_LEADER})
            c = dataclasses.replace(c, labels=frozenset(labels))
        comps.append(c)
    return dataclasses.replace(topology, components=tuple(comps))


def parse_pd_urls(text: str) -> list[str]:
    """``--pd-url``: comma-separated ``http(s)://host:port`` URLs."""
    urls = [u.strip().rstrip("/") for u in str(text).split(",") if u.strip()]
    if not urls:
        raise ConfigError(f"{text!r}: give at least one PD URL such as http://10.0.0.1:2379")
    for u in urls:
        if not re.fullmatch(r"https?://[^/\s:]+(:\d+)?", u):
            raise ConfigError(f"{u!r} is not a PD client URL (example: http://10.0.0.1:2379)")
    return urls


def parse_load_host(text: str) -> str:
    """``--load-host``: an address or host name, nothing else."""
    host = str(text).strip()
    if not re.fullmatch(r"[A-Za-z0-9_.:-]+", host):
        raise ConfigError(f"{text!r} is not a host name or address")
    return host


def pd_client_urls(topology: Topology, override: str | Sequence[str] | None = None) -> list[str]:
    """PD client URLs to try, the last-known leader first; ``override`` (``--pd-url``) wins."""
    if override:
        return parse_pd_urls(override if isinstance(override, str) else ",".join(override))
    settings = cluster_settings(topology)
    if settings.pd_urls:
        return list(settings.pd_urls)
    pds = sorted(topology.by_role("pd"), key=lambda c: LABEL_LEADER not in c.labels)
    return [f"http://{c.host}:{c.port}" for c in pds]


# -- TiDB-aware workload settings ----------------------------------------------------------------------------------

#: retryable TiDB errors (8002 SELECT FOR UPDATE cannot retry, 8022 txn retry, 8028 schema changed,
#: 9007 write conflict) plus MySQL deadlock / lock-wait and the PD/TiKV/region timeouts that a
#: degraded network produces; sysbench counts ignored errors, so they stay visible in the results.
SYSBENCH_IGNORE_ERRORS: tuple[int, ...] = (1020, 1205, 1213, 8002, 8022, 8028, 9001, 9002, 9005, 9007)


@dataclass(frozen=True)
class WorkloadSettings:
    """How to load TiDB: endpoints (round robin), sysbench flags, warm-up statements."""

    endpoints: tuple[tuple[str, int], ...]
    ignore_errors: tuple[int, ...] = SYSBENCH_IGNORE_ERRORS
    ps_mode: str = "auto"
    database: str = "sbtest"
    user: str = "root"

    def sysbench_args(self) -> list[str]:
        """sysbench 1.0 spreads connections round robin over comma-separated hosts/ports."""
        return [
            "--mysql-host=" + ",".join(h for h, _ in self.endpoints),
            "--mysql-port=" + ",".join(str(p) for _, p in self.endpoints),
            "--mysql-user=" + self.user,
            "--mysql-db=" + self.database,
            "--mysql-ignore-errors=" + ",".join(str(e) for e in self.ignore_errors),
            "--db-ps-mode=" + self.ps_mode,
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoints": [f"{h}:{p}" for h, p in self.endpoints],
            "ignore_errors": list(self.ignore_errors),
            "ps_mode": self.ps_mode,
            "database": self.database,
            "user": self.user,
        }


def warmup_statements(tables: int) -> list[str]:
    """Seed 003's warm-up: read every table through its secondary index once."""
    if tables <= 0:
        raise ConfigError(f"tables must be positive, not {tables}")
    return [f"SELECT COUNT(pad) FROM sbtest{n} USE INDEX(k_{n})" for n in range(1, tables + 1)]


def sql_endpoints(topology: Topology, path: str = "proxy") -> list[tuple[str, int]]:
    """Where clients connect: TiProxy instances for ``path="proxy"`` (TiDB if there is none), TiDB for "direct".

    An explicit ``sql.endpoints`` list in the wanbench YAML wins.
    """
    settings = cluster_settings(topology)
    if not isinstance(settings.endpoints, str):
        return [_host_port(e) for e in settings.endpoints]
    if path not in ("proxy", "direct"):
        raise ConfigError(f"unknown SQL path {path!r} (known: proxy, direct)")
    role = "tidb" if path == "direct" or settings.endpoints == "tidb" else "tiproxy"
    comps = topology.by_role(role) or topology.by_role("tidb")
    if not comps:
        raise ConfigError(f"cluster {topology.name!r} has no tidb or tiproxy instance to send SQL to")
    return [(c.host, c.port) for c in comps]


def workload_settings(topology: Topology, path: str = "proxy") -> WorkloadSettings:
    settings = cluster_settings(topology)
    return WorkloadSettings(
        endpoints=tuple(sql_endpoints(topology, path)), database=settings.database, user=settings.sql_user
    )


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = str(text).rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"SQL endpoint {text!r} is not host:port")
    return host, int(port)
