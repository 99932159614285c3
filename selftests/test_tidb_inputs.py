"""Cluster files as people hand them over: pasted, decorated, in JSON, or wrong.

Every decorated variant is derived from the recorded clean file, and must give
exactly the model the clean file gives; every bad value must be one
``ConfigError`` naming the file and the line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from wanbench.errors import ConfigError
from wanbench.profiles.lab.layout import PROJECT_ROOT
from wanbench.profiles.tidb.model import cluster_settings
from wanbench.profiles.tidb.topology import load_cluster
from wanbench.profiles.tidb.views import static_view
from wanbench.topology import Topology

DATA = Path(__file__).parent / "data"
DISPLAY = DATA / "tiup_display_seed000.txt"
DISPLAY_JSON = DATA / "tiup_display_seed000.json"
TOPOLOGY = DATA / "tiup_topology_seed000.yaml"


def model(t: Topology) -> dict[str, Any]:
    """Everything the parsers produce except where the model came from."""
    settings = dict(t.settings)
    settings.pop("source")
    settings.pop("source_format")
    return {"profile": t.profile, "name": t.name, "version": t.version, "components": t.components,
            "settings": settings}


def _write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, newline="")  # keep CRLF as written
    return path


# -- decorations a paste picks up ---------------------------------------------------------------------------------

TIUP_PREAMBLE = (
    "tiup is checking updates for component cluster ...\n"
    "A new version of cluster is available:\n"
    "   The latest version:         v1.16.1\n"
    "   Local installed version:    v1.14.1\n"
    "   Update current component:   tiup update cluster\n"
    "   Update all components:      tiup update --all\n"
    "\n"
    "Starting component `cluster`: /root/.tiup/components/cluster/v1.14.1/tiup-cluster display tidb-demo\n"
)
CYAN, GREEN, BOLD, RESET = "\x1b[36m", "\x1b[32m", "\x1b[1m", "\x1b[0m"


def _colour_like_tiup(text: str) -> str:
    """tiup colours the meta values (cyan bold), each ID (cyan) and each status (green)."""
    out = []
    for line in text.split("\n"):
        m = re.match(r"^(Cluster \w+:|Deploy user:|SSH type:|Dashboard URLs?:|Grafana URL:)(\s+)(.*)$", line)
        if m:
            line = f"{m[1]}{m[2]}{CYAN}{BOLD}{m[3]}{RESET}"
        elif re.match(r"^\d+\.\d+\.\d+\.\d+:\d+ ", line):
            ident, rest = line.split(" ", 1)
            line = f"{CYAN}{ident}{RESET} " + re.sub(r"\b(Up(?:\|\w+)*)\b", f"{GREEN}\\1{RESET}", rest, count=1)
        out.append(line)
    return "\n".join(out)


def _colour_padded_by_bytes(text: str) -> str:
    """Coloured IDs and statuses, with the table padded by byte length (escape codes counted)."""
    lines = text.split("\n")
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ID "))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("Total nodes"))
    table = [re.split(r"  +", ln.strip()) for ln in lines[start:end]]
    for row in table[2:]:
        row[0] = f"{CYAN}{row[0]}{RESET}"
        row[5] = f"{GREEN}{row[5]}{RESET}"
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    padded = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return "\n".join(lines[:start] + padded + lines[end:])


def _tabs_between_columns(text: str) -> str:
    return re.sub(r"(?<=\S) {2,}(?=\S)", "\t", text)


DISPLAY_VARIANTS: dict[str, Callable[[str], str | bytes]] = {
    "tiup-preamble-and-prompt": lambda t: TIUP_PREAMBLE + t + "[root@l-k8s-labroom-1 ~]# \n",
    "ansi-colours": _colour_like_tiup,
    "ansi-colours-padded-by-bytes": _colour_padded_by_bytes,
    "crlf-and-bom": lambda t: ("\ufeff" + t).replace("\n", "\r\n").encode(),
    "email-quote": lambda t: "".join("> " + ln + "\n" if ln else ">\n" for ln in t.split("\n")),
    "nested-quote-no-space": lambda t: "".join(">>" + ln + "\n" for ln in t.split("\n")),
    "nested-quote": lambda t: "".join("> > " + ln + "\n" for ln in t.split("\n")),
    "utf16-powershell": lambda t: t.replace("\n", "\r\n").encode("utf-16"),
    "markdown-indent-4": lambda t: "Here is our cluster:\n\n" + "".join("    " + ln + "\n" for ln in t.split("\n")),
    "markdown-fence": lambda t: "Our cluster:\n\n```console\n" + t + "```\n\nThanks!\n",
    "tabs": _tabs_between_columns,
    "nbsp": lambda t: t.replace(":  ", ":\u00a0 ").replace("  ", "\u00a0 "),
    "everything": lambda t: ("\ufeff" + "".join(
        "> " + ln + "\n" for ln in (TIUP_PREAMBLE + _colour_padded_by_bytes(_colour_like_tiup(t))).split("\n")
    )).replace("\n", "\r\n").encode(),
}


@pytest.mark.parametrize("variant", sorted(DISPLAY_VARIANTS))
def test_decorated_display_gives_the_clean_model(tmp_path: Path, variant: str) -> None:
    clean = load_cluster(DISPLAY)
    decorated = DISPLAY_VARIANTS[variant](DISPLAY.read_text())
    got = load_cluster(_write(tmp_path, "display.txt", decorated))
    assert model(got) == model(clean)
    assert cluster_settings(got).source_format == "tiup-display"


def test_colour_padded_by_bytes_really_misaligns_the_columns() -> None:
    """The byte-padded variant is only a test if, once the codes are gone, the columns no longer line up."""
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", _colour_padded_by_bytes(DISPLAY.read_text()))
    header = next(ln for ln in stripped.split("\n") if ln.startswith("ID "))
    row = next(ln for ln in stripped.split("\n") if ln.startswith("10.160.152.23:2379"))
    assert row.index(" pd ") + 1 != header.index("Role")


YAML_VARIANTS: dict[str, Callable[[str], str | bytes]] = {
    "prompt-and-command": lambda t: "[tidb@ctl ~]$ cat topology.yaml\n" + t + "[tidb@ctl ~]$ \n",
    "tiup-edit-config-preamble": lambda t: TIUP_PREAMBLE + t,
    "email-quote": lambda t: "".join("> " + ln + "\n" if ln else ">\n" for ln in t.split("\n")),
    "indent-4": lambda t: "".join("    " + ln + "\n" for ln in t.split("\n")),
    "tab-indented": lambda t: re.sub(r"(?m)^((?:  )+)", lambda m: "\t" * (len(m[1]) // 2), t),
    "crlf-bom-nbsp": lambda t: ("\ufeff" + t.replace(": ", ":\u00a0")).replace("\n", "\r\n").encode(),
    "markdown-fence": lambda t: "```yaml\n" + t + "```\n",
    "ansi": lambda t: re.sub(r"(?m)^(\w+):", f"{BOLD}\\1{RESET}:", t),
}


@pytest.mark.parametrize("variant", sorted(YAML_VARIANTS))
def test_decorated_topology_yaml_gives_the_clean_model(tmp_path: Path, variant: str) -> None:
    clean = load_cluster(TOPOLOGY)
    got = load_cluster(_write(tmp_path, "topology.yaml", YAML_VARIANTS[variant](TOPOLOGY.read_text())))
    assert model(got) == model(clean)


# -- tiup cluster display --format json -----------------------------------------------------------------------------


def test_display_json_gives_the_display_model() -> None:
    text_model = load_cluster(DISPLAY)
    json_model = load_cluster(DISPLAY_JSON)
    assert cluster_settings(json_model).source_format == "tiup-display-json"
    assert model(json_model) == model(text_model)
    assert static_view(json_model) == load_cluster(TOPOLOGY).components


@pytest.mark.parametrize("variant", ["preamble", "quoted", "crlf-bom"])
def test_decorated_display_json(tmp_path: Path, variant: str) -> None:
    text = DISPLAY_JSON.read_text()
    decorated: str | bytes = {
        "preamble": TIUP_PREAMBLE + "$ tiup cluster display tidb-demo --format json\n" + text + "$ \n",
        "quoted": "".join("> " + ln + "\n" for ln in text.split("\n")),
        "crlf-bom": ("\ufeff" + text).replace("\n", "\r\n").encode(),
    }[variant]
    assert model(load_cluster(_write(tmp_path, "d.json", decorated))) == model(load_cluster(DISPLAY_JSON))


def test_json_manage_host_and_patched_role(tmp_path: Path) -> None:
    data = json.loads(DISPLAY_JSON.read_text())
    for inst in data["instances"]:
        if inst["host"] == "10.160.152.24":
            inst["manage_host"] = "192.168.9.24"
        if inst["role"] == "tikv":
            inst["role"] = "tikv (patched)"
    topo = load_cluster(_write(tmp_path, "d.json", json.dumps(data)))
    s = cluster_settings(topo)
    assert s.manage_hosts == {"10.160.152.24": "192.168.9.24"}
    assert s.ssh_host_of("10.160.152.24") == "192.168.9.24"
    assert s.ssh_host_of("10.160.152.21") == "10.160.152.21"
    assert {c.host for c in topo.by_role("tikv")} == {"10.160.152.24", "172.24.40.20"}  # faults stay on host


def test_topology_manage_host(tmp_path: Path) -> None:
    text = TOPOLOGY.read_text().replace("  - host: 10.160.152.24\n", "  - host: 10.160.152.24\n"
                                        "    manage_host: mgmt-24.example\n")
    topo = load_cluster(_write(tmp_path, "t.yaml", text))
    assert cluster_settings(topo).manage_hosts == {"10.160.152.24": "mgmt-24.example"}


def test_broken_json_names_the_line(tmp_path: Path) -> None:
    text = DISPLAY_JSON.read_text().replace('"role": "pd",', '"role": "pd"', 1)
    with pytest.raises(ConfigError, match=r"d.json: `--format json` output that is line \d+: not valid JSON"):
        load_cluster(_write(tmp_path, "d.json", text))


# -- unrecognisable input and bad values ----------------------------------------------------------------------------


def test_unrecognisable_input_is_one_clear_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "notes.txt", "We have 3 TiKV and a PD somewhere in DC1.\n")
    with pytest.raises(ConfigError) as info:
        load_cluster(path)
    msg = str(info.value)
    assert msg.startswith(str(path))
    for expected in ("tiup cluster display", "--format json", "tiup topology YAML", "wanbench cluster YAML"):
        assert expected in msg


def _wb(tmp_path: Path, body: str) -> Path:
    (tmp_path / "display.txt").write_text(DISPLAY.read_text())
    return _write(tmp_path, "cluster.yaml", "wanbench_cluster: 1\ndisplay: display.txt\n" + body)


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("ssh:\n  user: tidb\n  port: abc\n", 5, r"ssh.port: 'abc' is not a whole number from 1 to 65535"),
        ("ssh:\n  port: 70000\n", 4, r"ssh.port: 70000 is not a whole number"),
        ("ssh:\n  port: true\n", 4, r"ssh.port: True is not a whole number"),
        ("ssh:\n  connect_timeout: soon\n", 4, r"ssh.connect_timeout: 'soon' is not a number"),
        ("ssh:\n  connect_timeout: -1\n", 4, r"ssh.connect_timeout: -1 is not a number above 0"),
        ("ssh:\n  connect_timeout: .nan\n", 4, r"ssh.connect_timeout"),
        ("ssh:\n  key: [a, b]\n", 4, r"ssh.key must be a single value"),
        ("sql:\n  endpoints:\n    - 10.0.0.1:4000\n    - 10.0.0.2:port\n", 6, r"sql.endpoints\[1\] '10.0.0.2:port'"),
        ("load_host: 'a b'\n", 3, r"load_host: 'a b' is not a host name"),
        ("pd_url: ftp://x\n", 3, r"is not a PD client URL"),
        ("ssh:\n  port: 22\nssh:\n  port: 2222\n", 5, r"duplicate key 'ssh' \(first at line 3\)"),
        ("colour: blue\n", 3, r"unknown keys \['colour'\]"),
        ("sql:\n  password: hunter2\n", 4, r"sql.password is not accepted"),
    ],
)
def test_bad_wanbench_values_name_file_and_line(tmp_path: Path, body: str, line: int, message: str) -> None:
    path = _wb(tmp_path, body)
    with pytest.raises(ConfigError, match=message) as info:
        load_cluster(path)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert "hunter2" not in str(info.value)


TOPO_HEAD = "global:\n  user: tidb\n"


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("  ssh_port: abc\npd_servers:\n  - host: 10.0.0.1\n", 3, r"global.ssh_port: 'abc'"),
        ("pd_servers:\n  - host: 10.0.0.1\n    client_port: 99999\n", 5, r"pd_servers\[0\].client_port: 99999"),
        ("pd_servers:\n  - host: 10.0.0.1\n    ssh_port: 2x\n", 5, r"pd_servers\[0\].ssh_port: '2x'"),
        ("monitored:\n  node_exporter_port: nine\npd_servers:\n  - host: 10.0.0.1\n", 4,
         r"monitored.node_exporter_port: 'nine'"),
        ("tikv_servers:\n  - host: 10.0.0.1\npd_servers:\n  - host: 10.0.0.2\ntikv_servers:\n  - host: 10.0.0.3\n",
         7, r"duplicate key 'tikv_servers' \(first at line 3\)"),
        ("pd_servers:\n  - host: 10.0.0.1\n    host: 10.0.0.2\n", 5, r"duplicate key 'host' \(first at line 4\)"),
        ("pd_servers:\n  - host: 10.0.0.1\n  - port: 1\n", 5, r"pd_servers\[1\] needs a 'host'"),
        ("pd_servers: 10.0.0.1\n", 3, r"pd_servers must be a list"),
        ("pd_servers:\n  - host: 10.0.0.1\n  - host: 10.0.0.1\n", 0, r"instances listed twice"),
        ("pd_servers:\n  - host: a: b\n", 4, r"not valid YAML: mapping values are not allowed"),
    ],
)
def test_bad_topology_values_name_file_and_line(tmp_path: Path, body: str, line: int, message: str) -> None:
    path = _write(tmp_path, "topology.yaml", TOPO_HEAD + body)
    with pytest.raises(ConfigError, match=message) as info:
        load_cluster(path)
    prefix = f"{path}:{line}: " if line else f"{path}: "
    assert str(info.value).startswith(prefix), str(info.value)


def test_bad_display_row_names_the_line(tmp_path: Path) -> None:
    text = DISPLAY.read_text().replace("20160/20180", "20160/2o180", 1)
    with pytest.raises(ConfigError, match=r"display.txt:27: ports '20160/2o180' of 10.160.152.24:20160"):
        load_cluster(_write(tmp_path, "display.txt", text))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("bad-port.yaml", "wanbench_cluster: 1\ndisplay: {display}\nssh:\n  port: abc\n", r"bad-port.yaml:4: ssh.port"),
        ("dup.yaml", "pd_servers:\n  - host: 10.0.0.1\npd_servers:\n  - host: 10.0.0.2\n",
         r"dup.yaml:3: duplicate key"),
        ("notes.txt", "just notes\n", r"notes.txt: not a cluster description"),
    ],
)
def test_pytest_ends_with_one_usage_error(tmp_path: Path, name: str, content: str, message: str) -> None:
    path = _write(tmp_path, name, content.format(display=DISPLAY))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", f"--cluster={path}", "-k", "rtt and tikv_write"],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out  # pytest's EXIT_USAGEERROR
    assert "INTERNALERROR" not in out, out
    assert "Traceback" not in out, out
    errors = [ln for ln in out.splitlines() if ln.startswith("ERROR:")]
    assert len(errors) == 1, out
    assert re.search(message, errors[0]), errors[0]
