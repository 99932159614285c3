"""The TiDB profile's cluster, read from files a DBA already has: the one
entry point (``load_cluster``) and the YAML readers.

Four inputs give the same ``Topology(profile="tidb")`` (the two forms of
``tiup cluster display`` are read in ``display.py``, the model is in
``model.py``, views of it in ``views.py``):

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wanbench.errors import ConfigError
from wanbench.profiles.tidb.display import find_display_json, is_display_text, parse_display, parse_display_json
from wanbench.profiles.tidb.inputs import clean_pasted, get_float, get_int, get_str, where, yaml_body
from wanbench.profiles.tidb.model import (
    PROFILE,
    ClusterSettings,
    cluster_settings,
    component_name,
    labels_for,
    sorted_components,
)
from wanbench.profiles.tidb.views import parse_load_host, parse_pd_urls
from wanbench.strictyaml import load_yaml
from wanbench.topology import Component, Topology, parse_load_hosts

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
                          labels=labels_for(role))
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
    return Topology(profile=PROFILE, name=name, components=sorted_components(components), settings=settings.to_json())


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


