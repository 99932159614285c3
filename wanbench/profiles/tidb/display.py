"""Reading ``tiup cluster display <name>``: its text (status flags ``L`` = PD
leader, ``UI`` = dashboard), also as people paste it, and its ``--format
json`` (which also carries ``manage_host``, the address tiup uses for SSH).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from wanbench.errors import ConfigError
from wanbench.profiles.tidb.inputs import clean_pasted
from wanbench.profiles.tidb.model import PROFILE, ClusterSettings, component_name, labels_for, sorted_components
from wanbench.topology import Component, Topology

_DISPLAY_HEADER = re.compile(r"^( *)ID\s+Role\s+Host\s+Ports\s+OS/Arch\s+Status\b.*$", re.M)
_DISPLAY_INFO = re.compile(r"^ *(Cluster type|Cluster name|Cluster version|Deploy user|SSH type|Dashboard URL|"
                           r"Grafana URL):\s*(.*?)\s*$", re.M)
_TOTAL = re.compile(r"^ *Total nodes:\s*(\d+)\s*$", re.M)
#: the display table's column titles, in tiup's order (Since only with --uptime)
_COLUMNS = ("ID", "Role", "Host", "Ports", "OS/Arch", "Status", "Since", "Data Dir", "Deploy Dir")
_PATCHED = " (patched)"  # tiup appends it to the role of an instance running a patched binary


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
        components=sorted_components(components),
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
        labels=labels_for(role, flags),
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
